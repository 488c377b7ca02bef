// plan/amp: TF-AMP's painting pass by pass, autocast's propagation, the minimum cut against brute force,
// the cast model against what plan/passes insert, and the optimum never predicted slower than the others.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "backend/registry.hpp"
#include "graph/autodiff.hpp"
#include "plan/amp.hpp"
#include "plan/passes.hpp"
#include "predict/device_model.hpp"
#include "test_util.hpp"
#include "zoo/zoo.hpp"

namespace joule {
namespace {

const AmpContext kAll{DType::BF16, [](const Graph&, NodeId, DType) { return true; }};

std::vector<AmpColour> colours(const AmpPainting& p) {
    std::vector<AmpColour> c;
    for (size_t i = 0; i < p.list.size(); ++i)
        c.push_back(p.deny[i] ? AmpColour::Deny : p.allow[i] ? AmpColour::Allow : p.list[i] == AmpColour::Deny ? AmpColour::Clear : p.list[i]);
    return c;
}

std::string str(const std::vector<AmpColour>& c) {
    std::string s;
    for (AmpColour x : c) s += std::string(s.empty() ? "" : " ") + amp_colour_name(x);
    return s;
}

TEST(Amp, TfPaintingPassByPass) {
    // deny -> infer -> clear -> infer -> clear -> allow -> infer (the chain of TF-AMP's documentation)
    Graph g;
    const TensorId x = g.input("x", {{2, 4, 8, 8}});
    TensorId y = g.add1(OpKind::GlobalAvgPool, NoAttrs{}, {x}, "mean");   // deny (Mean)
    y = g.add1(OpKind::Sigmoid, NoAttrs{}, {y}, "sigmoid");               // infer
    y = g.add1(OpKind::Relu, NoAttrs{}, {y}, "relu1");                    // clear
    y = g.add1(OpKind::Tanh, NoAttrs{}, {y}, "tanh");                     // infer
    y = g.add1(OpKind::Relu, NoAttrs{}, {y}, "relu2");                    // clear
    y = g.add1(OpKind::MatMul, MatMulAttrs{}, {y, y}, "matmul");          // allow
    g.add1(OpKind::Sigmoid, NoAttrs{}, {y}, "sigmoid2");                  // infer
    AmpPainting p = tf_amp_lists(g, kAll);
    EXPECT_EQ(str(p.list), "deny infer clear infer clear allow infer");
    tf_amp_propagate_deny(g, p);
    EXPECT_EQ(str(colours(p)), "deny deny deny deny clear allow infer");
    tf_amp_allow_between_allow(g, p);
    EXPECT_EQ(str(colours(p)), "deny deny deny deny clear allow infer");
    tf_amp_infer_after_allow(g, p);  // bf16 mode: the infer node fed by allow turns allow
    EXPECT_EQ(str(colours(p)), "deny deny deny deny clear allow allow");
    tf_amp_allow_through_clear(g, p);  // the clear node beside allow joins it
    EXPECT_EQ(str(colours(p)), "deny deny deny deny allow allow allow");
    const std::vector<bool> low = greedy_assignment(g, kAll);
    EXPECT_EQ(low, (std::vector<bool>{false, false, false, false, true, true, true}));
    // f16 mode skips pass 4; pass 5 still reaches the clear node
    EXPECT_EQ(greedy_assignment(g, {DType::F16, kAll.runs}), (std::vector<bool>{false, false, false, false, true, true, false}));
}

TEST(Amp, ClearAndInferBetweenAllowTurnAllow) {
    Graph g;
    const TensorId x = g.input("x", {{8, 16}});
    const TensorId w1 = g.parameter("w1", {{16, 16}}, Init::ones()), w2 = g.parameter("w2", {{16, 16}}, Init::ones());
    TensorId y = g.add1(OpKind::Linear, LinearAttrs{false}, {x, w1}, "fc1");  // allow
    y = g.add1(OpKind::Relu, NoAttrs{}, {y}, "relu");                         // clear
    y = g.add1(OpKind::Tanh, NoAttrs{}, {y}, "tanh");                         // infer
    g.add1(OpKind::Linear, LinearAttrs{false}, {y, w2}, "fc2");               // allow
    AmpPainting p = tf_amp_lists(g, kAll);
    tf_amp_propagate_deny(g, p);
    tf_amp_allow_between_allow(g, p);
    EXPECT_EQ(str(colours(p)), "allow allow allow allow");
    // a node the device refuses in bf16 is never painted low, and breaks nothing around it
    const AmpContext no_tanh{DType::BF16, [](const Graph& gg, NodeId n, DType) { return gg.node(n).kind != OpKind::Tanh; }};
    EXPECT_EQ(greedy_assignment(g, no_tanh), (std::vector<bool>{true, true, false, true}));
}

TEST(Amp, AutocastFollowsInputsAndPromotes) {
    Graph g;
    const TensorId x = g.input("x", {{8, 16}});
    const TensorId w = g.parameter("w", {{16, 16}}, Init::ones());
    const TensorId a = g.add1(OpKind::Linear, LinearAttrs{false}, {x, w}, "fc");   // low
    const TensorId r = g.add1(OpKind::Relu, NoAttrs{}, {a}, "relu");               // follows: low
    g.add1(OpKind::Add, NoAttrs{}, {r, x}, "add");                                 // low + f32 input: f32
    g.add1(OpKind::Softmax, AxisAttrs{1}, {r}, "softmax");                       // float32 list
    EXPECT_EQ(autocast_assignment(g, kAll), (std::vector<bool>{true, true, false, false}));
}

// A random small graph: linears, activations and adds over a few branches.
Graph random_graph(std::mt19937& rng, int nodes) {
    Graph g;
    std::vector<TensorId> live = {g.input("x", {{4, 8}})};
    for (int i = 0; i < nodes; ++i) {
        const TensorId a = live[rng() % live.size()];
        const std::string name = "n" + std::to_string(i);
        switch (rng() % 4) {
            case 0: live.push_back(g.add1(OpKind::Linear, LinearAttrs{false}, {a, g.parameter("w" + std::to_string(i), {{8, 8}}, Init::ones())}, name)); break;
            case 1: live.push_back(g.add1(OpKind::Relu, NoAttrs{}, {a}, name)); break;
            case 2: live.push_back(g.add1(OpKind::Add, NoAttrs{}, {a, live[rng() % live.size()]}, name)); break;
            default: live.push_back(g.add1(OpKind::Tanh, NoAttrs{}, {a}, name)); break;
        }
    }
    return g;
}

TEST(Amp, MinimumCutEqualsBruteForce) {
    std::mt19937 rng(7);
    for (int trial = 0; trial < 40; ++trial) {
        const Graph g = random_graph(rng, 4 + trial % 9);
        std::uniform_real_distribution<double> u(0.0, 1.0);
        std::vector<std::array<double, 2>> node(g.num_nodes());
        for (auto& c : node) c = {u(rng), u(rng)};
        const double cast_scale = u(rng) * 2;
        // every other trial a once-per-step cost of mixing (f16's loss scaling), sometimes more than mixing gains
        const double mixed = trial % 2 ? u(rng) * double(g.num_nodes()) / 4 : 0;
        const AmpCosts k{[&](NodeId n, DType t) { return node[size_t(n)][t == DType::F32 ? 0 : 1]; },
                         [&](double elements, DType from, DType) { return cast_scale * elements / 32 * (from == DType::F32 ? 1.0 : 0.7); }, mixed};
        // some nodes refused, as a device would
        const int refused = trial % 3 == 0 ? int(rng() % g.num_nodes()) : -1;
        const AmpContext c{DType::BF16, [&](const Graph&, NodeId n, DType) { return int(n) != refused; }};
        double best = 1e300;
        for (uint32_t mask = 0; mask < (1u << g.num_nodes()); ++mask) {
            std::vector<bool> x(g.num_nodes());
            bool ok = true;
            for (size_t i = 0; i < g.num_nodes(); ++i) x[i] = (mask >> i) & 1u, ok = ok && !(x[i] && int(i) == refused);
            if (ok) best = std::min(best, amp_cost(g, x, c, k));
        }
        const std::vector<bool> opt = optimal_assignment(g, c, k);
        EXPECT_NEAR(amp_cost(g, opt, c, k), best, 1e-9) << "trial " << trial;
        if (refused >= 0) {
            EXPECT_FALSE(opt[size_t(refused)]);
        }
    }
}

TEST(Amp, CastModelMatchesTheLoweredGraphAndTheOptimumIsNeverSlower) {
    zoo::NetConfig cfg;
    cfg.batch = 4, cfg.image_size = 32;
    zoo::Model m = zoo::build("resnet18", cfg);
    const TrainGraph tg = build_train_graph(std::move(m.graph), m.loss, OptimizerConfig::sgd(0.1f, 0.9f));
    for (const char* device : {"a100", "v100"}) {
        const predict::DeviceModel d = predict::load_device_model(device);
        const DType low = d.has(DType::BF16) ? DType::BF16 : DType::F16;
        const AmpContext c{low, [&](const Graph& g, NodeId n, DType t) {
                               const OpKind kind = g.node(n).kind;
                               return d.has(t) && kind != OpKind::Embedding && kind != OpKind::EmbeddingBackward;
                           }};
        const Graph& g = tg.graph;
        const AmpCosts k{[&](NodeId n, DType t) { return predict::cost(g, n, d, t).seconds; },
                         [&](double e, DType from, DType to) { return predict::cast_cost(e, from, to, d).seconds; }, amp_mixed_cost(tg, low, d)};
        const std::vector<bool> off(g.num_nodes(), false), greedy = greedy_assignment(g, c), autocast = autocast_assignment(g, c),
                                campo = campo_assignment(g, c, k), optimal = optimal_assignment(g, c, k);
        for (const auto& [name, x] : {std::pair{"greedy", greedy}, std::pair{"autocast", autocast}, std::pair{"campo", campo}, std::pair{"optimal", optimal}}) {
            // the cast model is what the passes do: the lowered plan costs exactly amp_cost
            const LoweredGraph lg = lower(TrainGraph(tg), amp_plan(tg, x, c, name), {.layout = false, .fuse = false});
            double lowered = predict::graph_cost(lg.train.graph, d).total.seconds;
            if (std::find(x.begin(), x.end(), true) != x.end()) lowered += k.mixed;  // f16's loss scaling, once
            EXPECT_NEAR(amp_cost(g, x, c, k), lowered, 1e-9 * lowered) << device << " " << name;
        }
        const double best = amp_cost(g, optimal, c, k);
        EXPECT_LE(best, amp_cost(g, off, c, k) + 1e-12) << device;
        EXPECT_LE(best, amp_cost(g, greedy, c, k) + 1e-12) << device;
        EXPECT_LE(best, amp_cost(g, autocast, c, k) + 1e-12) << device;
        EXPECT_LE(best, amp_cost(g, campo, c, k) + 1e-12) << device;
        // campo is never predicted slower than off or greedy
        EXPECT_LE(amp_cost(g, campo, c, k), amp_cost(g, off, c, k) + 1e-12) << device;
        EXPECT_LE(amp_cost(g, campo, c, k), amp_cost(g, greedy, c, k) + 1e-12) << device;
        size_t gemm_low = 0;
        for (size_t i = 0; i < g.num_nodes(); ++i) {
            if (f32_only_op(g.node(NodeId(i)).kind)) {
                EXPECT_FALSE(greedy[i] || optimal[i] || autocast[i]);
            }
            gemm_low += greedy[i] && tf_amp_list(g.node(NodeId(i)).kind) == AmpColour::Allow;
        }
        EXPECT_GT(gemm_low, 0u);
    }
    test::expect_error([] { parse_amp_policy("campo2"); }, "unknown mixed-precision policy 'campo2'");
}

}  // namespace
TEST(Amp, F16PaysLossScalingOncePerStepAndBf16DoesNot) {
    zoo::NetConfig cfg;
    cfg.batch = 4;
    zoo::Model m = zoo::build("lenet5", cfg);
    const TrainGraph tg = build_train_graph(std::move(m.graph), m.loss, OptimizerConfig::sgd(0.1f, 0.9f));
    const predict::DeviceModel v100 = predict::load_device_model("v100");
    EXPECT_EQ(amp_mixed_cost(tg, DType::BF16, v100), 0);
    const double ls = amp_mixed_cost(tg, DType::F16, v100);
    // one pass over the weight gradients: 61,706 f32 values read and written
    EXPECT_DOUBLE_EQ(ls, predict::loss_scaling_cost(61706, v100).seconds);
    EXPECT_EQ(predict::loss_scaling_cost(61706, v100).bytes, 61706.0 * 8);
    EXPECT_GT(predict::loss_scaling_cost(2 * 61706, v100).seconds, ls);

    // ResNet-18 at 224x224 gains from f16 on a V100; when mixing costs more than any gain, optimal and
    // campo keep every node in f32
    cfg.batch = 16;
    zoo::Model r = zoo::build("resnet18", cfg);
    const TrainGraph big = build_train_graph(std::move(r.graph), r.loss, OptimizerConfig::sgd(0.1f, 0.9f));
    const Graph& g = big.graph;
    const AmpContext c{DType::F16, [&](const Graph& gg, NodeId n, DType t) { return v100.has(t) && !f32_only_op(gg.node(n).kind); }};
    AmpCosts k{[&](NodeId n, DType t) { return predict::cost(g, n, v100, t).seconds; },
               [&](double e, DType from, DType to) { return predict::cast_cost(e, from, to, v100).seconds; }, amp_mixed_cost(big, DType::F16, v100)};
    const std::vector<bool> off(g.num_nodes(), false), greedy = greedy_assignment(g, c);
    EXPECT_LT(amp_cost(g, greedy, c, k), amp_cost(g, off, c, k));
    EXPECT_NE(optimal_assignment(g, c, k), off);
    k.mixed = amp_cost(g, off, c, k);
    EXPECT_EQ(amp_cost(g, greedy, c, k), amp_cost(g, greedy, c, AmpCosts{k.node, k.cast, 0}) + k.mixed);
    EXPECT_EQ(amp_cost(g, off, c, k), amp_cost(g, off, c, AmpCosts{k.node, k.cast, 0}));
    EXPECT_EQ(optimal_assignment(g, c, k), off);
    EXPECT_EQ(campo_assignment(g, c, k), off);
}

}  // namespace joule
