// predict/efficiency: the fit recovers known curves exactly, keeps every scale non-negative, survives a
// save/load round trip, drives predict_iteration's node times, and bad files / samples are refused with
// the file, line and key named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "graph/autodiff.hpp"
#include "predict/efficiency.hpp"
#include "predict/memory_model.hpp"
#include "test_util.hpp"

namespace joule::predict {
namespace {

namespace fs = std::filesystem;

std::string temp_file(const std::string& name, const std::string& text = "") {
    const fs::path d = fs::temp_directory_path() / ("joule_efficiency_" + std::to_string(getpid()));
    fs::create_directories(d);
    const fs::path p = d / name;
    if (!text.empty()) std::ofstream(p) << text;
    return p.string();
}

// Samples of a GEMM kind and a streaming kind, generated from known curves over varied shapes.
std::vector<EfficiencySample> known_samples(const KindEfficiency& gemm, const KindEfficiency& stream) {
    std::vector<EfficiencySample> v;
    for (double m : {8.0, 64.0, 512.0, 4096.0})
        for (double n : {1.0, 16.0, 256.0})
            for (double k : {9.0, 128.0, 2048.0}) {
                EfficiencySample s{"Linear", 2 * m * n * k / 1e11, (m * k + k * n + m * n) * 4 / 5e10, m, n, k, 0, 0.05};
                s.measured_s = gemm.seconds(s.compute_s, s.memory_s, m, n, k);
                v.push_back(s);
            }
    for (double bytes : {1e3, 1e5, 1e7, 3e8}) {
        EfficiencySample s{"Relu", bytes / 4 / 1e11, bytes / 5e10, 0, 0, 0, 0, 0.05};
        s.measured_s = stream.seconds(s.compute_s, s.memory_s, 0, 0, 0);
        v.push_back(s);
    }
    return v;
}

TEST(Efficiency, FitRecoversKnownCurves) {
    KindEfficiency gemm;
    gemm.gemm = true;
    gemm.fixed_s = 5e-6, gemm.compute_scale = 1.5, gemm.memory_scale = 0.25, gemm.half_m = 64, gemm.half_n = 0, gemm.half_k = 16;
    KindEfficiency stream;
    stream.fixed_s = 3e-6, stream.compute_scale = 0, stream.memory_scale = 1.8;
    const EfficiencyModel m = fit_efficiency(known_samples(gemm, stream));
    ASSERT_EQ(m.kinds.size(), 2u);
    const KindEfficiency& g = m.kinds.at("Linear");
    EXPECT_TRUE(g.gemm);
    EXPECT_EQ(g.samples, 36);
    EXPECT_DOUBLE_EQ(g.half_m, 64);
    EXPECT_DOUBLE_EQ(g.half_n, 0);
    EXPECT_DOUBLE_EQ(g.half_k, 16);
    EXPECT_NEAR(g.fixed_s, 5e-6, 1e-12);
    EXPECT_NEAR(g.compute_scale, 1.5, 1e-6);
    EXPECT_NEAR(g.memory_scale, 0.25, 1e-6);
    EXPECT_LT(g.error, 1e-6);
    const KindEfficiency& r = m.kinds.at("Relu");
    EXPECT_FALSE(r.gemm);
    // compute and memory time are proportional for a streaming op: only their sum is determined
    EXPECT_NEAR(r.fixed_s, 3e-6, 1e-12);
    EXPECT_NEAR(r.compute_scale * 0.125 + r.memory_scale, 1.8, 1e-6);  // compute_s = memory_s / 8
    EXPECT_LT(r.error, 1e-6);
}

TEST(Efficiency, AStepSlowedByTheMachineIsAnOutlier) {
    KindEfficiency gemm;
    gemm.gemm = true;
    gemm.fixed_s = 5e-6, gemm.compute_scale = 1.5, gemm.memory_scale = 0.25, gemm.half_m = 64, gemm.half_k = 16;
    KindEfficiency stream;
    stream.fixed_s = 3e-6, stream.memory_scale = 1.8;
    std::vector<EfficiencySample> v = known_samples(gemm, stream);
    v[7].measured_s *= 20;  // one GEMM measured in a step the machine stalled
    const KindEfficiency g = fit_efficiency(v).kinds.at("Linear");  // a copy: the fitted model is a temporary
    EXPECT_EQ(g.samples, 36);
    EXPECT_EQ(g.outliers, 1);
    EXPECT_NEAR(g.compute_scale, 1.5, 1e-6);
    EXPECT_NEAR(g.fixed_s, 5e-6, 1e-12);
    EXPECT_LT(g.error, 1e-6);
}

TEST(Efficiency, ScalesStayNonNegative) {
    // Time falls as memory time rises: unconstrained least squares would give a negative memory scale.
    std::vector<EfficiencySample> v;
    for (int i = 1; i <= 6; ++i) v.push_back({"Add", 0, 1e-4 * i, 0, 0, 0, 1e-3 - 1e-4 * i, 1e-2});
    const KindEfficiency k = fit_efficiency(v).kinds.at("Add");
    EXPECT_GE(k.fixed_s, 0);
    EXPECT_GE(k.compute_scale, 0);
    EXPECT_GE(k.memory_scale, 0);
    // nothing else is feasible: a constant. Weighted by the measured times it is their harmonic mean;
    // reweighted by that constant prediction, every node weighs the same: the arithmetic mean.
    EXPECT_NEAR(k.fixed_s, 6.5e-4, 1e-12);
    EXPECT_DOUBLE_EQ(k.memory_scale, 0);
}

TEST(Efficiency, RejectsBadSamples) {
    test::expect_error([] { fit_efficiency({}); }, "no samples");
    test::expect_error([] { fit_efficiency({{"Add", 0, -1, 0, 0, 0, 1, 1}}); }, "'Add': memory time must be a finite, non-negative number");
    test::expect_error([] { fit_efficiency({{"Add", NAN, 0, 0, 0, 0, 1, 1}}); }, "compute time");
    test::expect_error([] { fit_efficiency({{"Conv2d", 1, 1, 4, 4, 4, 1, 1}, {"Conv2d", 1, 1, 0, 0, 0, 1, 1}}); }, "mixes GEMM and non-GEMM");
}

TEST(Efficiency, SaveLoadRoundTrip) {
    KindEfficiency gemm;
    gemm.gemm = true;
    gemm.fixed_s = 5e-6, gemm.compute_scale = 1.5, gemm.memory_scale = 0.25, gemm.half_m = 64, gemm.half_k = 16;
    KindEfficiency stream;
    stream.fixed_s = 3e-6, stream.compute_scale = 0, stream.memory_scale = 1.8;
    EfficiencyModel m = fit_efficiency(known_samples(gemm, stream));
    m.hardware = {2 << 20, 50e9, 300e9, 600e9, 4e-6};
    m.fitted_from = "test: 2 kinds";
    m.traffic = "cold";
    const std::string path = temp_file("round.yaml");
    save_efficiency(m, path);
    const EfficiencyModel l = load_efficiency(path);
    EXPECT_EQ(l.path, path);
    EXPECT_EQ(l.fitted_from, m.fitted_from);
    EXPECT_EQ(l.traffic, "cold");
    EXPECT_DOUBLE_EQ(l.hardware.capacity_bytes, 2 << 20);
    EXPECT_DOUBLE_EQ(l.hardware.bandwidth_bytes_per_s, 50e9);
    EXPECT_DOUBLE_EQ(l.hardware.peak_bf16_flops, 600e9);
    EXPECT_DOUBLE_EQ(l.hardware.node_overhead_s, 4e-6);
    ASSERT_EQ(l.kinds.size(), 2u);
    for (const auto& [key, k] : m.kinds) {
        const KindEfficiency& x = l.kinds.at(key);
        EXPECT_EQ(x.gemm, k.gemm) << key;
        EXPECT_EQ(x.samples, k.samples) << key;
        EXPECT_EQ(x.outliers, k.outliers) << key;
        for (double s : {1e-6, 1e-3})
            EXPECT_NEAR(x.seconds(s, 2 * s, 32, 8, 100), k.seconds(s, 2 * s, 32, 8, 100), 1e-8 * k.seconds(s, 2 * s, 32, 8, 100)) << key;
    }
}

TEST(Efficiency, LoadNamesWhatIsWrong) {
    const std::string good_hw = "hardware: {capacity_bytes: 1048576, bandwidth_bytes_per_s: 5.0e10, peak_f32_flops: 3.0e11}\n";
    test::expect_error([] { load_efficiency("/nonexistent/e.yaml"); }, "/nonexistent/e.yaml: cannot open the efficiency file");
    test::expect_error([&] { load_efficiency(temp_file("v.yaml", "kind: efficiency\n" + good_hw)); }, "missing 'version'");
    test::expect_error([&] { load_efficiency(temp_file("k.yaml", "version: 1\nkind: device\n" + good_hw)); }, "'kind: efficiency' missing");
    test::expect_error([&] { load_efficiency(temp_file("h.yaml", "version: 1\nkind: efficiency\nkinds: {Add: {}}\n")); }, "missing 'hardware'");
    test::expect_error([&] { load_efficiency(temp_file("e.yaml", "version: 1\nkind: efficiency\n" + good_hw + "kinds: {}\n")); }, "non-empty map");
    const std::string head = "version: 1\nkind: efficiency\n" + good_hw + "kinds:\n";
    test::expect_error([&] { load_efficiency(temp_file("n.yaml", head + "  Add: {fixed_s: -1, compute_scale: 1, memory_scale: 1}\n")); },
                       "n.yaml:5: 'Add.fixed_s' must be a finite, non-negative number");
    test::expect_error([&] { load_efficiency(temp_file("s.yaml", head + "  Add: {fixed_s: x, compute_scale: 1, memory_scale: 1}\n")); },
                       "s.yaml:5: 'Add.fixed_s' must be a number");
    test::expect_error([&] { load_efficiency(temp_file("u.yaml", head + "  Add: {fixed_s: 0, compute_scale: 1, memory_scale: 1, speed: 2}\n")); },
                       "kind 'Add': unknown key 'speed'");
    test::expect_error([&] { load_efficiency(temp_file("m.yaml", head + "  Add: {fixed_s: 0, compute_scale: 1}\n")); }, "kind 'Add' needs 'memory_scale'");
    test::expect_error([&] { load_efficiency(temp_file("g.yaml", head + "  Linear: {fixed_s: 0, compute_scale: 1, memory_scale: 1, half_m: 4}\n")); },
                       "kind 'Linear' needs 'half_n'");
    test::expect_error([&] { load_efficiency(temp_file("y.yaml", "version: [1\n")); }, "invalid YAML");
    test::expect_error([&] { load_efficiency(temp_file("t.yaml", "version: 1\nkind: efficiency\ntraffic: warm\n" + good_hw + "kinds:\n  Add: {fixed_s: 0, compute_scale: 1, memory_scale: 1}\n")); },
                       "t.yaml:3: 'traffic' must be in-context or cold, not 'warm'");
    // a misspelt op kind, or a suffix calibrate never writes, names the kind, file and line
    test::expect_error([&] { load_efficiency(temp_file("o.yaml", head + "  Add: {fixed_s: 0, compute_scale: 1, memory_scale: 1}\n  Conv2D: {fixed_s: 0, compute_scale: 1, memory_scale: 1}\n")); },
                       "o.yaml:6: unknown op kind 'Conv2D'");
    test::expect_error([&] { load_efficiency(temp_file("p.yaml", head + "  Add.f64: {fixed_s: 0, compute_scale: 1, memory_scale: 1}\n")); },
                       "p.yaml:5: unknown op kind 'Add.f64'");
    EXPECT_NO_THROW(load_efficiency(temp_file("q.yaml", head + "  Conv2d.grouped.bf16: {fixed_s: 0, compute_scale: 1, memory_scale: 1}\n")));
    // a directory given as the file
    test::expect_error([&] { load_efficiency("/tmp"); }, "/tmp: cannot open the efficiency file: it is a directory");
    // curves set from published figures cite every kind
    const std::string generic = head + "  gemm.f16: {fixed_s: 0, compute_scale: 1, memory_scale: 0, half_m: 0, half_n: 0, half_k: 0}\n"
                                       "  other: {fixed_s: 0, compute_scale: 1, memory_scale: 1}\n";
    EXPECT_NO_THROW(load_efficiency(temp_file("c.yaml", generic + "sources: {gemm.f16: a, other: b, hardware: c}\n")));
    test::expect_error([&] { load_efficiency(temp_file("c1.yaml", generic + "sources: {gemm.f16: a}\n")); }, "kind 'other' has no entry in 'sources'");
    test::expect_error([&] { load_efficiency(temp_file("c2.yaml", generic + "sources: {gemm.f16: a, other: b, Relu: c}\n")); },
                       "'sources' cites 'Relu', which 'kinds' does not have");
    test::expect_error([&] { load_efficiency(temp_file("c3.yaml", generic + "sources: [a]\n")); }, "'sources' must map kinds");
    test::expect_error([&] { load_efficiency(temp_file("c4.yaml", head + "  gemms: {fixed_s: 0, compute_scale: 1, memory_scale: 1}\n")); },
                       "unknown op kind 'gemms'");
}

TEST(Efficiency, GenericCurvesStandInForKindsWithoutTheirOwn) {
    EfficiencyModel m;
    KindEfficiency conv, gemm, gemm16, other;
    conv.fixed_s = 1, gemm.fixed_s = 2, gemm16.fixed_s = 3, other.fixed_s = 4;
    m.kinds = {{"Conv2d", conv}, {"gemm", gemm}, {"gemm.f16", gemm16}, {"other", other}};
    EXPECT_EQ(m.lookup(OpKind::Conv2d, true, false, DType::F32)->fixed_s, 1);   // its own curve first
    EXPECT_EQ(m.lookup(OpKind::Linear, true, false, DType::F32)->fixed_s, 2);   // then its class's
    EXPECT_EQ(m.lookup(OpKind::Conv2d, true, false, DType::F16)->fixed_s, 3);   // in its dtype
    EXPECT_EQ(m.lookup(OpKind::Relu, false, false, DType::F32)->fixed_s, 4);
    EXPECT_EQ(m.lookup(OpKind::Relu, false, false, DType::BF16), nullptr);      // no bf16 curve of either
    EXPECT_EQ(m.lookup(OpKind::Conv2d, true, true, DType::F32), nullptr);       // nor a grouped one
}

TEST(Efficiency, WarnsOfFitsFromFewPointsOrMostlyOutliers) {
    EfficiencyModel m;
    KindEfficiency ok, few, gemm, busy;
    ok.samples = 12;                                   // 12 points, 3 parameters
    few.samples = 5;                                   // 5 < 2 x 3
    gemm.gemm = true, gemm.samples = 10;               // 10 < 2 x 6
    busy.samples = 20, busy.outliers = 11;             // most dropped (9 left: enough points)
    m.kinds = {{"Add", ok}, {"Relu", few}, {"Linear", gemm}, {"MaxPool2d", busy}};
    const std::vector<std::string> w = fit_warnings(m);
    ASSERT_EQ(w.size(), 2u);
    EXPECT_NE(w[0].find("Linear (10 points, 6 parameters), Relu (5 points, 3 parameters)"), std::string::npos) << w[0];
    EXPECT_EQ(w[0].find("Add"), std::string::npos) << w[0];
    EXPECT_NE(w[1].find("most points dropped as outliers"), std::string::npos) << w[1];
    EXPECT_NE(w[1].find("MaxPool2d (11 of 20)"), std::string::npos) << w[1];
    m.kinds = {{"Add", ok}};
    EXPECT_TRUE(fit_warnings(m).empty());
}

TEST(Efficiency, DrivesNodeTimesInTheMemoryModel) {
    // X[64, 256] -> Linear(128) -> Relu: the Linear is calibrated, the Relu keeps the roofline.
    Graph g;
    const TensorId x = g.input("x", {{64, 256}});
    const TensorId w = g.parameter("w", {{128, 256}}, Init::ones());
    const TensorId y = g.add1(OpKind::Linear, LinearAttrs{false}, {x, w}, "fc");
    g.add1(OpKind::Relu, NoAttrs{}, {y}, "relu");
    MemoryConfig cfg;
    cfg.capacity_bytes = 1 << 20, cfg.bandwidth_bytes_per_s = 50e9, cfg.peak_f32_flops = 300e9, cfg.node_overhead_s = 1e-6;
    const IterationPrediction roof = predict_iteration(g, cfg);
    EfficiencyModel e;
    KindEfficiency k;
    k.gemm = true;
    k.fixed_s = 7e-6, k.compute_scale = 2, k.memory_scale = 0.5, k.half_m = 64, k.half_n = 0, k.half_k = 256;
    e.kinds["Linear"] = k;
    cfg.efficiency = &e;
    const IterationPrediction cal = predict_iteration(g, cfg);
    EXPECT_EQ(cal.calibrated_nodes, 1u);
    ASSERT_EQ(cal.nodes.size(), 2u);
    EXPECT_TRUE(cal.nodes[0].calibrated);
    EXPECT_FALSE(cal.nodes[1].calibrated);
    const NodePrediction& n = roof.nodes[0];
    // M = 64, N = 128, K = 256: penalty (1 + 64/64)(1)(1 + 256/256) = 4
    EXPECT_NEAR(cal.nodes[0].time_s, 7e-6 + 2 * 4 * n.compute_s + 0.5 * n.memory_s, 1e-15);
    EXPECT_DOUBLE_EQ(cal.nodes[1].time_s, roof.nodes[1].time_s);
    // memory stall: the curve's memory term; the roofline's max(0, memory - compute)
    EXPECT_NEAR(cal.nodes[0].stall_s, 0.5 * n.memory_s, 1e-15);
    EXPECT_DOUBLE_EQ(roof.nodes[0].stall_s, std::max(0.0, n.memory_s - n.compute_s));
    MemoryConfig slow = cfg;
    slow.efficiency = nullptr, slow.bandwidth_bytes_per_s = 1e9;  // now the Linear waits for its operands
    const IterationPrediction waits = predict_iteration(g, slow);
    EXPECT_DOUBLE_EQ(waits.nodes[0].stall_s, waits.nodes[0].memory_s - waits.nodes[0].compute_s);
    EXPECT_GT(waits.nodes[0].stall_s, 0);
    EXPECT_DOUBLE_EQ(waits.stall_s, waits.nodes[0].stall_s + waits.nodes[1].stall_s);
    EXPECT_DOUBLE_EQ(cal.read_bytes, roof.read_bytes);  // traffic does not depend on the curves
    EXPECT_EQ(efficiency_key(g, NodeId(0)), "Linear");
    g.node(0).compute = DType::BF16;
    EXPECT_EQ(efficiency_key(g, NodeId(0)), "Linear.bf16");
}

}  // namespace
}  // namespace joule::predict
