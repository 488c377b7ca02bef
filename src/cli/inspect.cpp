// `joule inspect NET`: the planned TrainGraph node by node (phase, op, device, dtype, shapes, FLOPs, bytes)
// and its totals; --plan FILE shows a plan's graph with its casts and transfers, --dump-after PASS the
// graph after one pass of the pipeline.
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "graph/error.hpp"
#include "graph/autodiff.hpp"
#include "backend/registry.hpp"
#include "graph/cost.hpp"
#include "plan/passes.hpp"
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
    auto plan_file = std::make_shared<std::string>();
    auto dump_after = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand("inspect", "print a net's planned TrainGraph with per-node device, dtype, FLOPs and bytes");
    add_net_options(*cmd, *o, true);
    cmd->add_flag("--json", *json, "machine-readable output");
    auto* plan = cmd->add_option("--plan", *plan_file, "plan file to apply (default: the built-in plan of --dtype / --dtype-scope)");
    for (const char* x : {"--dtype", "--dtype-scope"}) plan->excludes(x);
    cmd->add_option("--dump-after", *dump_after, "print the graph after this pass and stop: decide, casts, allreduce, transfers, layout, fuse or memory");
    auto dp = std::make_shared<std::pair<int, double>>(1, 25.0);  // processes, bucket MiB
    cmd->add_option("--processes", dp->first, "the graph one process of a data-parallel job of N runs (mpirun -np N joule train): --batch is the global batch")
        ->check(number_in(1, 1 << 20));
    cmd->add_option("--bucket-mib", dp->second, "with --processes: gradients all-reduced in buckets of at most this many MiB")
        ->capture_default_str()
        ->check(number_in(0, 4096, true));
    cmd->callback([o, json, plan_file, dump_after, dp] {
        if (!dump_after->empty()) check_pass_name(*dump_after);
        const auto [processes, bucket_mib] = *dp;
        if (o->batch % processes != 0)
            throw Error("--batch " + std::to_string(o->batch) + " is the global batch of the job's " + std::to_string(processes) + " processes and must be divisible by it");
        zoo::NetConfig cfg;
        cfg.batch = o->batch / processes;
        cfg.image_size = o->image_size;
        cfg.seq_len = o->seq_len;
        zoo::Model m = model_of(*o, cfg);
        const OptimizerConfig opt = optimizer_of(*o);
        TrainGraph unplanned = build_train_graph(std::move(m.graph), m.loss, opt);
        const std::string print = fingerprint(unplanned);
        BackendSet backends;
        const Plan p = plan_file->empty() ? precision_plan(unplanned, parse_dtype(o->dtype), parse_precision_scope(o->scope), backends.get("cpu"))
                                          : read_plan_file(*plan_file);
        LowerOptions lo;
        lo.keep = {m.logits, m.loss};
        lo.dump_after = *dump_after;
        lo.allreduce = {processes, size_t(bucket_mib * 1048576.0)};
        lo.dump = &std::cout;
        const LoweredGraph lg = lower(std::move(unplanned), p, lo);
        if (!dump_after->empty()) return;
        const Graph& g = lg.train.graph;
        const GraphCost total = graph_cost(g);
        if (*json) {
            nlohmann::json nodes = nlohmann::json::array();
            for (size_t i = 0; i < g.num_nodes(); ++i) {
                const Node& n = g.node(NodeId(i));
                const NodeCost c = node_cost(g, NodeId(i));
                nlohmann::json in = nlohmann::json::array(), out = nlohmann::json::array();
                for (TensorId t : n.inputs) in.push_back({{"name", g.tensor(t).name}, {"desc", desc_str(g.tensor(t).desc)}});
                for (TensorId t : n.outputs) out.push_back({{"name", g.tensor(t).name}, {"desc", desc_str(g.tensor(t).desc)}});
                nodes.push_back({{"id", i}, {"name", n.name}, {"op", op_label(n)}, {"phase", phase_name(n.phase)},
                                 {"source", g.node(n.source).name}, {"device", n.device}, {"compute", dtype_name(n.compute)},
                                 {"plan_entry", lg.origin[i]}, {"inputs", in}, {"outputs", out},
                                 {"flops", c.flops}, {"bytes_read", c.bytes_read}, {"bytes_written", c.bytes_written},
                                 {"param_bytes", c.param_bytes}, {"activation_bytes", c.activation_bytes}});
            }
            std::cout << nlohmann::json{{"schema", "joule.inspect/1"},
                                        {"net", o->net},
                                        {"batch", o->batch},
                                        {"fingerprint", print},
                                        {"plan", p.name},
                                        {"casts", lg.casts},
                                        {"transfers", lg.transfers},
                                        {"fused_activations", lg.fused},
                                        {"fused_backwards", lg.fused_backward},
                                        {"folded_casts", lg.folded_casts},
                                        {"folded_transposes", lg.folded_transposes},
                                        {"folded_grad_sums", lg.folded_grad_sums},
                                        {"update_copies", lg.update_copies},
                                        {"reorders", lg.reorders},
                                        {"processes", processes},
                                        {"allreduce_buckets", lg.allreduce_buckets},
                                        {"parameters", g.parameter_count()},
                                        {"nodes", nodes},
                                        {"total", {{"flops", total.total.flops}, {"bytes_read", total.total.bytes_read}, {"bytes_written", total.total.bytes_written}}},
                                        {"forward", {{"flops", total.forward.flops}}}}
                             .dump(2)
                      << '\n';
            return;
        }
        Table t({"#", "phase", "node", "op", "device", "dtype", "inputs", "outputs", "MFLOP", "read", "written"});
        for (size_t i = 0; i < g.num_nodes(); ++i) {
            const Node& n = g.node(NodeId(i));
            const NodeCost c = node_cost(g, NodeId(i));
            t.add({std::to_string(i), phase_name(n.phase), n.name, op_label(n), n.device, dtype_name(n.compute), shapes(g, n.inputs),
                   shapes(g, n.outputs), fixed(c.flops / 1e6, 3), bytes_str(c.bytes_read), bytes_str(c.bytes_written)});
        }
        t.print(std::cout);
        std::cout << "plan " << p.name << ": " << lg.casts << " casts, " << lg.transfers << " transfers, " << lg.reorders << " reorders, " << lg.fused << " activations fused, " << lg.fused_backward << " backward nodes folded into neighbouring nodes, "
                  << lg.folded_casts << " casts folded into their producers, " << lg.update_copies << " parameters' casts folded into their updates, " << lg.folded_transposes
                  << " transposes folded into matmuls, " << lg.folded_grad_sums << " gradient sums folded into backward-data products";
        if (processes > 1) std::cout << "; one of " << processes << " processes (batch " << cfg.batch << " each), " << lg.allreduce_buckets << " gradient bucket(s) all-reduced";
        std::cout << "; graph fingerprint " << print << "\n";
        std::cout << g.num_nodes() << " nodes, " << g.parameter_count() << " parameters; per iteration: " << si(total.total.flops, "FLOP")
                  << " (forward " << si(total.forward.flops, "FLOP") << "), " << bytes_str(total.total.bytes_read) << " read, "
                  << bytes_str(total.total.bytes_written) << " written (each tensor counted once per access)\n";
    });
}

}  // namespace joule::cli
