// backend/cpu: every op's forward against a naive reference (logical indexing, so nhwc storage is
// checked too), BatchNorm training/eval semantics, bf16 against f32, and supports().
#include <gtest/gtest.h>
#include <sched.h>

#include <omp.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>

#include "backend/cpu/cores.hpp"
#include "backend/cpu/kernels.hpp"
#include "backend/cpu/cpu_backend.hpp"
#include "graph/autodiff.hpp"
#include "graph/bf16.hpp"
#include "graph/error.hpp"
#include "backend/registry.hpp"
#include "data/dataset.hpp"
#include "plan/passes.hpp"
#include "runtime/executor.hpp"
#include "runtime/trainer.hpp"
#include "zoo/zoo.hpp"

namespace joule {
namespace {

// Element offset of a logical index in a tensor's storage.
int64_t offset(const TensorDesc& d, const std::vector<int64_t>& idx) {
    if (d.layout == Layout::ChannelsLast) {
        const auto& s = d.shape;
        return ((idx.at(0) * s.at(2) + idx.at(2)) * s.at(3) + idx.at(3)) * s.at(1) + idx.at(1);
    }
    int64_t o = 0;
    for (size_t i = 0; i < idx.size(); ++i) o = o * d.shape[i] + idx[i];
    return o;
}

// Calls f(index) for every logical index of shape s.
void for_each_index(const Shape& s, const std::function<void(const std::vector<int64_t>&)>& f) {
    std::vector<int64_t> idx(s.size(), 0);
    const int64_t n = TensorDesc{s}.numel();
    for (int64_t k = 0; k < n; ++k) {
        f(idx);
        for (size_t d = s.size(); d-- > 0;) {
            if (++idx[d] < s[d]) break;
            idx[d] = 0;
        }
    }
}

struct OpRun {
    Graph g;
    std::unique_ptr<cpu::CpuBackend> cpu;
    std::unique_ptr<Executor> ex;
    float at(TensorId t, const std::vector<int64_t>& i) { return ex->f32(t)[offset(g.tensor(t).desc, i)]; }
    void start(std::vector<TensorId> keep) {
        cpu = std::make_unique<cpu::CpuBackend>(2);
        ex = std::make_unique<Executor>(g, *cpu, ExecutorOptions{keep, 11});
    }
};

TensorId rand_param(Graph& g, const std::string& n, Shape s, Layout l = Layout::Plain) {
    return g.parameter(n, {std::move(s), DType::F32, l}, Init::normal(1.0f));
}

TEST(CpuForward, ConvMatchesReference) {
    OpRun r;
    ConvAttrs a;
    a.stride[0] = 2, a.stride[1] = 1;
    a.pad[0] = 1, a.pad[1] = 2;
    a.dilation[0] = 1, a.dilation[1] = 2;
    a.groups = 2;
    a.bias = true;
    const TensorId x = rand_param(r.g, "x", {2, 4, 7, 6}, Layout::ChannelsLast), w = rand_param(r.g, "w", {6, 2, 3, 3}),
                   b = rand_param(r.g, "b", {6});
    const TensorId y = r.g.add1(OpKind::Conv2d, a, {x, w, b}, "conv");
    r.start({y});
    r.ex->run_all();
    const Shape ys = r.g.tensor(y).desc.shape;
    for_each_index(ys, [&](const std::vector<int64_t>& i) {
        const int64_t n = i[0], o = i[1], oh = i[2], ow = i[3], cpg = 2, g = o / 3;
        double s = r.at(b, {o});
        for (int64_t c = 0; c < cpg; ++c)
            for (int64_t kh = 0; kh < 3; ++kh)
                for (int64_t kw = 0; kw < 3; ++kw) {
                    const int64_t ih = oh * 2 - 1 + kh, iw = ow - 2 + kw * 2;
                    if (ih < 0 || ih >= 7 || iw < 0 || iw >= 6) continue;
                    s += double(r.at(x, {n, g * cpg + c, ih, iw})) * r.at(w, {o, c, kh, kw});
                }
        EXPECT_NEAR(r.at(y, i), s, 1e-4);
    });
}

TEST(CpuForward, PoolingMatchesReference) {
    OpRun r;
    PoolAttrs p;
    p.kernel[0] = p.kernel[1] = 3;
    p.stride[0] = p.stride[1] = 2;
    p.pad[0] = p.pad[1] = 1;
    const TensorId x = rand_param(r.g, "x", {2, 3, 7, 7}, Layout::ChannelsLast);
    const TensorId mx = r.g.add1(OpKind::MaxPool2d, p, {x}, "max");
    const TensorId av = r.g.add1(OpKind::AvgPool2d, p, {x}, "avg");
    const TensorId gp = r.g.add1(OpKind::GlobalAvgPool, NoAttrs{}, {x}, "gap");
    r.start({mx, av, gp});
    r.ex->run_all();
    for_each_index(r.g.tensor(mx).desc.shape, [&](const std::vector<int64_t>& i) {
        double best = -1e30, sum = 0;
        for (int64_t kh = 0; kh < 3; ++kh)
            for (int64_t kw = 0; kw < 3; ++kw) {
                const int64_t ih = i[2] * 2 - 1 + kh, iw = i[3] * 2 - 1 + kw;
                if (ih < 0 || ih >= 7 || iw < 0 || iw >= 7) continue;
                best = std::max(best, double(r.at(x, {i[0], i[1], ih, iw})));
                sum += r.at(x, {i[0], i[1], ih, iw});
            }
        EXPECT_FLOAT_EQ(r.at(mx, i), float(best));
        EXPECT_NEAR(r.at(av, i), sum / 9, 1e-5);  // padding counts, as in PyTorch
    });
    for_each_index({2, 3}, [&](const std::vector<int64_t>& i) {
        double s = 0;
        for_each_index({7, 7}, [&](const std::vector<int64_t>& hw) { s += r.at(x, {i[0], i[1], hw[0], hw[1]}); });
        EXPECT_NEAR(r.at(gp, {i[0], i[1], 0, 0}), s / 49, 1e-5);
    });
}

TEST(CpuForward, LinearMatMulSoftmaxLossEmbedding) {
    OpRun r;
    const TensorId x = rand_param(r.g, "x", {3, 5}), w = rand_param(r.g, "w", {4, 5}), b = rand_param(r.g, "b", {4});
    const TensorId fc = r.g.add1(OpKind::Linear, LinearAttrs{true}, {x, w, b}, "fc");
    const TensorId A = rand_param(r.g, "A", {2, 3, 4}), B = rand_param(r.g, "B", {2, 5, 4});
    const TensorId mm = r.g.add1(OpKind::MatMul, MatMulAttrs{false, true, 0.5f}, {A, B}, "mm");
    const TensorId sm = r.g.add1(OpKind::Softmax, AxisAttrs{-1}, {fc}, "sm");
    const TensorId labels = r.g.input("labels", {{3}, DType::I32}, TensorRole::Label);
    const auto sce = r.g.add(OpKind::SoftmaxCrossEntropy, NoAttrs{}, {fc, labels}, "loss");
    const TensorId ids = r.g.input("ids", {{4}, DType::I32});
    const TensorId table = rand_param(r.g, "table", {6, 3});
    const TensorId emb = r.g.add1(OpKind::Embedding, NoAttrs{}, {ids, table}, "emb");
    r.start({fc, mm, sm, sce[0], sce[1], emb});
    const int32_t lab[] = {1, 0, 3}, id[] = {5, 0, 5, 2};
    std::copy(lab, lab + 3, r.ex->i32(labels));
    std::copy(id, id + 4, r.ex->i32(ids));
    r.ex->run_all();
    double loss = 0;
    for (int64_t i = 0; i < 3; ++i) {
        double z[4], mx = -1e30, s = 0;
        for (int64_t o = 0; o < 4; ++o) {
            z[o] = r.at(b, {o});
            for (int64_t k = 0; k < 5; ++k) z[o] += double(r.at(x, {i, k})) * r.at(w, {o, k});
            EXPECT_NEAR(r.at(fc, {i, o}), z[o], 1e-4);
            mx = std::max(mx, z[o]);
        }
        for (double v : z) s += std::exp(v - mx);
        for (int64_t o = 0; o < 4; ++o) {
            EXPECT_NEAR(r.at(sm, {i, o}), std::exp(z[o] - mx) / s, 1e-5);
            EXPECT_NEAR(r.at(sce[1], {i, o}), std::exp(z[o] - mx) / s, 1e-5);
        }
        loss += std::log(s) + mx - z[lab[i]];
    }
    EXPECT_NEAR(r.ex->f32(sce[0])[0], loss / 3, 1e-4);
    for_each_index({2, 3, 5}, [&](const std::vector<int64_t>& i) {
        double s = 0;
        for (int64_t k = 0; k < 4; ++k) s += double(r.at(A, {i[0], i[1], k})) * r.at(B, {i[0], i[2], k});
        EXPECT_NEAR(r.at(mm, i), 0.5 * s, 1e-4);
    });
    for_each_index({4, 3}, [&](const std::vector<int64_t>& i) { EXPECT_EQ(r.at(emb, i), r.at(table, {id[i[0]], i[1]})); });
}

TEST(CpuForward, NormalisationTrainAndEval) {
    OpRun r;
    const TensorId x = rand_param(r.g, "x", {4, 3, 2, 5}, Layout::ChannelsLast);
    const TensorId gamma = rand_param(r.g, "gamma", {3}), beta = rand_param(r.g, "beta", {3});
    const TensorId rm = r.g.state("rm", {{3}}, Init::zeros()), rv = r.g.state("rv", {{3}}, Init::ones());
    const TensorId y = r.g.add(OpKind::BatchNorm2d, NormAttrs{1e-5f, 0.1f}, {x, gamma, beta, rm, rv}, "bn")[0];
    const TensorId lx = rand_param(r.g, "lx", {2, 6}), lg = rand_param(r.g, "lg", {6}), lb = rand_param(r.g, "lb", {6});
    const TensorId ln = r.g.add(OpKind::LayerNorm, NormAttrs{1e-5f, 0}, {lx, lg, lb}, "ln")[0];
    r.start({y, ln});
    r.ex->run_all({.training = true});
    for (int64_t c = 0; c < 3; ++c) {
        double m = 0, v = 0;
        for_each_index({4, 2, 5}, [&](const std::vector<int64_t>& i) { m += r.at(x, {i[0], c, i[1], i[2]}); });
        m /= 40;
        for_each_index({4, 2, 5}, [&](const std::vector<int64_t>& i) { v += std::pow(r.at(x, {i[0], c, i[1], i[2]}) - m, 2); });
        const double var = v / 40;
        for_each_index({4, 2, 5}, [&](const std::vector<int64_t>& i) {
            const double want = r.at(gamma, {c}) * (r.at(x, {i[0], c, i[1], i[2]}) - m) / std::sqrt(var + 1e-5) + r.at(beta, {c});
            EXPECT_NEAR(r.at(y, {i[0], c, i[1], i[2]}), want, 1e-4);
        });
        // running statistics as PyTorch: momentum 0.1, unbiased variance
        EXPECT_NEAR(r.ex->f32(rm)[c], 0.1 * m, 1e-5);
        EXPECT_NEAR(r.ex->f32(rv)[c], 0.9 + 0.1 * v / 39, 1e-5);
    }
    for (int64_t i = 0; i < 2; ++i) {
        double m = 0, v = 0;
        for (int64_t k = 0; k < 6; ++k) m += r.at(lx, {i, k}) / 6.0;
        for (int64_t k = 0; k < 6; ++k) v += std::pow(r.at(lx, {i, k}) - m, 2) / 6.0;
        for (int64_t k = 0; k < 6; ++k)
            EXPECT_NEAR(r.at(ln, {i, k}), r.at(lg, {k}) * (r.at(lx, {i, k}) - m) / std::sqrt(v + 1e-5) + r.at(lb, {k}), 1e-4);
    }
    // eval uses the running statistics
    r.ex->run_forward({.training = false});
    const int64_t c = 1;
    const double want = r.at(gamma, {c}) * (r.at(x, {0, c, 0, 0}) - r.ex->f32(rm)[c]) / std::sqrt(r.ex->f32(rv)[c] + 1e-5) + r.at(beta, {c});
    EXPECT_NEAR(r.at(y, {0, c, 0, 0}), want, 1e-4);
}

TEST(CpuForward, EltwiseAndDataMovement) {
    OpRun r;
    const TensorId x = r.g.parameter("x", {{2, 3, 2, 2}, DType::F32, Layout::ChannelsLast}, Init::normal(5.0f));
    const TensorId relu6 = r.g.add1(OpKind::Relu6, NoAttrs{}, {x}, "relu6");
    const TensorId gelu = r.g.add1(OpKind::Gelu, NoAttrs{}, {x}, "gelu");
    const TensorId sig = r.g.add1(OpKind::Sigmoid, NoAttrs{}, {x}, "sig");
    const TensorId flat = r.g.add1(OpKind::Reshape, ReshapeAttrs{{2, 12}}, {x}, "flat");
    const TensorId p = rand_param(r.g, "p", {2, 3, 4});
    const TensorId t = r.g.add1(OpKind::Transpose, TransposeAttrs{{2, 0, 1}}, {p}, "t");
    const TensorId q = rand_param(r.g, "q", {2, 1, 4});
    const TensorId cat = r.g.add1(OpKind::Concat, AxisAttrs{1}, {p, q}, "cat");
    const TensorId sl = r.g.add1(OpKind::Slice, SliceAttrs{2, 1, 2}, {p}, "slice");
    r.start({relu6, gelu, sig, flat, t, cat, sl});
    r.ex->run_all();
    for_each_index({2, 3, 2, 2}, [&](const std::vector<int64_t>& i) {
        const double v = r.at(x, i);
        EXPECT_NEAR(r.at(relu6, i), std::min(std::max(v, 0.0), 6.0), 1e-6);
        EXPECT_NEAR(r.at(gelu, i), 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-4);
        EXPECT_NEAR(r.at(sig, i), 1 / (1 + std::exp(-v)), 1e-5);
        EXPECT_EQ(r.at(flat, {i[0], (i[1] * 2 + i[2]) * 2 + i[3]}), r.at(x, i));  // logical (NCHW) order
    });
    for_each_index({2, 3, 4}, [&](const std::vector<int64_t>& i) {
        EXPECT_EQ(r.at(t, {i[2], i[0], i[1]}), r.at(p, i));
        EXPECT_EQ(r.at(cat, i), r.at(p, i));
    });
    for_each_index({2, 4}, [&](const std::vector<int64_t>& i) { EXPECT_EQ(r.at(cat, {i[0], 3, i[1]}), r.at(q, {i[0], 0, i[1]})); });
    for_each_index({2, 3, 2}, [&](const std::vector<int64_t>& i) { EXPECT_EQ(r.at(sl, i), r.at(p, {i[0], i[1], i[2] + 1})); });
}

TEST(CpuForward, DropoutMaskAndEval) {
    OpRun r;
    const TensorId x = r.g.parameter("x", {{64, 256}}, Init::ones());
    const auto d = r.g.add(OpKind::Dropout, DropoutAttrs{0.25f, 5}, {x}, "drop");
    r.start({d[0], d[1]});
    r.ex->run_all();
    int64_t zeros = 0;
    const int64_t n = 64 * 256;
    for (int64_t i = 0; i < n; ++i) {
        const float m = r.ex->f32(d[1])[i];
        EXPECT_TRUE(m == 0.0f || std::fabs(m - 1 / 0.75f) < 1e-6);
        EXPECT_EQ(r.ex->f32(d[0])[i], m);
        zeros += m == 0.0f;
    }
    EXPECT_NEAR(double(zeros) / double(n), 0.25, 0.02);
    std::vector<float> first(r.ex->f32(d[1]), r.ex->f32(d[1]) + n);
    r.ex->run_all({.training = true, .run = 1});
    EXPECT_NE(first, std::vector<float>(r.ex->f32(d[1]), r.ex->f32(d[1]) + n)) << "a new mask every run (RunContext::run)";
    r.ex->run_forward({.training = false});
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(r.ex->f32(d[0])[i], 1.0f);
}

// A dtype-only cast (the cpu's own loop) rounds as graph/bf16.hpp says and as oneDNN's reorder does, on the
// values where rounding is delicate (ties to even, NaN, infinities, signed zeros, the largest finite floats),
// on two threads with chunks that split a vector; bf16 -> f32 gives back exactly what was stored. The one
// difference: subnormal floats, which oneDNN's AVX512-BF16 conversion flushes to zero and bf16.hpp (the
// reference backend's rounding too) rounds. Both loops: an activation's, and a parameter's copy larger than
// the caches (kStreamBytes: non-temporal stores, an unaligned head and a tail).
class DtypeCast : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(CpuBackend, DtypeCast, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "LargeParameter" : "Activation"; });
TEST_P(DtypeCast, RoundsAsOneDnn) {
    const bool parameter = GetParam();
    std::vector<float> v = {0.0f, -0.0f, 1.0f, 1.00390625f, 1.01171875f, -1.00390625f, 3.0e38f, -3.4028235e38f, 1e-40f, -1e-45f,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()};
    uint32_t snan = 0x7f800001u;  // a signalling NaN: kept a NaN, made quiet
    v.push_back(std::bit_cast<float>(snan));
    std::mt19937 rng(3);
    std::uniform_int_distribution<uint32_t> bits;
    // every exponent; an odd count, and enough (240 kB each way) that the casts are not small nodes but split
    // between the two threads
    const size_t count = parameter ? size_t(cpu::kStreamBytes / 2 + 4099) : 40001;
    while (v.size() < count) v.push_back(std::bit_cast<float>(bits(rng)));
    const int64_t n = int64_t(v.size());
    OpRun r;
    const TensorId x = parameter ? r.g.parameter("x", {{n}, DType::F32, Layout::Plain}, Init::zeros()) : r.g.input("x", {{n}});
    const TensorId h = r.g.add1(OpKind::Cast, CastAttrs{DType::BF16}, {x}, "to_bf16");
    const TensorId y = r.g.add1(OpKind::Cast, CastAttrs{DType::F32}, {h}, "to_f32");
    r.start({h, y});
    std::memcpy(r.ex->data(x), v.data(), v.size() * 4);
    r.ex->run_forward({.training = false});
    // oneDNN's reorder on the same values
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream st(eng);
    std::vector<uint16_t> want(v.size());
    dnnl::memory from({{n}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a}, eng, v.data()),
        to({{n}, dnnl::memory::data_type::bf16, dnnl::memory::format_tag::a}, eng, want.data());
    dnnl::reorder(from, to).execute(st, from, to);
    st.wait();
    const auto* got = static_cast<const uint16_t*>(r.ex->data(h));
    const auto* back = static_cast<const uint32_t*>(r.ex->data(y));
    int subnormals = 0;
    for (int64_t i = 0; i < n; ++i) {
        const uint32_t u = std::bit_cast<uint32_t>(v[size_t(i)]);
        ASSERT_EQ(got[i], f32_to_bf16(v[size_t(i)])) << "element " << i;
        if ((u & 0x7f800000u) == 0 && (u & 0x007fffffu) != 0) {  // oneDNN's AVX512-BF16 conversion flushes subnormals to zero
            ASSERT_EQ(want[i] & 0x7fffu, 0u) << "element " << i;
            ++subnormals;
        } else {
            ASSERT_EQ(got[i], want[i]) << "element " << i << " (bits " << std::hex << u << ")";
        }
        ASSERT_EQ(back[i], uint32_t(got[i]) << 16) << "element " << i;
    }
    EXPECT_GT(subnormals, 2);
}

// GELU and its backward (the cpu backend's loops: A & S 7.1.26 erf, a polynomial exp) against the erf form
// in double, far tighter than the op harness's tolerance: over [-14, 14] (past exp's clamp at -87 = -(13.2)^2 / 2),
// on two threads, each within 3e-7 of max(1, |x|) (GELU) or of max(1, |dy|) (backward); NaN stays NaN.
TEST(CpuBackend, GeluIsCloseToTheErfForm) {
    std::vector<float> v;
    for (int i = 0; i <= 56000; ++i) v.push_back(-14.0f + float(i) * 0.0005f);
    v.push_back(0.0f);
    v.push_back(-0.0f);
    v.push_back(std::numeric_limits<float>::quiet_NaN());
    const int64_t n = int64_t(v.size());
    OpRun r;
    const TensorId x = r.g.input("x", {{n}}), dy = r.g.input("dy", {{n}});
    const TensorId y = r.g.add1(OpKind::Gelu, NoAttrs{}, {x}, "gelu");
    const TensorId dx = r.g.add1(OpKind::GeluBackward, NoAttrs{}, {dy, x}, "gelu.bwd");
    r.start({y, dx});
    std::vector<float> grad(v.size());
    for (size_t i = 0; i < grad.size(); ++i) grad[i] = 1.0f - 0.25f * float(i % 9);  // in [-1, 1]
    std::memcpy(r.ex->data(x), v.data(), v.size() * 4);
    std::memcpy(r.ex->data(dy), grad.data(), grad.size() * 4);
    r.ex->run_forward({.training = false});
    const auto* got_y = static_cast<const float*>(r.ex->data(y));
    const auto* got_dx = static_cast<const float*>(r.ex->data(dx));
    for (int64_t i = 0; i < n; ++i) {
        const double s = v[size_t(i)], cdf = 0.5 * (1.0 + std::erf(s / std::sqrt(2.0)));
        if (std::isnan(s)) {
            EXPECT_TRUE(std::isnan(got_y[i]) && std::isnan(got_dx[i])) << "element " << i;
            continue;
        }
        const double want_y = s * cdf, want_dx = grad[size_t(i)] * (cdf + s * std::exp(-0.5 * s * s) / std::sqrt(2.0 * M_PI));
        ASSERT_NEAR(got_y[i], want_y, 3e-7 * std::max(1.0, std::abs(s))) << "GELU(" << s << ")";
        ASSERT_NEAR(got_dx[i], want_dx, 3e-7 * std::max(1.0, std::abs(double(grad[size_t(i)])))) << "GELU'(" << s << ")";
    }
}

// bf16 conv / linear / matmul: outputs and gradients within bf16 rounding of f32.
double relative_l2(const float* a, const float* b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) num += std::pow(double(a[i]) - b[i], 2), den += double(b[i]) * b[i];
    return std::sqrt(num / std::max(den, 1e-30));
}

TEST(CpuBf16, GemmOpsTrackF32) {
    auto build = [](Graph& g) {
        ConvAttrs a;
        a.pad[0] = a.pad[1] = 1;
        a.bias = true;
        const TensorId x = g.parameter("x", {{2, 8, 6, 6}, DType::F32, Layout::ChannelsLast}, Init::normal(1));
        TensorId y = g.add1(OpKind::Conv2d, a, {x, g.parameter("w", {{16, 8, 3, 3}}, Init::normal(0.2f)), g.parameter("b", {{16}}, Init::normal(1))}, "conv");
        y = g.add1(OpKind::Reshape, ReshapeAttrs{{2, -1}}, {y}, "flat");
        y = g.add1(OpKind::Linear, LinearAttrs{true}, {y, g.parameter("fw", {{12, 576}}, Init::normal(0.05f)), g.parameter("fb", {{12}}, Init::zeros())}, "fc");
        y = g.add1(OpKind::Reshape, ReshapeAttrs{{2, 3, 4}}, {y}, "r");
        y = g.add1(OpKind::MatMul, MatMulAttrs{true, false, 1.0f}, {y, g.parameter("m", {{2, 3, 5}}, Init::normal(1))}, "mm");
        return y;
    };
    std::vector<std::vector<float>> results[2];
    for (int prec = 0; prec < 2; ++prec) {
        Graph g;
        const TensorId y = build(g);
        const TensorId seed = g.constant("seed", g.tensor(y).desc, Init::normal(1));
        auto grads = differentiate(g, y, seed);
        BackendSet backends({.threads = 2});
        TrainGraph tg;
        tg.graph = std::move(g);
        const Plan plan = precision_plan(tg, prec ? DType::BF16 : DType::F32, PrecisionScope::Gemm, backends.get("cpu"));
        LowerOptions lo;
        lo.keep = {y};
        for (auto& [p, gr] : grads) lo.keep.push_back(gr);
        const LoweredGraph lg = lower(std::move(tg), plan, lo);
        ExecutorOptions eo;
        eo.seed = 3;
        Executor ex(lg, backends, eo);
        ex.run_all();
        for (TensorId t : lo.keep) results[prec].push_back(ex.read_f32(t));
    }
    ASSERT_EQ(results[0].size(), results[1].size());
    for (size_t i = 0; i < results[0].size(); ++i) {
        const double e = relative_l2(results[1][i].data(), results[0][i].data(), int64_t(results[0][i].size()));
        EXPECT_LT(e, 2e-2) << "tensor " << i;
        EXPECT_GT(e, 0.0) << "bf16 must actually round";
    }
}

TEST(CpuBackend, SupportsSaysWhy) {
    Graph g;
    const TensorId x = g.parameter("x", {{2, 3}}, Init::ones());
    g.add1(OpKind::Relu, NoAttrs{}, {x}, "relu");
    const TensorId labels = g.input("labels", {{2}, DType::I32}, TensorRole::Label);
    g.add(OpKind::SoftmaxCrossEntropy, NoAttrs{}, {x, labels}, "loss");
    cpu::CpuBackend cpu(1);
    EXPECT_TRUE(supports_in(cpu, g, 0, DType::BF16));
    EXPECT_FALSE(supports_in(cpu, g, 1, DType::BF16));
    g.node(1).compute = DType::BF16;
    const Support s = cpu.supports(g, 1);
    EXPECT_FALSE(s.ok);
    EXPECT_NE(s.reason.find("f32"), std::string::npos) << s.reason;
    EXPECT_THROW(Executor(g, cpu), Error);
    g.node(1).compute = DType::F32;
    g.node(0).compute = DType::F16;
    EXPECT_FALSE(cpu.supports(g, 0).ok);
    EXPECT_THROW(Executor(g, cpu), Error);
    // a bf16 node whose operand is stored in f32 is refused: the plan's Cast must convert it
    g.node(0).compute = DType::BF16;
    const Support missing_cast = cpu.supports(g, 0);
    EXPECT_FALSE(missing_cast.ok);
    EXPECT_NE(missing_cast.reason.find("Cast"), std::string::npos) << missing_cast.reason;
    EXPECT_THROW(cpu::CpuBackend(-1), Error);
}

TEST(CpuBackend, OutOfRangeLabelIsAnError) {
    Graph g;
    const TensorId z = g.parameter("z", {{2, 3}}, Init::ones());
    const TensorId labels = g.input("labels", {{2}, DType::I32}, TensorRole::Label);
    g.add(OpKind::SoftmaxCrossEntropy, NoAttrs{}, {z, labels}, "loss");
    cpu::CpuBackend cpu(2);
    ASSERT_TRUE(cpu::CpuBackend::serial(g, 0));  // and the small node that throws leaves the thread count as it was
    Executor ex(g, cpu);
    ex.i32(labels)[1] = 3;
    try {
        ex.run_all();
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("label 3 at position 1 is outside [0, 3)"), std::string::npos) << e.what();
    }
    EXPECT_EQ(omp_get_max_threads(), 2);
}

// Small nodes run on one thread (CpuBackend::serial): LeNet-5 at batch 2 has both kinds; its training
// follows the run with every node on both threads, and the thread count is back at 2 after every step.
TEST(CpuBackend, SmallNodesOnOneThreadTrainLikeAllThreads) {
    zoo::NetConfig cfg;
    cfg.batch = 2;
    cfg.classes = 10;
    zoo::Model m = zoo::build("lenet5", cfg);
    const TrainGraph tg = build_train_graph(zoo::Model(m).graph, m.loss, OptimizerConfig::adam(1e-3f));
    size_t serial = 0;
    for (size_t n = 0; n < tg.graph.num_nodes(); ++n) serial += cpu::CpuBackend::serial(tg.graph, NodeId(n));
    EXPECT_GT(serial, 10u);                        // updates of biases, the loss, fc3 ...
    EXPECT_LT(serial, tg.graph.num_nodes() - 5);   // ... but not conv2 and its gradients
    std::vector<float> losses[2], weights[2];
    for (int small_serial = 0; small_serial < 2; ++small_serial) {
        cpu::CpuBackend cpu(2, "cpu", small_serial == 1);
        Executor ex(tg.graph, cpu, {{m.loss}, 5});
        data::SyntheticData synth(4);
        for (int s = 0; s < 3; ++s) {
            fill_synthetic(ex, m, synth);
            ex.run_all();
            EXPECT_EQ(omp_get_max_threads(), 2);
            losses[small_serial].push_back(ex.f32(m.loss)[0]);
        }
        weights[small_serial] = ex.read_f32(*tg.graph.find_tensor("conv1.weight"));
    }
    for (size_t s = 0; s < losses[0].size(); ++s) EXPECT_NEAR(losses[1][s], losses[0][s], 1e-5 * std::fabs(losses[0][s])) << "step " << s;
    for (size_t i = 0; i < weights[0].size(); ++i) ASSERT_NEAR(weights[1][i], weights[0][i], 1e-5) << i;
}

}  // namespace
TEST(CpuBackend, ThreadsCountTheAffinityMask) {
    cpu_set_t set;
    CPU_ZERO(&set);
    ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
    const int cores = CPU_COUNT(&set);
    EXPECT_EQ(cpu::usable_cores(), cores);
    EXPECT_EQ(cpu::CpuBackend(0).threads(), cores);  // 0: all cores this process may run on
    EXPECT_NO_THROW(cpu::check_threads(0, false));
    EXPECT_NO_THROW(cpu::check_threads(cores, false));
    try {
        cpu::check_threads(cores + 1, false);
        ADD_FAILURE() << "more threads than cores accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("may run on " + std::to_string(cores) + " core"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("--oversubscribe"), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(cpu::check_threads(cores + 1, true));
    EXPECT_THROW(cpu::check_threads(-1, true), Error);
    EXPECT_THROW(cpu::check_threads(int64_t(1) << 40, true), Error);
}

}  // namespace joule
