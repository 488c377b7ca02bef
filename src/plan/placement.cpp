#include "plan/placement.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <tuple>

#include <omp.h>

#include "graph/error.hpp"
#include "predict/fpga_model.hpp"
#include "predict/units.hpp"

namespace joule {

namespace {

bool is_fpga(const SystemModel& sys, int d) { return sys.devices[size_t(d)].spec().kind == "fpga"; }

}  // namespace

PlacementProblem::PlacementProblem(const TrainGraph& tg, const SystemModel& sys, std::vector<predict::Setting> settings, bool precision)
    : tg_(&tg), sys_(&sys), settings_(settings.empty() ? sys.settings : std::move(settings)) {
    const Graph& g = tg.graph;
    const size_t N = g.num_nodes(), D = sys.devices.size(), O = precision ? 2 * D : D;
    if (settings_.size() != D) throw Error("internal: a setting per device of the system");
    low_.assign(D, DType::F32);
    if (precision)
        for (size_t d = 0; d < D; ++d) low_[d] = predict::low_precision(sys.devices[d]);
    f32_only_.resize(N);
    for (size_t i = 0; i < N; ++i) f32_only_[i] = f32_only_op(g.node(NodeId(i)).kind);
    costs_.assign(N, std::vector<std::optional<predict::Cost>>(O));
    sim_costs_.resize(N * O);
    for (size_t i = 0; i < N; ++i) {
        const NodeId id = NodeId(i);
        const Node& n = g.node(id);
        if (n.kind == OpKind::Transfer || n.kind == OpKind::Cast) throw Error("internal: the placement planner takes a training graph before any pass");
        for (size_t o = 0; o < O; ++o) {
            const size_t d = o % D;
            const predict::DeviceModel& m = sys.devices[d];
            const DType t = o < D ? DType::F32 : low_[d];
            if (o >= D && (t == DType::F32 || !predict::runs_in(m, g, id, t))) continue;
            if (is_fpga(sys, int(d))) {
                if (!predict::fpga_runs(n.kind)) continue;
                sim_costs_[i * O + o].kernel = &predict::fpga_kernel(g, id, m, t, settings_[d]);
            }
            costs_[i][o] = predict::cost(g, id, m, t, settings_[d]);
        }
    }
    for (size_t i = 0; i < N; ++i) {
        const Node& n = g.node(NodeId(i));
        SimNode& x = sim_nodes_.emplace_back();
        x.inputs = int(io_.size()), io_.insert(io_.end(), n.inputs.begin(), n.inputs.end());
        x.outputs = int(io_.size()), io_.insert(io_.end(), n.outputs.begin(), n.outputs.end());
        x.end = int(io_.size()), x.f32_inputs = op_info(n.kind).f32_inputs;
        for (size_t o = 0; o < O; ++o)
            if (costs_[i][o]) sim_costs_[i * O + o].seconds = costs_[i][o]->seconds, sim_costs_[i * O + o].joules = costs_[i][o]->joules;
    }
    // tensors: size, producer, the node writing it in place, first reader, last use
    tensors_.resize(g.num_tensors());
    for (size_t t = 0; t < g.num_tensors(); ++t) {
        const Tensor& x = g.tensor(TensorId(t));
        tensors_[t].elements = double(x.desc.numel()), tensors_[t].dtype = x.desc.dtype;
        tensors_[t].persistent = persists(x.role);
        if (x.producer == kNone && is_batch(x.role)) batch_.push_back(int(t));
        tensors_[t].producer = x.producer == kNone ? -1 : int(x.producer);
        if (x.producer != kNone) {
            const Node& n = g.node(x.producer);
            const size_t k = size_t(std::find(n.outputs.begin(), n.outputs.end(), TensorId(t)) - n.outputs.begin());
            tensors_[t].f32_output = has_bit(op_info(n.kind).f32_outputs, k) || (weight_gradient(n.kind) && k == 0);
        }
    }
    // atoms: union-find over in-place writers and the tensors' producers / other writers
    std::vector<int> parent(N);
    std::iota(parent.begin(), parent.end(), 0);
    std::function<int(int)> root = [&](int x) { return parent[size_t(x)] == x ? x : parent[size_t(x)] = root(parent[size_t(x)]); };
    auto unite = [&](int a, int b) { parent[size_t(root(a))] = root(b); };
    for (size_t i = 0; i < N; ++i) {
        const Node& n = g.node(NodeId(i));
        for (size_t k = 0; k < n.inputs.size(); ++k) {
            TensorInfo& t = tensors_[size_t(n.inputs[k])];
            if (t.first_reader < 0) t.first_reader = int(i);
            t.last_use = int(i);
            if (!has_bit(op_info(n.kind).inplace, k)) continue;
            if (t.inplace_writer < 0) t.inplace_writer = int(i);
            unite(int(i), t.inplace_writer);
            if (t.producer >= 0) unite(int(i), t.producer);
        }
        for (TensorId t : n.outputs) tensors_[size_t(t)].last_use = std::max(tensors_[size_t(t)].last_use, int(i));
    }
    for (size_t t = 0; t < tensors_.size(); ++t) {
        const TensorInfo& x = tensors_[t];
        if (x.producer < 0 || x.persistent || (x.first_reader >= 0 && x.first_reader < x.producer)) settled_.push_back(int(t));
    }
    atom_of_.assign(N, -1);
    std::map<int, int> atom_of_root;
    for (size_t i = 0; i < N; ++i) {
        auto [it, fresh] = atom_of_root.try_emplace(root(int(i)), int(atoms_.size()));
        if (fresh) atoms_.emplace_back();
        atoms_[size_t(it->second)].push_back(int(i));
        atom_of_[i] = it->second;
    }
    // casts: only where a tensor can be stored in a dtype its reader does not compute in
    bool casts = precision;
    for (const TensorInfo& t : tensors_) casts = casts || (is_float(t.dtype) && t.dtype != DType::F32);
    if (casts) cast_table_ = std::make_unique<std::atomic<const CastCost*>[]>(tensors_.size() * 3 * 3 * D);  // float dtypes: F32, BF16, F16
    routes_.resize(D * D);
    for (size_t a = 0; a < D; ++a)
        for (size_t b = 0; b < D; ++b)
            if (a != b)
                for (const auto& [key, link] : route(sys, int(a), int(b))) routes_[a * D + b].push_back({key.first * int(D) + key.second, link});
    std::map<std::string, int> layer_index;
    for (size_t a = 0; a < atoms_.size(); ++a) {
        auto [it, fresh] = layer_index.try_emplace(layer_of(g, NodeId(atoms_[a].front())), int(layers_.size()));
        if (fresh) layers_.emplace_back();
        layers_[size_t(it->second)].push_back(int(a));
    }
}

double PlacementProblem::transfer_seconds(double bytes, int a, int b) const {
    double s = 0;
    for (const auto& [slot, link] : routes_[size_t(device_of(a)) * devices() + size_t(device_of(b))]) s += predict::transfer_cost(bytes, *link).seconds;
    return s;
}

int PlacementProblem::device_for(int atom, int option) const {
    auto runs = [&](int o) {
        for (int n : atoms_[size_t(atom)])
            if (!costs_[size_t(n)][size_t(o)]) return false;
        return true;
    };
    const int D = int(devices()), host = sys_->host;
    for (const int o : {option, device_of(option), option >= D ? host + D : host})
        if (o < int(options()) && runs(o)) return o;
    return host;
}

static_assert(int(DType::F32) == 0 && int(DType::BF16) == 1 && int(DType::F16) == 2, "the float dtypes index cast tables");

const PlacementProblem::CastCost& PlacementProblem::cast(size_t tensor, DType from, DType to, int device) const {
    std::atomic<const CastCost*>& slot = cast_table_[((tensor * 3 + size_t(from)) * 3 + size_t(to)) * devices() + size_t(device)];
    if (const CastCost* c = slot.load(std::memory_order_acquire)) return *c;
    const std::lock_guard<std::mutex> lock(cast_mutex_);
    if (const CastCost* c = slot.load(std::memory_order_relaxed)) return *c;  // another thread costed it meanwhile
    TensorDesc desc = tg_->graph.tensor(TensorId(tensor)).desc;
    desc.dtype = from;
    const std::string name = std::to_string(cast_store_.size());
    const TensorId out = cast_graph_.add1(OpKind::Cast, CastAttrs{to}, {cast_graph_.input(name, desc)}, "cast:" + name);
    const NodeId id = cast_graph_.tensor(out).producer;
    cast_graph_.node(id).compute = to;
    const predict::DeviceModel& m = sys_->devices[size_t(device)];
    CastCost& c = cast_store_.emplace_back();
    c.cost = predict::cost(cast_graph_, id, m, to, settings_[size_t(device)]);
    if (is_fpga(*sys_, device)) c.kernel = &predict::fpga_kernel(cast_graph_, id, m, to, settings_[size_t(device)]);
    slot.store(&c, std::memory_order_release);
    return c;
}

PlacementProblem::Outcome PlacementProblem::evaluate(const Placement& p, Cutoff cut) const {
    const Graph& g = tg_->graph;
    const SystemModel& sys = *sys_;
    const size_t N = g.num_nodes(), D = sys.devices.size(), T = tensors_.size(), O = options();
    Outcome o;
    o.busy_seconds.assign(D, 0), o.dynamic_by_device.assign(D, 0), o.bytes_by_device.assign(D, 0);
    auto device = [&](int node) { return device_of(p[size_t(node)]); };
    // scratch reused across calls: the search simulates thousands of placements. Tensors are the graph's
    // and then one per cast (tensor, dtype) the placement needs, in the order the casts run.
    struct Free {
        int device, next;
        double bytes;
    };
    thread_local struct Scratch {
        std::vector<double> device_free, ready, bytes, link_free, copy_ready, live, peak, persistent, left;
        std::vector<int> home, cast_origin, cast_of;  // per tensor: its device; per cast: the graph tensor it holds; per (tensor, dtype): its cast
        std::vector<DType> storage;
        std::vector<const predict::TunedKernel*> last_kernel;
        std::vector<int> frees, inputs;  // per node: the first of the (device, bytes) freed after it, chained in `pool`
        std::vector<Free> pool;
        std::vector<char> f16;  // per device: it computes in f16 (and pays loss scaling)
        // copy_ready (per (tensor, device): when its transfer lands) and cast_of hold this call's values
        // where their stamp is this call's: nothing to reset per call
        std::vector<unsigned long> copy_stamp, cast_stamp;
        unsigned long call = 0;
    } x;
    // a tensor's device, dtype, size and ready time are set once its producer has run (the graph's order:
    // nothing reads a tensor before); those nothing produces, and persistent ones, here
    x.device_free.assign(D, 0), x.ready.resize(T), x.bytes.resize(T), x.link_free.assign(D * D, 0);
    x.home.resize(T), x.storage.resize(T), x.cast_origin.clear();
    if (x.copy_stamp.size() < T * D) x.copy_stamp.resize(T * D, 0), x.copy_ready.resize(T * D);
    if (x.cast_stamp.size() < T * 3) x.cast_stamp.resize(T * 3, 0), x.cast_of.resize(T * 3);
    const unsigned long call = ++x.call;
    x.last_kernel.assign(D, nullptr), x.f16.assign(D, 0);
    // memory: persistent tensors at home; transient ones (and copies, casts) live from production to last use
    x.live.assign(D, 0), x.peak.assign(D, 0), x.persistent.assign(D, 0);
    x.frees.assign(N, -1), x.pool.clear();
    auto& [device_free, ready, bytes, link_free, copy_ready, live, peak, persistent, left, home, cast_origin, cast_of, storage, last_kernel, frees, inputs, pool, f16,
           copy_stamp, cast_stamp, calls] = x;
    auto allocate = [&](int d, double b, int last) {
        live[size_t(d)] += b;
        peak[size_t(d)] = std::max(peak[size_t(d)], live[size_t(d)]);
        pool.push_back({d, frees[size_t(last)], b});
        frees[size_t(last)] = int(pool.size()) - 1;
    };
    auto settle = [&](size_t t) {
        const TensorInfo& info = tensors_[t];
        const int n = info.producer >= 0 ? info.producer : info.inplace_writer >= 0 ? info.inplace_writer : info.first_reader;
        home[t] = n >= 0 ? device(n) : sys.host;
        // stored in its producer's dtype (plan/passes' insert_casts)
        storage[t] = info.producer < 0 || !is_float(info.dtype) ? info.dtype : info.f32_output ? DType::F32 : dtype(size_t(info.producer), p[size_t(info.producer)]);
        bytes[t] = info.elements * double(dtype_size(storage[t]));
    };
    for (const int t : settled_) {
        settle(size_t(t));
        ready[size_t(t)] = 0;
        if (tensors_[size_t(t)].persistent) persistent[size_t(home[size_t(t)])] += bytes[size_t(t)];
    }
    // a node's start on device d after the previous one there and, on an FPGA, a switch to its kernel
    auto start_on = [&](int d, double ready_at, const predict::TunedKernel* k) {
        double start = std::max(ready_at, device_free[size_t(d)]);
        if (k) {
            if (last_kernel[size_t(d)]) {
                const double sw = predict::fpga_switch_seconds(*last_kernel[size_t(d)], *k, sys.devices[size_t(d)].spec());
                start += sw, o.switch_seconds += sw, o.switches += sw > 0;
            }
            last_kernel[size_t(d)] = k;
        }
        return start;
    };
    auto run = [&](int d, double start, double seconds, double joules) {
        const double end = start + seconds;
        device_free[size_t(d)] = end;
        o.busy_seconds[size_t(d)] += seconds;
        o.dynamic_by_device[size_t(d)] += joules;
        o.dynamic_joules += joules;
        o.seconds = std::max(o.seconds, end);
        return end;
    };
    // when tensor t is on device d for node i: where it lives, or once a Transfer on the links lands
    // (one per (tensor, device), while the devices compute)
    auto on_links = [&](double b, int from, int to, double at) {
        for (const auto& [slot, link] : routes_[size_t(from) * D + size_t(to)]) {
            const predict::Cost c = predict::transfer_cost(b, *link);
            double& free = link_free[size_t(slot)];
            at = free = std::max(at, free) + c.seconds;
            o.transfer_joules += c.joules;
        }
        return at;
    };
    // the step's batch from the host to where it lives, at the step's start (as simulate() does)
    for (const int t : batch_)
        if (home[size_t(t)] != sys.host) {
            ready[size_t(t)] = on_links(bytes[size_t(t)], sys.host, home[size_t(t)], 0);
            o.seconds = std::max(o.seconds, ready[size_t(t)]);
            ++o.batch_copies;
        }
    auto arrive = [&](int t, int d, int i) {
        if (home[size_t(t)] == d) return ready[size_t(t)];
        const size_t k = size_t(t) * D + size_t(d);
        if (copy_stamp[k] != call) {
            const double at = on_links(bytes[size_t(t)], home[size_t(t)], d, ready[size_t(t)]);
            copy_ready[k] = at, copy_stamp[k] = call;
            o.seconds = std::max(o.seconds, at);
            ++o.transfers;
            const int origin = size_t(t) < T ? t : cast_origin[size_t(t) - T];
            allocate(d, bytes[size_t(t)], std::max(tensors_[size_t(origin)].last_use, i));
        }
        return copy_ready[k];
    };
    // a cutoff's bounds: each device's seconds of nodes still to run there, their dynamic joules, idle watts
    const bool bounded = std::isfinite(cut.seconds) || std::isfinite(cut.joules);
    double left_joules = 0, idle_watts = 0;
    left.assign(D, 0);
    if (bounded) {
        for (size_t i = 0; i < N; ++i) {
            const SimCost& c = sim_costs_[i * O + size_t(p[i])];
            left[size_t(device(int(i)))] += c.seconds, left_joules += c.joules;
        }
        for (size_t d = 0; d < D; ++d) idle_watts += sys.devices[d].idle_w();
    }
    for (size_t i = 0; i < N; ++i) {
        const SimNode& n = sim_nodes_[i];
        const int d = device(int(i));
        const DType compute = dtype(i, p[i]);
        f16[size_t(d)] |= compute == DType::F16;
        // the casts its inputs need (one per (tensor, dtype), on the device of its first consumer), then
        // its inputs' transfers, as the lowered graph orders them
        inputs.assign(io_.begin() + n.inputs, io_.begin() + n.outputs);
        for (size_t k = 0; k < inputs.size(); ++k) {
            const int t = inputs[k];
            const DType have = storage[size_t(t)], want = has_bit(n.f32_inputs, k) ? DType::F32 : compute;
            if (!is_float(have) || have == want) continue;
            const size_t slot = size_t(t) * 3 + size_t(want);
            if (cast_stamp[slot] != call) {
                const CastCost& c = cast(size_t(t), have, want, d);
                cast_of[slot] = int(ready.size()), cast_stamp[slot] = call;
                const double end = run(d, start_on(d, arrive(t, d, int(i)), c.kernel), c.cost.seconds, c.cost.joules);
                ready.push_back(end), home.push_back(d), cast_origin.push_back(t), storage.push_back(want);
                bytes.push_back(tensors_[size_t(t)].elements * double(dtype_size(want)));
                if (copy_stamp.size() < ready.size() * D) copy_stamp.resize(ready.size() * D, 0), copy_ready.resize(ready.size() * D);
                o.cast_seconds += c.cost.seconds, ++o.casts;
                allocate(d, bytes.back(), std::max(tensors_[size_t(t)].last_use, int(i)));
            }
            inputs[k] = cast_of[slot];
        }
        double inputs_ready = 0;
        for (const int t : inputs) inputs_ready = std::max(inputs_ready, arrive(t, d, int(i)));
        const SimCost& c = sim_costs_[i * O + size_t(p[i])];
        const double end = run(d, start_on(d, inputs_ready, c.kernel), c.seconds, c.joules);
        for (int k = n.outputs; k < n.end; ++k) {
            const int t = io_[size_t(k)];
            settle(size_t(t));
            ready[size_t(t)] = end;
            if (!tensors_[size_t(t)].persistent) allocate(d, bytes[size_t(t)], tensors_[size_t(t)].last_use);
        }
        for (int f = frees[i]; f >= 0; f = pool[size_t(f)].next) live[size_t(pool[size_t(f)].device)] -= pool[size_t(f)].bytes;
        if (bounded) {  // (1 + 1e-9): the bounds' sums round differently from the outcome's
            left[size_t(d)] -= c.seconds, left_joules -= c.joules;
            double seconds = o.seconds;
            for (size_t e = 0; e < D; ++e) seconds = std::max(seconds, device_free[e] + left[e]);
            if (seconds > cut.seconds * (1 + 1e-9) || o.dynamic_joules + o.transfer_joules + left_joules + idle_watts * seconds > cut.joules * (1 + 1e-9)) {
                o.cut = true;
                return o;
            }
        }
    }
    // f16's dynamic loss scaling: one pass over the parameter gradients on the device after its last node
    for (size_t d = 0; d < D; ++d) {
        if (!f16[d]) continue;
        double elements = 0;
        for (const auto& [param, grad] : tg_->param_grads)
            if (home[size_t(grad)] == int(d)) elements += tensors_[size_t(grad)].elements;
        if (elements <= 0) continue;
        const predict::Cost c = predict::loss_scaling_cost(elements, sys.devices[d], settings_[d]);
        run(int(d), device_free[d], c.seconds, c.joules);
        o.loss_scaling_seconds += c.seconds;
    }
    bool host_runs = false;
    for (size_t i = 0; i < N && !host_runs; ++i) host_runs = device(int(i)) == sys.host;
    double capped = o.transfer_joules;
    for (size_t d = 0; d < D; ++d) {
        const double idle = sys.devices[d].idle_w() * o.seconds;
        o.idle_joules += idle;
        if (int(d) != sys.host || host_runs) capped += idle + o.dynamic_by_device[d];
        o.bytes_by_device[d] = persistent[d] + peak[d];
        const double capacity = sys.devices[d].spec().mem_gib * double(1ull << 30);
        if (o.fits && capacity > 0 && o.bytes_by_device[d] > capacity)
            o.fits = false, o.why_not = sys.plan_devices[d] + " needs at least " + std::to_string(int64_t(o.bytes_by_device[d] / (1 << 20))) + " MiB of tensors, it has " +
                                       std::to_string(int64_t(capacity / (1 << 20))) + " MiB";
    }
    o.capped_watts = o.seconds > 0 ? capped / o.seconds : 0;
    return o;
}

// ---------------------------------------------------------------------------------------------------
// strategies

std::string Strategy::name() const {
    auto num = [](double x) {
        std::string s = std::to_string(x);
        s.erase(s.find_last_not_of('0') + 1);
        if (s.back() == '.') s.pop_back();
        return s;
    };
    switch (kind) {
        case Kind::Single: return "single:" + device;
        case Kind::Cnnlab: return "cnnlab";
        case Kind::Heft: return "heft";
        case Kind::Energy: return slack > 0 ? "energy:" + num(slack) : "energy";
        case Kind::Joint: return slack > 0 ? "joint:" + num(slack) : "joint";
        case Kind::Powercap: return "powercap:" + num(watts);
        case Kind::Exact:
            return objective == Objective::Time ? "exact:time" : objective == Objective::Powercap ? "exact:powercap:" + num(watts) : slack > 0 ? "exact:" + num(slack) : "exact";
    }
    return "?";
}

Strategy parse_strategy(const std::string& text) {
    const std::string forms =
        "single:<device>, cnnlab, heft, energy, energy:<slack>, powercap:<watts>, exact, exact:<slack>, exact:time, exact:powercap:<watts>, joint or joint:<slack>";
    auto number = [&](const std::string& s, const char* what, double min) {
        const std::optional<double> v = predict::parse_number(s);
        if (!v || *v < min)
            throw Error("--strategy '" + text + "': " + what + " '" + s + "' is not a number" + (min > 0 ? " above 0" : " of 0 or more"), "strategies: " + forms);
        return *v;
    };
    Strategy s;
    auto rest = [&](const std::string& prefix) { return text.size() > prefix.size() && text.compare(0, prefix.size(), prefix) == 0 ? text.substr(prefix.size()) : std::string(); };
    if (text == "cnnlab") {
        s.kind = Strategy::Kind::Cnnlab;
    } else if (text == "heft") {
        s.kind = Strategy::Kind::Heft, s.objective = Strategy::Objective::Time;
    } else if (text == "energy") {
        s.kind = Strategy::Kind::Energy;
    } else if (!rest("energy:").empty()) {
        s.kind = Strategy::Kind::Energy, s.slack = number(rest("energy:"), "the slack", 0);
    } else if (text == "joint") {
        s.kind = Strategy::Kind::Joint;
    } else if (!rest("joint:").empty()) {
        s.kind = Strategy::Kind::Joint, s.slack = number(rest("joint:"), "the slack", 0);
    } else if (!rest("powercap:").empty()) {
        s.kind = Strategy::Kind::Powercap, s.objective = Strategy::Objective::Powercap, s.watts = number(rest("powercap:"), "the cap", 1e-9);
    } else if (!rest("single:").empty()) {
        s.kind = Strategy::Kind::Single, s.objective = Strategy::Objective::Time, s.device = rest("single:");
    } else if (text == "exact") {
        s.kind = Strategy::Kind::Exact;
    } else if (text == "exact:time") {
        s.kind = Strategy::Kind::Exact, s.objective = Strategy::Objective::Time;
    } else if (!rest("exact:powercap:").empty()) {
        s.kind = Strategy::Kind::Exact, s.objective = Strategy::Objective::Powercap, s.watts = number(rest("exact:powercap:"), "the cap", 1e-9);
    } else if (!rest("exact:").empty()) {
        s.kind = Strategy::Kind::Exact, s.slack = number(rest("exact:"), "the slack", 0);
    } else {
        throw Error("unknown --strategy '" + text + "'", "strategies: " + forms);
    }
    return s;
}

Plan PlacementProblem::plan_of(const Placement& p, const std::string& name) const {
    const Graph& g = tg_->graph;
    const SystemModel& sys = *sys_;
    Plan plan;
    plan.name = name;
    plan.origin = "built-in " + name;
    plan.default_device = sys.plan_devices[size_t(sys.host)];
    for (size_t i = 0; i < g.num_nodes(); ++i) {
        const int d = device_of(p[i]);
        const DType t = dtype(i, p[i]);
        if (d == sys.host && t == DType::F32) continue;
        const Node& n = g.node(NodeId(i));
        plan.entries.push_back({PlanEntry::Match::Node, n.name, sys.plan_devices[size_t(d)], t == DType::F32 ? std::nullopt : std::optional<DType>(t), {}, plan.origin});
        if (t != DType::F32 && weight_gradient(n.kind)) plan.storage.push_back({g.tensor(n.outputs[0]).name, DType::F32, plan.origin});
    }
    for (size_t d = 0; d < settings_.size(); ++d) {
        const predict::Setting& s = settings_[d];
        if (s.power_limit_w > 0 || s.clock_mhz > 0 || !s.fpga_design.empty()) {
            DeviceSettings& x = plan.devices[sys.plan_devices[d]];
            if (s.power_limit_w > 0) x.power_limit_w = s.power_limit_w;
            if (s.clock_mhz > 0) x.clock_mhz = s.clock_mhz;
            if (!s.fpga_design.empty()) x.fpga_design = s.fpga_design.str();
        }
    }
    return plan;
}

namespace {

using Placement = PlacementProblem::Placement;
using Outcome = PlacementProblem::Outcome;

// An objective: lexicographic (violation of the constraint, value); a plan that does not fit is the worst.
struct Objective {
    Strategy::Objective kind = Strategy::Objective::Energy;
    double bound_seconds = 0, watts = 0;
    double violation(const Outcome& o) const {
        if (!o.fits || o.cut) return 1e30;
        if (kind == Strategy::Objective::Energy) return std::max(0.0, o.seconds / bound_seconds - 1 - 1e-12);
        if (kind == Strategy::Objective::Powercap) return std::max(0.0, o.capped_watts / watts - 1 - 1e-12);
        return 0;
    }
    double value(const Outcome& o) const { return kind == Strategy::Objective::Energy ? o.joules() : o.seconds; }
    // what a placement must stay within to be better than o (none while o violates the constraint)
    PlacementProblem::Cutoff cutoff(const Outcome& o) const { return violation(o) > 0 ? PlacementProblem::Cutoff{} : cutoff_at(value(o)); }
    // what a placement within the constraint must stay within to have a value under `v`
    PlacementProblem::Cutoff cutoff_at(double v) const {
        if (kind == Strategy::Objective::Energy) return {bound_seconds * (1 + 1e-12), v};
        return {v, INFINITY};
    }
    bool better(const Outcome& a, const Outcome& b) const {  // a strictly better than b
        const double va = violation(a), vb = violation(b);
        if (va != vb) return va < vb - 1e-15;
        return value(a) < value(b) * (1 - 1e-12);
    }
};

// Puts every atom of a unit (a list of atoms) on `device` (its host fallback per atom).
void put(const PlacementProblem& pp, Placement& p, const std::vector<int>& unit, int device) {
    for (int a : unit) {
        const int d = pp.device_for(a, device);
        for (int n : pp.atoms()[size_t(a)]) p[size_t(n)] = d;
    }
}

Placement by_layer(const PlacementProblem& pp, const std::vector<int>& layer_device) {
    Placement p(pp.nodes(), pp.system().host);
    for (size_t l = 0; l < layer_device.size(); ++l) put(pp, p, pp.layers()[l], layer_device[l]);
    return p;
}

// Where local searches of one problem have been: (round, phase, placement) at each pass over every unit.
using Visited = std::set<std::tuple<int, size_t, Placement>>;

struct Candidate {
    Placement placement;
    Outcome outcome;
    std::string chosen;
    std::vector<predict::Setting> settings;
};

// Local search: moves one unit to another device while that improves the objective, over layers, then
// over single atoms (a layer's backward nodes may run beside its forward ones elsewhere: weight gradients
// on one device while the data gradients go on). Each pass ranks the moves by their context-free effect
// (the unit's own node costs there against here) and simulates them in that order. While the constraint
// is violated it takes the best move of all (steepest descent: the first move that restores a power cap
// may cost far more time than another, an FPGA reconfiguration say; ten such steps at most), simulating
// every move on the first step and, on the next, moves in the order of what they gained the step before
// until none of the rest gained more than the best found (lazy greedy); once it holds, it keeps each
// move that improves (twenty passes at most), trying only those that cut the unit's own time or dynamic
// energy (energy: a shorter iteration saves every device's idle energy) or its time (time, powercap) --
// what can pay off without a context. After a pass that moved something,
// the next tries only the units that moved and their neighbours in the graph; when that finds nothing,
// a pass over every unit confirms, and a confirming pass gaining under 0.1 % ends the phase. A start
// reaching a placement another start on the same problem already searched on from stops there.
struct Move {
    size_t unit;
    int device;
    double rank;
};

Candidate improve(const PlacementProblem& pp, Candidate c, const Objective& obj, long& evaluations, Visited& visited) {
    const Graph& g = pp.train().graph;
    std::vector<std::vector<int>> atoms;
    for (size_t a = 0; a < pp.atoms().size(); ++a) atoms.push_back({int(a)});
    // a unit's nodes' seconds and dynamic joules where they are (device < 0) or were it put on `device`
    auto unit_cost = [&](const std::vector<int>& unit, int device) {
        std::pair<double, double> sj{0, 0};
        for (int a : unit) {
            const int d = device < 0 ? -1 : pp.device_for(a, device);
            for (int n : pp.atoms()[size_t(a)]) {
                const predict::Cost& x = *pp.cost(size_t(n), d < 0 ? c.placement[size_t(n)] : d);
                sj.first += x.seconds, sj.second += x.joules;
            }
        }
        return sj;
    };
    auto moves_anything = [&](const std::vector<int>& unit, int device) {
        for (int a : unit)
            if (c.placement[size_t(pp.atoms()[size_t(a)].front())] != pp.device_for(a, device)) return true;
        return false;
    };
    const size_t L = pp.layers().size(), D = pp.options();
    const std::vector<std::vector<int>>* phases[] = {&pp.layers(), &atoms};
    // moves[batch[j]] from placement `from`, simulated in parallel: tried[j], outcomes[j]
    const size_t width = size_t(std::max(1, omp_get_max_threads()));
    std::vector<size_t> batch;
    std::vector<Placement> tried(width);
    std::vector<Outcome> outcomes(width);
    auto simulate = [&](const Placement& from, const std::vector<std::vector<int>>& units, const std::vector<Move>& moves, PlacementProblem::Cutoff cut) {
        std::vector<std::exception_ptr> errors(batch.size());
        auto one = [&](size_t j) {
            try {
                tried[j] = from;
                put(pp, tried[j], units[moves[batch[j]].unit], moves[batch[j]].device);
                outcomes[j] = pp.evaluate(tried[j], cut);
            } catch (...) {
                errors[j] = std::current_exception();
            }
        };
        if (omp_in_parallel()) {  // a job of side_by_side's: tasks, for whichever thread is free (else this one)
            for (size_t j = 0; j < batch.size(); ++j) {
#pragma omp task default(shared) firstprivate(j) if (j + 1 < batch.size())
                one(j);
            }
#pragma omp taskwait
        } else {
#pragma omp parallel for schedule(static, 1) if (batch.size() > 1)
            for (size_t j = 0; j < batch.size(); ++j) one(j);
        }
        for (const std::exception_ptr& e : errors)
            if (e) std::rethrow_exception(e);
        evaluations += long(batch.size());
    };
    std::vector<int> unit_of(pp.nodes());
    std::vector<std::vector<int>> targets;  // per option moving a unit: where its atoms go
    for (int round = 0; round < 5; ++round) {
        for (size_t phase = 0; phase < 2; ++phase) {
            const std::vector<std::vector<int>>& units = *phases[phase];
            for (size_t u = 0; u < units.size(); ++u)
                for (int a : units[u])
                    for (int n : pp.atoms()[size_t(a)]) unit_of[size_t(n)] = int(u);
            std::vector<char> look(units.size(), 1);  // the units this pass tries to move
            // steepest steps: what each move changed (violation, value) when last simulated; lower is better
            using Gain = std::pair<double, double>;
            std::map<std::pair<size_t, int>, Gain> earlier;
            bool everything = true;
            for (int passes = 0, steps = 0, cheap = 0;;) {  // at most 10 steepest steps, then 20 passes over every unit
                const bool violated = obj.violation(c.outcome) > 0;
                if (violated) everything = true;
                if (everything ? (violated ? ++steps > 10 : ++passes > 20) : ++cheap > 200) break;
                // another start that reached this placement for a pass over every unit searched on from it already
                if (everything && !visited.insert({round, phase, c.placement}).second) return c;
                const double value = obj.value(c.outcome);
                std::vector<Move> moves;
                for (size_t u = 0; u < units.size(); ++u) {
                    if (!everything && !look[u]) continue;
                    const auto [secs, joules] = unit_cost(units[u], -1);
                    targets.clear();
                    for (size_t d = 0; d < D; ++d) {
                        if (!moves_anything(units[u], int(d))) continue;
                        // where the unit's atoms go; options an atom has no kernel for fall back (its device
                        // in f32, the host), so two options may move it to the same place: simulated once
                        std::vector<int> to;
                        for (int a : units[u]) to.push_back(pp.device_for(a, int(d)));
                        if (std::find(targets.begin(), targets.end(), to) != targets.end()) continue;
                        targets.push_back(std::move(to));
                        const auto [s2, j2] = unit_cost(units[u], int(d));
                        const double dt = s2 - secs, dj = j2 - joules;
                        const bool energy = obj.kind == Strategy::Objective::Energy;
                        if (violated) moves.push_back({u, int(d), dt});
                        else if (energy ? dj < 0 || dt < 0 : dt < 0) moves.push_back({u, int(d), energy ? dj : dt});
                    }
                }
                std::stable_sort(moves.begin(), moves.end(), [](const Move& a, const Move& b) { return a.rank < b.rank; });
                if (!violated) {
                    earlier.clear();
                } else {  // the moves not simulated before first, then by what they gained the step before, most first
                    auto was = [&](const Move& m) {
                        const auto it = earlier.find({m.unit, m.device});
                        return it == earlier.end() ? nullptr : &it->second;
                    };
                    std::stable_sort(moves.begin(), moves.end(), [&](const Move& a, const Move& b) {
                        const Gain *x = was(a), *y = was(b);
                        return y && (!x || *x < *y);
                    });
                }
                auto gain = [&](const Outcome& o) { return Gain{obj.violation(o) - obj.violation(c.outcome), obj.value(o) - obj.value(c.outcome)}; };
                const Placement before = c.placement;
                bool moved = false;
                Candidate steepest = c;
                // lazily: a move that gained less than the best so far the step before will not gain more now
                auto hopeless = [&](const Move& m) {
                    const auto it = earlier.find({m.unit, m.device});
                    return violated && it != earlier.end() && !(it->second < gain(steepest.outcome));
                };
                // the moves in order, simulated a batch at a time on the threads against the same placement;
                // taking one drops the rest of its batch (simulated again against the new placement), so
                // the search is the sequential one whatever the number of threads
                for (size_t next = 0, stop = 0; next < moves.size() && !stop;) {
                    batch.clear();
                    for (; next < moves.size() && batch.size() < width && !(stop = hopeless(moves[next])); ++next)
                        if (moves_anything(units[moves[next].unit], moves[next].device)) batch.push_back(next);  // else an earlier move got there
                    simulate(c.placement, units, moves, obj.cutoff(c.outcome));  // none while violated: every move's gain counts
                    for (size_t j = 0; j < batch.size(); ++j) {
                        const Move& m = moves[batch[j]];
                        if (violated) {  // the best move of all: the first that restores the constraint may cost far more time than another
                            if (hopeless(m)) {
                                stop = 1;
                                break;
                            }
                            earlier[{m.unit, m.device}] = gain(outcomes[j]);
                            if (obj.better(outcomes[j], steepest.outcome)) steepest.placement = std::move(tried[j]), steepest.outcome = outcomes[j], moved = true;
                        } else if (obj.better(outcomes[j], c.outcome)) {
                            c.placement = std::move(tried[j]), c.outcome = outcomes[j], moved = true;
                            next = batch[j] + 1;
                            break;
                        }
                    }
                }
                if (violated && moved) c = std::move(steepest);
                if (!moved) {
                    if (everything) break;
                    everything = true;  // nothing near the last moves helps: one pass over every unit confirms
                    continue;
                }
                // a pass over every unit that gained under 0.1 % ends the phase: what is left are crumbs
                if (everything && !violated && passes > 1 && obj.value(c.outcome) > value * (1 - 1e-3)) break;
                // the next pass looks at the units that moved and their neighbours in the graph: a move
                // rejected elsewhere mostly stays rejected (don't-look bits, as in 2-opt local search)
                std::fill(look.begin(), look.end(), 0);
                for (size_t n = 0; n < pp.nodes(); ++n) {
                    if (c.placement[n] == before[n]) continue;
                    const Node& x = g.node(NodeId(n));
                    look[size_t(unit_of[n])] = 1;
                    for (TensorId t : x.inputs)
                        if (const NodeId p = g.tensor(t).producer; p != kNone) look[size_t(unit_of[size_t(p)])] = 1;
                    for (TensorId t : x.outputs)
                        for (NodeId r : g.consumers(t)) look[size_t(unit_of[size_t(r)])] = 1;
                }
                everything = false;
            }
        }
        // small nets: two layers moved at once, where no single move helps (one onto the FPGA, one off it)
        if (L * (D - 1) > 48) break;
        bool moved = false;
        for (size_t a = 0; a < L && !moved; ++a)
            for (size_t b = a + 1; b < L && !moved; ++b)
                for (size_t da = 0; da < D && !moved; ++da)
                    for (size_t db = 0; db < D && !moved; ++db) {
                        Placement q = c.placement;
                        put(pp, q, pp.layers()[a], int(da));
                        put(pp, q, pp.layers()[b], int(db));
                        if (q == c.placement) continue;
                        const Outcome o = pp.evaluate(q, obj.cutoff(c.outcome));
                        ++evaluations;
                        if (obj.better(o, c.outcome)) c.placement = std::move(q), c.outcome = o, moved = true;
                    }
        if (!moved) break;
    }
    return c;
}

// Runs the jobs side by side on the threads as tasks (a job's simulations are tasks too: a thread done
// with its job helps the others); inside a job (joint's energy search), as more tasks for the same
// threads. A lone job outside runs here, its simulations on all threads. Rethrows the first job's error.
void side_by_side(const std::vector<std::function<void()>>& jobs) {
    if (jobs.size() == 1 && !omp_in_parallel()) return jobs.front()();
    std::vector<std::exception_ptr> errors(jobs.size());
    auto spawn = [&] {
        for (size_t j = 0; j < jobs.size(); ++j) {
#pragma omp task default(shared) firstprivate(j)
            try {
                jobs[j]();
            } catch (...) {
                errors[j] = std::current_exception();
            }
        }
    };
    if (omp_in_parallel()) {
        spawn();
#pragma omp taskwait
    } else {  // no taskwait: a thread waiting there sleeps till a job ends, one at the barrier takes tasks as they come
#pragma omp parallel
#pragma omp single nowait
        spawn();
    }
    for (const std::exception_ptr& e : errors)
        if (e) std::rethrow_exception(e);
}

Candidate single(const PlacementProblem& pp, int device, long& evaluations) {
    Candidate c;
    c.placement = by_layer(pp, std::vector<int>(pp.layers().size(), device));
    c.outcome = pp.evaluate(c.placement);
    ++evaluations;
    c.chosen = "single:" + pp.system().plan_devices[size_t(pp.device_of(device))];
    if (device >= int(pp.devices())) c.chosen += std::string(" ") + dtype_name(pp.low_precision(pp.device_of(device)));
    c.settings = pp.settings();
    return c;
}

// Placement p (f32 on its devices) with a precision policy's assignment (see with_precision).
Placement amp_over(const PlacementProblem& pp, const Placement& p, AmpPolicy policy) {
    const TrainGraph& tg = pp.train();
    const int D = int(pp.devices());
    Placement q(p.size());
    std::vector<int> count(size_t(D), 0);
    for (size_t i = 0; i < p.size(); ++i) ++count[size_t(q[i] = pp.device_of(p[i]))];
    int main = -1;  // the device with a low precision that runs most nodes: the policy's device
    for (int d = 0; d < D; ++d)
        if (pp.low_precision(d) != DType::F32 && (main < 0 || count[size_t(d)] > count[size_t(main)])) main = d;
    if (main < 0) return q;
    const predict::DeviceModel& m = pp.system().devices[size_t(main)];
    const predict::Setting& setting = pp.settings()[size_t(main)];
    const AmpContext c{pp.low_precision(main), [&](const Graph&, NodeId n, DType) { return pp.cost(size_t(n), q[size_t(n)] + D) != nullptr; }};
    const AmpCosts k{[&](NodeId n, DType t) { return pp.cost(size_t(n), q[size_t(n)] + (t == DType::F32 ? 0 : D))->seconds; },
                     [&](double e, DType from, DType to) { return predict::cast_cost(e, from, to, m, setting).seconds; }, amp_mixed_cost(tg, c.low, m)};
    const std::vector<bool> low = amp_assignment(policy, tg.graph, c, k);
    for (size_t i = 0; i < q.size(); ++i)
        if (low[i]) q[i] += D;
    return q;
}

// Per layer the device minimising a per-layer figure of its own nodes (context-free: no transfers).
Placement per_layer_best(const PlacementProblem& pp, const std::function<double(double seconds, double joules)>& figure) {
    const size_t D = pp.options();
    std::vector<int> choice(pp.layers().size(), pp.system().host);
    for (size_t l = 0; l < pp.layers().size(); ++l) {
        double best = INFINITY;
        for (size_t d = 0; d < D; ++d) {
            double seconds = 0, joules = 0;
            for (int a : pp.layers()[l]) {
                const int dev = pp.device_for(a, int(d));
                for (int n : pp.atoms()[size_t(a)]) {
                    const predict::Cost& c = *pp.cost(size_t(n), dev);
                    seconds += c.seconds, joules += c.joules + pp.system().devices[size_t(pp.device_of(dev))].idle_w() * c.seconds;
                }
            }
            const double f = figure(seconds, joules);
            if (f < best) best = f, choice[l] = int(d);
        }
    }
    return by_layer(pp, choice);
}

// Classic HEFT over atoms: upward rank on mean costs (mean over the devices that run the atom's nodes)
// and mean transfer times, then in rank order the device giving the earliest finish, idle gaps allowed.
Placement heft(const PlacementProblem& pp) {
    const Graph& g = pp.train().graph;
    const size_t N = pp.nodes(), D = pp.options();
    std::vector<int> atom(N);
    for (size_t a = 0; a < pp.atoms().size(); ++a)
        for (int n : pp.atoms()[a]) atom[size_t(n)] = int(a);
    auto runs_atom = [&](size_t n, size_t d) { return pp.device_for(atom[n], int(d)) == int(d); };
    std::vector<double> mean(N, 0);
    for (size_t n = 0; n < N; ++n) {
        int k = 0;
        for (size_t d = 0; d < D; ++d)
            if (runs_atom(n, d)) mean[n] += pp.cost(n, int(d))->seconds, ++k;
        mean[n] /= k;
    }
    auto transfer = [&](double bytes, int a, int b) { return pp.transfer_seconds(bytes, a, b); };
    // its mean over the ordered pairs of distinct devices
    auto mean_transfer = [&](double bytes) {
        if (D < 2) return 0.0;
        double s = 0;
        for (size_t a = 0; a < D; ++a)
            for (size_t b = 0; b < D; ++b) s += transfer(bytes, int(a), int(b));
        return s / double(D * (D - 1));
    };
    std::vector<double> rank(N, 0);
    for (size_t i = N; i-- > 0;) {
        double succ = 0;
        for (TensorId t : g.node(NodeId(i)).outputs) {
            const double c = mean_transfer(double(g.tensor(t).desc.bytes()));
            for (NodeId s : g.consumers(t)) succ = std::max(succ, c + rank[size_t(s)]);
        }
        rank[i] = mean[i] + succ;
    }
    std::vector<size_t> order(N);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rank[a] > rank[b]; });  // predecessors first: rank(pred) > rank(succ)
    Placement p(N, -1);
    std::vector<double> finish(N, 0);
    std::vector<int> atom_device(pp.atoms().size(), -1);
    std::vector<std::vector<std::pair<double, double>>> busy(pp.devices());  // per device: sorted (start, end)
    for (size_t n : order) {
        const Node& node = g.node(NodeId(n));
        double best_end = INFINITY, best_start = 0;
        int best = -1;
        for (size_t d = 0; d < D; ++d) {
            if (atom_device[size_t(atom[n])] >= 0 ? atom_device[size_t(atom[n])] != int(d) : !runs_atom(n, d)) continue;
            double ready = 0;
            for (TensorId t : node.inputs) {
                const int prod = g.tensor(t).producer == kNone ? -1 : int(g.tensor(t).producer);
                if (prod >= 0) ready = std::max(ready, finish[size_t(prod)] + transfer(double(g.tensor(t).desc.bytes()), p[size_t(prod)], int(d)));
            }
            const double w = pp.cost(n, int(d))->seconds;
            double start = ready;
            for (const auto& [s, e] : busy[size_t(pp.device_of(int(d)))]) {  // the first gap from `ready` that holds the node
                if (start + w <= s) break;
                start = std::max(start, e);
            }
            if (start + w < best_end) best_end = start + w, best_start = start, best = int(d);
        }
        p[n] = best;
        finish[n] = best_end;
        atom_device[size_t(atom[n])] = best;
        auto& b = busy[size_t(pp.device_of(best))];
        b.insert(std::upper_bound(b.begin(), b.end(), std::pair{best_start, best_end}), {best_start, best_end});
    }
    return p;
}

// Branch and bound over layer placements (see placement.hpp). Returns false when the budget runs out.
bool exact(const PlacementProblem& pp, const Objective& obj, Candidate& best, long& evaluations, long budget) {
    const size_t L = pp.layers().size(), D = pp.options(), devices = pp.devices();
    // per layer and option: its nodes' busy seconds per device (host fallbacks included) and dynamic joules
    std::vector<std::vector<std::vector<double>>> busy(L, std::vector<std::vector<double>>(D, std::vector<double>(devices, 0)));
    std::vector<std::vector<double>> dyn(L, std::vector<double>(D, 0)), total(L, std::vector<double>(D, 0));
    for (size_t l = 0; l < L; ++l)
        for (size_t d = 0; d < D; ++d)
            for (int a : pp.layers()[l]) {
                const int dev = pp.device_for(a, int(d));
                for (int n : pp.atoms()[size_t(a)]) {
                    const predict::Cost& c = *pp.cost(size_t(n), dev);
                    busy[l][d][size_t(pp.device_of(dev))] += c.seconds, dyn[l][d] += c.joules, total[l][d] += c.seconds;
                }
            }
    // the least dynamic energy and busy time of layers l.. whatever their devices
    std::vector<double> rest_dyn(L + 1, 0), rest_seconds(L + 1, 0);
    for (size_t l = L; l-- > 0;) {
        rest_dyn[l] = rest_dyn[l + 1] + *std::min_element(dyn[l].begin(), dyn[l].end());
        rest_seconds[l] = rest_seconds[l + 1] + *std::min_element(total[l].begin(), total[l].end());
    }
    double idle_w = 0;
    for (const predict::DeviceModel& m : pp.system().devices) idle_w += m.idle_w();
    std::vector<int> choice(L, 0);
    std::vector<double> load(devices, 0);
    double incumbent = best.outcome.fits && obj.violation(best.outcome) == 0 ? obj.value(best.outcome) : INFINITY;
    long leaves = 0;
    bool out_of_budget = false;
    std::function<void(size_t, double)> go = [&](size_t l, double dyn_so_far) {
        if (out_of_budget) return;
        double lb_t = *std::max_element(load.begin(), load.end());
        lb_t = std::max(lb_t, (std::accumulate(load.begin(), load.end(), 0.0) + rest_seconds[l]) / double(devices));
        if (obj.kind == Strategy::Objective::Energy) {
            if (lb_t > obj.bound_seconds * (1 + 1e-12)) return;
            if (dyn_so_far + rest_dyn[l] + idle_w * lb_t >= incumbent * (1 - 1e-12)) return;
        } else if (lb_t >= incumbent * (1 - 1e-12)) {
            return;
        }
        if (l == L) {
            if (++leaves > budget) {
                out_of_budget = true;
                return;
            }
            Placement p = by_layer(pp, choice);
            const Outcome o = pp.evaluate(p, obj.cutoff_at(incumbent));
            ++evaluations;
            if (o.fits && obj.violation(o) == 0 && obj.value(o) < incumbent * (1 - 1e-12)) {
                incumbent = obj.value(o);
                best.placement = std::move(p), best.outcome = o, best.chosen = "exact", best.settings = pp.settings();
            }
            return;
        }
        for (size_t d = 0; d < D; ++d) {
            choice[l] = int(d);
            for (size_t k = 0; k < devices; ++k) load[k] += busy[l][d][k];
            go(l + 1, dyn_so_far + dyn[l][d]);
            for (size_t k = 0; k < devices; ++k) load[k] -= busy[l][d][k];
        }
    };
    go(0, 0);
    return !out_of_budget;
}

}  // namespace

std::vector<std::vector<predict::Setting>> search_settings(const TrainGraph& tg, const SystemModel& sys, const Strategy& s) {
    std::vector<std::vector<predict::Setting>> all{sys.settings};
    for (size_t d = 0; d < sys.devices.size(); ++d) {
        const hw::DeviceSpec& spec = sys.devices[d].spec();
        std::vector<predict::Setting> options;
        if (spec.kind == "gpu" && spec.settable_power() && s.objective == Strategy::Objective::Powercap) {
            for (int q = 0; q <= 4; ++q) options.push_back({.power_limit_w = spec.power_limit_min_w + (spec.power_limit_max_w - spec.power_limit_min_w) * q / 4});
            if (s.watts > spec.power_limit_min_w && s.watts < spec.power_limit_max_w) options.push_back({.power_limit_w = s.watts});
            // and the highest limit under which this GPU alone holds the cap, every other accelerator idle
            // (what GPU power management would have to set): bisection, power never rising as the limit falls
            double idle = 0;
            for (size_t k = 0; k < sys.devices.size(); ++k)
                if (k != d && int(k) != sys.host) idle += sys.devices[k].idle_w();
            // (its step as simulate() runs it: the batch crosses the host's link first, each node after
            // the previous one and its inputs)
            std::vector<double> batch_ready(tg.graph.num_tensors(), 0);
            double copy_joules = 0;
            std::map<std::pair<int, int>, double> link_free;
            for (size_t t = 0; t < tg.graph.num_tensors(); ++t) {
                const Tensor& x = tg.graph.tensor(TensorId(t));
                if (x.producer != kNone || !is_batch(x.role) || int(d) == sys.host) continue;
                for (const auto& [key, link] : route(sys, sys.host, int(d))) {
                    const predict::Cost c = predict::transfer_cost(double(x.desc.bytes()), *link);
                    batch_ready[t] = link_free[key] = std::max(batch_ready[t], link_free[key]) + c.seconds;
                    copy_joules += c.joules;
                }
            }
            auto gpu_only_watts = [&](double limit) {
                double seconds = 0, joules = copy_joules;
                for (size_t i = 0; i < tg.graph.num_nodes(); ++i) {
                    const Node& n = tg.graph.node(NodeId(i));
                    for (TensorId t : n.inputs) seconds = std::max(seconds, batch_ready[size_t(t)]);
                    const predict::Cost c = predict::cost(tg.graph, NodeId(i), sys.devices[d], n.compute, {.power_limit_w = limit});
                    seconds += c.seconds, joules += c.joules;
                }
                return seconds > 0 ? joules / seconds + spec.idle_w + idle : 0;
            };
            double lo = spec.power_limit_min_w, hi = spec.power_limit_max_w;
            if (gpu_only_watts(lo) <= s.watts && gpu_only_watts(hi) > s.watts) {
                while (hi - lo > 0.05) {  // to 0.05 W: finer than what joule plan compares it with
                    const double mid = 0.5 * (lo + hi);
                    (gpu_only_watts(mid) <= s.watts ? lo : hi) = mid;
                }
                options.push_back({.power_limit_w = lo});
            }
        } else if (spec.kind == "fpga" && sys.settings[d].fpga_design.empty()) {
            predict::Setting design = sys.settings[d];
            design.fpga_design = predict::best_fpga_design(tg.graph, sys.devices[d], design);
            if (!design.fpga_design.empty()) options = {sys.settings[d], design};
        }
        if (options.empty()) continue;
        std::vector<std::vector<predict::Setting>> next;
        for (const auto& set : all)
            for (const predict::Setting& o : options) {
                next.push_back(set);
                next.back()[d] = o;
            }
        all = std::move(next);
    }
    return all;
}

Placed place(const TrainGraph& tg, const SystemModel& sys, const Strategy& s) {
    Placed out;
    out.strategy = s.name();
    long evaluations = 0;
    const size_t D = sys.devices.size();
    Objective obj{s.objective, 0, s.watts};
    Candidate best;
    auto consider = [&](Candidate c) {
        if (best.placement.empty() || obj.better(c.outcome, best.outcome)) best = std::move(c);
    };
    // one problem per setting searched (FPGA designs; powercap: GPU power limits), each with the
    // single-device placements: the baselines, a device at its best setting; and the strategy's own
    // plans, or its seeds (built side by side: costing every node on every device is much of the work)
    const bool joint = s.kind == Strategy::Kind::Joint;
    struct Level {
        std::unique_ptr<PlacementProblem> pp;
        std::vector<Candidate> seeds;
        std::vector<std::pair<size_t, int>> baselines;  // (seed, its device): the single placements
        Candidate plan;                                 // cnnlab's, heft's
        long evaluations = 0;
        Visited visited;  // where local searches on pp have been
    };
    std::vector<std::vector<predict::Setting>> sets = search_settings(tg, sys, s);
    // joint searches one setting from its seeds, the others from its plan (below): the one FPGA design
    // first (the other way round: MobileNetV2 on v100+s10 0.4 % worse)
    if (joint) std::reverse(sets.begin(), sets.end());
    std::vector<Level> levels(sets.size());
    std::vector<std::function<void()>> jobs;
    for (size_t k = 0; k < sets.size(); ++k)
        jobs.push_back([&, k] {
            Level& l = levels[k];
            const PlacementProblem& pp = *(l.pp = std::make_unique<PlacementProblem>(tg, sys, sets[k], joint));
            for (size_t o = 0; o < pp.options(); ++o) {
                l.baselines.push_back({l.seeds.size(), pp.device_of(int(o))});
                l.seeds.push_back(single(pp, int(o), l.evaluations));
            }
            if (joint)  // each device under TF-AMP's greedy policy and the optimal one
                for (size_t d = 0; d < D; ++d)
                    for (const AmpPolicy policy : {AmpPolicy::Greedy, AmpPolicy::Optimal}) {
                        Candidate c = l.seeds[d];
                        c.placement = amp_over(pp, c.placement, policy);
                        c.outcome = pp.evaluate(c.placement);
                        ++l.evaluations;
                        c.chosen += std::string(" amp ") + amp_policy_name(policy);
                        l.baselines.push_back({l.seeds.size(), int(d)});
                        l.seeds.push_back(std::move(c));
                    }
            auto own = [&](Placement p) {
                Candidate c;
                c.placement = std::move(p);
                c.outcome = pp.evaluate(c.placement);
                ++l.evaluations;
                c.chosen = "its own plan";
                c.settings = pp.settings();
                return c;
            };
            switch (s.kind) {
                case Strategy::Kind::Cnnlab: l.plan = own(per_layer_best(pp, [](double t, double e) { return t * e; })); break;
                case Strategy::Kind::Heft: l.plan = own(heft(pp)); break;
                case Strategy::Kind::Energy:
                case Strategy::Kind::Powercap:
                case Strategy::Kind::Joint:
                    l.seeds.push_back(own(per_layer_best(pp, [](double, double e) { return e; })));
                    l.seeds.push_back(own(per_layer_best(pp, [](double t, double) { return t; })));
                    l.seeds.push_back(own(per_layer_best(pp, [](double t, double e) { return t * e; })));  // cnnlab's
                    l.seeds.push_back(own(heft(pp)));
                    break;
                case Strategy::Kind::Exact:
                case Strategy::Kind::Single: break;
            }
        });
    side_by_side(jobs);
    std::vector<Candidate> baselines(D);  // per device: its fastest single placement (joint: in any precision)
    for (const Level& l : levels) {
        evaluations += l.evaluations;
        for (const auto& [seed, device] : l.baselines) {
            Candidate& b = baselines[size_t(device)];
            const Outcome& o = l.seeds[seed].outcome;
            if (b.placement.empty() || (o.fits && (!b.outcome.fits || o.seconds < b.outcome.seconds * (1 - 1e-12)))) b = l.seeds[seed];
        }
    }
    if (s.kind == Strategy::Kind::Single) {
        best = baselines[size_t(sys.index_of(s.device))];
        best.chosen = "its own plan";
    } else {
        obj.bound_seconds = INFINITY;
        for (const Candidate& b : baselines)
            if (b.outcome.fits) obj.bound_seconds = std::min(obj.bound_seconds, b.outcome.seconds * (1 + s.slack));
        if (!std::isfinite(obj.bound_seconds)) obj.bound_seconds = 0;  // nothing fits: every plan violates
        for (Level& l : levels) {
            if (!l.plan.placement.empty()) consider(l.plan);
            if (s.kind == Strategy::Kind::Exact) {
                Candidate c = best;  // the incumbent so far (none at first: the baselines follow)
                for (const Candidate& b : l.seeds)
                    if (c.placement.empty() || obj.better(b.outcome, c.outcome)) c = b;
                // refused up front beyond 10^7 layer placements, and when the search simulates 2 x 10^6 of them
                const double space = std::pow(double(D), double(l.pp->layers().size()));
                const long budget = 2'000'000;
                if (space > 1e7 || !exact(*l.pp, obj, c, evaluations, budget))
                    throw Error("--strategy " + out.strategy + ": " + std::to_string(l.pp->layers().size()) + " layers on " + std::to_string(D) + " devices are " +
                                    (space > 1e7 ? "more than 10^7 placements" : "more placements than the search simulates (" + std::to_string(budget) + ")"),
                                "exact solves small nets (LeNet-5); use energy, powercap or heft for larger ones");
                consider(c);
            }
            for (const Candidate& c : l.seeds) consider(c);
        }
        if (s.kind == Strategy::Kind::Energy || s.kind == Strategy::Kind::Powercap || joint) {
            // local search on the three settings whose seeds promise most (the value, 10 % worse per 1 %
            // over the constraint: a seed slightly over a cap is often one repair from the best plan), on
            // every setting for nets of at most 48 layer moves; on each, from every seed whose value is
            // within 2 x the best seed's within the constraint -- those within it, and the one closest to
            // it of those outside (a power cap's is often one repair from the best plan: ResNet-50 on
            // k40+de5 under 150 W, 465 ms from it, 1660 without). A search from a far worse seed ends in
            // a far worse local optimum (ResNet-50 under 250 W on v100+s10: from all-CPU 0.30 s, from
            // the GPU 0.098) or never gets inside (energy:0.1 from all-CPU: 15,000 placements simulated).
            // On ResNet-18/50, VGG-16 and MobileNetV2 under caps of 150-300 W this finds what searching every
            // setting finds but once (VGG-16 at 250 W: 2 % slower), in a third of the time.
            auto score = [&](const Level& l) {
                double v = INFINITY;
                for (const Candidate& c : l.seeds) v = std::min(v, obj.value(c.outcome) * (1 + 10 * obj.violation(c.outcome)));
                return v;
            };
            std::stable_sort(levels.begin(), levels.end(), [&](const Level& a, const Level& b) { return score(a) < score(b); });
            const size_t searched = std::min(levels.size(), levels.front().pp->layers().size() * (levels.front().pp->options() - 1) <= 48 ? levels.size() : 3);  // small nets: every setting
            const double promising = obj.violation(best.outcome) == 0 ? obj.value(best.outcome) * 2 : INFINITY;
            auto search = [&](Level& l, const Candidate& seed, long& count) {
                Candidate start = seed;
                start.chosen = "its own plan";
                return improve(*l.pp, std::move(start), obj, count, l.visited);
            };
            std::vector<std::vector<Candidate>> found(searched);
            std::vector<long> counts(searched + 1, 0);
            auto from_seeds = [&](size_t k) {  // in order: they share where they have been
                const Candidate* closest = nullptr;
                for (const Candidate& c : levels[k].seeds)
                    if (obj.violation(c.outcome) > 0 && (!closest || obj.better(c.outcome, closest->outcome))) closest = &c;
                for (const Candidate& c : levels[k].seeds)
                    if ((&c == closest || obj.violation(c.outcome) == 0) && obj.value(c.outcome) <= promising) found[k].push_back(search(levels[k], c, counts[k]));
            };
            // the settings' searches run side by side. Joint's settings are FPGA designs, and beside the
            // GPU's low precision the FPGA keeps a handful of nodes: each setting after the first is
            // searched from the best plan found before it, one after another (ResNet-50: 1,224 placements
            // simulated instead of 2,072 from the seeds; plans within 0.1 %), beside energy's own search
            // for the placement-then-precision seed
            std::vector<std::function<void()>> jobs;
            if (joint) {
                jobs.push_back([&] {
                    from_seeds(0);
                    for (size_t k = 1; k < searched; ++k) {
                        const Candidate* b = nullptr;
                        for (size_t j = 0; j < k; ++j)
                            for (const Candidate& c : found[j])
                                if (!b || obj.better(c.outcome, b->outcome)) b = &c;
                        if (!b) {
                            from_seeds(k);
                            continue;
                        }
                        Candidate c = *b;
                        c.outcome = levels[k].pp->evaluate(c.placement);
                        ++counts[k];
                        c.settings = levels[k].pp->settings();
                        found[k].push_back(search(levels[k], c, counts[k]));
                    }
                });
            } else {
                for (size_t k = 0; k < searched; ++k) jobs.push_back([&, k] { from_seeds(k); });
            }
            Placed e;  // joint: energy's plan, to put the optimal precision policy over
            if (joint)
                jobs.push_back([&] {
                    Strategy energy = s;
                    energy.kind = Strategy::Kind::Energy;
                    e = place(tg, sys, energy);
                    counts.back() = e.evaluations;
                });
            side_by_side(jobs);
            for (size_t k = 0; k < searched; ++k)
                for (Candidate& c : found[k]) consider(std::move(c));
            evaluations += std::accumulate(counts.begin(), counts.end(), 0L);
            if (joint)  // placement, then precision; searched on from where it holds the bound as promising as the seeds
                for (Level& l : levels)
                    if (l.pp->settings() == e.settings) {
                        Candidate c;
                        c.placement = amp_over(*l.pp, e.placement, AmpPolicy::Optimal);
                        c.outcome = l.pp->evaluate(c.placement);
                        ++evaluations;
                        c.chosen = "energy + amp optimal";
                        c.settings = e.settings;
                        if (obj.violation(c.outcome) == 0 && obj.value(c.outcome) <= promising) consider(search(l, c, evaluations));
                        consider(std::move(c));
                    }
        }
        for (Candidate& b : baselines) consider(b);
    }
    out.placement = best.placement;
    out.settings = best.settings;
    out.outcome = best.outcome;
    out.chosen = best.chosen;
    out.bound_seconds = s.objective == Strategy::Objective::Energy ? obj.bound_seconds : 0;
    out.watts = s.objective == Strategy::Objective::Powercap ? s.watts : 0;
    out.meets = s.kind == Strategy::Kind::Single || obj.violation(best.outcome) == 0;
    for (const Level& l : levels)  // the problem at the chosen settings writes its plan
        if (l.pp->settings() == best.settings) {
            out.plan = l.pp->plan_of(best.placement, out.strategy);
            break;
        }
    if (out.plan.name.empty()) throw Error("internal: the chosen placement's settings are no searched setting");
    out.evaluations = evaluations;
    return out;
}

Placed with_precision(const TrainGraph& tg, const SystemModel& sys, const Placed& placed, AmpPolicy policy) {
    const PlacementProblem pp(tg, sys, placed.settings, true);
    Placed out = placed;
    out.strategy = placed.strategy + " + amp " + amp_policy_name(policy);
    out.placement = amp_over(pp, placed.placement, policy);
    out.outcome = pp.evaluate(out.placement);
    out.plan = pp.plan_of(out.placement, out.strategy);
    out.meets = out.outcome.fits && (placed.bound_seconds <= 0 || out.outcome.seconds <= placed.bound_seconds * (1 + 1e-12)) &&
                (placed.watts <= 0 || out.outcome.capped_watts <= placed.watts * (1 + 1e-12));
    ++out.evaluations;
    return out;
}

}  // namespace joule
