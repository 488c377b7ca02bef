// The op-consistency harness (DESIGN practice 9): every op kind of the catalogue, built as a tiny graph
// with small odd shapes, run on the reference backend (the oracle) and on every backend under test, in
// f32 and in bf16, and every tensor compared afterwards (outputs, inputs written in place, and inputs
// that must stay untouched). Adding an op without a case here fails EveryOpKindHasACase; adding a
// backend is one line in backends_under_test().
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/fpga_emu/fpga_emu_backend.hpp"
#include "backend/reference/reference_backend.hpp"
#include "backend/registry.hpp"
#include "graph/autodiff.hpp"
#include "graph/bf16.hpp"
#include "graph/error.hpp"

namespace joule {
namespace {

// ---- the backends compared against the reference: one line per backend --------------------------------
struct BackendFactory {
    std::string name;
    std::function<std::unique_ptr<Backend>()> make;
    // the op kinds it runs (a device that runs part of a net, as an FPGA); empty: every op
    std::function<bool(OpKind)> runs;
};
const std::vector<BackendFactory>& backends_under_test() {
    static const std::vector<BackendFactory> list = {
        {"cpu", [] { return std::make_unique<cpu::CpuBackend>(2); }, {}},
        {"fpga_emu:s10", [] { return std::make_unique<FpgaEmuBackend>("fpga_emu:s10"); }, predict::fpga_runs},
    };
    return list;
}

// ---- cases ------------------------------------------------------------------------------------------------
// How an input is filled: floats uniform in [lo, hi) (re-drawn near `avoid`, e.g. an activation's
// kinks; rounded to multiples of `step` when set, to make ties), index tensors uniform in [0, limit).
struct Fill {
    double lo = -1, hi = 1;
    int64_t limit = 0;
    std::vector<double> avoid = {};
    double step = 0;
};
using Fills = std::map<TensorId, Fill>;

struct Case {
    std::string name;
    std::function<void(Graph&, Fills&)> build;  // inputs and the node(s) under test
    bool bf16 = true;                           // also run in bf16 (compute and storage)
    OperandMask keep_f32_outputs = 0;           // bf16 run: outputs left in f32 (f32 weight gradients of a bf16 GEMM)
    OperandMask bf16_outputs = 0;               // f32 run: outputs stored in bf16 (an f32 loop rounding as it stores); f32 only
    bool training = true;
    int runs = 1;          // runs of the graph (step counters: Dropout, Adam)
    float lr_scale = 1, grad_scale = 1;  // the step's RunContext (optimizer updates)
    int64_t shard = 0;                   // ... and a data-parallel process's shard (dropout)
    bool exact = false;    // backends must agree bit for bit
    // bf16 run: the reference's result tracks its f32 result within bf16 rounding -- not where a 0/1 mask is
    // taken of a value rounded to bf16 (a pre-activation within half a bf16 step of ReLU6's 6 masks there)
    bool tracks_f32 = true;
    double tol = 1;        // tolerance multiplier
};

TensorDesc plain(Shape s) { return {std::move(s), DType::F32, Layout::Plain}; }
TensorDesc nhwc(Shape s) { return {std::move(s), DType::F32, Layout::ChannelsLast}; }
TensorId input(Graph& g, Fills& f, const std::string& name, const TensorDesc& d, Fill fill = {}) {
    const TensorId t = g.input(name, d);
    f[t] = std::move(fill);
    return t;
}
TensorId indices(Graph& g, Fills& f, const std::string& name, Shape s, int64_t limit) {
    return input(g, f, name, {std::move(s), DType::I32, Layout::Plain}, Fill{.limit = limit});
}
// Output descs of op `k` on inputs `in` (to shape a backward op's output-gradient input).
TensorDesc out_desc(OpKind k, Attrs a, const std::vector<TensorDesc>& in) {
    Node n;
    n.kind = k;
    n.attrs = std::move(a);
    return op_info(k).shape(n, in).front();
}
TensorId backward(Graph& g, OpKind k, Attrs a, std::vector<TensorId> in, std::optional<TensorDesc> grad_of = std::nullopt) {
    return g.add(k, std::move(a), std::move(in), std::string(op_name(k)), Phase::Backward, kNone, std::move(grad_of)).front();
}

void add_conv_cases(std::vector<Case>& cs, const std::string& tag, TensorDesc x, Shape w, ConvAttrs a) {
    const TensorDesc wd = plain(std::move(w));
    std::vector<TensorDesc> fwd_in = {x, wd};
    if (a.bias) fwd_in.push_back(plain({wd.shape[0]}));
    const TensorDesc y = out_desc(OpKind::Conv2d, a, fwd_in);
    for (OperandMask keep : {OperandMask(0), OperandMask(0b1)}) {  // 0b1: a bf16 product written in f32 (graph/ops.hpp gemm_may_write_f32)
        cs.push_back({"Conv2d_" + tag + (keep ? "_f32y" : ""), [=](Graph& g, Fills& f) {
                          std::vector<TensorId> in = {input(g, f, "x", x), input(g, f, "w", wd)};
                          if (a.bias) in.push_back(input(g, f, "b", fwd_in[2]));
                          g.add(OpKind::Conv2d, a, in, "conv");
                      }, true, keep});
        cs.push_back({"ConvBackwardData_" + tag + (keep ? "_f32dx" : ""), [=](Graph& g, Fills& f) {
                          backward(g, OpKind::ConvBackwardData, a, {input(g, f, "dy", y), input(g, f, "w", wd)}, x);
                      }, true, keep});
        cs.push_back({"ConvBackwardWeights_" + tag + (keep ? "_f32dw" : ""), [=](Graph& g, Fills& f) {
                          backward(g, OpKind::ConvBackwardWeights, a, {input(g, f, "dy", y), input(g, f, "x", x)}, wd);
                      }, true, keep});
    }
}

void add_linear_cases(std::vector<Case>& cs, const std::string& tag, Shape x, Shape w, bool bias) {
    const TensorDesc xd = plain(x), wd = plain(w);
    Shape ys = x;
    ys.back() = w[0];
    const TensorDesc yd = plain(ys);
    for (OperandMask keep : {OperandMask(0), OperandMask(0b1)}) {
        cs.push_back({"Linear_" + tag + (keep ? "_f32y" : ""), [=](Graph& g, Fills& f) {
                          std::vector<TensorId> in = {input(g, f, "x", xd), input(g, f, "w", wd)};
                          if (bias) in.push_back(input(g, f, "b", plain({wd.shape[0]})));
                          g.add(OpKind::Linear, LinearAttrs{bias}, in, "fc");
                      }, true, keep});
        cs.push_back({"LinearBackwardData_" + tag + (keep ? "_f32dx" : ""), [=](Graph& g, Fills& f) {
                          backward(g, OpKind::LinearBackwardData, LinearAttrs{bias}, {input(g, f, "dy", yd), input(g, f, "w", wd)}, xd);
                      }, true, keep});
        // a gradient sum folded in (plan/'s fold_grad_sums): dX = dY W + G, G f32 whatever the node computes in
        cs.push_back({"LinearBackwardData_" + tag + "_plus_g" + (keep ? "_f32dx" : ""), [=](Graph& g, Fills& f) {
                          backward(g, OpKind::LinearBackwardData, LinearAttrs{bias},
                                   {input(g, f, "dy", yd), input(g, f, "w", wd), input(g, f, "g", xd)}, xd);
                      }, true, keep});
        cs.push_back({"LinearBackwardWeights_" + tag + (keep ? "_f32dw" : ""), [=](Graph& g, Fills& f) {
                          backward(g, OpKind::LinearBackwardWeights, LinearAttrs{bias}, {input(g, f, "dy", yd), input(g, f, "x", xd)}, wd);
                      }, true, keep});
    }
}

// A one-input op on one shape; an eltwise backward reading (dY, X) (Relu, Relu6: (dY, Y)).
Case unary(const std::string& name, OpKind k, Attrs a, TensorDesc x, Fill fill = {}) {
    return {name, [=](Graph& g, Fills& f) { g.add(k, a, {input(g, f, "x", x, fill)}, "op"); }};
}
Case eltwise_backward(const std::string& name, OpKind k, TensorDesc x, Fill fill) {
    return {name, [=](Graph& g, Fills& f) { backward(g, k, NoAttrs{}, {input(g, f, "dy", x), input(g, f, "x", x, fill)}); }};
}

PoolAttrs pool(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
    PoolAttrs a;
    a.kernel[0] = kh, a.kernel[1] = kw, a.stride[0] = sh, a.stride[1] = sw, a.pad[0] = ph, a.pad[1] = pw;
    return a;
}
ConvAttrs conv(int64_t s0, int64_t s1, int64_t p0, int64_t p1, int64_t d0, int64_t d1, int64_t groups, bool bias) {
    ConvAttrs a;
    a.stride[0] = s0, a.stride[1] = s1, a.pad[0] = p0, a.pad[1] = p1, a.dilation[0] = d0, a.dilation[1] = d1;
    a.groups = groups, a.bias = bias;
    return a;
}

void add_pool_cases(std::vector<Case>& cs, const std::string& tag, TensorDesc x, PoolAttrs a) {
    const TensorDesc y = out_desc(OpKind::AvgPool2d, a, {x});
    cs.push_back(unary("MaxPool2d_" + tag, OpKind::MaxPool2d, a, x));
    // the backward reads the arg-max its forward wrote: forward and backward in one graph
    cs.push_back({"MaxPool2dBackward_" + tag, [=](Graph& g, Fills& f) {
                      const auto fwd = g.add(OpKind::MaxPool2d, a, {input(g, f, "x", x)}, "pool");
                      backward(g, OpKind::MaxPool2dBackward, a, {input(g, f, "dy", y), fwd[1]}, x);
                  }});
    // with an activation's backward folded in (plan/'s fuse pass commutes a ReLU / ReLU6 backward after the
    // pool's into it, Node::pre_op): (dY, argmax, Y_pool), Y_pool at and beyond the kinks
    for (const OpKind pre : {OpKind::ReluBackward, OpKind::Relu6Backward})
        cs.push_back({"MaxPool2dBackward_" + tag + "_fused_" + op_name(pre), [=](Graph& g, Fills& f) {
                          const auto fwd = g.add(OpKind::MaxPool2d, a, {input(g, f, "x", x)}, "pool");
                          backward(g, OpKind::MaxPool2dBackward, a, {input(g, f, "dy", y), fwd[1]}, x);
                          const Node pool = g.node(NodeId(0));
                          Node n = g.node(NodeId(1));
                          n.inputs.push_back(input(g, f, "y_pool", y, Fill{.lo = -1, .hi = 7, .step = 0.5}));
                          n.pre_op = pre;
                          g = g.tensors_only();
                          g.append(pool);
                          g.append(std::move(n));
                      }});
    cs.push_back(unary("AvgPool2d_" + tag, OpKind::AvgPool2d, a, x));
    cs.push_back({"AvgPool2dBackward_" + tag, [=](Graph& g, Fills& f) {
                      backward(g, OpKind::AvgPool2dBackward, a, {input(g, f, "dy", y)}, x);
                  }});
}

std::vector<Case> make_cases() {
    std::vector<Case> cs;
    using K = OpKind;
    // convolution: groups + dilation + asymmetric stride/pad + bias in nhwc; plain without bias; strided nhwc
    add_conv_cases(cs, "grouped_dilated_nhwc", nhwc({2, 4, 7, 6}), {6, 2, 3, 3}, conv(2, 1, 1, 2, 1, 2, 2, true));
    add_conv_cases(cs, "plain_nobias", plain({1, 3, 5, 5}), {4, 3, 2, 2}, conv(1, 1, 0, 0, 1, 1, 1, false));
    add_conv_cases(cs, "strided_nhwc", nhwc({2, 3, 9, 8}), {5, 3, 3, 3}, conv(2, 2, 1, 1, 1, 1, 1, true));
    // forwards and (f32) backward-weights with fewer than 16 output channels, stride 1 (the cpu's loops of its
    // own, conv_small.cpp): LeNet-5's conv1 (3 images on 2 threads: bands of rows, a short last one; 19 columns:
    // a vector and a tail); 11 output channels (blocks of 8 and 3; backward-weights: 4 of 3, one zero plane) over 3
    // input channels, a 7x7 window with unequal padding, 33 output columns; 17 input channels (more than one
    // de-interleaving permute covers)
    add_conv_cases(cs, "small_lenet", nhwc({3, 1, 21, 19}), {6, 1, 5, 5}, conv(1, 1, 2, 2, 1, 1, 1, true));
    add_conv_cases(cs, "small_wide", nhwc({1, 3, 6, 37}), {11, 3, 7, 7}, conv(1, 1, 3, 1, 1, 1, 1, false));
    add_conv_cases(cs, "small_17in", nhwc({2, 17, 5, 6}), {4, 17, 3, 3}, conv(1, 1, 1, 1, 1, 1, 1, true));
    // backward-data (f32) into at most 8 channels from whole vectors of dY's (conv_small.cpp's third loop):
    // LeNet-5's conv2 (6 channels: blocks of 4 pixels, 13 columns leave a block of 1; a 10x9 dY leaves most
    // input pixels short of taps); 32 output channels (two vectors per dY pixel) into 3 with unequal padding
    // (taps past every edge); one channel into 16-pixel blocks with a tail
    add_conv_cases(cs, "small_dx_lenet", nhwc({3, 6, 14, 13}), {16, 6, 5, 5}, conv(1, 1, 0, 0, 1, 1, 1, true));
    add_conv_cases(cs, "small_dx_pad", nhwc({2, 3, 7, 9}), {32, 3, 3, 4}, conv(1, 1, 2, 1, 1, 1, 1, false));
    add_conv_cases(cs, "small_dx_1c", nhwc({2, 1, 5, 21}), {16, 1, 3, 3}, conv(1, 1, 1, 1, 1, 1, 1, true));

    add_linear_cases(cs, "bias", {5, 7}, {4, 7}, true);
    add_linear_cases(cs, "rank3_nobias", {2, 3, 7}, {5, 7}, false);
    // the cpu backend's own loops for a few rows (backend/cpu/linear_rows.cpp): whole vectors and a tail, rows
    // of the weight past the last whole block, one row and the most rows; a weight gradient too large for the
    // caches (written with non-temporal stores); past the most rows, oneDNN again
    add_linear_cases(cs, "rows3_bias", {3, 37}, {21, 37}, true);
    add_linear_cases(cs, "rows1", {1, 64}, {9, 64}, false);
    add_linear_cases(cs, "rows4_bias", {2, 2, 50}, {6, 50}, true);
    add_linear_cases(cs, "rows2_large_gradient", {2, 1024}, {2100, 1024}, true);
    add_linear_cases(cs, "rows5_onednn", {5, 40}, {5, 40}, true);

    auto matmul = [&](const std::string& tag, Shape a, Shape b, MatMulAttrs at) {
        for (OperandMask keep : {OperandMask(0), OperandMask(0b1)})
            cs.push_back({"MatMul_" + tag + (keep ? "_f32y" : ""), [=](Graph& g, Fills& f) {
                              g.add(K::MatMul, at, {input(g, f, "a", plain(a)), input(g, f, "b", plain(b))}, "mm");
                          }, true, keep});
    };
    matmul("batched", {2, 3, 4}, {2, 4, 5}, {});
    matmul("trans_a_alpha", {2, 4, 3}, {2, 4, 5}, {true, false, 0.5f});
    matmul("trans_b", {3, 4}, {5, 4}, {false, true, 1.0f});
    matmul("both_rank4", {2, 2, 4, 3}, {2, 2, 5, 4}, {true, true, -1.5f});
    // transposes folded in (plan/'s fold_transposes, MatMulAttrs::perm_*): BERT's head split read as [B, heads,
    // S, D] from [B, S, heads, D] storage (scores: B transposed too), the merge written back so; a perm of three
    // leading dims with A transposed, C written through another
    const std::vector<int64_t> heads{0, 2, 1, 3};
    matmul("perm_heads_scores", {2, 3, 2, 4}, {2, 3, 2, 4}, {false, true, 0.5f, heads, heads, {}});
    matmul("perm_heads_context", {2, 2, 3, 3}, {2, 3, 2, 4}, {false, false, 1.0f, {}, heads, heads});
    matmul("perm_trans_a_out", {2, 5, 3, 2, 3}, {3, 2, 2, 5, 4}, {true, false, 1.0f, {2, 0, 3, 1, 4}, {}, {1, 2, 0, 3, 4}});

    // normalisation: inputs (X, gamma, beta, running mean, running var)
    auto batch_norm = [&](const std::string& tag, TensorDesc x, bool training) {
        Case c{"BatchNorm2d_" + tag, [=](Graph& g, Fills& f) {
                   const TensorDesc ch = plain({x.shape[1]});
                   g.add(K::BatchNorm2d, NormAttrs{1e-5f, 0.1f},
                         {input(g, f, "x", x, {-2, 3}), input(g, f, "gamma", ch, {0.5, 1.5}), input(g, f, "beta", ch),
                          input(g, f, "running_mean", ch), input(g, f, "running_var", ch, {0.5, 1.5})},
                         "bn");
               }};
        c.training = training;
        c.runs = 2;
        cs.push_back(c);
    };
    batch_norm("nhwc", nhwc({3, 4, 5, 3}), true);
    batch_norm("plain", plain({2, 3, 4, 4}), true);
    batch_norm("inference", nhwc({3, 4, 5, 3}), false);
    batch_norm("wide_nhwc", nhwc({4, 40, 6, 6}), true);
    batch_norm("vectors_nhwc", nhwc({2, 144, 3, 3}), true);  // the cpu loops' 16-lane path: 8 + 1 vectors of channels
    batch_norm("row_blocks_nhwc", nhwc({2, 32, 12, 12}), true);  // ... over more rows than a block
    batch_norm("tiled_nhwc", nhwc({3, 24, 15, 15}), true);  // 24 channels: rows of 2 pixels, 3 vectors; an odd pixel left
    batch_norm("lanes_split_nhwc", nhwc({1, 1040, 7, 7}), true);  // rows within a block on two threads: 65 vectors of lanes split
    auto norm_backward = [&](const std::string& name, K k, TensorDesc x, Shape stat) {
        cs.push_back({name, [=](Graph& g, Fills& f) {
                          const TensorDesc gm = plain({k == K::BatchNormBackward ? x.shape[1] : x.shape.back()});
                          g.add(k, NormAttrs{},
                                {input(g, f, "dy", x), input(g, f, "x", x), input(g, f, "gamma", gm, {0.5, 1.5}),
                                 input(g, f, "mean", plain(stat), {-0.3, 0.3}), input(g, f, "var", plain(stat), {0.3, 0.6})},
                                "bwd");
                      }});
    };
    norm_backward("BatchNormBackward_nhwc", K::BatchNormBackward, nhwc({3, 4, 5, 3}), {4});
    norm_backward("BatchNormBackward_plain", K::BatchNormBackward, plain({2, 3, 4, 4}), {3});
    norm_backward("BatchNormBackward_vectors_nhwc", K::BatchNormBackward, nhwc({2, 144, 3, 3}), {144});
    norm_backward("BatchNormBackward_tiled_nhwc", K::BatchNormBackward, nhwc({3, 24, 15, 15}), {24});
    norm_backward("BatchNormBackward_lanes_split_nhwc", K::BatchNormBackward, nhwc({1, 1040, 7, 7}), {1040});
    // an activation's backward folded into batch norm's (plan/'s fuse pass, Node::pre_op): the node reads
    // (dY, X, gamma, mean, var, Y), Y the activation's output, some of it at and beyond ReLU6's ends
    for (const OpKind pre : {K::ReluBackward, K::Relu6Backward})
        for (const auto& [tag, x] : {std::pair{"nhwc", nhwc({3, 4, 5, 3})}, {"plain", plain({2, 3, 4, 4})}, {"wide_nhwc", nhwc({2, 40, 3, 3})},
                                          {"vectors_nhwc", nhwc({2, 144, 3, 3})}, {"row_blocks_nhwc", nhwc({2, 32, 12, 12})},
                                          {"tiled_nhwc", nhwc({3, 24, 15, 15})}})
            cs.push_back({std::string("BatchNormBackward_") + tag + "_fused_" + op_name(pre), [=](Graph& g, Fills& f) {
                              const TensorDesc c = plain({x.shape[1]});
                              g.add(K::BatchNormBackward, NormAttrs{},
                                    {input(g, f, "dy", x), input(g, f, "x", x), input(g, f, "gamma", c, {0.5, 1.5}),
                                     input(g, f, "mean", c, {-0.3, 0.3}), input(g, f, "var", c, {0.3, 0.6})},
                                    "bwd");
                              Node n = g.node(NodeId(0));
                              n.inputs.push_back(input(g, f, "y", x, Fill{.lo = -1, .hi = 7, .step = 0.5}));
                              n.pre_op = pre;
                              g = g.tensors_only();
                              g.append(std::move(n));
                          }});
    // ... recomputing Y from X and beta (NormAttrs::recompute_act): (dY, X, gamma, mean, var, beta), X spread
    // so that the pre-activations reach beyond both of ReLU6's ends
    for (const OpKind pre : {K::ReluBackward, K::Relu6Backward})
        for (const auto& [tag, x] : {std::pair{"nhwc", nhwc({3, 4, 5, 3})}, {"plain", plain({2, 3, 4, 4})}, {"wide_nhwc", nhwc({2, 40, 3, 3})},
                                          {"vectors_nhwc", nhwc({2, 144, 3, 3})}, {"row_blocks_nhwc", nhwc({2, 32, 12, 12})},
                                          {"tiled_nhwc", nhwc({3, 24, 15, 15})}})
            cs.push_back({.name = std::string("BatchNormBackward_") + tag + "_fused_" + op_name(pre) + "_recomputed", .build = [=](Graph& g, Fills& f) {
                              const TensorDesc c = plain({x.shape[1]});
                              g.add(K::BatchNormBackward, NormAttrs{.recompute_act = true},
                                    {input(g, f, "dy", x), input(g, f, "x", x, {-3, 4}), input(g, f, "gamma", c, {0.5, 1.5}),
                                     input(g, f, "mean", c, {-0.3, 0.3}), input(g, f, "var", c, {0.3, 0.6})},
                                    "bwd");
                              Node n = g.node(NodeId(0));
                              n.inputs.push_back(input(g, f, "beta", c, {-0.5, 1.5}));
                              n.pre_op = pre;
                              g = g.tensors_only();
                              g.append(std::move(n));
                          }, .tracks_f32 = false});
    // the ReLU / ReLU6 backward alone (the cpu backend's loop), Y at and beyond the kinks, on two threads
    for (const OpKind act : {K::ReluBackward, K::Relu6Backward})
        cs.push_back(eltwise_backward(std::string(op_name(act)) + "_wide_nhwc_kinks", act, nhwc({2, 24, 29, 31}), Fill{.lo = -1, .hi = 7, .step = 0.5}));
    // a residual junction's gradient sum folded into the ReLU / ReLU6 backward reading it (Node::pre_op Add):
    // the node reads (a, Y, b), Y at and beyond the kinks (the cpu loop keeps the reference's conventions);
    // the larger shape runs on two threads with vector tails
    for (const OpKind act : {K::ReluBackward, K::Relu6Backward})
        for (const auto& [tag, x] : {std::pair{"nhwc", nhwc({2, 3, 4, 5})}, {"plain", plain({3, 7})}, {"wide_nhwc", nhwc({2, 24, 29, 31})}})
            cs.push_back({std::string(op_name(act)) + "_" + tag + "_fused_Add", [=](Graph& g, Fills& f) {
                              g.add(act, NoAttrs{}, {input(g, f, "a", x, {-2, 2}), input(g, f, "y", x, Fill{.lo = -1, .hi = 7, .step = 0.5})}, "bwd",
                                    Phase::Backward);
                              Node n = g.node(NodeId(0));
                              n.inputs.push_back(input(g, f, "b", x, {-2, 2}));
                              n.pre_op = K::Add;
                              g = g.tensors_only();
                              g.append(std::move(n));
                          }});
    auto layer_norm = [&](const std::string& tag, Shape x) {
        cs.push_back({"LayerNorm_" + tag, [=](Graph& g, Fills& f) {
                          const TensorDesc h = plain({x.back()});
                          g.add(K::LayerNorm, NormAttrs{}, {input(g, f, "x", plain(x), {-2, 3}), input(g, f, "gamma", h, {0.5, 1.5}), input(g, f, "beta", h)}, "ln");
                      }});
    };
    layer_norm("2d", {4, 9});
    layer_norm("3d", {2, 3, 6});
    norm_backward("LayerNormBackward_2d", K::LayerNormBackward, plain({4, 9}), {4});
    norm_backward("LayerNormBackward_3d", K::LayerNormBackward, plain({2, 3, 6}), {2, 3});
    // past a small node: rows split between the threads; the backward's dgamma / dbeta summed in three parts of rows
    layer_norm("rows_threads", {600, 40});
    norm_backward("LayerNormBackward_parts", K::LayerNormBackward, plain({2, 300, 40}), {2, 300});

    // activations, away from their kinks (where derivative conventions differ)
    const Fill relu_fill{-3, 8}, smooth_fill{-4, 4};
    const std::pair<K, K> acts[] = {{K::Relu, K::ReluBackward}, {K::Relu6, K::Relu6Backward}, {K::Gelu, K::GeluBackward},
                                    {K::Sigmoid, K::SigmoidBackward}, {K::Tanh, K::TanhBackward}};
    for (auto [fwd, bwd] : acts) {
        const Fill fill = fwd == K::Relu || fwd == K::Relu6 ? relu_fill : smooth_fill;
        cs.push_back(unary(std::string(op_name(fwd)) + "_nhwc", fwd, NoAttrs{}, nhwc({2, 3, 4, 5}), fill));
        cs.push_back(unary(std::string(op_name(fwd)) + "_plain", fwd, NoAttrs{}, plain({3, 7}), fill));
        cs.push_back(eltwise_backward(std::string(op_name(bwd)) + "_nhwc", bwd, nhwc({2, 3, 4, 5}), fill));
        cs.push_back(eltwise_backward(std::string(op_name(bwd)) + "_plain", bwd, plain({3, 7}), fill));
    }

    // pooling: padded 3x3/2 in nhwc, odd plain 2x3 windows, a 16x16 window (i32 arg-max)
    add_pool_cases(cs, "3x3s2p1_nhwc", nhwc({2, 3, 7, 8}), pool(3, 3, 2, 2, 1, 1));
    add_pool_cases(cs, "2x3_plain", plain({1, 2, 5, 7}), pool(2, 3, 1, 2, 1, 1));
    add_pool_cases(cs, "16x16_i32_argmax", plain({1, 2, 17, 16}), pool(16, 16, 1, 1, 0, 0));
    // windows tiling the image (the cpu backend's max-pool backward loop): 6 channels with a row and a column
    // past the last window, LeNet-5's first pool large enough for two threads, 64, 70, 16 and 40 channels, 3x3 /
    // 3, and a 16x16 / 16 window's i32 arg-max in nhwc -- f32 only: 256 bf16 values tie at the top, and oneDNN's
    // nhwc forward does not pick the first of them
    add_pool_cases(cs, "2x2s2_tiled_nhwc", nhwc({2, 6, 9, 7}), pool(2, 2, 2, 2, 0, 0));
    add_pool_cases(cs, "2x2s2_tiled_lenet_nhwc", nhwc({16, 6, 28, 28}), pool(2, 2, 2, 2, 0, 0));
    add_pool_cases(cs, "2x2s2_tiled_64c_nhwc", nhwc({1, 64, 4, 6}), pool(2, 2, 2, 2, 0, 0));
    add_pool_cases(cs, "2x2s2_tiled_70c_nhwc", nhwc({1, 70, 4, 5}), pool(2, 2, 2, 2, 0, 0));  // AVX-512: 16 channels at a time, a part of 6
    add_pool_cases(cs, "2x2s2_tiled_16c_nhwc", nhwc({3, 16, 10, 10}), pool(2, 2, 2, 2, 0, 0));  // LeNet-5's second pool (oneDNN without AVX-512)
    add_pool_cases(cs, "2x2s2_tiled_40c_nhwc", nhwc({2, 40, 6, 4}), pool(2, 2, 2, 2, 0, 0));
    add_pool_cases(cs, "3x3s3_tiled_nhwc", nhwc({2, 3, 7, 8}), pool(3, 3, 3, 3, 0, 0));
    {
        std::vector<Case> i32;
        add_pool_cases(i32, "16x16s16_i32_argmax_nhwc", nhwc({1, 3, 17, 16}), pool(16, 16, 16, 16, 0, 0));
        Case backward = i32[1];
        backward.bf16 = false;
        cs.push_back(backward);
    }
    // arg-max of tied windows: the first maximal element; all-negative padded windows: padding never wins
    cs.push_back(unary("MaxPool2d_ties", K::MaxPool2d, pool(3, 3, 2, 2, 1, 1), nhwc({2, 3, 7, 8}), Fill{.lo = -1, .hi = 1, .step = 1}));
    cs.push_back(unary("MaxPool2d_negative_padded", K::MaxPool2d, pool(3, 2, 1, 2, 1, 1), plain({1, 3, 5, 6}), Fill{.lo = -2, .hi = -1}));
    for (const TensorDesc& x : {nhwc({2, 3, 4, 5}), plain({1, 4, 3, 3})}) {
        const std::string tag = x.layout == Layout::ChannelsLast ? "nhwc" : "plain";
        cs.push_back(unary("GlobalAvgPool_" + tag, K::GlobalAvgPool, NoAttrs{}, x));
        cs.push_back({"GlobalAvgPoolBackward_" + tag, [=](Graph& g, Fills& f) {
                          backward(g, K::GlobalAvgPoolBackward, NoAttrs{}, {input(g, f, "dy", out_desc(K::GlobalAvgPool, NoAttrs{}, {x}))}, x);
                      }});
    }

    // binary ops (mixed storage layouts too)
    auto binary = [&](K k, const std::string& tag, TensorDesc a, TensorDesc b) {
        cs.push_back({std::string(op_name(k)) + "_" + tag, [=](Graph& g, Fills& f) { g.add(k, NoAttrs{}, {input(g, f, "a", a), input(g, f, "b", b)}, "op"); }});
    };
    binary(K::Add, "nhwc_plus_plain", nhwc({2, 3, 4, 5}), plain({2, 3, 4, 5}));
    binary(K::Add, "plain", plain({3, 7}), plain({3, 7}));
    binary(K::Mul, "nhwc", nhwc({2, 3, 4, 5}), nhwc({2, 3, 4, 5}));
    binary(K::Mul, "plain", plain({3, 7}), plain({3, 7}));
    binary(K::Sub, "plain", plain({3, 7}), plain({3, 7}));
    binary(K::Add, "broadcast_channel_nhwc", nhwc({2, 3, 4, 5}), plain({3, 1, 1}));
    binary(K::Mul, "broadcast_rows", plain({2, 3, 7}), plain({3, 1}));
    binary(K::Sub, "broadcast_mean", plain({2, 3, 7}), plain({2, 3, 1}));
    const Fill positive{0.5, 2};
    for (const auto& [tag, a, b] : {std::tuple{"plain", plain({3, 7}), plain({3, 7})}, std::tuple{"broadcast", plain({2, 3, 7}), plain({7})}}) {
        cs.push_back({std::string("Div_") + tag, [=](Graph& g, Fills& f) { g.add(K::Div, NoAttrs{}, {input(g, f, "a", a), input(g, f, "b", b, positive)}, "op"); }});
    }
    for (const TensorDesc& x : {nhwc({2, 3, 4, 5}), plain({3, 7})}) {
        const std::string tag = x.layout == Layout::ChannelsLast ? "nhwc" : "plain";
        cs.push_back(unary("Sqrt_" + tag, K::Sqrt, NoAttrs{}, x, positive));
        cs.push_back(eltwise_backward("SqrtBackward_" + tag, K::SqrtBackward, x, positive));
        cs.push_back(unary("Pow_" + tag, K::Pow, PowAttrs{1.5f}, x, positive));
        cs.push_back({"PowBackward_" + tag, [=](Graph& g, Fills& f) {
                          backward(g, K::PowBackward, PowAttrs{1.5f}, {input(g, f, "dy", x), input(g, f, "x", x, positive)});
                      }});
    }
    cs.push_back(unary("Pow_square", K::Pow, PowAttrs{2.0f}, plain({3, 7})));
    for (const TensorDesc& x : {nhwc({2, 3, 4, 5}), plain({3, 7})}) {  // clamps away from the edges (where conventions differ)
        const std::string tag = x.layout == Layout::ChannelsLast ? "nhwc" : "plain";
        const Fill fill{-2, 2, 0, {-0.5, 1.25}};
        cs.push_back(unary("Clip_" + tag, K::Clip, ClipAttrs{-0.5f, 1.25f}, x, fill));
        cs.push_back({"ClipBackward_" + tag, [=](Graph& g, Fills& f) {
                          backward(g, K::ClipBackward, ClipAttrs{-0.5f, 1.25f}, {input(g, f, "dy", x), input(g, f, "x", x, fill)});
                      }});
    }
    // sums to a broadcast source's shape and broadcasts (ReduceMean / ReduceSum, ONNX Expand, gradients of broadcasts)
    cs.push_back(unary("SumTo_mean_last_axis", K::SumTo, BroadcastAttrs{{2, 3, 1}, 1.0f / 7}, plain({2, 3, 7})));
    cs.push_back(unary("SumTo_nhwc_to_channels", K::SumTo, BroadcastAttrs{{3, 1, 1}, -1.0f}, nhwc({2, 3, 4, 5})));
    cs.push_back(unary("SumTo_nhwc_to_nhwc", K::SumTo, BroadcastAttrs{{1, 3, 1, 1}, 1.0f, Layout::ChannelsLast}, nhwc({2, 3, 4, 5})));
    cs.push_back(unary("SumTo_scaled_copy", K::SumTo, BroadcastAttrs{{2, 3, 4, 5}, -1.0f, Layout::Plain}, nhwc({2, 3, 4, 5})));
    cs.push_back(unary("Expand_rows", K::Expand, BroadcastAttrs{{2, 3, 7}, 0.5f}, plain({3, 1})));
    cs.push_back(unary("Expand_to_nhwc", K::Expand, BroadcastAttrs{{2, 3, 4, 5}, 1.0f, Layout::ChannelsLast}, plain({1, 3, 1, 1})));

    // data movement
    auto concat = [&](const std::string& tag, int64_t axis, std::vector<TensorDesc> xs) {
        cs.push_back({"Concat_" + tag, [=](Graph& g, Fills& f) {
                          std::vector<TensorId> in;
                          for (size_t i = 0; i < xs.size(); ++i) in.push_back(input(g, f, "x" + std::to_string(i), xs[i]));
                          g.add(K::Concat, AxisAttrs{axis}, in, "cat");
                      }});
    };
    concat("channels_nhwc", 1, {nhwc({2, 2, 3, 4}), nhwc({2, 3, 3, 4}), nhwc({2, 1, 3, 4})});
    concat("last_plain", -1, {plain({2, 3}), plain({2, 5})});
    concat("axis0_rank3", 0, {plain({1, 3, 2}), plain({2, 3, 2})});
    auto slice = [&](const std::string& tag, TensorDesc x, SliceAttrs s) {
        cs.push_back(unary("Slice_" + tag, K::Slice, s, x));
        cs.push_back({"SliceBackward_" + tag, [=](Graph& g, Fills& f) {
                          backward(g, K::SliceBackward, s, {input(g, f, "dy", out_desc(K::Slice, s, {x}))}, x);
                      }});
    };
    slice("channels_nhwc", nhwc({2, 5, 3, 4}), {1, 1, 3});
    slice("cols_plain", plain({4, 7}), {1, 2, 4});
    slice("negative_axis", plain({3, 5, 2}), {-2, 3, 2});
    cs.push_back(unary("Reshape_nhwc_to_plain", K::Reshape, ReshapeAttrs{{2, -1}, Layout::Plain}, nhwc({2, 3, 4, 5})));
    cs.push_back(unary("Reshape_plain_to_nhwc", K::Reshape, ReshapeAttrs{{2, 5, 3, 4}, Layout::ChannelsLast}, plain({2, 60})));
    cs.push_back(unary("Reshape_plain", K::Reshape, ReshapeAttrs{{3, 40}, Layout::Plain}, plain({6, 20})));
    cs.push_back(unary("Reshape_one_channel_nhwc", K::Reshape, ReshapeAttrs{{2, 12}, Layout::Plain}, nhwc({2, 1, 3, 4})));
    cs.push_back(unary("Transpose_rank3", K::Transpose, TransposeAttrs{{2, 0, 1}}, plain({2, 3, 4})));
    cs.push_back(unary("Transpose_nhwc", K::Transpose, TransposeAttrs{{0, 2, 3, 1}}, nhwc({2, 3, 4, 5})));
    // attention heads: the innermost axis stays (row copies on the cpu), rows split between threads
    cs.push_back(unary("Transpose_heads", K::Transpose, TransposeAttrs{{0, 2, 1, 3}}, plain({4, 33, 4, 40})));

    // dropout: masks bit-identical across backends, over two steps; inference is the identity
    auto dropout = [&](const std::string& tag, TensorDesc x, float p, bool training) {
        Case c = unary("Dropout_" + tag, K::Dropout, DropoutAttrs{p, 42}, x);
        c.runs = 2, c.exact = true, c.training = training;
        cs.push_back(c);
    };
    dropout("plain", plain({4, 33}), 0.3f, true);
    dropout("nhwc", nhwc({2, 3, 5, 7}), 0.5f, true);
    dropout("inference", nhwc({2, 3, 5, 7}), 0.5f, false);
    Case shard = cs.back();  // the second process of a data-parallel job
    shard.name = "Dropout_shard1", shard.training = true, shard.shard = 1;
    cs.push_back(shard);

    // softmax, embedding, loss
    cs.push_back(unary("Softmax_2d", K::Softmax, AxisAttrs{-1}, plain({3, 7}), {-3, 3}));
    cs.push_back(unary("Softmax_3d", K::Softmax, AxisAttrs{2}, plain({2, 3, 5}), {-3, 3}));
    // rows of whole vectors and a tail (cpu's loop: 16 lanes), and rows whose smaller terms underflow (exp below -87)
    cs.push_back(unary("Softmax_rows_37", K::Softmax, AxisAttrs{-1}, plain({5, 37}), {-3, 3}));
    cs.push_back(unary("Softmax_rows_128_wide", K::Softmax, AxisAttrs{-1}, plain({64, 128}), {-60, 60}));
    cs.push_back({"SoftmaxBackward", [=](Graph& g, Fills& f) {
                      backward(g, K::SoftmaxBackward, AxisAttrs{-1}, {input(g, f, "dy", plain({3, 7})), input(g, f, "y", plain({3, 7}), {0, 1})});
                  }});
    cs.push_back({"SoftmaxBackward_rows_37", [=](Graph& g, Fills& f) {
                      backward(g, K::SoftmaxBackward, AxisAttrs{-1}, {input(g, f, "dy", plain({6, 37})), input(g, f, "y", plain({6, 37}), {0, 1})});
                  }});
    cs.push_back({"Embedding", [=](Graph& g, Fills& f) {
                      g.add(K::Embedding, NoAttrs{}, {indices(g, f, "idx", {2, 5}, 11), input(g, f, "table", plain({11, 6}))}, "emb");
                  }, false});
    cs.push_back({"EmbeddingBackward", [=](Graph& g, Fills& f) {  // 10 indices into 4 rows: repeated rows
                      backward(g, K::EmbeddingBackward, NoAttrs{}, {input(g, f, "dy", plain({2, 5, 6})), indices(g, f, "idx", {2, 5}, 4)}, plain({4, 6}));
                  }, false});
    // ... past a small node (on both threads): 512 indices into 30 rows (cpu: a table per thread, added up by rows),
    // and into 4000 rows, a table past 1 MiB (each thread its own columns: 72 = 4.5 lines of 16)
    cs.push_back({"EmbeddingBackward_threads", [=](Graph& g, Fills& f) {
                      backward(g, K::EmbeddingBackward, NoAttrs{}, {input(g, f, "dy", plain({4, 128, 72})), indices(g, f, "idx", {4, 128}, 30)}, plain({30, 72}));
                  }, false});
    cs.push_back({"EmbeddingBackward_threads_large_table", [=](Graph& g, Fills& f) {
                      backward(g, K::EmbeddingBackward, NoAttrs{}, {input(g, f, "dy", plain({4, 128, 72})), indices(g, f, "idx", {4, 128}, 4000)},
                               plain({4000, 72}));
                  }, false});
    cs.push_back({"SoftmaxCrossEntropy", [=](Graph& g, Fills& f) {
                      g.add(K::SoftmaxCrossEntropy, NoAttrs{}, {input(g, f, "logits", plain({5, 7}), {-3, 3}), indices(g, f, "labels", {5}, 7)}, "loss");
                  }, false});
    cs.push_back({"SoftmaxCrossEntropyBackward", [=](Graph& g, Fills& f) {
                      backward(g, K::SoftmaxCrossEntropyBackward, NoAttrs{},
                               {input(g, f, "dloss", plain({1}), {0.5, 2}), input(g, f, "probs", plain({5, 7}), {0, 1}), indices(g, f, "labels", {5}, 7)});
                  }, false});

    // optimizer updates (in place; Adam's bias correction over three steps)
    Case sgd_momentum{"SgdUpdate_momentum", [=](Graph& g, Fills& f) {
                          g.add(K::SgdUpdate, SgdAttrs{0.1f, 0.9f, 0.01f},
                                {input(g, f, "p", plain({3, 5})), input(g, f, "g", plain({3, 5})), input(g, f, "v", plain({3, 5}))}, "sgd");
                      }, false};
    sgd_momentum.runs = 2;
    cs.push_back(sgd_momentum);
    cs.push_back({"SgdUpdate_plain", [=](Graph& g, Fills& f) {
                      g.add(K::SgdUpdate, SgdAttrs{0.05f, 0.0f, 0.0f}, {input(g, f, "p", plain({7})), input(g, f, "g", plain({7}))}, "sgd");
                  }, false});
    Case adam{"AdamUpdate", [=](Graph& g, Fills& f) {
                  g.add(K::AdamUpdate, AdamAttrs{0.01f, 0.9f, 0.999f, 1e-8f, 0.01f},
                        {input(g, f, "p", plain({4, 6})), input(g, f, "g", plain({4, 6})), input(g, f, "m", plain({4, 6}), {-0.1, 0.1}),
                         input(g, f, "v", plain({4, 6}), {0, 0.1})},
                        "adam");
              }, false};
    adam.runs = 3;
    cs.push_back(adam);
    // AdamW, and SGD with momentum, at a scheduled lr and an accumulated, clipped gradient
    Case adamw{"AdamUpdate_decoupled_scaled", [=](Graph& g, Fills& f) {
                   g.add(K::AdamUpdate, AdamAttrs{0.01f, 0.9f, 0.999f, 1e-8f, 0.05f, true},
                         {input(g, f, "p", plain({4, 6})), input(g, f, "g", plain({4, 6})), input(g, f, "m", plain({4, 6}), {-0.1, 0.1}),
                          input(g, f, "v", plain({4, 6}), {0, 0.1})},
                         "adamw");
               }, false};
    adamw.runs = 3, adamw.lr_scale = 0.3f, adamw.grad_scale = 0.25f;
    cs.push_back(adamw);
    Case sgd_scaled = sgd_momentum;
    sgd_scaled.name = "SgdUpdate_momentum_scaled", sgd_scaled.lr_scale = 0.5f, sgd_scaled.grad_scale = 0.2f;
    cs.push_back(sgd_scaled);
    // updates keeping the parameter's bf16 copy (low_copies: plan/'s fold_casts), which they rewrite as they
    // update
    const TensorDesc copy = {{3, 5}, DType::BF16, Layout::Plain};
    Case sgd_copy{"SgdUpdate_momentum_copy", [=](Graph& g, Fills& f) {
                      g.add(K::SgdUpdate, SgdAttrs{0.1f, 0.9f, 0.01f, 1},
                            {input(g, f, "p", plain({3, 5})), input(g, f, "g", plain({3, 5})), input(g, f, "v", plain({3, 5})), input(g, f, "c", copy)}, "sgd");
                  }, false};
    sgd_copy.runs = 2;
    cs.push_back(sgd_copy);
    cs.push_back({"SgdUpdate_plain_copy", [=](Graph& g, Fills& f) {
                      g.add(K::SgdUpdate, SgdAttrs{0.05f, 0.0f, 0.0f, 1}, {input(g, f, "p", plain({3, 5})), input(g, f, "g", plain({3, 5})), input(g, f, "c", copy)}, "sgd");
                  }, false});
    // ... in blocks, a copy past the caches written with non-temporal stores (kStreamBytes), split between threads
    const TensorDesc large = plain({1050, 1001}), large_copy = {{1050, 1001}, DType::BF16, Layout::Plain};
    cs.push_back({"SgdUpdate_momentum_copy_large", [=](Graph& g, Fills& f) {
                      g.add(K::SgdUpdate, SgdAttrs{0.1f, 0.9f, 0.01f, 1},
                            {input(g, f, "p", large), input(g, f, "g", large), input(g, f, "v", large), input(g, f, "c", large_copy)}, "sgd");
                  }, false});
    Case adam_copy{"AdamUpdate_copy", [=](Graph& g, Fills& f) {
                       g.add(K::AdamUpdate, AdamAttrs{0.01f, 0.9f, 0.999f, 1e-8f, 0.01f, false, 1},
                             {input(g, f, "p", plain({3, 5})), input(g, f, "g", plain({3, 5})), input(g, f, "m", plain({3, 5}), {-0.1, 0.1}),
                              input(g, f, "v", plain({3, 5}), {0, 0.1}), input(g, f, "c", copy)},
                             "adam");
                   }, false};
    adam_copy.runs = 3;
    cs.push_back(adam_copy);

    // plan-implied nodes
    auto cast = [&](const std::string& tag, TensorDesc x, DType to) {
        Case c = unary("Cast_" + tag, K::Cast, CastAttrs{to}, x, {-100, 100});
        c.bf16 = false, c.exact = true;
        cs.push_back(c);
    };
    cast("f32_to_bf16_nhwc", nhwc({2, 3, 4, 5}), DType::BF16);
    cast("bf16_to_f32", {{3, 7}, DType::BF16, Layout::Plain}, DType::F32);
#if defined(__FLT16_MANT_DIG__)
    cast("f32_to_f16", plain({3, 7}), DType::F16);
#endif
    for (const TensorDesc& x : {plain({5, 7}), TensorDesc{{2, 3, 4, 5}, DType::BF16, Layout::ChannelsLast}}) {
        Case c = unary(std::string("Transfer_") + dtype_name(x.dtype), K::Transfer, TransferAttrs{"elsewhere", "here"}, x);
        c.bf16 = false, c.exact = true;
        cs.push_back(c);
    }

    // data-parallel gradient averaging over one process: each gradient is its own mean
    Case allreduce{"AllReduce_bucket_of_two", [=](Graph& g, Fills& f) {
                       const std::vector<Shape> shapes = {{3, 4}, {5}};
                       const TensorId a = input(g, f, "ga", plain(shapes[0])), b = input(g, f, "gb", plain(shapes[1]));
                       const TensorId sum = g.add(K::AllReduceStart, AllReduceAttrs{shapes}, {a, b}, "allreduce:0", Phase::Backward).front();
                       g.add(K::AllReduceWait, AllReduceAttrs{shapes}, {sum}, "allreduce:0:wait", Phase::Backward);
                   }, false};
    allreduce.exact = true;
    cs.push_back(allreduce);

    // a whole training step (forward, loss, autodiff's backward nodes, SGD updates): every tensor compared
    Case step{"TrainStep_small_cnn", [=](Graph& g, Fills& f) {
                  Graph fwd;
                  auto param = [&](const std::string& n, Shape s, Fill fill = {}) {
                      const TensorId t = fwd.parameter(n, plain(std::move(s)), Init::zeros());
                      f[t] = fill;
                      return t;
                  };
                  const TensorId x = fwd.input("x", nhwc({2, 3, 6, 6}));
                  TensorId h = fwd.add1(K::Conv2d, conv(1, 1, 1, 1, 1, 1, 1, true), {x, param("w1", {4, 3, 3, 3}), param("b1", {4})}, "conv1");
                  const TensorId rm = fwd.state("bn.rm", plain({4}), Init::zeros()), rv = fwd.state("bn.rv", plain({4}), Init::ones());
                  f[rv] = {0.5, 1.5};
                  h = fwd.add(K::BatchNorm2d, NormAttrs{}, {h, param("gamma", {4}, {0.5, 1.5}), param("beta", {4}), rm, rv}, "bn")[0];
                  h = fwd.add1(K::Relu, NoAttrs{}, {h}, "relu");
                  h = fwd.add(K::MaxPool2d, pool(2, 2, 2, 2, 0, 0), {h}, "pool")[0];
                  h = fwd.add1(K::Reshape, ReshapeAttrs{{2, -1}, Layout::Plain}, {h}, "flatten");
                  h = fwd.add(K::Dropout, DropoutAttrs{0.25f, 7}, {h}, "drop")[0];
                  h = fwd.add1(K::Linear, LinearAttrs{true}, {h, param("w2", {5, 36}), param("b2", {5})}, "fc");
                  const TensorId labels = fwd.input("labels", {{2}, DType::I32, Layout::Plain}, TensorRole::Label);
                  f[labels] = Fill{.limit = 5};
                  const TensorId loss = fwd.add(K::SoftmaxCrossEntropy, NoAttrs{}, {h, labels}, "loss")[0];
                  g = build_train_graph(std::move(fwd), loss, OptimizerConfig::sgd(0.1f, 0.9f, 1e-3f)).graph;
              }, false};
    step.runs = 2;
    cs.push_back(step);

    // activations fused into their producer (plan/'s fuse pass, Node::post_op): every forward case of a
    // fusable kind once more with ReLU, and with ReLU6 where the kind takes it
    const size_t unfused = cs.size();
    for (size_t i = 0; i < unfused; ++i)
        for (const OpKind act : {K::Relu, K::Relu6}) {
            Graph probe;
            Fills ignored;
            cs[i].build(probe, ignored);
            const NodeId last = NodeId(probe.num_nodes() - 1);
            if (probe.num_nodes() != 1 || !fusable(probe.node(last).kind, act)) continue;
            Case c = cs[i];
            c.name += std::string("_fused_") + op_name(act);
            c.build = [build = cs[i].build, act](Graph& g, Fills& f) {
                build(g, f);
                g.node(NodeId(g.num_nodes() - 1)).post_op = act;
            };
            cs.push_back(std::move(c));
        }
    // f32 nodes storing their output in bf16, rounded as stored (stores_output_low: the Cast after one folded
    // into it by plan/'s fuse pass): every case of such a node once more
    const size_t before_low = cs.size();
    for (size_t i = 0; i < before_low; ++i) {
        Graph probe;
        Fills ignored;
        cs[i].build(probe, ignored);
        if (probe.num_nodes() == 0 || !stores_output_low(probe.node(NodeId(probe.num_nodes() - 1)).kind)) continue;
        Case c = cs[i];
        c.name += "_bf16_out";
        c.bf16 = false;
        c.bf16_outputs = 0b1;
        cs.push_back(std::move(c));
    }
    return cs;
}

const std::vector<Case>& cases() {
    static const std::vector<Case> cs = make_cases();
    return cs;
}

// The case's graph; in bf16 every node computes in bf16 and every float tensor is stored in bf16 except
// the ops' f32 operands (OpInfo::f32_inputs / f32_outputs) and the case's kept-f32 outputs.
Graph build(const Case& c, DType dtype, Fills& fills) {
    Graph g;
    c.build(g, fills);
    if (dtype == DType::F32) {  // the node under test is the last
        const Node& n = g.node(NodeId(g.num_nodes() - 1));
        for (size_t i = 0; i < n.outputs.size(); ++i)
            if (has_bit(c.bf16_outputs, i)) g.tensor(n.outputs[i]).desc.dtype = DType::BF16;
        return g;
    }
    std::set<TensorId> f32;
    for (const Node& n : g.nodes()) {
        const OpInfo& info = op_info(n.kind);
        for (size_t i = 0; i < n.inputs.size(); ++i)
            if (f32_input(n, i)) f32.insert(n.inputs[i]);
        for (size_t i = 0; i < n.outputs.size(); ++i)
            if (has_bit(info.f32_outputs, i) || has_bit(c.keep_f32_outputs, i)) f32.insert(n.outputs[i]);
    }
    for (NodeId n = 0; n < NodeId(g.num_nodes()); ++n) g.node(n).compute = dtype;
    for (TensorId t = 0; t < TensorId(g.num_tensors()); ++t) {
        TensorDesc& d = g.tensor(t).desc;
        if (is_float(d.dtype) && !f32.count(t)) d.dtype = dtype;
    }
    return g;
}

// ---- running a graph on a backend ------------------------------------------------------------------------
using Values = std::vector<std::vector<double>>;  // per tensor, in storage order

double decode(DType t, const std::byte* p, size_t i) {
    switch (t) {
        case DType::F32: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
        case DType::BF16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return bf16_to_f32(v); }
        case DType::I32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
        case DType::U8: return double(uint8_t(p[i]));
        case DType::F16:
#if defined(__FLT16_MANT_DIG__)
        { _Float16 v; std::memcpy(&v, p + 2 * i, 2); return double(v); }
#endif
        default: break;
    }
    throw InternalError("cannot decode this dtype");
}
void encode(DType t, std::byte* p, size_t i, double v) {
    switch (t) {
        case DType::F32: { const float f = float(v); std::memcpy(p + 4 * i, &f, 4); return; }
        case DType::BF16: { const uint16_t h = f32_to_bf16(float(v)); std::memcpy(p + 2 * i, &h, 2); return; }
        case DType::I32: { const int32_t x = int32_t(v); std::memcpy(p + 4 * i, &x, 4); return; }
        case DType::U8: p[i] = std::byte(uint8_t(v)); return;
#if defined(__FLT16_MANT_DIG__)
        case DType::F16: { const _Float16 h = _Float16(v); std::memcpy(p + 2 * i, &h, 2); return; }
#endif
        default: throw InternalError("cannot encode this dtype");
    }
}
// The value a tensor of dtype t holds for v.
double representable(DType t, double v) { return t == DType::BF16 ? round_to_bf16(float(v)) : t == DType::F32 ? double(float(v)) : v; }

// Every tensor's value before the run: inputs from their Fill, outputs pre-filled too (so an output a
// backend leaves untouched compares equal only if every backend leaves it untouched).
Values initial_values(const Graph& g, const Fills& fills, const std::string& seed_text) {
    Values v(g.num_tensors());
    const uint64_t seed = std::hash<std::string>{}(seed_text);
    for (TensorId t = 0; t < TensorId(g.num_tensors()); ++t) {
        const TensorDesc& d = g.tensor(t).desc;
        std::mt19937_64 rng(seed + uint64_t(t) * 7919);
        auto it = fills.find(t);
        const Fill f = it != fills.end() ? it->second : Fill{};
        auto& out = v[size_t(t)];
        out.resize(size_t(d.numel()));
        for (double& x : out) {
            if (!is_float(d.dtype)) {
                x = f.limit > 0 ? double(std::uniform_int_distribution<int64_t>(0, f.limit - 1)(rng)) : 0.0;
                continue;
            }
            for (int tries = 0; tries < 100; ++tries) {
                x = std::uniform_real_distribution<double>(f.lo, f.hi)(rng);
                x = representable(d.dtype, f.step > 0 ? std::round(x / f.step) * f.step : x);
                bool near = false;
                for (double a : f.avoid) near = near || std::abs(x - a) < 0.05;
                if (!near) break;
            }
        }
    }
    return v;
}

struct Buffers {
    const Graph& g;
    std::vector<std::shared_ptr<std::byte>> bufs;
    Buffers(const Graph& graph, const Values& init) : g(graph) {
        for (TensorId t = 0; t < TensorId(g.num_tensors()); ++t) {
            const TensorDesc& d = g.tensor(t).desc;
            const size_t bytes = (d.bytes() + 63) / 64 * 64;
            bufs.emplace_back(static_cast<std::byte*>(std::aligned_alloc(64, bytes)), std::free);
            for (size_t i = 0; i < size_t(d.numel()); ++i) encode(d.dtype, bufs.back().get(), i, init[size_t(t)][i]);
        }
    }
    std::vector<void*> ptrs(const std::vector<TensorId>& ts) const {
        std::vector<void*> p;
        for (TensorId t : ts) p.push_back(bufs[size_t(t)].get());
        return p;
    }
    std::unique_ptr<Kernel> prepare(Backend& b, NodeId n) const { return b.prepare(g, n, ptrs(g.node(n).inputs), ptrs(g.node(n).outputs)); }
    Values values() const {
        Values v(g.num_tensors());
        for (TensorId t = 0; t < TensorId(g.num_tensors()); ++t) {
            const TensorDesc& d = g.tensor(t).desc;
            for (size_t i = 0; i < size_t(d.numel()); ++i) v[size_t(t)].push_back(decode(d.dtype, bufs[size_t(t)].get(), i));
        }
        return v;
    }
};

// Transfers are supported by their destination device only: point them at the backend under test.
Graph for_device(Graph g, const Backend& b) {
    for (NodeId n = 0; n < NodeId(g.num_nodes()); ++n)
        if (g.node(n).kind == OpKind::Transfer) g.node(n).attrs = TransferAttrs{b.device() == "elsewhere" ? "other" : "elsewhere", b.device()};
    return g;
}

// Runs every node of g on b, `runs` times in order; nullopt (and why) when b does not support a node.
std::optional<Values> run_on(Backend& b, const Graph& graph, const Values& init, const Case& c, std::string& why) {
    const Graph g = for_device(graph, b);
    for (NodeId n = 0; n < NodeId(g.num_nodes()); ++n)
        if (Support s = b.supports(g, n); !s.ok) {
            why = g.node(n).name + ": " + s.reason;
            return std::nullopt;
        }
    Buffers r(g, init);
    std::vector<std::unique_ptr<Kernel>> ks;
    for (NodeId n = 0; n < NodeId(g.num_nodes()); ++n) ks.push_back(r.prepare(b, n));
    for (int i = 0; i < c.runs; ++i)
        for (auto& k : ks)
            k->run({.training = c.training, .lr_scale = c.lr_scale, .grad_scale = c.grad_scale, .run = uint64_t(i), .step = i + 1, .shard = c.shard});
    return r.values();
}

// ---- comparing ------------------------------------------------------------------------------------------
struct Tolerance {
    double rtol, atol;
    bool exact;
};
Tolerance tolerance(DType dtype, const Case& c, bool exact) {
    if (dtype == DType::BF16) return {2e-2, 1e-2 * c.tol, exact};
    return {1e-4 * c.tol, 1e-5 * c.tol, exact};
}

// Every tensor of g: index tensors and exact cases equal, float tensors within |got - want| <= atol *
// max(1, max |want|) + rtol |want|, plus one bf16 step (|want| / 128) for a tensor stored in bf16 (an f32
// result near a rounding boundary may round either way: the reference rounds its double once).
void expect_close(const Graph& g, const Values& want, const Values& got, Tolerance tol, const std::string& what) {
    for (TensorId t = 0; t < TensorId(g.num_tensors()); ++t) {
        const auto &w = want[size_t(t)], &x = got[size_t(t)];
        const bool exact = tol.exact || !is_float(g.tensor(t).desc.dtype);
        const double step = g.tensor(t).desc.dtype == DType::BF16 ? 1.0 / 128 : 0.0;
        double scale = 1;
        for (double v : w) scale = std::max(scale, std::abs(v));
        size_t bad = 0, first = 0;
        double first_limit = 0;
        for (size_t i = 0; i < w.size(); ++i) {
            const double limit = exact ? 0.0 : tol.atol * scale + (tol.rtol + step) * std::abs(w[i]);
            const bool ok = exact ? (w[i] == x[i] || (std::isnan(w[i]) && std::isnan(x[i]))) : std::abs(w[i] - x[i]) <= limit;
            if (!ok && bad++ == 0) first = i, first_limit = limit;
        }
        EXPECT_EQ(bad, 0u) << what << ": tensor '" << g.tensor(t).name << "' " << desc_str(g.tensor(t).desc) << " differs in " << bad << " of "
                           << w.size() << " elements; first at storage index " << first << ": want " << (bad ? w[first] : 0.0) << ", got "
                           << (bad ? x[first] : 0.0) << " (allowed " << first_limit << ")";
    }
}

// ---- the tests -------------------------------------------------------------------------------------------
struct Variant {
    size_t index;
    DType dtype;
};
void PrintTo(const Variant& v, std::ostream* os) { *os << cases()[v.index].name << " in " << dtype_name(v.dtype); }
std::vector<Variant> variants() {
    std::vector<Variant> v;
    for (size_t i = 0; i < cases().size(); ++i) {
        if (!cases()[i].keep_f32_outputs) v.push_back({i, DType::F32});  // kept-f32 outputs: a bf16-only variant
        if (cases()[i].bf16) v.push_back({i, DType::BF16});
    }
    return v;
}

class BackendOps : public ::testing::TestWithParam<Variant> {};

TEST_P(BackendOps, MatchReference) {
    const Case& c = cases()[GetParam().index];
    const DType dtype = GetParam().dtype;
    Fills fills;
    const Graph g = build(c, dtype, fills);
    const Values init = initial_values(g, fills, c.name);
    ReferenceBackend ref;
    std::string why;
    const std::optional<Values> want = run_on(ref, g, init, c, why);
    ASSERT_TRUE(want) << "the reference does not support " << why;
    if (dtype == DType::BF16 && c.tracks_f32) {  // the bf16 loops track the f32 loops on the same (bf16-representable) inputs
        Fills f32_fills;
        const std::optional<Values> f32 = run_on(ref, build(c, DType::F32, f32_fills), init, c, why);
        ASSERT_TRUE(f32) << why;
        expect_close(g, *f32, *want, tolerance(DType::BF16, c, false), "reference bf16 vs reference f32");
    }
    std::vector<std::string> skipped;
    for (const BackendFactory& f : backends_under_test()) {
        std::unique_ptr<Backend> b = f.make();
        const std::optional<Values> got = run_on(*b, g, init, c, why);
        if (!got) {
            bool all_its_ops = true;  // a partial backend must run a case made only of ops it says it runs
            for (NodeId n = 0; n < NodeId(g.num_nodes()); ++n)
                if (f.runs && g.node(n).kind != OpKind::Transfer)
                    all_its_ops = all_its_ops && f.runs(g.node(n).kind) && ((g.node(n).post_op == OpKind::Count && g.node(n).pre_op == OpKind::Count) || fuses_activations(f.name));
            if (!all_its_ops) continue;  // ops the device leaves to the host by design
            if (dtype == DType::F32) ADD_FAILURE() << f.name << " does not support " << why;
            else skipped.push_back(f.name + " (" + why + ")");
            continue;
        }
        expect_close(g, *want, *got, tolerance(dtype, c, c.exact), f.name + " vs reference");
    }
    if (!skipped.empty()) {
        std::string s;
        for (const auto& x : skipped) s += " " + x;
        GTEST_SKIP() << "bf16 not supported here by:" << s << " (the reference's bf16 was checked against its f32)";
    }
}

INSTANTIATE_TEST_SUITE_P(Ops, BackendOps, ::testing::ValuesIn(variants()), [](const ::testing::TestParamInfo<Variant>& i) {
    return cases()[i.param.index].name + "_" + dtype_name(i.param.dtype);
});

// The fused cases above agree across backends; this pins what they compute: the reference's fused output
// is the activation of the unfused output, element for element; a folded activation backward gives what the
// unfused node gives on the activation's gradient dY f'(Y), a folded gradient sum what it gives on a + b.
TEST(BackendOpsFused, OutputIsTheActivationOfTheUnfusedOutput) {
    size_t checked = 0, checked_backward = 0;
    for (const Case& c : cases()) {
        if (c.name.find("_fused_") == std::string::npos || c.bf16_outputs) continue;  // the unfused node stores its output as computed
        Fills fills;
        Graph fused = build(c, DType::F32, fills);
        const NodeId last = NodeId(fused.num_nodes() - 1);  // the node under test; those before it make its operands
        if (fused.node(last).pre_op != OpKind::Count) {
            Node n = fused.node(last);
            const TensorId dy = n.inputs.front(), y = n.inputs.back();
            Values init = initial_values(fused, fills, c.name);
            const Values init_fused = init;
            const bool recompute = recomputes_activation(n);
            size_t clipped = 0;
            for (size_t i = 0; i < init[size_t(dy)].size(); ++i) {  // f'(Y) is 0 or 1: the product is exact
                double yi = recompute ? 0.0 : init[size_t(y)][i];
                if (recompute) {  // Y's pre-activation as batch norm's forward gives it, in X's dtype
                    const TensorDesc& xd = fused.tensor(n.inputs[1]).desc;  // values in storage order
                    const size_t ch = (xd.layout == Layout::ChannelsLast ? i : i / size_t(xd.shape[2] * xd.shape[3])) % size_t(xd.shape[1]);
                    const double rstd = 1.0 / std::sqrt(init[size_t(n.inputs[4])][ch] + double(attrs_as<NormAttrs>(n).eps));
                    yi = representable(fused.tensor(n.inputs[1]).desc.dtype,
                                       init[size_t(n.inputs[2])][ch] * (init[size_t(n.inputs[1])][i] - init[size_t(n.inputs[3])][ch]) * rstd + init[size_t(y)][ch]);
                }
                if (n.pre_op == OpKind::Add) {  // a gradient sum: a + b, rounded as the Add's output is
                    init[size_t(dy)][i] = representable(fused.tensor(dy).desc.dtype, init[size_t(dy)][i] + yi);
                } else {
                    const bool pass = yi > 0 && (n.pre_op == OpKind::ReluBackward || yi < 6);
                    init[size_t(dy)][i] *= pass ? 1.0 : 0.0;
                    clipped += !pass && yi > 0;
                }
            }
            if (recompute && n.pre_op == OpKind::Relu6Backward) {
                EXPECT_GT(clipped, 0u) << c.name << ": no pre-activation beyond 6, so the case shows less";
            }
            n.inputs.pop_back();
            n.pre_op = OpKind::Count;
            if (recompute) std::get<NormAttrs>(n.attrs).recompute_act = false;
            Graph plain = fused.tensors_only();
            for (NodeId k = 0; k < last; ++k) plain.append(fused.node(k));
            plain.append(n);
            ReferenceBackend ref;
            std::string why;
            const std::optional<Values> got = run_on(ref, fused, init_fused, c, why), want = run_on(ref, plain, init, c, why);
            ASSERT_TRUE(got && want) << why;
            for (TensorId t : n.outputs) EXPECT_EQ((*got)[size_t(t)], (*want)[size_t(t)]) << c.name << " output " << fused.tensor(t).name;
            ++checked_backward;
            continue;
        }
        Graph plain = fused;
        Node& n = plain.node(0);
        const OpKind act = n.post_op;
        n.post_op = OpKind::Count;
        const Values init = initial_values(fused, fills, c.name);
        ReferenceBackend ref;
        std::string why;
        const std::optional<Values> y = run_on(ref, fused, init, c, why), x = run_on(ref, plain, init, c, why);
        ASSERT_TRUE(y && x) << why;
        const auto &got = (*y)[size_t(n.outputs[0])], &pre = (*x)[size_t(n.outputs[0])];
        size_t clamped = 0;
        for (size_t i = 0; i < pre.size(); ++i) {
            const double want = act == OpKind::Relu ? std::max(pre[i], 0.0) : std::min(std::max(pre[i], 0.0), 6.0);
            ASSERT_EQ(got[i], want) << c.name << " element " << i;
            clamped += want != pre[i];
        }
        EXPECT_GT(clamped, 0u) << c.name << ": no element was clamped, so the case shows nothing";
        ++checked;
    }
    EXPECT_GE(checked, 20u);
    // 12 activation backwards reading Y, 12 recomputing it, 6 gradient sums; 20 commuted into max-pool backwards
    EXPECT_EQ(checked_backward, 50u);
}

// A MatMul with transposes folded in computes what a Transpose of each operand, the product and a Transpose
// of its result compute (on the reference: the same sums, the same bits).
TEST(BackendOpsFolded, TransposesFoldedIntoAMatMulReadAndWriteAsTransposes) {
    size_t checked = 0;
    for (const Case& c : cases()) {
        if (c.name.rfind("MatMul_perm", 0) != 0 || c.name.find("_f32y") != std::string::npos || c.name.find("_fused_") != std::string::npos) continue;
        Fills fills;
        const Graph folded = build(c, DType::F32, fills);
        const NodeId last = NodeId(folded.num_nodes() - 1);
        const Node& mm = folded.node(last);
        MatMulAttrs at = attrs_as<MatMulAttrs>(mm);
        Graph plain = folded.tensors_only();
        for (NodeId k = 0; k < last; ++k) plain.append(folded.node(k));
        std::vector<TensorId> ins = mm.inputs;
        for (size_t i = 0; i < 2; ++i)
            if (std::vector<int64_t>& perm = i == 0 ? at.perm_a : at.perm_b; !perm.empty()) {
                ins[i] = plain.add1(OpKind::Transpose, TransposeAttrs{perm}, {ins[i]}, "t" + std::to_string(i));
                perm.clear();
            }
        const std::vector<int64_t> perm_c = at.perm_c;
        at.perm_c.clear();
        TensorId y = plain.add1(OpKind::MatMul, at, ins, "mm_plain");
        if (!perm_c.empty()) y = plain.add1(OpKind::Transpose, TransposeAttrs{inverse_permutation(perm_c)}, {y}, "t_out");
        ASSERT_EQ(plain.tensor(y).desc, folded.tensor(mm.outputs[0]).desc) << c.name;
        const Values init = initial_values(folded, fills, c.name);
        Values init_plain = init;
        for (size_t t = init.size(); t < plain.num_tensors(); ++t) init_plain.emplace_back(size_t(plain.tensor(TensorId(t)).desc.numel()), 0.0);
        ReferenceBackend ref;
        std::string why;
        const std::optional<Values> got = run_on(ref, folded, init, c, why), want = run_on(ref, plain, init_plain, c, why);
        ASSERT_TRUE(got && want) << why;
        EXPECT_EQ((*got)[size_t(mm.outputs[0])], (*want)[size_t(y)]) << c.name;
        ++checked;
    }
    EXPECT_EQ(checked, 3u);
}

TEST(BackendOpsCatalogue, EveryOpKindHasACase) {
    std::set<OpKind> covered;
    ReferenceBackend ref;
    for (const Case& c : cases()) {
        Fills f;
        const Graph g = build(c, DType::F32, f);
        for (NodeId n = 0; n < NodeId(g.num_nodes()); ++n) {
            const OpKind k = g.node(n).kind;
            covered.insert(k);
            if (!c.bf16 && !c.bf16_outputs && g.num_nodes() == 1 && k != OpKind::Cast && k != OpKind::Transfer) {
                EXPECT_FALSE(supports_in(ref, g, n, DType::BF16)) << c.name << " runs in f32 only, but the reference supports "
                                                                  << op_name(k) << " in bf16: run the case in bf16 too";
            }
        }
    }
    for (size_t k = 0; k < size_t(OpKind::Count); ++k)
        EXPECT_TRUE(covered.count(OpKind(k))) << op_name(OpKind(k)) << " has no case in tests/test_backend_ops.cpp";
}

// The arg-max is an explicit tensor, so max pooling's forward and backward may run on different devices.
TEST(BackendOpsMixed, MaxPoolBackwardReadsAnotherDevicesArgmax) {
    for (const DType dtype : {DType::F32, DType::BF16}) {
        Case c = cases().front();
        for (const Case& x : cases())
            if (x.name == "MaxPool2dBackward_3x3s2p1_nhwc") c = x;
        Fills fills;
        const Graph g = build(c, dtype, fills);
        ASSERT_EQ(g.num_nodes(), 2u);
        const Values init = initial_values(g, fills, c.name);
        ReferenceBackend ref;
        Buffers on_ref(g, init);
        on_ref.prepare(ref, 0)->run({});
        on_ref.prepare(ref, 1)->run({});
        for (const BackendFactory& f : backends_under_test()) {
            std::unique_ptr<Backend> b = f.make();
            if (!b->supports(g, 1).ok) {
                EXPECT_EQ(dtype, DType::BF16) << f.name << ": " << b->supports(g, 1).reason;
                continue;
            }
            Buffers mixed(g, init);
            mixed.prepare(ref, 0)->run({});  // Y and arg-max from the reference
            mixed.prepare(*b, 1)->run({});   // dX on the backend under test
            expect_close(g, on_ref.values(), mixed.values(), tolerance(dtype, c, false), f.name + " backward on the reference's arg-max");
        }
    }
}

// A one-node graph: Relu, or the op `k`, with its operands in the given dtypes.
TEST(BackendOpsSupports, RejectsWithReasons) {
    std::vector<std::unique_ptr<Backend>> all;
    all.push_back(std::make_unique<ReferenceBackend>());
    for (const BackendFactory& f : backends_under_test()) all.push_back(f.make());
    for (auto& b : all) {
        SCOPED_TRACE(b->device());
        {  // f16 compute
            Graph g;
            const TensorId x = g.input("x", {{3, 4}, DType::F16, Layout::Plain});
            g.add1(OpKind::Relu, NoAttrs{}, {x}, "relu16");
            g.node(0).compute = DType::F16;
            const Support s = b->supports(g, 0);
            EXPECT_FALSE(s.ok);
            EXPECT_NE(s.reason.find("f16"), std::string::npos) << s.reason;
            try {
                Buffers r(g, initial_values(g, {}, "f16"));
                r.prepare(*b, 0);
                ADD_FAILURE() << "prepare accepted an unsupported node";
            } catch (const Error& e) {
                EXPECT_NE(std::string(e.what()).find("relu16"), std::string::npos) << e.what();
            }
        }
        {  // the loss in bf16
            Graph g;
            g.add(OpKind::SoftmaxCrossEntropy, NoAttrs{},
                  {g.input("logits", {{4, 3}, DType::BF16, Layout::Plain}), g.input("labels", {{4}, DType::I32, Layout::Plain})}, "loss");
            g.node(0).compute = DType::BF16;
            g.tensor(g.node(0).outputs[1]).desc.dtype = DType::BF16;
            const Support s = b->supports(g, 0);
            EXPECT_FALSE(s.ok);
            EXPECT_FALSE(s.reason.empty());
        }
        {  // a bf16 node reading an f32 tensor: the plan must insert a Cast
            Graph g;
            g.add1(OpKind::Relu, NoAttrs{}, {g.input("x", plain({3, 4}))}, "relu");
            g.node(0).compute = DType::BF16;
            g.tensor(g.node(0).outputs[0]).desc.dtype = DType::BF16;
            const Support s = b->supports(g, 0);
            EXPECT_FALSE(s.ok);
            EXPECT_NE(s.reason.find("Cast"), std::string::npos) << s.reason;
        }
        {  // a transfer to another device
            Graph g;
            g.add1(OpKind::Transfer, TransferAttrs{b->device(), "elsewhere"}, {g.input("x", plain({3}))}, "xfer");
            EXPECT_FALSE(b->supports(g, 0).ok);
        }
    }
}

// Derivatives at the kinks follow PyTorch: relu'(0) = 0, relu6'(0) = relu6'(6) = 0. (The cases above
// keep activation inputs away from the kinks, where oneDNN's eltwise_clip has relu6'(6) = 1.)
TEST(BackendOpsReference, KinkDerivativesFollowPyTorch) {
    for (const OpKind k : {OpKind::ReluBackward, OpKind::Relu6Backward}) {
        Graph g;
        g.add(k, NoAttrs{}, {g.input("dy", plain({4})), g.input("x", plain({4}))}, "bwd", Phase::Backward);
        Values init = initial_values(g, {}, "kinks");
        init[0] = {1, 1, 1, 1};
        init[1] = {0, 6, 3, -1};
        ReferenceBackend ref;
        Buffers r(g, init);
        r.prepare(ref, 0)->run({});
        const std::vector<double> want = k == OpKind::ReluBackward ? std::vector<double>{0, 1, 1, 0} : std::vector<double>{0, 0, 1, 0};
        EXPECT_EQ(r.values()[2], want) << op_name(k);
    }
}

TEST(BackendOpsReference, OutOfRangeLabelIsAnError) {
    Graph g;
    g.add(OpKind::SoftmaxCrossEntropy, NoAttrs{}, {g.input("logits", plain({2, 3})), g.input("labels", {{2}, DType::I32, Layout::Plain})}, "loss");
    Values init = initial_values(g, {}, "labels");
    init[1] = {1, 3};
    ReferenceBackend ref;
    Buffers r(g, init);
    try {
        r.prepare(ref, 0)->run({});
        ADD_FAILURE() << "no error for label 3 of 3 classes";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("label 3"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace joule
