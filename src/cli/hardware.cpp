// Hardware flags shared by `joule analyze` and `joule calibrate`.
#include "cli/commands.hpp"
#include "graph/error.hpp"
#include "hw/device_spec.hpp"
#include "predict/device_model.hpp"
#include "predict/units.hpp"

namespace joule::cli {

void add_hardware_options(CLI::App& cmd, HardwareOptions& o, bool with_efficiency) {
    cmd.add_option("--device", o.device, "a data/hw device (name, alias such as v100, or path) giving capacity, bandwidth and peaks (joule devices lists them)");
    cmd.add_option("--capacity", o.capacity, "on-chip buffer capacity, e.g. 32MiB");
    cmd.add_option("--bandwidth", o.bandwidth, "off-chip bandwidth, e.g. 900GB/s");
    cmd.add_option("--peak", o.peak, "peak f32 compute, e.g. 15.7TFLOPS");
    cmd.add_option("--peak-bf16", o.peak_bf16, "peak bf16 compute (default: the f32 peak)");
    cmd.add_option("--overhead", o.overhead, "fixed time per node, e.g. 10us (joule probe measures it); default 0");
    if (!with_efficiency) return;  // calibrate: its efficiency files keep one overhead per node
    cmd.add_option("--overhead-small", o.overhead_small,
                   "fixed time per small node (<= 128 KiB of traffic, <= 512 kFLOP: the cpu runs it on one thread), e.g. 0.3us (joule probe measures it); default: --overhead");
    cmd.add_option("--efficiency", o.efficiency,
                   "efficiency curves (a file from joule calibrate, or a name in data/efficiency/): calibrated node times; its hardware is the default for the flags above");
}

void Hardware::require(const std::string& command) const {
    if (!capacity || !bandwidth || !peak)
        throw Error(command + " needs the hardware",
                    "pass --device NAME, or --capacity, --bandwidth and --peak (e.g. --capacity 6MiB --bandwidth 900GB/s --peak 15.7TFLOPS)");
}

Hardware resolve_hardware(const HardwareOptions& o) {
    Hardware h;
    predict::MemoryConfig& cfg = h.config;
    if (!o.efficiency.empty()) {
        h.efficiency = std::make_shared<predict::EfficiencyModel>(predict::load_efficiency(hw::data_file(o.efficiency, "efficiency")));
        const predict::CalibrationHardware& c = h.efficiency->hardware;
        cfg.capacity_bytes = c.capacity_bytes, cfg.bandwidth_bytes_per_s = c.bandwidth_bytes_per_s, cfg.peak_f32_flops = c.peak_f32_flops;
        cfg.peak_bf16_flops = c.peak_bf16_flops, cfg.node_overhead_s = c.node_overhead_s;
        cfg.efficiency = h.efficiency.get();
        h.capacity = h.bandwidth = h.peak = true;
    }
    if (!o.device.empty()) {
        // the device's roofline figures (its efficiency curves, if any, come with --efficiency or `joule predict`)
        const hw::DeviceSpec d = hw::find_device_spec(o.device);
        if (d.onchip_kib <= 0) throw Error(d.path + ": --device needs onchip_kib (the on-chip buffer the memory model plans)");
        const predict::MemoryConfig m = predict::DeviceModel(d).memory_config();
        cfg.capacity_bytes = m.capacity_bytes, cfg.bandwidth_bytes_per_s = m.bandwidth_bytes_per_s, cfg.peak_f32_flops = m.peak_f32_flops;
        cfg.peak_bf16_flops = m.peak_bf16_flops, cfg.peak_f16_flops = m.peak_f16_flops;
        h.capacity = h.bandwidth = h.peak = true;
        h.memory_bytes = d.mem_gib * 1073741824.0, h.memory_of = d.name;
    }
    if (!o.capacity.empty()) cfg.capacity_bytes = predict::parse_bytes(o.capacity, "--capacity"), h.capacity = true;
    if (!o.bandwidth.empty()) cfg.bandwidth_bytes_per_s = predict::parse_bandwidth(o.bandwidth, "--bandwidth"), h.bandwidth = true;
    if (!o.peak.empty()) cfg.peak_f32_flops = predict::parse_flops(o.peak, "--peak"), h.peak = true;
    if (!o.overhead.empty()) cfg.node_overhead_s = predict::parse_seconds(o.overhead, "--overhead");
    if (!o.overhead_small.empty()) cfg.small_node_overhead_s = predict::parse_seconds(o.overhead_small, "--overhead-small");
    if (!o.peak_bf16.empty()) cfg.peak_bf16_flops = predict::parse_flops(o.peak_bf16, "--peak-bf16");
    return h;
}

}  // namespace joule::cli
