// `joule predict`: a training iteration of a zoo net on any device of data/hw -- owned or not -- from the
// cost interface (predict/device_model.hpp): per layer and per iteration time, power and energy, under
// a power limit or a clock setting. Every figure is modelled. One device runs every node, one after
// another (placements across devices are the planner's).
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "graph/error.hpp"
#include "plan/plan.hpp"
#include "predict/data_parallel.hpp"
#include "predict/device_model.hpp"
#include "profile/sweep.hpp"
#include "report/table.hpp"

namespace joule::cli {

namespace {

struct PredictFlags {
    NetOptions net;
    std::string device;
    double power_limit = 0, clock = 0;
    bool json = false;
    // data-parallel on a cluster
    std::string nodes, intra, inter;
    int per_node = 1, nics = 1;
    double bucket_mib = 25;
    int accumulate = 1;
    int threads = 0;  // a CPU: the cores the work gets (0: all)
};

struct LayerTotals {
    std::string name;
    size_t nodes = 0, throttled = 0;
    double flops = 0, bytes = 0, seconds = 0, joules = 0, min_clock = 0;
};

}  // namespace

void add_predict(CLI::App& app) {
    auto f = std::make_shared<PredictFlags>();
    f->net.net = "resnet50";
    f->net.batch = 32;
    f->net.optimizer = "sgd";
    auto* cmd = app.add_subcommand("predict", "model a training iteration's time, power and energy on any device of data/hw (joule devices), under a power limit or clock");
    add_net_options(*cmd, f->net, false, true);
    cmd->add_option("--device", f->device, "a device of data/hw: name, alias (v100, a100, h100, ...) or a spec file")->required();
    auto* limit = cmd->add_option("--power-limit", f->power_limit, "board power limit in W for the whole iteration (default: the device's)")
                      ->check(positive_number());
    cmd->add_option("--clock", f->clock, "core clock in MHz for the whole iteration (default: the device's)")->check(positive_number())->excludes(limit);
    cmd->add_flag("--json", f->json, "machine-readable output (with every layer)");
    auto* nodes = cmd->add_option("--nodes", f->nodes, "data-parallel on this many nodes (a list: 1,2,4,...): per count the iteration, the all-reduce's exposed time, throughput, scaling efficiency and cluster energy");
    cmd->add_option("--per-node", f->per_node, "devices per node (ranks = nodes x per-node)")->capture_default_str()->check(number_in(1, 1024))->needs(nodes);
    cmd->add_option("--intra-link", f->intra, "the link between a node's devices (a data/hw link: nvlink2, nvlink3, pcie3, ...)")->needs(nodes);
    cmd->add_option("--inter-link", f->inter, "the network between nodes (a data/hw link: ib-hdr, ib-ndr, eth-100g, ...)")->needs(nodes);
    cmd->add_option("--nics", f->nics, "network adapters per node (one ring across nodes each)")->capture_default_str()->check(number_in(1, 64))->needs(nodes);
    cmd->add_option("--bucket-mib", f->bucket_mib, "gradient bucket per all-reduce in MiB (PyTorch DDP's default)")->capture_default_str()->check(positive_number())->needs(nodes);
    cmd->add_option("--accumulate", f->accumulate, "micro-batches of --batch per iteration, all-reduced once (during the last one's backward)")
        ->capture_default_str()
        ->check(number_in(1, 1 << 20))
        ->needs(nodes);
    cmd->add_option("--threads", f->threads, "a CPU device: the work runs on this many of its cores (0: all; a data-parallel process's share)")->check(number_in(0, 4096));
    cmd->callback([f] {
        const predict::DeviceModel d = predict::on_threads(load_whole_net_device(f->device), f->threads);
        if (f->threads > 0 && d.spec().kind != "cpu") throw Error("--threads applies to a CPU device; " + d.spec().name + " is a " + d.spec().kind);
        if (f->threads > d.spec().cores && d.spec().cores > 0)
            throw Error("--threads " + std::to_string(f->threads) + ": " + d.spec().name + " has " + std::to_string(d.spec().cores) + " cores");
        const hw::DeviceSpec& spec = d.spec();
        const DType dtype = parse_dtype(f->net.dtype);
        if (!d.has(dtype))
            throw Error("device '" + spec.name + "' has no " + f->net.dtype + " compute path (" + spec.path + ")",
                        std::string("choose a dtype it has:") + (d.has(DType::BF16) ? " bf16" : "") + (d.has(DType::F16) ? " f16" : "") + " f32");
        const predict::Setting setting{.power_limit_w = f->power_limit, .clock_mhz = f->clock};
        const double clock = d.clock_mhz(setting), limit = d.power_limit_w(setting);  // checks the setting
        const LoweredGraph lg = lower_net(f->net, &d);
        const Graph& g = lg.train.graph;
        check_fits(lg, f->net, spec.mem_gib * 1073741824.0, spec.name);
        std::vector<LayerTotals> layers;
        std::map<std::string, size_t> index;
        LayerTotals total;
        total.name = "iteration";
        total.min_clock = clock;
        for (size_t i = 0; i < g.num_nodes(); ++i) {
            const NodeId n = NodeId(i);
            const predict::Cost c = predict::cost(g, n, d, g.node(n).compute, setting);
            const std::string& layer = layer_of(g, n);
            auto [it, fresh] = index.try_emplace(layer, layers.size());
            if (fresh) layers.push_back({layer, 0, 0, 0, 0, 0, 0, clock});
            for (LayerTotals* t : {&layers[it->second], &total}) {
                ++t->nodes;
                t->throttled += c.throttled;
                t->flops += c.flops, t->bytes += c.bytes, t->seconds += c.seconds, t->joules += c.joules;
                if (c.clock_mhz > 0) t->min_clock = t->min_clock > 0 ? std::min(t->min_clock, c.clock_mhz) : c.clock_mhz;
            }
        }
        const double idle_j = d.idle_w() * total.seconds, energy = total.joules + idle_j;
        const double per_s = double(f->net.batch) / total.seconds;
        const std::string setting_text = f->power_limit > 0 ? "power limit " + fixed(limit, 0) + " W"
                                         : f->clock > 0     ? "clock " + fixed(clock, 0) + " MHz"
                                                            : "default setting" + (limit > 0 ? " (power limit " + fixed(limit, 0) + " W" + (clock > 0 ? ", clock " + fixed(clock, 0) + " MHz" : "") + ")" : std::string());
        auto layer_json = [&](const LayerTotals& t) {
            return nlohmann::json{{"name", t.name}, {"nodes", t.nodes}, {"flops", t.flops}, {"bytes", t.bytes}, {"seconds", t.seconds},
                                  {"dynamic_joules", t.joules}, {"idle_joules", d.idle_w() * t.seconds},
                                  {"average_watts", t.seconds > 0 ? d.idle_w() + t.joules / t.seconds : 0}, {"lowest_clock_mhz", t.min_clock},
                                  {"throttled_nodes", t.throttled}};
        };
        // data-parallel: the same step on every rank, the gradients all-reduced
        nlohmann::json dp;
        Table dp_table({"nodes", "devices", "iteration ms", "all-reduce ms", "exposed ms", "samples/s", "efficiency", "cluster kW", "J/sample"});
        if (!f->nodes.empty()) {
            const hw::Catalogue cat = hw::load_catalogue();
            predict::Cluster c;
            c.per_node = f->per_node, c.nics_per_node = f->nics, c.bucket_bytes = f->bucket_mib * 1024 * 1024, c.accumulate = f->accumulate;
            if (!f->intra.empty()) c.intra = &cat.link(f->intra);
            if (!f->inter.empty()) c.inter = &cat.link(f->inter);
            dp = {{"per_node", c.per_node}, {"intra_link", c.intra ? c.intra->name : ""}, {"inter_link", c.inter ? c.inter->name : ""},
                  {"nics_per_node", c.nics_per_node}, {"bucket_bytes", c.bucket_bytes}, {"accumulate", c.accumulate}, {"kind", "modelled"}};
            for (int64_t n : profile::parse_int_list(f->nodes, "--nodes")) {
                if (n > 100000) throw Error("--nodes " + std::to_string(n) + ": at most 100000 nodes");
                c.nodes = int(n);
                const predict::DataParallel p = predict::predict_data_parallel(lg.train, f->net.batch, d, c, setting);
                const double joules_per_sample = p.joules / (double(p.ranks) * double(c.accumulate) * double(f->net.batch));
                dp["gradient_bytes"] = p.gradient_bytes;
                dp["rows"].push_back({{"nodes", n}, {"ranks", p.ranks}, {"iteration_seconds", p.iteration_s}, {"allreduce_seconds", p.allreduce_s},
                                      {"exposed_seconds", p.exposed_s}, {"buckets", p.buckets}, {"samples_per_second", p.samples_per_s},
                                      {"efficiency", p.efficiency}, {"joules", p.joules}, {"link_joules", p.link_joules},
                                      {"joules_per_sample", joules_per_sample}});
                dp_table.add({std::to_string(n), std::to_string(p.ranks), fixed(p.iteration_s * 1e3, 2), fixed(p.allreduce_s * 1e3, 2), fixed(p.exposed_s * 1e3, 2),
                              fixed(p.samples_per_s, 0), fixed(100 * p.efficiency, 1) + " %", fixed(p.joules / p.iteration_s / 1e3, 2),
                              fixed(joules_per_sample, 3)});
            }
        }
        if (f->json) {
            nlohmann::json ls = nlohmann::json::array();
            for (const LayerTotals& t : layers) ls.push_back(layer_json(t));
            nlohmann::json it = layer_json(total);
            it["samples_per_second"] = per_s, it["joules"] = energy, it["joules_per_sample"] = energy / double(f->net.batch);
            nlohmann::json out{{"schema", "joule.predict/1"}, {"kind", "modelled"}, {"net", f->net.net}, {"batch", f->net.batch},
                                        {"dtype", f->net.dtype}, {"scope", f->net.scope}, {"device", spec.name}, {"spec", spec.path},
                                        {"time_model", d.efficiency() ? "efficiency curves: " + d.efficiency()->path : "roofline"},
                                        {"power_limit_w", limit}, {"clock_mhz", clock}, {"casts", lg.casts}, {"iteration", it}, {"layers", ls}};
            if (!dp.is_null()) out["data_parallel"] = dp;
            std::cout << out.dump(2) << '\n';
            return;
        }
        std::cout << "predict " << f->net.net << " batch " << f->net.batch << " (" << f->net.optimizer << ", plan " << lg.plan.name << ", " << lg.casts
                  << " casts; " << g.num_nodes() << " nodes) on " << spec.name << ", " << setting_text << ": all figures MODELLED ("
                  << (d.efficiency() ? "efficiency curves " + d.efficiency()->path : "roofline") << "; power: idle " << fixed(d.idle_w(), 1)
                  << " W + activity x " << fixed(d.core_dynamic_w(), 1) << " W + memory energy)\n\n";
        Table t({"layer", "nodes", "GFLOP", "traffic", "time ms", "share", "avg W", "energy mJ", "clock MHz"});
        for (const LayerTotals& x : layers)
            t.add({x.name, std::to_string(x.nodes), fixed(x.flops / 1e9, 3), bytes_str(x.bytes), fixed(x.seconds * 1e3, 3),
                   fixed(100 * x.seconds / total.seconds, 1) + " %", fixed(x.seconds > 0 ? d.idle_w() + x.joules / x.seconds : 0, 1),
                   fixed((x.joules + d.idle_w() * x.seconds) * 1e3, 2), x.min_clock > 0 ? fixed(x.min_clock, 0) + (x.throttled ? " (throttled)" : "") : "-"});
        t.print(std::cout);
        std::cout << "\nper iteration (modelled): " << fixed(total.seconds * 1e3, 3) << " ms, " << fixed(per_s, 1) << " samples/s; energy "
                  << fixed(energy, 3) << " J (dynamic " << fixed(total.joules, 3) << " J + idle " << fixed(idle_j, 3) << " J), "
                  << fixed(energy / double(f->net.batch) * 1e3, 2) << " mJ/sample; average power " << fixed(energy / total.seconds, 1) << " W";
        if (total.throttled > 0) std::cout << "; the limit throttled " << total.throttled << " of " << total.nodes << " nodes (lowest clock " << fixed(total.min_clock, 0) << " MHz)";
        std::cout << "\n";
        if (!dp.is_null()) {
            std::cout << "\ndata-parallel, MODELLED: batch " << f->net.batch << " per device (weak scaling)"
                      << (f->accumulate > 1 ? " x " + std::to_string(f->accumulate) + " micro-batches accumulated per iteration" : std::string()) << ", " << f->per_node
                      << " device(s) per node"
                      << (dp["intra_link"] != "" ? " on " + dp["intra_link"].get<std::string>() : std::string()) << (dp["inter_link"] != "" ? ", nodes on " + std::to_string(f->nics) + " x " + dp["inter_link"].get<std::string>() : std::string())
                      << "; " << bytes_str(dp["gradient_bytes"].get<double>()) << " of gradients all-reduced (ring or tree) in " << fixed(f->bucket_mib, 0)
                      << " MiB buckets as backward produces them; efficiency = one device's step / the iteration\n";
            dp_table.print(std::cout);
        }
    });
}

}  // namespace joule::cli
