#include "profile/calibrate.hpp"

#include "backend/registry.hpp"

#include <algorithm>
#include <set>

#include "graph/error.hpp"
#include "import/onnx.hpp"
#include "profile/sweep.hpp"

namespace joule::profile {

namespace {

bool excluded(const ConfigRecord& c, const std::vector<std::string>& exclude) {
    for (const std::string& e : exclude)
        if (e == c.key.net || e == c.key.net + ":" + std::to_string(c.key.batch)) return true;
    return false;
}

}  // namespace

std::vector<NodeRecord> check_rebuilt(const Store& db, const ConfigRecord& c, const Graph& g) {
    std::vector<NodeRecord> rec = db.nodes(c.key);
    const std::string where = db.path() + ": " + c.key.net + " batch " + std::to_string(c.key.batch) + " " + c.key.dtype;
    if (rec.size() != g.num_nodes())
        throw Error(where + ": " + std::to_string(rec.size()) + " node records, the rebuilt training graph has " + std::to_string(g.num_nodes()),
                    "the records come from another joule version; profile again with --force");
    for (size_t i = 0; i < rec.size(); ++i) {
        const Node& n = g.node(NodeId(i));
        const std::string shapes = shapes_of(g, n);
        if (rec[i].node != n.name || rec[i].shapes != shapes)
            throw Error(where + ": node " + std::to_string(i) + " was profiled as '" + rec[i].node + "' " + rec[i].shapes + ", rebuilt as '" + n.name + "' " + shapes,
                        "pass the --image-size / --seq-len the sweep used");
    }
    return rec;
}

DeviceEstimate estimate_on(const Store& db, const ConfigRecord& c, const predict::DeviceModel& whole, int64_t image_size, int64_t seq_len) {
    const predict::DeviceModel d = predict::on_threads(whole, c.key.threads);  // a CPU: the configuration's cores of it
    BackendSet backends;  // the built-in precision plans are the cpu's, as the sweep made them
    const ProfiledModel pm = profiled_model(c.key.net, c.key.batch, c.key.dtype, image_size, seq_len, backends.get("cpu"));
    const Graph& g = pm.lowered.train.graph;
    const std::vector<NodeRecord> rec = check_rebuilt(db, c, g);
    DeviceEstimate e;
    for (size_t i = 0; i < g.num_nodes(); ++i)
        if (!d.has(g.node(NodeId(i)).compute)) {
            e.why_not = d.spec().name + " has no " + dtype_name(g.node(NodeId(i)).compute) + " path";
            return e;
        }
    for (size_t i = 0; i < g.num_nodes(); ++i) {
        const predict::Cost k = predict::cost(g, NodeId(i), d, g.node(NodeId(i)).compute);
        e.step_s += k.seconds, e.dynamic_j += k.joules;
        e.by_type_s[rec[i].category] += k.seconds;
    }
    e.idle_j = d.idle_w() * e.step_s;
    e.ok = true;
    return e;
}

CalibrationSet calibration_samples(const Store& db, const predict::MemoryConfig& hw, const CalibrationOptions& o) {
    if (hw.efficiency) throw InternalError("calibration_samples needs the plain roofline (efficiency must be null)");
    for (const std::string& e : o.exclude) {
        const std::string net = e.substr(0, e.find(':'));
        if (!is_onnx_file(net)) zoo::net_info(net);  // an unknown name is an error, not a silent no-op
        if (e.find(':') != std::string::npos) parse_int_list(e.substr(e.find(':') + 1), "--exclude " + e);
    }
    std::vector<ConfigRecord> all = db.configs();
    std::set<int> thread_counts;
    for (const ConfigRecord& c : all)
        if (c.key.device == "cpu") thread_counts.insert(c.key.threads);
    int threads = o.threads;
    if (threads == 0) {
        if (thread_counts.size() > 1)
            throw Error(db.path() + ": records for several thread counts", "choose one with --threads (calibration is per thread count)");
        if (!thread_counts.empty()) threads = *thread_counts.begin();
    }
    CalibrationSet set;
    BackendSet backends;  // the built-in precision plans are the cpu's, as the sweep made them
    std::set<std::string> seen;  // one meter kind per configuration: the times are the same measurement
    for (const ConfigRecord& c : all) {
        if (c.key.device != "cpu" || c.key.threads != threads) continue;
        if (!o.nets.empty() && std::find(o.nets.begin(), o.nets.end(), c.key.net) == o.nets.end()) continue;
        if (excluded(c, o.exclude)) continue;
        const std::string id = c.key.net + " batch " + std::to_string(c.key.batch) + " " + c.key.dtype;
        if (!seen.insert(id).second) continue;
        const ProfiledModel pm = profiled_model(c.key.net, c.key.batch, c.key.dtype, o.image_size, o.seq_len, backends.get("cpu"));
        const Graph& g = pm.lowered.train.graph;
        const std::vector<NodeRecord> rec = check_rebuilt(db, c, g);
        const predict::IterationPrediction p = predict::predict_iteration(g, hw);
        set.first_sample.push_back(set.samples.size());
        double roofline = o.cold_traffic ? 0 : p.time_s;
        for (size_t i = 0; i < rec.size(); ++i) {
            const predict::NodePrediction& np = p.nodes[i];
            predict::EfficiencySample s;
            s.key = predict::efficiency_key(g, NodeId(i));
            s.compute_s = np.compute_s, s.memory_s = np.memory_s;
            if (o.cold_traffic) {  // the node alone from a cold buffer, as predict::cost sees it
                s.memory_s = predict::cold_traffic(g, NodeId(i), g.node(NodeId(i)).compute, hw.capacity_bytes).bytes() / hw.bandwidth_bytes_per_s;
                roofline += std::max(s.compute_s, s.memory_s) + hw.node_overhead_s;
            }
            predict::GemmShape gs;
            if (predict::gemm_shape(g, NodeId(i), &gs)) s.m = gs.m, s.n = gs.n, s.k = gs.k;
            s.measured_s = rec[i].time_s;
            s.step_s = c.step_s;
            set.samples.push_back(s);
        }
        set.roofline_s.push_back(roofline);
        set.configs.push_back(c);
    }
    if (set.configs.empty())
        throw Error(db.path() + ": no profiled configuration left to calibrate from (threads " + std::to_string(threads) + ", after --net / --exclude)",
                    "run joule profile first, or exclude less");
    return set;
}

}  // namespace joule::profile
