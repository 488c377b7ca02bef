#include "report/html_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "graph/error.hpp"
#include "predict/device_model.hpp"
#include "profile/calibrate.hpp"
#include "profile/report.hpp"
#include "report/svg.hpp"

namespace joule {

namespace {

// "measured", "modelled", or both, from the kinds a figure shows
std::string tag_of(const std::set<std::string>& kinds) {
    if (kinds.size() == 1) return *kinds.begin();
    return kinds.empty() ? "measured" : "measured and modelled";
}

std::string config_name(const profile::ConfigKey& k) {
    return "batch " + std::to_string(k.batch) + ", " + k.dtype + ", " + std::to_string(k.threads) + " threads";
}

// The top rows of a per-layer chart by their summed values, the rest in one row.
void keep_top(BarChart& c, size_t top) {
    std::vector<size_t> order(c.rows.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    auto sum = [&](size_t r) {
        double s = 0;
        for (double v : c.values[r]) s += v;
        return s;
    };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sum(a) > sum(b); });
    BarChart out = c;
    out.rows.clear(), out.values.clear(), out.modelled.clear();
    std::vector<double> rest(c.stacks.size(), 0);
    bool rest_modelled = false;
    for (size_t i = 0; i < order.size(); ++i) {
        const size_t r = order[i];
        const bool m = !c.modelled.empty() && c.modelled[r];
        if (i < top) {
            out.rows.push_back(c.rows[r]), out.values.push_back(c.values[r]), out.modelled.push_back(m);
            continue;
        }
        for (size_t k = 0; k < rest.size(); ++k) rest[k] += c.values[r][k];
        rest_modelled = rest_modelled || m;
    }
    if (order.size() > top) out.rows.push_back("(" + std::to_string(order.size() - top) + " more)"), out.values.push_back(rest), out.modelled.push_back(rest_modelled);
    c = std::move(out);
}

std::string percent(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%+.1f %%", v * 100);
    return b;
}

// Each CPU configuration's step predicted on p.device beside what it measured: a line per precision and
// thread count against batch size, the largest configuration's time per layer type, the error in words.
HtmlSection prediction_section(const profile::Store& db, const std::string& net, const std::vector<const profile::ConfigMetrics*>& configs,
                               const ProfilePrediction& p) {
    std::optional<predict::DeviceModel> device;  // read once, when a configuration needs it
    std::map<std::string, std::pair<Series, Series>> lines;  // measured, predicted
    std::set<std::string> seen;  // a configuration stored under both meter kinds: its first record
    std::string name, how, not_predicted, lo_at, hi_at;
    double lo = 0, hi = 0, abs_sum = 0;
    int n = 0;
    const profile::ConfigMetrics* big = nullptr;
    profile::DeviceEstimate big_e;
    for (const profile::ConfigMetrics* m : configs) {
        const profile::ConfigKey& k = m->config.key;
        if (k.device != "cpu" || !seen.insert(config_name(k)).second) continue;
        if (!device) device.emplace(predict::load_device_model(p.device));
        const predict::DeviceModel& d = *device;
        name = d.spec().name;
        how = d.efficiency() ? "with the efficiency curves of " + d.efficiency()->path : "on the plain roofline (the spec names no efficiency file)";
        const profile::DeviceEstimate e = profile::estimate_on(db, m->config, d, p.image_size, p.seq_len);
        if (!e.ok) {
            not_predicted += (not_predicted.empty() ? "" : "; ") + config_name(k) + ": " + e.why_not;
            continue;
        }
        const std::string line = k.dtype + ", " + std::to_string(k.threads) + " threads";
        auto& [measured, predicted] = lines[line];
        measured.name = line + ", measured", predicted.name = line + ", predicted", predicted.modelled = true;
        measured.x.push_back(double(k.batch)), measured.y.push_back(m->config.step_s * 1e3);
        predicted.x.push_back(double(k.batch)), predicted.y.push_back(e.step_s * 1e3);
        const double err = (e.step_s - m->config.step_s) / m->config.step_s;
        if (n == 0 || err < lo) lo = err, lo_at = config_name(k);
        if (n == 0 || err > hi) hi = err, hi_at = config_name(k);
        abs_sum += std::abs(err), ++n;
        if (!big || k.batch > big->config.key.batch) big = m, big_e = e;
    }
    HtmlSection s{net + ": predicted against measured", "", {}};
    if (n == 0) {
        s.text = "No configuration of " + net + " could be predicted on " + (name.empty() ? p.device : name) + (not_predicted.empty() ? " (none ran on the cpu)." : ": " + not_predicted + ".");
        return s;
    }
    LinePlot steps{"step time, measured and predicted on " + name, "batch size (images)", "ms per step", "measured and modelled", {}, true};
    for (auto& [line, pair] : lines) steps.series.push_back(std::move(pair.first)), steps.series.push_back(std::move(pair.second));
    s.figures.push_back(svg(steps));
    BarChart types{"time per layer type, measured and predicted on " + name + ", " + config_name(big->config.key), "ms per step", "measured and modelled",
                   {"measured", "predicted"}, {}, {{}, {}}, {false, true}};
    for (const char* t : profile::kLayerTypes) {
        types.stacks.push_back(t);
        types.values[0].push_back(big->by_type.at(t).seconds * 1e3);
        const auto it = big_e.by_type_s.find(t);
        types.values[1].push_back(it == big_e.by_type_s.end() ? 0 : it->second * 1e3);
    }
    s.figures.push_back(svg(types));
    s.text = "Predicted on " + name + " by the cost interface " + how + ", every node in the dtype it ran in (modelled). Step time, (predicted - measured) / measured, over " +
             std::to_string(n) + " configuration(s): mean |difference| " + percent(abs_sum / n).substr(1) + ", from " + percent(lo) + " (" + lo_at + ") to " + percent(hi) + " (" +
             hi_at + ")." + " On the CPU the records were measured on, that is the model's error." +
             (not_predicted.empty() ? "" : " Not predicted: " + not_predicted + ".");
    return s;
}

}  // namespace

void write_html(std::ostream& os, const HtmlReport& r) {
    os << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" << escape_xml(r.title) << "</title>\n"
       << "<style>body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid "
          "#ccc;padding-bottom:.2em;margin-top:2em}svg.figure{display:block;margin:1em 0}p.source{color:#666}</style>\n</head>\n<body>\n<h1>"
       << escape_xml(r.title) << "</h1>\n<p class=\"source\">from " << escape_xml(r.source)
       << "; every figure says whether it is measured or modelled (modelled marks: pale, dashed)</p>\n";
    for (const HtmlSection& s : r.sections) {
        os << "<section>\n<h2>" << escape_xml(s.heading) << "</h2>\n";
        if (!s.text.empty()) os << "<p>" << escape_xml(s.text) << "</p>\n";
        for (const std::string& f : s.figures) os << f;
        os << "</section>\n";
    }
    os << "</body>\n</html>\n";
    if (!os) throw Error("cannot write the report");
}

HtmlReport profile_report(const profile::Store& db, const ProfilePrediction& predicted) {
    HtmlReport r{"joule profile report", db.path(), {}};
    const std::vector<profile::ConfigMetrics> ms = profile::derive_all(db);
    if (ms.empty()) {
        r.sections.push_back({"no profile records", db.path() + " holds no configurations: run joule profile to fill it.", {}});
        return r;
    }
    std::map<std::string, std::vector<const profile::ConfigMetrics*>> by_net;
    for (const profile::ConfigMetrics& m : ms) by_net[m.config.key.net].push_back(&m);
    for (const auto& [net, configs] : by_net) {
        HtmlSection s{net, "", {}};
        // against batch size: a line per precision, thread count and meter kind
        std::map<std::string, std::vector<const profile::ConfigMetrics*>> lines;
        std::set<std::string> kinds;
        for (const profile::ConfigMetrics* m : configs) {
            const profile::ConfigKey& k = m->config.key;
            kinds.insert(k.meter_kind);
        }
        for (const profile::ConfigMetrics* m : configs) {  // (the meter's kind named only where both kinds are stored)
            const profile::ConfigKey& k = m->config.key;
            lines[k.dtype + ", " + std::to_string(k.threads) + " threads" + (kinds.size() > 1 ? ", energy " + k.meter_kind : "")].push_back(m);
        }
        auto plot = [&](const std::string& title, const std::string& y_label, bool energy, double (*value)(const profile::ConfigMetrics&)) {
            LinePlot p{title, "batch size (images)", y_label, energy ? tag_of(kinds) : "measured", {}, true};
            for (const auto& [name, ps] : lines) {
                Series line{name, {}, {}, energy && ps.front()->config.key.meter_kind == "modelled"};
                for (const profile::ConfigMetrics* m : ps) line.x.push_back(double(m->config.key.batch)), line.y.push_back(value(*m));
                p.series.push_back(std::move(line));
            }
            s.figures.push_back(svg(p));
        };
        plot("throughput", "images per second", false, [](const profile::ConfigMetrics& m) { return m.images_per_s; });
        plot("compute rate", "GFLOP/s", false, [](const profile::ConfigMetrics& m) { return m.gflops_per_s; });
        plot("energy efficiency", "GFLOP/s per W (GFLOPS/W)", true, [](const profile::ConfigMetrics& m) { return m.gflops_per_w; });
        plot("energy per image", "mJ per image (idle included)", true, [](const profile::ConfigMetrics& m) { return m.joules_per_image * 1e3; });
        // per layer type, each configuration
        BarChart time{"time per layer type", "ms per step", "measured", {}, {}, {}, {}}, energy{"energy per layer type", "mJ per step above idle", tag_of(kinds), {}, {}, {}, {}};
        for (const char* t : profile::kLayerTypes) time.stacks.push_back(t), energy.stacks.push_back(t);
        for (const profile::ConfigMetrics* m : configs) {
            time.rows.push_back(config_name(m->config.key)), energy.rows.push_back(config_name(m->config.key));
            std::vector<double> ts, js;
            for (const char* t : profile::kLayerTypes) ts.push_back(m->by_type.at(t).seconds * 1e3), js.push_back(m->by_type.at(t).joules * 1e3);
            time.values.push_back(ts), energy.values.push_back(js);
            time.modelled.push_back(false), energy.modelled.push_back(m->config.key.meter_kind == "modelled");
        }
        s.figures.push_back(svg(time));
        s.figures.push_back(svg(energy));
        // per layer (node) of its largest configuration
        const profile::ConfigMetrics* big = *std::max_element(configs.begin(), configs.end(), [](const auto* a, const auto* b) {
            return a->config.key.batch < b->config.key.batch;
        });
        const profile::ConfigKey& k = big->config.key;
        BarChart nt{"time per layer, " + config_name(k), "ms per step", "measured", {}, {"forward", "loss", "backward", "update"}, {}, {}};
        BarChart nj{"energy per layer, " + config_name(k), "mJ per step above idle", k.meter_kind, {}, nt.stacks, {}, {}};
        for (const profile::NodeRecord& n : db.nodes(k)) {
            std::vector<double> t(4, 0), j(4, 0);
            const size_t phase = size_t(std::find(nt.stacks.begin(), nt.stacks.end(), n.phase) - nt.stacks.begin());
            if (phase >= 4) continue;
            t[phase] = n.time_s * 1e3, j[phase] = n.energy_j * 1e3;
            nt.rows.push_back(n.node), nt.values.push_back(t), nt.modelled.push_back(false);
            nj.rows.push_back(n.node), nj.values.push_back(j), nj.modelled.push_back(k.meter_kind == "modelled");
        }
        keep_top(nt, 20), keep_top(nj, 20);
        s.figures.push_back(svg(nt));
        s.figures.push_back(svg(nj));
        s.text = std::to_string(configs.size()) + " configuration(s); time measured on the steady clock, energy " + tag_of(kinds) + " (meter: " +
                 big->config.meter + ").";
        r.sections.push_back(std::move(s));
        if (!predicted.device.empty()) r.sections.push_back(prediction_section(db, net, configs, predicted));
    }
    return r;
}

HtmlReport analyze_report(const nlohmann::json& j, const std::string& source) {
    if (!j.is_object() || j.value("schema", "") != "joule.analyze/1")
        throw Error(source + ": not the output of joule analyze --json (schema joule.analyze/1)", "make it with joule analyze ... --json > analyze.json");
    try {
        const nlohmann::json& results = j.at("results");
        if (!results.is_array()) throw Error(source + ": its results are not a list");
        HtmlReport r{"joule analyze report: " + j.at("net").get<std::string>() + ", batch " + std::to_string(j.at("batch").get<int64_t>()) + ", " +
                         j.at("dtype").get<std::string>(),
                     source, {}};
        if (results.empty()) {
            r.sections.push_back({"empty sweep", source + " holds no points of the memory-subsystem model, so there is nothing to plot.", {}});
            return r;
        }
        // what the sweep varies: capacity, else bandwidth (a single point: capacity)
        bool by_bandwidth = true;
        for (const nlohmann::json& x : results)
            by_bandwidth = by_bandwidth && x.at("capacity_bytes") == results[0].at("capacity_bytes") && results.size() > 1;
        const char* key = by_bandwidth ? "bandwidth_bytes_per_second" : "capacity_bytes";
        const double unit = by_bandwidth ? 1e9 : 1024.0 * 1024;
        const std::string x_label = by_bandwidth ? "off-chip bandwidth (GB/s)" : "on-chip capacity (MiB)";
        Series traffic{"read + written", {}, {}, true}, time{"iteration", {}, {}, true}, compute{"compute alone", {}, {}, true};
        BarChart types{"traffic per layer type", "GiB per iteration", "modelled", {}, {}, {}, {}};
        for (const auto& [t, v] : results[0].at("by_layer_type").items()) types.stacks.push_back(t);
        for (const nlohmann::json& x : results) {
            const double at = x.at(key).get<double>() / unit, bytes = x.at("read_bytes").get<double>() + x.at("write_bytes").get<double>();
            traffic.x.push_back(at), traffic.y.push_back(bytes / (1024.0 * 1024 * 1024));
            time.x.push_back(at), time.y.push_back(x.at("seconds").get<double>() * 1e3);
            compute.x.push_back(at), compute.y.push_back(x.at("compute_seconds").get<double>() * 1e3);
            char row[64];
            std::snprintf(row, sizeof row, by_bandwidth ? "%.0f GB/s" : "%.4g MiB", at);
            types.rows.push_back(row), types.modelled.push_back(true);
            std::vector<double> v;
            for (const std::string& t : types.stacks) {
                const nlohmann::json& b = x.at("by_layer_type").at(t);
                v.push_back((b.at("read_bytes").get<double>() + b.at("write_bytes").get<double>()) / (1024.0 * 1024 * 1024));
            }
            types.values.push_back(v);
        }
        LinePlot tp{"traffic per iteration", x_label, "GiB read and written off chip", "modelled", {traffic}, true};
        if (!by_bandwidth && results.size() > 1) {  // the knee: the smallest capacity removing 90 % of what capacity can remove
            const double lo = *std::max_element(traffic.y.begin(), traffic.y.end()), hi = *std::min_element(traffic.y.begin(), traffic.y.end());
            std::vector<size_t> order(traffic.x.size());
            for (size_t i = 0; i < order.size(); ++i) order[i] = i;
            std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return traffic.x[a] < traffic.x[b]; });
            for (size_t i : order)
                if (lo > hi && traffic.y[i] - hi <= 0.1 * (lo - hi)) {
                    tp.mark_x = traffic.x[i];
                    char label[64];
                    std::snprintf(label, sizeof label, "knee %.4g MiB", traffic.x[i]);
                    tp.mark_label = label;
                    break;
                }
        }
        HtmlSection s{by_bandwidth ? "bandwidth sweep" : "capacity sweep",
                      std::to_string(results.size()) + " point(s) of the memory-subsystem model (" + results[0].at("time_model").get<std::string>() +
                          " time model); everything here is modelled.",
                      {svg(tp), svg(LinePlot{"iteration time", x_label, "ms per iteration", "modelled", {time, compute}, true}), svg(types)}};
        r.sections.push_back(std::move(s));
        return r;
    } catch (const nlohmann::json::exception& e) {
        throw Error(source + ": not the output of joule analyze --json: " + e.what(), "make it with joule analyze ... --json > analyze.json");
    }
}

HtmlReport train_report(const nlohmann::json& j, const std::string& source) {
    if (!j.is_object() || j.value("schema", "") != "joule.train/1")
        throw Error(source + ": not the output of joule train --json (schema joule.train/1)", "make it with joule train --json > run.json");
    try {
        HtmlReport r{"joule train report: " + j.at("net").get<std::string>() + ", batch " + std::to_string(j.at("batch").get<int64_t>()), source, {}};
        HtmlSection s{"per layer", "", {}};
        BarChart time{"time per layer", "ms per step", j.at("timing").get<std::string>(), {}, {"forward", "backward", "update"}, {}, {}};
        const bool energy = j.contains("energy");
        const std::string energy_kind = energy ? j["energy"].at("kind").get<std::string>() : "";
        BarChart joules{"energy per layer", "mJ per step above idle", energy_kind, {}, time.stacks, {}, {}};
        for (const nlohmann::json& l : j.at("layers")) {
            const bool modelled = l.at("timing").get<std::string>() != "measured";
            time.rows.push_back(l.at("name").get<std::string>() + " (" + l.at("op").get<std::string>() + ")");
            time.values.push_back({l.at("forward_seconds").get<double>() * 1e3, l.at("backward_seconds").get<double>() * 1e3, l.at("update_seconds").get<double>() * 1e3});
            time.modelled.push_back(modelled);
            if (energy) {
                const nlohmann::json& e = l.at("joules");
                joules.rows.push_back(time.rows.back());
                joules.values.push_back({e.at("forward").get<double>() * 1e3, e.at("backward").get<double>() * 1e3, e.at("update").get<double>() * 1e3});
                joules.modelled.push_back(modelled || energy_kind == "modelled");
            }
        }
        keep_top(time, 25);
        s.figures.push_back(svg(time));
        if (energy) {
            keep_top(joules, 25);
            s.figures.push_back(svg(joules));
        }
        char step[32];
        std::snprintf(step, sizeof step, "%.3f", j.at("step_seconds").get<double>() * 1e3);
        s.text = "step " + std::string(step) + " ms of node time (" + j.at("timing").get<std::string>() + ")" +
                 (energy ? "; energy " + energy_kind + " (meter: " + j["energy"].at("meter").get<std::string>() + ")" : "; energy not recorded (train --energy)") + ".";
        r.sections.push_back(std::move(s));
        if (j.contains("placement")) {  // the plan's prediction beside what the run got, per device
            const nlohmann::json& p = j["placement"];
            BarChart d{"busy time per device: predicted (" + p.at("strategy").get<std::string>() + " on " + p.at("system").get<std::string>() + ") and got",
                       "ms per step", "measured and modelled", {}, {"busy"}, {}, {}};
            for (const nlohmann::json& x : p.at("predicted_devices")) {
                const std::string dev = x.at("device").get<std::string>();
                d.rows.push_back(dev + " predicted"), d.values.push_back({x.at("predicted_seconds").get<double>() * 1e3}), d.modelled.push_back(true);
                for (const nlohmann::json& got : j.at("devices"))
                    if (got.at("device") == dev)
                        d.rows.push_back(dev + " got"), d.values.push_back({got.at("seconds").get<double>() * 1e3}), d.modelled.push_back(got.at("timing") == "modelled");
            }
            r.sections.push_back({"predicted against what the run got", "The plan's simulated iteration lets devices overlap; the run executes one node at a time.", {svg(d)}});
        }
        return r;
    } catch (const nlohmann::json::exception& e) {
        throw Error(source + ": not the output of joule train --json: " + e.what(), "make it with joule train --json > run.json");
    }
}

}  // namespace joule
