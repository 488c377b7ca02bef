#include "predict/fpga_model.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "graph/cost.hpp"
#include "graph/error.hpp"
#include "predict/memory_model.hpp"

namespace joule::predict {

namespace {

// Structure of the kernels (not outside numbers): a pipelined FP adder takes this many cycles per
// level of a dot product's adder tree, and every tile pays a fixed load/store pipeline start.
constexpr double kAdderLatency = 4, kTileStart = 8;
// Stream kernels: burst buffers of this many elements per lane, and the pipeline depth of a lane.
constexpr double kBurstPerLane = 64, kStreamDepth = 16;

bool gemm_kind(OpKind k) {
    switch (k) {
        case OpKind::Conv2d: case OpKind::ConvBackwardData: case OpKind::ConvBackwardWeights:
        case OpKind::Linear: case OpKind::LinearBackwardData: case OpKind::LinearBackwardWeights:
        case OpKind::MatMul: return true;
        default: return false;
    }
}

bool stream_kind(OpKind k) {
    switch (k) {
        case OpKind::BatchNorm2d: case OpKind::BatchNormBackward:
        case OpKind::Relu: case OpKind::Relu6: case OpKind::Gelu: case OpKind::Sigmoid: case OpKind::Tanh:
        case OpKind::ReluBackward: case OpKind::Relu6Backward: case OpKind::GeluBackward: case OpKind::SigmoidBackward: case OpKind::TanhBackward:
        case OpKind::MaxPool2d: case OpKind::AvgPool2d: case OpKind::GlobalAvgPool:
        case OpKind::MaxPool2dBackward: case OpKind::AvgPool2dBackward: case OpKind::GlobalAvgPoolBackward:
        case OpKind::Add: case OpKind::Mul: case OpKind::SgdUpdate: case OpKind::AdamUpdate: case OpKind::Cast: case OpKind::Reshape: return true;
        default: return false;
    }
}

double dsp_per_mac(const hw::DeviceSpec& d, DType t) { return t == DType::BF16 ? d.fpga.dsp_per_bf16_mac : d.fpga.dsp_per_f32_fma; }

double clock_of(const FpgaConfig& c, const hw::DeviceSpec& d) { return c.clock_mhz > 0 ? c.clock_mhz : d.clock_default_mhz; }

// On-chip RAM for one buffer of `elements` values of `bits`, read `parallel` values per cycle: one bank
// per port's worth of parallel reads, each bank whole blocks.
double blocks_for(double elements, double bits, double parallel, double block_kbit, double port_bits) {
    const double banks = std::max(1.0, std::ceil(parallel * bits / port_bits));
    return banks * std::ceil(elements * bits / banks / (block_kbit * 1024));
}

struct Buffer {
    double elements, bits, parallel, copies;
};

// Places buffers in BRAM, moving the largest to UltraRAM while BRAM is over budget (when there is any).
FpgaUse place(std::vector<Buffer> buffers, const hw::FpgaFabric& f) {
    std::sort(buffers.begin(), buffers.end(), [](const Buffer& a, const Buffer& b) { return a.elements * a.bits * a.copies > b.elements * b.bits * b.copies; });
    FpgaUse u;
    std::vector<double> bram(buffers.size());
    for (size_t i = 0; i < buffers.size(); ++i) {
        const Buffer& b = buffers[i];
        bram[i] = b.copies * blocks_for(b.elements, b.bits, b.parallel, f.ram_block_kbit, f.ram_port_bits);
        u.ram_blocks += bram[i];
    }
    for (size_t i = 0; i < buffers.size() && u.ram_blocks > f.ram_blocks && f.uram_blocks > 0; ++i) {
        const Buffer& b = buffers[i];
        u.ram_blocks -= bram[i];
        u.uram_blocks += b.copies * blocks_for(b.elements, b.bits, b.parallel, f.uram_block_kbit, f.uram_port_bits);
    }
    return u;
}

std::string num(double v) {
    std::ostringstream o;
    o << v;
    return o.str();
}

void check_budget(FpgaEstimate& e, const hw::DeviceSpec& d) {
    const hw::FpgaFabric& f = d.fpga;
    if (e.use.dsp > f.dsp_blocks) e.fits = false, e.why_not = "needs " + num(e.use.dsp) + " DSP blocks of " + num(f.dsp_blocks);
    else if (e.use.ram_blocks > f.ram_blocks) e.fits = false, e.why_not = "needs " + num(e.use.ram_blocks) + " RAM blocks of " + num(f.ram_blocks);
    else if (e.use.uram_blocks > f.uram_blocks) e.fits = false, e.why_not = "needs " + num(e.use.uram_blocks) + " UltraRAM blocks of " + num(f.uram_blocks);
}

void finish(FpgaEstimate& e, const hw::DeviceSpec& d) {
    e.seconds = e.cycles / (e.clock_mhz * 1e6);
    e.dynamic_joules = (e.dsp_cycles * d.fpga.dsp_pj_per_cycle + e.ram_bits * d.fpga.ram_pj_per_bit + e.offchip_bytes * d.mem_pj_per_byte) * 1e-12;
    e.static_joules = d.idle_w * e.seconds;
}

FpgaEstimate gemm_estimate(const FpgaWork& w, const FpgaConfig& c, const hw::DeviceSpec& d) {
    FpgaEstimate e;
    e.clock_mhz = clock_of(c, d);
    e.flops = w.flops;
    const double rows = c.pe_rows, cols = c.pe_cols, vec = c.vec;
    e.use.dsp = rows * cols * vec * dsp_per_mac(d, w.dtype);
    const double tm = std::min(c.tile_m, w.m), tn = std::min(c.tile_n, w.n), tk = std::min(c.tile_k, w.k);
    const double bits = w.element_bytes * 8;
    const double db = c.double_buffer ? 2 : 1;
    FpgaUse u = place({{tm * tk, bits, rows * vec, db}, {tk * tn, bits, cols * vec, db}, {tm * tn, 32, cols, 1}}, d.fpga);
    e.use.ram_blocks = u.ram_blocks, e.use.uram_blocks = u.uram_blocks;
    check_budget(e, d);

    // Off-chip bytes per tile element: a convolution's A (or B) is the activation, not its im2col rows.
    const double g = w.groups, elt = w.element_bytes;
    const double a_scale = w.a_bytes / (g * w.m * w.k * elt), b_scale = w.b_bytes / (g * w.k * w.n * elt);
    const double c_bytes_per_group = w.c_bytes / g;
    const double bytes_per_cycle = d.mem_bandwidth_gbps * 1e9 / (e.clock_mhz * 1e6);
    const double fill = rows + cols + kAdderLatency * std::ceil(std::log2(vec) + 1) + kTileStart;
    // full tiles and the remainder in each dimension
    auto split = [](double dim, double t) {
        const double full = std::floor(dim / t), rest = dim - full * t;
        return std::array<std::pair<double, double>, 2>{std::pair{full, t}, std::pair{rest > 0 ? 1.0 : 0.0, rest}};
    };
    const auto ms = split(w.m, tm), ns = split(w.n, tn), ks = split(w.k, tk);
    double cycles = 0, compute = 0, memory = 0, ram_bits = 0, bytes = 0, first_load = 0;
    for (const auto& [cm, sm] : ms)
        for (const auto& [cn, sn] : ns)
            for (const auto& [ck, sk] : ks) {
                const double count = cm * cn * ck;
                if (count == 0) continue;
                const double busy = std::ceil(sm / rows) * std::ceil(sn / cols) * std::ceil(sk / vec);
                const double load = (sm * sk * a_scale + sk * sn * b_scale) * elt;
                const double load_cycles = load / bytes_per_cycle;
                const double tile_compute = busy + fill;
                cycles += count * (c.double_buffer ? std::max(tile_compute, load_cycles) : tile_compute + load_cycles);
                compute += count * tile_compute, memory += count * load_cycles, bytes += count * load;
                e.dsp_cycles += count * busy * e.use.dsp;
                // tiles written on chip once, A read per column block, B per row block, C accumulated
                ram_bits += count * ((sm * sk + sk * sn) * bits + sm * sk * bits * std::ceil(sn / cols) + sk * sn * bits * std::ceil(sm / rows) + 2 * 32 * sm * sn);
                if (first_load == 0) first_load = load_cycles;
            }
    const double store_cycles = c_bytes_per_group / bytes_per_cycle;
    // double-buffered: the first load and the stores of C tiles are not hidden behind compute
    cycles += c.double_buffer ? first_load + store_cycles : store_cycles;
    e.cycles = g * cycles;
    e.compute_cycles = g * compute;
    e.memory_cycles = g * (memory + store_cycles);
    e.offchip_bytes = g * (bytes + c_bytes_per_group);
    e.ram_bits = g * ram_bits;
    e.dsp_cycles *= g;
    finish(e, d);
    return e;
}

FpgaEstimate stream_estimate(const FpgaWork& w, const FpgaConfig& c, const hw::DeviceSpec& d) {
    FpgaEstimate e;
    e.clock_mhz = clock_of(c, d);
    e.flops = w.flops;
    const double lanes = c.vec;
    // each lane sustains one element per cycle: ceil(FLOPs per element / 2) FP32 multiply-adds
    e.use.dsp = lanes * std::ceil(w.flops_per_element / 2) * d.fpga.dsp_per_f32_fma;
    const double bits = w.element_bytes * 8;
    const double db = c.double_buffer ? 2 : 1;
    const FpgaUse u = place({{kBurstPerLane * lanes, bits, lanes, 2 * db}}, d.fpga);  // an input and an output burst buffer
    e.use.ram_blocks = u.ram_blocks, e.use.uram_blocks = u.uram_blocks;
    check_budget(e, d);
    const double busy = std::ceil(w.elements / lanes) * w.passes;
    const double memory = w.bytes / (d.mem_bandwidth_gbps * 1e9 / (e.clock_mhz * 1e6));
    const double depth = kStreamDepth + kBurstPerLane;
    e.cycles = (c.double_buffer ? std::max(busy, memory) : busy + memory) + depth;
    e.compute_cycles = busy + depth, e.memory_cycles = memory;
    e.offchip_bytes = w.bytes;
    e.ram_bits = 2 * w.bytes * 8;  // every byte passes through a burst buffer: written, then read
    e.dsp_cycles = busy * e.use.dsp;
    finish(e, d);
    return e;
}

double pow2_at_least(double v) { return std::exp2(std::ceil(std::log2(std::max(v, 1.0)))); }

}  // namespace

const char* fpga_kernel_name(FpgaKernel k) { return k == FpgaKernel::Gemm ? "gemm" : "stream"; }

bool fpga_runs(OpKind k) { return gemm_kind(k) || stream_kind(k); }

std::optional<FpgaWork> fpga_work(const Graph& g, NodeId id, DType dtype) {
    const Node& n = g.node(id);
    if (!fpga_runs(n.kind)) return std::nullopt;
    FpgaWork w;
    const bool update = n.kind == OpKind::SgdUpdate || n.kind == OpKind::AdamUpdate;
    w.dtype = update ? DType::F32 : dtype;
    w.element_bytes = double(dtype_size(w.dtype));
    w.flops = node_cost(g, id).flops;
    auto numel = [&](TensorId t) { return double(g.tensor(t).desc.numel()); };
    GemmShape s;
    if (gemm_kind(n.kind) && gemm_shape(g, id, &s)) {
        w.kernel = FpgaKernel::Gemm;
        w.m = s.m, w.n = s.n, w.k = s.k, w.groups = s.count;
        w.a_bytes = numel(s.a) * w.element_bytes, w.b_bytes = numel(s.b) * w.element_bytes;
        w.c_bytes = numel(s.c) * (weight_gradient(n.kind) ? 4 : w.element_bytes);  // weight gradients are written in f32
        if (n.kind == OpKind::LinearBackwardData && n.inputs.size() == 3) w.c_bytes += numel(n.inputs[2]) * 4;  // a folded f32 gradient sum, read as C is stored
        return w;
    }
    w.kernel = FpgaKernel::Stream;
    double bytes = 0;
    for (TensorId t : n.inputs) bytes += numel(t), w.elements = std::max(w.elements, numel(t));
    for (TensorId t : n.outputs) bytes += numel(t), w.elements = std::max(w.elements, numel(t));
    // batch norm reads its input (and, backward, the incoming gradient) a second time after the statistics pass
    if (n.kind == OpKind::BatchNorm2d) bytes += numel(n.inputs[0]), w.passes = 2;
    if (n.kind == OpKind::BatchNormBackward) bytes += numel(n.inputs[0]) + numel(n.inputs[1]), w.passes = 2;
    w.bytes = bytes * w.element_bytes;
    if (n.kind == OpKind::Cast)  // reads one dtype, writes another
        w.bytes = numel(n.inputs[0]) * double(dtype_size(g.tensor(n.inputs[0]).desc.dtype)) + numel(n.outputs[0]) * double(dtype_size(g.tensor(n.outputs[0]).desc.dtype));
    w.flops_per_element = w.flops / std::max(w.elements, 1.0);
    return w;
}

std::string FpgaConfig::str() const {
    std::ostringstream o;
    if (kernel == FpgaKernel::Gemm) o << "gemm " << pe_rows << "x" << pe_cols << "x" << vec << " tile " << tile_m << "x" << tile_n << "x" << tile_k;
    else o << "stream x" << vec;
    o << (double_buffer ? " db" : " sb") << " " << dtype_name(dtype);
    if (clock_mhz > 0) o << " " << clock_mhz << "MHz";
    return o.str();
}

FpgaEstimate fpga_estimate(const FpgaWork& w, const FpgaConfig& c, const hw::DeviceSpec& d) {
    JOULE_ASSERT(d.kind == "fpga", "fpga_estimate on " + d.name);
    JOULE_ASSERT(c.kernel == w.kernel && c.pe_rows >= 1 && c.pe_cols >= 1 && c.vec >= 1, "fpga_estimate: configuration " + c.str());
    if (dsp_per_mac(d, w.dtype) <= 0) throw Error("FPGA '" + d.name + "' has no " + dtype_name(w.dtype) + " arithmetic (" + d.path + ")");
    const double clock = clock_of(c, d);
    if (clock < d.clock_min_mhz || clock > d.clock_max_mhz)
        throw Error("clock " + num(clock) + " MHz is outside " + d.name + "'s kernel clock range [" + num(d.clock_min_mhz) + ", " + num(d.clock_max_mhz) + "] MHz");
    return w.kernel == FpgaKernel::Gemm ? gemm_estimate(w, c, d) : stream_estimate(w, c, d);
}

std::string FpgaDesign::str() const {
    if (empty()) return "per-node";
    std::ostringstream o;
    o << pe_rows << "x" << pe_cols << "x" << vec << "/s" << stream_vec << (double_buffer ? "" : "/sb");
    return o.str();
}

FpgaDesign parse_fpga_design(const std::string& text) {
    FpgaDesign d;
    char sep1 = 0, sep2 = 0, slash = 0, s = 0;
    int consumed = 0;
    const int got = std::sscanf(text.c_str(), "%d%c%d%c%d%c%c%d%n", &d.pe_rows, &sep1, &d.pe_cols, &sep2, &d.vec, &slash, &s, &d.stream_vec, &consumed);
    std::string rest = got == 8 ? text.substr(size_t(consumed)) : "";
    if (rest == "/sb") d.double_buffer = false, rest.clear();
    auto pow2 = [](int v) { return v >= 1 && v <= 1024 && (v & (v - 1)) == 0; };
    if (got != 8 || sep1 != 'x' || sep2 != 'x' || slash != '/' || s != 's' || !rest.empty() || !pow2(d.pe_rows) || !pow2(d.pe_cols) || !pow2(d.vec) ||
        !pow2(d.stream_vec))
        throw Error("FPGA design '" + text + "' is not ROWSxCOLSxVEC/sLANES[/sb] with powers of two", "e.g. 8x16x8/s16");
    return d;
}

namespace {

// What a design's other kernel holds on the fabric while one runs: for the GEMM array, the stream
// kernel at its lanes (up to 8 FLOPs per element: batch norm's); for the stream kernel, the PE array
// with its smallest tiles.
FpgaUse design_reserve(const FpgaDesign& x, FpgaKernel running, DType dtype, const hw::DeviceSpec& d) {
    FpgaWork w;
    FpgaConfig c;
    c.dtype = w.dtype = dtype;
    c.double_buffer = x.double_buffer;
    w.element_bytes = double(dtype_size(dtype));
    if (running == FpgaKernel::Gemm) {
        w.kernel = c.kernel = FpgaKernel::Stream;
        w.elements = 1 << 20, w.flops_per_element = 8, w.bytes = w.elements * 2 * w.element_bytes, w.flops = w.elements * 8;
        c.vec = x.stream_vec;
    } else {
        w.kernel = c.kernel = FpgaKernel::Gemm;
        w.m = x.pe_rows, w.n = x.pe_cols, w.k = x.vec;
        w.a_bytes = w.m * w.k * w.element_bytes, w.b_bytes = w.k * w.n * w.element_bytes, w.c_bytes = w.m * w.n * 4, w.flops = 2 * w.m * w.n * w.k;
        c.pe_rows = x.pe_rows, c.pe_cols = x.pe_cols, c.vec = x.vec, c.tile_m = x.pe_rows, c.tile_n = x.pe_cols, c.tile_k = x.vec;
    }
    return fpga_estimate(w, c, d).use;
}

}  // namespace

TunedKernel fpga_tune(const FpgaWork& w, const hw::DeviceSpec& d, double clock_mhz, double power_limit_w, const FpgaDesign& design) {
    TunedKernel best;
    bool found = false;
    const double clock = clock_mhz > 0 ? clock_mhz : d.clock_default_mhz;
    const FpgaUse reserve = design.empty() ? FpgaUse{} : design_reserve(design, w.kernel, w.dtype, d);
    const hw::FpgaFabric& f = d.fpga;
    auto room = [&](const FpgaUse& u) {
        return u.dsp + reserve.dsp <= f.dsp_blocks && u.ram_blocks + reserve.ram_blocks <= f.ram_blocks && u.uram_blocks + reserve.uram_blocks <= f.uram_blocks;
    };
    auto better = [&](const FpgaEstimate& e) {
        if (!found) return true;
        const FpgaEstimate& b = best.estimate;
        if (e.seconds != b.seconds) return e.seconds < b.seconds * (1 - 1e-9);
        return e.dynamic_joules + e.static_joules < b.dynamic_joules + b.static_joules;
    };
    auto consider = [&](const FpgaConfig& c) {
        FpgaEstimate e = fpga_estimate(w, c, d);
        ++best.candidates;
        if (e.fits && !room(e.use)) e.fits = false, e.why_not = "leaves no room for design " + design.str() + "'s other kernel";
        if (!e.fits || (power_limit_w > 0 && e.watts() > power_limit_w)) return e;
        ++best.feasible;
        if (better(e)) best.config = c, best.estimate = e, found = true;
        return e;
    };
    FpgaConfig c;
    c.kernel = w.kernel, c.dtype = w.dtype, c.clock_mhz = clock;
    if (w.kernel == FpgaKernel::Stream) {
        for (int lanes = 1; lanes <= 256; lanes *= 2)
            for (bool db : {true, false})
                if (design.empty() || (lanes == design.stream_vec && db == design.double_buffer)) c.vec = lanes, c.double_buffer = db, consider(c);
    } else {
        // PE arrays from the most MACs per cycle down; one whose compute alone cannot beat the best so
        // far is skipped. Per array, each (tile_m, tile_n) takes the deepest tile_k that fits.
        const double mac = dsp_per_mac(d, w.dtype);
        const double max_m = pow2_at_least(w.m), max_n = pow2_at_least(w.n), max_k = pow2_at_least(w.k);
        struct Pe {
            int r, c, v;
        };
        std::vector<Pe> arrays;
        for (int r = 1; r <= 128 && r <= max_m; r *= 2)
            for (int cc = 1; cc <= 128 && cc <= max_n; cc *= 2)
                for (int v = 1; v <= 64 && v <= max_k; v *= 2)
                    if (r * cc * v * mac <= d.fpga.dsp_blocks && (design.empty() || (r == design.pe_rows && cc == design.pe_cols && v == design.vec)))
                        arrays.push_back({r, cc, v});
        if (!design.empty() && arrays.empty()) arrays.push_back({design.pe_rows, design.pe_cols, design.vec});  // an array larger than the work: padded
        std::sort(arrays.begin(), arrays.end(), [](const Pe& a, const Pe& b) { return a.r * a.c * a.v > b.r * b.c * b.v; });
        for (const Pe& p : arrays) {
            const double ideal = w.groups * std::ceil(w.m / p.r) * std::ceil(w.n / p.c) * std::ceil(w.k / p.v) / (clock * 1e6);
            if (found && ideal >= best.estimate.seconds) continue;
            c.pe_rows = p.r, c.pe_cols = p.c, c.vec = p.v;
            for (bool db : {true, false}) {
                if (!design.empty() && db != design.double_buffer) continue;
                for (double tm = p.r; tm <= std::max<double>(max_m, p.r); tm *= 4)
                    for (double tn = p.c; tn <= std::max<double>(max_n, p.c); tn *= 4)
                        for (double tk = std::max<double>(max_k, p.v); tk >= p.v; tk /= 4) {
                            c.tile_m = tm, c.tile_n = tn, c.tile_k = tk, c.double_buffer = db;
                            if (consider(c).fits) break;  // smaller tile_k only adds reloads and fills
                        }
            }
        }
    }
    if (!found)
        throw Error("no configuration of an FPGA kernel for this " + std::string(fpga_kernel_name(w.kernel)) + " work fits " + d.name +
                    (design.empty() ? "" : " in design " + design.str()) +
                    (power_limit_w > 0 ? " under " + num(power_limit_w) + " W (static power alone is " + num(d.idle_w) + " W)" : ""));
    return best;
}

double fpga_switch_seconds(const TunedKernel& a, const TunedKernel& b, const hw::DeviceSpec& d) {
    const FpgaConfig &x = a.config, &y = b.config;
    const FpgaUse &u = a.estimate.use, &v = b.estimate.use;
    const bool same_kernel = x.kernel == y.kernel && x.pe_rows == y.pe_rows && x.pe_cols == y.pe_cols && x.vec == y.vec && x.dtype == y.dtype &&
                             x.double_buffer == y.double_buffer && x.clock_mhz == y.clock_mhz;
    // one kernel whose buffers are the larger of the two, or two kernels side by side
    const FpgaUse both = same_kernel ? FpgaUse{std::max(u.dsp, v.dsp), std::max(u.ram_blocks, v.ram_blocks), std::max(u.uram_blocks, v.uram_blocks)}
                                     : FpgaUse{u.dsp + v.dsp, u.ram_blocks + v.ram_blocks, u.uram_blocks + v.uram_blocks};
    const hw::FpgaFabric& f = d.fpga;
    const bool one_bitstream = both.dsp <= f.dsp_blocks && both.ram_blocks <= f.ram_blocks && both.uram_blocks <= f.uram_blocks;
    return one_bitstream ? 0 : f.reconfig_ms * 1e-3;
}

}  // namespace joule::predict
