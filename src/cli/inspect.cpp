// `joule inspect NET`: the TrainGraph node by node (phase, op, shapes, FLOPs, bytes) and its totals.
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "graph/autodiff.hpp"
#include "graph/cost.hpp"
#include "report/table.hpp"
#include "zoo/zoo.hpp"

namespace joule::cli {

namespace {
std::string shapes(const Graph& g, const std::vector<TensorId>& ids) {
    std::string s;
    for (TensorId t : ids) s += (s.empty() ? "" : " ") + desc_str(g.tensor(t).desc);
    return s;
}
}  // namespace

void add_inspect(CLI::App& app) {
    auto o = std::make_shared<NetOptions>();
    o->batch = 1;
    auto json = std::make_shared<bool>(false);
    auto* cmd = app.add_subcommand("inspect", "print a net's TrainGraph with per-node FLOPs and bytes");
    add_net_options(*cmd, *o, true);
    cmd->add_flag("--json", *json, "machine-readable output");
    cmd->callback([o, json] {
        zoo::NetConfig cfg;
        cfg.batch = o->batch;
        cfg.image_size = o->image_size;
        cfg.seq_len = o->seq_len;
        zoo::Model m = zoo::build(o->net, cfg);
        const OptimizerConfig opt = o->optimizer == "sgd" ? OptimizerConfig::sgd(0.05f, 0.9f) : OptimizerConfig::adam(2e-3f);
        TrainGraph tg = build_train_graph(std::move(m.graph), m.loss, opt);
        apply_compute_precision(tg.graph, parse_dtype(o->dtype));
        const Graph& g = tg.graph;
        const GraphCost total = graph_cost(g);
        if (*json) {
            nlohmann::json nodes = nlohmann::json::array();
            for (size_t i = 0; i < g.num_nodes(); ++i) {
                const Node& n = g.node(NodeId(i));
                const NodeCost c = node_cost(g, NodeId(i));
                nlohmann::json in = nlohmann::json::array(), out = nlohmann::json::array();
                for (TensorId t : n.inputs) in.push_back({{"name", g.tensor(t).name}, {"desc", desc_str(g.tensor(t).desc)}});
                for (TensorId t : n.outputs) out.push_back({{"name", g.tensor(t).name}, {"desc", desc_str(g.tensor(t).desc)}});
                nodes.push_back({{"id", i}, {"name", n.name}, {"op", op_name(n.kind)}, {"phase", phase_name(n.phase)},
                                 {"source", g.node(n.source).name}, {"compute", dtype_name(n.compute)}, {"inputs", in}, {"outputs", out},
                                 {"flops", c.flops}, {"bytes_read", c.bytes_read}, {"bytes_written", c.bytes_written},
                                 {"param_bytes", c.param_bytes}, {"activation_bytes", c.activation_bytes}});
            }
            std::cout << nlohmann::json{{"net", o->net},
                                        {"batch", o->batch},
                                        {"parameters", g.parameter_count()},
                                        {"nodes", nodes},
                                        {"total", {{"flops", total.total.flops}, {"bytes_read", total.total.bytes_read}, {"bytes_written", total.total.bytes_written}}},
                                        {"forward", {{"flops", total.forward.flops}}}}
                             .dump(2)
                      << '\n';
            return;
        }
        Table t({"#", "phase", "node", "op", "inputs", "outputs", "MFLOP", "read", "written"});
        for (size_t i = 0; i < g.num_nodes(); ++i) {
            const Node& n = g.node(NodeId(i));
            const NodeCost c = node_cost(g, NodeId(i));
            t.add({std::to_string(i), phase_name(n.phase), n.name, std::string(op_name(n.kind)) + (n.compute != DType::F32 ? " [" + std::string(dtype_name(n.compute)) + "]" : ""),
                   shapes(g, n.inputs), shapes(g, n.outputs), fixed(c.flops / 1e6, 3), bytes_str(c.bytes_read), bytes_str(c.bytes_written)});
        }
        t.print(std::cout);
        std::cout << g.num_nodes() << " nodes, " << g.parameter_count() << " parameters; per iteration: " << si(total.total.flops, "FLOP")
                  << " (forward " << si(total.forward.flops, "FLOP") << "), " << bytes_str(total.total.bytes_read) << " read, "
                  << bytes_str(total.total.bytes_written) << " written (each tensor counted once per access)\n";
    });
}

}  // namespace joule::cli
