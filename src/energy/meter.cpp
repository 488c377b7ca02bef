#include "energy/meter.hpp"

#include <algorithm>
#include <cstdio>

#include "graph/error.hpp"

namespace joule::energy {

const char* kind_name(MeterKind k) { return k == MeterKind::Measured ? "measured" : "modelled"; }

PowerModel::PowerModel(hw::DeviceSpec spec, int threads) : spec_(std::move(spec)) {
    if (spec_.tdp_w <= 0 || spec_.peak_f32_gflops <= 0 || spec_.mem_bandwidth_gbps <= 0 || spec_.cores <= 0)
        throw Error(spec_.path + ": the modelled meter needs tdp_w, idle_w, cores, peak_f32_gflops and mem_bandwidth_gbps");
    share_ = std::clamp(double(threads) / double(spec_.cores), 0.0, 1.0);
}

double PowerModel::utilisation(const NodeCost& c, DType compute, double seconds) const {
    if (seconds <= 0) return 0;
    const double peak = (compute == DType::F32 ? spec_.peak_f32_gflops : spec_.peak_gflops(compute)) * 1e9 * share_;
    const double bw = spec_.mem_bandwidth_gbps * 1e9 * share_;
    const double u = std::max(c.flops / seconds / peak, (c.bytes_read + c.bytes_written) / seconds / bw);
    return std::clamp(u, 0.0, 1.0);
}

double PowerModel::dynamic_w(double utilisation) const { return (spec_.tdp_w - spec_.idle_w) * share_ * utilisation; }

std::string PowerModel::describe() const {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s: idle %.1f W + %.1f W x utilisation", spec_.name.c_str(), spec_.idle_w, (spec_.tdp_w - spec_.idle_w) * share_);
    return buf;
}

MeterChoice choose_meter(const std::string& which, const hw::DeviceSpec* spec, int threads, const MeterRoots& roots) {
    static const char* kinds[] = {"auto", "rapl", "perf", "nvml", "modelled"};
    if (std::find(std::begin(kinds), std::end(kinds), which) == std::end(kinds))
        throw Error("unknown meter '" + which + "'", "use auto, rapl, perf, nvml or modelled");
    MeterChoice c;
    std::vector<std::string> why_not;
    auto attempt = [&](const std::string& name, auto open) {
        if (which != "auto" && which != name) return false;
        try {
            c.meter = open();
            c.info = c.meter->info();
            c.message = "meter: " + c.info.name + " (measured) reading " + c.info.source;
            return true;
        } catch (const MeterUnavailable& e) {
            if (which == name) throw Error(std::string("--meter ") + name + ": " + e.what());
            why_not.push_back(e.what());
            return false;
        }
    };
    if (attempt("rapl", [&] { return open_rapl_powercap(roots.powercap); })) return c;
    if (attempt("perf", [&] { return open_rapl_perf(roots.perf_pmu); })) return c;
    // NVML measures a GPU board: only on request, since the ops run on the CPU backend.
    if (which == "nvml" && attempt("nvml", [&] { return open_nvml(roots.nvml); })) return c;
    if (!spec) throw Error("the modelled meter needs a device spec", "pass --device-spec");
    c.model = std::make_unique<PowerModel>(*spec, threads);
    c.info = {"modelled", MeterKind::Modelled, "cpu", spec->path};
    c.message = "meter: modelled (" + c.model->describe() + ") -- every energy and power figure below is MODELLED, not measured";
    if (!why_not.empty()) {
        c.message += "; no counter is readable:";
        for (const std::string& w : why_not) c.message += "\n  - " + w;
    }
    return c;
}

}  // namespace joule::energy
