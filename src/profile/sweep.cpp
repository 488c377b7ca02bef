#include "profile/sweep.hpp"

#include <cmath>
#include <sstream>

#include "backend/registry.hpp"
#include "data/dataset.hpp"
#include "graph/autodiff.hpp"
#include "graph/cost.hpp"
#include "graph/error.hpp"
#include "hw/device_spec.hpp"
#include "import/onnx.hpp"
#include "runtime/executor.hpp"
#include "runtime/trainer.hpp"
#include "zoo/zoo.hpp"

namespace joule::profile {

namespace {

struct MeanSpread {
    double mean = 0, spread = 0;
};
MeanSpread stats(const std::vector<double>& v) {
    MeanSpread m;
    if (v.empty()) return m;
    for (double x : v) m.mean += x;
    m.mean /= double(v.size());
    if (v.size() > 1) {
        for (double x : v) m.spread += (x - m.mean) * (x - m.mean);
        m.spread = std::sqrt(m.spread / double(v.size() - 1));
    }
    return m;
}

// The per-layer-type bucket of the characterisation study / CNNLab tables.
std::string bucket(OpCategory c) {
    switch (c) {
        case OpCategory::Conv: return "conv";
        case OpCategory::FullyConnected: return "fc";
        case OpCategory::Norm: return "bn";
        case OpCategory::Activation: return "activation";
        case OpCategory::Pooling: return "pooling";
        case OpCategory::Cast: return "cast";          // the plan's dtype conversions
        case OpCategory::Transfer: return "transfer";  // and device crossings, apart from the layers'
        default: return "other";
    }
}

}  // namespace

std::vector<std::string> parse_list(const std::string& s, const std::string& flag) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ','))
        if (!item.empty()) out.push_back(item);
    if (out.empty()) throw Error(flag + " needs a comma-separated list, got '" + s + "'");
    return out;
}

std::vector<int64_t> parse_int_list(const std::string& s, const std::string& flag, bool allow_zero) {
    std::vector<int64_t> out;
    for (const std::string& item : parse_list(s, flag)) {
        size_t used = 0;
        int64_t v = -1;
        try {
            v = std::stoll(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used != item.size() || v < (allow_zero ? 0 : 1))
            throw Error(flag + ": '" + item + "' is not a " + (allow_zero ? "non-negative" : "positive") + " integer (in '" + s + "')");
        out.push_back(v);
    }
    return out;
}

std::string precision_key(DType dtype, PrecisionScope scope) {
    return std::string(dtype_name(dtype)) + (dtype != DType::F32 && scope == PrecisionScope::All ? "-all" : "");
}

std::pair<DType, PrecisionScope> parse_precision_key(const std::string& key) {
    const bool all = key.size() > 4 && key.ends_with("-all");
    return {parse_dtype(all ? key.substr(0, key.size() - 4) : key), all ? PrecisionScope::All : PrecisionScope::Gemm};
}

ProfiledModel profiled_model(const std::string& net, int64_t batch, const std::string& precision, int64_t image_size, int64_t seq_len,
                             const Backend& device) {
    const auto [dtype, scope] = parse_precision_key(precision);
    zoo::NetConfig cfg;
    cfg.batch = batch;
    cfg.image_size = image_size;
    cfg.seq_len = seq_len;
    ProfiledModel p{load_model(net, cfg), {}};
    TrainGraph tg = build_train_graph(std::move(p.model.graph), p.model.loss, OptimizerConfig::sgd(0.01f, 0.9f));
    const Plan plan = precision_plan(tg, dtype, scope, device);
    LowerOptions lo;
    lo.keep = {p.model.logits, p.model.loss};
    p.lowered = lower(std::move(tg), plan, lo);
    return p;
}

int run_sweep(Store& store, const SweepOptions& o, const std::function<void(const SweepEvent&)>& on_event) {
    if (o.iters < 1) throw Error("--iters must be >= 1, got " + std::to_string(o.iters));
    std::optional<hw::DeviceSpec> spec;
    std::string spec_error;
    try {
        spec = hw::find_cpu_spec(o.device_spec);
    } catch (const Error& e) {
        if (!o.device_spec.empty()) throw;
        spec_error = e.what();
    }
    for (const std::string& net : o.nets)  // unknown names and unreadable model files fail before any run
        is_onnx_file(net) ? (void)onnx_fixed_batch(net) : (void)zoo::net_info(net);
    int ran = 0;
    for (const std::string& net : o.nets)
        for (int64_t batch : o.batches)
            for (DType dtype : o.dtypes)
                for (int threads_opt : o.threads) {
                    BackendSet backends({.threads = threads_opt});
                    const int threads = backends.threads();
                    energy::MeterChoice meter;
                    try {
                        meter = energy::choose_meter(o.meter, spec ? &*spec : nullptr, threads);
                    } catch (const Error& e) {
                        throw Error(std::string(e.what()) + (spec_error.empty() ? "" : "; " + spec_error));
                    }
                    ConfigKey key{net, "cpu", precision_key(dtype, o.scope), energy::kind_name(meter.info.kind), batch, threads};
                    SweepEvent ev;
                    ev.key = key;
                    if (!o.force && store.has_config(key, o.iters)) {
                        ev.skipped = true;
                        if (on_event) on_event(ev);
                        continue;
                    }
                    ProfiledModel pm = profiled_model(net, batch, key.dtype, o.image_size, o.seq_len, backends.get("cpu"));
                    const zoo::Model& m = pm.model;
                    const Graph& g = pm.lowered.train.graph;
                    Executor ex(pm.lowered, backends, {{}, 1});
                    data::SyntheticData synth(1);
                    auto feed = [&] { fill_synthetic(ex, m, synth); };
                    int64_t steps = 0;  // a training run's: fresh dropout masks and Adam's bias correction each step
                    auto run = [&] { ex.run_all({.training = true, .run = uint64_t(steps), .step = steps + 1}), ++steps; };
                    for (int64_t i = 0; i < o.warmup; ++i) {
                        feed();
                        run();
                    }
                    EnergyRecorder rec(meter, o.energy);
                    rec.begin(ex);
                    for (int64_t i = 0; i < o.iters; ++i) {
                        feed();
                        rec.step_begin();
                        run();
                        rec.step_end();
                    }
                    const EnergyResult e = rec.finish(g);

                    ConfigRecord c;
                    c.key = key;
                    c.meter = meter.info.name + " (" + meter.info.source + ")";
                    c.iters = o.iters;
                    const MeanSpread step = stats(e.step_seconds);
                    c.step_s = step.mean, c.step_spread_s = step.spread;
                    c.idle_w = e.idle_w;
                    c.idle_j = stats(e.step_idle_joules).mean;
                    c.total_j = stats(e.step_total_joules).mean;
                    c.ops_j = c.total_j - c.idle_j;
                    std::vector<NodeRecord> nodes;
                    for (size_t n = 0; n < g.num_nodes(); ++n) {
                        const Node& node = g.node(NodeId(n));
                        const NodeCost cost = node_cost(g, NodeId(n));
                        c.flops += cost.flops;
                        c.bytes += cost.bytes_read + cost.bytes_written;
                        std::vector<double> t, j;
                        for (size_t s = 0; s < e.step_node_seconds.size(); ++s) {
                            t.push_back(e.step_node_seconds[s][n]);
                            j.push_back(e.step_node_joules[s][n]);
                        }
                        NodeRecord r;
                        r.node = node.name;
                        r.op = op_label(node);
                        r.category = bucket(op_info(node.kind).category);
                        r.phase = phase_name(node.phase);
                        r.shapes = shapes_of(g, node);
                        r.reps = int64_t(t.size());
                        const MeanSpread ts = stats(t), js = stats(j);
                        r.time_s = ts.mean, r.time_spread_s = ts.spread, r.energy_j = js.mean, r.energy_spread_j = js.spread;
                        r.power_w = r.time_s > 0 ? r.energy_j / r.time_s : 0;
                        r.flops = cost.flops;
                        r.bytes = cost.bytes_read + cost.bytes_written;
                        r.device = node.device;
                        r.dtype = dtype_name(node.compute);
                        nodes.push_back(r);
                    }
                    store.put(c, nodes);
                    ++ran;
                    ev.meter_message = meter.message;
                    ev.record = &c;
                    ev.graph = &g, ev.devices = ex.devices(), ev.spans = &rec.spans(), ev.energy = &e;
                    if (on_event) on_event(ev);
                }
    return ran;
}

}  // namespace joule::profile
