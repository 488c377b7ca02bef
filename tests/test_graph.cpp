// graph/: shape inference errors, cost accounting, autodiff structure.
#include <gtest/gtest.h>

#include "graph/autodiff.hpp"
#include "graph/cost.hpp"
#include "graph/error.hpp"
#include "test_util.hpp"

namespace joule {
namespace {

TensorId img(Graph& g, Shape s) { return g.input("x", {std::move(s), DType::F32, Layout::ChannelsLast}); }
TensorId w(Graph& g, const std::string& n, Shape s) { return g.parameter(n, {std::move(s)}, Init::normal(1)); }

using test::expect_error;

// A folded backward node (Node::pre_op) reads its second operand last: the activation's output Y, with
// input 0's desc, or -- a batch-norm backward recomputing Y (NormAttrs::recompute_act) -- beta, with gamma's.
TEST(ShapeInference, FoldedBackwardOperandsMustMatch) {
    Graph g;
    const TensorId dy = img(g, {2, 4, 3, 3}), x = g.input("x2", {{2, 4, 3, 3}, DType::F32, Layout::ChannelsLast});
    const TensorId gamma = w(g, "gamma", {4}), mean = g.input("mean", {{4}}), var = g.input("var", {{4}});
    const TensorId y = g.input("y", {{2, 4, 3, 3}, DType::F32, Layout::ChannelsLast}), y_plain = g.input("yp", {{2, 4, 3, 3}});
    const TensorId beta = w(g, "beta", {4});
    g.add(OpKind::BatchNormBackward, NormAttrs{}, {dy, x, gamma, mean, var}, "bn.bwd");
    auto folded = [&](TensorId last, bool recompute) {
        Node n = g.node(NodeId(0));
        n.attrs = NormAttrs{.recompute_act = recompute};
        n.inputs.push_back(last);
        n.pre_op = OpKind::Relu6Backward;
        return n;
    };
    auto append = [&](Node n) {
        Graph h = g.tensors_only();
        h.append(std::move(n));
        return h.num_nodes();
    };
    EXPECT_EQ(append(folded(y, false)), 1u);
    EXPECT_EQ(append(folded(beta, true)), 1u);
    expect_error([&] { append(folded(y_plain, false)); }, "the folded Relu6Backward reads f32[2, 4, 3, 3] beside");
    expect_error([&] { append(folded(y, true)); }, "recomputes its Y from beta, given f32[2, 4, 3, 3] nhwc beside gamma f32[4]");
    Node sum = folded(y, false);
    sum.pre_op = OpKind::Add;  // a gradient sum folds into a ReLU backward, not into batch norm's
    expect_error([&] { append(sum); }, "cannot take Add as a folded backward node");
}

TEST(ShapeInference, ConvChannelMismatchNamesTheOp) {
    Graph g;
    const TensorId x = img(g, {1, 3, 8, 8});
    const TensorId k = w(g, "k", {4, 2, 3, 3});
    expect_error([&] { g.add1(OpKind::Conv2d, ConvAttrs{}, {x, k}, "conv7"); }, "op 'conv7' (Conv2d): input has 3 channels");
}

TEST(ShapeInference, Rejections) {
    Graph g;
    const TensorId x = img(g, {2, 4, 5, 5});
    expect_error([&] { g.add1(OpKind::Conv2d, ConvAttrs{}, {x, w(g, "k", {4, 4, 7, 7})}, "big"); }, "does not fit input");
    ConvAttrs grouped;
    grouped.groups = 3;
    expect_error([&] { g.add1(OpKind::Conv2d, grouped, {x, w(g, "k2", {3, 1, 3, 3})}, "grp"); }, "groups=3 must divide");
    expect_error([&] { g.add1(OpKind::Linear, LinearAttrs{false}, {x, w(g, "fw", {3, 4})}, "fc"); }, "flatten it first");
    const TensorId f = g.add1(OpKind::Reshape, ReshapeAttrs{{2, -1}}, {x}, "flat");
    EXPECT_EQ(g.tensor(f).desc.shape, (Shape{2, 100}));
    expect_error([&] { g.add1(OpKind::Linear, LinearAttrs{false}, {f, w(g, "fw2", {3, 99})}, "fc2"); }, "input has 100 features");
    expect_error([&] { g.add1(OpKind::Reshape, ReshapeAttrs{{3, -1}}, {x}, "bad_reshape"); }, "cannot infer -1");
    expect_error([&] { g.add1(OpKind::Reshape, ReshapeAttrs{{7, 7}}, {x}, "bad_reshape2"); }, "200 elements");
    PoolAttrs p;
    p.kernel[0] = p.kernel[1] = 9;
    expect_error([&] { g.add1(OpKind::MaxPool2d, p, {x}, "pool"); }, "does not fit input");
    expect_error([&] { g.add1(OpKind::Add, NoAttrs{}, {x, f}, "add"); }, "does not broadcast to A");
    expect_error([&] { g.add1(OpKind::Concat, AxisAttrs{1}, {x, img(g, {2, 4, 6, 5})}, "cat"); }, "outside axis 1");
    expect_error([&] { g.add1(OpKind::Relu, NoAttrs{}, {x, x}, "relu"); }, "takes 1 inputs, got 2");
    expect_error([&] { g.add1(OpKind::Transpose, TransposeAttrs{{0, 0, 1, 2}}, {x}, "t"); }, "not a permutation");
    expect_error([&] { g.add1(OpKind::MatMul, MatMulAttrs{}, {w(g, "a", {2, 3}), w(g, "b", {4, 5})}, "mm"); }, "inner dimensions differ");
    // folded transposes (MatMulAttrs::perm_*): permutations keeping the last dim last, batch dims matching through them
    const TensorId qa = w(g, "qa", {2, 3, 2, 4}), qb = w(g, "qb", {2, 3, 2, 4});
    const TensorId scores = g.add1(OpKind::MatMul, MatMulAttrs{false, true, 1.0f, {0, 2, 1, 3}, {0, 2, 1, 3}, {}}, {qa, qb}, "mm_heads");
    EXPECT_EQ(g.tensor(scores).desc.shape, (Shape{2, 2, 3, 3}));
    const TensorId merged = g.add1(OpKind::MatMul, MatMulAttrs{false, false, 1.0f, {}, {0, 2, 1, 3}, {0, 2, 1, 3}}, {scores, qb}, "mm_merge");
    EXPECT_EQ(g.tensor(merged).desc.shape, (Shape{2, 3, 2, 4}));
    expect_error([&] { g.add1(OpKind::MatMul, MatMulAttrs{false, true, 1.0f, {0, 2, 3, 1}, {}, {}}, {qa, qb}, "mm_last"); }, "A's folded transpose [0, 2, 3, 1] must permute its 4 dims, the last one last");
    expect_error([&] { g.add1(OpKind::MatMul, MatMulAttrs{false, true, 1.0f, {}, {0, 1, 3}, {}}, {qa, qb}, "mm_rank"); }, "B's folded transpose");
    expect_error([&] { g.add1(OpKind::MatMul, MatMulAttrs{false, true, 1.0f, {}, {}, {0, 0, 2, 3}}, {qa, qb}, "mm_dup"); }, "C's folded transpose");
    expect_error([&] { g.add1(OpKind::MatMul, MatMulAttrs{false, true, 1.0f, {0, 2, 1, 3}, {}, {}}, {qa, qb}, "mm_batch"); }, "batch dimensions of A [2, 2, 3, 4] and B [2, 3, 2, 4] differ");
    // a folded gradient sum (LinearBackwardData's third input) has the output's shape
    const TensorDesc dxd{{6, 8}};
    const TensorId dy = w(g, "dy", {6, 4}), fw = w(g, "fw3", {4, 8});
    g.add(OpKind::LinearBackwardData, LinearAttrs{false}, {dy, fw, w(g, "gsum", {6, 8})}, "bwd_data_sum", Phase::Backward, kNone, dxd);
    expect_error([&] { g.add(OpKind::LinearBackwardData, LinearAttrs{false}, {dy, fw, w(g, "gbad", {6, 4})}, "bwd_data_bad", Phase::Backward, kNone, dxd); },
                 "the gradient it adds to must have its output's shape [6, 8], got f32[6, 4]");
    expect_error([&] { g.add1(OpKind::Slice, SliceAttrs{1, 3, 2}, {x}, "s"); }, "outside dimension 4");
    expect_error([&] { g.input("bad", {{2, 0}}); }, "non-positive dimension");
    const TensorId labels = g.input("y", {{3}, DType::I32}, TensorRole::Label);
    expect_error([&] { g.add(OpKind::SoftmaxCrossEntropy, NoAttrs{}, {w(g, "z", {2, 5}), labels}, "loss"); }, "labels must be i32[2]");
}

// An update keeping bf16 copies of its parameter (low_copies, plan/'s fold_casts): the copies are its last
// inputs, bf16 in the parameter's shape, each in its own layout; anything else names the op and what is wrong.
TEST(ShapeInference, UpdateCopiesAreBf16OfTheParametersShape) {
    Graph g;
    const TensorDesc f32 = {{4, 3, 2, 2}, DType::F32, Layout::Plain}, bf16 = {{4, 3, 2, 2}, DType::BF16, Layout::Plain};
    const TensorId p = g.input("p", f32), grad = g.input("g", f32), v = g.input("v", f32), c = g.input("c", bf16);
    const TensorId c_nhwc = g.input("c_nhwc", {{4, 3, 2, 2}, DType::BF16, Layout::ChannelsLast});
    g.add(OpKind::SgdUpdate, SgdAttrs{0.1f, 0.9f, 0.0f, 2}, {p, grad, v, c, c_nhwc}, "sgd");
    EXPECT_EQ(low_copy_count(g.node(0)), 2);
    for (size_t i = 0; i < 5; ++i) EXPECT_EQ(is_low_copy_input(g.node(0), i), i >= 3) << "the copies are the last inputs: " << i;
    EXPECT_EQ(low_copies(g), (std::vector<std::pair<TensorId, TensorId>>{{p, c}, {p, c_nhwc}}));
    expect_error([&] { g.add(OpKind::SgdUpdate, SgdAttrs{0.1f, 0.9f, 0.0f, 1}, {p, grad, v, g.input("c32", f32)}, "sgd32"); },
                 "op 'sgd32' (SgdUpdate): input 3, a copy of the parameter, must be bf16, not f32");
    expect_error([&] { g.add(OpKind::SgdUpdate, SgdAttrs{0.1f, 0.9f, 0.0f, 1}, {p, grad, v}, "missing"); },
                 "the update takes 3 inputs, then the parameter's 1 bf16 copies; got 3 inputs");
    expect_error([&] { g.add(OpKind::SgdUpdate, SgdAttrs{0.1f, 0.9f, 0.0f, -1}, {p, grad, v}, "negative"); }, "the number of the parameter's bf16 copies must be >= 0, got -1");
    expect_error([&] { g.add(OpKind::AdamUpdate, AdamAttrs{0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, false, 1}, {p, grad, v, v, g.input("c2", {{4, 2}, DType::BF16, Layout::Plain})}, "adam"); },
                 "differs from parameter");
}

TEST(ShapeInference, ConvOutputShapes) {
    Graph g;
    const TensorId x = img(g, {2, 8, 15, 15});
    ConvAttrs a;
    a.stride[0] = a.stride[1] = 2;
    a.pad[0] = a.pad[1] = 2;
    a.dilation[0] = a.dilation[1] = 2;
    a.groups = 8;
    const TensorId y = g.add1(OpKind::Conv2d, a, {x, w(g, "k", {16, 1, 3, 3})}, "dw");
    // (15 + 4 - 2*2 - 1) / 2 + 1 = 8
    EXPECT_EQ(g.tensor(y).desc.shape, (Shape{2, 16, 8, 8}));
    EXPECT_EQ(g.tensor(y).desc.layout, Layout::ChannelsLast);
}

TEST(CostAccounting, ConvFlopsAndBytes) {
    Graph g;
    const TensorId x = img(g, {2, 3, 8, 8});
    ConvAttrs a;
    a.pad[0] = a.pad[1] = 1;
    a.bias = true;
    const TensorId k = w(g, "k", {4, 3, 3, 3}), b = w(g, "b", {4});
    g.add1(OpKind::Conv2d, a, {x, k, b}, "conv");
    const NodeCost c = node_cost(g, 0);
    const double out = 2 * 4 * 8 * 8;
    EXPECT_DOUBLE_EQ(c.macs, out * 27);
    EXPECT_DOUBLE_EQ(c.flops, 2 * out * 27 + out);
    EXPECT_DOUBLE_EQ(c.bytes_read, 4.0 * (2 * 3 * 64 + 4 * 27 + 4));
    EXPECT_DOUBLE_EQ(c.bytes_written, 4.0 * out);
    EXPECT_DOUBLE_EQ(c.param_bytes, 4.0 * (4 * 27 + 4));
    EXPECT_DOUBLE_EQ(c.activation_bytes, 4.0 * out);
}

TEST(Autodiff, TrainGraphPhasesSourcesAndUpdates) {
    Graph g;
    const TensorId x = g.input("x", {{4, 6}});
    const TensorId h = g.add1(OpKind::Linear, LinearAttrs{true}, {x, w(g, "fc1.weight", {5, 6}), w(g, "fc1.bias", {5})}, "fc1");
    const TensorId r = g.add1(OpKind::Relu, NoAttrs{}, {h}, "relu");
    const TensorId s = g.add1(OpKind::Add, NoAttrs{}, {r, h}, "residual");  // h has two consumers
    const TensorId labels = g.input("y", {{4}, DType::I32}, TensorRole::Label);
    const TensorId loss = g.add(OpKind::SoftmaxCrossEntropy, NoAttrs{}, {s, labels}, "loss")[0];
    TrainGraph tg = build_train_graph(std::move(g), loss, OptimizerConfig::sgd(0.1f, 0.9f));
    const Graph& t = tg.graph;
    EXPECT_EQ(t.node(t.tensor(loss).producer).phase, Phase::Loss);
    ASSERT_EQ(tg.param_grads.size(), 2u);
    int updates = 0, sums = 0;
    for (size_t i = 0; i < t.num_nodes(); ++i) {
        const Node& n = t.node(NodeId(i));
        if (NodeId(i) < tg.first_backward) EXPECT_TRUE(n.phase == Phase::Forward || n.phase == Phase::Loss);
        else if (NodeId(i) < tg.first_update) EXPECT_EQ(n.phase, Phase::Backward) << n.name;
        else EXPECT_EQ(n.phase, Phase::Update);
        EXPECT_NE(n.source, kNone);
        EXPECT_LE(n.source, NodeId(i));
        updates += n.kind == OpKind::SgdUpdate;
        if (n.kind == OpKind::Add && n.phase == Phase::Backward) {
            ++sums;
            EXPECT_EQ(t.node(n.source).name, "fc1");  // the gradient of h is summed where h is produced
        }
    }
    EXPECT_EQ(updates, 2);
    EXPECT_EQ(sums, 1);
    // the input x needs no gradient: no LinearBackwardData is emitted
    for (const Node& n : t.nodes()) EXPECT_NE(n.kind, OpKind::LinearBackwardData);
    // momentum state exists for each parameter
    EXPECT_TRUE(t.find_tensor("fc1.weight.momentum").has_value());
}

TEST(Autodiff, UnusedParameterIsAnError) {
    Graph g;
    const TensorId x = g.input("x", {{2, 3}});
    w(g, "orphan", {3});
    const TensorId labels = g.input("y", {{2}, DType::I32}, TensorRole::Label);
    const TensorId z = g.add1(OpKind::Linear, LinearAttrs{false}, {x, w(g, "fc.weight", {4, 3})}, "fc");
    const TensorId loss = g.add(OpKind::SoftmaxCrossEntropy, NoAttrs{}, {z, labels}, "loss")[0];
    expect_error([&] { build_train_graph(std::move(g), loss, OptimizerConfig::adam(1e-3f)); }, "parameter 'orphan' does not affect the loss");
}

TEST(Autodiff, GemmNodesAreConvLinearMatmulForwardAndBackward) {
    Graph g;
    const TensorId x = img(g, {1, 2, 4, 4});
    const TensorId y = g.add1(OpKind::Relu, NoAttrs{}, {g.add1(OpKind::Conv2d, ConvAttrs{}, {x, w(g, "k", {2, 2, 1, 1})}, "c")}, "r");
    const TensorId seed = g.constant("s", g.tensor(y).desc, Init::ones());
    differentiate(g, y, seed);
    for (size_t n = 0; n < g.num_nodes(); ++n)
        EXPECT_EQ(is_gemm_node(g, NodeId(n)), op_info(g.node(NodeId(n)).kind).category == OpCategory::Conv) << g.node(NodeId(n)).name;
}

TEST(OpCatalogue, EveryForwardOpHasAGradientRuleOrIsLoss) {
    for (size_t k = 0; k < size_t(OpKind::Count); ++k) {
        const OpInfo& i = op_info(OpKind(k));
        EXPECT_EQ(size_t(i.kind), k);
        EXPECT_NE(i.shape, nullptr) << i.name;
        EXPECT_NE(i.flops, nullptr) << i.name;
    }
    EXPECT_NE(op_info(OpKind::Conv2d).grad, nullptr);
    EXPECT_EQ(op_info(OpKind::ConvBackwardData).grad, nullptr);
}

}  // namespace
}  // namespace joule
