// `joule profile`: sweeps (net x batch x dtype x threads) measuring time and energy per node into a
// SQLite database, and reports derived metrics from it (--report, --csv, --json); --trace writes the
// configurations it runs as a Chrome trace.
#include <cmath>
#include <fstream>
#include <filesystem>
#include <iostream>
#include <optional>
#include <nlohmann/json.hpp>

#include "backend/cpu/cores.hpp"
#include "cli/commands.hpp"
#include "graph/error.hpp"
#include "import/onnx.hpp"
#include "predict/device_model.hpp"
#include "profile/calibrate.hpp"
#include "profile/report.hpp"
#include "profile/sweep.hpp"
#include "report/run_trace.hpp"
#include "report/table.hpp"

namespace joule::cli {

namespace {

struct ProfileFlags {
    std::string model;
    std::string nets = "lenet5", batches = "8,16,32", dtypes = "f32", scope = "gemm", threads = "0", db = "joule-profile.db", meter = "auto", device_spec, csv, device,
                trace;
    int64_t iters = 5, warmup = 2, image_size = 0, seq_len = 128;
    double idle_seconds = 0.5, sample_ms = 10;
    bool report = false, json = false, force = false, oversubscribe = false;
};

std::string tagged(double v, int decimals, const std::string& kind) { return fixed(v, decimals) + (kind == "modelled" ? " (mod)" : ""); }

void print_report(const std::vector<profile::ConfigMetrics>& ms) {
    if (ms.empty()) {
        std::cout << "no profile records\n";
        return;
    }
    Table t({"net", "batch", "dtype", "thr", "steps", "step ms", "img/s", "GFLOP/s", "power W", "GFLOPS/W", "mJ/img", "meter"});
    for (const auto& m : ms) {
        const auto& c = m.config;
        const std::string kind = c.key.meter_kind;
        t.add({c.key.net, std::to_string(c.key.batch), c.key.dtype, std::to_string(c.key.threads), std::to_string(c.iters),
               fixed(c.step_s * 1e3, 2) + " +- " + fixed(c.step_spread_s * 1e3, 2), fixed(m.images_per_s, 0), fixed(m.gflops_per_s, 1),
               tagged(m.avg_power_w, 2, kind), tagged(m.gflops_per_w, 2, kind), tagged(m.joules_per_image * 1e3, 3, kind), kind});
    }
    std::cout << "per configuration (time measured by steady clock; energy figures marked (mod) are modelled, the others measured):\n";
    t.print(std::cout);
    std::vector<std::string> head = {"net", "batch", "dtype", "thr"};
    for (const char* type : profile::kLayerTypes) head.push_back(std::string(type) + " time/energy %");
    Table b(head);
    for (const auto& m : ms) {
        double ts = 0, js = 0;
        for (const auto& [k, v] : m.by_type) ts += v.seconds, js += v.joules;
        std::vector<std::string> row = {m.config.key.net, std::to_string(m.config.key.batch), m.config.key.dtype, std::to_string(m.config.key.threads)};
        for (const char* type : profile::kLayerTypes) {
            const auto& v = m.by_type.at(type);
            row.push_back(fixed(ts > 0 ? 100 * v.seconds / ts : 0, 1) + " / " + fixed(js > 0 ? 100 * v.joules / js : 0, 1));
        }
        b.add(row);
    }
    std::cout << "\nper layer type: share of op time (measured) / share of op energy above idle (measured or modelled as the meter column says):\n";
    b.print(std::cout);
}

// Each configuration beside what it would take on another device (the cost interface; modelled).
nlohmann::json print_on_device(const profile::Store& db, const std::vector<profile::ConfigMetrics>& ms, const predict::DeviceModel& d, int64_t image_size,
                               int64_t seq_len, bool print) {
    Table t({"net", "batch", "dtype", "thr", "step ms here", "step ms there (mod)", "speed-up", "img/s there (mod)", "mJ/img there (mod)", "avg W there (mod)"});
    nlohmann::json out = nlohmann::json::array();
    for (const auto& m : ms) {
        const auto& c = m.config;
        if (c.key.device != "cpu") continue;
        const profile::DeviceEstimate e = profile::estimate_on(db, c, d, image_size, seq_len);
        const double batch = double(c.key.batch), joules = e.dynamic_j + e.idle_j;
        if (!e.ok) t.add({c.key.net, std::to_string(c.key.batch), c.key.dtype, std::to_string(c.key.threads), fixed(c.step_s * 1e3, 2), e.why_not, "", "", "", ""});
        else
            t.add({c.key.net, std::to_string(c.key.batch), c.key.dtype, std::to_string(c.key.threads), fixed(c.step_s * 1e3, 2), fixed(e.step_s * 1e3, 3),
                   fixed(c.step_s / e.step_s, 1) + "x", fixed(batch / e.step_s, 0), fixed(joules / batch * 1e3, 3), fixed(joules / e.step_s, 1)});
        nlohmann::json j = {{"net", c.key.net}, {"batch", c.key.batch}, {"dtype", c.key.dtype}, {"threads", c.key.threads}, {"device", d.spec().name},
                            {"kind", "modelled"}, {"ok", e.ok}};
        if (e.ok) j.update({{"step_s", e.step_s}, {"dynamic_joules", e.dynamic_j}, {"idle_joules", e.idle_j}});
        else j["why_not"] = e.why_not;
        out.push_back(j);
    }
    if (print) {
        std::cout << "\non " << d.spec().name << " (every node there, in the dtype it ran here; MODELLED by the cost interface"
                  << (d.efficiency() ? " with " + d.efficiency()->path : ", roofline") << "):\n";
        t.print(std::cout);
    }
    return out;
}

void write_csv(const std::vector<profile::ConfigMetrics>& ms, std::ostream& os) {
    os << "net,device,dtype,batch,threads,meter_kind,meter,iters,step_s,step_spread_s,images_per_s,gflops_per_s,avg_power_w,gflops_per_w,"
          "joules_per_image,idle_w,idle_j,ops_j,total_j";
    for (const char* t : profile::kLayerTypes) os << "," << t << "_s," << t << "_j";
    os << "\n";
    for (const auto& m : ms) {
        const auto& c = m.config;
        os << c.key.net << "," << c.key.device << "," << c.key.dtype << "," << c.key.batch << "," << c.key.threads << "," << c.key.meter_kind << ",\""
           << c.meter << "\"," << c.iters;
        for (double v : {c.step_s, c.step_spread_s, m.images_per_s, m.gflops_per_s, m.avg_power_w, m.gflops_per_w, m.joules_per_image, c.idle_w, c.idle_j,
                         c.ops_j, c.total_j})
            os << "," << exact(v);
        for (const char* t : profile::kLayerTypes) os << "," << exact(m.by_type.at(t).seconds) << "," << exact(m.by_type.at(t).joules);
        os << "\n";
    }
}

nlohmann::json to_json(const std::vector<profile::ConfigMetrics>& ms, const profile::Store& db) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& m : ms) {
        const auto& c = m.config;
        nlohmann::json types, nodes = nlohmann::json::array();
        for (const auto& [k, v] : m.by_type) types[k] = {{"seconds", v.seconds}, {"joules", v.joules}};
        for (const auto& n : db.nodes(c.key))
            nodes.push_back({{"node", n.node}, {"op", n.op}, {"category", n.category}, {"phase", n.phase}, {"shapes", n.shapes}, {"device", n.device}, {"dtype", n.dtype}, {"reps", n.reps},
                             {"seconds", n.time_s}, {"seconds_spread", n.time_spread_s}, {"joules", n.energy_j}, {"joules_spread", n.energy_spread_j},
                             {"watts_above_idle", n.power_w}, {"flops", n.flops}, {"bytes", n.bytes}});
        out.push_back({{"net", c.key.net}, {"device", c.key.device}, {"dtype", c.key.dtype}, {"batch", c.key.batch}, {"threads", c.key.threads},
                       {"energy", c.key.meter_kind}, {"timing", "measured"}, {"meter", c.meter}, {"iters", c.iters}, {"step_seconds", c.step_s},
                       {"step_seconds_spread", c.step_spread_s}, {"images_per_second", m.images_per_s}, {"gflops_per_second", m.gflops_per_s},
                       {"average_watts", m.avg_power_w}, {"gflops_per_watt", m.gflops_per_w}, {"joules_per_image", m.joules_per_image},
                       {"idle_watts", c.idle_w}, {"idle_joules", c.idle_j}, {"ops_joules", c.ops_j}, {"total_joules", c.total_j},
                       {"by_layer_type", types}, {"nodes", nodes}, {"updated", c.updated}, {"host", c.host}});
    }
    return out;
}

}  // namespace

void add_profile(CLI::App& app) {
    auto f = std::make_shared<ProfileFlags>();
    auto* cmd = app.add_subcommand("profile", "sweep nets x batch x dtype x threads, storing time and energy per op in SQLite; report them");
    auto* nets = cmd->add_option("--net", f->nets, "comma-separated zoo nets")->capture_default_str();
    cmd->add_option("--model", f->model, "an ONNX model file (e.g. from torch.onnx.export) instead of zoo nets; its records are keyed by the path")->excludes(nets);
    cmd->add_option("--batch", f->batches, "comma-separated batch sizes")->capture_default_str();
    cmd->add_option("--dtype", f->dtypes, "comma-separated precisions: f32, bf16 (on conv/linear/matmul)")->capture_default_str();
    cmd->add_option("--dtype-scope", f->scope, "gemm: bf16 on conv/linear/matmul (the built-in plan); all: on every op the cpu runs in bf16 (records keyed bf16-all)")
        ->capture_default_str()
        ->check(CLI::IsMember({"gemm", "all"}));
    cmd->add_option("--threads", f->threads, "comma-separated thread counts (0: all cores this process may run on)")->capture_default_str();
    cmd->add_flag("--oversubscribe", f->oversubscribe, "allow --threads above the cores this process may run on");
    cmd->add_option("--iters", f->iters, "measured training steps per configuration")->capture_default_str()->check(number_in(1, 100000));
    cmd->add_option("--warmup", f->warmup, "unmeasured steps first")->capture_default_str()->check(number_in(0));
    cmd->add_option("--image-size", f->image_size, "input size (0: each net's default)")->check(number_in(0));
    cmd->add_option("--seq-len", f->seq_len, "sequence length for BERT nets")->capture_default_str()->check(number_in(1, 4096));
    cmd->add_option("--db", f->db, "SQLite database")->capture_default_str();
    cmd->add_option("--meter", f->meter, "auto, rapl, perf, nvml or modelled")->capture_default_str()->check(CLI::IsMember({"auto", "rapl", "perf", "nvml", "modelled"}));
    cmd->add_option("--device-spec", f->device_spec, "data/hw spec for the modelled meter (default: the one matching this CPU)");
    cmd->add_option("--idle-seconds", f->idle_seconds, "idle-power measurement per configuration (measured meters)")->capture_default_str()->check(number_in(0));
    cmd->add_option("--sample-ms", f->sample_ms, "power sampling period in ms")->capture_default_str()->check(number_in(0.1, 10000.0));
    cmd->add_flag("--force", f->force, "re-run configurations already in the database");
    cmd->add_flag("--report", f->report, "only report what the database holds (no sweep)");
    cmd->add_option("--csv", f->csv, "write the report as CSV to this file ('-': stdout)");
    cmd->add_flag("--json", f->json, "report as JSON on stdout (with every node)");
    cmd->add_option("--trace", f->trace, "write the configurations it runs, every measured step's node spans and power, as a Chrome trace (Perfetto, chrome://tracing)")
        ->excludes("--report");
    cmd->add_option("--device", f->device, "also model each configuration on this data/hw device (name, alias or path; joule devices lists them)");
    cmd->callback([f, cmd] {
        std::optional<predict::DeviceModel> there_device;  // checked before a sweep runs
        if (!f->device.empty()) there_device = load_whole_net_device(f->device);
        std::unique_ptr<profile::Store> store;  // opened for writing by a sweep, read-only by --report
        std::string filter;
        if (!f->report) {
            profile::SweepOptions o;
            // a model file's records are keyed by its absolute path: calibrate and report rebuild its graph from there
            o.nets = f->model.empty() ? profile::parse_list(f->nets, "--net") : std::vector<std::string>{std::filesystem::absolute(f->model).lexically_normal().string()};
            o.batches = profile::parse_int_list(f->batches, "--batch");
            o.dtypes.clear();
            for (const std::string& d : profile::parse_list(f->dtypes, "--dtype")) {
                if (d != "f32" && d != "bf16") throw Error("--dtype " + d + ": the cpu backend computes in f32 or bf16", "use --dtype f32, bf16 or f32,bf16");
                o.dtypes.push_back(parse_dtype(d));
            }
            o.scope = parse_precision_scope(f->scope);
            o.threads.clear();
            for (int64_t t : profile::parse_int_list(f->threads, "--threads", true)) {
                cpu::check_threads(t, f->oversubscribe);
                o.threads.push_back(int(t));
            }
            o.iters = f->iters, o.warmup = f->warmup, o.image_size = f->image_size, o.seq_len = f->seq_len;
            o.meter = f->meter, o.device_spec = f->device_spec, o.force = f->force;
            o.energy.idle_seconds = f->idle_seconds;
            o.energy.period = std::chrono::microseconds(int64_t(f->sample_ms * 1000));
            std::ofstream trace_file;  // opened first: a path that cannot be written fails before the sweep
            if (!f->trace.empty()) {
                trace_file.open(f->trace);
                if (!trace_file) throw Error("--trace " + f->trace + ": cannot write the trace file");
            }
            store = std::make_unique<profile::Store>(f->db);  // after the flags are checked: a bad flag creates no file
            std::ostream& log = f->json || f->csv == "-" ? std::cerr : std::cout;
            std::string last_message;
            Trace trace{"joule profile (measured runs)", {}, {}, {}, {}};
            double origin = NAN;  // the first configuration's first span: every configuration on one time line
            int traced = 0, skipped = 0;
            profile::run_sweep(*store, o, [&](const profile::SweepEvent& e) {
                const std::string what = e.key.net + " batch " + std::to_string(e.key.batch) + " " + e.key.dtype + " " + std::to_string(e.key.threads) + " threads";
                if (e.skipped) {
                    log << what << ": already in " << f->db << " (skipped; --force re-runs it)\n";
                    ++skipped;
                    return;
                }
                if (!f->trace.empty()) {
                    if (std::isnan(origin)) origin = first_span(*e.spans);
                    const std::vector<TracedNode> nodes = traced_nodes(*e.graph);
                    add_run(trace, {what, e.devices, &nodes, e.spans, e.energy}, origin);
                    ++traced;
                }
                if (e.meter_message != last_message) log << e.meter_message << '\n';
                last_message = e.meter_message;
                log << what << ": " << fixed(e.record->step_s * 1e3, 2) << " ms/step (measured), " << fixed(e.record->total_j * 1e3, 2) << " mJ/step ("
                    << e.key.meter_kind << ")\n";
            });
            if (!f->trace.empty()) {
                trace.metadata = {{"timing", "measured (wall clock)"},
                                  {"power", "each configuration's meter, as its counter track says (measured or modelled)"},
                                  {"configurations", std::to_string(traced) + " run" +
                                                         (skipped ? ", " + std::to_string(skipped) + " already in the database not re-run (--force re-runs them)" : "")},
                                  {"steps", std::to_string(o.iters) + " measured steps per configuration (after " + std::to_string(o.warmup) + " warm-up)"}};
                write_chrome_trace(trace_file, trace);
                log << "wrote " << traced << " configuration(s)' node spans and power to " << f->trace << " (open it in https://ui.perfetto.dev or chrome://tracing)"
                    << (skipped ? "; " + std::to_string(skipped) + " already in the database are not in it (--force re-runs them)" : "") << "\n";
            }
            if (o.nets.size() == 1) filter = o.nets.front();
        } else {
            store = std::make_unique<profile::Store>(f->db, profile::Store::Mode::ReadOnly);
            if (cmd->count("--net")) filter = f->nets;
        }
        const profile::Store& db = *store;
        const auto ms = profile::derive_all(db, filter);
        if (!f->csv.empty()) {
            if (f->csv == "-") {
                write_csv(ms, std::cout);
            } else {
                std::ofstream out(f->csv);
                if (!out) throw Error("--csv " + f->csv + ": cannot write the file");
                write_csv(ms, out);
            }
        }
        if (f->csv != "-" && !f->json) print_report(ms);
        nlohmann::json there;
        if (there_device) there = print_on_device(db, ms, *there_device, f->image_size, f->seq_len, !f->json && f->csv != "-");
        if (f->json) {
            nlohmann::json out = {{"schema", "joule.profile/1"}, {"configs", to_json(ms, db)}};
            if (there_device) out["on_device"] = there;
            std::cout << out.dump(2) << '\n';
        }
    });
}

}  // namespace joule::cli
