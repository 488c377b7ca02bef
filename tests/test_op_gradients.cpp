// Finite-difference gradient check of every differentiable op on every backend that runs here (cpu,
// reference; f32), including nhwc and plain layouts, strides, padding, dilation, groups, transposes and
// gradient accumulation; and bf16 plans against f32.
#include "grad_check.hpp"

namespace joule::test {
namespace {

TensorId param(Graph& g, const std::string& n, Shape s, Layout l = Layout::Plain, float std = 1.0f) {
    return g.parameter(n, {std::move(s), DType::F32, l}, Init::normal(std));
}

ConvAttrs conv_attrs(int64_t stride, int64_t pad, int64_t dil, int64_t groups, bool bias) {
    ConvAttrs a;
    a.stride[0] = a.stride[1] = stride;
    a.pad[0] = a.pad[1] = pad;
    a.dilation[0] = a.dilation[1] = dil;
    a.groups = groups;
    a.bias = bias;
    return a;
}

GradCase conv_case(const std::string& name, ConvAttrs a, Shape x, Shape w, Layout l) {
    return {name, [=](Graph& g) {
                std::vector<TensorId> in = {param(g, "x", x, l), param(g, "w", w, Layout::Plain, 0.5f)};
                if (a.bias) in.push_back(param(g, "b", {w[0]}));
                return g.add1(OpKind::Conv2d, a, in, "conv");
            }};
}

GradCase unary_case(OpKind k, float std = 1.0f, Layout l = Layout::ChannelsLast) {
    return {op_name(k), [=](Graph& g) { return g.add1(k, NoAttrs{}, {param(g, "x", {2, 3, 4, 5}, l, std)}, "op"); }};
}

// Makes parameter `name` positive (0.5 + |x|): the domain of Sqrt, fractional powers and denominators.
std::function<void(Executor&, const Graph&)> positive(const std::string& name) {
    return [name](Executor& ex, const Graph& g) {
        const TensorId t = *g.find_tensor(name);
        float* p = ex.f32(t);
        for (int64_t i = 0; i < g.tensor(t).desc.numel(); ++i) p[i] = 0.5f + std::fabs(p[i]);
    };
}

PoolAttrs pool(int64_t k, int64_t s, int64_t p) {
    PoolAttrs a;
    a.kernel[0] = a.kernel[1] = k;
    a.stride[0] = a.stride[1] = s;
    a.pad[0] = a.pad[1] = p;
    return a;
}

GradCase matmul_case(bool ta, bool tb) {
    return {"MatMul ta=" + std::to_string(ta) + " tb=" + std::to_string(tb), [=](Graph& g) {
                const Shape a = ta ? Shape{2, 4, 3} : Shape{2, 3, 4}, b = tb ? Shape{2, 5, 4} : Shape{2, 4, 5};
                return g.add1(OpKind::MatMul, MatMulAttrs{ta, tb, 0.5f}, {param(g, "a", a), param(g, "b", b)}, "mm");
            }};
}

std::vector<GradCase> cases() {
    std::vector<GradCase> c = {
        conv_case("Conv2d 3x3 pad 1 bias nhwc", conv_attrs(1, 1, 1, 1, true), {2, 3, 5, 5}, {4, 3, 3, 3}, Layout::ChannelsLast),
        conv_case("Conv2d stride 2 plain", conv_attrs(2, 0, 1, 1, false), {1, 2, 7, 7}, {3, 2, 3, 3}, Layout::Plain),
        conv_case("Conv2d dilation 2", conv_attrs(1, 2, 2, 1, false), {1, 2, 6, 6}, {2, 2, 3, 3}, Layout::ChannelsLast),
        conv_case("Conv2d depthwise", conv_attrs(1, 1, 1, 4, true), {2, 4, 5, 5}, {4, 1, 3, 3}, Layout::ChannelsLast),
        conv_case("Conv2d groups 2", conv_attrs(2, 1, 1, 2, false), {1, 4, 6, 6}, {6, 2, 3, 3}, Layout::ChannelsLast),
        {"Linear bias", [](Graph& g) {
             return g.add1(OpKind::Linear, LinearAttrs{true}, {param(g, "x", {4, 6}), param(g, "w", {5, 6}), param(g, "b", {5})}, "fc");
         }},
        {"Linear 3d no bias", [](Graph& g) {
             return g.add1(OpKind::Linear, LinearAttrs{false}, {param(g, "x", {2, 3, 6}), param(g, "w", {4, 6})}, "fc");
         }},
        matmul_case(false, false), matmul_case(false, true), matmul_case(true, false), matmul_case(true, true),
        {"BatchNorm2d", [](Graph& g) {
             const TensorId x = param(g, "x", {3, 2, 3, 3}, Layout::ChannelsLast, 2.0f);
             const TensorId m = g.state("m", {{2}}, Init::zeros()), v = g.state("v", {{2}}, Init::ones());
             return g.add(OpKind::BatchNorm2d, NormAttrs{}, {x, param(g, "gamma", {2}), param(g, "beta", {2}), m, v}, "bn")[0];
         }, {}, 1e-2, 3e-2, 5e-3},
        {"LayerNorm", [](Graph& g) {
             return g.add(OpKind::LayerNorm, NormAttrs{}, {param(g, "x", {2, 3, 8}), param(g, "gamma", {8}), param(g, "beta", {8})}, "ln")[0];
         }, {}, 1e-2, 3e-2, 5e-3},
        unary_case(OpKind::Relu), unary_case(OpKind::Relu6, 5.0f), unary_case(OpKind::Gelu), unary_case(OpKind::Sigmoid),
        unary_case(OpKind::Tanh, 1.0f, Layout::Plain),
        {"MaxPool2d 2x2", [](Graph& g) { return g.add1(OpKind::MaxPool2d, pool(2, 2, 0), {param(g, "x", {2, 3, 6, 6}, Layout::ChannelsLast)}, "p"); }},
        {"MaxPool2d 3x3 s2 p1", [](Graph& g) { return g.add1(OpKind::MaxPool2d, pool(3, 2, 1), {param(g, "x", {1, 2, 7, 7}, Layout::ChannelsLast)}, "p"); }},
        {"AvgPool2d 3x3 s1 p1", [](Graph& g) { return g.add1(OpKind::AvgPool2d, pool(3, 1, 1), {param(g, "x", {1, 2, 5, 5}, Layout::ChannelsLast)}, "p"); }},
        {"GlobalAvgPool", [](Graph& g) { return g.add1(OpKind::GlobalAvgPool, NoAttrs{}, {param(g, "x", {2, 3, 4, 4}, Layout::ChannelsLast)}, "p"); }},
        {"Add", [](Graph& g) { return g.add1(OpKind::Add, NoAttrs{}, {param(g, "a", {2, 3, 2, 2}, Layout::ChannelsLast), param(g, "b", {2, 3, 2, 2}, Layout::ChannelsLast)}, "add"); }},
        {"Mul", [](Graph& g) { return g.add1(OpKind::Mul, NoAttrs{}, {param(g, "a", {3, 4}), param(g, "b", {3, 4})}, "mul"); }},
        // B broadcast to A: its gradient summed back (SumTo)
        {"Add broadcast channel", [](Graph& g) {
             return g.add1(OpKind::Add, NoAttrs{}, {param(g, "a", {2, 3, 2, 2}, Layout::ChannelsLast), param(g, "b", {3, 1, 1})}, "add");
         }},
        {"Mul broadcast", [](Graph& g) { return g.add1(OpKind::Mul, NoAttrs{}, {param(g, "a", {2, 3, 4}), param(g, "b", {1, 3, 1})}, "mul"); }},
        {"Sub", [](Graph& g) { return g.add1(OpKind::Sub, NoAttrs{}, {param(g, "a", {3, 4}), param(g, "b", {3, 4})}, "sub"); }},
        {"Sub broadcast", [](Graph& g) { return g.add1(OpKind::Sub, NoAttrs{}, {param(g, "a", {2, 3, 4}), param(g, "b", {3, 1})}, "sub"); }},
        {"Div", [](Graph& g) { return g.add1(OpKind::Div, NoAttrs{}, {param(g, "a", {3, 4}), param(g, "b", {3, 4})}, "div"); }, positive("b")},
        {"Div broadcast", [](Graph& g) { return g.add1(OpKind::Div, NoAttrs{}, {param(g, "a", {2, 3, 4}), param(g, "b", {4})}, "div"); }, positive("b")},
        {"Sqrt", [](Graph& g) { return g.add1(OpKind::Sqrt, NoAttrs{}, {param(g, "x", {2, 3, 4, 5}, Layout::ChannelsLast)}, "op"); }, positive("x")},
        {"Clip", [](Graph& g) { return g.add1(OpKind::Clip, ClipAttrs{-0.5f, 0.75f}, {param(g, "x", {2, 3, 4, 5}, Layout::ChannelsLast)}, "op"); }},
        {"Pow 2", [](Graph& g) { return g.add1(OpKind::Pow, PowAttrs{2.0f}, {param(g, "x", {3, 7})}, "op"); }},
        {"Pow 1.5", [](Graph& g) { return g.add1(OpKind::Pow, PowAttrs{1.5f}, {param(g, "x", {3, 7})}, "op"); }, positive("x")},
        {"SumTo mean of the last axis", [](Graph& g) {
             return g.add1(OpKind::SumTo, BroadcastAttrs{{2, 3, 1}, 0.25f}, {param(g, "x", {2, 3, 4})}, "mean");
         }},
        {"SumTo nhwc channels", [](Graph& g) {
             return g.add1(OpKind::SumTo, BroadcastAttrs{{3, 1, 1}, 1.0f}, {param(g, "x", {2, 3, 2, 2}, Layout::ChannelsLast)}, "sum");
         }},
        {"Expand", [](Graph& g) { return g.add1(OpKind::Expand, BroadcastAttrs{{2, 3, 4}, 0.5f}, {param(g, "x", {3, 1})}, "expand"); }},
        {"Expand to nhwc", [](Graph& g) {
             return g.add1(OpKind::Expand, BroadcastAttrs{{2, 3, 2, 2}, 1.0f, Layout::ChannelsLast}, {param(g, "x", {1, 3, 1, 1})}, "expand");
         }},
        {"Concat nhwc channels", [](Graph& g) {
             return g.add1(OpKind::Concat, AxisAttrs{1}, {param(g, "a", {2, 2, 3, 3}, Layout::ChannelsLast), param(g, "b", {2, 3, 3, 3}, Layout::ChannelsLast)}, "cat");
         }},
        {"Concat last axis", [](Graph& g) { return g.add1(OpKind::Concat, AxisAttrs{-1}, {param(g, "a", {2, 3}), param(g, "b", {2, 4}), param(g, "c", {2, 1})}, "cat"); }},
        {"Slice", [](Graph& g) { return g.add1(OpKind::Slice, SliceAttrs{1, 1, 2}, {param(g, "x", {2, 5, 4})}, "slice"); }},
        {"Reshape nhwc to plain", [](Graph& g) {
             return g.add1(OpKind::Reshape, ReshapeAttrs{{2, -1}}, {param(g, "x", {2, 3, 2, 2}, Layout::ChannelsLast)}, "flat");
         }},
        {"Transpose", [](Graph& g) { return g.add1(OpKind::Transpose, TransposeAttrs{{2, 0, 1}}, {param(g, "x", {2, 3, 4})}, "t"); }},
        {"Softmax", [](Graph& g) { return g.add1(OpKind::Softmax, AxisAttrs{-1}, {param(g, "x", {3, 7})}, "sm"); }},
        {"Embedding", [](Graph& g) {
             const TensorId idx = g.input("idx", {{2, 3}, DType::I32});
             return g.add1(OpKind::Embedding, NoAttrs{}, {idx, param(g, "table", {7, 4})}, "emb");
         }, [](Executor& ex, const Graph& g) {
             int32_t* p = ex.i32(*g.find_tensor("idx"));
             const int32_t v[] = {1, 3, 3, 0, 6, 1};  // repeated rows exercise the scatter-add
             std::copy(v, v + 6, p);
         }},
        {"SoftmaxCrossEntropy", [](Graph& g) {
             const TensorId labels = g.input("labels", {{4}, DType::I32}, TensorRole::Label);
             return g.add(OpKind::SoftmaxCrossEntropy, NoAttrs{}, {param(g, "z", {4, 5}), labels}, "loss")[0];
         }, [](Executor& ex, const Graph& g) {
             int32_t* p = ex.i32(*g.find_tensor("labels"));
             p[0] = 0, p[1] = 4, p[2] = 2, p[3] = 2;
         }},
        {"residual accumulation", [](Graph& g) {
             // y = relu(x) * x + x: x has three consumers
             const TensorId x = param(g, "x", {3, 4});
             const TensorId r = g.add1(OpKind::Relu, NoAttrs{}, {x}, "relu");
             return g.add1(OpKind::Add, NoAttrs{}, {g.add1(OpKind::Mul, NoAttrs{}, {r, x}, "mul"), x}, "add");
         }},
    };
    return c;
}

class OpGradient : public ::testing::TestWithParam<std::tuple<GradCase, std::string>> {};
TEST_P(OpGradient, MatchesFiniteDifferences) { check_gradients(std::get<0>(GetParam()), std::get<1>(GetParam())); }
// Every case on every backend this build runs; the emulated FPGA (on a Stratix 10) takes the cases made
// only of ops it has kernels for -- the others a plan leaves on the host.
std::vector<std::tuple<GradCase, std::string>> backend_cases() {
    std::vector<std::tuple<GradCase, std::string>> v;
    for (const std::string& b : runnable_backends()) {
        const std::string device = b == "fpga_emu" ? "fpga_emu:s10" : b;
        BackendSet set({.threads = 1});
        for (const GradCase& c : cases()) {
            const LoweredGraph lg = lower_case(prepare(c), device_plan(device));
            bool runs = true;
            for (NodeId n = 0; n < NodeId(lg.train.graph.num_nodes()); ++n) runs = runs && set.get(device).supports(lg.train.graph, n).ok;
            if (runs || b != "fpga_emu") v.push_back({c, device});
        }
    }
    return v;
}
INSTANTIATE_TEST_SUITE_P(AllBackends, OpGradient, ::testing::ValuesIn(backend_cases()),
                         [](const auto& info) { return param_name(std::get<0>(info.param).name + "_" + std::get<1>(info.param)); });

}  // namespace
}  // namespace joule::test

namespace joule::test {
namespace {

// bf16: every node the CPU backend runs in bf16 is switched to it (the built-in `--dtype bf16
// --dtype-scope all` plan, casts as nodes); outputs and gradients must stay within bf16 rounding of the
// f32 run (whose gradients are checked by finite differences above).
double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) num += std::pow(double(a[i]) - b[i], 2), den += double(b[i]) * b[i];
    return std::sqrt(num / std::max(den, 1e-30));
}

std::vector<std::vector<float>> run_case(const GradCase& c, bool bf16, int* lowered) {
    Prepared p = prepare(c);
    BackendSet backends({.threads = 1});
    Plan plan = device_plan("cpu");
    if (bf16) {
        TrainGraph tg;
        tg.graph = p.g;
        plan = precision_plan(tg, DType::BF16, PrecisionScope::All, backends.get("cpu"));
        *lowered = int(plan.entries.size());
    }
    const LoweredGraph lg = lower_case(p, plan);
    Executor ex(lg, backends, seeded());
    if (c.fill) c.fill(ex, lg.train.graph);
    ex.run_all();
    std::vector<std::vector<float>> out;
    out.push_back(ex.read_f32(p.y));
    for (auto& [t, g] : p.grads) out.push_back(ex.read_f32(g));
    return out;
}

class OpBf16 : public ::testing::TestWithParam<GradCase> {};
TEST_P(OpBf16, TracksF32WithinBf16Rounding) {
    int lowered = 0, unused = 0;
    const auto ref = run_case(GetParam(), false, &unused);
    const auto low = run_case(GetParam(), true, &lowered);
    if (lowered == 0) {
        // f32-only ops (loss, gather) must say why they refuse bf16.
        Prepared p = prepare(GetParam());
        BackendSet backends({.threads = 1});
        Backend& cpu = backends.get("cpu");
        for (size_t n = 0; n < p.g.num_nodes(); ++n) EXPECT_FALSE(supports_in(cpu, p.g, NodeId(n), DType::BF16)) << p.g.node(NodeId(n)).name;
        return;
    }
    ASSERT_EQ(ref.size(), low.size());
    for (size_t i = 0; i < ref.size(); ++i) {
        const double e = relative_l2(low[i], ref[i]);
        EXPECT_LT(e, 3e-2) << (i == 0 ? "output" : "gradient " + std::to_string(i));
    }
}
INSTANTIATE_TEST_SUITE_P(Cpu, OpBf16, ::testing::ValuesIn(cases()), [](const auto& info) { return param_name(info.param.name); });

}  // namespace
}  // namespace joule::test
