// energy/ and hw/: RAPL powercap against a fake sysfs tree (wrap-around, several packages, permission
// denied), the perf RAPL event description, NVML against a missing and a fake library, meter
// selection, the sampler, attribution sums, device specs.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "energy/meter.hpp"
#include "energy/sampler.hpp"
#include "graph/error.hpp"
#include "hw/device_spec.hpp"
#include "test_util.hpp"

namespace joule::energy {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
    const fs::path d = fs::temp_directory_path() / ("joule_energy_" + std::to_string(getpid())) / name;
    fs::remove_all(d);
    fs::create_directories(d);
    fs::permissions(d.parent_path(), fs::perms::all);
    return d;
}
void write(const fs::path& p, const std::string& s) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << s << "\n";
}

// intel-rapl:0 (package-0, with a core sub-zone), intel-rapl:1 (package-1), intel-rapl:2 (psys, ignored)
fs::path fake_powercap() {
    const fs::path root = temp_dir("powercap");
    write(root / "intel-rapl:0/name", "package-0");
    write(root / "intel-rapl:0/energy_uj", "1000");
    write(root / "intel-rapl:0/max_energy_range_uj", "262143328850");
    write(root / "intel-rapl:0:0/name", "core");
    write(root / "intel-rapl:0:0/energy_uj", "5");
    write(root / "intel-rapl:0:0/max_energy_range_uj", "262143328850");
    write(root / "intel-rapl:1/name", "package-1");
    write(root / "intel-rapl:1/energy_uj", "2000");
    write(root / "intel-rapl:1/max_energy_range_uj", "10000");
    write(root / "intel-rapl:2/name", "psys");
    write(root / "intel-rapl:2/energy_uj", "777");
    write(root / "intel-rapl:2/max_energy_range_uj", "10000");
    return root;
}

TEST(RaplPowercap, SumsPackagesAndHandlesWrapAround) {
    const fs::path root = fake_powercap();
    auto m = open_rapl_powercap(root.string());
    EXPECT_EQ(m->info().name, "rapl-powercap");
    EXPECT_EQ(m->info().kind, MeterKind::Measured);
    EXPECT_NE(m->info().source.find("intel-rapl:0/energy_uj"), std::string::npos);
    EXPECT_DOUBLE_EQ(m->joules(), 0.0);
    write(root / "intel-rapl:0/energy_uj", "3001000");  // +3 J
    write(root / "intel-rapl:1/energy_uj", "9000");     // +7000 uJ
    EXPECT_NEAR(m->joules(), 3.007, 1e-9);
    write(root / "intel-rapl:1/energy_uj", "500");  // wrapped at 10000: +1500 uJ
    EXPECT_NEAR(m->joules(), 3.0085, 1e-9);
    write(root / "intel-rapl:0:0/energy_uj", "999999999");  // sub-zones are not added
    EXPECT_NEAR(m->joules(), 3.0085, 1e-9);
}

TEST(RaplPowercap, MissingAndMalformed) {
    test::expect_error([] {
        try {
            open_rapl_powercap("/nonexistent/powercap");
        } catch (const MeterUnavailable& e) {
            throw Error(e.what());
        }
    }, "/nonexistent/powercap does not exist");
    const fs::path root = temp_dir("no_package");
    write(root / "intel-rapl:0/name", "psys");
    EXPECT_THROW(open_rapl_powercap(root.string()), MeterUnavailable);
    const fs::path bad = fake_powercap();
    write(bad / "intel-rapl:0/energy_uj", "lots");
    try {
        open_rapl_powercap(bad.string());
        FAIL();
    } catch (const MeterUnavailable& e) {
        EXPECT_NE(std::string(e.what()).find("expected an unsigned integer, read 'lots'"), std::string::npos) << e.what();
    }
}

// Permission denied is the common failure since Linux 5.10 (root-only energy_uj). As root, a child
// process drops to 'nobody' to see it.
TEST(RaplPowercap, PermissionDeniedNamesTheFileAndTheFix) {
    const fs::path root = fake_powercap();
    const fs::path counter = root / "intel-rapl:0/energy_uj";
    fs::permissions(counter, fs::perms::owner_read | fs::perms::owner_write);
    for (fs::path d = root; d != d.parent_path() && d.string().size() > 4; d = d.parent_path())
        fs::permissions(d, fs::perms::others_exec | fs::perms::others_read, fs::perm_options::add);
    const pid_t pid = fork();
    if (pid == 0) {
        if (getuid() == 0 && setuid(65534) != 0) _exit(3);
        try {
            open_rapl_powercap(root.string());
            _exit(1);
        } catch (const MeterUnavailable& e) {
            const std::string msg = e.what();
            _exit(msg.find("cannot read " + counter.string() + ": permission denied") != std::string::npos && msg.find("chmod o+r") != std::string::npos ? 0 : 2);
        }
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "1: no error, 2: wrong message, 3: could not drop privileges";
}

TEST(RaplPerf, ParsesTheEventDescription) {
    const fs::path pmu = temp_dir("power");
    write(pmu / "type", "23");
    write(pmu / "events/energy-pkg", "event=0x02");
    write(pmu / "events/energy-pkg.scale", "2.3283064365386962890625e-10");
    write(pmu / "events/energy-pkg.unit", "Joules");
    const PerfEventSpec s = parse_perf_event(pmu.string());
    EXPECT_EQ(s.type, 23u);
    EXPECT_EQ(s.config, 2u);
    EXPECT_DOUBLE_EQ(s.scale, 2.3283064365386962890625e-10);
    write(pmu / "events/energy-pkg", "umask=1");
    EXPECT_THROW(parse_perf_event(pmu.string()), MeterUnavailable);
    EXPECT_THROW(parse_perf_event("/nonexistent/power"), MeterUnavailable);
}

TEST(Nvml, MissingLibraryIsAClearError) {
    try {
        open_nvml("libnvidia-ml-joule-test-missing.so.1");
        FAIL();
    } catch (const MeterUnavailable& e) {
        EXPECT_NE(std::string(e.what()).find("cannot load libnvidia-ml-joule-test-missing.so.1"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("NVIDIA driver"), std::string::npos);
    }
}

TEST(Nvml, ReadsTheEnergyCounterOrIntegratesPower) {
    unsetenv("FAKE_NVML_NO_ENERGY");
    {
        auto m = open_nvml(JOULE_FAKE_NVML);
        EXPECT_EQ(m->info().device, "gpu0");
        EXPECT_NE(m->info().source.find("TotalEnergyConsumption"), std::string::npos);
        EXPECT_NEAR(m->joules(), 0.25, 1e-9);
        EXPECT_NEAR(m->joules(), 0.50, 1e-9);
    }
    setenv("FAKE_NVML_NO_ENERGY", "1", 1);
    {
        auto m = open_nvml(JOULE_FAKE_NVML);
        EXPECT_NE(m->info().source.find("integrated"), std::string::npos);
        m->joules();
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        EXPECT_NEAR(m->joules(), 5.0, 1.0);  // 50 W for ~0.1 s
    }
    unsetenv("FAKE_NVML_NO_ENERGY");
    EXPECT_THROW(open_nvml(JOULE_FAKE_NVML, 3), MeterUnavailable);
}

hw::DeviceSpec test_spec() { return hw::find_cpu_spec("cpu-amd-epyc-turin-2vcpu"); }

TEST(ChooseMeter, FallsBackToModelledAndSaysWhy) {
    const hw::DeviceSpec spec = test_spec();
    MeterRoots none{"/nonexistent/powercap", "/nonexistent/power", "libnvidia-ml-joule-test-missing.so.1"};
    MeterChoice c = choose_meter("auto", &spec, 2, none);
    EXPECT_EQ(c.meter, nullptr);
    ASSERT_NE(c.model, nullptr);
    EXPECT_EQ(c.info.kind, MeterKind::Modelled);
    EXPECT_NE(c.message.find("MODELLED"), std::string::npos);
    EXPECT_NE(c.message.find("/nonexistent/powercap does not exist"), std::string::npos) << c.message;
    EXPECT_NE(c.message.find("/nonexistent/power does not exist"), std::string::npos) << c.message;
    test::expect_error([&] { choose_meter("rapl", &spec, 2, none); }, "--meter rapl: /nonexistent/powercap does not exist");
    test::expect_error([&] { choose_meter("nvml", &spec, 2, none); }, "--meter nvml: cannot load");
    test::expect_error([&] { choose_meter("watts", &spec, 2, none); }, "unknown meter 'watts'");
    test::expect_error([&] { choose_meter("auto", nullptr, 2, none); }, "needs a device spec");
    MeterRoots fake = none;
    fake.powercap = fake_powercap().string();
    MeterChoice m = choose_meter("auto", &spec, 2, fake);
    ASSERT_NE(m.meter, nullptr);
    EXPECT_EQ(m.info.name, "rapl-powercap");
    EXPECT_NE(m.message.find("(measured)"), std::string::npos);
}

TEST(PowerModel, ActivityFromTheRoofline) {
    const hw::DeviceSpec spec = test_spec();
    const PowerModel m(spec, 1);  // one of two cores
    Graph g;
    const TensorId x = g.parameter("x", {{256, 256}}, Init::ones());
    const TensorId w = g.parameter("w", {{256, 256}}, Init::ones());
    g.add1(OpKind::Linear, LinearAttrs{false}, {x, w}, "fc");
    const predict::NodeWork work = predict::node_work(g, 0, DType::F32, spec.onchip_kib * 1024);
    const predict::Roofline r = predict::roofline(work.flops, work.bytes, spec.peak_f32_gflops * 1e9 / 2, spec.mem_bandwidth_gbps * 1e9 / 2);
    const double core = (38.75 - 11.6) / 2;  // the TDP share of one core above idle (the spec gives no memory energy)
    EXPECT_NEAR(m.node_dynamic_w(g, 0, 2 * r.seconds()), core * 0.5, 1e-9);  // busy half the time
    EXPECT_NEAR(m.node_dynamic_w(g, 0, r.seconds() / 4), core, 1e-9);       // faster than the roofline: clipped
    EXPECT_EQ(m.node_dynamic_w(g, 0, 0), 0);
}

class FakeMeter : public PowerMeter {
public:
    const MeterInfo& info() const override { return info_; }
    double joules() override { return 5.0 * (now_seconds() - t0_); }  // 5 W

private:
    MeterInfo info_{"fake", MeterKind::Measured, "cpu", "test"};
    double t0_ = now_seconds();
};

TEST(Sampler, RecordsAMonotonicTrace) {
    FakeMeter m;
    Sampler s(m, std::chrono::milliseconds(2));
    const double t0 = now_seconds();
    s.start();
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    s.stop();
    const EnergyTrace t = s.trace();
    EXPECT_GE(t.t.size(), 10u);
    for (size_t i = 1; i < t.t.size(); ++i) {
        EXPECT_GT(t.t[i], t.t[i - 1]);
        EXPECT_GE(t.joules[i], t.joules[i - 1]);
    }
    EXPECT_NEAR(t.average_power(t0, now_seconds()), 5.0, 0.5);
    EXPECT_NEAR(measure_idle_power(m, 0.05, std::chrono::milliseconds(2)), 5.0, 0.5);
}

TEST(Attribution, MeasuredSumsAddUpAndFollowPower) {
    // 10 W idle, 30 W while node 1 runs in [1, 2), exact trace at 0.5 s samples.
    EnergyTrace tr;
    for (int i = 0; i <= 8; ++i) {
        const double t = 0.5 * i;
        tr.t.push_back(t);
        tr.joules.push_back(10 * t + 20 * std::clamp(t - 1.0, 0.0, 1.0));
    }
    const std::vector<NodeSpan> spans = {{0, 0.25, 0.9}, {1, 1.0, 2.0}, {2, 2.0, 3.5}};
    const Attribution a = attribute_measured(spans, tr, 10.0);
    ASSERT_EQ(a.node_joules.size(), 3u);
    EXPECT_NEAR(a.node_joules[0], 0.0, 1e-9);
    EXPECT_NEAR(a.node_joules[1], 20.0, 1e-9);
    EXPECT_NEAR(a.node_joules[2], 0.0, 1e-9);
    EXPECT_NEAR(a.idle_joules, 10 * 3.25, 1e-9);
    double sum = a.idle_joules;
    for (double j : a.node_joules) sum += j;
    EXPECT_NEAR(sum, a.total_joules, 1e-9);
    EXPECT_NEAR(a.node_seconds[0], 0.65, 1e-12);
}

TEST(Attribution, ModelledSumsAddUp) {
    Graph g;
    const TensorId x = g.parameter("x", {{64, 256}}, Init::ones());
    const TensorId w = g.parameter("w", {{256, 256}}, Init::ones());
    const TensorId y = g.add1(OpKind::Linear, LinearAttrs{false}, {x, w}, "fc");
    g.add1(OpKind::Relu, NoAttrs{}, {y}, "relu");
    const PowerModel m(test_spec(), 2);
    const std::vector<NodeSpan> spans = {{0, 10.0, 10.001}, {1, 10.002, 10.0021}};
    const Attribution a = attribute_modelled(g, spans, m);
    EXPECT_EQ(a.kind, MeterKind::Modelled);
    double sum = a.idle_joules;
    for (double j : a.node_joules) sum += j;
    EXPECT_NEAR(sum, a.total_joules, 1e-12);
    EXPECT_NEAR(a.idle_joules, 11.6 * 0.0021, 1e-9);
    // fc: its roofline (2*64*256*256 FLOP against the spec's peak, or its bytes against the bandwidth) over 1 ms
    EXPECT_NEAR(a.node_joules[0], m.node_dynamic_w(g, 0, 1e-3) * 1e-3, 1e-12);
    EXPECT_GT(a.node_joules[0], 0);
}

}  // namespace
}  // namespace joule::energy
