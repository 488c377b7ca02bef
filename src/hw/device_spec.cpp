#include "hw/device_spec.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <filesystem>
#include <fstream>

#include "graph/error.hpp"
#include "hw/yaml_file.hpp"

#ifndef JOULE_SOURCE_DATA_DIR
#define JOULE_SOURCE_DATA_DIR "data"
#endif

namespace joule::hw {

namespace fs = std::filesystem;

double DeviceSpec::peak_gflops(DType t) const {
    if (!has_peak(t)) throw Error(path + ": device '" + name + "' has no peak_" + dtype_name(t) + "_gflops", "add it with its source");
    return t == DType::BF16 ? peak_bf16_gflops : t == DType::F16 ? peak_f16_gflops : peak_f32_gflops;
}

bool DeviceSpec::has_peak(DType t) const {
    return (t == DType::BF16 ? peak_bf16_gflops : t == DType::F16 ? peak_f16_gflops : t == DType::F32 ? peak_f32_gflops : 0) > 0;
}

bool DeviceSpec::answers_to(const std::string& n) const {
    return n == name || std::find(aliases.begin(), aliases.end(), n) != aliases.end();
}

namespace {

struct Field {
    const char* key;
    double* value;
};

std::vector<VfPoint> vf_curve(const std::string& path, const YAML::Node& n) {
    if (!n.IsSequence() || n.size() < 2) throw Error(yaml_where(path, n) + ": 'vf_curve' must list at least two [mhz, volts] points");
    std::vector<VfPoint> v;
    for (const YAML::Node& p : n) {
        if (!p.IsSequence() || p.size() != 2) throw Error(yaml_where(path, p) + ": a 'vf_curve' point is [mhz, volts]");
        VfPoint x{yaml_number(path, p[0], "vf_curve mhz"), yaml_number(path, p[1], "vf_curve volts")};
        if (x.mhz <= 0 || x.volts <= 0) throw Error(yaml_where(path, p) + ": 'vf_curve' clocks and voltages must be positive");
        if (!v.empty() && (x.mhz <= v.back().mhz || x.volts < v.back().volts))
            throw Error(yaml_where(path, p) + ": 'vf_curve' must rise: clocks increasing, voltages not decreasing");
        v.push_back(x);
    }
    return v;
}

// Cross-field checks: each names the file, the line of the offending field and both values.
void check_consistent(const DeviceSpec& s, const YAML::Node& y) {
    auto at = [&](const char* key) { return y[key] ? yaml_where(s.path, y[key]) : s.path; };
    auto num = [](double v) {
        std::ostringstream o;
        o << v;
        return o.str();
    };
    if (s.idle_w > s.tdp_w) throw Error(at("idle_w") + ": idle_w " + num(s.idle_w) + " exceeds tdp_w " + num(s.tdp_w));
    const bool any_limit = s.power_limit_min_w > 0 || s.power_limit_max_w > 0 || s.power_limit_default_w > 0;
    if (any_limit) {
        if (s.power_limit_min_w <= 0 || s.power_limit_max_w <= 0)
            throw Error(s.path + ": a power-limit range needs both 'power_limit_min_w' and 'power_limit_max_w'");
        if (s.power_limit_min_w > s.power_limit_max_w)
            throw Error(at("power_limit_min_w") + ": power_limit_min_w " + num(s.power_limit_min_w) + " exceeds power_limit_max_w " + num(s.power_limit_max_w));
        if (s.power_limit_min_w <= s.idle_w)
            throw Error(at("power_limit_min_w") + ": power_limit_min_w " + num(s.power_limit_min_w) + " is not above idle_w " + num(s.idle_w));
        if (s.power_limit_default_w < s.power_limit_min_w || s.power_limit_default_w > s.power_limit_max_w)
            throw Error(at("power_limit_default_w") + ": the default power limit " + num(s.power_limit_default_w) + " W is outside [" +
                        num(s.power_limit_min_w) + ", " + num(s.power_limit_max_w) + "] W");
    }
    const bool any_clock = s.clock_min_mhz > 0 || s.clock_max_mhz > 0;
    if (any_clock) {
        if (s.clock_min_mhz <= 0 || s.clock_max_mhz <= 0) throw Error(s.path + ": a clock range needs both 'clock_min_mhz' and 'clock_max_mhz'");
        if (s.clock_min_mhz > s.clock_max_mhz)
            throw Error(at("clock_min_mhz") + ": clock_min_mhz " + num(s.clock_min_mhz) + " exceeds clock_max_mhz " + num(s.clock_max_mhz));
        for (const auto& [key, v] : {std::pair{"peak_clock_mhz", s.peak_clock_mhz}, std::pair{"clock_default_mhz", s.clock_default_mhz}})
            if (v < s.clock_min_mhz || v > s.clock_max_mhz)
                throw Error(at(key) + ": " + key + " " + num(v) + " is outside the clock range [" + num(s.clock_min_mhz) + ", " + num(s.clock_max_mhz) + "] MHz");
    } else if (y["peak_clock_mhz"] || y["clock_default_mhz"] || y["clock_step_mhz"] || y["vf_curve"]) {
        throw Error(s.path + ": clock figures need the clock range ('clock_min_mhz' and 'clock_max_mhz')");
    }
    if (!s.vf_curve.empty() && (s.vf_curve.front().mhz < s.clock_min_mhz || s.vf_curve.back().mhz > s.clock_max_mhz))
        throw Error(at("vf_curve") + ": 'vf_curve' runs outside the clock range [" + num(s.clock_min_mhz) + ", " + num(s.clock_max_mhz) + "] MHz");
    const double memory_w = s.mem_pj_per_byte * s.mem_bandwidth_gbps * 1e-3;  // pJ/B x GB/s
    if (memory_w > 0 && s.tdp_w > 0 && memory_w >= s.tdp_w - s.idle_w)
        throw Error(at("mem_pj_per_byte") + ": memory at full bandwidth would draw " + num(memory_w) + " W, all of the " + num(s.tdp_w - s.idle_w) +
                    " W between idle_w and tdp_w");
}

}  // namespace

DeviceSpec load_device_spec(const std::string& path) try {
    const YAML::Node y = load_versioned_yaml(path, "device spec", "check the path");
    DeviceSpec s;
    s.path = path;
    const YAML::Node sources = y["sources"];
    if (sources && !sources.IsMap()) throw Error(yaml_where(path, sources) + ": 'sources' must map each number's key to where it comes from");
    auto str = [&](const char* key, bool required) {
        if (!y[key]) {
            if (required) throw Error(path + ": missing key '" + key + "'");
            return std::string();
        }
        if (!y[key].IsScalar()) throw Error(yaml_where(path, y[key]) + ": '" + key + "' must be a string");
        return y[key].as<std::string>();
    };
    s.name = str("name", true);
    s.kind = str("kind", true);
    s.match = str("match", false);
    s.efficiency = str("efficiency", false);
    if (s.kind != "cpu" && s.kind != "gpu" && s.kind != "fpga")
        throw Error(yaml_where(path, y["kind"]) + ": kind '" + s.kind + "' must be cpu, gpu or fpga" +
                    (s.kind == "link" || s.kind == "system" ? " (a " + s.kind + " file is read by the catalogue, not as a device)" : ""));
    double cores = 0;
    const bool fpga = s.kind == "fpga";
    FpgaFabric& f = s.fpga;
    // an FPGA's fabric; its peaks are derived from it, never given
    const Field fpga_fields[] = {{"dsp_blocks", &f.dsp_blocks},         {"dsp_per_f32_fma", &f.dsp_per_f32_fma},
                                 {"dsp_per_bf16_mac", &f.dsp_per_bf16_mac}, {"ram_blocks", &f.ram_blocks},
                                 {"ram_block_kbit", &f.ram_block_kbit}, {"ram_port_bits", &f.ram_port_bits},
                                 {"uram_blocks", &f.uram_blocks},       {"uram_block_kbit", &f.uram_block_kbit},
                                 {"uram_port_bits", &f.uram_port_bits}, {"mem_channels", &f.mem_channels},
                                 {"dsp_pj_per_cycle", &f.dsp_pj_per_cycle}, {"ram_pj_per_bit", &f.ram_pj_per_bit},
                                 {"reconfig_ms", &f.reconfig_ms}};
    const Field fields[] = {{"cores", &cores},
                            {"peak_f32_gflops", &s.peak_f32_gflops},
                            {"peak_bf16_gflops", &s.peak_bf16_gflops},
                            {"peak_f16_gflops", &s.peak_f16_gflops},
                            {"mem_bandwidth_gbps", &s.mem_bandwidth_gbps},
                            {"mem_gib", &s.mem_gib},
                            {"onchip_kib", &s.onchip_kib},
                            {"l1_kib", &s.l1_kib},
                            {"mem_pj_per_byte", &s.mem_pj_per_byte},
                            {"tdp_w", &s.tdp_w},
                            {"idle_w", &s.idle_w},
                            {"power_limit_min_w", &s.power_limit_min_w},
                            {"power_limit_max_w", &s.power_limit_max_w},
                            {"power_limit_default_w", &s.power_limit_default_w},
                            {"clock_min_mhz", &s.clock_min_mhz},
                            {"clock_max_mhz", &s.clock_max_mhz},
                            {"clock_default_mhz", &s.clock_default_mhz},
                            {"peak_clock_mhz", &s.peak_clock_mhz},
                            {"clock_step_mhz", &s.clock_step_mhz}};
    auto need_source = [&](const std::string& key) {
        if (!sources || !sources[key])
            throw Error(yaml_where(path, y[key]) + ": '" + key + "' has no entry in 'sources'", "every number in data/hw must say where it comes from");
    };
    for (auto it = y.begin(); it != y.end(); ++it) {
        const std::string key = it->first.as<std::string>();
        if (key == "version" || key == "name" || key == "kind" || key == "match" || key == "sources" || key == "efficiency") continue;
        if (key == "aliases") {
            s.aliases = yaml_names(path, it->second, key);
            continue;
        }
        if (key == "vf_curve") {
            s.vf_curve = vf_curve(path, it->second);
            need_source(key);
            continue;
        }
        if (key == "host_link" && fpga) {
            if (!it->second.IsScalar()) throw Error(yaml_where(path, it->second) + ": 'host_link' must name a link (an alias in data/hw)");
            f.host_link = it->second.as<std::string>();
            continue;
        }
        const auto lookup = [&](const auto& table) -> double* {
            for (const Field& x : table)
                if (key == x.key) return x.value;
            return nullptr;
        };
        double* value = lookup(fields);
        if (!value && fpga) value = lookup(fpga_fields);
        if (!value) {
            const bool fabric = lookup(fpga_fields) || key == "host_link";
            throw Error(yaml_where(path, it->first) + ": unknown key '" + key + "'" + (fabric ? " (an FPGA fabric key, and this is a " + s.kind + ")" : ""));
        }
        if (fpga && key.rfind("peak_", 0) == 0 && key.ends_with("_gflops"))
            throw Error(yaml_where(path, it->first) + ": an FPGA's peak is derived from its fabric (dsp_blocks / dsp_per_f32_fma x 2 FLOP x clock); drop '" + key + "'");
        *value = yaml_number(path, it->second, key);
        need_source(key);
    }
    if (fpga) {
        for (const char* key : {"dsp_blocks", "dsp_per_f32_fma", "ram_blocks", "ram_block_kbit", "ram_port_bits", "mem_bandwidth_gbps", "clock_min_mhz",
                                "clock_max_mhz", "dsp_pj_per_cycle", "ram_pj_per_bit", "mem_pj_per_byte", "idle_w", "tdp_w"})
            if (!y[key]) throw Error(path + ": an FPGA spec needs '" + key + "'");
        const bool uram = f.uram_blocks > 0 || f.uram_block_kbit > 0 || f.uram_port_bits > 0;
        if (uram && (f.uram_blocks <= 0 || f.uram_block_kbit <= 0 || f.uram_port_bits <= 0))
            throw Error(path + ": UltraRAM needs 'uram_blocks', 'uram_block_kbit' and 'uram_port_bits'");
        for (const auto& [key, v] : {std::pair{"dsp_blocks", f.dsp_blocks}, std::pair{"dsp_per_f32_fma", f.dsp_per_f32_fma}, std::pair{"ram_blocks", f.ram_blocks},
                                     std::pair{"ram_block_kbit", f.ram_block_kbit}, std::pair{"ram_port_bits", f.ram_port_bits}})
            if (v <= 0) throw Error(yaml_where(path, y[key]) + ": '" + key + "' must be positive");
    }
    if (sources)
        for (auto it = sources.begin(); it != sources.end(); ++it)
            if (!y[it->first.as<std::string>()])
                throw Error(yaml_where(path, it->first) + ": 'sources' cites '" + it->first.as<std::string>() + "', which the spec does not give");
    s.cores = int(cores);
    if (fpga) {
        const double peak_mhz = y["peak_clock_mhz"] ? s.peak_clock_mhz : s.clock_max_mhz;
        s.peak_f32_gflops = f.dsp_blocks / f.dsp_per_f32_fma * 2 * peak_mhz * 1e-3;
        if (f.dsp_per_bf16_mac > 0) s.peak_bf16_gflops = f.dsp_blocks / f.dsp_per_bf16_mac * 2 * peak_mhz * 1e-3;
        if (s.onchip_kib == 0) s.onchip_kib = (f.ram_blocks * f.ram_block_kbit + f.uram_blocks * f.uram_block_kbit) / 8;  // all on-chip RAM
    }
    if (s.power_limit_default_w == 0 && s.power_limit_max_w > 0)
        s.power_limit_default_w = s.tdp_w >= s.power_limit_min_w && s.tdp_w <= s.power_limit_max_w && s.tdp_w > 0 ? s.tdp_w : s.power_limit_max_w;
    if (s.clock_max_mhz > 0) {
        if (s.peak_clock_mhz == 0) s.peak_clock_mhz = s.clock_max_mhz;
        if (s.clock_default_mhz == 0) s.clock_default_mhz = s.peak_clock_mhz;
    }
    check_consistent(s, y);
    return s;
} catch (const YAML::Exception& e) {
    yaml_error(path, e, "device spec");
}

std::string data_dir() {
    if (const char* d = std::getenv("JOULE_DATA_DIR")) return d;
    return JOULE_SOURCE_DATA_DIR;
}

std::string spec_dir() { return data_dir() + "/hw"; }

bool names_a_path(const std::string& name_or_path) { return name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".yaml"); }

std::string data_file(const std::string& name_or_path, const std::string& folder) {
    return names_a_path(name_or_path) ? name_or_path : data_dir() + "/" + folder + "/" + name_or_path + ".yaml";
}

std::string spec_file_kind(const std::string& path) {
    const YAML::Node y = load_versioned_yaml(path, "data/hw file", "check the path");
    if (!y["kind"] || !y["kind"].IsScalar()) throw Error(path + ": missing key 'kind' (cpu, gpu, fpga, link or system)");
    return y["kind"].as<std::string>();
}

std::vector<DeviceSpec> load_all_specs(const std::string& dir) {
    std::vector<DeviceSpec> specs;
    std::error_code ec;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.path().extension() == ".yaml") files.push_back(e.path());
    if (ec) throw Error(dir + ": cannot list device specs: " + ec.message(), "set JOULE_DATA_DIR to the folder holding hw/");
    for (const fs::path& p : files) {
        const std::string kind = spec_file_kind(p.string());
        if (kind != "link" && kind != "system") specs.push_back(load_device_spec(p.string()));
    }
    std::sort(specs.begin(), specs.end(), [](const DeviceSpec& a, const DeviceSpec& b) { return a.name < b.name; });
    for (size_t i = 0; i < specs.size(); ++i)  // a name or alias must pick one device
        for (size_t j = 0; j < specs.size(); ++j)
            for (const std::string& a : specs[j].aliases)
                if (i != j && specs[i].answers_to(a))
                    throw Error(specs[j].path + ": alias '" + a + "' also names " + specs[i].path, "aliases must be unique across " + dir);
    return specs;
}

std::string with_aliases(const std::string& name, const std::vector<std::string>& aliases) {
    std::string s = name;
    for (size_t i = 0; i < aliases.size(); ++i) s += (i == 0 ? " (" : ", ") + aliases[i];
    return aliases.empty() ? s : s + ")";
}

namespace {
std::string names_of(const std::vector<DeviceSpec>& specs, const std::string& kind) {
    std::string names;
    for (const DeviceSpec& s : specs) {
        if (!kind.empty() && s.kind != kind) continue;
        names += (names.empty() ? "" : ", ") + with_aliases(s.name, s.aliases);
    }
    return names;
}
}  // namespace

DeviceSpec find_device_spec(const std::string& name, const std::string& dir) {
    if (names_a_path(name)) return load_device_spec(name);
    const std::vector<DeviceSpec> specs = load_all_specs(dir);
    for (const DeviceSpec& s : specs)
        if (s.answers_to(name)) return s;
    throw Error("no device named '" + name + "' in " + dir, "choose one of: " + names_of(specs, "") + " (joule devices lists them)");
}

std::string cpu_model_name() {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("model name", 0) == 0) {
            const auto colon = line.find(':');
            return colon == std::string::npos ? "" : line.substr(colon + 2);
        }
    return "";
}

DeviceSpec find_cpu_spec(const std::string& name_or_path) {
    if (!name_or_path.empty() && names_a_path(name_or_path)) return load_device_spec(name_or_path);
    const std::vector<DeviceSpec> specs = load_all_specs();
    const std::string model = cpu_model_name();
    for (const DeviceSpec& s : specs) {
        if (s.kind != "cpu") continue;
        if (name_or_path.empty() ? (!s.match.empty() && model.find(s.match) != std::string::npos) : s.answers_to(name_or_path)) return s;
    }
    if (name_or_path.empty())
        throw Error("no CPU spec in " + spec_dir() + " matches this CPU ('" + model + "')", "pass --device-spec with one of: " + names_of(specs, "cpu"));
    throw Error("no CPU spec named '" + name_or_path + "' in " + spec_dir(), "choose one of: " + names_of(specs, "cpu"));
}

}  // namespace joule::hw
