#include "predict/device_model.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <sstream>

#include "graph/cost.hpp"
#include "graph/error.hpp"

namespace joule::predict {

namespace {

std::string num(double v) {
    std::ostringstream o;
    o << v;
    return o.str();
}

// Piecewise-linear voltage at f, flat beyond the curve's ends.
double volts_at(const std::vector<hw::VfPoint>& c, double f) {
    if (f <= c.front().mhz) return c.front().volts;
    if (f >= c.back().mhz) return c.back().volts;
    const auto hi = std::lower_bound(c.begin(), c.end(), f, [](const hw::VfPoint& p, double x) { return p.mhz < x; });
    const auto lo = hi - 1;
    return lo->volts + (hi->volts - lo->volts) * (f - lo->mhz) / (hi->mhz - lo->mhz);
}

// Relative difference above 1 %: the efficiency file describes other hardware than the spec.
bool differs(double a, double b) { return std::fabs(a - b) > 0.01 * std::max(std::fabs(a), std::fabs(b)); }

// The power model: dynamic watts of work bounded by `roofline_s` that took `seconds` at clock f.
double power(const DeviceModel& d, double roofline_s, double bytes, double seconds, double f) {
    if (seconds <= 0) return 0;
    const double activity = std::min(1.0, roofline_s / seconds);
    return d.core_dynamic_w() * d.voltage_scale(f) * activity + d.memory_j_per_byte() * bytes / seconds;
}

struct Evaluation {
    double seconds = 0, roofline_s = 0, dynamic_w = 0;
};

// The node at clock f (0: a device without a clock model).
Evaluation evaluate(const NodeWork& w, const DeviceModel& d, DType peak_dtype, DType curve_dtype, double f) {
    const Roofline r = roofline(w.flops, w.bytes, d.peak_flops(peak_dtype, f), d.bandwidth());
    Evaluation e;
    e.roofline_s = r.seconds();
    const EfficiencyModel* eff = d.efficiency();
    const KindEfficiency* k = eff ? eff->lookup(w.kind, w.gemm, w.grouped, curve_dtype) : nullptr;
    e.seconds = k ? std::max(k->seconds(r.compute_s, r.memory_s, w.m, w.n, w.k), e.roofline_s) : e.roofline_s + (eff ? eff->hardware.node_overhead_s : 0);
    e.dynamic_w = power(d, e.roofline_s, w.bytes, e.seconds, f);
    return e;
}

Cost cost_at(const NodeWork& w, const DeviceModel& d, DType peak_dtype, DType curve_dtype, const Setting& s) {
    if (!d.has(peak_dtype))
        throw Error("device '" + d.spec().name + "' has no " + dtype_name(peak_dtype) + " compute path (no peak_" + dtype_name(peak_dtype) + "_gflops in " +
                        d.spec().path + ")",
                    "cost it in a dtype the device has");
    const hw::DeviceSpec& spec = d.spec();
    double f = d.clock_mhz(s);
    const double limit = d.power_limit_w(s);
    Evaluation e = evaluate(w, d, peak_dtype, curve_dtype, f);
    Cost c;
    if (limit > 0 && f > 0 && spec.idle_w + e.dynamic_w > limit) {
        // the highest clock whose power stays under the limit (power rises with the clock), on the
        // clock-step grid; the minimum clock when even that is over
        double lo = spec.clock_min_mhz, hi = f;
        if (spec.idle_w + evaluate(w, d, peak_dtype, curve_dtype, lo).dynamic_w > limit) {
            hi = lo;
        } else {
            for (int i = 0; i < 40 && hi - lo > 0.01; ++i) {
                const double mid = 0.5 * (lo + hi);
                (spec.idle_w + evaluate(w, d, peak_dtype, curve_dtype, mid).dynamic_w <= limit ? lo : hi) = mid;
            }
            hi = lo;
            if (spec.clock_step_mhz > 0) hi = spec.clock_min_mhz + std::floor((hi - spec.clock_min_mhz) / spec.clock_step_mhz + 1e-9) * spec.clock_step_mhz;
        }
        f = hi;
        e = evaluate(w, d, peak_dtype, curve_dtype, f);
        c.throttled = true;
    }
    c.seconds = e.seconds;
    c.roofline_s = e.roofline_s;
    c.joules = e.dynamic_w * e.seconds;
    c.bytes = w.bytes;
    c.flops = w.flops;
    c.clock_mhz = f;
    return c;
}

}  // namespace

struct DeviceModel::FpgaCache {
    // the work's and the setting's numbers exactly (a text key rounds them to six digits: two shapes
    // that print alike would share a kernel)
    using Key = std::array<double, 22>;
    std::map<Key, TunedKernel> tuned;  // its nodes stay put: references handed out stay valid
    std::shared_mutex mutex;           // planners cost nodes on several threads
};

namespace {

// The kernel the tuner picks for work w at clock f under a power limit (0: none), cached per shape and setting.
const TunedKernel& tuned_kernel(const FpgaWork& w, const DeviceModel& d, double f, double limit, const FpgaDesign& design) {
    const DeviceModel::FpgaCache::Key key{double(w.kernel), double(w.dtype), w.element_bytes, w.m, w.n, w.k, w.groups, w.a_bytes, w.b_bytes, w.c_bytes,
                                          w.elements, w.flops_per_element, w.passes, w.bytes, w.flops, f, limit, double(design.pe_rows), double(design.pe_cols),
                                          double(design.vec), double(design.stream_vec), double(design.double_buffer)};
    DeviceModel::FpgaCache& cache = d.fpga_cache();
    {
        const std::shared_lock<std::shared_mutex> lock(cache.mutex);
        if (const auto it = cache.tuned.find(key); it != cache.tuned.end()) return it->second;
    }
    TunedKernel k = fpga_tune(w, d.spec(), f, limit, design);  // outside the lock: another thread's equal kernel may land first
    const std::unique_lock<std::shared_mutex> lock(cache.mutex);
    return cache.tuned.emplace(key, std::move(k)).first->second;
}

struct FpgaNode {
    FpgaWork work;
    double clock_mhz, limit_w;
    FpgaDesign design;
};

FpgaNode fpga_node(const Graph& g, NodeId n, const DeviceModel& d, DType dtype, const Setting& s) {
    const std::optional<FpgaWork> w = fpga_work(g, n, dtype);
    if (!w)
        throw Error("node '" + g.node(n).name + "' (" + op_name(g.node(n).kind) + ") has no FPGA kernel on " + d.spec().name,
                    "it runs on the host; ask predict::fpga_runs() before costing a node on an FPGA");
    if (s.power_limit_w < 0 || !std::isfinite(s.power_limit_w)) throw Error("a device setting must be a positive clock or power limit");
    if (s.clock_mhz > 0 && s.power_limit_w > 0) throw Error("a device setting is a clock or a power limit, not both");
    return {*w, d.clock_mhz({.clock_mhz = s.clock_mhz}), s.power_limit_w, s.fpga_design};
}

// An FPGA node: the tuned kernel of its work at the setting (a limit: the fastest kernel under it).
Cost fpga_cost(const Graph& g, NodeId n, const DeviceModel& d, DType dtype, const Setting& s) {
    const FpgaNode x = fpga_node(g, n, d, dtype, s);
    const TunedKernel& k = tuned_kernel(x.work, d, x.clock_mhz, x.limit_w, x.design);
    Cost c;
    c.seconds = k.estimate.seconds;
    c.joules = k.estimate.dynamic_joules;
    c.bytes = k.estimate.offchip_bytes;
    c.flops = x.work.flops;
    c.roofline_s = roofline(x.work.flops, c.bytes, d.peak_flops(x.work.dtype, x.clock_mhz), d.bandwidth()).seconds();
    c.clock_mhz = x.clock_mhz;
    c.throttled = x.limit_w > 0 && k.estimate.seconds > tuned_kernel(x.work, d, x.clock_mhz, 0, x.design).estimate.seconds;
    return c;
}

}  // namespace

DeviceModel::DeviceModel(hw::DeviceSpec spec, std::optional<EfficiencyModel> efficiency, double share)
    : spec_(std::move(spec)), efficiency_(std::move(efficiency)), fpga_cache_(std::make_shared<FpgaCache>()), share_(share) {
    if (spec_.peak_f32_gflops <= 0 || spec_.mem_bandwidth_gbps <= 0 || spec_.tdp_w <= 0)
        throw Error(spec_.path + ": the cost model of '" + spec_.name + "' needs peak_f32_gflops, mem_bandwidth_gbps and tdp_w");
    if (!(share_ > 0 && share_ <= 1)) throw Error("device share " + num(share_) + " must be in (0, 1]");
    bandwidth_ = spec_.mem_bandwidth_gbps * 1e9 * share_;
    memory_j_per_byte_ = spec_.mem_pj_per_byte * 1e-12;
    core_w_ = (spec_.tdp_w - spec_.idle_w) * share_ - memory_j_per_byte_ * bandwidth_;
    if (efficiency_) {
        const CalibrationHardware& h = efficiency_->hardware;
        if (differs(h.peak_f32_flops, spec_.peak_f32_gflops * 1e9) || differs(h.bandwidth_bytes_per_s, spec_.mem_bandwidth_gbps * 1e9))
            throw Error(efficiency_->path + ": its curves are relative to peak " + num(h.peak_f32_flops / 1e9) + " GFLOP/s and " +
                            num(h.bandwidth_bytes_per_s / 1e9) + " GB/s, but " + spec_.path + " gives " + num(spec_.peak_f32_gflops) + " GFLOP/s and " +
                            num(spec_.mem_bandwidth_gbps) + " GB/s",
                        "refit the curves on this hardware or correct the spec");
    }
}

double DeviceModel::clock_mhz(const Setting& s) const {
    if (s.clock_mhz > 0 && s.power_limit_w > 0) throw Error("a device setting is a clock or a power limit, not both");
    if (s.clock_mhz < 0 || s.power_limit_w < 0 || !std::isfinite(s.clock_mhz) || !std::isfinite(s.power_limit_w))
        throw Error("a device setting must be a positive clock or power limit");
    if (s.clock_mhz == 0) return spec_.clock_default_mhz;
    if (!spec_.settable_clock()) throw Error("device '" + spec_.name + "' has no clock range in " + spec_.path, "set a power limit instead, or add the range with its source");
    if (s.clock_mhz < spec_.clock_min_mhz || s.clock_mhz > spec_.clock_max_mhz)
        throw Error("clock " + num(s.clock_mhz) + " MHz is outside " + spec_.name + "'s range [" + num(spec_.clock_min_mhz) + ", " + num(spec_.clock_max_mhz) + "] MHz");
    return s.clock_mhz;
}

double DeviceModel::power_limit_w(const Setting& s) const {
    if (s.power_limit_w == 0) return spec_.power_limit_default_w;
    if (!spec_.settable_power())
        throw Error("device '" + spec_.name + "' has no power-limit range in " + spec_.path, "set a clock instead, or add the range with its source");
    if (s.power_limit_w < spec_.power_limit_min_w || s.power_limit_w > spec_.power_limit_max_w)
        throw Error("power limit " + num(s.power_limit_w) + " W is outside " + spec_.name + "'s range [" + num(spec_.power_limit_min_w) + ", " +
                    num(spec_.power_limit_max_w) + "] W");
    return s.power_limit_w;
}

MemoryConfig DeviceModel::memory_config() const {
    MemoryConfig c;
    c.capacity_bytes = capacity();
    c.bandwidth_bytes_per_s = bandwidth_;
    c.peak_f32_flops = spec_.peak_f32_gflops * 1e9 * share_;
    c.peak_bf16_flops = spec_.peak_bf16_gflops * 1e9 * share_;
    c.peak_f16_flops = spec_.peak_f16_gflops * 1e9 * share_;
    c.node_overhead_s = efficiency_ ? efficiency_->hardware.node_overhead_s : 0;
    c.efficiency = efficiency();
    return c;
}

double DeviceModel::peak_flops(DType t, double f) const {
    const double clock = f > 0 && spec_.peak_clock_mhz > 0 ? f / spec_.peak_clock_mhz : 1;
    return spec_.peak_gflops(t) * 1e9 * share_ * clock;
}

double DeviceModel::voltage_scale(double f) const {
    if (f <= 0 || spec_.peak_clock_mhz <= 0) return 1;
    double v = 1;
    if (!spec_.vf_curve.empty()) v = volts_at(spec_.vf_curve, f) / volts_at(spec_.vf_curve, spec_.peak_clock_mhz);
    return f / spec_.peak_clock_mhz * v * v;
}

DeviceModel load_device_model(const std::string& name, double share) {
    hw::DeviceSpec spec = hw::find_device_spec(name);
    std::optional<EfficiencyModel> eff;
    if (!spec.efficiency.empty()) eff = load_efficiency(hw::data_file(spec.efficiency, "efficiency"));
    return DeviceModel(std::move(spec), std::move(eff), share);
}

DeviceModel on_threads(const DeviceModel& whole, int threads) {
    const hw::DeviceSpec& spec = whole.spec();
    if (spec.kind != "cpu" || spec.cores <= 0 || threads <= 0) return whole;
    return DeviceModel(spec, whole.efficiency() ? std::optional(*whole.efficiency()) : std::nullopt, std::min(1.0, double(threads) / double(spec.cores)));
}

NodeWork node_work(const Graph& g, NodeId n, DType dtype, double capacity_bytes) {
    NodeWork w;
    w.kind = g.node(n).kind;
    GemmShape s;
    if (gemm_shape(g, n, &s)) w.gemm = true, w.grouped = s.count > 1, w.m = s.m, w.n = s.n, w.k = s.k;
    w.flops = node_cost(g, n).flops;
    w.bytes = cold_traffic(g, n, dtype, capacity_bytes).bytes();
    return w;
}

Cost cost(const NodeWork& w, const DeviceModel& d, DType dtype, const Setting& s) { return cost_at(w, d, dtype, dtype, s); }

Cost cost(const Graph& g, NodeId n, const DeviceModel& d, DType dtype, const Setting& s) {
    if (d.spec().kind == "fpga") return fpga_cost(g, n, d, dtype, s);
    const NodeWork w = node_work(g, n, dtype, d.capacity());
    // a cast node costs what cast_cost() says: vector work on the f32 units, whatever its target
    return w.kind == OpKind::Cast ? cost_at(w, d, DType::F32, dtype, s) : cost(w, d, dtype, s);
}

GraphCost graph_cost(const Graph& g, const DeviceModel& d, const Setting& s) {
    GraphCost r;
    for (size_t i = 0; i < g.num_nodes(); ++i) {
        const NodeId n = NodeId(i);
        const Cost c = cost(g, n, d, g.node(n).compute, s);
        r.total.seconds += c.seconds, r.total.joules += c.joules, r.total.bytes += c.bytes, r.total.flops += c.flops, r.total.roofline_s += c.roofline_s;
        if (is_dtype_cast(g, n)) r.cast_seconds += c.seconds, r.cast_bytes += c.bytes;
    }
    return r;
}

bool runs_in(const DeviceModel& d, const Graph& g, NodeId n, DType dtype) {
    const OpKind k = g.node(n).kind;
    if (d.spec().kind == "fpga" && !fpga_runs(k)) return false;
    return d.has(dtype) && !f32_only_op(k) && k != OpKind::Embedding && k != OpKind::EmbeddingBackward;
}

DType low_precision(const DeviceModel& d) { return d.has(DType::BF16) ? DType::BF16 : d.has(DType::F16) ? DType::F16 : DType::F32; }

const TunedKernel& fpga_kernel(const Graph& g, NodeId n, const DeviceModel& d, DType dtype, const Setting& s) {
    const FpgaNode x = fpga_node(g, n, d, dtype, s);
    return tuned_kernel(x.work, d, x.clock_mhz, x.limit_w, x.design);
}

FpgaDesign best_fpga_design(const Graph& g, const DeviceModel& d, const Setting& s) {
    if (d.spec().kind != "fpga") throw Error("internal: an FPGA design for " + d.spec().name);
    std::vector<NodeId> nodes;
    std::vector<FpgaDesign> candidates;
    std::map<int, int> lanes;  // stream lanes -> nodes that pick them
    Setting own = s;
    own.fpga_design = {};
    for (size_t i = 0; i < g.num_nodes(); ++i) {
        const Node& n = g.node(NodeId(i));
        if (!fpga_runs(n.kind) || (n.compute != DType::F32 && !d.has(n.compute))) continue;
        nodes.push_back(NodeId(i));
        const FpgaConfig& c = fpga_kernel(g, NodeId(i), d, n.compute, own).config;
        if (c.kernel == FpgaKernel::Stream) {
            ++lanes[c.vec];
            continue;
        }
        FpgaDesign x;
        x.pe_rows = c.pe_rows, x.pe_cols = c.pe_cols, x.vec = c.vec, x.double_buffer = c.double_buffer;
        if (std::find(candidates.begin(), candidates.end(), x) == candidates.end()) candidates.push_back(x);
    }
    int stream_vec = 1, votes = -1;
    for (const auto& [v, k] : lanes)
        if (k > votes) stream_vec = v, votes = k;
    FpgaDesign best;
    double best_seconds = INFINITY;
    // an array the tuner sized for the whole fabric leaves the stream kernel no DSPs: halve its largest
    // dimension until both fit (the stream kernel reserves 4 multiply-adds a lane: batch norm's 8 FLOPs)
    const hw::FpgaFabric& fabric = d.spec().fpga;
    for (FpgaDesign& x : candidates) {
        x.stream_vec = stream_vec;
        while (x.pe_rows * x.pe_cols * x.vec * fabric.dsp_per_f32_fma + x.stream_vec * 4 * fabric.dsp_per_f32_fma > fabric.dsp_blocks &&
               x.pe_rows * x.pe_cols * x.vec > 1) {
            int& largest = x.pe_rows >= x.pe_cols && x.pe_rows >= x.vec ? x.pe_rows : x.pe_cols >= x.vec ? x.pe_cols : x.vec;
            largest /= 2;
        }
    }
    for (const FpgaDesign& x : candidates) {
        own.fpga_design = x;
        double total = 0;
        try {
            for (NodeId n : nodes) total += cost(g, n, d, g.node(n).compute, own).seconds;
        } catch (const Error&) {
            continue;  // some node has no configuration beside the other kernel
        }
        if (total < best_seconds) best_seconds = total, best = x;
    }
    return best;
}

Cost cast_cost(double elements, DType from, DType to, const DeviceModel& d, const Setting& s) {
    NodeWork w;
    w.kind = OpKind::Cast;  // no FLOPs, as the graph counts a cast
    w.bytes = elements * double(dtype_size(from) + dtype_size(to));
    return cost_at(w, d, DType::F32, to, s);  // vector work: the f32 units, whatever the target
}

Cost loss_scaling_cost(double gradient_elements, const DeviceModel& d, const Setting& s) {
    NodeWork w;
    w.kind = OpKind::Mul;  // an element-wise pass, fused as the frameworks' multi-tensor kernels do
    w.flops = 2 * gradient_elements;
    w.bytes = 2 * gradient_elements * double(dtype_size(DType::F32));
    return cost(w, d, DType::F32, s);
}

Cost transfer_cost(double bytes, const hw::LinkSpec& link) {
    Cost c;
    c.bytes = bytes;
    c.seconds = c.roofline_s = link.latency_us * 1e-6 + bytes / (link.bandwidth_gbps * 1e9);
    c.joules = bytes * link.energy_pj_per_byte * 1e-12;
    return c;
}

double dynamic_watts(const DeviceModel& d, double flops, double bytes, DType dtype, double seconds, double clock_mhz) {
    const double f = clock_mhz > 0 ? clock_mhz : d.spec().clock_default_mhz;
    return power(d, roofline(flops, bytes, d.peak_flops(dtype, f), d.bandwidth()).seconds(), bytes, seconds, f);
}

}  // namespace joule::predict
