// DeviceSpec: a device's published parameters, parsed once from a versioned YAML file in data/hw/.
//
//   hw::DeviceSpec v100 = hw::load_device_spec("data/hw/gpu-nvidia-v100-sxm2.yaml");
//   double peak = v100.peak_gflops(DType::F16);      // at peak_clock_mhz
//
// Units are in the key names (tdp_w, mem_bandwidth_gbps, clock_max_mhz). Every numeric key must have an
// entry in the file's `sources:` map saying where the number comes from; a file without one is rejected.
// Contradictions (idle above TDP, a default power limit outside its range, a voltage/frequency curve
// that is not increasing, memory power above the dynamic budget) are errors naming the file, line and
// field. Links and systems (nodes of devices) live in the same folder: hw/catalogue.hpp.
#pragma once

#include <string>
#include <vector>

#include "graph/tensor_desc.hpp"

namespace joule::hw {

struct VfPoint {
    double mhz = 0, volts = 0;
};

// An FPGA's fabric as its kernel model needs it (predict/fpga_model.hpp). Peak compute is derived from
// it (DSP blocks per operator x 2 FLOP x clock), not given. Energy per action, as Accelergy counts it:
// a DSP block's active cycle, a bit read from or written to on-chip RAM; off-chip bytes use
// DeviceSpec::mem_pj_per_byte and static power DeviceSpec::idle_w.
struct FpgaFabric {
    double dsp_blocks = 0;
    double dsp_per_f32_fma = 0;   // DSP blocks one pipelined FP32 multiply-add occupies (hard FP: 1)
    double dsp_per_bf16_mac = 0;  // one bf16 x bf16 multiply accumulated in f32 (0: no reduced precision)
    double ram_blocks = 0, ram_block_kbit = 0, ram_port_bits = 0;     // M20K / BRAM36: count, size, widest port
    double uram_blocks = 0, uram_block_kbit = 0, uram_port_bits = 0;  // UltraRAM (Xilinx), 0: none
    double mem_channels = 0;      // off-chip memory channels (bandwidth: DeviceSpec::mem_bandwidth_gbps)
    double dsp_pj_per_cycle = 0, ram_pj_per_bit = 0;
    double reconfig_ms = 0;       // loading another bitstream (a kernel configuration switch)
    std::string host_link;        // data/hw link alias between the host and the board
};

struct DeviceSpec {
    std::string name, kind, match, path;  // kind: cpu | gpu | fpga; match: substring of the OS's model name
    std::vector<std::string> aliases;     // short names plans and flags use (`cuda:v100`, `--device v100`)
    std::string efficiency;               // data/efficiency file with its per-kind curves ("" none)
    int cores = 0;                        // CPU cores, GPU SMs
    double peak_f32_gflops = 0, peak_bf16_gflops = 0, peak_f16_gflops = 0;  // at peak_clock_mhz
    double mem_bandwidth_gbps = 0;
    double mem_gib = 0;     // off-chip memory capacity (device memory; 0: not given)
    double onchip_kib = 0;  // the last on-chip level a software-managed buffer would use (GPU L2, CPU L2/L3 share)
    double l1_kib = 0;      // per core / SM (L1 + shared memory)
    double mem_pj_per_byte = 0;  // off-chip access energy (0: not given; then memory power is in the activity term)
    double tdp_w = 0, idle_w = 0;
    // settable board power limit (0: none); the default is the limit the device ships with
    double power_limit_min_w = 0, power_limit_max_w = 0, power_limit_default_w = 0;
    // core clock range (0: not settable); peak figures hold at peak_clock_mhz (default: clock_max_mhz);
    // the device runs at clock_default_mhz unless a setting says otherwise (default: peak_clock_mhz)
    double clock_min_mhz = 0, clock_max_mhz = 0, clock_default_mhz = 0, peak_clock_mhz = 0, clock_step_mhz = 0;
    std::vector<VfPoint> vf_curve;  // published voltage at clocks, increasing (empty: not published)
    FpgaFabric fpga;                // kind fpga only

    double peak_gflops(DType t) const;  // throws Error when the spec has no figure for t
    bool has_peak(DType t) const;
    bool settable_clock() const { return clock_max_mhz > 0 && clock_min_mhz > 0; }
    bool settable_power() const { return power_limit_max_w > 0; }
    bool answers_to(const std::string& name_or_alias) const;
};

DeviceSpec load_device_spec(const std::string& path);
// "gpu-nvidia-v100-sxm2 (v100, v100-sxm2)": a name with its aliases, for listings and messages.
std::string with_aliases(const std::string& name, const std::vector<std::string>& aliases);
std::string data_dir();  // JOULE_DATA_DIR, else the source tree's data/
std::string spec_dir();  // data_dir()/hw
// A data file given as a path (containing '/' or ending in .yaml) or as a name: data_dir()/folder/NAME.yaml.
bool names_a_path(const std::string& name_or_path);
std::string data_file(const std::string& name_or_path, const std::string& folder);
// The `kind:` of a data/hw file (cpu, gpu, fpga, link, system), for loaders that take the whole folder.
std::string spec_file_kind(const std::string& path);
std::vector<DeviceSpec> load_all_specs(const std::string& dir = spec_dir());  // the devices of the folder
// A device by file name, alias or path. Throws Error listing the candidates when none fits.
DeviceSpec find_device_spec(const std::string& name_alias_or_path, const std::string& dir = spec_dir());
// The spec whose `match` occurs in this machine's CPU model name (/proc/cpuinfo), or a named one
// (file name, alias, or a path). Throws Error listing the candidates when none fits.
DeviceSpec find_cpu_spec(const std::string& name_or_path = "");
std::string cpu_model_name();

}  // namespace joule::hw
