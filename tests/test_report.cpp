// report/: the Chrome trace writer and the trace of a measured training run.
#include <gtest/gtest.h>

#include <sstream>

#include "report/run_trace.hpp"
#include "report/trace.hpp"
#include "test_util.hpp"

namespace joule {
namespace {

nlohmann::json written(const Trace& t) {
    std::ostringstream os;
    write_chrome_trace(os, t);
    return nlohmann::json::parse(os.str());
}

TEST(ChromeTrace, WritesTheTraceEventFormatWithCounters) {
    Trace t{"lenet5 on cpu+s10 (modelled)", {"cpu", "fpga_emu:s10"}, {}, {}, {{"timing", "modelled"}}};
    t.events.push_back({"conv1", "forward", 1, 0.001, 0.0005, {{"op", "Conv2d"}}});
    t.events.push_back({"relu1", "forward", 0, 0.0015, 0.0001, {}});
    t.counters.push_back({"power W (modelled, cpu)", 0.001, 40});
    t.counters.push_back({"power W (modelled, cpu)", 0.0015, 12});
    const nlohmann::json j = written(t);
    EXPECT_EQ(test::expect_trace_event_format(j), 2u);
    EXPECT_EQ(j["otherData"]["timing"], "modelled");
    std::vector<nlohmann::json> counters;
    for (const auto& e : j["traceEvents"])
        if (e["ph"] == "C") counters.push_back(e);
    ASSERT_EQ(counters.size(), 2u);
    EXPECT_DOUBLE_EQ(counters[0]["ts"].get<double>(), 1000);  // microseconds
    EXPECT_DOUBLE_EQ(counters[0]["args"]["value"].get<double>(), 40);
    for (const auto& e : j["traceEvents"])
        if (e["ph"] == "X" && e["name"] == "conv1") {
            EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1000);
            EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 500);
            EXPECT_EQ(e["tid"], 1);
            EXPECT_EQ(e["args"]["op"], "Conv2d");
        }
    t.events.push_back({"lost", "forward", 2, 0, 0, {}});
    test::expect_error([&] { written(t); }, "on no track");
    std::ostringstream bad;
    bad.setstate(std::ios::badbit);
    t.events.pop_back();
    test::expect_error([&] { write_chrome_trace(bad, t); }, "cannot write");
}

// Two steps of three nodes on two devices, the second emulated.
TrainResult two_steps() {
    TrainResult r;
    r.net = "toy", r.batch = 4, r.plan = "test";
    r.devices = {{"cpu", 0, false, 2}, {"fpga_emu:s10", 0, true, 1}};
    r.traced_nodes = {{"a", "forward", "Linear", "f32", "f32[4, 8] -> f32[4, 2]", 64, 100},
                      {"b", "backward", "LinearBackward", "f32", "f32[4, 2] -> f32[4, 8]", 128, 200},
                      {"c", "update", "SgdUpdate", "f32", "f32[2, 8] -> f32[2, 8]", 32, 300}};
    for (int s = 0; s < 2; ++s) {
        const double t0 = 10 + s;  // steady-clock seconds
        r.traced_steps.push_back({{NodeId(0), t0, t0 + 0.1, 0}, {NodeId(1), t0 + 0.1, t0 + 0.3, 1, true, 0.05, 2.0}, {NodeId(2), t0 + 0.3, t0 + 0.4, 0}});
    }
    return r;
}

TEST(TrainTrace, ATrackPerDeviceAndAnEventPerNodeRunPerStep) {
    const TrainResult r = two_steps();
    const nlohmann::json j = written(train_trace(r));
    EXPECT_EQ(test::expect_trace_event_format(j), 2u * 3 + 2) << "a node run each and a step each";
    std::vector<std::string> tracks;
    for (const auto& e : j["traceEvents"])
        if (e["ph"] == "M" && e["name"] == "thread_name") tracks.push_back(e["args"]["name"]);
    ASSERT_EQ(tracks.size(), 3u);
    EXPECT_EQ(tracks[0], "cpu");
    EXPECT_NE(tracks[1].find("emulated"), std::string::npos);
    EXPECT_EQ(tracks[2], "steps");
    EXPECT_NE(j["otherData"]["power"].get<std::string>().find("not recorded"), std::string::npos);
    for (const auto& e : j["traceEvents"]) {
        if (e["ph"] != "X") continue;
        EXPECT_EQ(e.contains("args") && e["args"].contains("joules above idle"), false) << "no energy recorded: no joules";
        if (e["name"] == "b") {
            EXPECT_EQ(e["cat"], "backward");
            EXPECT_EQ(e["tid"], 1);
            EXPECT_EQ(e["args"]["op"], "LinearBackward");
            EXPECT_EQ(e["args"]["modelled seconds"], "0.05");
            EXPECT_NE(e["args"]["timing"].get<std::string>().find("emulated"), std::string::npos);
        }
        if (e["name"] == "step 2") {
            EXPECT_NEAR(e["ts"].get<double>(), 1e6, 1e-3);  // from the first span, in microseconds
            EXPECT_NEAR(e["dur"].get<double>(), 0.4e6, 1e-3);
        }
    }
    TrainResult none = r;
    none.traced_steps.clear();
    test::expect_error([&] { train_trace(none); }, "recorded no node spans");
}

TEST(TrainTrace, PowerIsTheMetersReadingsOrEachNodesModel) {
    TrainResult r = two_steps();
    EnergyResult e;
    e.kind = energy::MeterKind::Modelled, e.meter = {"modelled", energy::MeterKind::Modelled, "cpu", "cpu.yaml"};
    e.idle_w = 10;
    e.step_node_joules = {{1.0, 2.0, 0.5}, {1.0, 2.0, 0.5}};
    e.step_node_seconds = {{0.1, 0.05, 0.1}, {0.1, 0.05, 0.1}};
    r.energy = e;
    nlohmann::json j = written(train_trace(r));
    test::expect_trace_event_format(j);
    std::vector<double> watts;
    for (const auto& x : j["traceEvents"]) {
        if (x["ph"] == "C") {
            watts.push_back(x["args"]["value"].get<double>());
            EXPECT_NE(x["name"].get<std::string>().find("modelled"), std::string::npos);
        }
        if (x["ph"] == "X" && x["name"] == "a") {
            EXPECT_EQ(x["args"]["joules above idle"], "1 (modelled)");
        }
        if (x["ph"] == "X" && x["name"] == "b") {
            EXPECT_EQ(x["args"]["joules above idle"], "2 (modelled: the device's)");
        }
    }
    // host nodes a and c: idle + their own power while they run, idle after; the emulated node is the FPGA's
    EXPECT_EQ(watts, (std::vector<double>{20, 10, 15, 10, 20, 10, 15, 10}));
    // a measured meter: the average power between its readings over the recorded steps
    e.kind = e.meter.kind = energy::MeterKind::Measured, e.meter.name = "rapl-powercap";
    e.power.t = {9.0, 10.0, 10.5, 11.0, 11.5, 13.0};
    e.power.joules = {0, 20, 30, 45, 50, 80};
    r.energy = e;
    j = written(train_trace(r));
    test::expect_trace_event_format(j);
    std::vector<std::pair<double, double>> readings;
    for (const auto& x : j["traceEvents"])
        if (x["ph"] == "C") readings.push_back({x["ts"].get<double>() / 1e6, x["args"]["value"].get<double>()});
    const std::vector<std::pair<double, double>> want{{0, 20}, {0.5, 30}, {1.0, 10}};  // 9-10 s ends at the first span; 11.5-13 starts after the last
    ASSERT_EQ(readings.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_NEAR(readings[i].first, want[i].first, 1e-9);
        EXPECT_NEAR(readings[i].second, want[i].second, 1e-9);
    }
    EXPECT_NE(j["otherData"]["power"].get<std::string>().find("measured by rapl-powercap"), std::string::npos);
}

}  // namespace
}  // namespace joule
