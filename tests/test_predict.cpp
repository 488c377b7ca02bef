// predict/: the memory model on hand-computable graphs (one GEMM with a known tiling, a chain that
// fits, a chain that does not, forward-backward reuse in a TrainGraph), monotonicity in capacity,
// and the unit parsers.
#include <gtest/gtest.h>

#include <cmath>

#include "graph/autodiff.hpp"
#include "graph/error.hpp"
#include "predict/memory_model.hpp"
#include "predict/units.hpp"
#include "test_util.hpp"
#include "zoo/zoo.hpp"

namespace joule::predict {
namespace {

constexpr double KiB = 1024, MiB = 1024 * 1024;

MemoryConfig hw(double capacity) {
    MemoryConfig c;
    c.capacity_bytes = capacity;
    c.bandwidth_bytes_per_s = 100e9;
    c.peak_f32_flops = 1e12;
    return c;
}

TEST(MemoryModel, SingleGemmTiling) {
    // Y = X W^T, 256 x 256 x 256 f32: A = B = C = 256 KiB; Y is read afterwards so it is live.
    Graph g;
    const TensorId x = g.input("x", {{256, 256}});
    const TensorId w = g.parameter("w", {{256, 256}}, Init::ones());
    const TensorId y = g.add1(OpKind::Linear, LinearAttrs{false}, {x, w}, "fc");
    g.add1(OpKind::Relu, NoAttrs{}, {y}, "relu");
    // Everything fits: each operand read once, Y stays on chip and dies there.
    IterationPrediction big = predict_iteration(g, hw(4 * MiB));
    EXPECT_DOUBLE_EQ(big.nodes[0].read_bytes, 512 * KiB);
    EXPECT_DOUBLE_EQ(big.nodes[0].write_bytes, 0);
    EXPECT_EQ(big.nodes[0].tiling, "256x256x16");
    EXPECT_DOUBLE_EQ(big.read_bytes, 512 * KiB);
    // 64 KiB = 16384 floats: the best output-stationary tile is 128 x 64 (x 16): A read 256/64 = 4
    // times, B 256/128 = 2 times, Y (live, too big to keep) written once.
    IterationPrediction small = predict_iteration(g, hw(64 * KiB));
    EXPECT_DOUBLE_EQ(small.nodes[0].read_bytes, 6 * 256 * KiB);
    EXPECT_DOUBLE_EQ(small.nodes[0].write_bytes, 256 * KiB);
    // relu streams Y back in, but for the part still on chip from being written (64 KiB); its output is dead
    EXPECT_DOUBLE_EQ(small.nodes[1].read_bytes, 192 * KiB);
    EXPECT_DOUBLE_EQ(small.nodes[1].write_bytes, 0);
    // time = max(compute, memory) per node
    const double flops = 2.0 * 256 * 256 * 256;
    EXPECT_DOUBLE_EQ(small.nodes[0].compute_s, flops / 1e12);
    EXPECT_DOUBLE_EQ(small.nodes[0].memory_s, 7 * 256 * KiB / 100e9);
    EXPECT_DOUBLE_EQ(small.nodes[0].time_s, std::max(small.nodes[0].compute_s, small.nodes[0].memory_s));
    MemoryConfig slow = hw(64 * KiB);
    slow.node_overhead_s = 5e-6;  // a fixed cost per node
    const IterationPrediction o = predict_iteration(g, slow);
    EXPECT_DOUBLE_EQ(o.nodes[0].time_s, small.nodes[0].time_s + 5e-6);
    EXPECT_DOUBLE_EQ(o.time_s, small.time_s + 2 * 5e-6);
    // a small node (graph/cost.hpp small_node) is charged the small-node overhead instead: the GEMM is not
    // small (33 MFLOP), the 256 x 256 ReLU (256 KiB each way) is not either; a 16-element ReLU is
    slow.small_node_overhead_s = 0.3e-6;
    EXPECT_DOUBLE_EQ(predict_iteration(g, slow).time_s, o.time_s);
    Graph tiny;
    tiny.add1(OpKind::Relu, NoAttrs{}, {tiny.add1(OpKind::Relu, NoAttrs{}, {tiny.input("x", {{16}})}, "r1")}, "r2");
    const IterationPrediction t = predict_iteration(tiny, slow);
    for (const NodePrediction& n : t.nodes) EXPECT_DOUBLE_EQ(n.time_s - std::max(n.compute_s, n.memory_s), 0.3e-6);
    slow.small_node_overhead_s = -1e-6;
    test::expect_error([&] { predict_iteration(tiny, slow); }, "the per-node overhead must not be negative");
}

TEST(MemoryModel, BestTilingMatchesHandAnalysis) {
    GemmShape s{256, 256, 256, 1, 0, 1, 2, 256 * KiB, 256 * KiB, 256 * KiB};
    const Tiling t = best_tiling(s, 64 * KiB, false, false, false);
    EXPECT_DOUBLE_EQ(t.read_bytes, 6 * 256 * KiB);
    EXPECT_DOUBLE_EQ(t.tm * t.tn, 128.0 * 64);
    // with A already on chip only B streams, and a whole-width tile needs B once per 256/Tm rows
    const Tiling r = best_tiling(s, 64 * KiB, true, false, false);
    EXPECT_LT(r.read_bytes, t.read_bytes);
    EXPECT_DOUBLE_EQ(best_tiling(s, 4 * MiB, false, false, true).read_bytes, 512 * KiB);
}

Graph relu_chain(int64_t elements, int links) {
    Graph g;
    TensorId t = g.input("x", {{elements}});
    for (int i = 0; i < links; ++i) t = g.add1(OpKind::Relu, NoAttrs{}, {t}, "relu" + std::to_string(i));
    return g;
}

TEST(MemoryModel, ChainThatFitsNeverLeavesTheChip) {
    const Graph g = relu_chain(64 * 1024, 3);  // 256 KiB tensors
    const IterationPrediction p = predict_iteration(g, hw(4 * MiB));
    EXPECT_DOUBLE_EQ(p.read_bytes, 256 * KiB);  // x once
    EXPECT_DOUBLE_EQ(p.write_bytes, 0);         // intermediates and the dead output stay on chip
    EXPECT_DOUBLE_EQ(p.nodes[1].read_bytes, 0);
}

TEST(MemoryModel, Bf16StorageHalvesTheBytes) {
    Graph g = relu_chain(256 * 1024, 3);
    for (size_t t = 0; t < g.num_tensors(); ++t) g.tensor(TensorId(t)).desc.dtype = DType::BF16;  // as a bf16 plan stores them
    const MemoryConfig c = hw(512 * KiB);
    const IterationPrediction p = predict_iteration(g, c);  // 512 KiB tensors now fit: x read once, nothing written
    EXPECT_DOUBLE_EQ(p.read_bytes, 512 * KiB);
    EXPECT_DOUBLE_EQ(p.write_bytes, 0);
    Graph w;
    w.parameter("p", {{1024}}, Init::ones());
    EXPECT_DOUBLE_EQ(stored_bytes(w, 0), 4096);
}

TEST(MemoryModel, ChainThatDoesNotFitStreams) {
    const Graph g = relu_chain(256 * 1024, 3);  // 1 MiB tensors, 512 KiB buffer
    const IterationPrediction p = predict_iteration(g, hw(512 * KiB));
    // x is read whole; each live output keeps 512 KiB on chip and writes the other 512 KiB back, which
    // the next relu reads; the last output is dead
    EXPECT_DOUBLE_EQ(p.read_bytes, 2 * MiB);
    EXPECT_DOUBLE_EQ(p.write_bytes, 1 * MiB);
    EXPECT_DOUBLE_EQ(p.nodes[1].read_bytes, 512 * KiB);
    for (const auto& n : p.nodes) EXPECT_LE(n.occupancy_bytes, 512 * KiB);
}

TEST(MemoryModel, BytesReadBackAfterAWriteBackAreClean) {
    // a = relu(x), b = relu(a), c = a + b; 256 KiB tensors, 64 KiB buffer.
    Graph g;
    const TensorId x = g.input("x", {{64 * 1024}});
    const TensorId a = g.add1(OpKind::Relu, NoAttrs{}, {x}, "a");
    const TensorId b = g.add1(OpKind::Relu, NoAttrs{}, {a}, "b");
    g.add1(OpKind::Add, NoAttrs{}, {a, b}, "c");
    const IterationPrediction p = predict_iteration(g, hw(64 * KiB));
    // node a: x streams in and dies; 192 KiB of a leave (written), 64 KiB stay, dirty
    EXPECT_DOUBLE_EQ(p.nodes[0].read_bytes, 256 * KiB);
    EXPECT_DOUBLE_EQ(p.nodes[0].write_bytes, 192 * KiB);
    // node b: reads a's missing 192 KiB (clean: already in DRAM); then b (next use tied with a, higher id)
    // leaves whole and dirty, and 192 KiB of a leave carrying their share of a's 64 KiB dirty bytes:
    // 48 KiB. A tensor-wide dirty flag would write all 192 KiB a second time.
    EXPECT_DOUBLE_EQ(p.nodes[1].read_bytes, 192 * KiB);
    EXPECT_DOUBLE_EQ(p.nodes[1].write_bytes, 256 * KiB + 48 * KiB);
    // node c: a's missing part and all of b come back; everything is dead after it
    EXPECT_DOUBLE_EQ(p.nodes[2].read_bytes, 192 * KiB + 256 * KiB);
    EXPECT_DOUBLE_EQ(p.nodes[2].write_bytes, 0);
}

TEST(MemoryModel, ForwardBackwardReuseWhenEverythingFits) {
    zoo::NetConfig cfg;
    cfg.batch = 4;
    zoo::Model m = zoo::build("lenet5", cfg);
    TrainGraph tg = build_train_graph(std::move(m.graph), m.loss, OptimizerConfig::sgd(0.1f, 0.9f));
    const Graph& g = tg.graph;
    double persistent_in = 0, updated = 0;
    for (const Tensor& t : g.tensors()) {
        if (t.role == TensorRole::Parameter || t.role == TensorRole::State) updated += double(t.desc.bytes());
        if (persists(t.role)) persistent_in += double(t.desc.bytes());
    }
    const IterationPrediction p = predict_iteration(g, hw(64 * MiB));
    // every persistent tensor is read once; parameters and momentum are written back once; no
    // activation or gradient ever reaches DRAM
    EXPECT_DOUBLE_EQ(p.read_bytes, persistent_in);
    EXPECT_DOUBLE_EQ(p.write_bytes, updated);
    // with a small buffer the saved activations are re-read in backward
    const IterationPrediction q = predict_iteration(g, hw(16 * KiB));
    EXPECT_GT(q.read_bytes, 2 * p.read_bytes);
    EXPECT_GT(q.time_s, p.time_s);
}

TEST(MemoryModel, TrafficFallsWithCapacity) {
    zoo::NetConfig cfg;
    cfg.batch = 8;
    cfg.image_size = 32;
    zoo::Model m = zoo::build("resnet18", cfg);
    TrainGraph tg = build_train_graph(std::move(m.graph), m.loss, OptimizerConfig::sgd(0.1f, 0.9f));
    double last = 1e300;
    for (double cap = 256 * KiB; cap <= 512 * MiB; cap *= 2) {
        const IterationPrediction p = predict_iteration(tg.graph, hw(cap));
        const double traffic = p.read_bytes + p.write_bytes;
        EXPECT_LE(traffic, last * 1.02) << "capacity " << cap;
        last = traffic;
        for (const auto& n : p.nodes) ASSERT_LE(n.occupancy_bytes, cap + 1);
    }
}

TEST(MemoryModel, RejectsBadHardware) {
    const Graph g = relu_chain(16, 1);
    MemoryConfig c = hw(1 * MiB);
    c.bandwidth_bytes_per_s = 0;
    EXPECT_THROW(predict_iteration(g, c), Error);
    c = hw(1 * MiB);
    c.peak_f32_flops = -1;
    EXPECT_THROW(predict_iteration(g, c), Error);
}

TEST(Units, ParseAndReject) {
    EXPECT_EQ(parse_number("1.5"), 1.5);
    EXPECT_EQ(parse_number("-2e3"), -2000);
    for (const char* bad : {"", " ", "1.5x", "x1", "nan", "inf", "1e999", "1,5"}) EXPECT_FALSE(parse_number(bad)) << bad;
    EXPECT_DOUBLE_EQ(parse_bytes("32MiB", "--capacity"), 32 * MiB);
    EXPECT_DOUBLE_EQ(parse_bytes("6MB", "--capacity"), 6e6);
    EXPECT_DOUBLE_EQ(parse_bytes("4096", "--capacity"), 4096);
    EXPECT_DOUBLE_EQ(parse_bandwidth("900GB/s", "--bandwidth"), 900e9);
    EXPECT_DOUBLE_EQ(parse_bandwidth("1.5TB/s", "--bandwidth"), 1.5e12);
    EXPECT_DOUBLE_EQ(parse_flops("15.7TFLOPS", "--peak"), 15.7e12);
    EXPECT_EQ(parse_sweep("1MiB..8MiB", parse_bytes, "--sweep").size(), 4u);
    EXPECT_DOUBLE_EQ(parse_seconds("10us", "--overhead"), 1e-5);
    EXPECT_DOUBLE_EQ(parse_seconds("0", "--overhead"), 0);
    test::expect_error([] { parse_seconds("10", "--overhead"); }, "--overhead: unknown unit ''");
    EXPECT_EQ(parse_sweep("1MiB,3MiB", parse_bytes, "--sweep")[1], 3 * MiB);
    test::expect_error([] { parse_bytes("32XB", "--capacity"); }, "--capacity: unknown unit 'XB' in '32XB'");
    test::expect_error([] { parse_bytes("lots", "--capacity"); }, "--capacity: 'lots' is not a quantity");
    test::expect_error([] { parse_bandwidth("900", "--bandwidth"); }, "unknown unit ''");
    test::expect_error([] { parse_bytes("-4MiB", "--capacity"); }, "must be positive");
    test::expect_error([] { parse_sweep("8MiB..1MiB", parse_bytes, "--sweep capacity"); }, "ends below its start");
    EXPECT_DOUBLE_EQ(parse_seconds("0us", "--overhead"), 0);  // zero is a valid overhead, with or without a unit
    test::expect_error([] { parse_bandwidth("0", "--bandwidth"); }, "--bandwidth: '0' must be positive");
    test::expect_error([] { parse_flops("-1", "--peak"); }, "--peak: '-1' must be positive");
    test::expect_error([] { parse_bytes("0.5B", "--capacity"); }, "--capacity: '0.5B' is less than one byte");
    test::expect_error([] { parse_seconds("-1us", "--overhead"); }, "must be zero or positive");
    for (const char* bad : {"nan", "inf", "-infGB/s", "nanTFLOPS"}) {
        test::expect_error([&] { parse_bytes(bad, "--capacity"); }, "is not a finite number");
        test::expect_error([&] { parse_bandwidth(bad, "--bandwidth"); }, "is not a finite number");
        test::expect_error([&] { parse_flops(bad, "--peak"); }, "is not a finite number");
        test::expect_error([&] { parse_seconds(bad, "--overhead"); }, "is not a finite number");
    }
}

}  // namespace
}  // namespace joule::predict

#include "predict/buffer_sim.hpp"

namespace joule::predict {
namespace {

// The analytical model against the trace-driven Belady simulation of the same schedule and tilings.
// Target: within 5 %; measured (README): all 12 within 3.7 %, mean 1.5 %, never below the simulation.
struct SimCase {
    const char* net;
    int64_t batch, image, seq;
    double capacity;
};
class ModelVsSimulation : public ::testing::TestWithParam<SimCase> {};

TEST_P(ModelVsSimulation, TrafficAgrees) {
    const SimCase c = GetParam();
    zoo::NetConfig cfg;
    cfg.batch = c.batch, cfg.image_size = c.image, cfg.seq_len = c.seq;
    zoo::Model m = zoo::build(c.net, cfg);
    TrainGraph tg = build_train_graph(std::move(m.graph), m.loss, OptimizerConfig::sgd(0.1f, 0.9f));
    const MemoryConfig h = hw(c.capacity);
    const IterationPrediction p = predict_iteration(tg.graph, h);
    const SimulationResult s = simulate_belady(tg.graph, h);
    const double model = p.read_bytes + p.write_bytes, sim = s.read_bytes + s.write_bytes;
    EXPECT_GT(s.accesses, 0);
    EXPECT_GE(model, 0.99 * sim) << "the optimal buffer should not do worse than the model";
    EXPECT_LE(std::fabs(model - sim) / sim, 0.05) << c.net << " at " << c.capacity << " B: model " << model << ", simulation " << sim;
}

INSTANTIATE_TEST_SUITE_P(
    Nets, ModelVsSimulation,
    ::testing::Values(SimCase{"lenet5", 16, 0, 128, 64 * KiB}, SimCase{"lenet5", 16, 0, 128, 1 * MiB}, SimCase{"lenet5", 16, 0, 128, 16 * MiB},
                      SimCase{"resnet18", 4, 32, 128, 64 * KiB}, SimCase{"resnet18", 4, 32, 128, 1 * MiB}, SimCase{"resnet18", 4, 32, 128, 16 * MiB},
                      SimCase{"mobilenet_v2", 2, 64, 128, 64 * KiB}, SimCase{"mobilenet_v2", 2, 64, 128, 1 * MiB},
                      SimCase{"mobilenet_v2", 2, 64, 128, 16 * MiB}, SimCase{"bert-tiny", 2, 0, 32, 64 * KiB},
                      SimCase{"bert-tiny", 2, 0, 32, 1 * MiB}, SimCase{"bert-tiny", 2, 0, 32, 16 * MiB}),
    [](const auto& i) { return test::param_name(std::string(i.param.net) + "_" + std::to_string(int64_t(i.param.capacity / 1024)) + "KiB"); });

TEST(Simulation, ExactOnAStreamingChain) {
    // 1 MiB relus through a 512 KiB buffer: the simulation agrees with the hand count of the model test
    Graph g;
    TensorId t = g.input("x", {{256 * 1024}});
    for (int i = 0; i < 3; ++i) t = g.add1(OpKind::Relu, NoAttrs{}, {t}, "relu" + std::to_string(i));
    const SimulationResult s = simulate_belady(g, hw(512 * KiB), 4 * KiB);
    EXPECT_DOUBLE_EQ(s.read_bytes, 2 * MiB);
    EXPECT_DOUBLE_EQ(s.write_bytes, 1 * MiB);
}

}  // namespace
}  // namespace joule::predict

