// `joule analyze`: the analytical memory-subsystem model of one training iteration, for a given
// on-chip capacity, off-chip bandwidth and peak compute (or a data/hw device), with sweeps, a
// per-layer-type roofline and traffic shares. Every figure is modelled.
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "backend/registry.hpp"
#include "graph/autodiff.hpp"
#include "plan/passes.hpp"
#include "graph/error.hpp"
#include "predict/memory_model.hpp"
#include "predict/units.hpp"
#include "report/table.hpp"
#include "zoo/zoo.hpp"

namespace joule::cli {

namespace {

struct AnalyzeFlags {
    NetOptions net;
    HardwareOptions hw;
    std::string csv;
    std::vector<std::string> sweeps;
    bool json = false, layers = false;
};

struct TypeTotals {
    double flops = 0, read = 0, write = 0, time = 0;
};

std::map<std::string, TypeTotals> by_type(const Graph& g, const predict::IterationPrediction& p) {
    std::map<std::string, TypeTotals> m;
    for (const auto& n : p.nodes) {
        TypeTotals& t = m[category_name(op_info(g.node(n.node).kind).category)];
        t.flops += n.flops, t.read += n.read_bytes, t.write += n.write_bytes, t.time += n.time_s;
    }
    return m;
}

void print_single(const Graph& g, const predict::IterationPrediction& p, const predict::MemoryConfig& c, bool layers) {
    std::cout << "per iteration (modelled): off-chip read " << bytes_str(p.read_bytes) << ", written " << bytes_str(p.write_bytes) << "; time "
              << fixed(p.time_s * 1e3, 3) << " ms (compute alone " << fixed(p.compute_s * 1e3, 3) << " ms, memory stalls " << fixed(p.stall_s * 1e3, 3)
              << " ms, utilisation " << fixed(100 * p.utilisation, 1)
              << " %); bandwidth demand average " << fixed(p.avg_bandwidth_bytes_per_s / 1e9, 1) << " GB/s, peak "
              << fixed(p.peak_bandwidth_bytes_per_s / 1e9, 1) << " GB/s; peak buffer occupancy " << bytes_str(p.peak_occupancy_bytes) << " of "
              << bytes_str(c.capacity_bytes) << "\n";
    if (c.efficiency)
        std::cout << "node times: efficiency curves from " << c.efficiency->path << " for " << p.calibrated_nodes << " of " << p.nodes.size()
                  << " nodes" << (p.calibrated_nodes < p.nodes.size() ? ", the roofline for the rest (kinds the records did not have)" : "") << "\n";
    std::cout << "\n";
    Table t({"layer type", "GFLOP", "traffic", "traffic share", "time share", "FLOP/B", "roofline GFLOP/s", "bound"});
    const double traffic = p.read_bytes + p.write_bytes;
    for (const auto& [name, v] : by_type(g, p)) {
        const double bytes = v.read + v.write, ai = bytes > 0 ? v.flops / bytes : 0;
        const double roof = bytes > 0 ? std::min(c.peak_f32_flops, ai * c.bandwidth_bytes_per_s) : c.peak_f32_flops;
        t.add({name, fixed(v.flops / 1e9, 3), bytes_str(bytes), fixed(traffic > 0 ? 100 * bytes / traffic : 0, 1) + " %",
               fixed(p.time_s > 0 ? 100 * v.time / p.time_s : 0, 1) + " %", bytes > 0 ? fixed(ai, 2) : "-", fixed(roof / 1e9, 1),
               bytes <= 0 ? "on chip" : ai * c.bandwidth_bytes_per_s >= c.peak_f32_flops ? "compute" : "memory"});
    }
    std::cout << "per layer type (modelled; roofline at the f32 peak):\n";
    t.print(std::cout);
    if (!layers) return;
    Table n({"#", "node", "op", "phase", "read", "written", "time us", "stall us", "util", "tiling", "occupancy"});
    for (const auto& x : p.nodes) {
        const Node& node = g.node(x.node);
        n.add({std::to_string(x.node), node.name, op_label(node), phase_name(node.phase), bytes_str(x.read_bytes), bytes_str(x.write_bytes),
               fixed(x.time_s * 1e6, 2), fixed(x.stall_s * 1e6, 2), fixed(100 * x.utilisation, 0) + " %", x.tiling, bytes_str(x.occupancy_bytes)});
    }
    std::cout << "\nper node (modelled):\n";
    n.print(std::cout);
}

nlohmann::json to_json(const Graph& g, const predict::IterationPrediction& p, const predict::MemoryConfig& c, bool layers) {
    nlohmann::json types;
    for (const auto& [name, v] : by_type(g, p)) types[name] = {{"flops", v.flops}, {"read_bytes", v.read}, {"write_bytes", v.write}, {"seconds", v.time}};
    nlohmann::json j = {{"kind", "modelled"}, {"capacity_bytes", c.capacity_bytes}, {"bandwidth_bytes_per_second", c.bandwidth_bytes_per_s},
                        {"peak_f32_flops", c.peak_f32_flops}, {"peak_bf16_flops", c.peak(DType::BF16)}, {"read_bytes", p.read_bytes},
                        {"write_bytes", p.write_bytes}, {"flops", p.flops}, {"seconds", p.time_s}, {"compute_seconds", p.compute_s}, {"stall_seconds", p.stall_s},
                        {"utilisation", p.utilisation}, {"average_bandwidth_bytes_per_second", p.avg_bandwidth_bytes_per_s},
                        {"peak_bandwidth_bytes_per_second", p.peak_bandwidth_bytes_per_s}, {"peak_occupancy_bytes", p.peak_occupancy_bytes},
                        {"by_layer_type", types}, {"time_model", c.efficiency ? "calibrated" : "roofline"},
                        {"calibrated_nodes", p.calibrated_nodes}};
    if (c.efficiency) j["efficiency_file"] = c.efficiency->path;
    if (layers)
        for (const auto& x : p.nodes) {
            nlohmann::json node = {{"id", x.node}, {"name", g.node(x.node).name}, {"op", op_name(g.node(x.node).kind)}, {"read_bytes", x.read_bytes},
                                   {"write_bytes", x.write_bytes}, {"flops", x.flops}, {"compute_seconds", x.compute_s}, {"memory_seconds", x.memory_s},
                                   {"seconds", x.time_s}, {"stall_seconds", x.stall_s}, {"utilisation", x.utilisation}, {"tiling", x.tiling}, {"occupancy_bytes", x.occupancy_bytes},
                                   {"calibrated", x.calibrated}};
            predict::GemmShape s;
            if (predict::gemm_shape(g, x.node, &s)) node["gemm"] = {{"m", s.m}, {"n", s.n}, {"k", s.k}, {"count", s.count}};
            j["nodes"].push_back(node);
        }
    return j;
}

}  // namespace

void add_analyze(CLI::App& app) {
    auto f = std::make_shared<AnalyzeFlags>();
    f->net.net = "resnet50";
    f->net.batch = 32;
    f->net.optimizer = "sgd";
    auto* cmd = app.add_subcommand("analyze", "model a training iteration's off-chip traffic, time and bandwidth for a buffer capacity and bandwidth");
    add_net_options(*cmd, f->net, false);
    add_hardware_options(*cmd, f->hw, true);
    cmd->add_option("--sweep", f->sweeps, "capacity=1MiB..256MiB or bandwidth=100GB/s..1600GB/s (x2 steps) or a,b,c lists");
    cmd->add_flag("--layers", f->layers, "per-node table (or nodes in --json)");
    cmd->add_option("--csv", f->csv, "sweep / totals as CSV to this file ('-': stdout)");
    cmd->add_flag("--json", f->json, "machine-readable output");
    cmd->callback([f] {
        Hardware hw = resolve_hardware(f->hw);
        predict::MemoryConfig& cfg = hw.config;
        std::vector<double> capacities = {cfg.capacity_bytes}, bandwidths = {cfg.bandwidth_bytes_per_s};
        bool swept = false;
        std::set<std::string> axes;
        for (const std::string& s : f->sweeps) {
            const auto eq = s.find('=');
            const std::string key = s.substr(0, eq), range = eq == std::string::npos ? "" : s.substr(eq + 1);
            if ((key == "capacity" || key == "bandwidth") && !axes.insert(key).second)
                throw Error("--sweep " + key + " is given twice", "give each axis once; a list a,b,c sweeps several values");
            if (key == "capacity") capacities = predict::parse_sweep(range, predict::parse_bytes, "--sweep capacity"), hw.capacity = swept = true;
            else if (key == "bandwidth") bandwidths = predict::parse_sweep(range, predict::parse_bandwidth, "--sweep bandwidth"), hw.bandwidth = swept = true;
            else throw Error("--sweep '" + s + "': expected capacity=RANGE or bandwidth=RANGE");
        }
        hw.require("joule analyze");
        const LoweredGraph lg = lower_net(f->net);
        const Plan& plan = lg.plan;
        const Graph& g = lg.train.graph;
        check_fits(lg, f->net, hw.memory_bytes, hw.memory_of);
        if (!f->json && f->csv != "-")
            std::cout << "analyze " << f->net.net << " batch " << f->net.batch << " (" << f->net.optimizer << ", plan " << plan.name
                      << ": tensors in their producer's dtype, " << lg.casts << " casts; " << g.num_nodes() << " nodes): all figures modelled\n";
        nlohmann::json out = nlohmann::json::array();
        Table sweep({"capacity", "bandwidth", "read", "written", "time ms", "util", "avg GB/s", "conv", "fc", "norm", "activation", "pooling", "other"});
        std::ostringstream csv;
        csv << "capacity_bytes,bandwidth_bytes_per_s,read_bytes,write_bytes,seconds,utilisation,avg_bandwidth,peak_bandwidth,peak_occupancy";
        for (const char* t : {"conv", "fc", "norm", "activation", "pooling", "loss", "update", "cast", "transfer", "other"}) csv << "," << t << "_bytes";
        csv << "\n";
        for (double cap : capacities)
            for (double bw : bandwidths) {
                predict::MemoryConfig c = cfg;
                c.capacity_bytes = cap, c.bandwidth_bytes_per_s = bw;
                const predict::IterationPrediction p = predict::predict_iteration(g, c);
                const auto types = by_type(g, p);
                const double traffic = p.read_bytes + p.write_bytes;
                auto share = [&](const char* t) {
                    auto it = types.find(t);
                    return it == types.end() || traffic <= 0 ? std::string("0.0 %") : fixed(100 * (it->second.read + it->second.write) / traffic, 1) + " %";
                };
                double other = 0;
                for (const char* t : {"loss", "update", "cast", "transfer", "other"}) {
                    auto it = types.find(t);
                    if (it != types.end()) other += it->second.read + it->second.write;
                }
                sweep.add({bytes_str(cap), fixed(bw / 1e9, 0) + " GB/s", bytes_str(p.read_bytes), bytes_str(p.write_bytes), fixed(p.time_s * 1e3, 3),
                           fixed(100 * p.utilisation, 1) + " %", fixed(p.avg_bandwidth_bytes_per_s / 1e9, 1), share("conv"), share("fc"), share("norm"),
                           share("activation"), share("pooling"), fixed(traffic > 0 ? 100 * other / traffic : 0, 1) + " %"});
                csv << exact(cap) << "," << exact(bw) << "," << exact(p.read_bytes) << "," << exact(p.write_bytes) << "," << exact(p.time_s) << ","
                    << exact(p.utilisation) << "," << exact(p.avg_bandwidth_bytes_per_s) << "," << exact(p.peak_bandwidth_bytes_per_s) << ","
                    << exact(p.peak_occupancy_bytes);
                for (const char* t : {"conv", "fc", "norm", "activation", "pooling", "loss", "update", "cast", "transfer", "other"}) {
                    auto it = types.find(t);
                    csv << "," << exact(it == types.end() ? 0.0 : it->second.read + it->second.write);
                }
                csv << "\n";
                if (f->json) out.push_back(to_json(g, p, c, f->layers));
                else if (!swept && f->csv != "-") print_single(g, p, c, f->layers);
            }
        if (!f->csv.empty()) {
            if (f->csv == "-") {
                std::cout << csv.str();
            } else {
                std::ofstream file(f->csv);
                if (!file) throw Error("--csv " + f->csv + ": cannot write the file");
                file << csv.str();
            }
        }
        if (f->json) {
            std::cout << nlohmann::json{{"schema", "joule.analyze/1"}, {"net", f->net.net}, {"batch", f->net.batch}, {"dtype", f->net.dtype}, {"results", out}}.dump(2) << '\n';
        } else if (swept && f->csv != "-") {
            std::cout << "sweep (modelled; traffic share per layer type):\n";
            sweep.print(std::cout);
        }
    });
}

}  // namespace joule::cli
