// `joule plan`: placement on a system of data/hw (plan/placement.hpp). Every figure is MODELLED: each
// plan is lowered (transfers inserted) and its iteration simulated (plan/schedule.hpp) -- time, energy
// (dynamic + idle of every device + links), average power, transfers and FPGA switches.
//   no --strategy   every single-device baseline, cnnlab, heft, energy, energy then the optimal amp
//                   policy, and joint side by side
//   --strategy S    S's per-layer device table and its savings against each baseline; --out writes its
//                   plan for `joule train --plan`, --trace a Chrome trace of the simulated iteration;
//                   --amp P puts policy P's precision over S's placement (placement, then precision)
//   --pareto        the time-energy frontier over the strategies and energy's slacks
#include <cmath>
#include <fstream>
#include <iostream>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "graph/error.hpp"
#include "plan/placement.hpp"
#include "report/table.hpp"
#include "report/trace.hpp"

namespace joule::cli {

namespace {
struct PlanFlags {
    NetOptions net;
    std::string system, strategy, out, trace, amp;
    bool json = false, pareto = false;
};

struct Row {
    Placed placed;
    LoweredGraph lg;
    Schedule s;
};

// A strategy, and the precision policy put over its placement (none: f32, or joint's own choice).
struct Planned {
    Strategy strategy;
    std::optional<AmpPolicy> amp;
};

Row run(const TrainGraph& tg, const SystemModel& sys, const Planned& p) {
    Row r{place(tg, sys, p.strategy), {}, {}};
    if (p.amp) r.placed = with_precision(tg, sys, r.placed, *p.amp);
    r.lg = lower(TrainGraph(tg), r.placed.plan, {.layout = false, .fuse = false});  // what the planner's evaluation describes
    r.s = simulate(r.lg, sys);
    return r;
}

std::string percent(double x) { return (x >= 0 ? "+" : "") + fixed(100 * x, 1) + " %"; }

// What GPU power management alone does under a cap: per GPU of the system, the GPU-only plan with the
// GPU's own power limit at the cap (within its range) -- the other devices' idle power then puts the
// system over it -- and at the highest limit under which the system's counted power holds the cap
// (bisection: the power never rises as the limit falls), when one does.
struct Limited {
    std::string device;
    double limit_w = 0;
    Row row;
    double holding_limit_w = 0;  // 0: none holds the cap
    std::optional<Row> holding;
};
std::vector<Limited> gpu_power_limiting(const TrainGraph& tg, const SystemModel& sys, double cap) {
    std::vector<Limited> out;
    for (size_t d = 0; d < sys.devices.size(); ++d) {
        const hw::DeviceSpec& spec = sys.devices[d].spec();
        if (spec.kind != "gpu" || !spec.settable_power()) continue;
        SystemModel limited = sys;
        auto at = [&](double w) {
            limited.settings[d].power_limit_w = w;
            return run(tg, limited, {parse_strategy("single:" + sys.plan_devices[d]), std::nullopt});
        };
        Limited l{sys.plan_devices[d], std::clamp(cap, spec.power_limit_min_w, spec.power_limit_max_w), at(std::clamp(cap, spec.power_limit_min_w, spec.power_limit_max_w)), 0, {}};
        auto holds = [&](const Row& r) { return r.placed.outcome.capped_watts <= cap * (1 + 1e-9); };
        if (holds(l.row)) {
            l.holding_limit_w = l.limit_w, l.holding = l.row;
        } else if (Row low = at(spec.power_limit_min_w); holds(low)) {
            double lo = spec.power_limit_min_w, hi = l.limit_w;
            l.holding_limit_w = lo, l.holding = std::move(low);
            while (hi - lo > 0.5) {  // to half a watt
                const double mid = 0.5 * (lo + hi);
                Row r = at(mid);
                if (holds(r)) lo = mid, l.holding_limit_w = mid, l.holding = std::move(r);
                else hi = mid;
            }
        }
        out.push_back(std::move(l));
    }
    return out;
}

nlohmann::json to_json(const Row& r) {
    nlohmann::json low = nlohmann::json::object();  // per device: its nodes computing below f32
    for (const Node& n : r.lg.train.graph.nodes())
        if (n.kind != OpKind::Transfer && n.kind != OpKind::Cast && n.compute != DType::F32) low[n.device] = low.value(n.device, 0) + 1;
    return {{"strategy", r.placed.strategy},
            {"low_nodes", low},
            {"chosen", r.placed.chosen},
            {"meets", r.placed.meets},
            {"seconds", r.s.seconds},
            {"joules", r.s.joules()},
            {"dynamic_joules", r.s.dynamic_joules},
            {"idle_joules", r.s.idle_joules},
            {"transfer_joules", r.s.transfer_joules},
            {"watts", r.s.watts()},
            {"capped_watts", r.placed.outcome.capped_watts},
            {"transfers", r.lg.transfers},
            {"casts", r.lg.casts},
            {"batch_copies", r.s.batch_copies},
            {"switches", r.s.switches},
            {"switch_seconds", r.s.switch_seconds},
            {"fits", r.s.fits},
            {"why_not", r.s.why_not},
            {"busy_seconds", r.s.busy_seconds},
            {"evaluations", r.placed.evaluations}};
}

// Per layer: the devices of its forward, backward and update nodes and their simulated busy time.
void print_layers(const Row& r, const SystemModel& sys) {
    const Graph& g = r.lg.train.graph;
    struct Layer {
        std::string op;
        std::string dev[3];
        double ms = 0;
    };
    std::vector<std::string> order;
    std::map<std::string, Layer> layers;
    for (size_t i = 0; i < g.num_nodes(); ++i) {
        const Node& n = g.node(NodeId(i));
        if (n.kind == OpKind::Transfer || n.kind == OpKind::Cast) continue;
        const std::string& name = layer_of(g, NodeId(i));
        auto [it, fresh] = layers.try_emplace(name);
        if (fresh) order.push_back(name);
        Layer& l = it->second;
        if (n.phase == Phase::Forward || n.phase == Phase::Loss) l.op = op_name(n.kind);
        const int slot = n.phase == Phase::Backward ? 1 : n.phase == Phase::Update ? 2 : 0;
        const ScheduledNode& x = r.s.nodes[i];
        const std::string dev = sys.plan_devices[size_t(x.device)] + (n.compute == DType::F32 ? "" : std::string(" ") + dtype_name(n.compute));
        if (l.dev[slot].empty()) l.dev[slot] = dev;
        else if (l.dev[slot].find(dev) == std::string::npos) l.dev[slot] += "+" + dev;
        l.ms += (x.end - x.start) * 1e3;
    }
    Table t({"layer", "op", "forward", "backward", "update", "busy ms"});
    for (const std::string& name : order) {
        const Layer& l = layers[name];
        t.add({name, l.op, l.dev[0], l.dev[1].empty() ? "-" : l.dev[1], l.dev[2].empty() ? "-" : l.dev[2], fixed(l.ms, 3)});
    }
    t.print(std::cout);
}

void write_trace(const std::string& path, const Row& r, const SystemModel& sys, const PlanFlags& f) {
    const Graph& g = r.lg.train.graph;
    Trace t;
    t.process = f.net.net + " batch " + std::to_string(f.net.batch) + " on " + sys.system.name + ", " + r.placed.strategy + " (modelled)";
    t.tracks = sys.plan_devices;
    t.tracks.push_back("links (transfers)");
    t.metadata = {{"timing", "modelled"}, {"strategy", r.placed.strategy}, {"system", sys.system.name}, {"seconds", exact(r.s.seconds)}, {"joules", exact(r.s.joules())}};
    for (size_t i = 0; i < g.num_nodes(); ++i) {
        const Node& n = g.node(NodeId(i));
        const ScheduledNode& x = r.s.nodes[i];
        const bool transfer = n.kind == OpKind::Transfer;
        t.events.push_back({n.name, transfer ? "transfer" : phase_name(n.phase), transfer ? int(sys.plan_devices.size()) : x.device, x.start, x.end - x.start,
                            {{"op", op_name(n.kind)}, {"joules", exact(x.joules)}, {"device", sys.plan_devices[size_t(x.device)]}}});
    }
    std::ofstream file(path);
    if (!file) throw Error("--trace " + path + ": cannot write the trace file");
    write_chrome_trace(file, t);
}

}  // namespace

void add_plan(CLI::App& app) {
    auto f = std::make_shared<PlanFlags>();
    f->net.net = "resnet18", f->net.batch = 32, f->net.optimizer = "sgd";
    auto* cmd = app.add_subcommand("plan", "place a net's training graph on a system of data/hw: which device runs each node (modelled)");
    add_net_options(*cmd, f->net, false);
    cmd->add_option("--system", f->system, "a system of data/hw (name or alias, e.g. cpu+v100+s10; joule devices lists them)")->required();
    cmd->add_option("--strategy", f->strategy,
                    "single:<device>, cnnlab, heft, energy[:<slack>] (least energy, time within (1 + slack) x the fastest baseline), powercap:<W>, "
                    "exact[:<slack>|:time|:powercap:<W>], joint[:<slack>] (energy's, choosing each node's precision too); default: the baselines, cnnlab, heft, "
                    "energy, energy with --amp optimal and joint side by side");
    cmd->add_option("--amp", f->amp, "placement, then precision: this policy (off, greedy, autocast, campo, optimal) over the --strategy's placement")
        ->check(CLI::IsMember({"off", "greedy", "autocast", "campo", "optimal"}));
    cmd->add_option("--out", f->out, "write the --strategy's plan for joule train --plan");
    cmd->add_option("--trace", f->trace, "write the --strategy's simulated iteration as a Chrome trace (Perfetto, chrome://tracing)");
    cmd->add_flag("--pareto", f->pareto, "the time-energy frontier of the strategies and energy at slacks 0 to 4");
    cmd->add_flag("--json", f->json, "machine-readable output");
    cmd->callback([f] {
        if ((!f->out.empty() || !f->trace.empty()) && f->strategy.empty()) throw Error("--out and --trace take one strategy's plan", "add --strategy S");
        if (f->pareto && !f->strategy.empty()) throw Error("--pareto compares the strategies itself", "drop --strategy");
        if (!f->amp.empty() && f->strategy.empty()) throw Error("--amp puts a precision policy over one strategy's placement", "add --strategy S");
        const SystemModel sys = load_system_model(f->system);
        std::vector<Planned> strategies;
        std::vector<Planned> baselines;
        for (const std::string& d : sys.plan_devices) baselines.push_back({parse_strategy("single:" + d), std::nullopt});
        if (!f->strategy.empty()) {
            strategies.push_back({parse_strategy(f->strategy), f->amp.empty() ? std::nullopt : std::optional(parse_amp_policy(f->amp))});
            const Strategy& s = strategies.front().strategy;
            if (s.kind == Strategy::Kind::Single) sys.index_of(s.device);
            if (s.kind == Strategy::Kind::Joint && strategies.front().amp) throw Error("--strategy joint chooses each node's precision itself", "drop --amp, or name another strategy");
            // a plan in low precision is also set against each device under the same policy (joint: optimal)
            if (const std::optional<AmpPolicy> amp = s.kind == Strategy::Kind::Joint ? AmpPolicy::Optimal : strategies.front().amp; amp && *amp != AmpPolicy::Off)
                for (const std::string& d : sys.plan_devices) baselines.push_back({parse_strategy("single:" + d), amp});
        } else {
            strategies = baselines;
            for (const char* s : {"cnnlab", "heft", "energy"}) strategies.push_back({parse_strategy(s), std::nullopt});
            strategies.push_back({parse_strategy("energy"), AmpPolicy::Optimal});
            strategies.push_back({parse_strategy("joint"), std::nullopt});
            if (f->pareto)
                for (const char* s : {"energy:0.05", "energy:0.1", "energy:0.25", "energy:0.5", "energy:1", "energy:2", "energy:4"})
                    strategies.push_back({parse_strategy(s), std::nullopt});
        }
        const TrainGraph tg = train_graph_of(f->net);
        std::vector<Row> rows, base;
        for (const Planned& s : strategies) rows.push_back(run(tg, sys, s));
        for (const Planned& s : baselines) base.push_back(run(tg, sys, s));
        const Row& mine = rows.front();
        if (!f->out.empty()) {
            Plan p = mine.placed.plan;
            p.fingerprint = fingerprint(tg), p.model = f->net.net, p.batch = f->net.batch;
            std::ofstream file(f->out);
            if (!file || !(file << plan_to_yaml(p))) throw Error("--out " + f->out + ": cannot write the plan file");
        }
        if (!f->trace.empty()) write_trace(f->trace, mine, sys, *f);
        // the Pareto frontier: no other row both faster and more frugal
        std::vector<bool> frontier(rows.size(), true);
        for (size_t a = 0; a < rows.size(); ++a)
            for (size_t b = 0; b < rows.size(); ++b) {
                const Schedule &x = rows[a].s, &y = rows[b].s;
                if (!y.fits || !x.fits) frontier[a] = frontier[a] && x.fits;
                else if (y.seconds <= x.seconds && y.joules() <= x.joules() && (y.seconds < x.seconds || y.joules() < x.joules())) frontier[a] = false;
            }
        if (f->json) {
            nlohmann::json out = nlohmann::json::array();
            for (size_t i = 0; i < rows.size(); ++i) {
                nlohmann::json j = to_json(rows[i]);
                if (f->pareto) j["pareto"] = bool(frontier[i]);
                out.push_back(std::move(j));
            }
            nlohmann::json doc{{"schema", "joule.plan/1"}, {"timing", "modelled"}, {"system", sys.system.name}, {"devices", sys.plan_devices},
                               {"net", f->net.net}, {"batch", f->net.batch}, {"plans", out}};
            if (!f->strategy.empty()) {
                nlohmann::json b = nlohmann::json::array();
                for (const Row& r : base) b.push_back(to_json(r));
                doc["baselines"] = b;
                if (strategies.front().strategy.objective == Strategy::Objective::Powercap) {
                    nlohmann::json g = nlohmann::json::array();
                    for (const Limited& l : gpu_power_limiting(tg, sys, strategies.front().strategy.watts)) {
                        nlohmann::json j = to_json(l.row);
                        j["device"] = l.device, j["limit_w"] = l.limit_w;
                        if (l.holding) {
                            j["holding"] = to_json(*l.holding);
                            j["holding"]["limit_w"] = l.holding_limit_w;
                        }
                        g.push_back(std::move(j));
                    }
                    doc["gpu_power_limiting"] = g;
                }
            }
            std::cout << doc.dump(2) << '\n';
            return;
        }
        std::cout << "plan " << f->net.net << " batch " << f->net.batch << " on " << sys.system.name << " (";
        for (size_t d = 0; d < sys.plan_devices.size(); ++d) std::cout << (d ? ", " : "") << sys.plan_devices[d];
        std::cout << "); every figure is MODELLED: a simulated iteration (plan/schedule.hpp)\n\n";
        if (!f->strategy.empty()) {
            print_layers(mine, sys);
            std::cout << "\n";
        }
        Table t({"strategy", "chose", "ms / iteration", "energy J", "idle J", "avg W", "capped W", "transfers", "casts", "FPGA switches", "fits"});
        auto add = [&](const Row& r, const std::string& mark) {
            t.add({r.placed.strategy + mark, r.placed.chosen, fixed(r.s.seconds * 1e3, 2), fixed(r.s.joules(), 3), fixed(r.s.idle_joules, 3), fixed(r.s.watts(), 1),
                   fixed(r.placed.outcome.capped_watts, 1), std::to_string(r.lg.transfers), std::to_string(r.lg.casts),
                   std::to_string(r.s.switches) + (r.s.switches ? " (" + fixed(r.s.switch_seconds * 1e3, 0) + " ms)" : ""),
                   r.s.fits ? (r.placed.meets ? "yes" : "yes, misses its constraint") : "no: " + r.s.why_not});
        };
        for (size_t i = 0; i < rows.size(); ++i)
            if (!f->pareto || frontier[i]) add(rows[i], "");
        if (f->pareto) std::cout << "time-energy frontier (no other plan is both faster and takes less energy):\n";
        t.print(std::cout);
        if (!f->strategy.empty()) {
            std::cout << "\nagainst each baseline (time: + is slower; energy: - is saved):\n";
            Table v({"baseline", "ms / iteration", "energy J", "time", "energy"});
            for (const Row& b : base)
                v.add({b.placed.strategy, fixed(b.s.seconds * 1e3, 2), fixed(b.s.joules(), 3), b.s.fits ? percent(mine.s.seconds / b.s.seconds - 1) : "does not fit",
                       b.s.fits ? percent(mine.s.joules() / b.s.joules() - 1) : "-"});
            v.print(std::cout);
            const Strategy& st = strategies.front().strategy;
            if (st.objective == Strategy::Objective::Energy && st.kind != Strategy::Kind::Single && st.kind != Strategy::Kind::Cnnlab)
                std::cout << "time bound " << fixed(mine.placed.bound_seconds * 1e3, 2) << " ms (the fastest baseline x " << fixed(1 + st.slack, 2) << ")\n";
            if (st.objective == Strategy::Objective::Powercap) {
                std::cout << "cap " << fixed(st.watts, 0) << " W over the accelerators (and the host when it runs nodes); device settings:";
                for (size_t d = 0; d < sys.plan_devices.size(); ++d)
                    if (mine.placed.settings[d].power_limit_w > 0) std::cout << " " << sys.plan_devices[d] << " limit " << fixed(mine.placed.settings[d].power_limit_w, 0) << " W";
                std::cout << "\n";
                for (const Limited& l : gpu_power_limiting(tg, sys, st.watts)) {
                    const Row& g = l.row;
                    std::cout << "GPU power limiting: " << g.placed.strategy << " at a " << fixed(l.limit_w, 0) << " W limit takes " << fixed(g.s.seconds * 1e3, 2)
                              << " ms at " << fixed(g.placed.outcome.capped_watts, 1) << " W capped"
                              << (g.placed.outcome.capped_watts > st.watts * (1 + 1e-9) ? " (over the cap)" : "") << "; " << mine.placed.strategy << " is "
                              << fixed(g.s.seconds / mine.s.seconds, 2) << "x its speed\n";
                    if (l.holding && l.holding_limit_w != l.limit_w)
                        std::cout << "  the limit that holds the cap: " << fixed(l.holding_limit_w, 1) << " W, " << fixed(l.holding->s.seconds * 1e3, 2) << " ms at "
                                  << fixed(l.holding->placed.outcome.capped_watts, 1) << " W; " << mine.placed.strategy << " is "
                                  << fixed(l.holding->s.seconds / mine.s.seconds, 2) << "x its speed\n";
                    else if (!l.holding)
                        std::cout << "  no limit in the GPU's range holds the cap: the other devices' idle power alone is over it\n";
                }
            }
        }
        if (!f->out.empty()) std::cout << "\nwrote " << mine.placed.strategy << " to " << f->out << " (joule train --plan " << f->out << ")\n";
        if (!f->trace.empty()) std::cout << "wrote the simulated iteration to " << f->trace << " (open it in https://ui.perfetto.dev or chrome://tracing)\n";
    });
}

}  // namespace joule::cli
