// `joule plan`: placement on a system of data/hw. So far the single-device baselines, each simulated
// (plan/schedule.hpp): the iteration's time, energy (dynamic + idle of every device + transfers), average
// power, transfers and FPGA switches -- MODELLED; `--strategy single:<device> --out FILE` writes that plan.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "graph/error.hpp"
#include "plan/schedule.hpp"
#include "report/table.hpp"

namespace joule::cli {

namespace {
struct PlanFlags {
    NetOptions net;
    std::string system, strategy, out;
    bool json = false;
};
}  // namespace

void add_plan(CLI::App& app) {
    auto f = std::make_shared<PlanFlags>();
    f->net.net = "resnet18", f->net.batch = 32, f->net.optimizer = "sgd";
    auto* cmd = app.add_subcommand("plan", "place a net's training graph on a system of data/hw and simulate the iteration (modelled)");
    add_net_options(*cmd, f->net, false);
    cmd->add_option("--system", f->system, "a system of data/hw (name or alias, e.g. cpu+v100+s10; joule devices lists them)")->required();
    cmd->add_option("--strategy", f->strategy, "single:<device> (every node the device runs on it, the rest on the host); default: every baseline");
    cmd->add_option("--out", f->out, "write the --strategy's plan for joule train --plan");
    cmd->add_flag("--json", f->json, "machine-readable output");
    cmd->callback([f] {
        if (!f->out.empty() && f->strategy.empty()) throw Error("--out writes one strategy's plan", "add --strategy single:<device>");
        const SystemModel sys = load_system_model(f->system);
        std::vector<int> devices;
        if (f->strategy.empty()) {
            for (size_t d = 0; d < sys.devices.size(); ++d) devices.push_back(int(d));
        } else if (f->strategy.rfind("single:", 0) == 0) {
            devices.push_back(sys.index_of(f->strategy.substr(7)));
        } else {
            throw Error("--strategy '" + f->strategy + "': joule plans single-device baselines so far",
                        "single:<device> with a device of the system; energy, powercap, heft, cnnlab, exact and joint are not built yet");
        }
        const TrainGraph tg = train_graph_of(f->net);
        struct Row {
            Plan plan;
            LoweredGraph lg;
            Schedule s;
        };
        std::vector<Row> rows;
        for (int d : devices) {
            Plan p = single_device_plan(tg, sys, d);
            LoweredGraph lg = lower(TrainGraph(tg), p);
            Schedule s = simulate(lg, sys);
            rows.push_back({std::move(p), std::move(lg), std::move(s)});
        }
        if (!f->out.empty()) {
            Plan p = rows.front().plan;
            p.fingerprint = fingerprint(tg), p.model = f->net.net, p.batch = f->net.batch;
            std::ofstream file(f->out);
            if (!file || !(file << plan_to_yaml(p))) throw Error("--out " + f->out + ": cannot write the plan file");
        }
        if (f->json) {
            nlohmann::json out = nlohmann::json::array();
            for (const Row& r : rows)
                out.push_back({{"strategy", r.plan.name}, {"seconds", r.s.seconds}, {"joules", r.s.joules()}, {"dynamic_joules", r.s.dynamic_joules},
                               {"idle_joules", r.s.idle_joules}, {"transfer_joules", r.s.transfer_joules}, {"watts", r.s.watts()},
                               {"transfers", r.lg.transfers}, {"switches", r.s.switches}, {"switch_seconds", r.s.switch_seconds}, {"fits", r.s.fits},
                               {"why_not", r.s.why_not}, {"busy_seconds", r.s.busy_seconds}});
            std::cout << nlohmann::json{{"schema", "joule.plan/1"}, {"timing", "modelled"}, {"system", sys.system.name}, {"devices", sys.plan_devices},
                                        {"net", f->net.net}, {"batch", f->net.batch}, {"plans", out}}
                             .dump(2)
                      << '\n';
            return;
        }
        std::cout << "plan " << f->net.net << " batch " << f->net.batch << " on " << sys.system.name << " (";
        for (size_t d = 0; d < sys.plan_devices.size(); ++d) std::cout << (d ? ", " : "") << sys.plan_devices[d];
        std::cout << "); every figure is MODELLED: a simulated iteration (plan/schedule.hpp)\n\n";
        Table t({"strategy", "ms / iteration", "energy J", "dynamic", "idle", "transfers", "avg W", "transfer nodes", "FPGA switches", "fits"});
        for (const Row& r : rows)
            t.add({r.plan.name, fixed(r.s.seconds * 1e3, 2), fixed(r.s.joules(), 3), fixed(r.s.dynamic_joules, 3), fixed(r.s.idle_joules, 3),
                   fixed(r.s.transfer_joules, 4), fixed(r.s.watts(), 1), std::to_string(r.lg.transfers),
                   std::to_string(r.s.switches) + (r.s.switches ? " (" + fixed(r.s.switch_seconds * 1e3, 0) + " ms)" : ""), r.s.fits ? "yes" : "no: " + r.s.why_not});
        t.print(std::cout);
        if (!f->out.empty()) std::cout << "\nwrote " << rows.front().plan.name << " to " << f->out << " (joule train --plan " << f->out << ")\n";
    });
}

}  // namespace joule::cli
