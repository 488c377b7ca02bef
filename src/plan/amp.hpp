// Mixed-precision policies (`joule amp`): each fills the dtype half of a Plan for one device whose low
// precision is `low` (bf16 on this CPU, f16 on a V100), deciding per TrainGraph node f32 or low.
//
//   AmpContext c{.low = DType::BF16, .runs = runs};          // runs(g, n, low): may n compute in low
//   std::vector<bool> x = greedy_assignment(tg.graph, c);    // TF-AMP's lists and passes
//   Plan p = amp_plan(tg, x, c, "greedy");                   // node entries, f32 weight gradients
//
// Policies:
//   off       every node f32;
//   greedy    a faithful re-implementation of TensorFlow's auto-mixed-precision graph rewrite
//             (grappler/optimizers/auto_mixed_precision.cc): the allow / infer / deny / clear lists
//             mapped to joule's op kinds, forward and backward, and its passes in order -- paint allow;
//             propagate deny forward through clear/infer nodes that lead to deny/infer; paint clear/infer
//             between allow nodes; (bf16 mode) paint infer nodes whose inputs come from allow; propagate
//             allow through clear -- never asking what a cast costs;
//   autocast  PyTorch's: conv / linear / matmul in low, the loss in f32, every other op in the dtype its
//             inputs arrive in (f32 if any is f32: type promotion), backward nodes as their forward;
//   campo     cast-cost-aware rewriting (Campo, USENIX ATC'22), as joule implements it: from TF-AMP's
//             assignment, flip single nodes (f32 <-> low) while the predicted step time -- casts
//             included -- falls, and keep the better of that and all-f32: a local optimum;
//   optimal   the assignment of least predicted step time under a cost model (each node's time in f32
//             and in low, each cast's time, f16's loss scaling), exact: binary precision with cast costs
//             shared by all the consumers of a tensor is a minimum s-t cut (a shared cast is a
//             hyperedge, an auxiliary node per tensor and direction); the loss scaling paid once by any
//             mixed assignment is weighed by comparing the cut's optimum with all-f32.
// Every policy keeps f32 master weights and optimizer state, the f32 loss, and never gives a node a
// dtype `runs` refuses. Casts follow plan/passes' rules: a tensor is stored in its producer's compute
// dtype (persistent tensors and f32-only outputs in f32; weight gradients of low GEMMs in f32, written
// directly), and each consumer wanting another dtype shares one cast per (tensor, dtype).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "plan/plan.hpp"
#include "predict/device_model.hpp"

namespace joule {

enum class AmpPolicy : uint8_t { Off, Greedy, Autocast, Campo, Optimal };
AmpPolicy parse_amp_policy(const std::string& s);  // off | greedy | autocast | campo | optimal
const char* amp_policy_name(AmpPolicy p);

struct AmpContext {
    DType low = DType::BF16;
    RunsInDtype runs;  // may node n compute in dtype t (the device's answer)
};

// --- TF-AMP (greedy) ---------------------------------------------------------------------------------
enum class AmpColour : uint8_t { Allow, Infer, Deny, Clear };
const char* amp_colour_name(AmpColour c);
// The list a joule op kind is on, by the TF ops it stands for (Conv2DBackpropFilter -> allow,
// FusedBatchNormV3 -> infer, Mean -> deny, MaxPool -> clear, ...). Ops TF lists nowhere are deny.
AmpColour tf_amp_list(OpKind k);

// The painting state and its passes, in TF's order (each pass exposed for tests).
struct AmpPainting {
    std::vector<AmpColour> list;  // per node: its list (fixed)
    std::vector<bool> allow, deny;  // the sets the passes grow
};
AmpPainting tf_amp_lists(const Graph& g, const AmpContext& c);   // lists, and pass 1: paint allow-list nodes
void tf_amp_propagate_deny(const Graph& g, AmpPainting& p);       // pass 2
void tf_amp_allow_between_allow(const Graph& g, AmpPainting& p);  // pass 3
void tf_amp_infer_after_allow(const Graph& g, AmpPainting& p);    // pass 4 (TF runs it in bf16 mode only)
void tf_amp_allow_through_clear(const Graph& g, AmpPainting& p);  // pass 5
std::vector<bool> greedy_assignment(const Graph& g, const AmpContext& c);

std::vector<bool> autocast_assignment(const Graph& g, const AmpContext& c);

// --- optimal -------------------------------------------------------------------------------------------
// Costs of the decision: a node's time in f32 and in low, and a cast of `elements` values.
struct AmpCosts {
    std::function<double(NodeId, DType)> node;
    std::function<double(double elements, DType from, DType to)> cast;
    double mixed = 0;  // paid once per step when any node is low: f16's loss scaling (amp_mixed_cost)
};
// What mixed precision in `low` costs a step of `tg` on `d` beyond its nodes and casts: dynamic loss
// scaling for f16 (predict::loss_scaling_cost over every weight gradient), nothing for bf16.
double amp_mixed_cost(const TrainGraph& tg, DType low, const predict::DeviceModel& d);
// The predicted cost of an assignment: its nodes plus the casts plan/passes would insert.
double amp_cost(const Graph& g, const std::vector<bool>& low, const AmpContext& c, const AmpCosts& k);
std::vector<bool> campo_assignment(const Graph& g, const AmpContext& c, const AmpCosts& k);
std::vector<bool> optimal_assignment(const Graph& g, const AmpContext& c, const AmpCosts& k);
// The assignment of a policy (costs are used by campo and optimal only).
std::vector<bool> amp_assignment(AmpPolicy p, const Graph& g, const AmpContext& c, const AmpCosts& k);

// Nodes a policy may not put in low (f32-only ops, what `runs` refuses): the same for every policy.
std::vector<bool> amp_fixed_f32(const Graph& g, const AmpContext& c);

// A policy's plan for one backend that really runs (joule train --amp): low precision bf16 where the
// backend runs it; campo and optimal cost nodes and casts with `costs` (a model of that device; they
// need one), the others need none.
Plan amp_backend_plan(const TrainGraph& tg, AmpPolicy p, const Backend& backend, const predict::DeviceModel* costs);

// The Plan of an assignment (node entries; f32 storage for the weight gradients of low GEMMs).
Plan amp_plan(const TrainGraph& tg, const std::vector<bool>& low, const AmpContext& c, const std::string& name,
              const std::string& device = "cpu");

}  // namespace joule
