// Efficiency curves: how far the measured time of each op kind is from the memory model's roofline
// terms, fitted from profile records of the same machine. The roofline says what the hardware could do;
// a real kernel library reaches a share of it that depends on the op and on its shape (a GEMM with a
// small inner dimension, a depthwise convolution, a 16-element ReLU that is all fixed cost).
//
// Per kind (op name, ".grouped" for grouped convolutions and batched matmuls, ".bf16" for bf16 compute):
//
//   time = fixed_s + compute_scale * shape_penalty * compute_s + memory_scale * memory_s
//   shape_penalty = (1 + half_m / M) (1 + half_n / N) (1 + half_k / K)   for GEMM kinds, else 1
//
// where compute_s and memory_s are the model's roofline terms for the node (FLOPs / peak, off-chip
// bytes / bandwidth) and M, N, K its per-group GEMM dimensions. half_d is the dimension at which that
// dimension alone halves the throughput. The scales are non-negative least squares; the half
// dimensions are searched over powers of two. Each residual is weighted by 1 / sqrt(t_node * t_step),
// between a per-node relative error (every node equal) and the node's share of its step (large nodes
// decide); t_node is the measured time in a first fit, then that fit's prediction (one reweighting
// step, which removes most of the first fit's lean towards low predictions). Before that, a fit on
// relative error (robust: no sample weighs much more than one) marks nodes measured over 3x its
// prediction as outliers (a step the machine slowed down), and they are left out.
//
//   std::vector<predict::EfficiencySample> s = ...;            // profile::calibration_samples
//   predict::EfficiencyModel e = predict::fit_efficiency(s);
//   predict::save_efficiency(e, "cpu-efficiency.yaml");
//   cfg.efficiency = &e;  predict_iteration(g, cfg);            // calibrated node times
#pragma once

#include <map>
#include <string>
#include <vector>

#include "graph/graph.hpp"

namespace joule::predict {

struct KindEfficiency {
    double fixed_s = 0, compute_scale = 1, memory_scale = 0;
    double half_m = 0, half_n = 0, half_k = 0;  // 0: no penalty along that dimension
    bool gemm = false;                          // the shape penalty applies
    // fit quality: samples, those dropped as outliers, and sum |predicted - measured| / sum measured
    // over the rest
    int64_t samples = 0, outliers = 0;
    double error = 0;
    double seconds(double compute_s, double memory_s, double m, double n, double k) const;
};

// The hardware whose roofline terms the scales are relative to; analyze defaults to it.
struct CalibrationHardware {
    double capacity_bytes = 0, bandwidth_bytes_per_s = 0, peak_f32_flops = 0, peak_bf16_flops = 0, node_overhead_s = 0;
};

struct EfficiencyModel {
    std::map<std::string, KindEfficiency> kinds;
    CalibrationHardware hardware;
    std::string fitted_from;  // what the records were (database, configurations)
    // The memory term the scales were fitted against: "in-context" (the memory model's traffic within the
    // iteration: joule analyze) or "cold" (each node alone from a cold buffer: the cost interface's,
    // predict::cost); `joule calibrate --traffic` chooses. A file applied to the other term still works,
    // but small, cache-resident nodes are then over- (cold on in-context) or under-predicted.
    std::string traffic = "in-context";
    std::string path;         // the file it was loaded from, if any
    std::map<std::string, std::string> sources;  // per kind: the published figures it was set from (files not fitted here)
    const KindEfficiency* find(const std::string& key) const;
    // The curve a node takes when computing in `compute`: its own kind (efficiency_key), else the file's
    // generic curve for its class -- `gemm` (conv / linear / matmul) or `other`, with the same .grouped
    // and dtype suffixes -- which files built from published figures give; null when neither exists.
    const KindEfficiency* lookup(const Graph& g, NodeId n, DType compute) const;
    const KindEfficiency* lookup(OpKind kind, bool gemm, bool grouped, DType compute) const;
};

// The kind a node is calibrated under (computing in its own dtype, or in `compute`).
std::string efficiency_key(const Graph& g, NodeId n);
std::string efficiency_key(OpKind kind, bool grouped, DType compute);

struct EfficiencySample {
    std::string key;
    double compute_s = 0, memory_s = 0;  // roofline terms of the node
    double m = 0, n = 0, k = 0;          // GEMM dimensions per group, 0 when not a GEMM
    double measured_s = 0;               // measured time of one execution
    double step_s = 0;                   // measured step time of its configuration (weight)
};

// Throws Error when there are no samples or a sample has a negative or non-finite field.
EfficiencyModel fit_efficiency(const std::vector<EfficiencySample>& samples);

// Warnings on a fit's quality (empty when none): kinds fitted from fewer points than twice their free
// parameters (3 scales, + 3 half dimensions for GEMM kinds: the curve can pass through its points, so
// its error says little), and kinds whose points were mostly dropped as outliers.
std::vector<std::string> fit_warnings(const EfficiencyModel& m);

// YAML, `version: 1`, `kind: efficiency`; load names the file and line of anything wrong.
void save_efficiency(const EfficiencyModel& m, const std::string& path);
EfficiencyModel load_efficiency(const std::string& path);

}  // namespace joule::predict
