// Analytical model of a training iteration focused on the memory subsystem.
//
//   predict::MemoryConfig hw{.capacity_bytes = 32 << 20, .bandwidth_bytes_per_s = 900e9,
//                            .peak_f32_flops = 15.7e12, .peak_bf16_flops = 125e12};
//   predict::IterationPrediction p = predict::predict_iteration(tg.graph, hw);
//   p.read_bytes, p.write_bytes, p.time_s, p.nodes[i].tiling ...
//
// The on-chip buffer is software-managed and near-optimal over the known schedule (node order):
// - inter-layer, block-scale and forward-backward reuse: tensors (or the part of one that fits) stay on
//   chip; when space is needed the bytes whose next use is furthest away are evicted (Belady's rule),
//   written back only if dirty and still needed (or persistent: parameters, optimizer state); a tensor
//   with no further use is dropped for free, so intermediates that die on chip never reach DRAM;
// - intra-layer reuse: conv / linear / matmul (forward and backward) are GEMMs whose tiling (Tm, Tn, Tk)
//   is chosen to minimise traffic within the space left; an operand read per tile pass is re-read
//   ceil(N/Tn) (A) or ceil(M/Tm) (B) times, partial sums spill when Tk < K;
// - streaming ops read what is not on chip once (BatchNorm twice when its input does not fit: statistics,
//   then normalisation).
// Per node: time = max(compute, memory) + a fixed overhead, compute = FLOPs / peak(precision), memory =
// bytes / bandwidth — the roofline. With efficiency curves fitted from profile records of a machine
// (predict/efficiency.hpp), a node of a calibrated kind takes the curve's time instead. Either way a
// node's memory stall is what its time would lose with unlimited bandwidth.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/cost.hpp"
#include "graph/graph.hpp"

namespace joule::predict {

struct EfficiencyModel;

// The modelled machine. No defaults stand for any real device: the figures come from a data/hw spec,
// an efficiency file or explicit flags (every outside number lives in data/hw with its source).
// Tensors take the bytes of their storage dtype in the graph (a plan's bf16 tensors are 2 bytes).
struct MemoryConfig {
    double capacity_bytes = 0;
    double bandwidth_bytes_per_s = 0;
    double peak_f32_flops = 0;
    double peak_bf16_flops = 0;  // 0: same as f32
    double peak_f16_flops = 0;   // 0: same as f32
    double node_overhead_s = 0;  // fixed time added to every node (launch, synchronisation)
    // ... to a small node instead (graph/cost.hpp small_node, which the cpu runs on one thread, without the
    // other threads' fork and join); none: node_overhead_s.
    std::optional<double> small_node_overhead_s;
    double overhead(const Graph& g, NodeId n) const;  // the fixed time node n is charged
    const EfficiencyModel* efficiency = nullptr;  // calibrated node times (not owned); null: roofline
    double peak(DType t) const;  // the peak for compute dtype t (f32's where the device has no faster path)
};

// Bytes of tensor t in its storage dtype.
double stored_bytes(const Graph& g, TensorId t);

struct NodePrediction {
    NodeId node = kNone;
    double read_bytes = 0, write_bytes = 0;  // off-chip, including write-backs of evicted tensors
    double flops = 0;
    double compute_s = 0, memory_s = 0, time_s = 0;
    double stall_s = 0;         // memory stall: what time_s would lose with unlimited bandwidth
    double utilisation = 0;     // compute_s / time_s
    double occupancy_bytes = 0; // on-chip bytes held after the node
    bool calibrated = false;    // time from an efficiency curve (else the roofline)
    std::string tiling;         // GEMM nodes: "Tm x Tn x Tk"
};

struct IterationPrediction {
    std::vector<NodePrediction> nodes;  // in node order
    double read_bytes = 0, write_bytes = 0, flops = 0;
    double time_s = 0, compute_s = 0, stall_s = 0;
    double avg_bandwidth_bytes_per_s = 0, peak_bandwidth_bytes_per_s = 0;  // demand: bytes / time
    double utilisation = 0;            // compute_s / time_s
    double peak_occupancy_bytes = 0;
    size_t calibrated_nodes = 0;
};

IterationPrediction predict_iteration(const Graph& g, const MemoryConfig& cfg);

// The GEMM view of a conv / linear / matmul node: per-group (or per-batch) M x N x K and the bytes of
// A (M x K), B (K x N) and C (M x N) in total; false for other nodes.
struct GemmShape {
    double m = 0, n = 0, k = 0, count = 1;  // count: groups or batch matrices
    TensorId a = kNone, b = kNone, c = kNone;
    double a_bytes = 0, b_bytes = 0, c_bytes = 0;
    double element_bytes = 4;  // the widest operand element (tile footprints)
};
bool gemm_shape(const Graph& g, NodeId n, GemmShape* out);

// Traffic of a GEMM with the given operands off chip, within `space` bytes: the best tiling.
struct Tiling {
    double tm = 0, tn = 0, tk = 0;
    double passes_a = 1, passes_b = 1;  // how often A and B are streamed
    double read_bytes = 0, write_bytes = 0;
};
Tiling best_tiling(const GemmShape& s, double space, bool a_resident, bool b_resident, bool c_kept);

// The roofline of one node: compute = FLOPs / peak, memory = off-chip bytes / bandwidth; the node takes
// the longer (the one formula; the cost interface and the modelled meter use it too).
struct Roofline {
    double compute_s = 0, memory_s = 0;
    double seconds() const { return compute_s > memory_s ? compute_s : memory_s; }
};
inline Roofline roofline(double flops, double bytes, double peak_flops, double bandwidth_bytes_per_s) {
    return {flops / peak_flops, bytes / bandwidth_bytes_per_s};
}

// Off-chip traffic of node n run alone from a cold buffer of `capacity` bytes, computing in `compute`
// (operands stored as operand_dtype() says, whatever the graph stores): every input read (a GEMM with
// its best tiling, BatchNorm's second pass over what does not fit), every output and every input
// written in place written back. It is predict_iteration's traffic for node_alone(g, n, compute) with
// the outputs persistent (tests check this) -- the context-free traffic the cost interface uses.
struct NodeTraffic {
    double read_bytes = 0, write_bytes = 0;
    double bytes() const { return read_bytes + write_bytes; }
};
NodeTraffic cold_traffic(const Graph& g, NodeId n, DType compute, double capacity_bytes);

}  // namespace joule::predict
