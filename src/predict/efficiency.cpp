#include "predict/efficiency.hpp"

#include <yaml-cpp/yaml.h>

#include <array>
#include <cmath>
#include <fstream>
#include <limits>

#include "graph/error.hpp"
#include "hw/yaml_file.hpp"
#include "predict/memory_model.hpp"

namespace joule::predict {

namespace {

constexpr int kParams = 3;  // fixed, compute, memory
using Vec = std::array<double, kParams>;
using Mat = std::array<Vec, kParams>;

// Solves the normal equations restricted to the parameters in `mask`; false when singular.
bool solve_subset(const Mat& a, const Vec& b, unsigned mask, Vec* x) {
    int idx[kParams], n = 0;
    for (int i = 0; i < kParams; ++i)
        if (mask & (1u << i)) idx[n++] = i;
    double m[kParams][kParams + 1];
    for (int r = 0; r < n; ++r) {
        for (int c = 0; c < n; ++c) m[r][c] = a[size_t(idx[r])][size_t(idx[c])];
        m[r][n] = b[size_t(idx[r])];
    }
    for (int c = 0; c < n; ++c) {
        int p = c;
        for (int r = c + 1; r < n; ++r)
            if (std::fabs(m[r][c]) > std::fabs(m[p][c])) p = r;
        const double scale = std::fabs(a[size_t(idx[c])][size_t(idx[c])]);
        if (std::fabs(m[p][c]) <= 1e-12 * (scale > 0 ? scale : 1)) return false;
        for (int k = 0; k <= n; ++k) std::swap(m[c][k], m[p][k]);
        for (int r = 0; r < n; ++r)
            if (r != c) {
                const double f = m[r][c] / m[c][c];
                for (int k = c; k <= n; ++k) m[r][k] -= f * m[c][k];
            }
    }
    *x = {0, 0, 0};
    for (int r = 0; r < n; ++r) (*x)[size_t(idx[r])] = m[r][n] / m[r][r];
    return true;
}

// Non-negative least squares over three parameters from the normal equations (A = X'WX, b = X'Wy,
// yy = y'Wy): every active set is tried, the feasible one with the smallest residual wins.
double nnls3(const Mat& a, const Vec& b, double yy, Vec* best) {
    double best_rss = std::numeric_limits<double>::infinity();
    for (unsigned mask = 1; mask < (1u << kParams); ++mask) {
        Vec x;
        if (!solve_subset(a, b, mask, &x)) continue;
        bool feasible = true;
        for (double v : x) feasible = feasible && v >= 0;
        if (!feasible) continue;
        double rss = yy;
        for (int i = 0; i < kParams; ++i) {
            rss -= 2 * x[size_t(i)] * b[size_t(i)];
            for (int j = 0; j < kParams; ++j) rss += x[size_t(i)] * a[size_t(i)][size_t(j)] * x[size_t(j)];
        }
        if (rss < best_rss - 1e-15 * std::fabs(yy)) best_rss = rss, *best = x;
    }
    return best_rss;
}

double penalty(double m, double n, double k, double hm, double hn, double hk) {
    auto f = [](double d, double h) { return d > 0 ? 1 + h / d : 1.0; };
    return f(m, hm) * f(n, hn) * f(k, hk);
}

// One weighted fit of a kind: the best half dimensions and their non-negative scales.
KindEfficiency fit_weighted(const std::vector<const EfficiencySample*>& s, const std::vector<double>& w, bool gemm) {
    std::vector<double> halves = {0};
    if (gemm)
        for (double h = 1; h <= 1024; h *= 2) halves.push_back(h);
    KindEfficiency best;
    best.gemm = gemm;
    double best_rss = std::numeric_limits<double>::infinity();
    for (double hm : halves)
        for (double hn : halves)
            for (double hk : halves) {
                Mat a{};
                Vec b{};
                double yy = 0;
                for (size_t i = 0; i < s.size(); ++i) {
                    const double y = s[i]->measured_s;
                    const Vec x = {1.0, s[i]->compute_s * penalty(s[i]->m, s[i]->n, s[i]->k, hm, hn, hk), s[i]->memory_s};
                    for (int r = 0; r < kParams; ++r) {
                        b[size_t(r)] += w[i] * x[size_t(r)] * y;
                        for (int c = 0; c < kParams; ++c) a[size_t(r)][size_t(c)] += w[i] * x[size_t(r)] * x[size_t(c)];
                    }
                    yy += w[i] * y * y;
                }
                Vec x{};
                const double rss = nnls3(a, b, yy, &x);
                // strictly better (ties keep the smaller half dimensions, tried first)
                const bool better = std::isfinite(best_rss) ? rss < best_rss - 1e-9 * std::fabs(best_rss) : std::isfinite(rss);
                if (better) {
                    best_rss = rss;
                    best.fixed_s = x[0], best.compute_scale = x[1], best.memory_scale = x[2];
                    best.half_m = hm, best.half_n = hn, best.half_k = hk;
                }
            }
    if (!std::isfinite(best_rss)) best.fixed_s = 0, best.compute_scale = 0, best.memory_scale = 0;  // all-zero features and times
    return best;
}

// Squared weights per sample from a time per sample: relative (1 / t^2) or mixed (1 / (t t_step)).
template <typename TimeOf>
std::vector<double> weights(const std::vector<const EfficiencySample*>& s, TimeOf time_of, bool relative) {
    std::vector<double> w(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        const double t = std::max(time_of(*s[i]), 1e-7);
        w[i] = relative ? 1.0 / (t * t) : 1.0 / (t * std::max(s[i]->step_s, t));
    }
    return w;
}

KindEfficiency fit_kind(const std::vector<const EfficiencySample*>& all) {
    const bool gemm = all.front()->m > 0;
    auto measured = [](const EfficiencySample& x) { return x.measured_s; };
    // 1. A fit on relative error, where no single sample can weigh more than about one: a step slowed
    //    down by the machine (another process, a stolen core) leaves nodes measured several times slower
    //    than they are; those measured over 3x this fit's prediction are dropped as outliers.
    const KindEfficiency robust = fit_weighted(all, weights(all, measured, true), gemm);
    std::vector<const EfficiencySample*> s;
    for (const EfficiencySample* x : all)
        if (x->measured_s <= 3 * robust.seconds(x->compute_s, x->memory_s, x->m, x->n, x->k)) s.push_back(x);
    if (s.empty()) s = all;
    // 2. The mixed weights with the measured times, then once more with that fit's predictions:
    //    weighting by the measured time alone favours predictions below it.
    KindEfficiency best = fit_weighted(s, weights(s, measured, false), gemm);
    const KindEfficiency first = best;
    best = fit_weighted(s, weights(s, [&](const EfficiencySample& x) { return first.seconds(x.compute_s, x.memory_s, x.m, x.n, x.k); }, false), gemm);
    best.outliers = int64_t(all.size() - s.size());
    double dev = 0, total = 0;
    for (const EfficiencySample* x : s) {
        dev += std::fabs(best.seconds(x->compute_s, x->memory_s, x->m, x->n, x->k) - x->measured_s);
        total += x->measured_s;
    }
    best.samples = int64_t(all.size());
    best.error = total > 0 ? dev / total : 0;
    return best;
}

void check_number(double v, const std::string& what) {
    if (!std::isfinite(v) || v < 0) throw Error(what + " must be a finite, non-negative number (got " + std::to_string(v) + ")");
}

}  // namespace

double KindEfficiency::seconds(double compute_s, double memory_s, double m, double n, double k) const {
    const double p = gemm ? penalty(m, n, k, half_m, half_n, half_k) : 1.0;
    return fixed_s + compute_scale * p * compute_s + memory_scale * memory_s;
}

const KindEfficiency* EfficiencyModel::find(const std::string& key) const {
    auto it = kinds.find(key);
    return it == kinds.end() ? nullptr : &it->second;
}

std::vector<std::string> fit_warnings(const EfficiencyModel& m) {
    std::string few, dropped;
    for (const auto& [key, k] : m.kinds) {
        const int64_t params = k.gemm ? 6 : 3, used = k.samples - k.outliers;
        if (used < 2 * params)
            few += (few.empty() ? "" : ", ") + key + " (" + std::to_string(used) + (used == 1 ? " point, " : " points, ") + std::to_string(params) + " parameters)";
        if (k.samples > 0 && 2 * k.outliers > k.samples)
            dropped += (dropped.empty() ? "" : ", ") + key + " (" + std::to_string(k.outliers) + " of " + std::to_string(k.samples) + ")";
    }
    std::vector<std::string> out;
    if (!few.empty())
        out.push_back("fitted from fewer points than twice their parameters, so their curves can pass through the points and their error says little: " +
                      few + "; profile more batch sizes or nets");
    if (!dropped.empty())
        out.push_back("most points dropped as outliers (measured over 3x a robust first fit): " + dropped +
                      "; the machine was likely busy while profiling (re-run joule profile --force)");
    return out;
}

namespace {
std::string suffixed(std::string key, bool grouped, DType compute) {
    if (grouped) key += ".grouped";
    if (compute != DType::F32) key += std::string(".") + dtype_name(compute);
    return key;
}
}  // namespace

std::string efficiency_key(OpKind kind, bool grouped, DType compute) { return suffixed(op_name(kind), grouped, compute); }

std::string efficiency_key(const Graph& g, NodeId id) {
    GemmShape s;
    return efficiency_key(g.node(id).kind, gemm_shape(g, id, &s) && s.count > 1, g.node(id).compute);
}

const KindEfficiency* EfficiencyModel::lookup(OpKind kind, bool gemm, bool grouped, DType compute) const {
    if (const KindEfficiency* k = find(efficiency_key(kind, grouped, compute))) return k;
    return find(suffixed(gemm ? "gemm" : "other", grouped, compute));
}

const KindEfficiency* EfficiencyModel::lookup(const Graph& g, NodeId id, DType compute) const {
    GemmShape s;
    const bool gemm = gemm_shape(g, id, &s);
    return lookup(g.node(id).kind, gemm, gemm && s.count > 1, compute);
}

EfficiencyModel fit_efficiency(const std::vector<EfficiencySample>& samples) {
    if (samples.empty()) throw Error("efficiency fit: no samples", "profile some configurations first (joule profile)");
    std::map<std::string, std::vector<const EfficiencySample*>> by_key;
    for (const EfficiencySample& s : samples) {
        const std::string where = "efficiency sample of '" + s.key + "': ";
        check_number(s.compute_s, where + "compute time");
        check_number(s.memory_s, where + "memory time");
        check_number(s.measured_s, where + "measured time");
        check_number(s.step_s, where + "step time");
        check_number(s.m, where + "M");
        check_number(s.n, where + "N");
        check_number(s.k, where + "K");
        auto& v = by_key[s.key];
        if (!v.empty() && (v.front()->m > 0) != (s.m > 0)) throw Error(where + "mixes GEMM and non-GEMM nodes under one kind");
        v.push_back(&s);
    }
    EfficiencyModel m;
    for (const auto& [key, v] : by_key) m.kinds[key] = fit_kind(v);
    return m;
}

void save_efficiency(const EfficiencyModel& m, const std::string& path) {
    YAML::Emitter y;
    y.SetDoublePrecision(9);
    y << YAML::BeginMap << YAML::Key << "version" << YAML::Value << 1 << YAML::Key << "kind" << YAML::Value << "efficiency";
    y << YAML::Key << "fitted_from" << YAML::Value << m.fitted_from;
    y << YAML::Key << "traffic" << YAML::Value << m.traffic;
    y << YAML::Key << "hardware" << YAML::Value << YAML::BeginMap;
    y << YAML::Key << "capacity_bytes" << YAML::Value << m.hardware.capacity_bytes;
    y << YAML::Key << "bandwidth_bytes_per_s" << YAML::Value << m.hardware.bandwidth_bytes_per_s;
    y << YAML::Key << "peak_f32_flops" << YAML::Value << m.hardware.peak_f32_flops;
    y << YAML::Key << "peak_bf16_flops" << YAML::Value << m.hardware.peak_bf16_flops;
    y << YAML::Key << "node_overhead_s" << YAML::Value << m.hardware.node_overhead_s << YAML::EndMap;
    y << YAML::Key << "kinds" << YAML::Value << YAML::BeginMap;
    for (const auto& [key, k] : m.kinds) {
        y << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap;
        y << YAML::Key << "fixed_s" << YAML::Value << k.fixed_s << YAML::Key << "compute_scale" << YAML::Value << k.compute_scale;
        y << YAML::Key << "memory_scale" << YAML::Value << k.memory_scale;
        if (k.gemm)
            y << YAML::Key << "half_m" << YAML::Value << k.half_m << YAML::Key << "half_n" << YAML::Value << k.half_n << YAML::Key << "half_k"
              << YAML::Value << k.half_k;
        y << YAML::Key << "samples" << YAML::Value << k.samples << YAML::Key << "outliers" << YAML::Value << k.outliers << YAML::Key << "error"
          << YAML::Value << k.error << YAML::EndMap;
    }
    y << YAML::EndMap << YAML::EndMap;
    std::ofstream f(path);
    if (!f) throw Error(path + ": cannot write the efficiency file");
    f << "# joule efficiency curves: time = fixed_s + compute_scale * (1 + half_m/M)(1 + half_n/N)(1 + half_k/K) * compute\n"
         "# + memory_scale * memory, relative to the memory model's roofline terms on `hardware` (see predict/efficiency.hpp)\n"
      << y.c_str() << "\n";
    if (!f) throw Error(path + ": writing the efficiency file failed");
}

namespace {
// OP[.grouped][.bf16|.f16], OP an op name (the keys efficiency_key() makes) or a generic class (gemm,
// other).
bool valid_kind_key(const std::string& key) {
    const std::string op = key.substr(0, key.find('.'));
    bool known = op == "gemm" || op == "other";
    for (int k = 0; k < int(OpKind::Count) && !known; ++k) known = op == op_name(OpKind(k));
    if (!known) return false;
    std::string rest = key.substr(op.size());
    if (rest.rfind(".grouped", 0) == 0) rest.erase(0, 8);
    return rest.empty() || rest == ".bf16" || rest == ".f16";
}
}  // namespace

EfficiencyModel load_efficiency(const std::string& path) try {
    const YAML::Node y = hw::load_versioned_yaml(path, "the efficiency file", "write one with joule calibrate");
    auto at = [&](const YAML::Node& n) { return hw::yaml_where(path, n); };
    if (!y["kind"] || y["kind"].as<std::string>() != "efficiency") throw Error(path + ": 'kind: efficiency' missing; is this an efficiency file?");
    auto number = [&](const YAML::Node& n, const std::string& key) {
        double v = 0;
        try {
            v = n.as<double>();
        } catch (const YAML::Exception&) {
            throw Error(at(n) + ": '" + key + "' must be a number");
        }
        check_number(v, at(n) + ": '" + key + "'");
        return v;
    };
    EfficiencyModel m;
    m.path = path;
    if (y["fitted_from"]) m.fitted_from = y["fitted_from"].as<std::string>();
    if (y["traffic"]) {
        m.traffic = y["traffic"].as<std::string>();
        if (m.traffic != "in-context" && m.traffic != "cold") throw Error(at(y["traffic"]) + ": 'traffic' must be in-context or cold, not '" + m.traffic + "'");
    }
    const YAML::Node hw = y["hardware"];
    if (!hw || !hw.IsMap()) throw Error(path + ": missing 'hardware' map (the roofline the scales are relative to)");
    struct Field {
        const char* key;
        double* value;
        bool required;
    };
    const Field hw_fields[] = {{"capacity_bytes", &m.hardware.capacity_bytes, true},
                               {"bandwidth_bytes_per_s", &m.hardware.bandwidth_bytes_per_s, true},
                               {"peak_f32_flops", &m.hardware.peak_f32_flops, true},
                               {"peak_bf16_flops", &m.hardware.peak_bf16_flops, false},
                               {"node_overhead_s", &m.hardware.node_overhead_s, false}};
    for (const Field& f : hw_fields) {
        if (!hw[f.key]) {
            if (f.required) throw Error(at(hw) + ": hardware needs '" + f.key + "'");
            continue;
        }
        *f.value = number(hw[f.key], f.key);
    }
    if (m.hardware.bandwidth_bytes_per_s <= 0 || m.hardware.peak_f32_flops <= 0)
        throw Error(at(hw) + ": hardware bandwidth and peak must be positive");
    const YAML::Node kinds = y["kinds"];
    if (!kinds || !kinds.IsMap() || kinds.size() == 0) throw Error(path + ": 'kinds' must be a non-empty map of op kinds");
    for (auto it = kinds.begin(); it != kinds.end(); ++it) {
        const std::string key = it->first.as<std::string>();
        const YAML::Node v = it->second;
        if (!valid_kind_key(key))
            throw Error(at(it->first) + ": unknown op kind '" + key + "'",
                        "a kind is an op name (e.g. Conv2d, ConvBackwardWeights, Linear) with optional .grouped and .bf16 / .f16 suffixes, as joule calibrate writes");
        if (!v.IsMap()) throw Error(at(v) + ": kind '" + key + "' must be a map");
        KindEfficiency k;
        k.gemm = bool(v["half_m"]);
        const Field fields[] = {{"fixed_s", &k.fixed_s, true},  {"compute_scale", &k.compute_scale, true}, {"memory_scale", &k.memory_scale, true},
                                {"half_m", &k.half_m, k.gemm},  {"half_n", &k.half_n, k.gemm},            {"half_k", &k.half_k, k.gemm},
                                {"error", &k.error, false}};
        for (auto f = v.begin(); f != v.end(); ++f) {
            const std::string name = f->first.as<std::string>();
            bool known = name == "samples" || name == "outliers";
            for (const Field& x : fields) known = known || name == x.key;
            if (!known) throw Error(at(f->first) + ": kind '" + key + "': unknown key '" + name + "'");
        }
        for (const Field& f : fields) {
            if (!v[f.key]) {
                if (f.required) throw Error(at(v) + ": kind '" + key + "' needs '" + f.key + "'");
                continue;
            }
            *f.value = number(v[f.key], key + "." + f.key);
        }
        if (v["samples"]) k.samples = int64_t(number(v["samples"], key + ".samples"));
        if (v["outliers"]) k.outliers = int64_t(number(v["outliers"], key + ".outliers"));
        m.kinds[key] = k;
    }
    // Curves set from published figures (not fitted here) cite them per kind, like data/hw specs.
    if (const YAML::Node sources = y["sources"]) {
        if (!sources.IsMap()) throw Error(at(sources) + ": 'sources' must map kinds (or 'hardware') to where their figures come from");
        for (auto it = sources.begin(); it != sources.end(); ++it) {
            const std::string key = it->first.as<std::string>();
            if (key != "hardware" && !m.kinds.count(key)) throw Error(at(it->first) + ": 'sources' cites '" + key + "', which 'kinds' does not have");
            m.sources[key] = it->second.as<std::string>();
        }
        for (const auto& [key, k] : m.kinds)
            if (!m.sources.count(key)) throw Error(path + ": kind '" + key + "' has no entry in 'sources'", "a file with sources cites every kind");
    }
    return m;
} catch (const YAML::Exception& e) {
    hw::yaml_error(path, e, "efficiency file");
}

}  // namespace joule::predict
