// `joule calibrate`: fits efficiency curves (predict/efficiency.hpp) from `joule profile` records against
// the memory model's roofline on the given hardware, and writes them for `joule analyze --efficiency`.
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "graph/error.hpp"
#include "import/onnx.hpp"
#include "profile/calibrate.hpp"
#include "profile/sweep.hpp"
#include "report/table.hpp"
#include "zoo/zoo.hpp"

namespace joule::cli {

namespace {

struct CalibrateFlags {
    HardwareOptions hw;
    std::vector<std::string> dbs = {"joule-profile.db"};
    std::string out = "joule-efficiency.yaml", nets, exclude;
    int threads = 0;
    std::vector<int64_t> image_sizes = {0};
    std::vector<int64_t> seq_lens = {128};
    std::string traffic = "in-context";
    bool json = false;
};

}  // namespace

void add_calibrate(CLI::App& app) {
    auto f = std::make_shared<CalibrateFlags>();
    auto* cmd = app.add_subcommand("calibrate", "fit per-op efficiency curves from joule profile records for joule analyze --efficiency");
    cmd->add_option("--db", f->dbs, "SQLite database written by joule profile (repeat for several: e.g. one per image size)")->capture_default_str();
    cmd->add_option("--out", f->out, "efficiency file to write")->capture_default_str();
    cmd->add_option("--net", f->nets, "comma-separated nets to fit from (default: every net in the database)");
    cmd->add_option("--exclude", f->exclude, "comma-separated NET or NET:BATCH to hold out (e.g. resnet50 or resnet50:4)");
    cmd->add_option("--threads", f->threads, "thread count of the records (0: the only one stored)")->check(number_in(0));
    cmd->add_option("--image-size", f->image_sizes, "input size the sweep used (0: each net's default); one for all databases, or one per --db in order")
        ->delimiter(',')
        ->check(number_in(0));
    cmd->add_option("--seq-len", f->seq_lens, "sequence length the sweep used (BERT nets); one for all databases, or one per --db in order")
        ->delimiter(',')
        ->capture_default_str()
        ->check(number_in(1, 4096));
    cmd->add_option("--traffic", f->traffic,
                    "the memory term to fit against: in-context (the memory model's traffic within the iteration, for joule analyze) or cold (each "
                    "node alone from a cold buffer, as the cost interface behind predict, amp and the modelled meter sees it)")
        ->capture_default_str()
        ->check(CLI::IsMember({"in-context", "cold"}));
    add_hardware_options(*cmd, f->hw, false);
    cmd->add_flag("--json", f->json, "machine-readable summary on stdout");
    cmd->callback([f] {
        profile::CalibrationOptions o;
        if (!f->nets.empty()) o.nets = profile::parse_list(f->nets, "--net");
        if (!f->exclude.empty()) o.exclude = profile::parse_list(f->exclude, "--exclude");
        for (const std::string& n : o.nets)  // Error: unknown network, with the list
            if (!is_onnx_file(n)) zoo::net_info(n);
        for (const std::string& x : o.exclude)
            if (!is_onnx_file(x.substr(0, x.find(':')))) zoo::net_info(x.substr(0, x.find(':')));
        const Hardware hw = resolve_hardware(f->hw);
        hw.require("joule calibrate");
        // --image-size and --seq-len: one value for every database, or one per --db in order
        const auto per_db = [&](const std::vector<int64_t>& values, const char* flag) {
            if (values.size() != 1 && values.size() != f->dbs.size())
                throw Error(std::string(flag) + ": " + std::to_string(values.size()) + " values for " + std::to_string(f->dbs.size()) + " databases",
                            "give one value for all, or one per --db in order");
            return [&values](size_t d) { return values[values.size() == 1 ? 0 : d]; };
        };
        const auto image_size_of = per_db(f->image_sizes, "--image-size");
        const auto seq_len_of = per_db(f->seq_lens, "--seq-len");
        // every database's samples in one fit; each configuration remembers its database's input size and sequence length
        profile::CalibrationSet set;
        std::vector<int64_t> size_of, seq_of;  // per configuration
        std::string from;
        for (size_t d = 0; d < f->dbs.size(); ++d) {
            const std::string& path = f->dbs[d];
            if (!std::filesystem::exists(path)) throw Error("--db " + path + ": no such database", "run joule profile --db " + path + " first");
            o.threads = f->threads, o.image_size = image_size_of(d), o.seq_len = seq_len_of(d), o.cold_traffic = f->traffic == "cold";
            const profile::Store db(path, profile::Store::Mode::ReadOnly);
            const profile::CalibrationSet part = profile::calibration_samples(db, hw.config, o);
            for (size_t i = 0; i < part.configs.size(); ++i) {
                set.first_sample.push_back(set.samples.size() + part.first_sample[i]);
                set.configs.push_back(part.configs[i]);
                set.roofline_s.push_back(part.roofline_s[i]);
                size_of.push_back(o.image_size);
                seq_of.push_back(o.seq_len);
            }
            set.samples.insert(set.samples.end(), part.samples.begin(), part.samples.end());
            from += (from.empty() ? "" : " + ") + path;
        }
        predict::EfficiencyModel model = predict::fit_efficiency(set.samples);
        const predict::MemoryConfig& c = hw.config;
        model.hardware = {c.capacity_bytes, c.bandwidth_bytes_per_s, c.peak_f32_flops, c.peak_bf16_flops, c.node_overhead_s};
        model.traffic = f->traffic;
        model.fitted_from = from + ": " + std::to_string(set.configs.size()) + " configurations, threads " + std::to_string(set.configs.front().key.threads) +
                            (o.exclude.empty() ? "" : ", excluding " + f->exclude);
        predict::save_efficiency(model, f->out);
        const std::vector<std::string> warnings = predict::fit_warnings(model);
        for (const std::string& w : warnings) std::cerr << "joule: warning: " << w << '\n';

        // In-sample check: the step each configuration measured against the roofline and the curves.
        nlohmann::json configs = nlohmann::json::array();
        Table t({"net", "input", "batch", "dtype", "measured ms", "roofline ms", "error", "calibrated ms", "error"});
        double roof_err = 0, cal_err = 0;
        for (size_t i = 0; i < set.configs.size(); ++i) {
            const size_t end = i + 1 < set.configs.size() ? set.first_sample[i + 1] : set.samples.size();
            const double roof = set.roofline_s[i];
            double cal = 0;
            for (size_t j = set.first_sample[i]; j < end; ++j) {
                const predict::EfficiencySample& s = set.samples[j];
                cal += model.kinds.at(s.key).seconds(s.compute_s, s.memory_s, s.m, s.n, s.k);
            }
            const profile::ConfigRecord& r = set.configs[i];
            const double er = (roof - r.step_s) / r.step_s, ec = (cal - r.step_s) / r.step_s;
            roof_err += std::fabs(er), cal_err += std::fabs(ec);
            const bool tokens = !is_onnx_file(r.key.net) && zoo::net_info(r.key.net).sequence;
            t.add({r.key.net, tokens ? "seq " + std::to_string(seq_of[i]) : size_of[i] ? std::to_string(size_of[i]) : "default", std::to_string(r.key.batch), r.key.dtype, fixed(r.step_s * 1e3, 2), fixed(roof * 1e3, 2), fixed(100 * er, 1) + " %",
                   fixed(cal * 1e3, 2), fixed(100 * ec, 1) + " %"});
            configs.push_back({{"net", r.key.net}, {"image_size", size_of[i]}, {"seq_len", seq_of[i]}, {"batch", r.key.batch}, {"dtype", r.key.dtype}, {"measured_seconds", r.step_s},
                               {"roofline_seconds", roof}, {"calibrated_seconds", cal}});
        }
        const double n = double(set.configs.size());
        if (f->json) {
            nlohmann::json kinds;
            for (const auto& [key, k] : model.kinds)
                kinds[key] = {{"fixed_seconds", k.fixed_s}, {"compute_scale", k.compute_scale}, {"memory_scale", k.memory_scale}, {"half_m", k.half_m},
                              {"half_n", k.half_n}, {"half_k", k.half_k}, {"samples", k.samples}, {"outliers", k.outliers}, {"error", k.error}};
            std::cout << nlohmann::json{{"schema", "joule.calibrate/1"}, {"out", f->out}, {"fitted_from", model.fitted_from}, {"kinds", kinds}, {"configs", configs},
                                        {"roofline_mean_abs_error", roof_err / n}, {"calibrated_mean_abs_error", cal_err / n},
                                        {"warnings", warnings}}
                             .dump(2)
                      << '\n';
            return;
        }
        std::cout << "calibrated from " << model.fitted_from << " (measured node times) against the roofline at " << bytes_str(c.capacity_bytes) << ", "
                  << fixed(c.bandwidth_bytes_per_s / 1e9, 1) << " GB/s, " << fixed(c.peak_f32_flops / 1e9, 1) << " GFLOP/s\n"
                  << "wrote " << f->out << "\n\n";
        Table k({"kind", "nodes", "outliers", "fixed us", "compute x", "memory x", "half M", "half N", "half K", "error"});
        for (const auto& [key, e] : model.kinds)
            k.add({key, std::to_string(e.samples), std::to_string(e.outliers), fixed(e.fixed_s * 1e6, 2), fixed(e.compute_scale, 3), fixed(e.memory_scale, 3),
                   e.gemm ? fixed(e.half_m, 0) : "-", e.gemm ? fixed(e.half_n, 0) : "-", e.gemm ? fixed(e.half_k, 0) : "-", fixed(100 * e.error, 1) + " %"});
        std::cout << "per kind: time = fixed + compute x (1 + half M/M)(1 + half N/N)(1 + half K/K) x roofline compute + memory x roofline memory\n"
                     "(outliers: nodes measured over 3x a robust first fit, left out; error: sum |predicted - measured| / sum measured)\n";
        k.print(std::cout);
        std::cout << "\nin-sample check: measured step against the modelled roofline and calibrated steps (the configurations fitted from;\n"
                     "hold some out with --exclude to validate):\n";
        t.print(std::cout);
        if (set.configs.size() > 1)  // with one configuration its row above says it already
            std::cout << "mean absolute error: roofline " << fixed(100 * roof_err / n, 1) << " %, calibrated " << fixed(100 * cal_err / n, 1) << " %\n";
    });
}

}  // namespace joule::cli
