// hw/: device specs (every error path: missing sources, unknown keys, wrong shapes, contradictions),
// links, systems and the catalogue (aliases unique, systems naming what the folder has), and the
// shipped data/hw folder itself.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "hw/catalogue.hpp"
#include "test_util.hpp"

namespace joule::hw {
namespace {

namespace fs = std::filesystem;

struct Folder {
    fs::path dir;
    explicit Folder(const std::string& name) : dir(fs::temp_directory_path() / ("joule_hw_" + std::to_string(getpid())) / name) {
        fs::remove_all(dir);
        fs::create_directories(dir);
    }
    std::string put(const std::string& file, const std::string& body) const {
        std::ofstream(dir / file) << body;
        return (dir / file).string();
    }
};

const std::string kGpu =
    "version: 1\nname: g\nkind: gpu\naliases: [gg]\ncores: 10\npeak_f32_gflops: 1000\nmem_bandwidth_gbps: 100\ntdp_w: 200\nidle_w: 20\n"
    "power_limit_min_w: 100\npower_limit_max_w: 200\nclock_min_mhz: 500\nclock_max_mhz: 1500\n"
    "sources: {cores: a, peak_f32_gflops: a, mem_bandwidth_gbps: a, tdp_w: a, idle_w: a, power_limit_min_w: a, power_limit_max_w: a, clock_min_mhz: a, clock_max_mhz: a}\n";

// kGpu with `key: value` replaced (or added, with a source) -- one field wrong at a time
std::string with(const std::string& key, const std::string& value) {
    std::string s = kGpu;
    const size_t at = s.find("\n" + key + ":");
    if (at != std::string::npos) {
        const size_t end = s.find('\n', at + 1);
        return s.replace(at + 1, end - at - 1, key + ": " + value);
    }
    s.insert(s.find("sources: {") + 10, key + ": x, ");
    return s.insert(s.find("sources:"), key + ": " + value + "\n");
}

TEST(DeviceSpec, LoadsAFullSpecWithDefaults) {
    Folder f("full");
    const DeviceSpec s = load_device_spec(f.put("g.yaml", kGpu));
    EXPECT_EQ(s.aliases, std::vector<std::string>{"gg"});
    EXPECT_TRUE(s.answers_to("gg"));
    EXPECT_EQ(s.power_limit_default_w, 200);  // the TDP, inside the range
    EXPECT_EQ(s.peak_clock_mhz, 1500);        // the maximum clock
    EXPECT_EQ(s.clock_default_mhz, 1500);
    EXPECT_FALSE(s.has_peak(DType::BF16));
    test::expect_error([&] { s.peak_gflops(DType::F16); }, "no peak_f16_gflops");
}

TEST(DeviceSpec, RejectsEveryBadField) {
    Folder f("bad");
    int i = 0;
    auto bad = [&](const std::string& body, const std::string& message) {
        const std::string path = f.put("b" + std::to_string(i++) + ".yaml", body);
        test::expect_error([&] { load_device_spec(path); }, message);
    };
    bad("version: 1\nname: t\nkind: cpu\ncores: 2\n", "'cores' has no entry in 'sources'");
    bad("version: 2\nname: t\nkind: cpu\n", "unsupported or missing 'version'");
    bad(kGpu + "turbo_w: 3\n", "unknown key 'turbo_w'");
    bad(with("cores", "many"), "'cores' must be a number");
    bad(with("tdp_w", "-5"), "'tdp_w' must be a finite, non-negative number");
    bad(with("tdp_w", ".nan"), "'tdp_w' must be a finite, non-negative number");
    bad("version: 1\nname: [t\n", "invalid YAML");
    bad("version: 1\nkind: gpu\n", "missing key 'name'");
    bad(with("kind", "tpu"), "kind 'tpu' must be cpu, gpu or fpga");
    bad(with("kind", "link"), "read by the catalogue");
    bad(with("aliases", "v100"), "'aliases' must be a list");
    bad(with("idle_w", "300"), ":9: idle_w 300 exceeds tdp_w 200");  // names the line of the field
    bad(with("power_limit_min_w", "250"), "power_limit_min_w 250 exceeds power_limit_max_w 200");
    bad(with("power_limit_min_w", "10"), "is not above idle_w 20");
    bad(with("power_limit_default_w", "90"), "the default power limit 90 W is outside [100, 200] W");
    bad(with("clock_min_mhz", "2000"), "clock_min_mhz 2000 exceeds clock_max_mhz 1500");
    bad(with("peak_clock_mhz", "1600"), "peak_clock_mhz 1600 is outside the clock range [500, 1500] MHz");
    bad(with("vf_curve", "[[600, 0.8]]"), "at least two [mhz, volts] points");
    bad(with("vf_curve", "[[600, 0.8], [500, 0.9]]"), "'vf_curve' must rise");
    bad(with("vf_curve", "[[600, 0.9], [700, 0.8]]"), "'vf_curve' must rise");
    bad(with("vf_curve", "[[600, 0.8], [1600, 0.9]]"), "runs outside the clock range");
    bad(with("vf_curve", "[600, 0.8]"), "a 'vf_curve' point is [mhz, volts]");
    bad(with("mem_pj_per_byte", "5000"), "memory at full bandwidth would draw 500 W");
    bad("version: 1\nname: t\nkind: cpu\ncores: 2\nsources: {cores: a, tdp_w: b}\n", "'sources' cites 'tdp_w', which the spec does not give");
    bad("version: 1\nname: t\nkind: gpu\npower_limit_max_w: 3\nsources: {power_limit_max_w: a}\n", "needs both 'power_limit_min_w' and 'power_limit_max_w'");
    bad("version: 1\nname: t\nkind: gpu\npeak_clock_mhz: 3\nsources: {peak_clock_mhz: a}\n", "clock figures need the clock range");
    test::expect_error([&] { load_device_spec((f.dir / "absent.yaml").string()); }, "cannot open device spec");
    test::expect_error([&] { load_device_spec(f.dir.string()); }, "it is a directory");
}

const std::string kFpga =
    "version: 1\nname: f\nkind: fpga\ndsp_blocks: 1000\ndsp_per_f32_fma: 1\ndsp_per_bf16_mac: 0.5\nram_blocks: 2000\nram_block_kbit: 20\n"
    "ram_port_bits: 40\nmem_bandwidth_gbps: 20\nclock_min_mhz: 200\nclock_max_mhz: 400\nclock_default_mhz: 300\ndsp_pj_per_cycle: 20\n"
    "ram_pj_per_bit: 0.2\nmem_pj_per_byte: 100\nidle_w: 10\ntdp_w: 50\nhost_link: pcie3-x8\n"
    "sources: {dsp_blocks: a, dsp_per_f32_fma: a, dsp_per_bf16_mac: a, ram_blocks: a, ram_block_kbit: a, ram_port_bits: a, mem_bandwidth_gbps: a, "
    "clock_min_mhz: a, clock_max_mhz: a, clock_default_mhz: a, dsp_pj_per_cycle: a, ram_pj_per_bit: a, mem_pj_per_byte: a, idle_w: a, tdp_w: a}\n";

TEST(DeviceSpec, AnFpgaHasAFabricAndDerivedPeaks) {
    Folder f("fpga");
    const DeviceSpec s = load_device_spec(f.put("f.yaml", kFpga));
    EXPECT_EQ(s.fpga.dsp_blocks, 1000);
    EXPECT_EQ(s.fpga.host_link, "pcie3-x8");
    EXPECT_DOUBLE_EQ(s.peak_f32_gflops, 1000 * 2 * 0.4);  // DSPs / DSPs per FMA x 2 FLOP x the highest clock
    EXPECT_DOUBLE_EQ(s.peak_bf16_gflops, 2000 * 2 * 0.4);
    int i = 0;
    auto bad = [&](const std::string& body, const std::string& message) {
        const std::string path = f.put("b" + std::to_string(i++) + ".yaml", body);
        test::expect_error([&] { load_device_spec(path); }, message);
    };
    auto without = [&](const std::string& key) {
        std::string b = kFpga;
        const size_t at = b.find("\n" + key + ":");
        b.erase(at + 1, b.find('\n', at + 1) - at);
        const size_t src = b.find(" " + key + ": a,");
        return b.erase(src, key.size() + 5);
    };
    bad(without("ram_blocks"), "an FPGA spec needs 'ram_blocks'");
    bad(without("dsp_pj_per_cycle"), "an FPGA spec needs 'dsp_pj_per_cycle'");
    bad(kFpga + "peak_f32_gflops: 9\n", "an FPGA's peak is derived from its fabric");
    bad(std::string(kFpga).insert(kFpga.find("sources: {") + 10, "uram_blocks: a, ") + "uram_blocks: 9\n", "UltraRAM needs 'uram_blocks', 'uram_block_kbit' and 'uram_port_bits'");
    bad(std::string(kFpga).replace(kFpga.find("dsp_per_f32_fma: 1"), 18, "dsp_per_f32_fma: 0"), "'dsp_per_f32_fma' must be positive");
    bad(with("dsp_blocks", "10"), "unknown key 'dsp_blocks' (an FPGA fabric key, and this is a gpu)");
    bad(with("host_link", "pcie3-x8"), "unknown key 'host_link' (an FPGA fabric key, and this is a gpu)");
}

TEST(Catalogue, LinksSystemsAndAliases) {
    Folder f("catalogue");
    f.put("g.yaml", kGpu);
    f.put("h.yaml", with("name", "h").replace(kGpu.find("[gg]"), 4, "[hh]"));
    const std::string link = "version: 1\nname: l\nkind: link\naliases: [ll]\nbandwidth_gbps: 10\nlatency_us: 1\nenergy_pj_per_byte: 5\n"
                             "sources: {bandwidth_gbps: a, latency_us: b, energy_pj_per_byte: c}\n";
    f.put("l.yaml", link);
    f.put("s.yaml", "version: 1\nname: s\nkind: system\naliases: [g+h]\ndevices: [gg, h]\nlinks:\n  - {between: [gg, hh], link: ll}\nnetwork: l\n");
    // the loader takes any device kind: an FPGA board in a system
    const std::string board = std::string(kFpga).replace(kFpga.find("host_link: pcie3-x8"), 19, "host_link: ll").replace(kFpga.find("name: f"), 7, "name: b\naliases: [s10x]");
    f.put("f.yaml", board);
    f.put("t.yaml", "version: 1\nname: t\nkind: system\naliases: [gg+s10x]\ndevices: [gg, s10x]\nlinks:\n  - {between: [gg, s10x], link: ll}\n");
    const Catalogue c = load_catalogue(f.dir.string());
    EXPECT_EQ(c.devices.size(), 3u);
    EXPECT_EQ(c.device(c.system("gg+s10x").devices[1]).kind, "fpga");
    const SystemSpec& s = c.system("g+h");
    EXPECT_EQ(s.devices, (std::vector<std::string>{"g", "h"}));  // resolved from aliases
    ASSERT_NE(c.link_between(s, "h", "g"), nullptr);            // either order
    EXPECT_EQ(c.link_between(s, "h", "g")->bandwidth_gbps, 10);
    test::expect_error([&] { c.device("v100"); }, "no device named 'v100'");

    auto broken = [&](const std::string& file, const std::string& body, const std::string& message) {
        Folder b("broken");
        b.put("g.yaml", kGpu);
        b.put("h.yaml", with("name", "h").replace(kGpu.find("[gg]"), 4, "[hh]"));
        b.put("l.yaml", link);
        b.put(file, body);
        test::expect_error([&] { load_catalogue(b.dir.string()); }, message);
    };
    broken("s.yaml", "version: 1\nname: s\nkind: system\ndevices: [gg, k80]\n", "names the device 'k80', which");
    broken("s.yaml", "version: 1\nname: s\nkind: system\ndevices: [gg, h]\nlinks:\n  - {between: [gg, h], link: nvlink9}\n", "names the link 'nvlink9'");
    broken("s.yaml", "version: 1\nname: s\nkind: system\ndevices: [gg]\nlinks:\n  - {between: [gg, h], link: l}\n", "ends at 'h', which is not one of its devices");
    broken("s.yaml", "version: 1\nname: s\nkind: system\ndevices: [gg, h]\nlinks:\n  - {between: [gg, h], link: l}\n  - {between: [h, g], link: l}\n", "links 'h' and 'g' twice");
    broken("s.yaml", "version: 1\nname: s\nkind: system\ndevices: [gg, g]\n", "lists device 'g' twice");
    broken("s.yaml", "version: 1\nname: s\nkind: system\ndevices: [gg]\nlinks:\n  - {between: [gg, gg], link: l}\n", "names two different devices");
    broken("s.yaml", "version: 1\nname: s\nkind: system\ndevices: gg\n", "'devices' must be a list");
    broken("s.yaml", "version: 1\nname: s\nkind: system\ndevices: [gg]\ncolour: red\n", "unknown key 'colour'");
    broken("s.yaml", "version: 1\nname: s\nkind: system\ndevices: [gg]\nnetwork: ib-xdr\n", "names the network link 'ib-xdr'");
    broken("s.yaml", "version: 1\nname: gg\nkind: system\ndevices: [g]\n", "the name 'gg' is also used by");
    broken("m.yaml", "version: 1\nname: m\nkind: link\nbandwidth_gbps: 10\nlatency_us: 1\nsources: {bandwidth_gbps: a, latency_us: b}\n", "missing key 'energy_pj_per_byte'");
    broken("m.yaml", "version: 1\nname: m\nkind: link\nbandwidth_gbps: 10\nlatency_us: 1\nenergy_pj_per_byte: 1\nsources: {bandwidth_gbps: a, latency_us: b}\n",
           "'energy_pj_per_byte' has no entry in 'sources'");
    broken("m.yaml", "version: 1\nname: m\nkind: link\nbandwidth_gbps: 20\nraw_bandwidth_gbps: 10\nlatency_us: 1\nenergy_pj_per_byte: 1\n"
                     "sources: {bandwidth_gbps: a, raw_bandwidth_gbps: a, latency_us: b, energy_pj_per_byte: c}\n", "exceeds raw_bandwidth_gbps");
    broken("x.yaml", "version: 1\nname: x\n", "missing key 'kind'");
    broken("f.yaml", kFpga, "host_link 'pcie3-x8' is not a link in");
}

TEST(Catalogue, ASystemsHostIsTheCpuSpecMatchingThisMachine) {
    const std::string model = cpu_model_name();
    if (model.empty()) GTEST_SKIP() << "no model name in /proc/cpuinfo";
    const std::string link = "version: 1\nname: l\nkind: link\nbandwidth_gbps: 10\nlatency_us: 1\nenergy_pj_per_byte: 5\n"
                             "sources: {bandwidth_gbps: a, latency_us: b, energy_pj_per_byte: c}\n";
    const std::string system = "version: 1\nname: s\nkind: system\naliases: [here+g]\ndevices: [host, gg]\nlinks:\n  - {between: [host, gg], link: l}\n";
    auto cpu = [&](const std::string& name, const std::string& match) {
        return "version: 1\nname: " + name + "\nkind: cpu\nmatch: \"" + match + "\"\ncores: 2\npeak_f32_gflops: 100\nmem_bandwidth_gbps: 10\ntdp_w: 20\nidle_w: 5\n"
               "sources: {cores: a, peak_f32_gflops: a, mem_bandwidth_gbps: a, tdp_w: a, idle_w: a}\n";
    };
    {
        Folder f("host");
        f.put("a.yaml", cpu("other", "No Such CPU 9999"));
        f.put("c.yaml", cpu("here", model.substr(0, model.size() / 2)));
        f.put("g.yaml", kGpu);
        f.put("l.yaml", link);
        f.put("s.yaml", system);
        const Catalogue c = load_catalogue(f.dir.string());
        const SystemSpec& s = c.system("here+g");
        EXPECT_EQ(s.devices, (std::vector<std::string>{"here", "g"}));
        ASSERT_NE(c.link_between(s, "here", "g"), nullptr);
    }
    Folder f("nohost");
    f.put("a.yaml", cpu("other", "No Such CPU 9999"));
    f.put("g.yaml", kGpu);
    f.put("l.yaml", link);
    f.put("s.yaml", system);
    const Catalogue c = load_catalogue(f.dir.string());  // the folder loads; the system is refused where used
    test::expect_error([&] { c.system("here+g"); }, "system 's' names 'host', this machine's CPU, but no CPU spec in");
}

TEST(Catalogue, TheShippedFolderLoadsAndCoversTheIssueDevices) {
    const Catalogue c = load_catalogue();
    for (const char* d : {"v100", "v100-pcie", "2080ti", "k40", "a100", "h100", "h200", "gold6148", "turin-2vcpu", "xeon6-2vcpu"}) {
        const DeviceSpec& s = c.device(d);
        EXPECT_GT(s.peak_f32_gflops, 0) << d;
        EXPECT_GT(s.mem_bandwidth_gbps, 0) << d;
        EXPECT_GT(s.tdp_w, s.idle_w) << d;
        EXPECT_GT(s.onchip_kib, 0) << d;
    }
    for (const char* d : {"s10", "a10", "de5", "u250", "u280"}) {
        const DeviceSpec& s = c.device(d);
        EXPECT_EQ(s.kind, "fpga") << d;
        EXPECT_GT(s.peak_f32_gflops, 0) << d;
        EXPECT_GT(s.peak_bf16_gflops, s.peak_f32_gflops) << d;
        EXPECT_GT(s.tdp_w, s.idle_w) << d;
        EXPECT_GT(s.fpga.reconfig_ms, 0) << d;
        EXPECT_GT(c.link(s.fpga.host_link).bandwidth_gbps, 0) << d;  // the board's host link is in the folder
    }
    for (const char* l : {"pcie3-x16", "pcie4-x16", "pcie5-x16", "nvlink2", "nvlink4", "ib-hdr", "ib-ndr", "eth-100g", "eth-200g", "eth-400g"})
        EXPECT_GT(c.link(l).bandwidth_gbps, 0) << l;
    // cpu+s10 is this machine's CPU (the spec joule's other CPU models pick here) with a Stratix 10
    EXPECT_EQ(c.system("cpu+s10").devices, (std::vector<std::string>{find_cpu_spec().name, "fpga-intel-stratix10-gx2800-520n"}));
    for (const char* sys : {"cpu+v100+s10", "cpu+k40+de5"}) {  // Hype-training's and CNNLab's machines: an FPGA beside a GPU
        const SystemSpec& x = c.system(sys);
        EXPECT_EQ(c.device(x.devices[2]).kind, "fpga") << sys;
        EXPECT_NE(c.link_between(x, x.devices[0], x.devices[2]), nullptr) << sys;
    }
    const SystemSpec& s = c.system("cpu+v100");
    ASSERT_NE(c.link_between(s, "gold6148", "v100"), nullptr);
    EXPECT_EQ(find_device_spec("v100").name, "gpu-nvidia-v100-sxm2");
    EXPECT_EQ(find_cpu_spec("turin-2vcpu").name, "cpu-amd-epyc-turin-2vcpu");
}

}  // namespace
}  // namespace joule::hw
