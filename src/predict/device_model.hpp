// The one cost interface: what a node would cost on a device, in a dtype, under a setting -- for any
// device of data/hw, owned or not. Context-free: the answer depends on the node's shapes only (a cold
// buffer, its outputs written back), never on what ran before, so planners may ask in any order, for
// any node, millions of times (about a microsecond a question: build/bench_cost).
//
//   predict::DeviceModel v100 = predict::load_device_model("v100");       // spec + its efficiency curves
//   predict::Cost c = predict::cost(g, n, v100, DType::F16, {.power_limit_w = 200});
//   c.seconds, c.joules (dynamic, above idle), c.bytes, c.clock_mhz, c.throttled
//   double idle = v100.idle_w();   // the planner adds idle_w x iteration time itself
//
// Time. roofline at clock f: compute = FLOPs / (peak x f / peak_clock), memory = cold-buffer bytes /
// bandwidth (memory clocks stay: memory-bound time barely moves with the core clock). With the spec's
// efficiency curves (predict/efficiency.hpp: the same form the CPU calibration fits; GPU files set from
// published figures) time = fixed + compute_scale x shape penalty x compute + memory_scale x memory,
// never below the roofline; without them time = the roofline.
//
// Power. P = idle + core x s(f) x activity + memory_energy x bytes / time, where
//   activity = max(compute, memory) / time   (the share of the node's time the device is busy),
//   s(f) = (f / peak_clock) x (V(f) / V(peak_clock))^2   (dynamic power ~ f V^2; V from the spec's
//          published vf_curve, else constant: no voltage drop is assumed where none is published),
//   core = (tdp - idle) - memory_energy x bandwidth    (a node busy at the peak clock, streaming at
//          full bandwidth, draws the TDP).
// Settings hold for a device over the whole iteration: a clock (within the spec's range) or a power
// limit (within its range; default the spec's). Under a limit the board throttles: a node whose power
// at the set clock exceeds the limit runs at the highest clock step that keeps it under (P rises with
// f, so the answer is a bisection), never below the minimum clock. A lower limit therefore never gives
// less time or more power.
//
// FPGAs (kind fpga) answer through their kernel model (predict/fpga_model.hpp): a node costs what the
// tuner's best configuration for its shape takes at the set clock, and under a power limit the fastest
// configuration whose board power stays under it (a cooler kernel, not a lower clock: throttled then
// says the limit cost time). A node without an FPGA kernel (softmax, losses, embeddings, ...) is an
// Error; ask fpga_runs() first. Tuned kernels are cached per shape in the DeviceModel.
//
// DESIGN.md says why this is not a Backend method: planners cost devices this machine does not have.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "graph/graph.hpp"
#include "hw/catalogue.hpp"
#include "predict/efficiency.hpp"
#include "predict/fpga_model.hpp"
#include "predict/memory_model.hpp"

namespace joule::predict {

// A device setting for the whole iteration; 0 = the device's default. Not both.
struct Setting {
    double power_limit_w = 0;
    double clock_mhz = 0;
    FpgaDesign fpga_design;  // FPGAs: the bitstream's kernels (empty: each node its own tuned kernel)
    bool operator==(const Setting&) const = default;
};

struct Cost {
    double seconds = 0;     // modelled time
    double joules = 0;      // dynamic energy: above the device's idle power over `seconds`
    double bytes = 0;       // off-chip traffic (cold buffer, outputs written back)
    double flops = 0;
    double roofline_s = 0;  // max(compute, memory) at the clock it ran at: a bound `seconds` never beats
    double clock_mhz = 0;   // the clock it ran at (0: the spec has no clock range)
    bool throttled = false; // the power limit held the clock below the set one
    double watts() const { return seconds > 0 ? joules / seconds : 0; }  // dynamic power
};

class DeviceModel {
public:
    // `share`: the fraction of the device the work gets (CPU threads / cores); scales peaks, bandwidth
    // and dynamic power, not idle. Throws Error when the spec lacks what the model needs.
    explicit DeviceModel(hw::DeviceSpec spec, std::optional<EfficiencyModel> efficiency = std::nullopt, double share = 1);
    const hw::DeviceSpec& spec() const { return spec_; }
    const EfficiencyModel* efficiency() const { return efficiency_ ? &*efficiency_ : nullptr; }
    bool has(DType t) const { return spec_.has_peak(t); }
    double idle_w() const { return spec_.idle_w; }
    // Setting checks (Error naming the device, the value and the range) and the values they resolve to.
    double clock_mhz(const Setting& s) const;      // 0 when the spec has no clock range
    double power_limit_w(const Setting& s) const;  // 0 when the spec has no power-limit range
    // The memory-subsystem model's view of this device (capacity, bandwidth and peaks at the peak clock,
    // and its efficiency curves), for predict_iteration.
    MemoryConfig memory_config() const;

    // Model internals the cost functions share.
    double peak_flops(DType t, double clock_mhz) const;
    double bandwidth() const { return bandwidth_; }
    double capacity() const { return spec_.onchip_kib * 1024; }
    double core_dynamic_w() const { return core_w_; }
    double memory_j_per_byte() const { return memory_j_per_byte_; }
    double voltage_scale(double clock_mhz) const;  // s(f) above

    // FPGAs: the tuned kernel of a node's work, by a key of its shape and setting (fpga_model.cpp).
    struct FpgaCache;
    FpgaCache& fpga_cache() const { return *fpga_cache_; }

private:
    hw::DeviceSpec spec_;
    std::optional<EfficiencyModel> efficiency_;
    std::shared_ptr<FpgaCache> fpga_cache_;
    double share_ = 1, bandwidth_ = 0, core_w_ = 0, memory_j_per_byte_ = 0;
};

// The spec (by name, alias or path) with the efficiency file it names (data/efficiency/). An efficiency
// file fitted on other hardware than the spec describes is an error naming both files.
DeviceModel load_device_model(const std::string& name_alias_or_path, double share = 1);
// A CPU's model for work on `threads` of its cores (share threads / cores, at most 1); `whole` itself
// for other devices or threads <= 0.
DeviceModel on_threads(const DeviceModel& whole, int threads);

// What a node would cost: computing in `dtype` (its operands stored as operand_dtype() says). Throws
// Error when the device has no peak for dtype (a planner asks has() first) or the setting is invalid.
Cost cost(const Graph& g, NodeId n, const DeviceModel& d, DType dtype, const Setting& s = {});

// Whether a modelled device computes node n in a reduced precision dtype: it has a peak for dtype, the op
// is not f32-only (losses, optimizer updates), not an embedding and, on an FPGA, has a kernel.
bool runs_in(const DeviceModel& d, const Graph& g, NodeId n, DType dtype);
// A device's low precision for mixed-precision plans: bf16 where it has it (f32's range: no loss
// scaling), else f16, else f32 (none).
DType low_precision(const DeviceModel& d);

// FPGAs: the tuned kernel cost() charges node n at the setting (cached per shape and setting) -- what a
// schedule compares to price a configuration switch. Error as cost() for a node without an FPGA kernel.
const TunedKernel& fpga_kernel(const Graph& g, NodeId n, const DeviceModel& d, DType dtype, const Setting& s = {});

// FPGAs: the design (one bitstream, see FpgaDesign) that runs every FPGA node of g in the least total
// time: candidates are the PE arrays the tuner picks node by node (with the buffering it picked for
// them; halved until the stream kernel fits beside them), each with the stream lanes the tuner picks
// most often, costed on every node; the empty design when none fits. Its node costs land in the
// device's cache.
FpgaDesign best_fpga_design(const Graph& g, const DeviceModel& d, const Setting& s = {});

// The same for a precomputed node description (what cost() derives from the graph), for callers that
// ask about one node under many settings.
struct NodeWork {
    OpKind kind = OpKind::Count;
    bool gemm = false, grouped = false;
    double m = 0, n = 0, k = 0;  // GEMM dimensions per group
    double flops = 0, bytes = 0;
};
NodeWork node_work(const Graph& g, NodeId n, DType dtype, double capacity_bytes);
Cost cost(const NodeWork& w, const DeviceModel& d, DType dtype, const Setting& s = {});

// Every node of a graph on one device in its compute dtype, summed (a sequential step of a lowered
// graph): seconds, dynamic joules, bytes, FLOPs; its Cast nodes' part apart.
struct GraphCost {
    Cost total;
    double cast_seconds = 0, cast_bytes = 0;
};
GraphCost graph_cost(const Graph& g, const DeviceModel& d, const Setting& s = {});

// Converting `elements` values from one dtype to another on a device (an element-wise pass: read
// one, write the other), and moving `bytes` over a link (latency + bytes / bandwidth; energy per byte).
Cost cast_cost(double elements, DType from, DType to, const DeviceModel& d, const Setting& s = {});
Cost transfer_cost(double bytes, const hw::LinkSpec& link);
// f16 training's dynamic loss scaling, per step (PyTorch's GradScaler.unscale_, TF's
// LossScaleOptimizer): one pass over the f32 weight gradients that unscales them and tests them for
// inf/NaN -- each read and written once, a multiply and a compare per element. Scaling the loss and
// updating the scale touch one element each and are not counted. bf16 keeps f32's exponent range and
// needs none of it.
Cost loss_scaling_cost(double gradient_elements, const DeviceModel& d, const Setting& s = {});

// The dynamic power of work that took `seconds` (measured, or modelled) at `clock_mhz` (0: the
// device's default): the power model above. The modelled meter uses it.
double dynamic_watts(const DeviceModel& d, double flops, double bytes, DType dtype, double seconds, double clock_mhz = 0);

}  // namespace joule::predict
