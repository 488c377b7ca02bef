// `joule fpga-tune`: the FPGA kernel model's tuner over a net's training graph -- per node the best
// feasible kernel configuration for its shape (input-adaptive), its resource use, predicted time,
// GFLOP/s and GFLOPS/W, all MODELLED; and what switching configurations in graph order would add.
#include <chrono>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli/commands.hpp"
#include "graph/error.hpp"
#include "predict/fpga_model.hpp"
#include "predict/units.hpp"
#include "report/table.hpp"

namespace joule::cli {

namespace {

struct FpgaTuneFlags {
    NetOptions net;
    std::string device, gemm;
    double clock_mhz = 0, power_limit_w = 0;
    bool forward = false, json = false;
};

// --gemm MxNxK: one f32/bf16 GEMM of that size, as a benchmark (HPCC's SGEMM) would run it.
predict::FpgaWork gemm_work(const std::string& text, DType dtype) {
    std::vector<double> d;
    std::string part;
    std::stringstream in(text);
    while (std::getline(in, part, 'x')) {
        const double v = predict::parse_number(part).value_or(0);
        if (!(v >= 1) || v != std::floor(v) || v > 1e7) throw Error("--gemm '" + text + "': '" + part + "' is not a dimension", "write MxNxK, e.g. 4096x4096x4096");
        d.push_back(v);
    }
    if (d.size() != 3) throw Error("--gemm '" + text + "': expected three dimensions", "write MxNxK, e.g. 4096x4096x4096");
    predict::FpgaWork w;
    w.kernel = predict::FpgaKernel::Gemm, w.dtype = dtype, w.element_bytes = double(dtype_size(dtype));
    w.m = d[0], w.n = d[1], w.k = d[2];
    w.a_bytes = w.m * w.k * w.element_bytes, w.b_bytes = w.k * w.n * w.element_bytes, w.c_bytes = w.m * w.n * w.element_bytes;
    w.flops = 2 * w.m * w.n * w.k;
    return w;
}

std::string percent(double used, double budget) { return budget > 0 ? fixed(100 * used / budget, 0) + " %" : "-"; }

}  // namespace

void add_fpga_tune(CLI::App& app) {
    auto f = std::make_shared<FpgaTuneFlags>();
    f->net.net = "resnet50", f->net.batch = 32, f->net.optimizer = "sgd";
    auto* cmd = app.add_subcommand("fpga-tune", "pick the best FPGA kernel configuration for every node of a net that an FPGA runs (modelled)");
    add_net_options(*cmd, f->net, false);
    cmd->add_option("--device", f->device, "an FPGA of data/hw (name or alias: s10, a10, de5, u250, u280; joule devices lists them)")->required();
    cmd->add_option("--clock", f->clock_mhz, "kernel clock in MHz (default: the device's typical kernel clock)")->check(positive_number());
    cmd->add_option("--power-limit", f->power_limit_w, "board power cap in W: per node the fastest configuration under it")->check(positive_number());
    auto* gemm = cmd->add_option("--gemm", f->gemm, "tune one GEMM MxNxK instead of a net (e.g. 4096x4096x4096, HPCC's SGEMM)");
    auto* forward = cmd->add_flag("--forward", f->forward, "inference: the forward nodes only (no loss, backward or update)");
    for (const char* o : {"--net", "--batch", "--image-size", "--seq-len", "--optimizer"}) gemm->excludes(cmd->get_option(o));
    gemm->excludes(forward);
    cmd->add_flag("--json", f->json, "machine-readable output");
    cmd->callback([f] {
        if (f->clock_mhz > 0 && f->power_limit_w > 0) throw Error("--clock and --power-limit: give one", "a power cap picks kernels at the default clock");
        const predict::DeviceModel d = predict::load_device_model(f->device);
        const hw::DeviceSpec& spec = d.spec();
        if (spec.kind != "fpga") throw Error("--device " + f->device + ": " + spec.name + " is a " + spec.kind + ", not an FPGA", "choose s10, a10, de5, u250 or u280");
        const DType dtype = parse_dtype(f->net.dtype);
        if (!d.has(dtype)) throw Error("--dtype " + f->net.dtype + ": " + spec.name + " has no " + f->net.dtype + " arithmetic");
        const double clock = d.clock_mhz({.clock_mhz = f->clock_mhz});
        TrainGraph tg;  // --gemm: none
        if (f->gemm.empty()) tg = train_graph_of(f->net);
        const Graph& g = tg.graph;

        struct Row {
            std::string name, op;
            predict::TunedKernel tuned;
        };
        std::vector<Row> rows;
        size_t host = 0;
        const auto t0 = std::chrono::steady_clock::now();
        if (!f->gemm.empty()) rows.push_back({"gemm " + f->gemm, "GEMM", predict::fpga_tune(gemm_work(f->gemm, dtype), spec, clock, f->power_limit_w)});
        for (size_t i = 0; i < g.num_nodes(); ++i) {
            const NodeId n = NodeId(i);
            if (f->forward && g.node(n).phase != Phase::Forward) continue;
            // --dtype on the GEMMs (the DSP arrays), streams in f32
            const auto w = predict::fpga_work(g, n, is_gemm_node(g, n) ? dtype : DType::F32);
            if (!w) {
                ++host;
                continue;
            }
            rows.push_back({g.node(n).name, op_name(g.node(n).kind), predict::fpga_tune(*w, spec, clock, f->power_limit_w)});
        }
        const double tune_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        double seconds = 0, joules = 0, flops = 0, switches_s = 0;
        int switches = 0, candidates = 0;
        std::set<std::string> configs;
        for (size_t i = 0; i < rows.size(); ++i) {
            const predict::FpgaEstimate& e = rows[i].tuned.estimate;
            seconds += e.seconds, joules += e.dynamic_joules + e.static_joules, flops += e.flops, candidates += rows[i].tuned.candidates;
            configs.insert(rows[i].tuned.config.str());
            if (i > 0) {
                const double s = predict::fpga_switch_seconds(rows[i - 1].tuned, rows[i].tuned, spec);
                switches_s += s, switches += s > 0;
            }
        }
        // one bitstream for the whole net: the design planners weigh against per-node kernels and their switches
        predict::FpgaDesign design;
        double design_seconds = 0, design_joules = 0;
        if (f->gemm.empty() && !f->forward && dtype == DType::F32) {
            const predict::Setting setting{.power_limit_w = f->power_limit_w, .clock_mhz = f->clock_mhz};
            design = predict::best_fpga_design(g, d, setting);
            predict::Setting with = setting;
            with.fpga_design = design;
            for (size_t i = 0; i < g.num_nodes() && !design.empty(); ++i) {
                if (!predict::fpga_runs(g.node(NodeId(i)).kind)) continue;
                const predict::FpgaEstimate& e = predict::fpga_kernel(g, NodeId(i), d, DType::F32, with).estimate;
                design_seconds += e.seconds, design_joules += e.dynamic_joules + e.static_joules;
            }
        }
        if (f->json) {
            nlohmann::json nodes = nlohmann::json::array();
            for (const Row& r : rows) {
                const predict::FpgaEstimate& e = r.tuned.estimate;
                const predict::FpgaConfig& c = r.tuned.config;
                nodes.push_back({{"node", r.name}, {"op", r.op}, {"kernel", predict::fpga_kernel_name(c.kernel)},
                                 {"config", c.str()}, {"pe", {c.pe_rows, c.pe_cols, c.vec}}, {"tile", {c.tile_m, c.tile_n, c.tile_k}},
                                 {"double_buffer", c.double_buffer}, {"dtype", dtype_name(c.dtype)}, {"dsp", e.use.dsp}, {"ram_blocks", e.use.ram_blocks},
                                 {"uram_blocks", e.use.uram_blocks}, {"seconds", e.seconds}, {"gflops", e.gflops()}, {"watts", e.watts()},
                                 {"gflops_per_watt", e.gflops_per_watt()}, {"joules", e.dynamic_joules + e.static_joules}, {"candidates", r.tuned.candidates}});
            }
            std::cout << nlohmann::json{{"schema", "joule.fpga-tune/1"}, {"timing", "modelled"}, {"device", spec.name}, {"net", f->gemm.empty() ? f->net.net : "gemm " + f->gemm},
                                        {"batch", f->net.batch}, {"forward_only", f->forward},
                                        {"clock_mhz", clock}, {"power_limit_w", f->power_limit_w}, {"nodes", nodes}, {"host_nodes", host},
                                        {"seconds", seconds}, {"joules", joules}, {"gflops", seconds > 0 ? flops / seconds * 1e-9 : 0},
                                        {"gflops_per_watt", joules > 0 ? flops * 1e-9 / joules : 0}, {"configurations", configs.size()},
                                        {"switches", switches}, {"switch_seconds", switches_s}, {"tune_seconds", tune_s},
                                        {"design", {{"name", design.str()}, {"seconds", design_seconds}, {"joules", design_joules}}}}
                             .dump(2)
                      << '\n';
            return;
        }
        std::cout << "fpga-tune " << (f->gemm.empty() ? f->net.net + " batch " + std::to_string(f->net.batch) + (f->forward ? " (forward only)" : "") : "GEMM " + f->gemm) << " on " << spec.name << " at " << fixed(clock, 0) << " MHz"
                  << (f->power_limit_w > 0 ? ", board power under " + fixed(f->power_limit_w, 1) + " W" : "") << "; " << dtype_name(dtype)
                  << " GEMMs; every figure is MODELLED (predict/fpga_model.hpp)\n"
                  << "fabric: " << fixed(spec.fpga.dsp_blocks, 0) << " DSP, " << fixed(spec.fpga.ram_blocks, 0) << " RAM blocks"
                  << (spec.fpga.uram_blocks > 0 ? ", " + fixed(spec.fpga.uram_blocks, 0) + " UltraRAM" : "") << ", " << fixed(spec.mem_bandwidth_gbps, 1)
                  << " GB/s off-chip, static " << fixed(spec.idle_w, 1) << " W\n\n";
        Table t({"node", "op", "configuration", "DSP", "RAM", "us", "GFLOP/s", "W", "GFLOPS/W"});
        for (const Row& r : rows) {
            const predict::FpgaEstimate& e = r.tuned.estimate;
            t.add({r.name, r.op, r.tuned.config.str(), percent(e.use.dsp, spec.fpga.dsp_blocks),
                   percent(e.use.ram_blocks, spec.fpga.ram_blocks) + (e.use.uram_blocks > 0 ? " +U" + percent(e.use.uram_blocks, spec.fpga.uram_blocks) : ""),
                   fixed(e.seconds * 1e6, 1), fixed(e.gflops(), 1), fixed(e.watts(), 1), fixed(e.gflops_per_watt(), 2)});
        }
        t.print(std::cout);
        std::cout << "\n" << rows.size() << " nodes on the FPGA (" << host << " host-only: softmax, losses, embeddings, layer norm, dropout, transposes, slices), "
                  << configs.size() << " distinct configurations, " << candidates << " estimated in " << fixed(tune_s * 1e3, 1) << " ms\n"
                  << "sum of node times " << fixed(seconds * 1e3, 2) << " ms, " << fixed(joules, 3) << " J (static included): " << fixed(flops / seconds * 1e-9, 1)
                  << " GFLOP/s, " << fixed(flops * 1e-9 / joules, 2) << " GFLOPS/W\n"
                  << "in graph order the kernels switch " << switches << " times where two configurations do not fit one bitstream: +"
                  << fixed(switches_s, 2) << " s of reconfiguration (" << fixed(spec.fpga.reconfig_ms, 0) << " ms each) -- a schedule's cost, not a node's\n";
        if (!design.empty())
            std::cout << "one bitstream for every node instead: design " << design.str() << " (PE array / stream lanes, tiles per node): sum of node times "
                      << fixed(design_seconds * 1e3, 2) << " ms, " << fixed(design_joules, 3) << " J, no switches\n";
    });
}

}  // namespace joule::cli
