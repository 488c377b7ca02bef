#include "plan/plan.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "graph/error.hpp"
#include "hw/yaml_file.hpp"
#include "predict/fpga_model.hpp"

namespace joule {

std::string fingerprint(const TrainGraph& tg) {
    uint64_t h = 0xcbf29ce484222325ULL;
    auto mix = [&](const std::string& s) {
        for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
        h = (h ^ 0xff) * 0x100000001b3ULL;
    };
    const Graph& g = tg.graph;
    for (const Tensor& t : g.tensors()) mix(t.name + "|" + role_name(t.role) + "|" + shape_str(t.desc.shape) + layout_name(t.desc.layout));
    for (const Node& n : g.nodes()) mix(n.name + "|" + op_name(n.kind));
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
}

bool glob_match(const std::string& p, const std::string& s) {
    size_t i = 0, j = 0, star = std::string::npos, mark = 0;
    while (j < s.size()) {
        if (i < p.size() && (p[i] == '?' || p[i] == s[j])) {
            ++i, ++j;
        } else if (i < p.size() && p[i] == '*') {
            star = i++;
            mark = j;
        } else if (star != std::string::npos) {
            i = star + 1;
            j = ++mark;
        } else {
            return false;
        }
    }
    while (i < p.size() && p[i] == '*') ++i;
    return i == p.size();
}

const std::string& layer_of(const Graph& g, NodeId n) {
    const NodeId s = g.node(n).source;
    return g.node(s == kNone ? n : s).name;
}

PrecisionScope parse_precision_scope(const std::string& s) {
    if (s == "gemm") return PrecisionScope::Gemm;
    if (s == "all") return PrecisionScope::All;
    throw Error("unknown precision scope '" + s + "'", "use gemm or all");
}

Plan precision_plan(const TrainGraph& tg, DType dtype, PrecisionScope scope, const Backend& device) {
    return precision_plan(tg, dtype, scope, device.device(), [&](const Graph& g, NodeId n, DType t) { return supports_in(device, g, n, t); });
}

Plan precision_plan(const TrainGraph& tg, DType dtype, PrecisionScope scope, const std::string& device, const RunsInDtype& runs) {
    Plan p;
    p.default_device = device;
    p.name = dtype == DType::F32 ? "f32" : std::string(dtype_name(dtype)) + (scope == PrecisionScope::Gemm ? " (gemm)" : " (all)");
    p.origin = "built-in " + p.name + " plan";
    if (dtype == DType::F32) return p;
    const Graph& g = tg.graph;
    std::vector<bool> take(g.num_nodes(), false);
    for (size_t i = 0; i < g.num_nodes(); ++i) {
        const NodeId n = NodeId(i);
        if (!f32_only_op(g.node(n).kind)) take[i] = scope == PrecisionScope::Gemm ? is_gemm_node(g, n) : runs(g, n, dtype);
    }
    // Under the gemm scope a node that only moves data between low-precision nodes -- every input written by
    // one, every reader one -- computes in dtype too (BERT's heads split and merged between its linears and
    // attention matmuls, forward and backward): it then moves half the bytes, and the GEMM before it writes
    // dtype instead of f32 + a Cast node after the move (the same bits: the move is exact, the rounding the
    // same). PyTorch's autocast likewise runs such ops in their input's dtype. The largest set meeting the
    // rule: start from every candidate, drop those that break it until none does.
    if (scope == PrecisionScope::Gemm) {
        std::vector<bool> moves(g.num_nodes(), false);
        for (size_t i = 0; i < g.num_nodes(); ++i)
            if (moves_data_only(g.node(NodeId(i)).kind) && runs(g, NodeId(i), dtype)) moves[i] = take[i] = true;
        for (bool changed = true; changed;) {
            changed = false;
            for (size_t i = 0; i < g.num_nodes(); ++i) {
                if (!moves[i] || !take[i]) continue;
                const Node& node = g.node(NodeId(i));
                const std::vector<NodeId>& readers = g.consumers(node.outputs[0]);
                const bool low_in = std::all_of(node.inputs.begin(), node.inputs.end(), [&](TensorId t) {
                    const NodeId p = g.tensor(t).producer;
                    return p != kNone && take[size_t(p)];
                });
                if (!low_in || readers.empty() || !std::all_of(readers.begin(), readers.end(), [&](NodeId r) { return take[size_t(r)]; }))
                    take[i] = false, changed = true;
            }
        }
    }
    for (size_t i = 0; i < g.num_nodes(); ++i) {
        if (!take[i]) continue;
        const Node& node = g.node(NodeId(i));
        p.entries.push_back({PlanEntry::Match::Node, node.name, std::nullopt, dtype, {}, p.origin});
        // A GEMM whose every reader computes in f32 (a weight gradient's update; under the gemm scope the
        // BN, activation or residual add after a conv / linear) writes its output in f32 directly: one
        // pass over memory instead of a rounding store, a Cast node and a second store.
        const std::vector<NodeId>& readers = g.consumers(node.outputs[0]);
        if (gemm_may_write_f32(node.kind) && !readers.empty() &&
            std::none_of(readers.begin(), readers.end(), [&](NodeId r) { return take[size_t(r)]; }))
            p.storage.push_back({g.tensor(node.outputs[0]).name, DType::F32, p.origin});
    }
    return p;
}

// ---- plan files ---------------------------------------------------------------------------------------

namespace {

struct Reader {
    std::string origin;
    std::string where(const YAML::Node& n) const { return origin + ":" + std::to_string(n.Mark().line + 1); }
    [[noreturn]] void fail(const YAML::Node& n, const std::string& what, const std::string& fix = "") const {
        throw Error(where(n) + ": " + what, fix);
    }
    void keys(const YAML::Node& n, const std::set<std::string>& allowed, const std::string& what) const {
        if (!n.IsMap()) fail(n, what + " must be a map");
        for (const auto& kv : n) {
            const std::string k = kv.first.as<std::string>();
            if (!allowed.count(k)) {
                std::string list;
                for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
                fail(kv.first, "unknown key '" + k + "' in " + what, "keys: " + list);
            }
        }
    }
    std::string str(const YAML::Node& n, const std::string& what) const {
        if (!n.IsScalar() || n.Scalar().empty()) fail(n, what + " must be a non-empty string");
        return n.Scalar();
    }
    DType dtype(const YAML::Node& n) const {
        try {
            return parse_dtype(str(n, "dtype"));
        } catch (const Error& e) {
            fail(n, e.what());
        }
    }
    double positive(const YAML::Node& n, const std::string& what) const {
        double v = 0;
        try {
            v = n.as<double>();
        } catch (const YAML::Exception&) {
            fail(n, what + " must be a number");
        }
        if (!(v > 0) || v > 1e9) fail(n, what + " must be a positive number, got " + n.Scalar());
        return v;
    }
};

}  // namespace

Plan parse_plan(const std::string& text, const std::string& origin) try {
    Reader r{origin};
    YAML::Node y;
    try {
        y = YAML::Load(text);
    } catch (const YAML::Exception& e) {
        throw Error(origin + ":" + std::to_string(e.mark.line + 1) + ": invalid YAML: " + e.msg);
    }
    if (!y.IsMap()) throw Error(origin + ": a plan file must be a YAML map with version, graph and entries");
    r.keys(y, {"version", "graph", "default", "entries", "storage", "devices"}, "the plan");
    if (!y["version"] || !y["version"].IsScalar() || y["version"].Scalar() != "1")
        throw Error(origin + ": unsupported or missing 'version' (this joule reads plan version 1)");
    Plan p;
    p.name = origin;
    p.origin = origin;
    if (const YAML::Node gr = y["graph"]) {
        r.keys(gr, {"model", "batch", "fingerprint"}, "graph");
        if (!gr["fingerprint"]) r.fail(gr, "graph needs a fingerprint", "joule inspect --plan prints the graph's; joule plan writes it");
        p.fingerprint = r.str(gr["fingerprint"], "fingerprint");
        if (gr["model"]) p.model = r.str(gr["model"], "model");
        if (gr["batch"]) p.batch = int64_t(r.positive(gr["batch"], "batch"));
    } else {
        throw Error(origin + ": missing 'graph' (model, batch, fingerprint of the graph the plan was made for)");
    }
    if (const YAML::Node d = y["default"]) {
        r.keys(d, {"device", "dtype"}, "default");
        if (d["device"]) p.default_device = r.str(d["device"], "device");
        if (d["dtype"]) p.default_dtype = r.dtype(d["dtype"]);
        p.origin = r.where(d);
    }
    if (const YAML::Node es = y["entries"]) {
        if (!es.IsSequence()) r.fail(es, "entries must be a list");
        for (const YAML::Node& e : es) {
            r.keys(e, {"layer", "node", "device", "dtype", "options"}, "an entry");
            PlanEntry pe;
            pe.origin = r.where(e);
            if (bool(e["layer"]) == bool(e["node"])) r.fail(e, "an entry names either a layer (glob) or a node (exact name)");
            pe.match = e["layer"] ? PlanEntry::Match::Layer : PlanEntry::Match::Node;
            pe.pattern = r.str(e["layer"] ? e["layer"] : e["node"], e["layer"] ? "layer" : "node");
            if (e["device"]) pe.device = r.str(e["device"], "device");
            if (e["dtype"]) pe.dtype = r.dtype(e["dtype"]);
            if (const YAML::Node o = e["options"]) {
                if (!o.IsMap()) r.fail(o, "options must be a map of strings");
                for (const auto& kv : o) pe.options[kv.first.as<std::string>()] = r.str(kv.second, "option '" + kv.first.as<std::string>() + "'");
            }
            if (!pe.device && !pe.dtype && pe.options.empty()) r.fail(e, "the entry sets nothing", "give a device, a dtype or options");
            p.entries.push_back(std::move(pe));
        }
    }
    if (const YAML::Node ss = y["storage"]) {
        if (!ss.IsSequence()) r.fail(ss, "storage must be a list");
        for (const YAML::Node& s : ss) {
            r.keys(s, {"tensor", "dtype"}, "a storage entry");
            if (!s["tensor"] || !s["dtype"]) r.fail(s, "a storage entry needs tensor and dtype");
            p.storage.push_back({r.str(s["tensor"], "tensor"), r.dtype(s["dtype"]), r.where(s)});
        }
    }
    if (const YAML::Node ds = y["devices"]) {
        if (!ds.IsMap()) r.fail(ds, "devices must be a map of device -> settings");
        for (const auto& kv : ds) {
            r.keys(kv.second, {"power_limit_w", "clock_mhz", "fpga_design"}, "device settings");
            DeviceSettings s;
            if (kv.second["power_limit_w"]) s.power_limit_w = r.positive(kv.second["power_limit_w"], "power_limit_w");
            if (kv.second["clock_mhz"]) s.clock_mhz = r.positive(kv.second["clock_mhz"], "clock_mhz");
            if (const YAML::Node fd = kv.second["fpga_design"]) {
                try {
                    predict::parse_fpga_design(fd.as<std::string>());
                } catch (const Error& e) {
                    r.fail(fd, e.what());
                }
                s.fpga_design = fd.as<std::string>();
            }
            p.devices[kv.first.as<std::string>()] = s;
        }
    }
    return p;
} catch (const YAML::Exception& e) {
    hw::yaml_error(origin, e, "plan file");
}

Plan read_plan_file(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) throw Error(path + ": no such plan file", "give the path of a plan YAML file");
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    if (!f) throw Error(path + ": cannot read the plan file");
    return parse_plan(ss.str(), path);
}

std::string plan_to_yaml(const Plan& p) {
    YAML::Emitter out;
    out << YAML::BeginMap << YAML::Key << "version" << YAML::Value << 1;
    out << YAML::Key << "graph" << YAML::Value << YAML::BeginMap;
    if (!p.model.empty()) out << YAML::Key << "model" << YAML::Value << p.model;
    if (p.batch > 0) out << YAML::Key << "batch" << YAML::Value << p.batch;
    out << YAML::Key << "fingerprint" << YAML::Value << YAML::DoubleQuoted << p.fingerprint << YAML::EndMap;
    out << YAML::Key << "default" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "device" << YAML::Value << p.default_device
        << YAML::Key << "dtype" << YAML::Value << dtype_name(p.default_dtype) << YAML::EndMap;
    if (!p.entries.empty()) {
        out << YAML::Key << "entries" << YAML::Value << YAML::BeginSeq;
        for (const PlanEntry& e : p.entries) {
            out << YAML::Flow << YAML::BeginMap << YAML::Key << (e.match == PlanEntry::Match::Layer ? "layer" : "node") << YAML::Value
                << YAML::DoubleQuoted << e.pattern;
            if (e.device) out << YAML::Key << "device" << YAML::Value << *e.device;
            if (e.dtype) out << YAML::Key << "dtype" << YAML::Value << dtype_name(*e.dtype);
            if (!e.options.empty()) {
                out << YAML::Key << "options" << YAML::Value << YAML::BeginMap;
                for (const auto& [k, v] : e.options) out << YAML::Key << k << YAML::Value << v;
                out << YAML::EndMap;
            }
            out << YAML::EndMap;
        }
        out << YAML::EndSeq;
    }
    if (!p.storage.empty()) {
        out << YAML::Key << "storage" << YAML::Value << YAML::BeginSeq;
        for (const StorageEntry& s : p.storage)
            out << YAML::Flow << YAML::BeginMap << YAML::Key << "tensor" << YAML::Value << YAML::DoubleQuoted << s.tensor << YAML::Key
                << "dtype" << YAML::Value << dtype_name(s.dtype) << YAML::EndMap;
        out << YAML::EndSeq;
    }
    if (!p.devices.empty()) {
        out << YAML::Key << "devices" << YAML::Value << YAML::BeginMap;
        for (const auto& [d, s] : p.devices) {
            out << YAML::Key << d << YAML::Value << YAML::Flow << YAML::BeginMap;
            if (s.power_limit_w) out << YAML::Key << "power_limit_w" << YAML::Value << *s.power_limit_w;
            if (s.clock_mhz) out << YAML::Key << "clock_mhz" << YAML::Value << *s.clock_mhz;
            if (s.fpga_design) out << YAML::Key << "fpga_design" << YAML::Value << YAML::DoubleQuoted << *s.fpga_design;
            out << YAML::EndMap;
        }
        out << YAML::EndMap;
    }
    out << YAML::EndMap;
    return std::string(out.c_str()) + "\n";
}

}  // namespace joule
