#include "hw/device_spec.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
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
    const double v = t == DType::BF16 ? peak_bf16_gflops : t == DType::F16 ? peak_f16_gflops : peak_f32_gflops;
    if (v <= 0) throw Error(path + ": device '" + name + "' has no peak_" + dtype_name(t) + "_gflops", "add it with its source");
    return v;
}

DeviceSpec load_device_spec(const std::string& path) try {
    const YAML::Node y = load_versioned_yaml(path, "device spec", "check the path");
    DeviceSpec s;
    s.path = path;
    const YAML::Node sources = y["sources"];
    auto str = [&](const char* key, bool required) {
        if (!y[key]) {
            if (required) throw Error(path + ": missing key '" + key + "'");
            return std::string();
        }
        return y[key].as<std::string>();
    };
    s.name = str("name", true);
    s.kind = str("kind", true);
    s.match = str("match", false);
    if (s.kind != "cpu" && s.kind != "gpu" && s.kind != "fpga") throw Error(path + ": kind '" + s.kind + "' must be cpu, gpu or fpga");
    struct Field {
        const char* key;
        double* value;
    };
    double cores = 0;
    const Field fields[] = {{"cores", &cores},
                            {"clock_ghz", &s.clock_ghz},
                            {"peak_f32_gflops", &s.peak_f32_gflops},
                            {"peak_bf16_gflops", &s.peak_bf16_gflops},
                            {"peak_f16_gflops", &s.peak_f16_gflops},
                            {"mem_bandwidth_gbps", &s.mem_bandwidth_gbps},
                            {"mem_gib", &s.mem_gib},
                            {"onchip_kib", &s.onchip_kib},
                            {"tdp_w", &s.tdp_w},
                            {"idle_w", &s.idle_w}};
    for (auto it = y.begin(); it != y.end(); ++it) {
        const std::string key = it->first.as<std::string>();
        if (key == "version" || key == "name" || key == "kind" || key == "match" || key == "sources") continue;
        const Field* f = std::find_if(std::begin(fields), std::end(fields), [&](const Field& x) { return key == x.key; });
        if (f == std::end(fields)) throw Error(yaml_where(path, it->first) + ": unknown key '" + key + "'");
        try {
            *f->value = it->second.as<double>();
        } catch (const YAML::Exception&) {
            throw Error(yaml_where(path, it->second) + ": '" + key + "' must be a number");
        }
        if (*f->value < 0) throw Error(path + ": '" + key + "' must not be negative");
        if (!sources || !sources[key])
            throw Error(path + ": '" + key + "' has no entry in 'sources'", "every number in data/hw must say where it comes from");
    }
    s.cores = int(cores);
    if (s.idle_w > s.tdp_w) throw Error(path + ": idle_w " + std::to_string(s.idle_w) + " exceeds tdp_w " + std::to_string(s.tdp_w));
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

std::vector<DeviceSpec> load_all_specs(const std::string& dir) {
    std::vector<DeviceSpec> specs;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.path().extension() == ".yaml") specs.push_back(load_device_spec(e.path().string()));
    if (ec) throw Error(dir + ": cannot list device specs: " + ec.message(), "set JOULE_DATA_DIR to the folder holding hw/");
    std::sort(specs.begin(), specs.end(), [](const DeviceSpec& a, const DeviceSpec& b) { return a.name < b.name; });
    return specs;
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
    std::string names;
    for (const DeviceSpec& s : specs) {
        if (s.kind != "cpu") continue;
        names += (names.empty() ? "" : ", ") + s.name;
        if (name_or_path.empty() ? (!s.match.empty() && model.find(s.match) != std::string::npos) : s.name == name_or_path) return s;
    }
    if (name_or_path.empty())
        throw Error("no CPU spec in " + spec_dir() + " matches this CPU ('" + model + "')", "pass --device-spec with one of: " + names);
    throw Error("no CPU spec named '" + name_or_path + "' in " + spec_dir(), "choose one of: " + names);
}

}  // namespace joule::hw
