// predict/fpga_model: the kernel model's monotonicity (more DSPs never slower, double buffering never
// slower), budgets as values, the tuner finding a feasible configuration for every layer of every zoo
// net, energy as counts x energy per action, and the switch cost between configurations.
#include <gtest/gtest.h>

#include <random>

#include "graph/autodiff.hpp"
#include "hw/device_spec.hpp"
#include "predict/device_model.hpp"
#include "predict/fpga_model.hpp"
#include "test_util.hpp"
#include "zoo/zoo.hpp"

namespace joule::predict {
namespace {

using test::zoo_train_graph;

FpgaWork gemm(double m, double n, double k, DType t = DType::F32) {
    FpgaWork w;
    w.kernel = FpgaKernel::Gemm, w.dtype = t, w.element_bytes = double(dtype_size(t));
    w.m = m, w.n = n, w.k = k;
    w.a_bytes = m * k * w.element_bytes, w.b_bytes = k * n * w.element_bytes, w.c_bytes = m * n * w.element_bytes;
    w.flops = 2 * m * n * k;
    return w;
}

FpgaConfig config(int r, int c, int v, double tm, double tn, double tk, bool db = true) {
    FpgaConfig x;
    x.kernel = FpgaKernel::Gemm, x.pe_rows = r, x.pe_cols = c, x.vec = v, x.tile_m = tm, x.tile_n = tn, x.tile_k = tk, x.double_buffer = db;
    return x;
}

TEST(FpgaModel, GemmCyclesResourcesAndEnergyFollowTheLoopNest) {
    const hw::DeviceSpec s10 = hw::find_device_spec("s10");
    // 256^3 on an 8x8x8 array with 64x64x256 tiles: 4 x 4 x 1 tiles of 8 x 8 x 32 busy cycles each
    const FpgaWork w = gemm(256, 256, 256);
    const FpgaEstimate e = fpga_estimate(w, config(8, 8, 8, 64, 64, 256), s10);
    EXPECT_TRUE(e.fits) << e.why_not;
    EXPECT_EQ(e.use.dsp, 512);
    EXPECT_EQ(e.compute_cycles - 16 * (8 + 8 + 4 * 4 + 8), 16 * 8 * 8 * 32);  // busy + the fill of each tile
    // A is streamed once per column tile, B once per row tile, C written once
    EXPECT_DOUBLE_EQ(e.offchip_bytes, 4.0 * (256 * 256 * 4 + 256 * 256 * 4 + 256 * 256));
    EXPECT_DOUBLE_EQ(e.dsp_cycles, 512.0 * 16 * 8 * 8 * 32);
    EXPECT_NEAR(e.dynamic_joules, (e.dsp_cycles * 21 + e.ram_bits * 0.16 + e.offchip_bytes * 140) * 1e-12, 1e-15);
    EXPECT_NEAR(e.static_joules, 39.2 * e.seconds, 1e-15);
    EXPECT_DOUBLE_EQ(e.seconds, e.cycles / 300e6);
    EXPECT_GT(e.gflops(), 0);
    EXPECT_GT(e.gflops_per_watt(), 0);
    // tile remainders are costed at their sizes: 100 = 64 + 36
    const FpgaEstimate odd = fpga_estimate(gemm(100, 100, 100), config(8, 8, 8, 64, 64, 256), s10);
    EXPECT_EQ(odd.compute_cycles - 4 * (8 + 8 + 4 * 4 + 8), 8 * 8 * 13 + 8 * 5 * 13 + 5 * 8 * 13 + 5 * 5 * 13);
    // bf16 takes half the DSPs on a fabric with two 18x19 multipliers per block
    EXPECT_EQ(fpga_estimate(gemm(256, 256, 256, DType::BF16), config(8, 8, 8, 64, 64, 256), s10).use.dsp, 256);
}

TEST(FpgaModel, ABudgetOverrunIsAValueNotAnException) {
    const hw::DeviceSpec s10 = hw::find_device_spec("s10");
    const FpgaWork w = gemm(4096, 4096, 4096);
    const FpgaEstimate ram = fpga_estimate(w, config(8, 8, 8, 4096, 4096, 4096), s10);
    EXPECT_FALSE(ram.fits);
    EXPECT_NE(ram.why_not.find("RAM blocks of 11721"), std::string::npos) << ram.why_not;
    const FpgaEstimate dsp = fpga_estimate(w, config(64, 64, 8, 64, 64, 64), s10);
    EXPECT_FALSE(dsp.fits);
    EXPECT_NE(dsp.why_not.find("DSP blocks of 5760"), std::string::npos) << dsp.why_not;
    FpgaConfig hot = config(8, 8, 8, 64, 64, 64);
    hot.clock_mhz = 500;
    test::expect_error([&] { fpga_estimate(w, hot, s10); }, "clock 500 MHz is outside fpga-intel-stratix10-gx2800-520n's kernel clock range [225, 342] MHz");
    // UltraRAM takes what BRAM cannot hold on a Xilinx part
    const hw::DeviceSpec u250 = hw::find_device_spec("u250");
    const FpgaEstimate big = fpga_estimate(w, config(8, 8, 8, 2048, 2048, 512), u250);
    EXPECT_GT(big.use.uram_blocks, 0);
    EXPECT_LE(big.use.ram_blocks, u250.fpga.ram_blocks);
}

TEST(FpgaModel, DoubleBufferingAndMoreDspsAreNeverSlower) {
    const hw::DeviceSpec s10 = hw::find_device_spec("s10");
    std::mt19937 rng(3);
    auto pick = [&](int hi) { return 1 << (rng() % (hi + 1)); };
    for (int trial = 0; trial < 200; ++trial) {
        const FpgaWork w = gemm(double(1 + rng() % 3000), double(1 + rng() % 3000), double(1 + rng() % 3000), trial % 2 ? DType::BF16 : DType::F32);
        const int r = pick(5), c = pick(5), v = pick(4);
        const FpgaConfig on = config(r, c, v, r * pick(4), c * pick(4), v * pick(6), true);
        FpgaConfig off = on;
        off.double_buffer = false;
        EXPECT_LE(fpga_estimate(w, on, s10).cycles, fpga_estimate(w, off, s10).cycles) << on.str();
    }
    // the tuner on a fabric with more DSPs finds a configuration at least as fast
    hw::DeviceSpec small = s10, big = s10;
    small.fpga.dsp_blocks = 1000, big.fpga.dsp_blocks = 4000;
    for (const FpgaWork& w : {gemm(3136, 64, 576), gemm(49, 512, 4608), gemm(512, 4608, 49), gemm(8, 1000, 2048)})
        EXPECT_LE(fpga_tune(w, big).estimate.seconds, fpga_tune(w, small).estimate.seconds);
}

TEST(FpgaModel, TheTunerFitsEveryLayerOfEveryZooNetAndAdaptsToShapes) {
    const TrainGraph tg = zoo_train_graph("resnet50", 8);
    const hw::DeviceSpec s10 = hw::find_device_spec("s10");
    std::set<std::string> configs;
    for (size_t i = 0; i < tg.graph.num_nodes(); ++i) {
        const auto w = fpga_work(tg.graph, NodeId(i), DType::F32);
        if (!w) continue;
        const TunedKernel t = fpga_tune(*w, s10);
        EXPECT_TRUE(t.estimate.fits);
        EXPECT_GT(t.feasible, 0);
        configs.insert(t.config.str());
    }
    EXPECT_GT(configs.size(), 5u);  // input-adaptive: different shapes, different configurations
    for (const hw::DeviceSpec& d : hw::load_all_specs()) {
        if (d.kind != "fpga") continue;
        for (const zoo::NetInfo& net : zoo::nets()) {
            const TrainGraph g = zoo_train_graph(net.name, 2);
            for (DType t : {DType::F32, DType::BF16})
                for (size_t i = 0; i < g.graph.num_nodes(); ++i)
                    if (const auto w = fpga_work(g.graph, NodeId(i), t)) {
                        EXPECT_NO_THROW(fpga_tune(*w, d)) << d.name << " " << net.name << " " << g.graph.node(NodeId(i)).name;
                    }
        }
    }
    // host-only ops have no FPGA kernel
    EXPECT_FALSE(fpga_runs(OpKind::Softmax));
    EXPECT_FALSE(fpga_runs(OpKind::Embedding));
    EXPECT_TRUE(fpga_runs(OpKind::ConvBackwardWeights));
}

TEST(FpgaModel, APowerLimitPicksASlowerCoolerKernelAndSwitchesCostAReconfiguration) {
    const hw::DeviceSpec s10 = hw::find_device_spec("s10");
    const FpgaWork w = gemm(4096, 4096, 4096);
    const TunedKernel fast = fpga_tune(w, s10);
    const double limit = s10.idle_w + 0.5 * (fast.estimate.watts() - s10.idle_w);
    const TunedKernel capped = fpga_tune(w, s10, 0, limit);
    EXPECT_LE(capped.estimate.watts(), limit);
    EXPECT_GT(capped.estimate.seconds, fast.estimate.seconds);
    test::expect_error([&] { fpga_tune(w, s10, 0, s10.idle_w - 1); }, "static power alone is 39.2 W");
    // the same kernel again costs nothing; two kernels that fill the fabric cost a reconfiguration
    EXPECT_EQ(fpga_switch_seconds(fast, fast, s10), 0);
    const TunedKernel other = fpga_tune(gemm(4096, 64, 4096), s10);
    ASSERT_NE(other.config, fast.config);
    ASSERT_GT(fast.estimate.use.dsp + other.estimate.use.dsp, s10.fpga.dsp_blocks);
    EXPECT_DOUBLE_EQ(fpga_switch_seconds(fast, other, s10), s10.fpga.reconfig_ms * 1e-3);
    // two small kernels share one bitstream
    const TunedKernel tiny = fpga_tune(gemm(8, 8, 8), s10), small = fpga_tune(gemm(16, 8, 64), s10);
    ASSERT_NE(tiny.config, small.config);
    EXPECT_EQ(fpga_switch_seconds(tiny, small, s10), 0);
    EXPECT_EQ(fpga_switch_seconds(tiny, tiny, s10), 0);
}

TEST(FpgaModel, TheCostInterfaceAnswersForAnFpgaThroughTheTuner) {
    const TrainGraph tg = zoo_train_graph("lenet5", 8);
    const DeviceModel s10 = load_device_model("s10");
    EXPECT_GT(s10.capacity(), 28e6);  // all its M20K: 11,721 x 20 kbit
    size_t costed = 0;
    for (size_t i = 0; i < tg.graph.num_nodes(); ++i) {
        const NodeId n = NodeId(i);
        if (!fpga_runs(tg.graph.node(n).kind)) {
            test::expect_error([&] { cost(tg.graph, n, s10, DType::F32); }, "has no FPGA kernel on fpga-intel-stratix10-gx2800-520n");
            continue;
        }
        const Cost c = cost(tg.graph, n, s10, DType::F32);
        const TunedKernel t = fpga_tune(*fpga_work(tg.graph, n, DType::F32), s10.spec());
        EXPECT_EQ(c.seconds, t.estimate.seconds);
        EXPECT_EQ(c.joules, t.estimate.dynamic_joules);
        const TunedKernel& k = fpga_kernel(tg.graph, n, s10, DType::F32);  // the kernel cost() charged, cached
        EXPECT_EQ(k.config, t.config);
        EXPECT_EQ(&k, &fpga_kernel(tg.graph, n, s10, DType::F32));
        EXPECT_GE(c.seconds, c.roofline_s * (1 - 1e-12));
        EXPECT_EQ(c.clock_mhz, 300);
        // a lower clock is never faster; a power limit picks a kernel under it
        EXPECT_GE(cost(tg.graph, n, s10, DType::F32, {.clock_mhz = 225}).seconds, c.seconds);
        const double watts = s10.idle_w() + c.joules / c.seconds;
        const Cost at = cost(tg.graph, n, s10, DType::F32, {.power_limit_w = watts * (1 + 1e-9)});
        EXPECT_EQ(at.seconds, c.seconds);
        EXPECT_FALSE(at.throttled);
        if (fpga_work(tg.graph, n, DType::F32)->kernel == FpgaKernel::Gemm) {
            const Cost capped = cost(tg.graph, n, s10, DType::F32, {.power_limit_w = 0.5 * (watts + s10.idle_w())});
            EXPECT_GE(capped.seconds, c.seconds);
            EXPECT_EQ(capped.throttled, capped.seconds > c.seconds);
        }
        ++costed;
    }
    EXPECT_GT(costed, 20u);
    test::expect_error([&] { cost(tg.graph, NodeId(0), s10, DType::F32, {.clock_mhz = 100}); }, "outside");
}

TEST(FpgaModel, TheKernelCacheTellsApartShapesThatPrintAlike) {
    // 10,000,001 and 10,000,002 elements (and their bytes, FLOPs) print alike in six digits: a text key gave both one kernel
    const DeviceModel s10 = load_device_model("s10");
    Graph g;
    std::vector<NodeId> relu;
    for (const int64_t n : {10000001, 10000002}) {
        const TensorId x = g.input("x" + std::to_string(n), TensorDesc{{n}});
        relu.push_back(g.tensor(g.add1(OpKind::Relu, NoAttrs{}, {x}, "relu" + std::to_string(n))).producer);
    }
    const TunedKernel& a = fpga_kernel(g, relu[0], s10, DType::F32);
    const TunedKernel& b = fpga_kernel(g, relu[1], s10, DType::F32);
    EXPECT_NE(&a, &b);
    EXPECT_EQ(a.estimate.seconds, fpga_tune(*fpga_work(g, relu[0], DType::F32), s10.spec()).estimate.seconds);
    EXPECT_EQ(b.estimate.seconds, fpga_tune(*fpga_work(g, relu[1], DType::F32), s10.spec()).estimate.seconds);
    EXPECT_GT(cost(g, relu[1], s10, DType::F32).joules, cost(g, relu[0], s10, DType::F32).joules);
}

}  // namespace
}  // namespace joule::predict

namespace joule::predict {
namespace {

TEST(FpgaModel, OneBitstreamDesignNeverReconfiguresAndCostsWhatItsArrayDoes) {
    EXPECT_EQ(parse_fpga_design("8x16x8/s16").str(), "8x16x8/s16");
    EXPECT_FALSE(parse_fpga_design("8x16x8/s16/sb").double_buffer);
    EXPECT_EQ(FpgaDesign{}.str(), "per-node");
    for (const char* bad : {"", "8x16", "8x16x8", "8x16x8/16", "8x16x8/s16/db", "3x16x8/s16", "8x16x8/s0", "0x1x1/s1", "8x16x8/s16x"})
        EXPECT_THROW(parse_fpga_design(bad), Error) << bad;
    const TrainGraph tg = zoo_train_graph("resnet18", 8, 32);
    const Graph& g = tg.graph;
    for (const char* device : {"s10", "de5", "u280"}) {
        const DeviceModel d = load_device_model(device);
        const FpgaDesign x = best_fpga_design(g, d);
        ASSERT_FALSE(x.empty()) << device;
        const hw::FpgaFabric& f = d.spec().fpga;
        EXPECT_LE((x.pe_rows * x.pe_cols * x.vec + x.stream_vec * 4) * f.dsp_per_f32_fma, f.dsp_blocks) << device << " " << x.str();
        Setting with;
        with.fpga_design = x;
        const TunedKernel* last = nullptr;
        double design_s = 0, tuned_s = 0;
        for (size_t i = 0; i < g.num_nodes(); ++i) {
            if (!fpga_runs(g.node(NodeId(i)).kind)) continue;
            const TunedKernel& k = fpga_kernel(g, NodeId(i), d, DType::F32, with);
            if (k.config.kernel == FpgaKernel::Gemm) {
                EXPECT_EQ(k.config.pe_rows * 10000 + k.config.pe_cols * 100 + k.config.vec, x.pe_rows * 10000 + x.pe_cols * 100 + x.vec);
            } else {
                EXPECT_EQ(k.config.vec, x.stream_vec);
            }
            if (last) {
                EXPECT_EQ(fpga_switch_seconds(*last, k, d.spec()), 0) << device << ": one bitstream, no reconfiguration";
            }
            last = &k;
            design_s += cost(g, NodeId(i), d, DType::F32, with).seconds;  // the cost interface charges the design's kernel
            tuned_s += cost(g, NodeId(i), d, DType::F32).seconds;
        }
        EXPECT_GE(design_s, tuned_s * (1 - 1e-12)) << device << ": a kernel tuned for each shape is never slower";
    }
}

}  // namespace
}  // namespace joule::predict
