// Test helpers: the finite-difference gradient check. A case builds a small graph whose differentiable
// inputs are Parameters; the harness seeds the output with a random tensor R (loss L = sum(Y * R)), runs
// the backward that autodiff emits on one device (every backend that runs here), and compares each
// parameter's gradient with central finite differences of L.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>

#include "backend/registry.hpp"
#include "graph/autodiff.hpp"
#include "plan/passes.hpp"
#include "runtime/executor.hpp"
#include "test_util.hpp"

namespace joule::test {

struct GradCase {
    std::string name;
    std::function<TensorId(Graph&)> build;                // returns the output Y
    std::function<void(Executor&, const Graph&)> fill = {};  // fills non-parameter inputs
    double eps = 1e-2, rtol = 2e-2, atol = 2e-3;
    int samples = 16;  // parameter elements checked per parameter
};

// gtest prints parameters by name, not as bytes.
inline void PrintTo(const GradCase& c, std::ostream* os) { *os << c.name; }

inline double weighted_sum(Executor& ex, TensorId y, TensorId r) {
    const std::vector<float> py = ex.read_f32(y), pr = ex.read_f32(r);
    double s = 0;
    for (size_t i = 0; i < py.size(); ++i) s += double(py[i]) * double(pr[i]);
    return s;
}

struct Prepared {
    Graph g;
    TensorId y = kNone, seed = kNone;
    std::map<TensorId, TensorId> grads;
};

inline Prepared prepare(const GradCase& c) {
    Prepared p;
    p.y = c.build(p.g);
    p.seed = p.g.constant("seed", p.g.tensor(p.y).desc, Init::normal(1.0f));  // same layout: the host sum pairs elements in memory order
    p.grads = differentiate(p.g, p.y, p.seed);
    return p;
}

// Every node on `device` in f32.
inline Plan device_plan(const std::string& device) {
    Plan plan;
    plan.name = "all on " + device;
    plan.default_device = device;
    return plan;
}

// The case's graph under `plan` (casts and transfers inserted), keeping Y and every gradient.
inline LoweredGraph lower_case(const Prepared& p, const Plan& plan) {
    TrainGraph tg;
    tg.graph = p.g;
    LowerOptions o;
    o.keep.push_back(p.y);
    for (auto& [t, g] : p.grads) o.keep.push_back(g);
    return lower(std::move(tg), plan, o);
}

inline ExecutorOptions seeded() {
    ExecutorOptions o;
    o.seed = 7;
    return o;
}

inline void check_gradients(const GradCase& c, const std::string& device) {
    SCOPED_TRACE(c.name + " on " + device);
    Prepared p = prepare(c);
    const LoweredGraph lg = lower_case(p, device_plan(device));
    BackendSet backends({.threads = 1});
    Executor ex(lg, backends, seeded());
    if (c.fill) c.fill(ex, p.g);
    ex.run_all();
    std::mt19937 rng(3);
    ASSERT_FALSE(p.grads.empty()) << "no gradients";
    for (auto& [param, grad] : p.grads) {
        if (p.g.tensor(param).role != TensorRole::Parameter) continue;
        const int64_t n = p.g.tensor(param).desc.numel();
        const std::vector<float> analytic = ex.read_f32(grad);
        float* w = ex.f32(param);
        for (int k = 0; k < std::min<int64_t>(c.samples, n); ++k) {
            const int64_t i = n <= c.samples ? k : int64_t(rng() % uint64_t(n));
            const float old = w[i];
            w[i] = old + float(c.eps);
            ex.run_forward({});
            const double lp = weighted_sum(ex, p.y, p.seed);
            w[i] = old - float(c.eps);
            ex.run_forward({});
            const double lm = weighted_sum(ex, p.y, p.seed);
            w[i] = old;
            const double numeric = (lp - lm) / (2 * c.eps);
            const double a = analytic[size_t(i)];
            EXPECT_NEAR(a, numeric, c.atol + c.rtol * std::max(std::fabs(a), std::fabs(numeric)))
                << "d/d " << p.g.tensor(param).name << "[" << i << "]";
        }
    }
}

}  // namespace joule::test
