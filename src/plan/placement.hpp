// The placement planner: which device of a system runs each node of a training graph, decided by a
// strategy and judged by the schedule simulation of plan/schedule.hpp -- modelled, like every figure
// it prints.
//
//   const SystemModel sys = load_system_model("cpu+v100+s10");
//   const Placed p = place(tg, sys, parse_strategy("energy"));     // or heft, cnnlab, powercap:200, exact, ...
//   p.plan        // node entries: `joule train --plan` runs it; lower(tg, p.plan) + simulate() reproduce p.outcome
//
// A PlacementProblem holds what every strategy asks millions of times: each node's context-free cost
// on each device (predict::cost at the devices' settings; f32), the FPGA kernel each would run, and the
// graph's tensors. evaluate() simulates one placement exactly as simulate(lower(plan)) does -- graph
// order, one node at a time per device, a Transfer per (tensor, device) on the links (through the host
// where no direct link exists) while devices compute, FPGA configuration switches between consecutive
// FPGA nodes, idle power of every device over the iteration -- without building the lowered graph
// (test: they agree). Memory: a device's persistent tensors plus the peak of its live transient ones
// (the arena simulate() checks is at least that; the final plan is checked by simulate() itself).
//
// Precision (the joint strategy, with_precision): a node computes in f32 or in its device's low
// precision; evaluate() then also simulates what plan/passes insert for it -- a tensor stored in its
// producer's dtype (weight gradients of low GEMMs in f32), one Cast per (tensor, dtype) on the device of
// the first consumer wanting it, its input moved there first -- and f16's dynamic loss scaling, once per
// step on each device computing in f16 (as simulate() does).
//
// Decision units. Nodes that write one tensor in place (an optimizer update and the parameter it owns)
// form an atom that must share a device. Placing a node on a device that has no kernel for it (an
// FPGA: the loss, softmax, embeddings, ...) puts its whole atom on the host instead. cnnlab and exact
// decide per layer (a forward node with its backward and update nodes: CNNLab's granularity); energy
// and powercap per layer, then per atom; heft per atom, as classic HEFT schedules tasks.
//
// Settings searched (search_settings): each FPGA with per-node kernels or the graph's best one-bitstream
// design; under powercap each GPU's power limits. A strategy works on every combination (local search:
// on the three most promising, every one for small nets) and keeps the best.
//
// Strategies (each returns the better, under its own objective, of its plan and every single-device
// baseline -- a device at its best setting; `Placed::chosen` says which):
//   single:<device>  every node the device runs on it, the rest on the host (objective: time)
//   cnnlab           per layer the device with the least energy-delay product of the layer's own nodes
//                    (CNNLab's per-layer trade-off, transfers not weighed); judged as energy is
//   heft             HEFT (Topcuoglu et al. 2002): upward rank on mean costs, insertion-based earliest
//                    finish time; minimises time only
//   energy[:slack]   least energy with time <= (1 + slack) x the fastest baseline (default slack 0: no
//                    throughput loss); local search (improve()) from every baseline, the per-layer
//                    least-energy / least-time / least energy-delay placements and HEFT's
//   powercap:<W>     least time with average power <= W, power counted over the system's accelerators
//                    (and the host when it runs nodes) and links; the same search
//   exact[:slack|:time|:powercap:<W>]  branch and bound over layer placements (depth-first, layers in
//                    graph order, incumbent: the best seed; bounds: each device's busy time, the unplaced
//                    layers' least busy time and dynamic energy); default objective energy's. Refused
//                    beyond 10^7 placements per setting or 2 x 10^6 simulated.
//   joint[:slack]    device and precision together: energy's objective and search over options (each
//                    device in f32 or its low precision: casts, their transfers and f16's loss scaling
//                    simulated), the time bound from the fastest baseline in any precision (a device
//                    all-low, or under the greedy or optimal amp policy); seeded also with energy's
//                    placement under the optimal policy (placement-then-precision), so never worse than it
//                    where that meets the bound.
#pragma once

#include <atomic>
#include <cmath>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "plan/amp.hpp"
#include "plan/schedule.hpp"

namespace joule {

class PlacementProblem {
public:
    // `settings`: per device of sys (default: sys.settings). `precision`: a node may also compute in its
    // device's low precision (predict::low_precision: bf16, else f16), so each device is two options.
    PlacementProblem(const TrainGraph& tg, const SystemModel& sys, std::vector<predict::Setting> settings = {}, bool precision = false);
    const TrainGraph& train() const { return *tg_; }
    const SystemModel& system() const { return *sys_; }
    const std::vector<predict::Setting>& settings() const { return settings_; }
    size_t nodes() const { return costs_.size(); }
    size_t devices() const { return sys_->devices.size(); }
    // What a placement gives each node: an option, a device in a precision. Option o is device o % D
    // computing in f32 (the node's own dtype) for o < D, in the device's low precision for o >= D.
    size_t options() const { return costs_.empty() ? 0 : costs_.front().size(); }
    int device_of(int option) const { return option < int(devices()) ? option : option - int(devices()); }
    DType low_precision(int device) const { return low_[size_t(device)]; }  // F32: it has none
    // what node computes in at option (losses and updates: f32 always)
    DType dtype(size_t node, int option) const { return option < int(devices()) || f32_only_[node] ? DType::F32 : low_[size_t(option) - devices()]; }
    // nullptr: the device has no kernel for the node (in that precision).
    const predict::Cost* cost(size_t node, int option) const { return costs_[node][size_t(option)] ? &*costs_[node][size_t(option)] : nullptr; }

    // Decision units: atoms (in-place writers of one tensor together) and layers (atoms of one source layer).
    const std::vector<std::vector<int>>& atoms() const { return atoms_; }
    const std::vector<std::vector<int>>& layers() const { return layers_; }  // each a list of atoms

    // Moving `bytes` from the device of option a to that of option b over the system's route (0: one device).
    double transfer_seconds(double bytes, int a, int b) const;

    // The option each node of `atom` gets when the atom is put on `option`: option; else, where a node
    // has no kernel in that precision, its device in f32; else the host in that precision; else the host
    // in f32. An atom's nodes share one option (in-place writers compute in their tensor's dtype).
    int device_for(int atom, int option) const;

    struct Outcome {
        double seconds = 0;
        double dynamic_joules = 0, idle_joules = 0, transfer_joules = 0, switch_seconds = 0, cast_seconds = 0, loss_scaling_seconds = 0;
        int switches = 0, transfers = 0, casts = 0, batch_copies = 0;
        std::vector<double> busy_seconds, dynamic_by_device, bytes_by_device;
        bool fits = true;
        std::string why_not;
        double joules() const { return dynamic_joules + idle_joules + transfer_joules; }
        double watts() const { return seconds > 0 ? joules() / seconds : 0; }
        double capped_watts = 0;  // the power a cap counts: accelerators, the host when it runs nodes, links
        bool cut = false;  // stopped past a Cutoff: no whole outcome, only that it is past it
    };
    using Placement = std::vector<int>;  // an option per node of train().graph
    // Where the caller loses interest: the simulation stops (Outcome::cut) once the iteration will surely
    // take longer than `seconds` or need more than `joules`. Lower bounds at each node: every device still
    // runs its remaining nodes one after another, and every joule to come is those nodes' dynamic energy
    // or idle power over at least that time. A search rejects most moves this way early.
    struct Cutoff {
        double seconds = INFINITY, joules = INFINITY;
    };
    Outcome evaluate(const Placement& p, Cutoff cut = Cutoff{INFINITY, INFINITY}) const;

    // The plan that runs placement p: node entries for every node off the host or not in f32 (weight
    // gradients of low-precision GEMMs stored in f32, as amp plans do), and the devices' settings.
    Plan plan_of(const Placement& p, const std::string& name) const;

private:
    // A Cast node of tensor t from one dtype to another on a device: its cost and FPGA kernel, costed
    // once on a graph of its own (the lowered graph's cast node has the same tensors).
    struct CastCost {
        predict::Cost cost;
        const predict::TunedKernel* kernel = nullptr;
    };
    const CastCost& cast(size_t tensor, DType from, DType to, int device) const;

    const TrainGraph* tg_;
    const SystemModel* sys_;
    std::vector<predict::Setting> settings_;
    std::vector<DType> low_;         // per device
    std::vector<char> f32_only_;     // per node: f32_only_op
    std::vector<std::vector<std::optional<predict::Cost>>> costs_;  // per node and option
    // what evaluate() reads per node, packed in node order (it is bound by the latency of scattered
    // reads): its inputs and outputs (ranges of io_), the inputs it reads in f32, and per option its
    // seconds, dynamic joules and FPGA kernel
    struct SimNode {
        int inputs, outputs, end;
        OperandMask f32_inputs;
    };
    struct SimCost {
        double seconds = 0, joules = 0;
        const predict::TunedKernel* kernel = nullptr;
    };
    std::vector<SimNode> sim_nodes_;
    std::vector<int> io_;
    std::vector<SimCost> sim_costs_;  // per node and option
    // per (tensor, from, to, device) of float dtypes, filled on first use by whichever search thread
    // needs it: the lookup takes no lock (simulations on several threads look casts up all the time)
    mutable std::unique_ptr<std::atomic<const CastCost*>[]> cast_table_;
    mutable std::deque<CastCost> cast_store_;  // what cast_table_ points to
    mutable Graph cast_graph_;
    mutable std::mutex cast_mutex_;  // while a cast is costed and stored
    std::vector<int> atom_of_;
    std::vector<std::vector<int>> atoms_, layers_;
    struct TensorInfo {
        double elements = 0;
        DType dtype = DType::F32;  // as the graph stores it (placements may store it in another precision)
        int producer = -1, inplace_writer = -1, first_reader = -1, last_use = -1;
        bool persistent = false;
        bool f32_output = false;  // its producer writes it in f32 whatever it computes in (f32_outputs, weight gradients)
    };
    std::vector<TensorInfo> tensors_;
    std::vector<int> batch_;  // the tensors each step's batch fills (inputs, labels): they come from the host
    std::vector<int> settled_;  // those evaluate() places before the first node: no producer, persistent, or read before produced
    std::vector<std::vector<std::pair<int, const hw::LinkSpec*>>> routes_;  // per (from x D + to): (link slot, link)
};

struct Strategy {
    enum class Kind { Single, Cnnlab, Heft, Energy, Powercap, Exact, Joint } kind = Kind::Energy;
    enum class Objective { Energy, Time, Powercap } objective = Objective::Energy;  // exact's
    std::string device;  // single:<device>
    double slack = 0;    // energy, joint: time <= (1 + slack) x the fastest baseline
    double watts = 0;    // powercap
    std::string name() const;
};
// "single:<device>", "cnnlab", "heft", "energy", "energy:<slack>", "powercap:<W>", "exact", "exact:time",
// "exact:powercap:<W>", "joint", "joint:<slack>"; Error naming the text and the forms otherwise.
Strategy parse_strategy(const std::string& text);

struct Placed {
    std::string strategy;                    // its name
    std::string chosen;                      // the strategy's own plan, or the baseline that beat it
    Plan plan;                               // node entries and device settings
    PlacementProblem::Placement placement;
    std::vector<predict::Setting> settings;  // per device
    PlacementProblem::Outcome outcome;
    double bound_seconds = 0;  // energy, joint: the time it had to meet
    double watts = 0;          // powercap: the cap
    bool meets = true;         // the constraint held (energy's time bound, powercap's watts)
    long evaluations = 0;      // placements simulated
};

// Raises Error for an exact search beyond its budget or a single:<device> the system lacks.
Placed place(const TrainGraph& tg, const SystemModel& sys, const Strategy& s);

// The device settings a strategy searches, all combinations of: each FPGA per-node kernels (switches
// charged) or the one-bitstream design best for the graph (predict::best_fpga_design); under
// powercap:<W>, each GPU's power limit over its range in quarters, at W when W is inside it, and at the
// highest limit under which the GPU alone (the other accelerators idle) holds W. The
// other devices at sys.settings; the first combination is sys.settings itself.
std::vector<std::vector<predict::Setting>> search_settings(const TrainGraph& tg, const SystemModel& sys, const Strategy& s);

// Placement, then precision (`joule plan --strategy S --amp P`): policy P's assignment over the nodes
// where `placed` put them -- each node low in its device's low precision where the policy says so,
// judged by the policy's cost model of the device running most nodes (it weighs casts, not transfers
// nor where a cast runs: the policies are single-device) -- simulated like any placement.
Placed with_precision(const TrainGraph& tg, const SystemModel& sys, const Placed& placed, AmpPolicy policy);

}  // namespace joule
