#include "energy/meter.hpp"

#include <algorithm>
#include <cstdio>

#include "graph/error.hpp"

namespace joule::energy {

const char* kind_name(MeterKind k) { return k == MeterKind::Measured ? "measured" : "modelled"; }

namespace {
predict::DeviceModel slice(hw::DeviceSpec spec, int threads) {
    if (spec.cores <= 0) throw Error(spec.path + ": the modelled meter needs 'cores' (the share of the device the threads use)");
    const double share = std::clamp(double(threads) / double(spec.cores), 0.0, 1.0);
    return predict::DeviceModel(std::move(spec), std::nullopt, share > 0 ? share : 1);
}
}  // namespace

PowerModel::PowerModel(hw::DeviceSpec spec, int threads) : model_(slice(std::move(spec), threads)) {}

double PowerModel::node_dynamic_w(const Graph& g, NodeId n, double seconds) const {
    const DType dtype = g.node(n).compute;
    const predict::NodeWork w = predict::node_work(g, n, dtype, model_.capacity());
    return predict::dynamic_watts(model_, w.flops, w.bytes, model_.has(dtype) ? dtype : DType::F32, seconds);
}

std::string PowerModel::describe() const {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s: idle %.1f W + %.1f W x activity", spec().name.c_str(), idle_w(), model_.core_dynamic_w());
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
