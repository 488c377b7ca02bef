// `joule nets`: the zoo with parameter counts and forward multiply-adds, computed from each net's graph
// and shown beside the published figures.
#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "backend/registry.hpp"
#include "cli/commands.hpp"
#include "graph/autodiff.hpp"
#include "graph/cost.hpp"
#include "graph/error.hpp"
#include "import/onnx.hpp"
#include "report/table.hpp"
#include "zoo/zoo.hpp"

namespace joule::cli {

zoo::Model model_of(const NetOptions& o, const zoo::NetConfig& cfg) { return load_model(o.net, o.model, cfg, o.labels); }

TrainGraph train_graph_of(const NetOptions& o) {
    zoo::NetConfig nc;
    nc.batch = o.batch, nc.image_size = o.image_size, nc.seq_len = o.seq_len;
    zoo::Model m = model_of(o, nc);
    return build_train_graph(std::move(m.graph), m.loss, optimizer_of(o));
}

OptimizerConfig optimizer_of(const NetOptions& o, float lr, float momentum, float weight_decay) {
    if (o.optimizer == "sgd") return OptimizerConfig::sgd(lr > 0 ? lr : 0.05f, momentum >= 0 ? momentum : 0.9f, std::max(weight_decay, 0.0f));
    const bool adamw = o.optimizer == "adamw";
    return OptimizerConfig::adam(lr > 0 ? lr : 2e-3f, weight_decay >= 0 ? weight_decay : adamw ? 0.01f : 0.0f, adamw);
}

predict::DeviceModel load_whole_net_device(const std::string& name, const std::string& flag) {
    predict::DeviceModel d = predict::load_device_model(name);
    if (d.spec().kind == "fpga")
        throw Error(flag + " " + name + ": " + d.spec().name + " is an FPGA, which runs part of a net (no kernel for the loss, softmax, embeddings, ...)",
                    "joule fpga-tune --device " + name + " --net NET models the nodes it runs; a plan (fpga_emu:" + name + ") puts the rest on the host");
    return d;
}

RunsInDtype modelled_runs(const predict::DeviceModel& d) {
    return [&d](const Graph& g, NodeId n, DType t) { return predict::runs_in(d, g, n, t); };
}

LoweredGraph lower_net(const NetOptions& o, const predict::DeviceModel* modelled) {
    TrainGraph unplanned = train_graph_of(o);
    const DType dtype = parse_dtype(o.dtype);
    const PrecisionScope scope = parse_precision_scope(o.scope);
    if (modelled) return lower(std::move(unplanned), precision_plan(unplanned, dtype, scope, "cpu", modelled_runs(*modelled)));
    BackendSet backends;
    return lower(std::move(unplanned), precision_plan(unplanned, dtype, scope, backends.get("cpu")));
}

void check_fits(const LoweredGraph& lg, const NetOptions& o, double memory_bytes, const std::string& device) {
    if (memory_bytes > 0 && double(lg.memory.bytes_total) > memory_bytes)
        throw Error(o.net + " batch " + std::to_string(o.batch) + " needs " + bytes_str(double(lg.memory.bytes_total)) +
                        " of tensor memory (its memory plan), but " + device + " has " + bytes_str(memory_bytes),
                    "a smaller --batch fits");
}

void add_nets(CLI::App& app) {
    auto* cmd = app.add_subcommand("nets", "list the built-in networks with parameters and forward FLOPs");
    auto json = std::make_shared<bool>(false);
    cmd->add_flag("--json", *json, "machine-readable output");
    cmd->callback([json] {
        nlohmann::json out = nlohmann::json::array();
        Table t({"net", "input", "params", "published", "fwd GMACs/sample", "published", "description"});
        for (const zoo::NetInfo& n : zoo::nets()) {
            zoo::NetConfig cfg;
            cfg.batch = 1;
            const zoo::Model m = zoo::build(n.name, cfg);
            const double gmacs = graph_cost(m.graph).forward.macs / 1e9;
            const int64_t params = m.graph.parameter_count();
            const std::string input = n.sequence ? "128 tokens" : std::to_string(n.default_channels) + "x" + std::to_string(n.default_image) + "x" +
                                                                      std::to_string(n.default_image);
            t.add({n.name, input, si(double(params), "", 2), si(n.published_params, "", 2), fixed(gmacs, 4), fixed(n.published_gmacs, 4),
                   n.description});
            out.push_back({{"name", n.name}, {"description", n.description}, {"input", input}, {"parameters", params},
                           {"published_parameters", n.published_params}, {"forward_gmacs_per_sample", gmacs},
                           {"published_gmacs", n.published_gmacs}, {"source", n.source}});
        }
        if (*json) {
            std::cout << nlohmann::json{{"schema", "joule.nets/1"}, {"nets", out}}.dump(2) << '\n';
        } else {
            t.print(std::cout);
            std::cout << "(params include each net's classifier head; BERT's published count excludes its 2-class head)\n";
        }
    });
}

}  // namespace joule::cli
