// plan/: plan files (every error path), the passes (decide, casts, transfers, memory), and training under
// plans that mix devices and precisions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "backend/registry.hpp"
#include "data/dataset.hpp"
#include "plan/passes.hpp"
#include "runtime/executor.hpp"
#include "runtime/trainer.hpp"
#include "test_util.hpp"
#include "zoo/zoo.hpp"

namespace joule {
namespace {

using test::expect_error;

struct Net {
    zoo::Model model;
    TrainGraph train;
};

Net build(const std::string& net, int64_t batch, int64_t image_size = 0) {
    zoo::NetConfig cfg;
    cfg.batch = batch;
    cfg.image_size = image_size;
    cfg.classes = 10;
    Net n{zoo::build(net, cfg), {}};
    n.train = build_train_graph(std::move(n.model.graph), n.model.loss, OptimizerConfig::sgd(0.02f, 0.9f));
    return n;
}

std::string header(const TrainGraph& tg) { return "version: 1\ngraph: {model: test, fingerprint: \"" + fingerprint(tg) + "\"}\n"; }

// The layers of a graph in order (distinct source names of forward nodes).
std::vector<std::string> layers(const Graph& g) {
    std::vector<std::string> out;
    for (size_t n = 0; n < g.num_nodes(); ++n)
        if (g.node(NodeId(n)).phase == Phase::Forward && g.node(NodeId(n)).source == NodeId(n)) out.push_back(g.node(NodeId(n)).name);
    return out;
}

TEST(PlanFile, RoundTripsAndMatchesLayersByGlobFirstMatchWins) {
    Net n = build("lenet5", 2);
    const Plan p = parse_plan(header(n.train) +
                                  "default: {device: cpu, dtype: f32}\n"
                                  "entries:\n"
                                  "  - {layer: \"conv1\", device: reference}\n"
                                  "  - {layer: \"conv*\", dtype: bf16}\n"
                                  "  - {node: \"conv1.bwd_weights\", device: cpu}\n"
                                  "storage:\n"
                                  "  - {tensor: \"conv1\", dtype: f32}\n"
                                  "devices:\n"
                                  "  cpu: {power_limit_w: 100}\n"
                                  "  fpga_emu:s10: {fpga_design: \"8x16x8/s16\"}\n",
                              "p.yaml");
    const Plan q = parse_plan(plan_to_yaml(p), "again");
    EXPECT_EQ(q.fingerprint, p.fingerprint);
    ASSERT_EQ(q.entries.size(), 3u);
    EXPECT_EQ(q.entries[1].pattern, "conv*");
    EXPECT_EQ(*q.entries[1].dtype, DType::BF16);
    EXPECT_EQ(q.storage.size(), 1u);
    EXPECT_DOUBLE_EQ(*q.devices.at("cpu").power_limit_w, 100);
    EXPECT_EQ(*q.devices.at("fpga_emu:s10").fpga_design, "8x16x8/s16");
    std::vector<std::string> origin;
    const TrainGraph d = decide(n.train, p, &origin, nullptr);
    for (size_t k = 0; k < d.graph.num_nodes(); ++k) {
        const Node& node = d.graph.node(NodeId(k));
        const std::string& layer = layer_of(d.graph, NodeId(k));
        if (node.name == "conv1.bwd_weights") {
            EXPECT_EQ(node.device, "cpu");
            EXPECT_EQ(origin[k], "p.yaml:7");
        } else if (layer == "conv1") {
            EXPECT_EQ(node.device, "reference") << node.name;  // first match wins: conv1's entry, f32
            EXPECT_EQ(node.compute, DType::F32) << node.name;
        } else if (layer.rfind("conv", 0) == 0) {
            EXPECT_EQ(node.device, "cpu");
            EXPECT_EQ(node.compute, f32_only_op(node.kind) ? DType::F32 : DType::BF16) << node.name;  // updates stay f32
        }
    }
}

TEST(PlanFile, EveryBadPlanIsAClearErrorNamingWhere) {
    Net n = build("lenet5", 2);
    const std::string h = header(n.train);
    auto lowered = [&](const std::string& text) { return [&, text] { lower(n.train, parse_plan(text, "bad.yaml")); }; };
    expect_error(lowered("version: 1\ngraph: {fingerprint: \"0000000000000000\"}\n"), "made for another graph");
    expect_error(lowered("graph: {fingerprint: x}\n"), "version");
    expect_error(lowered("version: 2\ngraph: {fingerprint: x}\n"), "version");
    expect_error(lowered("version: 1\n"), "missing 'graph'");
    expect_error(lowered("version: 1\ngraph: {model: x}\n"), "fingerprint");
    expect_error(lowered("version: 1\ngraph: {fingerprint: x\n"), "bad.yaml:");
    expect_error(lowered("- 1\n- 2\n"), "must be a YAML map");
    expect_error(lowered(h + "colour: red\n"), "unknown key 'colour'");
    expect_error(lowered(h + "entries:\n  - {layer: a, node: b, device: cpu}\n"), "bad.yaml:4: an entry names either");
    expect_error(lowered(h + "entries:\n  - {layer: conv1}\n"), "sets nothing");
    expect_error(lowered(h + "entries:\n  - {layer: conv1, dtype: f64}\n"), "unknown dtype 'f64'");
    expect_error(lowered(h + "entries:\n  - {layer: conv1, device: tpu}\n"), "bad.yaml:4: unknown device 'tpu'");
    expect_error(lowered(h + "entries:\n  - {layer: conv1, device: \"cpu:\"}\n"), "backend[:spec]");
    expect_error(lowered(h + "entries:\n  - {node: conv9, device: cpu}\n"), "bad.yaml:4: no node is named 'conv9'");
    expect_error(lowered(h + "entries:\n  - {layer: \"nope*\", device: cpu}\n"), "matches no layer");
    expect_error(lowered(h + "entries:\n  - {layer: \"*\", device: cpu}\n  - {layer: \"conv1\", dtype: bf16}\n"), "bad.yaml:5: every layer that 'conv1' matches is taken");
    expect_error(lowered(h + "entries:\n  - {node: \"conv1.weight.sgd\", dtype: bf16}\n"), "computes in f32 only");
    expect_error(lowered(h + "storage:\n  - {tensor: zzz, dtype: bf16}\n"), "no tensor is named 'zzz'");
    expect_error(lowered(h + "storage:\n  - {tensor: conv1.weight, dtype: bf16}\n"), "master copy");
    expect_error(lowered(h + "devices:\n  cpu: {power_limit_w: -3}\n"), "positive");
    expect_error(lowered(h + "devices:\n  fpga_emu:s10: {fpga_design: 8x16}\n"), "bad.yaml:4: FPGA design '8x16' is not ROWSxCOLSxVEC/sLANES");
    expect_error(lowered(h + "default: {device: cpu, dtype: bf16, speed: 2}\n"), "unknown key 'speed'");
    expect_error(lowered(h + "entries:\n  - {layer: conv1, options: {[a]: b}}\n"), "bad.yaml:4: not a valid plan file");  // found by fuzz_plan
    expect_error([] { read_plan_file("/nonexistent/plan.yaml"); }, "no such plan file");
    expect_error([] { read_plan_file("/tmp"); }, "no such plan file");
}

TEST(PlanFile, DevicesThatCannotRunHereOrOpsTheyLackAreErrorsNamingTheEntry) {
    Net n = build("lenet5", 2);
    BackendSet backends({.threads = 1});
    // a known device this build cannot run: the plan lowers (it can be analysed) but not train
    const LoweredGraph gpu = lower(n.train, parse_plan(header(n.train) + "entries:\n  - {layer: fc1, device: \"cuda:v100\"}\n", "gpu.yaml"));
    expect_error([&] { Executor ex(gpu, backends); }, "gpu.yaml:4");
    expect_error([&] { Executor ex(gpu, backends); }, "cuda:v100");
    expect_error([&] { Executor ex(gpu, backends); }, "cannot run here");
    // a dtype the device lacks for that op: f16 on the cpu
    const LoweredGraph f16 = lower(n.train, parse_plan(header(n.train) + "entries:\n  - {layer: conv1, dtype: f16}\n", "f16.yaml"));
    expect_error([&] { Executor ex(f16, backends); }, "f16.yaml:4: node 'conv1'");
    expect_error([&] { Executor ex(f16, backends); }, "cpu computes in f32 or bf16");
}

TEST(Passes, OneCastPerTensorAndDtypeSharedByAllConsumers) {
    Net n = build("resnet18", 2, 32);
    BackendSet backends({.threads = 1});
    for (PrecisionScope scope : {PrecisionScope::Gemm, PrecisionScope::All}) {
        const Plan plan = precision_plan(n.train, DType::BF16, scope, backends.get("cpu"));
        const LoweredGraph lg = lower(n.train, plan, {.layout = false});  // the layout pass's reorders: Layout.* tests
        const Graph& g = lg.train.graph;
        std::set<std::pair<TensorId, DType>> boundaries;  // (tensor, dtype) pairs some consumer needs converted
        std::set<std::string> names;
        size_t casts = 0;
        for (size_t k = 0; k < g.num_nodes(); ++k) {
            const Node& node = g.node(NodeId(k));
            EXPECT_TRUE(check_host_dtypes(g, NodeId(k)).ok) << node.name;
            for (TensorId t : node.inputs) {
                const NodeId p = g.tensor(t).producer;
                if (p != kNone && g.node(p).kind == OpKind::Cast) boundaries.insert({g.node(p).inputs[0], g.tensor(t).desc.dtype});
            }
            if (node.kind != OpKind::Cast) continue;
            ++casts;
            EXPECT_TRUE(names.insert(node.name).second) << "duplicate cast " << node.name;
            EXPECT_NE(g.tensor(node.inputs[0]).desc.dtype, g.tensor(node.outputs[0]).desc.dtype) << node.name;
        }
        EXPECT_EQ(casts, lg.casts - lg.folded_casts - lg.update_copies) << "the casts inserted, less those folded into their producers or updates";
        EXPECT_EQ(casts, boundaries.size()) << "every cast is needed, none duplicated";
        EXPECT_GT(casts, 0u);
        // weights: one bf16 copy each, shared by the forward GEMM and the backward-data GEMM; without the
        // layout pass the copy has the master's layout, so the parameter's update keeps it (fold_casts)
        const auto w = g.find_tensor("cast:layer1.0.conv1.weight:bf16");
        ASSERT_TRUE(w.has_value());
        ASSERT_EQ(g.consumers(*w).size(), 3u);
        EXPECT_EQ(g.tensor(*w).producer, kNone);
        EXPECT_EQ(g.tensor(*w).role, TensorRole::State);
        const Node& update = g.node(g.consumers(*w).back());
        EXPECT_EQ(update.phase, Phase::Update);
        EXPECT_EQ(low_copy_count(update), 1);
        EXPECT_EQ(update.inputs.back(), *w);
    }
    // gemm scope on ResNet-18: per conv / linear layer a weight cast, an input cast and its gradient's casts
    const LoweredGraph gemm = lower(n.train, precision_plan(n.train, DType::BF16, PrecisionScope::Gemm, backends.get("cpu")));
    const LoweredGraph all = lower(n.train, precision_plan(n.train, DType::BF16, PrecisionScope::All, backends.get("cpu")));
    // 21 weights + 18 GEMM inputs (3 downsample convs share their block's) + 21 output gradients; the outputs
    // and input gradients (read by f32 BN, ReLU, add, loss) are written in f32 by the GEMMs themselves
    EXPECT_EQ(gemm.casts, 60u);
    for (size_t k = 0; k < gemm.train.graph.num_nodes(); ++k)
        if (const Node& node = gemm.train.graph.node(NodeId(k)); is_dtype_cast(gemm.train.graph, NodeId(k))) {  // reorders aside
            const NodeId from = gemm.train.graph.tensor(node.inputs[0]).producer;
            EXPECT_TRUE(from == kNone || !is_gemm_node(gemm.train.graph, from)) << node.name << ": a GEMM's output cast after the fact";
        }
    EXPECT_LT(all.casts, gemm.casts / 2) << "lowering every op leaves casts only at the weights, the loss and the updates";
}

TEST(Passes, TransfersOncePerTensorAndDeviceAndDumpAfterEveryPass) {
    Net n = build("lenet5", 4);
    std::string text = header(n.train) + "entries:\n";
    const auto ls = layers(n.train.graph);
    for (size_t i = 0; i < ls.size(); ++i) text += "  - {layer: \"" + ls[i] + "\", device: " + (i % 2 ? "reference" : "cpu") + "}\n";
    const LoweredGraph lg = lower(n.train, parse_plan(text, "alt.yaml"));
    const Graph& g = lg.train.graph;
    std::set<std::pair<TensorId, std::string>> seen;
    for (size_t k = 0; k < g.num_nodes(); ++k) {
        const Node& node = g.node(NodeId(k));
        if (node.kind != OpKind::Transfer) {
            for (TensorId t : node.inputs) EXPECT_EQ(tensor_device(g, t), node.device) << node.name << " reads " << g.tensor(t).name;
            continue;
        }
        const auto& a = attrs_as<TransferAttrs>(node);
        EXPECT_EQ(a.to, node.device);
        EXPECT_NE(a.from, a.to);
        EXPECT_TRUE(seen.insert({node.inputs[0], a.to}).second) << "duplicate " << node.name;
    }
    EXPECT_EQ(seen.size(), lg.transfers);
    EXPECT_GT(lg.transfers, 10u);
    for (const std::string& pass : kPassNames) {
        std::ostringstream os;
        LowerOptions o;
        o.dump_after = pass;
        o.dump = &os;
        lower(n.train, parse_plan(text, "alt.yaml"), o);
        EXPECT_NE(os.str().find("after pass '" + pass + "'"), std::string::npos) << os.str().substr(0, 200);
        if (pass == "decide") {
            EXPECT_EQ(os.str().find("transfer:"), std::string::npos);
        }
        if (pass == "transfers") {
            EXPECT_NE(os.str().find("Transfer @reference"), std::string::npos);
        }
    }
    expect_error([&] {
        LowerOptions o;
        o.dump_after = "fusion";
        lower(n.train, Plan{}, o);
    }, "unknown pass 'fusion'");
}

// A Reshape between row-major tensors is a view of its input (same buffer and offset: no copy), and the
// input's bytes then live until the output's last reader: no tensor alive meanwhile is placed over them.
// A reshape that changes the bytes (LeNet's flatten of an nhwc tensor) keeps a buffer of its own.
TEST(Passes, RowMajorReshapesAreViewsOfTheirInput) {
    for (const char* net : {"bert-tiny", "lenet5"}) {
        Net n = build(net, 4);
        LowerOptions lo;
        lo.keep = {n.model.logits, n.model.loss};
        const LoweredGraph lg = lower(std::move(n.train), Plan{}, lo);
        const Graph& g = lg.train.graph;
        const MemoryPlan& mp = lg.memory;
        const size_t nt = g.num_tensors();
        std::vector<size_t> root(nt);
        for (size_t t = 0; t < nt; ++t) root[t] = t;
        size_t views = 0, copies = 0;
        for (const Node& node : g.nodes()) {
            if (node.kind != OpKind::Reshape) continue;
            const size_t x = size_t(node.inputs[0]), y = size_t(node.outputs[0]);
            const bool same_bytes = g.tensor(node.inputs[0]).desc.row_major() && g.tensor(node.outputs[0]).desc.row_major();
            EXPECT_EQ(mp.buffer_of[y] == mp.buffer_of[x] && mp.offset_of[y] == mp.offset_of[x], same_bytes) << node.name;
            if (same_bytes) root[y] = root[x], ++views;
            else ++copies;
        }
        EXPECT_GT(std::string(net) == "lenet5" ? copies : views, 0u) << net;
        // lifetimes of each root's bytes, over the root and every view of it
        std::vector<int64_t> first(nt, -1), last(nt, -1);
        for (size_t k = 0; k < g.num_nodes(); ++k) {
            for (TensorId t : g.node(NodeId(k)).inputs) last[root[size_t(t)]] = int64_t(k);
            for (TensorId t : g.node(NodeId(k)).outputs) {
                if (first[root[size_t(t)]] < 0) first[root[size_t(t)]] = int64_t(k);
                last[root[size_t(t)]] = std::max(last[root[size_t(t)]], int64_t(k));
            }
        }
        for (size_t a = 0; a < nt; ++a)
            for (size_t b = a + 1; b < nt; ++b) {
                if (root[a] != a || root[b] != b || mp.buffer_of[a] != mp.buffer_of[b] || first[a] < 0 || first[b] < 0) continue;
                if (last[a] < first[b] || last[b] < first[a]) continue;  // never alive together
                const size_t ea = mp.offset_of[a] + g.tensor(TensorId(a)).desc.bytes(), eb = mp.offset_of[b] + g.tensor(TensorId(b)).desc.bytes();
                EXPECT_TRUE(ea <= mp.offset_of[b] || eb <= mp.offset_of[a]) << net << ": " << g.tensor(TensorId(a)).name << " and " << g.tensor(TensorId(b)).name;
            }
    }
}

// The same batches, two plans: all on the cpu, and layers alternating between the cpu and the reference
// backend (forward and backward of a layer on one device, transfers between). Losses agree step by step.
TEST(Passes, AlternatingCpuAndReferenceTrainsLikeAllCpu) {
    const int steps = 50;
    std::vector<float> losses[2];
    std::vector<double> transfer_seconds(2, 0);
    for (int alt = 0; alt < 2; ++alt) {
        Net n = build("lenet5", 8);
        std::string text = header(n.train) + "entries:\n";
        const auto ls = layers(n.train.graph);
        for (size_t i = 0; i < ls.size(); ++i) text += "  - {layer: \"" + ls[i] + "\", device: " + (alt && i % 2 ? "reference" : "cpu") + "}\n";
        LowerOptions lo;
        lo.keep = {n.model.logits, n.model.loss};
        const LoweredGraph lg = lower(std::move(n.train), parse_plan(text, "alt.yaml"), lo);
        EXPECT_EQ(lg.transfers > 0, alt == 1);
        BackendSet backends({.threads = 2});
        ExecutorOptions eo;
        eo.seed = 5;
        Executor ex(lg, backends, eo);
        EXPECT_EQ(ex.devices().size(), alt ? 2u : 1u);
        data::SyntheticData synth(9);
        for (int s = 0; s < steps; ++s) {
            fill_synthetic(ex, n.model, synth);
            ex.run_all();
            losses[alt].push_back(ex.f32(lg.train.loss)[0]);
        }
        for (size_t k = 0; k < lg.train.graph.num_nodes(); ++k)
            if (lg.train.graph.node(NodeId(k)).kind == OpKind::Transfer) {
                EXPECT_EQ(ex.node_runs()[k], steps);
                transfer_seconds[size_t(alt)] += ex.node_seconds()[k];
                EXPECT_FALSE(ex.node_modelled()[k]) << "both devices really run here: the copy is measured";
            }
    }
    EXPECT_GT(transfer_seconds[1], 0);
    for (int s = 0; s < steps; ++s) EXPECT_NEAR(losses[1][size_t(s)], losses[0][size_t(s)], 2e-3 * std::fabs(losses[0][size_t(s)])) << "step " << s;
    EXPECT_LT(losses[0].back(), losses[0].front());
}

TEST(Passes, DropoutMasksDoNotDependOnInsertedNodes) {
    // The same dropout node, once after a cast (bf16 linear before it) and once without: same mask.
    std::vector<float> masks[2];
    for (int bf16 = 0; bf16 < 2; ++bf16) {
        Graph g;
        const TensorId x = g.parameter("x", {{4, 16}}, Init::normal(1));
        const TensorId h = g.add1(OpKind::Linear, LinearAttrs{false}, {x, g.parameter("w", {{16, 16}}, Init::normal(0.3f))}, "fc");
        const auto d = g.add(OpKind::Dropout, DropoutAttrs{0.5f, 3}, {h}, "drop");
        TrainGraph tg;
        tg.graph = std::move(g);
        BackendSet backends({.threads = 1});
        const Plan plan = precision_plan(tg, bf16 ? DType::BF16 : DType::F32, PrecisionScope::Gemm, backends.get("cpu"));
        LowerOptions lo;
        lo.keep = {d[1]};
        const LoweredGraph lg = lower(std::move(tg), plan, lo);
        EXPECT_EQ(lg.casts > 0, bf16 == 1);
        Executor ex(lg, backends);
        ex.run_all();
        masks[bf16] = ex.read_f32(d[1]);
    }
    EXPECT_EQ(masks[0], masks[1]);
}

size_t forward_activations(const Graph& g) {
    size_t n = 0;
    for (const Node& node : g.nodes()) n += node.phase == Phase::Forward && backward_reads_output(node.kind);
    return n;
}

// The fuse pass folds every ReLU of LeNet-5 (conv and linear), ResNet-18 (batch norm, residual add) and
// VGG-16 and every ReLU6 of MobileNetV2 (batch norm) into its producer. A fused node writes the
// activation's output; the pre-activation tensor is neither written, read nor stored, and the activation's
// backward reads the fused node's output -- or, folded into the backward of a batch norm that took the
// activation in, recomputes it from the batch norm's input and shift (NormAttrs::recompute_act).
TEST(Passes, FusesActivationsIntoTheirProducers) {
    for (const auto& [net, left] : {std::pair{"lenet5", 0}, {"resnet18", 0}, {"vgg16", 0}, {"mobilenet_v2", 0}}) {
        Net n = build(net, 2, std::string(net) == "lenet5" ? 0 : 32);
        const size_t before = forward_activations(n.train.graph);
        const Graph unfused = n.train.graph;
        LowerOptions lo;
        lo.keep = {n.model.logits, n.model.loss};
        const LoweredGraph lg = lower(std::move(n.train), Plan{}, lo);
        const Graph& g = lg.train.graph;
        const size_t after = forward_activations(g);
        EXPECT_EQ(lg.fused, before - after) << net;
        if (left == 0) EXPECT_EQ(after, 0u) << net;
        else EXPECT_EQ(after, before) << net;
        size_t fused = 0;
        for (size_t k = 0; k < g.num_nodes(); ++k) {
            const Node& node = g.node(NodeId(k));
            if (node.post_op == OpKind::Count) continue;
            ++fused;
            const Node& act = unfused.node(unfused.tensor(node.outputs[0]).producer);  // the activation it replaced
            EXPECT_EQ(act.kind, node.post_op) << node.name;
            const TensorId pre = act.inputs[0];
            EXPECT_EQ(unfused.node(unfused.tensor(pre).producer).name, node.name);
            EXPECT_EQ(g.tensor(pre).producer, kNone) << node.name;
            EXPECT_TRUE(g.consumers(pre).empty()) << node.name;
            EXPECT_EQ(lg.memory.buffer_of[size_t(pre)], -1) << node.name;
            const OpKind backward = node.post_op == OpKind::Relu ? OpKind::ReluBackward : OpKind::Relu6Backward;
            bool backward_reads_it = false;
            for (NodeId r : g.consumers(node.outputs[0]))
                backward_reads_it = backward_reads_it || g.node(r).kind == backward || (g.node(r).pre_op == backward && g.node(r).inputs.back() == node.outputs[0]);
            bool recomputed = false;  // batch norm: its backward reads (dY', X, gamma, mean, var, beta) instead
            for (NodeId r : g.consumers(node.inputs[0])) {
                const Node& b = g.node(r);
                recomputed = recomputed || (b.pre_op == backward && recomputes_activation(b) && b.inputs[1] == node.inputs[0] && b.inputs.back() == node.inputs[2] &&
                                            b.inputs[3] == node.outputs[1] && b.inputs[4] == node.outputs[2]);
            }
            bool commuted = false;  // a max pool reads it: the pool's backward masks dY by f'(the pool's output) instead
            for (NodeId r : g.consumers(node.outputs[0])) {
                if (g.node(r).kind != OpKind::MaxPool2d) continue;
                const TensorId pooled = g.node(r).outputs[0];
                for (NodeId b : g.consumers(pooled))
                    commuted = commuted || (g.node(b).kind == OpKind::MaxPool2dBackward && g.node(b).pre_op == backward && g.node(b).inputs.back() == pooled);
            }
            EXPECT_EQ(int(backward_reads_it) + int(recomputed) + int(commuted), 1) << node.name;
            EXPECT_EQ(recomputed, node.kind == OpKind::BatchNorm2d) << node.name;
        }
        EXPECT_EQ(fused, lg.fused) << net;
    }
}

// A ReLU backward after a max-pool backward, the pool reading the ReLU's output, commutes into the pool's
// backward (Node::pre_op): that node reads (dY, argmax, Y_pool), and no backward node reads the ReLU's output,
// so it is not kept for the backward -- unless the pool's gradient is kept, which the fused node would not write.
TEST(Passes, CommutesActivationBackwardsIntoMaxPoolBackwards) {
    for (const auto& [net, pools] : {std::pair{"lenet5", 2}, {"vgg16", 5}})
        for (const bool keep_gradients : {false, true}) {
            Net n = build(net, 2, std::string(net) == "lenet5" ? 0 : 32);
            LowerOptions lo;
            lo.keep = {n.model.logits, n.model.loss};
            for (const Node& b : n.train.graph.nodes())
                if (keep_gradients && b.kind == OpKind::MaxPool2dBackward) lo.keep.push_back(b.outputs[0]);
            const LoweredGraph lg = lower(std::move(n.train), Plan{}, lo);
            const Graph& g = lg.train.graph;
            int commuted = 0;
            for (const Node& b : g.nodes()) {
                if (b.kind != OpKind::MaxPool2dBackward || b.pre_op == OpKind::Count) continue;
                ++commuted;
                EXPECT_EQ(b.pre_op, OpKind::ReluBackward) << b.name;
                const Node& pool = g.node(b.source);
                ASSERT_EQ(pool.kind, OpKind::MaxPool2d) << b.name;
                EXPECT_EQ(b.inputs.back(), pool.outputs[0]) << b.name;
                EXPECT_EQ(g.tensor(b.outputs[0]).desc, g.tensor(pool.inputs[0]).desc) << b.name;  // the ReLU's gradient, as the ReLU's backward wrote it
                for (NodeId r : g.consumers(pool.inputs[0])) EXPECT_NE(g.node(r).phase, Phase::Backward) << b.name << " reader " << g.node(r).name;
            }
            EXPECT_EQ(commuted, keep_gradients ? 0 : pools) << net;
        }
    // not where the pool's forward runs on another device (it reads a transfer of the ReLU's output)
    Net n = build("lenet5", 2, 0);
    const Plan plan = parse_plan(header(n.train) + "entries:\n  - {node: \"pool1\", device: \"fpga_emu:s10\"}\n", "p.yaml");
    const LoweredGraph lg = lower(std::move(n.train), plan, LowerOptions{.keep = {n.model.loss}});
    std::map<std::string, OpKind> pre;
    for (const Node& b : lg.train.graph.nodes())
        if (b.kind == OpKind::MaxPool2dBackward) pre[b.name] = b.pre_op;
    EXPECT_EQ(pre.at("pool1.bwd"), OpKind::Count);
    EXPECT_EQ(pre.at("pool2.bwd"), OpKind::ReluBackward);
}

// Fusion only where the result is the same graph computed with fewer passes: not when the pre-activation
// has another reader, is kept, or lies on a device whose backend does not fuse (the emulated FPGA), not
// after a producer with no fused kernel (a pooling).
TEST(Passes, FusesOnlyWhereNothingElseSeesThePreActivation) {
    Graph g;
    const TensorId x = g.input("x", {{2, 3, 8, 8}, DType::F32, Layout::ChannelsLast});
    auto conv = [&](TensorId in, const std::string& name) {
        return g.add1(OpKind::Conv2d, ConvAttrs{.pad = {1, 1}}, {in, g.parameter(name + ".w", {{3, 3, 3, 3}}, Init::normal(0.2f))}, name);
    };
    const TensorId r1 = g.add1(OpKind::Relu, NoAttrs{}, {conv(x, "c1")}, "r1");                      // fused
    const TensorId c2 = conv(r1, "c2"), r2 = g.add1(OpKind::Relu, NoAttrs{}, {c2}, "r2");          // c2 read twice
    const TensorId s = g.add1(OpKind::Add, NoAttrs{}, {c2, r2}, "sum");
    const TensorId c3 = conv(s, "c3"), r3 = g.add1(OpKind::Relu6, NoAttrs{}, {c3}, "r3");          // c3 kept
    const auto bn = g.add(OpKind::BatchNorm2d, NormAttrs{},
                          {r3, g.parameter("bn.g", {{3}}, Init::ones()), g.parameter("bn.b", {{3}}, Init::zeros()),
                           g.state("bn.m", {{3}}, Init::zeros()), g.state("bn.v", {{3}}, Init::ones())}, "bn");
    const TensorId r4 = g.add1(OpKind::Relu6, NoAttrs{}, {bn[0]}, "r4");                              // fused
    const TensorId c5 = conv(r4, "c5");
    g.add1(OpKind::Relu, NoAttrs{}, {c5}, "r5");                                                       // on the FPGA
    g.add1(OpKind::Relu, NoAttrs{}, {g.add1(OpKind::GlobalAvgPool, NoAttrs{}, {r4}, "pool")}, "r6");   // no fused pooling
    TrainGraph tg;
    tg.graph = std::move(g);
    const Plan plan = parse_plan(header(tg) + "entries:\n  - {node: \"c5\", device: \"fpga_emu:s10\"}\n  - {node: \"r5\", device: \"fpga_emu:s10\"}\n", "p.yaml");
    LowerOptions lo;
    lo.keep = {c3};
    const LoweredGraph lg = lower(std::move(tg), plan, lo);
    std::map<std::string, OpKind> post;
    for (const Node& n : lg.train.graph.nodes()) post[n.name] = n.post_op;
    EXPECT_EQ(lg.fused, 2u);
    EXPECT_EQ(post.at("c1"), OpKind::Relu);
    EXPECT_EQ(post.at("bn"), OpKind::Relu6);
    for (const char* gone : {"r1", "r4"}) EXPECT_FALSE(post.count(gone)) << gone;
    for (const char* unfused : {"c2", "c3", "c5", "pool"}) EXPECT_EQ(post.at(unfused), OpKind::Count) << unfused;
    for (const char* kept : {"r2", "r3", "r5", "r6"}) EXPECT_TRUE(post.count(kept)) << kept;
}

// The nodes a backward node was folded into (Node::pre_op).
std::vector<Node> folded_nodes(const LoweredGraph& lg) {
    std::vector<Node> out;
    for (const Node& n : lg.train.graph.nodes())
        if (n.pre_op != OpKind::Count) out.push_back(n);
    return out;
}

// An activation's backward folds into the batch-norm backward reading its result (Node::pre_op) -- which
// then reads (dY, X, gamma, mean, var, Y), or, where the activation is fused into that batch norm's forward,
// (dY, X, gamma, mean, var, beta) and recomputes Y -- unless that result is kept or read by another node too.
TEST(Passes, FoldsActivationBackwardsIntoBatchNormBackwards) {
    // plain; the activation's gradient kept; batch norm's output read twice (gradients summed); batch norm's
    // output kept (the forward unfused)
    for (const int variant : {0, 1, 2, 3}) {
        Graph g;
        const TensorId x = g.input("x", {{2, 3, 4, 4}, DType::F32, Layout::ChannelsLast});
        const auto bn = g.add(OpKind::BatchNorm2d, NormAttrs{},
                              {x, g.parameter("bn.g", {{3}}, Init::ones()), g.parameter("bn.b", {{3}}, Init::zeros()),
                               g.state("bn.m", {{3}}, Init::zeros()), g.state("bn.v", {{3}}, Init::ones())}, "bn");
        const TensorId y = g.add1(OpKind::Relu6, NoAttrs{}, {bn[0]}, "act");
        const TensorId out = variant == 2 ? g.add1(OpKind::Add, NoAttrs{}, {y, bn[0]}, "skip") : y;
        const TensorId loss = g.add1(OpKind::SumTo, BroadcastAttrs{{1}, 1.0f}, {out}, "loss");
        TrainGraph tg = build_train_graph(std::move(g), loss, OptimizerConfig::sgd(0.1f, 0.0f));
        TensorId dz = kNone;  // the activation's gradient
        for (const Node& n : tg.graph.nodes())
            if (n.kind == OpKind::Relu6Backward) dz = n.outputs[0];
        ASSERT_NE(dz, kNone);
        const LoweredGraph lg =
            lower(std::move(tg), Plan{}, {.keep = variant == 1 ? std::vector{loss, dz} : variant == 3 ? std::vector{loss, bn[0]} : std::vector{loss}});
        const std::vector<Node> folded = folded_nodes(lg);
        for (const Node& n : folded) {
            EXPECT_EQ(n.kind, OpKind::BatchNormBackward);
            EXPECT_EQ(n.pre_op, OpKind::Relu6Backward);
            ASSERT_EQ(n.inputs.size(), 6u);
            EXPECT_EQ(recomputes_activation(n), variant == 0);
            // beta (batch norm with the ReLU6 fused in), or Y (the ReLU6's output)
            EXPECT_EQ(lg.train.graph.tensor(n.inputs.back()).name, variant == 0 ? "bn.b" : lg.train.graph.tensor(y).name);
            EXPECT_EQ(op_label(n), "Relu6Backward+BatchNormBackward");
        }
        EXPECT_EQ(folded.size(), variant == 0 || variant == 3 ? 1u : 0u) << variant;
        EXPECT_EQ(lg.fused_backward, folded.size());
        EXPECT_EQ(lg.train.graph.tensor(dz).producer == kNone, variant == 0 || variant == 3) << variant;
    }
}

// A gradient sum (a tensor read twice: its gradients added) folds into the ReLU backward reading it
// (Node::pre_op Add) -- which then reads (a, Y, b) -- unless the sum is kept.
TEST(Passes, FoldsGradientSumsIntoReluBackwards) {
    for (const bool keep_sum : {false, true}) {
        Graph g;
        const TensorId x = g.input("x", {{2, 3, 4, 4}, DType::F32, Layout::ChannelsLast});
        const TensorId p = g.parameter("p", {{2, 3, 4, 4}, DType::F32, Layout::ChannelsLast}, Init::normal(1.0f));
        const TensorId r = g.add1(OpKind::Relu, NoAttrs{}, {g.add1(OpKind::Add, NoAttrs{}, {x, p}, "junction")}, "relu");
        const TensorId t = g.add1(OpKind::Sigmoid, NoAttrs{}, {r}, "branch");
        const TensorId loss = g.add1(OpKind::SumTo, BroadcastAttrs{{1}, 1.0f}, {g.add1(OpKind::Add, NoAttrs{}, {r, t}, "out")}, "loss");
        TrainGraph tg = build_train_graph(std::move(g), loss, OptimizerConfig::sgd(0.1f, 0.0f));
        TensorId sum = kNone;
        for (const Node& n : tg.graph.nodes())
            if (n.kind == OpKind::ReluBackward) sum = n.inputs[0];
        ASSERT_NE(sum, kNone);
        ASSERT_EQ(tg.graph.node(tg.graph.tensor(sum).producer).kind, OpKind::Add);
        const LoweredGraph lg = lower(std::move(tg), Plan{}, {.keep = keep_sum ? std::vector{loss, sum} : std::vector{loss}});
        const std::vector<Node> folded = folded_nodes(lg);
        for (const Node& n : folded) {
            EXPECT_EQ(n.kind, OpKind::ReluBackward);
            EXPECT_EQ(n.pre_op, OpKind::Add);
            ASSERT_EQ(n.inputs.size(), 3u);
            EXPECT_EQ(n.inputs[1], r);  // Y: the output of the add with the ReLU fused in
            EXPECT_EQ(op_label(n), "Add+ReluBackward");
        }
        EXPECT_EQ(folded.size(), keep_sum ? 0u : 1u);
        EXPECT_EQ(lg.fused_backward, folded.size());
        EXPECT_EQ(lg.train.graph.tensor(sum).producer == kNone, !keep_sum);
    }
}

// Every parameter's values in logical order, in tensor order, and the Euclidean distance between two such lists.
std::vector<std::vector<float>> parameter_values(const LoweredGraph& lg, const Executor& ex) {
    std::vector<std::vector<float>> w;
    for (size_t t = 0; t < lg.train.graph.num_tensors(); ++t)
        if (lg.train.graph.tensor(TensorId(t)).role == TensorRole::Parameter) w.push_back(ex.read_f32(TensorId(t)));
    return w;
}
double distance(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
    EXPECT_EQ(a.size(), b.size());
    double sum = 0;
    for (size_t p = 0; p < std::min(a.size(), b.size()); ++p)
        for (size_t i = 0; i < a[p].size(); ++i) sum += std::pow(double(a[p][i]) - b[p][i], 2);
    return std::sqrt(sum);
}

// Three training steps of a lowered zoo net on synthetic batches: the parameters before, each step's loss, the
// parameters after.
struct Trained {
    std::vector<std::vector<float>> initial, weights;
    std::vector<float> losses;
};
Trained train_steps(const LoweredGraph& lg, BackendSet& backends, const zoo::Model& model, uint64_t seed, uint64_t data_seed) {
    Executor ex(lg, backends, {.seed = seed});
    Trained t{parameter_values(lg, ex), {}, {}};
    data::SyntheticData synth(data_seed);
    for (int s = 0; s < 3; ++s) {
        fill_synthetic(ex, model, synth);
        ex.run_all();
        t.losses.push_back(ex.f32(model.loss)[0]);
    }
    t.weights = parameter_values(lg, ex);
    return t;
}

// Training under the fused graph follows training of the same graph lowered without fusion, which runs
// every activation and activation backward as its own node: same initial parameters, same batches; losses
// step by step, and the parameters' change over three steps within 5 % (ResNet-18's last batch norms see
// 2x2 pixels and amplify rounding: the sanitizer build's -O1 code parts the two by 1.3 %, the -O3 build by
// less than 1 %; one step's accuracy against the reference is checked below). LeNet-5 (conv / linear + ReLU), ResNet-18 (batch norm
// + ReLU both ways, residual add + ReLU). MobileNetV2 at a size a test can afford is chaotic (its batch
// norms over 2x2 pixels amplify rounding: unfused oneDNN on one thread and on two part by 0.2 % in the
// second step's loss), so its fused batch norms are checked for accuracy below instead.
TEST(Passes, FusedTrainingFollowsUnfusedTraining) {
    for (const char* net : {"lenet5", "resnet18"}) {
        const double tol = 1e-4;
        std::vector<float> losses[2];
        std::vector<std::vector<float>> weights[2], initial;
        for (int fuse = 0; fuse < 2; ++fuse) {
            zoo::NetConfig cfg{.batch = 4, .image_size = std::string(net) == "lenet5" ? 0 : 64, .in_channels = 0, .classes = 10};
            zoo::Model model = zoo::build(net, cfg);
            const TensorId loss = model.loss;
            TrainGraph tg = build_train_graph(std::move(model.graph), loss, OptimizerConfig::sgd(0.002f, 0.9f));
            BackendSet backends({.threads = 2});
            const LoweredGraph lg = lower(std::move(tg), Plan{}, {.keep = {loss}, .fuse = fuse == 1});
            EXPECT_EQ(lg.fused > 0, fuse == 1) << net;
            EXPECT_EQ(lg.fused_backward > 0, fuse == 1) << net;  // LeNet-5: ReLU backwards commuted into the pools'
            Trained t = train_steps(lg, backends, model, 3, 4);
            if (fuse == 0) initial = std::move(t.initial);
            losses[fuse] = std::move(t.losses);
            weights[fuse] = std::move(t.weights);
        }
        for (size_t s = 0; s < losses[0].size(); ++s) EXPECT_NEAR(losses[1][s], losses[0][s], tol * std::fabs(losses[0][s])) << net << " step " << s;
        EXPECT_LT(distance(weights[1], weights[0]), 0.05 * distance(weights[0], initial)) << net;
    }
}

// The gemm-scope bf16 plan runs BERT's head splits and merges (Transpose, Reshape) in bf16 between its bf16
// linears and attention matmuls, forward and backward: the GEMM before one writes bf16 and no Cast follows the
// move. A move is exact and the rounding the same, so training gives the same bits as the plan that moves f32
// (the GEMM writing f32, the move in f32, a Cast before the next GEMM).
TEST(Passes, MovesBetweenLowPrecisionGemmsRunInTheirPrecisionWithTheSameBits) {
    std::vector<float> losses[2];
    std::vector<std::vector<float>> weights[2];
    size_t casts[2] = {0, 0};
    for (int moves_low = 0; moves_low < 2; ++moves_low) {
        zoo::Model model = zoo::build("bert-tiny", {.batch = 2, .image_size = 0, .in_channels = 0, .classes = 2, .seq_len = 16});
        const TensorId loss = model.loss;
        TrainGraph tg = build_train_graph(std::move(model.graph), loss, OptimizerConfig::sgd(0.02f, 0.9f));
        BackendSet backends({.threads = 2});
        Plan plan = precision_plan(tg, DType::BF16, PrecisionScope::Gemm, backends.get("cpu"));
        const Graph& g = tg.graph;
        std::map<std::string, NodeId> node_named;
        for (size_t k = 0; k < g.num_nodes(); ++k) node_named[g.node(NodeId(k)).name] = NodeId(k);
        size_t low_moves = 0;
        for (const PlanEntry& e : plan.entries) {
            const NodeId id = node_named.at(e.pattern);
            if (!moves_data_only(g.node(id).kind)) continue;
            ++low_moves;
            // every input written by a low-precision node, every reader one
            for (TensorId t : g.node(id).inputs)
                EXPECT_TRUE(std::any_of(plan.entries.begin(), plan.entries.end(), [&](const PlanEntry& o) { return o.pattern == g.node(g.tensor(t).producer).name; })) << e.pattern;
        }
        // per layer a Reshape and a Transpose for each of q, k, v and for the merge, forward and backward
        EXPECT_EQ(low_moves, 2u * 8 * 2);
        if (moves_low == 0) {  // the plan before: the moves in f32, the GEMMs before them writing f32
            std::vector<PlanEntry> kept;
            for (const PlanEntry& e : plan.entries) {
                const Node& node = g.node(node_named.at(e.pattern));
                if (!moves_data_only(node.kind)) {
                    kept.push_back(e);
                    continue;
                }
                if (const Node& p = g.node(g.tensor(node.inputs[0]).producer); gemm_may_write_f32(p.kind))
                    plan.storage.push_back({g.tensor(p.outputs[0]).name, DType::F32, "test"});
            }
            plan.entries = kept;
        }
        const LoweredGraph lg = lower(std::move(tg), plan, {.keep = {loss}});
        casts[moves_low] = lg.casts;
        Trained t = train_steps(lg, backends, model, 5, 7);
        losses[moves_low] = std::move(t.losses);
        weights[moves_low] = std::move(t.weights);
    }
    EXPECT_EQ(casts[0] - casts[1], 2u * 8) << "per layer a cast after each of the 8 moves between GEMMs";
    EXPECT_EQ(losses[1], losses[0]);
    EXPECT_EQ(weights[1], weights[0]);
}

// In bf16 plans the Cast after a batch norm with an activation fused in or its backward with the
// activation's backward folded in (MobileNetV2, ResNet) or after a GELU or its backward (BERT) folds into
// that node: it stores bf16 as it rounds, the f32
// tensor is neither written nor stored; and a parameter's cast into its own layout folds into the
// parameter's update, which writes the bf16 copy for the next step. The same bits as casting after the fact.
TEST(Passes, FoldsCastsIntoNodesThatRoundAsTheyStore) {
    for (const char* net : {"mobilenet_v2", "bert-tiny"}) {
        const bool bert = std::string(net) == "bert-tiny";
        std::vector<float> losses[2];
        std::vector<std::vector<float>> weights[2];
        for (int fold = 0; fold < 2; ++fold) {
            zoo::Model model = zoo::build(net, {.batch = 4, .image_size = bert ? 0 : 64, .in_channels = 0, .classes = 4, .seq_len = 16});
            const TensorId loss = model.loss;
            TrainGraph tg = build_train_graph(std::move(model.graph), loss, OptimizerConfig::sgd(0.002f, 0.9f));
            BackendSet backends({.threads = 2});
            const Plan plan = precision_plan(tg, DType::BF16, PrecisionScope::Gemm, backends.get("cpu"));
            const LoweredGraph lg = lower(std::move(tg), plan, {.keep = {loss}, .fold_casts = fold == 1});
            const Graph& g = lg.train.graph;
            size_t low = 0, cast_after = 0;  // nodes that could store bf16: storing it, followed by a cast
            for (size_t k = 0; k < g.num_nodes(); ++k) {
                const Node& n = g.node(NodeId(k));
                if (!stores_output_low(n.kind)) continue;
                low += g.tensor(n.outputs[0]).desc.dtype == DType::BF16;
                const auto& readers = g.consumers(n.outputs[0]);
                cast_after += readers.size() == 1 && g.node(readers[0]).kind == OpKind::Cast;
                if (g.tensor(n.outputs[0]).desc.dtype == DType::BF16) {
                    EXPECT_EQ(n.compute, DType::F32) << n.name;
                }
            }
            EXPECT_EQ(low, lg.folded_casts) << net;
            size_t copies = 0, parameter_casts = 0;  // updates keeping a copy; casts of a parameter into its own layout left
            for (size_t k = 0; k < g.num_nodes(); ++k) {
                const Node& n = g.node(NodeId(k));
                copies += size_t(low_copy_count(n));
                parameter_casts += n.kind == OpKind::Cast && g.tensor(n.inputs[0]).role == TensorRole::Parameter &&
                                   writes_low_copy(n.device, g.tensor(n.inputs[0]).desc, g.tensor(n.outputs[0]).desc);
            }
            EXPECT_EQ(copies, lg.update_copies) << net;
            if (fold == 1) {
                EXPECT_EQ(cast_after, 0u) << net << ": a foldable cast left";
                EXPECT_EQ(parameter_casts, 0u) << net << ": a parameter cast left that its update could keep";
                // MobileNetV2: every batch norm backward (35 with ReLU6's folded in, 17 without), every batch
                // norm + ReLU6 but the last (a global average pool in f32 reads it), and the two projection
                // batch norms that a convolution alone reads (the others feed a residual add too); and the
                // classifier's dropout, and each stage's last residual add (the next block's expansion convolution
                // alone reads it) (BERT: its attention dropouts too, the others feed a residual add; and per layer
                // the attention's softmax backward and the two dropout backwards' products, which bf16 GEMMs read)
                EXPECT_EQ(lg.folded_casts, bert ? 4u + 3u + 2u + 4u : 52u + 34u + 2u + 1u + 5u)
                    << net
                    << (bert ? ": per layer GELU and its backward, softmax's backward and two dropout backwards, the dropouts a GEMM alone reads"
                             : ": batch norms, both ways, a dropout and five residual adds");
                EXPECT_EQ(lg.update_copies, bert ? 14u : 15u + 2u * 34u)
                    << net << (bert ? ": every Linear weight" : ": the depthwise and classifier weights, and each 1x1 convolution weight in its two bf16 formats");
            } else {
                EXPECT_EQ(lg.folded_casts, 0u);
                EXPECT_EQ(lg.update_copies, 0u);
            }
            Trained t = train_steps(lg, backends, model, 5, 4);
            losses[fold] = std::move(t.losses);
            weights[fold] = std::move(t.weights);
        }
        EXPECT_EQ(losses[1], losses[0]) << net;
        EXPECT_EQ(weights[1], weights[0]) << net;
        for (float l : losses[0]) EXPECT_TRUE(std::isfinite(l)) << net;
    }
}


// A Transpose keeping the last dim last folds into the MatMul writing its input (perm_c) when it is that
// input's only reader, else into the MatMuls reading its output (perm_a / perm_b) when they are all its
// readers; not when a reader is another op, the last dim moves, or a tensor is kept.
TEST(Passes, FoldsTransposesIntoMatMulsOnly) {
    Graph g;
    const std::vector<int64_t> heads{0, 2, 1, 3};
    const TensorId x = g.input("x", {{2, 3, 4, 5}}), w = g.input("w", {{2, 4, 5, 6}});
    const TensorId t1 = g.add1(OpKind::Transpose, TransposeAttrs{heads}, {x}, "t1");                            // into m1
    const TensorId m1 = g.add1(OpKind::MatMul, MatMulAttrs{}, {t1, w}, "m1");
    const TensorId t2 = g.add1(OpKind::Transpose, TransposeAttrs{heads}, {m1}, "t2");                           // into m1
    const TensorId t3 = g.add1(OpKind::Transpose, TransposeAttrs{heads}, {x}, "t3");                            // a Relu reads it too
    g.add1(OpKind::MatMul, MatMulAttrs{}, {t3, w}, "m3");
    g.add1(OpKind::Relu, NoAttrs{}, {t3}, "r3");
    const TensorId t4 = g.add1(OpKind::Transpose, TransposeAttrs{{0, 1, 3, 2}}, {x}, "t4");                     // the last dim moves
    g.add1(OpKind::MatMul, MatMulAttrs{false, true}, {t4, g.input("w4", {{2, 3, 6, 4}})}, "m4");
    const TensorId t5 = g.add1(OpKind::Transpose, TransposeAttrs{heads}, {x}, "t5");                            // kept
    const TensorId m5 = g.add1(OpKind::MatMul, MatMulAttrs{}, {t5, w}, "m5");
    g.add1(OpKind::Transpose, TransposeAttrs{heads}, {m5}, "t6");                                                // m5 kept
    TrainGraph tg;
    tg.graph = std::move(g);
    const Plan plan = parse_plan(header(tg) + "entries: []\n", "p.yaml");
    const LoweredGraph lg = lower(std::move(tg), plan, {.keep = {t2, t5, m5}});
    EXPECT_EQ(lg.folded_transposes, 2u);
    std::map<std::string, Node> by_name;
    for (const Node& n : lg.train.graph.nodes()) by_name.emplace(n.name, n);
    for (const char* gone : {"t1", "t2"}) EXPECT_FALSE(by_name.count(gone)) << gone;
    for (const char* left : {"t3", "t4", "t5", "t6"}) EXPECT_TRUE(by_name.count(left)) << left;
    const Node& n = by_name.at("m1");
    EXPECT_EQ(n.inputs[0], x);
    EXPECT_EQ(n.outputs[0], t2);
    EXPECT_EQ(attrs_as<MatMulAttrs>(n).perm_a, heads);
    EXPECT_EQ(attrs_as<MatMulAttrs>(n).perm_c, heads);
    EXPECT_EQ(lg.train.graph.tensor(t2).desc.shape, (Shape{2, 3, 4, 6}));
    for (const char* plain : {"m3", "m4", "m5"}) {
        const auto& a = attrs_as<MatMulAttrs>(by_name.at(plain));
        EXPECT_TRUE(a.perm_a.empty() && a.perm_b.empty() && a.perm_c.empty()) << plain;
    }
}

// bert-tiny (batch 4, 16 tokens) under a `dtype` plan, lowered with `o` (its loss kept), trained three steps;
// `check` sees the lowered graph first.
template <class Check>
Trained train_bert(DType dtype, LowerOptions o, Check check) {
    zoo::Model model = zoo::build("bert-tiny", {.batch = 4, .image_size = 0, .in_channels = 0, .classes = 4, .seq_len = 16});
    const TensorId loss = model.loss;
    TrainGraph tg = build_train_graph(std::move(model.graph), loss, OptimizerConfig::sgd(0.002f, 0.9f));
    BackendSet backends({.threads = 2});
    const Plan plan = precision_plan(tg, dtype, PrecisionScope::Gemm, backends.get("cpu"));
    o.keep = {loss};
    const LoweredGraph lg = lower(std::move(tg), plan, o);
    check(lg);
    return train_steps(lg, backends, model, 5, 4);
}

// BERT's head split and merge, forward and backward (16 transposes in bert-tiny), fold into its attention
// products, which read and write [B, S, heads, D] storage as [B, heads, S, D]: no Transpose is left and
// training takes the same steps to the bit, f32 and bf16.
TEST(Passes, FoldedTransposesTrainBertAsTheTransposesDo) {
    for (const DType dtype : {DType::F32, DType::BF16}) {
        Trained t[2];
        for (int fold = 0; fold < 2; ++fold)
            t[fold] = train_bert(dtype, {.fold_transposes = fold == 1}, [&](const LoweredGraph& lg) {
                size_t transposes = 0;
                for (const Node& n : lg.train.graph.nodes()) transposes += n.kind == OpKind::Transpose;
                EXPECT_EQ(lg.folded_transposes, fold ? 16u : 0u);
                EXPECT_EQ(transposes, fold ? 0u : 16u);
            });
        EXPECT_EQ(t[1].losses, t[0].losses) << dtype_name(dtype);
        EXPECT_EQ(t[1].weights, t[0].weights) << dtype_name(dtype);
    }
}
// A gradient sum (f32 Add, same-desc terms) folds into the LinearBackwardData writing one term when that term
// is transient and read by the sum alone, and the other term is written before the product runs; a chain of
// sums folds term by term. Not past a kept term, a second reader, a broadcast, or a term written later.
TEST(Passes, FoldsGradSumsIntoBackwardDataOnly) {
    Graph g;
    const TensorDesc xd{{6, 8}}, yd{{6, 4}};
    const TensorId w = g.input("w", {{4, 8}}), a = g.input("a", xd), dy = g.input("dy", yd);
    auto bwd_data = [&](const std::string& name) {
        return g.add(OpKind::LinearBackwardData, LinearAttrs{false}, {dy, w}, name, Phase::Backward, kNone, xd, TensorRole::Gradient).front();
    };
    auto sum = [&](TensorId x, TensorId y, const std::string& name) {
        return g.add(OpKind::Add, NoAttrs{}, {x, y}, name, Phase::Backward, kNone, std::nullopt, TensorRole::Gradient).front();
    };
    const TensorId d1 = bwd_data("d1"), d2 = bwd_data("d2");
    const TensorId s1 = sum(a, d1, "s1");   // into d1
    const TensorId s2 = sum(s1, d2, "s2");  // into d2, reading d1's sum
    const TensorId d3 = bwd_data("d3");
    const TensorId late = g.add1(OpKind::Relu, NoAttrs{}, {a}, "late");
    const TensorId s3 = sum(late, d3, "s3");  // the other term is written after d3
    const TensorId d4 = bwd_data("d4");
    const TensorId s4 = sum(a, d4, "s4");  // d4 kept
    const TensorId d5 = bwd_data("d5");
    const TensorId s5 = sum(a, d5, "s5");  // d5 read twice
    const TensorId r5 = g.add1(OpKind::Relu, NoAttrs{}, {d5}, "r5");
    const TensorId d6 = bwd_data("d6");
    const TensorId s6 = sum(d6, g.input("row", {{8}}), "s6");  // a broadcast
    TrainGraph tg;
    tg.graph = std::move(g);
    const Plan plan = parse_plan(header(tg) + "entries: []\n", "p.yaml");
    const LoweredGraph lg = lower(std::move(tg), plan, {.keep = {s2, s3, d4, s4, s5, r5, s6}});
    EXPECT_EQ(lg.folded_grad_sums, 2u);
    std::map<std::string, Node> by_name;
    for (const Node& n : lg.train.graph.nodes()) by_name.emplace(n.name, n);
    for (const char* gone : {"s1", "s2"}) EXPECT_FALSE(by_name.count(gone)) << gone;
    for (const char* left : {"s3", "s4", "s5", "s6"}) EXPECT_TRUE(by_name.count(left)) << left;
    EXPECT_EQ(by_name.at("d1").inputs, (std::vector<TensorId>{dy, w, a}));
    EXPECT_EQ(by_name.at("d1").outputs[0], s1);
    EXPECT_EQ(by_name.at("d2").inputs, (std::vector<TensorId>{dy, w, s1}));
    EXPECT_EQ(by_name.at("d2").outputs[0], s2);
    for (const char* plain : {"d3", "d4", "d5", "d6"}) EXPECT_EQ(by_name.at(plain).inputs.size(), 2u) << plain;
}

// BERT's layer inputs feed Q, K, V and the residual (three chained gradient sums each) and the FFN's input
// two terms: bert-tiny's 8 sums fold into the backward-data products, and training takes the same steps
// (oneDNN's matmul with the sum as a post-op against its inner product and a separate Add: the same sums,
// in another order of the products' accumulation), f32 and bf16.
TEST(Passes, FoldedGradSumsTrainBertAsTheSumsDo) {
    for (const DType dtype : {DType::F32, DType::BF16}) {
        Trained t[2];
        for (int fold = 0; fold < 2; ++fold)
            t[fold] = train_bert(dtype, {.fold_grad_sums = fold == 1}, [&](const LoweredGraph& lg) {
                size_t sums = 0;
                for (const Node& n : lg.train.graph.nodes()) sums += n.kind == OpKind::Add && n.phase == Phase::Backward;
                EXPECT_EQ(lg.folded_grad_sums, fold ? 8u : 0u);
                EXPECT_EQ(sums, fold ? 0u : 8u);
            });
        ASSERT_EQ(t[1].losses.size(), t[0].losses.size());
        for (size_t s = 0; s < t[0].losses.size(); ++s) EXPECT_NEAR(t[1].losses[s], t[0].losses[s], 1e-5 * std::fabs(t[0].losses[s])) << dtype_name(dtype);
        // within a thousandth of the distance the steps moved the weights
        EXPECT_LT(distance(t[1].weights, t[0].weights), 1e-3 * distance(t[0].weights, t[0].initial)) << dtype_name(dtype);
    }
}
// The fused batch norms (cpu loops: forward + activation, backward with the activation's backward folded
// in, Y recomputed from X) are as accurate as batch norm and the activation as separate nodes (batch norm's
// loops without an activation, oneDNN's eltwise): one SGD step's parameter change on the cpu, fused and
// unfused, against the reference backend's (double arithmetic), the unfused within a tenth of the step:
// MobileNetV2 (ReLU6), ResNet-18 (ReLU). In f32: bf16 everywhere moves this small a MobileNetV2 by several
// per cent off the reference fused or not (the bf16 loops are checked op by op in BackendOps).
TEST(Passes, FusedBatchNormsAreAsAccurateAsUnfused) {
    for (const char* net : {"mobilenet_v2", "resnet18"}) {
        std::vector<std::vector<float>> before, after[3];  // arms: reference, cpu unfused, cpu fused
        float losses[3] = {0, 0, 0};
        for (int arm = 0; arm < 3; ++arm) {
            zoo::Model model = zoo::build(net, {.batch = 4, .image_size = 32, .in_channels = 0, .classes = 10});
            const TensorId loss = model.loss;
            TrainGraph tg = build_train_graph(std::move(model.graph), loss, OptimizerConfig::sgd(0.01f, 0.0f));
            BackendSet backends({.threads = 2});
            Plan plan;
            if (arm == 0) plan.default_device = "reference";
            const LoweredGraph lg = lower(std::move(tg), plan, {.keep = {loss}, .fuse = arm == 2});
            EXPECT_EQ(lg.fused_backward > 0, arm == 2) << net;
            Executor ex(lg, backends, {.seed = 3});
            if (arm == 0) before = parameter_values(lg, ex);
            data::SyntheticData synth(4);
            fill_synthetic(ex, model, synth);
            ex.run_all();
            losses[arm] = ex.f32(loss)[0];
            after[arm] = parameter_values(lg, ex);
        }
        // the reference's change, and each cpu arm's distance from the reference after the step
        const double step = distance(after[0], before), unfused = distance(after[1], after[0]), fused = distance(after[2], after[0]);
        for (int arm : {1, 2}) EXPECT_NEAR(losses[arm], losses[0], 1e-4 * losses[0]) << net << " arm " << arm;
        EXPECT_LT(unfused, 0.1 * step) << net;
        EXPECT_LE(fused, 1.1 * unfused) << net << ": fused " << fused << ", unfused " << unfused << " off the reference";
    }
}

// bf16 storage trains LeNet-5 for an epoch on Fashion-MNIST to within a point of f32 (same seed).


}  // namespace
}  // namespace joule
