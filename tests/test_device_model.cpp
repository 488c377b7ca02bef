// predict/device_model: the one cost interface. Its traffic is the memory model's for a node run alone
// (cold buffer), its time never beats the roofline and grows with size, a lower power limit never gives
// less time or more power, clocks and limits are checked, and transfers and casts cost what they move.
#include <gtest/gtest.h>

#include "graph/autodiff.hpp"
#include "graph/error.hpp"
#include "predict/device_model.hpp"
#include "test_util.hpp"
#include "zoo/zoo.hpp"

namespace joule::predict {
namespace {

Graph train_graph(const std::string& net, int64_t batch, int64_t image, int64_t seq = 32) {
    zoo::NetConfig cfg;
    cfg.batch = batch, cfg.image_size = image, cfg.seq_len = seq;
    zoo::Model m = zoo::build(net, cfg);
    return build_train_graph(std::move(m.graph), m.loss, OptimizerConfig::adam(1e-3f)).graph;
}

// node_alone with outputs persistent: what the cost interface means by "run alone, outputs written back"
Graph alone(const Graph& g, NodeId n, DType dtype) {
    Graph v = node_alone(g, n, dtype);
    for (TensorId t : v.node(0).outputs) v.tensor(t).role = TensorRole::State;
    return v;
}

TEST(DeviceModel, TrafficAndRooflineAreTheMemoryModelsForANodeAlone) {
    for (const char* device : {"v100", "a100", "turin-2vcpu"})
        for (const char* net : {"resnet18", "bert-tiny"})
            for (DType dtype : {DType::F32, DType::BF16}) {
                const DeviceModel d(hw::find_device_spec(device));
                if (!d.has(dtype)) continue;
                const Graph g = train_graph(net, 2, 32);
                MemoryConfig cfg = d.memory_config();  // roofline only
                for (size_t i = 0; i < g.num_nodes(); ++i) {
                    const NodeId n = NodeId(i);
                    const Cost c = cost(g, n, d, dtype);
                    const IterationPrediction p = predict_iteration(alone(g, n, dtype), cfg);
                    const NodePrediction& x = p.nodes[0];
                    EXPECT_NEAR(c.bytes, x.read_bytes + x.write_bytes, 1e-6 * c.bytes + 1e-9) << device << " " << net << " " << g.node(n).name;
                    EXPECT_NEAR(c.roofline_s, std::max(x.compute_s, x.memory_s), 1e-9 * c.roofline_s + 1e-15) << g.node(n).name;
                    EXPECT_GE(c.seconds, c.roofline_s) << g.node(n).name;  // never below the roofline
                    EXPECT_GE(c.joules, 0);
                }
            }
}

TEST(DeviceModel, CostGrowsWithSize) {
    for (const char* device : {"v100", "h100", "k40", "gold6148"}) {
        const DeviceModel d(hw::find_device_spec(device));
        Cost last;
        for (int64_t batch : {1, 4, 16, 64, 256}) {
            Graph g;
            const TensorId x = g.input("x", {{batch, 64, 28, 28}});
            const TensorId w = g.parameter("w", {{64, 64, 3, 3}}, Init::ones());
            ConvAttrs a;
            a.pad[0] = a.pad[1] = 1;
            g.add1(OpKind::Conv2d, a, {x, w}, "conv");
            const Cost c = cost(g, 0, d, DType::F32);
            EXPECT_GT(c.seconds, last.seconds) << device << " batch " << batch;
            EXPECT_GT(c.bytes, last.bytes);
            EXPECT_GE(c.joules, last.joules);
            last = c;
        }
    }
}

TEST(DeviceModel, ALowerPowerLimitNeverGivesLessTimeOrMorePower) {
    const DeviceModel d = load_device_model("v100");
    const Graph g = train_graph("resnet18", 16, 64);
    size_t throttled = 0;
    for (size_t i = 0; i < g.num_nodes(); ++i) {
        Cost above;
        for (double limit = 300; limit >= 150; limit -= 10) {
            const Cost c = cost(g, NodeId(i), d, DType::F32, {.power_limit_w = limit});
            if (limit < 300) {
                EXPECT_GE(c.seconds, above.seconds - 1e-15) << g.node(NodeId(i)).name << " at " << limit << " W";
                EXPECT_LE(c.watts(), above.watts() + 1e-9) << g.node(NodeId(i)).name << " at " << limit << " W";
            }
            if (c.clock_mhz > d.spec().clock_min_mhz) {
                EXPECT_LE(d.idle_w() + c.watts(), limit + 1e-6);
            }
            throttled += c.throttled;
            above = c;
        }
    }
    EXPECT_GT(throttled, 0u);  // the range bites on a V100
}

TEST(DeviceModel, ClockScalesComputeNotMemory) {
    const DeviceModel d = load_device_model("a100");
    Graph g;
    const TensorId a = g.input("a", {{4096, 4096}});
    const TensorId b = g.parameter("b", {{4096, 4096}}, Init::ones());
    const TensorId y = g.add1(OpKind::Linear, LinearAttrs{false}, {a, b}, "gemm");
    g.add1(OpKind::Relu, NoAttrs{}, {y}, "relu");
    const Cost gemm_fast = cost(g, 0, d, DType::F32), gemm_slow = cost(g, 0, d, DType::F32, {.clock_mhz = 705});
    const Cost relu_fast = cost(g, 1, d, DType::F32), relu_slow = cost(g, 1, d, DType::F32, {.clock_mhz = 705});
    EXPECT_NEAR(gemm_slow.seconds / gemm_fast.seconds, 2.0, 0.05);    // compute-bound: half the clock, twice the time
    EXPECT_NEAR(relu_slow.seconds / relu_fast.seconds, 1.0, 0.02);    // memory-bound: the memory clock stays
    EXPECT_LT(relu_slow.watts(), relu_fast.watts());                  // and the core draws less
    EXPECT_EQ(gemm_slow.clock_mhz, 705);
    test::expect_error([&] { cost(g, 0, d, DType::F32, {.clock_mhz = 2000}); }, "clock 2000 MHz is outside gpu-nvidia-a100-sxm4-40gb's range [210, 1410] MHz");
    test::expect_error([&] { cost(g, 0, d, DType::F32, {.power_limit_w = 50}); }, "power limit 50 W is outside");
    test::expect_error([&] { cost(g, 0, d, DType::F32, {.power_limit_w = 200, .clock_mhz = 900}); }, "a clock or a power limit, not both");
    const DeviceModel cpu(hw::find_device_spec("gold6148"));
    test::expect_error([&] { cost(g, 0, cpu, DType::F32, {.clock_mhz = 1000}); }, "has no clock range");
    test::expect_error([&] { cost(g, 0, cpu, DType::F32, {.power_limit_w = 100}); }, "has no power-limit range");
    test::expect_error([&] { cost(g, 0, load_device_model("v100"), DType::BF16); }, "has no bf16 compute path");
}

TEST(DeviceModel, VoltageCurveMakesPowerFallFasterThanTheClock) {
    const DeviceModel d = load_device_model("2080ti");  // the one spec with a published voltage curve
    EXPECT_DOUBLE_EQ(d.voltage_scale(d.spec().peak_clock_mhz), 1.0);
    EXPECT_LT(d.voltage_scale(900), 900 / d.spec().peak_clock_mhz);
    const DeviceModel v100 = load_device_model("v100");  // none published: V constant, power ~ f
    EXPECT_DOUBLE_EQ(v100.voltage_scale(765), 0.5);
}

TEST(DeviceModel, TransfersAndCasts) {
    const hw::Catalogue c = hw::load_catalogue();
    const hw::LinkSpec& pcie = c.link("pcie3-x16");
    const Cost t = transfer_cost(1e9, pcie);
    EXPECT_NEAR(t.seconds, pcie.latency_us * 1e-6 + 1e9 / (pcie.bandwidth_gbps * 1e9), 1e-12);
    EXPECT_NEAR(t.joules, 1e9 * pcie.energy_pj_per_byte * 1e-12, 1e-12);
    EXPECT_GT(transfer_cost(2e9, pcie).seconds, t.seconds);
    const DeviceModel a100 = load_device_model("a100");
    const Cost k = cast_cost(1e6, DType::F32, DType::BF16, a100);
    EXPECT_EQ(k.bytes, 6e6);
    EXPECT_GE(k.seconds, 6e6 / a100.bandwidth());
    EXPECT_GT(cast_cost(2e6, DType::F32, DType::BF16, a100).seconds, k.seconds);
}

TEST(DeviceModel, EfficiencyCurvesMustDescribeTheSpecsHardware) {
    const hw::DeviceSpec v100 = hw::find_device_spec("v100");
    EfficiencyModel e = load_efficiency(hw::data_file("gpu-nvidia-a100-sxm4-40gb", "efficiency"));
    test::expect_error([&] { DeviceModel(v100, e); }, "its curves are relative to peak 19500 GFLOP/s");
}

}  // namespace
}  // namespace joule::predict
