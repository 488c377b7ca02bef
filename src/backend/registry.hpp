// The one registry of backends: which plan devices ("backend[:spec]") exist, which this build and
// machine can run, and how to create them. Optional backends are folders with a CMake option
// (JOULE_ENABLE_<NAME>) and one entry in registry.cpp; nothing else names a backend class.
//
//   BackendSet set({.threads = 2});
//   Backend& cpu = set.get("cpu");          // created on first use, one per device string
//   DeviceStatus s = device_status("cuda:v100");   // {known, runnable, reason}
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"

namespace joule {

struct BackendOptions {
    int threads = 0;  // host threads for backends that compute on the CPU (0: all cores)
    // per device: the plan's settings as text (power_limit_w, clock_mhz, fpga_design), for the backends
    // that model a device (an emulated FPGA runs the plan's bitstream design)
    std::map<std::string, std::map<std::string, std::string>> settings;
};

// "fpga_emu:s10" -> {"fpga_emu", "s10"}; "cpu" -> {"cpu", ""}.
struct DeviceName {
    std::string backend, spec;
};
DeviceName parse_device(const std::string& device);

struct DeviceStatus {
    bool known = false;     // a backend joule has (built here or not)
    bool runnable = false;  // this build on this machine can run it
    std::string reason;     // why not, when !runnable
};
DeviceStatus device_status(const std::string& device);
// Whether the device's backend runs the all-reduce nodes of a data-parallel job on its own memory (the
// host backends, over MPI); the gradients of a device that does not are all-reduced on the host ("cpu").
bool runs_allreduce(const std::string& device);
// Whether the device's backend runs a node with a fused activation or activation backward (Node::post_op,
// Node::pre_op); plan/'s fuse pass fuses only there.
bool fuses_activations(const std::string& device);
// Whether the device's backend has its optimizer updates write the bf16 copy `copy` of an f32 parameter
// stored as `param` (plan/'s fold_casts folds such a Cast into the update): the reference backend any
// layout, the cpu the parameter's storage order and its convolution weights' bf16 formats, others none.
bool writes_low_copy(const std::string& device, const TensorDesc& param, const TensorDesc& copy);
// The layouts the device's backend wants for node n's operands (plan/'s layout pass); none for a device
// this build cannot run.
LayoutWishes layout_wishes(const Graph& g, NodeId n);
// Backends this build can run, for messages and `joule nets`-style listings.
std::vector<std::string> runnable_backends();

// Owns one backend per device string, created on first use. get() throws Error when the device is
// unknown or cannot run here (naming it and why).
class BackendSet {
public:
    explicit BackendSet(BackendOptions opts = {}) : opts_(opts) {}
    Backend& get(const std::string& device);
    // Settings for a device's backend, before it is created (Error when it exists with other settings);
    // the backends that are this machine (cpu, reference) take none and ignore them.
    void set_settings(const std::string& device, const std::map<std::string, std::string>& settings);
    const BackendOptions& options() const { return opts_; }
    // Host threads of the cpu backend (created if needed): what run reports print.
    int threads();

private:
    BackendOptions opts_;
    std::map<std::string, std::unique_ptr<Backend>> backends_;
};

}  // namespace joule
