// backend/fpga_emu: the emulated FPGA's GEMM loop nests with odd tilings (tile and PE-array remainders,
// stride 2, padding, dilation, groups, transposed matmuls, single and double buffering) against the
// reference backend; modelled time and energy from the kernel model; and LeNet-5 trained with its
// convolutions and fully-connected layers on fpga_emu giving all-CPU's losses.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/fpga_emu/fpga_emu_backend.hpp"
#include "backend/registry.hpp"
#include "data/dataset.hpp"
#include "graph/autodiff.hpp"
#include "plan/passes.hpp"
#include "runtime/executor.hpp"
#include "runtime/trainer.hpp"
#include "test_util.hpp"
#include "zoo/zoo.hpp"

namespace joule {
namespace {

TensorDesc plain(Shape s) { return {std::move(s), DType::F32, Layout::Plain}; }

// One GEMM node's graph: inputs, the node (backward kinds with the gradient's descriptor).
struct OneNode {
    Graph g;
    NodeId node = 0;
};
OneNode conv_node(OpKind k, Shape x, Shape w, ConvAttrs a) {
    OneNode o;
    const TensorDesc xd = plain(x), wd = plain(w);
    std::vector<TensorDesc> fwd = {xd, wd};
    if (a.bias) fwd.push_back(plain({w[0]}));
    Node probe;
    probe.kind = OpKind::Conv2d, probe.attrs = a;
    const TensorDesc yd = op_info(OpKind::Conv2d).shape(probe, fwd).front();
    if (k == OpKind::Conv2d) {
        std::vector<TensorId> in = {o.g.input("x", xd), o.g.input("w", wd)};
        if (a.bias) in.push_back(o.g.input("b", fwd[2]));
        o.g.add(k, a, in, "conv");
    } else if (k == OpKind::ConvBackwardData) {
        o.g.add(k, a, {o.g.input("dy", yd), o.g.input("w", wd)}, "conv.bwd_data", Phase::Backward, kNone, xd);
    } else {
        o.g.add(k, a, {o.g.input("dy", yd), o.g.input("x", xd)}, "conv.bwd_weights", Phase::Backward, kNone, wd);
    }
    return o;
}

using Buffers = std::vector<std::vector<float>>;
Buffers random_buffers(const Graph& g, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1, 1);
    Buffers b(g.num_tensors());
    for (size_t t = 0; t < g.num_tensors(); ++t) {
        b[t].resize(size_t(g.tensor(TensorId(t)).desc.numel()));
        for (float& v : b[t]) v = u(rng);
    }
    return b;
}
std::vector<void*> ptrs(Buffers& b, const std::vector<TensorId>& ids) {
    std::vector<void*> p;
    for (TensorId t : ids) p.push_back(b[size_t(t)].data());
    return p;
}

void expect_matches_reference(const OneNode& o, const predict::FpgaConfig& c, const std::string& what) {
    Buffers want = random_buffers(o.g, 7), got = want;
    const Node& n = o.g.node(o.node);
    ReferenceBackend ref;
    ref.prepare(o.g, o.node, ptrs(want, n.inputs), ptrs(want, n.outputs))->run({});
    fpga_emu::make_gemm(o.g, o.node, ptrs(got, n.inputs), ptrs(got, n.outputs), c)->run({});
    for (TensorId t : n.outputs) {
        const auto &w = want[size_t(t)], &x = got[size_t(t)];
        double scale = 1;
        for (float v : w) scale = std::max(scale, double(std::fabs(v)));
        for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(x[i], w[i], 2e-5 * scale) << what << " " << c.str() << " output element " << i;
    }
}

predict::FpgaConfig tiling(int r, int c, int v, double tm, double tn, double tk, bool db) {
    predict::FpgaConfig x;
    x.kernel = predict::FpgaKernel::Gemm, x.pe_rows = r, x.pe_cols = c, x.vec = v, x.tile_m = tm, x.tile_n = tn, x.tile_k = tk, x.double_buffer = db;
    return x;
}

TEST(FpgaEmu, GemmLoopNestsWithOddTilingsMatchTheReference) {
    ConvAttrs strided;
    strided.stride[0] = strided.stride[1] = 2, strided.pad[0] = strided.pad[1] = 1, strided.bias = true;
    ConvAttrs grouped;
    grouped.groups = 2, grouped.pad[0] = 1, grouped.pad[1] = 2, grouped.dilation[0] = 2, grouped.stride[1] = 2;
    const predict::FpgaConfig configs[] = {tiling(2, 3, 4, 5, 3, 7, true), tiling(2, 3, 4, 5, 3, 7, false), tiling(1, 1, 1, 1, 1, 1, true),
                                           tiling(4, 2, 8, 64, 64, 64, true), tiling(3, 5, 2, 9, 10, 11, false)};
    for (const auto& [tag, x, w, a] : {std::tuple{"strided", Shape{2, 3, 9, 7}, Shape{5, 3, 3, 3}, strided}, std::tuple{"grouped", Shape{1, 4, 8, 9}, Shape{6, 2, 3, 2}, grouped}})
        for (OpKind k : {OpKind::Conv2d, OpKind::ConvBackwardData, OpKind::ConvBackwardWeights})
            for (const predict::FpgaConfig& c : configs) expect_matches_reference(conv_node(k, x, w, a), c, std::string(tag) + " " + op_name(k));
    // linear (rows 13, 29 -> 17, with bias) forward and backward, and a batched transposed matmul
    for (OpKind k : {OpKind::Linear, OpKind::LinearBackwardData, OpKind::LinearBackwardWeights}) {
        OneNode o;
        const TensorDesc xd = plain({13, 29}), wd = plain({17, 29}), yd = plain({13, 17});
        if (k == OpKind::Linear) o.g.add(k, LinearAttrs{true}, {o.g.input("x", xd), o.g.input("w", wd), o.g.input("b", plain({17}))}, "fc");
        else if (k == OpKind::LinearBackwardData) o.g.add(k, LinearAttrs{true}, {o.g.input("dy", yd), o.g.input("w", wd)}, "fc.bwd_data", Phase::Backward, kNone, xd);
        else o.g.add(k, LinearAttrs{true}, {o.g.input("dy", yd), o.g.input("x", xd)}, "fc.bwd_weights", Phase::Backward, kNone, wd);
        for (const predict::FpgaConfig& c : configs) expect_matches_reference(o, c, op_name(k));
    }
    OneNode mm;
    mm.g.add(OpKind::MatMul, MatMulAttrs{true, true, 0.5f}, {mm.g.input("a", plain({3, 11, 6})), mm.g.input("b", plain({3, 9, 11}))}, "mm");
    for (const predict::FpgaConfig& c : configs) expect_matches_reference(mm, c, "matmul");
}

TEST(FpgaEmu, ModelledTimeAndEnergyAreTheTunedKernelsAndHostOpsAreRefused) {
    FpgaEmuBackend b("fpga_emu:s10");
    EXPECT_EQ(b.time_source(), TimeSource::Modelled);
    ConvAttrs a;
    a.pad[0] = a.pad[1] = 1;
    OneNode o = conv_node(OpKind::Conv2d, {4, 8, 16, 16}, {16, 8, 3, 3}, a);
    Buffers buf = random_buffers(o.g, 1);
    const Node& n = o.g.node(o.node);
    auto k = b.prepare(o.g, o.node, ptrs(buf, n.inputs), ptrs(buf, n.outputs));
    k->run({});
    const predict::TunedKernel t = predict::fpga_tune(*predict::fpga_work(o.g, o.node, DType::F32), b.spec());
    ASSERT_TRUE(k->modelled_seconds());
    EXPECT_EQ(*k->modelled_seconds(), t.estimate.seconds);
    EXPECT_EQ(k->modelled_joules(), t.estimate.dynamic_joules);
    Graph s;
    s.add(OpKind::Softmax, AxisAttrs{1}, {s.input("x", plain({2, 5}))}, "softmax");
    const Support no = b.supports(s, 0);
    EXPECT_FALSE(no.ok);
    EXPECT_NE(no.reason.find("no FPGA kernel for Softmax (it runs on the host)"), std::string::npos) << no.reason;
    test::expect_error([] { FpgaEmuBackend x("fpga_emu:v100"); }, "is a gpu, not an FPGA");
    test::expect_error([] { FpgaEmuBackend x("fpga_emu"); }, "the emulated FPGA needs a spec");
    test::expect_error([] { FpgaEmuBackend x("fpga_emu:s11"); }, "no device named 's11'");
    EXPECT_TRUE(device_status("fpga_emu:s10").runnable);
    // a plan's one-bitstream design: the kernel run and charged is the design's array with its own tiles
    const predict::FpgaDesign design = predict::parse_fpga_design("4x4x4/s8");
    FpgaEmuBackend d("fpga_emu:s10", {{"fpga_design", design.str()}});
    auto dk = d.prepare(o.g, o.node, ptrs(buf, n.inputs), ptrs(buf, n.outputs));
    dk->run({});
    const predict::TunedKernel dt = predict::fpga_tune(*predict::fpga_work(o.g, o.node, DType::F32), b.spec(), 0, 0, design);
    EXPECT_EQ(dt.config.pe_rows * dt.config.pe_cols * dt.config.vec, 64);
    EXPECT_EQ(*dk->modelled_seconds(), dt.estimate.seconds);
    EXPECT_GT(dt.estimate.seconds, t.estimate.seconds) << "a 64-MAC array is slower than the one tuned for the shape";
    test::expect_error([] { FpgaEmuBackend x("fpga_emu:s10", {{"fpga_design", "4x4/s8"}}); }, "FPGA design '4x4/s8' is not ROWSxCOLSxVEC/sLANES");
    test::expect_error([] { FpgaEmuBackend x("fpga_emu:s10", {{"clock_mhz", "fast"}}); }, "setting clock_mhz 'fast' is not a number");
    test::expect_error([] { FpgaEmuBackend x("fpga_emu:s10", {{"turbo", "1"}}); }, "unknown setting 'turbo'");
}

TEST(FpgaEmu, LeNetWithItsGemmsOnTheFpgaTrainsLikeAllCpu) {
    const int steps = 50;
    std::vector<float> losses[2];
    for (int on_fpga = 0; on_fpga < 2; ++on_fpga) {
        zoo::NetConfig cfg;
        cfg.batch = 8, cfg.classes = 10;
        zoo::Model m = zoo::build("lenet5", cfg);
        TrainGraph tg = build_train_graph(std::move(m.graph), m.loss, OptimizerConfig::sgd(0.02f, 0.9f));
        Plan p;
        p.name = on_fpga ? "gemms on fpga_emu:s10" : "cpu";
        if (on_fpga)
            for (const char* layer : {"conv1", "conv2", "fc1", "fc2", "fc3"}) p.entries.push_back({PlanEntry::Match::Layer, layer, "fpga_emu:s10", std::nullopt, {}, "test"});
        LowerOptions lo;
        lo.keep = {m.logits, m.loss};
        const LoweredGraph lg = lower(std::move(tg), p, lo);
        EXPECT_EQ(lg.transfers > 0, on_fpga == 1);
        BackendSet backends({.threads = 2});
        ExecutorOptions eo;
        eo.seed = 5;
        Executor ex(lg, backends, eo);
        data::SyntheticData synth(9);
        for (int s = 0; s < steps; ++s) {
            fill_synthetic(ex, m, synth);
            ex.run_all();
            losses[on_fpga].push_back(ex.f32(lg.train.loss)[0]);
        }
        size_t modelled = 0;
        for (size_t k = 0; k < lg.train.graph.num_nodes(); ++k) {
            const Node& node = lg.train.graph.node(NodeId(k));
            modelled += ex.node_modelled()[k];
            if (node.device == "fpga_emu:s10") {
                EXPECT_TRUE(ex.node_modelled()[k]) << node.name;  // the FPGA's time is the model's
            }
        }
        EXPECT_EQ(modelled > 0, on_fpga == 1);
    }
    for (int s = 0; s < steps; ++s) EXPECT_NEAR(losses[1][size_t(s)], losses[0][size_t(s)], 2e-3 * std::fabs(losses[0][size_t(s)])) << "step " << s;
    EXPECT_LT(losses[1].back(), losses[1].front());  // it learns (the synthetic labels are a function of the input)
}

}  // namespace
}  // namespace joule
