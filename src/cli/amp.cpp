// `joule amp`: the mixed-precision policies (plan/amp.hpp) on one device -- this machine's CPU or any
// device of data/hw -- side by side: per policy the nodes it puts in low precision, the casts that
// implies (count and bytes), the predicted step time (the cost interface over the lowered graph) and,
// on this machine's CPU with --measure, the measured step time and the prediction's error.
#include <cstdio>
#include <iostream>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/registry.hpp"
#include "cli/commands.hpp"
#include "graph/error.hpp"
#include "plan/amp.hpp"
#include "report/table.hpp"
#include "runtime/trainer.hpp"

namespace joule::cli {

namespace {

struct AmpFlags {
    NetOptions net;
    std::string device, policy, out;
    int64_t measure = 0;
    int threads = 0;
    bool json = false;
};

struct PolicyResult {
    AmpPolicy policy;
    Plan plan;
    size_t low = 0, casts = 0;
    double cast_bytes = 0, predicted_s = 0, predicted_cast_s = 0, measured_s = -1, measured_cast_s = -1;
};

}  // namespace

void add_amp(CLI::App& app) {
    auto f = std::make_shared<AmpFlags>();
    f->net.net = "resnet18";
    f->net.batch = 32;
    f->net.optimizer = "sgd";
    auto* cmd = app.add_subcommand("amp", "compare mixed-precision policies (off, TF-AMP greedy, autocast, cast-aware campo and optimal) on a device: casts, predicted and measured step time");
    add_net_options(*cmd, f->net, false, true);
    cmd->add_option("--device", f->device, "a data/hw device (default: this machine's CPU spec); a CPU device's plans follow the cpu backend and can be --measured here");
    cmd->add_option("--policy", f->policy, "only this policy: off, greedy, autocast, campo or optimal")->check(CLI::IsMember({"off", "greedy", "autocast", "campo", "optimal"}));
    cmd->add_option("--out", f->out, "write the --policy's plan to this file (for joule train --plan)");
    cmd->add_option("--measure", f->measure, "train each policy's plan this many steps on this CPU and report the measured step time")->check(number_in(0, 100000));
    cmd->add_option("--threads", f->threads, "threads for --measure (0: all cores)")->check(number_in(0, 4096));
    cmd->add_flag("--json", f->json, "machine-readable output");
    cmd->callback([f] {
        if (!f->out.empty() && f->policy.empty()) throw Error("--out writes one policy's plan", "add --policy off|greedy|autocast|campo|optimal");
        const bool here = f->device.empty();
        const predict::DeviceModel d = load_whole_net_device(here ? hw::find_cpu_spec().path : f->device);
        const hw::DeviceSpec& spec = d.spec();
        const predict::EfficiencyModel* eff = d.efficiency();
        const bool cpu = spec.kind == "cpu";  // then the plans run on this machine's cpu backend too
        if (f->measure > 0 && !cpu) throw Error("--measure trains on this machine's CPU; " + spec.name + " is not a CPU", "drop --measure for a predicted table");
        const DType low = predict::low_precision(d);
        if (low == DType::F32) throw Error("device '" + spec.name + "' has no low precision (no peak_bf16_gflops or peak_f16_gflops in " + spec.path + ")");
        const TrainGraph tg = train_graph_of(f->net);
        const Graph& g = tg.graph;
        BackendSet backends({.threads = f->threads});
        AmpContext c{low, {}};
        if (cpu) c.runs = [&](const Graph& gg, NodeId n, DType t) { return !f32_only_op(gg.node(n).kind) && supports_in(backends.get("cpu"), gg, n, t); };
        else c.runs = modelled_runs(d);
        const AmpCosts k{[&](NodeId n, DType t) { return predict::cost(g, n, d, t).seconds; },
                         [&](double e, DType from, DType to) { return predict::cast_cost(e, from, to, d).seconds; }, amp_mixed_cost(tg, low, d)};
        std::vector<AmpPolicy> policies = {AmpPolicy::Off, AmpPolicy::Greedy, AmpPolicy::Autocast, AmpPolicy::Campo, AmpPolicy::Optimal};
        if (!f->policy.empty()) policies = {parse_amp_policy(f->policy)};
        std::vector<PolicyResult> results;
        for (AmpPolicy p : policies) {
            const std::vector<bool> x = amp_assignment(p, g, c, k);
            PolicyResult r{p, amp_plan(tg, x, c, amp_policy_name(p))};
            r.plan.fingerprint = fingerprint(tg);
            r.plan.model = f->net.net, r.plan.batch = f->net.batch;
            for (bool b : x) r.low += b;
            const LoweredGraph lg = lower(TrainGraph(tg), r.plan, {.layout = false, .fuse = false});  // what amp_cost describes
            r.casts = lg.casts;
            if (r.low > 0) r.predicted_s += k.mixed;  // f16's loss scaling
            const predict::GraphCost cost = predict::graph_cost(lg.train.graph, d);
            r.predicted_s += cost.total.seconds, r.cast_bytes = cost.cast_bytes, r.predicted_cast_s = cost.cast_seconds;
            if (f->measure > 0) {
                TrainOptions o;
                o.net = f->net.net, o.dataset = "synthetic", o.batch = f->net.batch, o.image_size = f->net.image_size, o.seq_len = f->net.seq_len;
                o.steps = f->measure + 1, o.warmup = 1, o.optimizer = optimizer_of(f->net), o.threads = f->threads, o.plan = r.plan, o.eval_samples = 0;
                const TrainResult m = train(o);
                r.measured_s = m.step_seconds, r.measured_cast_s = m.cast_seconds;
            }
            results.push_back(r);
        }
        if (!f->out.empty()) {
            std::ofstream file(f->out);
            if (!file || !(file << plan_to_yaml(results.front().plan))) throw Error("--out " + f->out + ": cannot write the plan file");
        }
        const double off_s = results.front().policy == AmpPolicy::Off ? results.front().predicted_s : 0;
        if (f->json) {
            nlohmann::json out = nlohmann::json::array();
            for (const PolicyResult& r : results) {
                nlohmann::json j = {{"policy", amp_policy_name(r.policy)}, {"low_nodes", r.low}, {"casts", r.casts}, {"cast_bytes", r.cast_bytes},
                                    {"predicted_seconds", r.predicted_s}, {"predicted_cast_seconds", r.predicted_cast_s}};
                if (r.measured_s >= 0) j["measured_seconds"] = r.measured_s, j["measured_cast_seconds"] = r.measured_cast_s;
                out.push_back(j);
            }
            std::cout << nlohmann::json{{"schema", "joule.amp/1"}, {"net", f->net.net}, {"batch", f->net.batch}, {"device", spec.name}, {"low", dtype_name(low)},
                                        {"loss_scaling_seconds", k.mixed}, {"nodes", g.num_nodes()}, {"time_model", eff ? "efficiency curves: " + eff->path : "roofline"}, {"policies", out}}
                             .dump(2)
                      << '\n';
            return;
        }
        std::cout << "amp " << f->net.net << " batch " << f->net.batch << " (" << f->net.optimizer << ", " << g.num_nodes() << " nodes) on " << spec.name << ", low precision "
                  << dtype_name(low) << "; predicted times are MODELLED (" << (eff ? "efficiency curves " + eff->path : "roofline: this device has no fitted curves") << ")"
                  << (f->measure > 0 ? "; measured: " + std::to_string(f->measure) + " steps each on this CPU" : "") << "\n";
        if (k.mixed > 0) std::cout << "f16 needs dynamic loss scaling: unscaling and checking the weight gradients adds " << fixed(k.mixed * 1e3, 3) << " ms to every mixed plan\n";
        std::cout << '\n';
        std::vector<std::string> head = {"policy", "low nodes", "casts", "cast traffic", "predicted ms", "of which casts", "vs off"};
        if (f->measure > 0) head.insert(head.end(), {"measured ms", "of which casts", "model error"});
        Table t(head);
        for (const PolicyResult& r : results) {
            std::vector<std::string> row = {amp_policy_name(r.policy), std::to_string(r.low) + " / " + std::to_string(g.num_nodes()), std::to_string(r.casts),
                                            bytes_str(r.cast_bytes), fixed(r.predicted_s * 1e3, 3), fixed(r.predicted_cast_s * 1e3, 3),
                                            off_s > 0 ? fixed(off_s / r.predicted_s, 2) + "x" : "-"};
            if (f->measure > 0)
                row.insert(row.end(), {fixed(r.measured_s * 1e3, 3), fixed(r.measured_cast_s * 1e3, 3), fixed(100 * (r.predicted_s - r.measured_s) / r.measured_s, 0) + " %"});
            t.add(row);
        }
        t.print(std::cout);
        if (!f->out.empty()) std::cout << "\nwrote the " << f->policy << " plan to " << f->out << " (joule train --plan " << f->out << ")\n";
    });
}

}  // namespace joule::cli
