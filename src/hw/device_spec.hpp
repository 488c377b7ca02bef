// DeviceSpec: a device's published parameters, parsed once from a versioned YAML file in data/hw/.
//
//   hw::DeviceSpec cpu = hw::load_device_spec("data/hw/cpu-amd-epyc-turin-2vcpu.yaml");
//   double peak = cpu.peak_gflops(DType::BF16);
//
// Units are in the key names (tdp_w, mem_bandwidth_gbps). Every numeric key must have an entry in the
// file's `sources:` map saying where the number comes from; a file without one is rejected.
#pragma once

#include <string>
#include <vector>

#include "graph/tensor_desc.hpp"

namespace joule::hw {

struct DeviceSpec {
    std::string name, kind, match, path;  // kind: cpu | gpu | fpga; match: substring of the OS's model name
    int cores = 0;
    double clock_ghz = 0;
    double peak_f32_gflops = 0, peak_bf16_gflops = 0, peak_f16_gflops = 0;
    double mem_bandwidth_gbps = 0;
    double mem_gib = 0;     // off-chip memory capacity (device memory; 0: not given)
    double onchip_kib = 0;  // the last on-chip level a software-managed buffer would use (GPU L2, CPU L2/L3 share)
    double tdp_w = 0, idle_w = 0;
    double peak_gflops(DType t) const;  // throws Error when the spec has no figure for t
};

DeviceSpec load_device_spec(const std::string& path);
// Directory of the spec files: $JOULE_DATA_DIR/hw, else the source tree's data/hw.
std::string data_dir();  // JOULE_DATA_DIR, else the source tree's data/
std::string spec_dir();  // data_dir()/hw
// A data file given as a path (containing '/' or ending in .yaml) or as a name: data_dir()/folder/NAME.yaml.
bool names_a_path(const std::string& name_or_path);
std::string data_file(const std::string& name_or_path, const std::string& folder);
std::vector<DeviceSpec> load_all_specs(const std::string& dir = spec_dir());
// The spec whose `match` occurs in this machine's CPU model name (/proc/cpuinfo), or a named one
// (file name without .yaml, or a path). Throws Error listing the candidates when none fits.
DeviceSpec find_cpu_spec(const std::string& name_or_path = "");
std::string cpu_model_name();

}  // namespace joule::hw
