#include "backend/registry.hpp"

#include "backend/cpu/cpu_backend.hpp"
#ifdef JOULE_HAVE_FPGA_EMU
#include "backend/fpga_emu/fpga_emu_backend.hpp"
#endif
#include "backend/reference/reference_backend.hpp"
#include "graph/error.hpp"

namespace joule {

namespace {
struct Entry {
    const char* backend;
    bool built;
    const char* why_not;  // when not built or not runnable
    bool allreduce;       // runs the all-reduce nodes of a data-parallel job on its own memory
    bool fuses;           // runs nodes with a fused activation or activation backward (Node::post_op, pre_op)
    std::unique_ptr<Backend> (*make)(const std::string& device, const BackendOptions&);
    LayoutWishes (*wishes)(const Graph&, NodeId) = nullptr;  // the layouts its kernels want (none: no wishes)
    bool (*low_copy)(const TensorDesc&, const TensorDesc&) = nullptr;  // writes_low_copy (none: no update keeps a copy)
};

const Entry kBackends[] = {
    {"cpu", true, "", true, true, [](const std::string& d, const BackendOptions& o) -> std::unique_ptr<Backend> {
         return std::make_unique<cpu::CpuBackend>(o.threads, d);
     }, &cpu::CpuBackend::layout_wishes, &cpu::CpuBackend::writes_low_copy},
    {"reference", true, "", true, true, [](const std::string& d, const BackendOptions&) -> std::unique_ptr<Backend> {
         return std::make_unique<ReferenceBackend>(d);
     }, nullptr, [](const TensorDesc& p, const TensorDesc& c) { return p.dtype == DType::F32 && c.dtype == DType::BF16 && p.shape == c.shape; }},
    {"cuda", false, "this build has no CUDA backend (it comes with the GPU work; plans naming cuda can be analysed, not trained)", false, false, nullptr},
#ifdef JOULE_HAVE_FPGA_EMU
    {"fpga_emu", true, "", false, false, [](const std::string& d, const BackendOptions& o) -> std::unique_ptr<Backend> {
         const auto it = o.settings.find(d);
         return std::make_unique<FpgaEmuBackend>(d, it == o.settings.end() ? std::map<std::string, std::string>{} : it->second);
     }},
#else
    {"fpga_emu", false, "this build has no emulated FPGA backend (configure with -DJOULE_ENABLE_FPGA_EMU=ON)", false, false, nullptr},
#endif
};

const Entry* find(const std::string& backend) {
    for (const Entry& e : kBackends)
        if (backend == e.backend) return &e;
    return nullptr;
}

std::string known_list() {
    std::string s;
    for (const Entry& e : kBackends) s += (s.empty() ? "" : ", ") + std::string(e.backend);
    return s;
}
}  // namespace

DeviceName parse_device(const std::string& device) {
    const size_t colon = device.find(':');
    DeviceName d{device.substr(0, colon), colon == std::string::npos ? "" : device.substr(colon + 1)};
    if (d.backend.empty() || (colon != std::string::npos && d.spec.empty()))
        throw Error("device '" + device + "' is not of the form backend[:spec]", "e.g. cpu, reference, fpga_emu:s10");
    return d;
}

DeviceStatus device_status(const std::string& device) {
    const DeviceName d = parse_device(device);
    const Entry* e = find(d.backend);
    if (!e) return {false, false, "unknown device '" + device + "' (backends: " + known_list() + ")"};
    if (!e->built) return {true, false, "device '" + device + "' cannot run here: " + e->why_not};
    if (!d.spec.empty() && (d.backend == "cpu" || d.backend == "reference"))
        return {true, false, "device '" + device + "': the " + d.backend + " backend is this machine itself and takes no spec"};
    return {true, true, ""};
}

bool runs_allreduce(const std::string& device) {
    const Entry* e = find(parse_device(device).backend);
    return e && e->allreduce;
}

bool fuses_activations(const std::string& device) {
    const Entry* e = find(parse_device(device).backend);
    return e && e->fuses;
}

bool writes_low_copy(const std::string& device, const TensorDesc& param, const TensorDesc& copy) {
    const Entry* e = find(parse_device(device).backend);
    return e && e->built && e->low_copy && e->low_copy(param, copy);
}

LayoutWishes layout_wishes(const Graph& g, NodeId id) {
    const Node& n = g.node(id);
    const Entry* e = find(parse_device(n.device).backend);
    if (e && e->built && e->wishes) return e->wishes(g, id);
    return LayoutWishes::none(n);
}

std::vector<std::string> runnable_backends() {
    std::vector<std::string> v;
    for (const Entry& e : kBackends)
        if (e.built) v.push_back(e.backend);
    return v;
}

Backend& BackendSet::get(const std::string& device) {
    auto it = backends_.find(device);
    if (it != backends_.end()) return *it->second;
    const DeviceStatus s = device_status(device);
    if (!s.runnable) throw Error(s.reason);
    auto b = find(parse_device(device).backend)->make(device, opts_);
    return *backends_.emplace(device, std::move(b)).first->second;
}

void BackendSet::set_settings(const std::string& device, const std::map<std::string, std::string>& settings) {
    const std::string backend = parse_device(device).backend;
    if (backend == "cpu" || backend == "reference") return;  // this machine itself: a power limit is for the planners' models
    auto& mine = opts_.settings[device];
    if (mine == settings) return;
    if (backends_.count(device)) throw Error("device '" + device + "' was created before its settings arrived", "set a device's settings before its first use");
    mine = settings;
}

int BackendSet::threads() { return get("cpu").threads(); }

}  // namespace joule
