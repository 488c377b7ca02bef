// Power meters: cumulative energy counters of a device, and the modelled fallback.
//
//   energy::MeterChoice m = energy::choose_meter("auto", spec, threads);
//   std::cout << m.message;                 // which meter, measured or modelled, and why
//   if (m.meter) double j = m.meter->joules();   // measured: cumulative joules since opened
//
// Measured meters: RAPL through powercap sysfs (also exposed for AMD Zen by Linux), RAPL through
// perf_event (power/energy-pkg/), NVML loaded at run time (total-energy counter, else integrated
// polled power). When no counter is readable the modelled meter is used, and every figure says so.
// An unreadable counter gives one message naming the file and the fix (MeterUnavailable).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graph/cost.hpp"
#include "hw/device_spec.hpp"
#include "predict/device_model.hpp"

namespace joule::energy {

enum class MeterKind : uint8_t { Measured, Modelled };
const char* kind_name(MeterKind k);  // "measured" | "modelled"

struct MeterInfo {
    std::string name;    // rapl-powercap, rapl-perf, nvml, modelled
    MeterKind kind = MeterKind::Measured;
    std::string device;  // cpu, gpu0
    std::string source;  // the file, event or library read
};

// A counter that cannot be read: what, where and the fix.
class MeterUnavailable : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class PowerMeter {
public:
    virtual ~PowerMeter() = default;
    virtual const MeterInfo& info() const = 0;
    // Joules since the meter was opened, corrected for counter wrap-around. Thread-compatible: one
    // caller at a time (the sampler).
    virtual double joules() = 0;
};

// RAPL package domains under a powercap root (default /sys/class/powercap), summed over packages.
std::unique_ptr<PowerMeter> open_rapl_powercap(const std::string& root = "/sys/class/powercap");
// RAPL energy-pkg through perf_event_open; `pmu_dir` describes the event (default
// /sys/bus/event_source/devices/power).
std::unique_ptr<PowerMeter> open_rapl_perf(const std::string& pmu_dir = "/sys/bus/event_source/devices/power");
struct PerfEventSpec {
    uint32_t type = 0;
    uint64_t config = 0;
    double scale = 1;  // joules per count
};
PerfEventSpec parse_perf_event(const std::string& pmu_dir, const std::string& event = "energy-pkg");
// NVML (dlopen of `library`, GPU `index`).
std::unique_ptr<PowerMeter> open_nvml(const std::string& library = "libnvidia-ml.so.1", unsigned index = 0);

// Modelled power: idle + the cost interface's dynamic power of each node (predict/device_model.hpp:
// core power x activity, activity = the node's roofline time over its measured time, plus memory
// energy per byte where the spec gives it), on the share of the device the threads use.
class PowerModel {
public:
    PowerModel(hw::DeviceSpec spec, int threads);
    // Dynamic watts of node n of g that took `seconds` (measured) computing in its own dtype.
    double node_dynamic_w(const Graph& g, NodeId n, double seconds) const;
    double idle_w() const { return model_.idle_w(); }
    const hw::DeviceSpec& spec() const { return model_.spec(); }
    std::string describe() const;

private:
    predict::DeviceModel model_;
};

struct MeterChoice {
    std::unique_ptr<PowerMeter> meter;  // null: modelled
    std::unique_ptr<PowerModel> model;  // set when modelled
    MeterInfo info;
    std::string message;  // one line: the meter, measured/modelled, and why
};

// `which`: auto | rapl | perf | nvml | modelled. auto takes the first readable of rapl, perf, then the
// modelled meter; forcing a meter that cannot be read throws Error with its reason and fix.
// Roots are parameters for tests.
struct MeterRoots {
    std::string powercap = "/sys/class/powercap";
    std::string perf_pmu = "/sys/bus/event_source/devices/power";
    std::string nvml = "libnvidia-ml.so.1";
};
MeterChoice choose_meter(const std::string& which, const hw::DeviceSpec* spec, int threads, const MeterRoots& roots = {});

}  // namespace joule::energy
