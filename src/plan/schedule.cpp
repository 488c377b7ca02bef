#include "plan/schedule.hpp"

#include <algorithm>
#include <map>
#include <optional>

#include "graph/error.hpp"
#include "predict/fpga_model.hpp"

namespace joule {

std::string plan_device_of(const hw::DeviceSpec& d) {
    const std::string alias = d.aliases.empty() ? d.name : d.aliases.front();
    if (d.kind == "cpu") return "cpu";
    return (d.kind == "gpu" ? "cuda:" : "fpga_emu:") + alias;
}

int SystemModel::index_of(const std::string& plan_device) const {
    for (size_t i = 0; i < plan_devices.size(); ++i)
        if (plan_devices[i] == plan_device) return int(i);
    std::string names;
    for (const std::string& p : plan_devices) names += (names.empty() ? "" : ", ") + p;
    throw Error("the plan puts nodes on '" + plan_device + "', which system " + system.name + " does not have", "its devices: " + names);
}

SystemModel load_system_model(const std::string& name) {
    SystemModel m;
    m.catalogue = hw::load_catalogue();
    m.system = m.catalogue.system(name);
    for (const std::string& d : m.system.devices) {
        const hw::DeviceSpec& spec = m.catalogue.device(d);
        m.devices.push_back(predict::load_device_model(spec.path));
        m.plan_devices.push_back(plan_device_of(spec));
        m.settings.push_back({});
        if (spec.kind == "cpu" && m.host < 0) m.host = int(m.devices.size()) - 1;
    }
    if (m.host < 0) throw Error(m.system.path + ": system '" + m.system.name + "' has no CPU to host it", "list the host CPU among its devices");
    for (size_t i = 0; i < m.plan_devices.size(); ++i)
        for (size_t j = 0; j < i; ++j)
            if (m.plan_devices[i] == m.plan_devices[j])
                throw Error(m.system.path + ": two of system '" + m.system.name + "''s devices would both be " + m.plan_devices[i],
                            "one CPU (the host) and devices of distinct aliases");
    return m;
}

std::vector<std::pair<std::pair<int, int>, const hw::LinkSpec*>> route(const SystemModel& sys, int a, int b) {
    auto link = [&](int x, int y) { return sys.catalogue.link_between(sys.system, sys.devices[size_t(x)].spec().name, sys.devices[size_t(y)].spec().name); };
    auto key = [](int x, int y) { return std::pair{std::min(x, y), std::max(x, y)}; };
    if (const hw::LinkSpec* l = link(a, b)) return {{key(a, b), l}};
    const hw::LinkSpec *first = a == sys.host ? nullptr : link(a, sys.host), *second = b == sys.host ? nullptr : link(sys.host, b);
    if (a != sys.host && b != sys.host && first && second) return {{key(a, sys.host), first}, {key(sys.host, b), second}};
    throw Error("system '" + sys.system.name + "' links " + sys.plan_devices[size_t(a)] + " and " + sys.plan_devices[size_t(b)] + " neither directly nor through its host",
                "add the link to " + sys.system.path);
}

std::vector<predict::Setting> SystemModel::settings_of(const Plan& p) const {
    std::vector<predict::Setting> s = settings;
    for (const auto& [device, set] : p.devices) {
        predict::Setting& x = s[size_t(index_of(device))];
        x.power_limit_w = set.power_limit_w.value_or(0), x.clock_mhz = set.clock_mhz.value_or(0);
        x.fpga_design = set.fpga_design ? predict::parse_fpga_design(*set.fpga_design) : predict::FpgaDesign{};
    }
    return s;
}

Schedule simulate(const LoweredGraph& lg, const SystemModel& sys) {
    const Graph& g = lg.train.graph;
    const size_t D = sys.devices.size();
    Schedule s;
    s.nodes.resize(g.num_nodes());
    s.busy_seconds.assign(D, 0);
    std::vector<double> device_free(D, 0), ready(g.num_tensors(), 0);
    std::map<std::pair<int, int>, double> link_free;
    std::vector<std::optional<predict::TunedKernel>> last_kernel(D);
    const std::vector<predict::Setting> settings = sys.settings_of(lg.plan);
    // a copy over the links from device `from` to `to`, ready at `at`: when it lands (*start: when it
    // enters the first link)
    auto on_links = [&](double bytes, int from, int to, double at, double& joules, double* start = nullptr) {
        for (const auto& [key, link] : route(sys, from, to)) {
            const predict::Cost c = predict::transfer_cost(bytes, *link);
            at = std::max(at, link_free[key]);
            if (start) *start = at, start = nullptr;
            at = link_free[key] = at + c.seconds;
            joules += c.joules;
        }
        return at;
    };
    // each step's batch (inputs, labels) comes from the host's data loader: copied at the step's start to
    // the device where it lives (its first reader's) when that is not the host
    for (size_t t = 0; t < g.num_tensors(); ++t) {
        const Tensor& x = g.tensor(TensorId(t));
        if (x.producer != kNone || !is_batch(x.role)) continue;
        const int d = sys.index_of(tensor_device(g, TensorId(t)));
        if (d == sys.host) continue;
        ready[t] = on_links(double(x.desc.bytes()), sys.host, d, 0, s.transfer_joules);
        s.seconds = std::max(s.seconds, ready[t]);
        ++s.batch_copies;
    }
    for (size_t i = 0; i < g.num_nodes(); ++i) {
        const NodeId id = NodeId(i);
        const Node& n = g.node(id);
        double inputs_ready = 0;
        for (TensorId t : n.inputs) inputs_ready = std::max(inputs_ready, ready[size_t(t)]);
        ScheduledNode& x = s.nodes[i];
        if (n.kind == OpKind::Transfer) {  // on the links, while the devices compute
            const auto& a = attrs_as<TransferAttrs>(n);
            const int from = sys.index_of(a.from), to = sys.index_of(a.to);
            const double bytes = double(g.tensor(n.outputs[0]).desc.bytes());
            x.device = to, x.end = on_links(bytes, from, to, inputs_ready, x.joules, &x.start);
            s.transfer_joules += x.joules;
        } else {
            const int d = sys.index_of(n.device);
            const predict::DeviceModel& m = sys.devices[size_t(d)];
            const predict::Setting& setting = settings[size_t(d)];
            const predict::Cost c = predict::cost(g, id, m, n.compute, setting);
            double start = std::max(inputs_ready, device_free[size_t(d)]);
            if (m.spec().kind == "fpga") {  // a kernel configuration switch, where the bitstream needs one
                const predict::TunedKernel& k = predict::fpga_kernel(g, id, m, n.compute, setting);  // the kernel cost() charged
                if (last_kernel[size_t(d)]) {
                    const double sw = predict::fpga_switch_seconds(*last_kernel[size_t(d)], k, m.spec());
                    start += sw, s.switch_seconds += sw, s.switches += sw > 0;
                }
                last_kernel[size_t(d)] = k;
            }
            x.device = d, x.start = start, x.end = start + c.seconds, x.joules = c.joules;
            device_free[size_t(d)] = x.end;
            s.busy_seconds[size_t(d)] += c.seconds;
            s.dynamic_joules += c.joules;
        }
        for (TensorId t : n.outputs) ready[size_t(t)] = x.end;
        s.seconds = std::max(s.seconds, x.end);
    }
    // f16's dynamic loss scaling (what GradScaler / LossScaleOptimizer run each step): one pass over the
    // parameter gradients on each device computing in f16, after its last node
    std::vector<bool> f16(D, false);
    for (size_t i = 0; i < g.num_nodes(); ++i)
        if (g.node(NodeId(i)).kind != OpKind::Transfer && g.node(NodeId(i)).compute == DType::F16) f16[size_t(s.nodes[i].device)] = true;
    for (size_t d = 0; d < D; ++d) {
        double elements = 0;
        for (const auto& [param, grad] : lg.train.param_grads)
            if (s.nodes[size_t(g.tensor(grad).producer)].device == int(d)) elements += double(g.tensor(grad).desc.numel());
        if (!f16[d] || elements <= 0) continue;
        const predict::Cost c = predict::loss_scaling_cost(elements, sys.devices[d], settings[d]);
        device_free[d] += c.seconds;
        s.busy_seconds[d] += c.seconds, s.dynamic_joules += c.joules, s.loss_scaling_seconds += c.seconds;
        s.seconds = std::max(s.seconds, device_free[d]);
    }
    for (const predict::DeviceModel& m : sys.devices) s.idle_joules += m.idle_w() * s.seconds;
    // memory: each device's buffers against its memory
    std::vector<double> bytes(D, 0);
    for (const MemoryPlan::Buffer& b : lg.memory.buffers) bytes[size_t(sys.index_of(b.device))] += double(b.bytes);
    for (size_t d = 0; d < D && s.fits; ++d) {
        const double capacity = sys.devices[d].spec().mem_gib * double(1ull << 30);
        if (capacity > 0 && bytes[d] > capacity)
            s.fits = false, s.why_not = sys.plan_devices[d] + " needs " + std::to_string(int64_t(bytes[d] / (1 << 20))) + " MiB of tensors, it has " +
                                       std::to_string(int64_t(capacity / (1 << 20))) + " MiB";
    }
    return s;
}

Plan single_device_plan(const TrainGraph& tg, const SystemModel& sys, int device) {
    const std::string& dev = sys.plan_devices.at(size_t(device));
    Plan p;
    p.name = "single:" + dev;
    p.origin = "built-in " + p.name;
    p.default_device = dev;
    if (sys.devices[size_t(device)].spec().kind == "fpga")
        for (size_t i = 0; i < tg.graph.num_nodes(); ++i) {
            const Node& n = tg.graph.node(NodeId(i));
            if (!predict::fpga_runs(n.kind)) p.entries.push_back({PlanEntry::Match::Node, n.name, sys.plan_devices[size_t(sys.host)], std::nullopt, {}, p.origin});
        }
    return p;
}

}  // namespace joule
