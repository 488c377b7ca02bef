// Test helpers: the op-consistency harness. A case builds a small graph whose differentiable inputs are
// Parameters; the harness seeds the output with a random tensor R (loss L = sum(Y * R)), runs the
// backward that autodiff emits on the CPU backend, and compares each parameter's gradient with central
// finite differences of L.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>

#include "backend/cpu/cpu_backend.hpp"
#include "graph/autodiff.hpp"
#include "runtime/executor.hpp"
#include "test_util.hpp"

namespace joule::test {

struct GradCase {
    std::string name;
    std::function<TensorId(Graph&)> build;                // returns the output Y
    std::function<void(Executor&, const Graph&)> fill = {};  // fills non-parameter inputs
    double eps = 1e-2, rtol = 2e-2, atol = 2e-3;
    int samples = 16;  // parameter elements checked per parameter
    DType compute = DType::F32;
};

// gtest prints parameters by name, not as bytes.
inline void PrintTo(const GradCase& c, std::ostream* os) { *os << c.name; }

inline double weighted_sum(Executor& ex, TensorId y, TensorId r) {
    const int64_t n = ex.graph().tensor(y).desc.numel();
    const float* py = ex.f32(y);
    const float* pr = ex.f32(r);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += double(py[i]) * double(pr[i]);
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
    if (c.compute != DType::F32) apply_compute_precision(p.g, c.compute);
    return p;
}

inline ExecutorOptions keep_all(const Prepared& p) {
    ExecutorOptions o;
    o.keep.push_back(p.y);
    for (auto& [t, g] : p.grads) o.keep.push_back(g);
    o.seed = 7;
    return o;
}

inline void check_gradients(const GradCase& c) {
    SCOPED_TRACE(c.name);
    Prepared p = prepare(c);
    cpu::CpuBackend cpu(1);
    Executor ex(p.g, cpu, keep_all(p));
    if (c.fill) c.fill(ex, p.g);
    ex.run_all();
    std::mt19937 rng(3);
    ASSERT_FALSE(p.grads.empty()) << "no gradients";
    for (auto& [param, grad] : p.grads) {
        if (p.g.tensor(param).role != TensorRole::Parameter) continue;
        const int64_t n = p.g.tensor(param).desc.numel();
        std::vector<float> analytic(ex.f32(grad), ex.f32(grad) + n);
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
