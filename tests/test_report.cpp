// report/: the Chrome trace writer, the trace of a measured training run, SVG figures and HTML reports.
#include <gtest/gtest.h>

#include <sstream>

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "profile/store.hpp"
#include "report/html_report.hpp"
#include "report/run_trace.hpp"
#include "report/svg.hpp"
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

namespace joule {
namespace {

size_t count(const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
}

TEST(Svg, LinePlotsMarkEveryPointAndSayWhatIsModelled) {
    LinePlot p{"energy per image", "batch size (images)", "mJ per image", "measured and modelled", {}, true};
    p.series.push_back({"f32", {8, 16, 32}, {3, 2, 1.5}});
    p.series.push_back({"bf16 <model>", {8, 32}, {2, 1}, true});
    p.mark_x = 20, p.mark_label = "knee";
    const std::string s = svg(p);
    EXPECT_EQ(count(s, "class=\"point\""), 5u);
    EXPECT_EQ(count(s, "<polyline"), 2u);
    EXPECT_NE(s.find("stroke-dasharray=\"6,3\""), std::string::npos) << "the modelled series dashed";
    EXPECT_NE(s.find("bf16 &lt;model&gt; (modelled)"), std::string::npos) << "escaped, and said in the legend";
    EXPECT_NE(s.find("energy per image (measured and modelled)"), std::string::npos);
    EXPECT_NE(s.find("batch size (images) (log scale)"), std::string::npos);
    EXPECT_NE(s.find("mJ per image"), std::string::npos);
    EXPECT_NE(s.find("class=\"mark\""), std::string::npos);
    EXPECT_NE(svg(LinePlot{"empty", "x", "y", "measured", {}}).find("no data"), std::string::npos);
    p.series[0].y.pop_back();
    test::expect_error([&] { svg(p); }, "differ in length");
    p.series[0].y.push_back(NAN);
    test::expect_error([&] { svg(p); }, "non-finite");
    p.series[0].y.back() = 1, p.series[0].x[0] = 0;
    test::expect_error([&] { svg(p); }, "logarithmic");
}

TEST(Svg, BarChartsStackTheirPartsAndPaleTheModelledRows) {
    BarChart c{"time per layer", "ms per step", "measured and modelled", {"conv1", "fc1", "idle"}, {"forward", "backward"}, {{1, 2}, {0.5, 0}, {0, 0}}, {false, true, false}};
    const std::string s = svg(c);
    EXPECT_EQ(count(s, "<rect class=\"bar"), 3u) << "a rect per non-zero part";
    EXPECT_EQ(count(s, "<rect class=\"bar modelled\""), 1u);
    EXPECT_NE(s.find("pale, dashed: modelled"), std::string::npos);
    EXPECT_NE(s.find("ms per step"), std::string::npos);
    c.values[0][1] = -1;
    test::expect_error([&] { svg(c); }, "negative");
    c.values[0].pop_back();
    test::expect_error([&] { svg(c); }, "one per stack");
    EXPECT_NE(svg(BarChart{"none", "ms", "measured", {}, {"a"}, {}, {}}).find("no data"), std::string::npos);
    EXPECT_EQ(escape_xml("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
}

std::string temp_file(const std::string& name) {
    const std::string path = ::testing::TempDir() + "joule_report_" + std::to_string(::getpid()) + "_" + name;
    std::remove(path.c_str());
    return path;
}

std::string html(const HtmlReport& r) {
    std::ostringstream os;
    write_html(os, r);
    return os.str();
}

TEST(HtmlReport, FromAProfileDatabase) {
    const std::string path = temp_file("p.db");
    {
        profile::Store db(path);
        for (int64_t batch : {4, 8, 16})
            for (const char* dtype : {"f32", "bf16"}) {
                profile::ConfigRecord c;
                c.key = {"lenet5", "cpu", dtype, "modelled", batch, 2};
                c.meter = "modelled (cpu.yaml)", c.iters = 2, c.step_s = 0.001 * double(batch), c.total_j = 0.01 * double(batch), c.idle_j = 0.004 * double(batch);
                c.ops_j = c.total_j - c.idle_j, c.flops = 1e7 * double(batch);
                profile::NodeRecord conv{"conv1", "Conv2d", "conv", "forward", "f32[4] -> f32[4]", 2, 0.0005, 0, 0.002, 0, 4, 1e6, 1e5, "cpu", dtype};
                profile::NodeRecord upd{"conv1.weight.sgd", "SgdUpdate", "other", "update", "f32[4] -> f32[4]", 2, 0.0001, 0, 0.0001, 0, 1, 1e3, 1e3, "cpu", dtype};
                db.put(c, {conv, upd});
            }
    }
    const profile::Store db(path, profile::Store::Mode::ReadOnly);
    const HtmlReport r = profile_report(db);
    ASSERT_EQ(r.sections.size(), 1u);
    EXPECT_EQ(r.sections[0].heading, "lenet5");
    ASSERT_EQ(r.sections[0].figures.size(), 8u);
    const std::string page = html(r);
    EXPECT_EQ(count(page, "class=\"point\""), 4u * 6) << "4 plots against batch, 2 lines of 3 points";
    EXPECT_EQ(count(page, "<svg"), 8u);
    EXPECT_NE(page.find("energy efficiency (modelled)"), std::string::npos);
    EXPECT_NE(page.find("throughput (measured)"), std::string::npos);
    EXPECT_EQ(count(page, "<rect class=\"bar modelled\""), 6u * 2 + 2) << "energy per layer type: 6 configurations of conv and other; per layer: 2 nodes";
    EXPECT_EQ(page.find("http"), page.find("http://www.w3.org/2000/svg")) << "nothing to fetch: the one URL is the SVG namespace";
    // an empty database says so
    const std::string empty = temp_file("e.db");
    { profile::Store created(empty); }
    const HtmlReport none = profile_report(profile::Store(empty, profile::Store::Mode::ReadOnly));
    ASSERT_EQ(none.sections.size(), 1u);
    EXPECT_TRUE(none.sections[0].figures.empty());
    EXPECT_NE(html(none).find("holds no configurations"), std::string::npos);
}

TEST(HtmlReport, FromATrainRunsJson) {
    nlohmann::json j = {{"schema", "joule.train/1"}, {"net", "lenet5"}, {"batch", 8}, {"timing", "measured and modelled"}, {"step_seconds", 0.002}};
    j["layers"] = {{{"name", "conv1"}, {"op", "Conv2d"}, {"forward_seconds", 0.001}, {"backward_seconds", 0.002}, {"update_seconds", 0.0}, {"timing", "measured"},
                    {"joules", {{"forward", 0.01}, {"backward", 0.02}, {"update", 0.0}}}},
                   {{"name", "fc1"}, {"op", "Linear"}, {"forward_seconds", 0.0005}, {"backward_seconds", 0.0}, {"update_seconds", 0.0001}, {"timing", "measured and modelled"},
                    {"joules", {{"forward", 0.001}, {"backward", 0.0}, {"update", 0.0}}}}};
    j["energy"] = {{"kind", "measured"}, {"meter", "rapl-powercap"}};
    j["devices"] = {{{"device", "cpu"}, {"seconds", 0.003}, {"timing", "measured"}}, {{"device", "fpga_emu:s10"}, {"seconds", 0.0006}, {"timing", "modelled"}}};
    j["placement"] = {{"system", "system-host-s10"}, {"strategy", "energy"}, {"predicted_devices", {{{"device", "cpu"}, {"predicted_seconds", 0.0025}}, {{"device", "fpga_emu:s10"}, {"predicted_seconds", 0.0005}}}}};
    const HtmlReport r = train_report(j, "run.json");
    ASSERT_EQ(r.sections.size(), 2u);
    EXPECT_EQ(r.sections[0].figures.size(), 2u);
    const std::string page = html(r);
    EXPECT_EQ(count(page, "<rect class=\"bar\""), 2u + 2 + 1) << "conv1's two parts, twice; the cpu as run";
    EXPECT_EQ(count(page, "<rect class=\"bar modelled\""), 2u + 1 + 3) << "fc1's parts (time, energy); predictions and the emulated device";
    EXPECT_NE(page.find("energy per layer (measured)"), std::string::npos);
    test::expect_error([&] { train_report(nlohmann::json{{"schema", "joule.profile/1"}}, "p.json"); }, "p.json: not the output of joule train --json");
    j.erase("layers");
    test::expect_error([&] { train_report(j, "cut.json"); }, "cut.json: not the output of joule train --json");
}

TEST(HtmlReport, FromAnAnalyzeSweepWithItsKneeMarked) {
    nlohmann::json j = {{"schema", "joule.analyze/1"}, {"net", "resnet18"}, {"batch", 8}, {"dtype", "f32"}};
    const double mib = 1024.0 * 1024, gib = mib * 1024;
    // traffic 10, 5, 1.8, 1 GiB: 90 % of the 9 GiB capacity can remove is gone at 4 MiB
    const std::vector<std::pair<double, double>> points{{1, 10}, {2, 5}, {4, 1.8}, {8, 1}};
    for (const auto& [cap, traffic] : points) {
        const nlohmann::json half = {{"read_bytes", traffic * gib * 0.5}, {"write_bytes", 0.0}};
        nlohmann::json x = {{"capacity_bytes", cap * mib}, {"bandwidth_bytes_per_second", 9e11}, {"read_bytes", traffic * gib * 0.75},
                            {"write_bytes", traffic * gib * 0.25}, {"seconds", 0.01}, {"compute_seconds", 0.008}, {"time_model", "roofline"}};
        x["by_layer_type"] = {{"conv", half}, {"norm", half}};
        j["results"].push_back(x);
    }
    const HtmlReport r = analyze_report(j, "a.json");
    ASSERT_EQ(r.sections.size(), 1u);
    EXPECT_EQ(r.sections[0].heading, "capacity sweep");
    const std::string page = html(r);
    EXPECT_NE(page.find("knee 4 MiB"), std::string::npos);
    EXPECT_EQ(count(page, "class=\"point\""), 3u * 4) << "traffic, iteration and compute time";
    EXPECT_EQ(count(page, "<rect class=\"bar modelled\""), 2u * 4);
    EXPECT_EQ(page.find("(measured)"), std::string::npos) << "all modelled";
    for (auto& x : j["results"]) x["capacity_bytes"] = 6 * mib;  // the same capacity throughout: a bandwidth sweep
    for (size_t i = 0; i < j["results"].size(); ++i) j["results"][i]["bandwidth_bytes_per_second"] = 1e11 * double(i + 1);
    const std::string bw = html(analyze_report(j, "b.json"));
    EXPECT_NE(bw.find("off-chip bandwidth (GB/s)"), std::string::npos);
    EXPECT_EQ(bw.find("knee"), std::string::npos);
    test::expect_error([&] { analyze_report(nlohmann::json{{"schema", "joule.train/1"}}, "t.json"); }, "t.json: not the output of joule analyze --json");
    j["results"] = nlohmann::json::array();  // an empty sweep: a page that says so, no empty axes
    const HtmlReport empty = analyze_report(j, "e.json");
    ASSERT_EQ(empty.sections.size(), 1u);
    EXPECT_EQ(empty.sections[0].heading, "empty sweep");
    EXPECT_TRUE(empty.sections[0].figures.empty());
    j["results"] = "none";
    test::expect_error([&] { analyze_report(j, "l.json"); }, "l.json: its results are not a list");
    j.erase("results");
    test::expect_error([&] { analyze_report(j, "c.json"); }, "c.json: not the output of joule analyze --json");
}

}  // namespace
}  // namespace joule
