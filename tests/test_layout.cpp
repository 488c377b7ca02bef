// Blocked storage layouts: graph/'s Blocking against oneDNN's own formats, plan/'s layout pass (weights
// stored in their kernels' formats, reorders as nodes), and training through it against training without.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "backend/cpu/kernels.hpp"
#include "backend/reference/reference_backend.hpp"
#include "backend/registry.hpp"
#include "data/dataset.hpp"
#include "plan/passes.hpp"
#include "runtime/executor.hpp"
#include "runtime/trainer.hpp"
#include "zoo/zoo.hpp"

namespace joule {
namespace {

using tag = dnnl::memory::format_tag;

// A oneDNN descriptor's layout as a joule tensor of logical shape `shape` (its dims for ungrouped ones).
TensorDesc blocked(const Shape& shape, const dnnl::memory::desc& md) {
    const std::optional<Blocking> b = cpu::blocking_of(md);
    EXPECT_TRUE(b.has_value());
    return {shape, DType::F32, Layout::Blocked, b.value_or(Blocking{})};
}

// Blocking::offsets, from_plain and to_plain put every element where oneDNN's reorder does, padding
// zeroed, for the formats its convolutions pick (channel counts that need padding included), grouped ones too.
TEST(Layout, BlockingMatchesOneDnnReorders) {
    const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream s(eng);
    struct Case {
        Shape shape;                // logical
        dnnl::memory::dims dims;    // oneDNN's view
        tag plain, format;
        const char* name;
    };
    const Case cases[] = {
        {{24, 6, 3, 3}, {24, 6, 3, 3}, tag::oihw, tag::OIhw16i16o, "ABcd16b16a"},
        {{24, 6, 3, 3}, {24, 6, 3, 3}, tag::oihw, tag::OIhw16o16i, "ABcd16a16b"},
        {{24, 6, 3, 3}, {24, 6, 3, 3}, tag::oihw, tag::OIhw8i16o2i, "ABcd8b16a2b"},
        {{10, 3, 5, 5}, {10, 3, 5, 5}, tag::oihw, tag::Ohwi16o, "Acdb16a"},
        {{40, 1, 3, 3}, {40, 1, 1, 3, 3}, tag::goihw, tag::Goihw16g, "Abcde16a"},
        {{8, 2, 3, 3}, {2, 4, 2, 3, 3}, tag::goihw, tag::gOIhw16i16o, "aBCde16c16b"},
    };
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1, 1);
    for (const Case& c : cases) {
        const dnnl::memory::desc plain_md(c.dims, dnnl::memory::data_type::f32, c.plain), md(c.dims, dnnl::memory::data_type::f32, c.format);
        const TensorDesc d = blocked(c.shape, md);
        EXPECT_EQ(d.blocking.name(), c.name);
        EXPECT_EQ(d.bytes(), md.get_size()) << c.name;
        EXPECT_TRUE(cpu::md_of(d) == md) << c.name;
        std::vector<float> values(size_t(d.numel()));
        for (float& v : values) v = u(rng);
        dnnl::memory from(plain_md, eng, values.data()), to(md, eng);
        std::memset(to.get_data_handle(), 0xff, md.get_size());  // oneDNN zeroes the padding itself
        dnnl::reorder(from, to).execute(s, from, to);
        s.wait();
        std::vector<std::byte> ours(d.bytes(), std::byte{0x7f});
        from_plain(d, values.data(), ours.data());
        EXPECT_EQ(std::memcmp(ours.data(), to.get_data_handle(), d.bytes()), 0) << c.name;
        const std::vector<std::byte> back = to_plain(d, ours.data());
        ASSERT_EQ(back.size(), values.size() * 4);
        EXPECT_EQ(std::memcmp(back.data(), values.data(), back.size()), 0) << c.name;
        const std::vector<int64_t> off = d.blocking.offsets();
        EXPECT_EQ(std::set<int64_t>(off.begin(), off.end()).size(), off.size()) << c.name << ": two elements at one offset";
    }
    EXPECT_EQ(desc_str(blocked({24, 6, 3, 3}, dnnl::memory::desc({24, 6, 3, 3}, dnnl::memory::data_type::f32, tag::OIhw16i16o))),
              "f32[24, 6, 3, 3] ABcd16b16a");
    // a layout Blocking cannot describe (an offset) is no wish
    dnnl_memory_desc_t odd = dnnl::memory::desc({4, 4}, dnnl::memory::data_type::f32, tag::ab).data;
    odd.offset0 = 3;
    EXPECT_FALSE(cpu::blocking_of(dnnl::memory::desc(odd)).has_value());
}

struct Net {
    zoo::Model model;
    TrainGraph train;
};
Net build(const std::string& net, int64_t batch, int64_t image_size) {
    zoo::NetConfig cfg;
    cfg.batch = batch;
    cfg.image_size = image_size;
    cfg.classes = 10;
    Net n{zoo::build(net, cfg), {}};
    n.train = build_train_graph(std::move(n.model.graph), n.model.loss, OptimizerConfig::sgd(0.002f, 0.9f, 1e-4f));
    return n;
}

bool is_conv(OpKind k) { return k == OpKind::Conv2d || k == OpKind::ConvBackwardData || k == OpKind::ConvBackwardWeights; }

// After the pass every convolution reads and writes its weights in the format its primitive wants (no
// reorder inside a kernel), parameters and their momentum are stored so for good, every reorder is a
// named node, and a lowering without the pass has no blocked tensor.
TEST(Layout, PassStoresWeightsInTheirKernelsFormats) {
    for (const char* net : {"resnet18", "mobilenet_v2"}) {
        Net n = build(net, 2, 32);
        const LoweredGraph off = lower(TrainGraph(n.train), Plan{}, {.layout = false});
        for (const Tensor& t : off.train.graph.tensors()) EXPECT_NE(t.desc.layout, Layout::Blocked) << t.name;
        const LoweredGraph lg = lower(std::move(n.train), Plan{});
        const Graph& g = lg.train.graph;
        size_t convs = 0, reorders = 0, blocked_params = 0;
        for (size_t k = 0; k < g.num_nodes(); ++k) {
            const Node& node = g.node(NodeId(k));
            if (is_conv(node.kind)) {
                const LayoutWishes w = layout_wishes(g, NodeId(k));
                const bool bww = node.kind == OpKind::ConvBackwardWeights;
                const TensorDesc& have = g.tensor(bww ? node.outputs[0] : node.inputs[1]).desc;
                const std::optional<TensorDesc>& want = bww ? w.outputs[0] : w.inputs[1];
                ASSERT_TRUE(want.has_value()) << node.name;
                EXPECT_EQ(have.layout, Layout::Blocked) << node.name;
                EXPECT_EQ(have.blocking, want->blocking) << node.name << " reads " << desc_str(have) << ", its primitive wants " << desc_str(*want);
                convs += node.kind == OpKind::Conv2d;
            }
            if (node.kind == OpKind::SgdUpdate) {
                const TensorDesc& p = g.tensor(node.inputs[0]).desc;
                for (TensorId t : node.inputs) EXPECT_EQ(g.tensor(t).desc.blocking, p.blocking) << node.name;
                blocked_params += p.layout == Layout::Blocked;
            }
            if (node.kind == OpKind::Cast) {
                EXPECT_TRUE(attrs_as<CastAttrs>(node).reorder) << node.name;
                EXPECT_EQ(op_label(node), "Reorder");
                EXPECT_EQ(node.name.rfind("reorder:", 0), 0u) << node.name;
                ++reorders;
            }
            for (TensorId t : node.inputs)  // blocked tensors only where the cpu kernels take them
                EXPECT_TRUE(g.tensor(t).desc.layout != Layout::Blocked || is_conv(node.kind) || node.kind == OpKind::SgdUpdate || node.kind == OpKind::Cast) << node.name;
        }
        EXPECT_EQ(blocked_params, convs) << net << ": every convolution's weight stored blocked";
        EXPECT_EQ(reorders, lg.reorders);
        // forward, backward-data and backward-weights formats: at most two of the three differ from storage
        EXPECT_LE(reorders, 2 * convs) << net;
        EXPECT_GT(reorders, 0u) << net;
        EXPECT_EQ(lg.memory.bytes_total >= off.memory.bytes_total, true) << net << ": padding only adds";
    }
}

// bf16: the compute copy of a weight is cast straight into the format each reader wants (a cast and a
// reorder are one node), and the f32 master weight takes its f32 gradient's format (no reorder between
// backward-weights and the update: the casts pass over the weight anyway); a data-parallel job keeps its
// all-reduced gradients and their parameters plain.
TEST(Layout, CastsReorderInOnePassAndAllReducedGradientsStayPlain) {
    Net n = build("resnet18", 2, 32);
    BackendSet backends({.threads = 1});
    const LoweredGraph lg = lower(TrainGraph(n.train), precision_plan(n.train, DType::BF16, PrecisionScope::Gemm, backends.get("cpu")));
    const Graph& g = lg.train.graph;
    size_t both = 0;
    for (size_t k = 0; k < g.num_nodes(); ++k) {
        const Node& node = g.node(NodeId(k));
        if (node.kind != OpKind::Cast || !attrs_as<CastAttrs>(node).reorder) continue;
        const NodeId from = g.tensor(node.inputs[0]).producer;
        EXPECT_FALSE(from != kNone && g.node(from).kind == OpKind::Cast && !attrs_as<CastAttrs>(g.node(from)).reorder) << node.name << " reorders a cast's output";
        if (is_dtype_cast(g, NodeId(k))) {
            ++both;
            EXPECT_NE(node.name.find(":bf16:"), std::string::npos) << node.name;
        }
    }
    EXPECT_GT(both, 0u);
    size_t blocked_masters = 0;
    for (size_t k = 0; k < g.num_nodes(); ++k) {
        const Node& u = g.node(NodeId(k));
        if (u.kind != OpKind::SgdUpdate && u.kind != OpKind::AdamUpdate) continue;
        const TensorDesc& p = g.tensor(u.inputs[0]).desc;
        if (p.layout != Layout::Blocked) continue;
        ++blocked_masters;
        EXPECT_EQ(p.dtype, DType::F32) << u.name;
        const NodeId gp = g.tensor(u.inputs[1]).producer;
        ASSERT_NE(gp, kNone);
        EXPECT_EQ(g.node(gp).kind, OpKind::ConvBackwardWeights) << u.name << "'s gradient comes through " << g.node(gp).name;
    }
    EXPECT_EQ(blocked_masters, 20u) << "every convolution's weight (ResNet-18 has 20)";
    const LoweredGraph dp = lower(TrainGraph(n.train), Plan{}, {.allreduce = {.ranks = 2}});
    for (const Tensor& t : dp.train.graph.tensors())
        EXPECT_TRUE(!persists(t.role) || t.desc.layout != Layout::Blocked) << t.name;
}

// A kernel that reads an input in any layout (LayoutWishes::any_inputs: the cpu's small-channel convolution
// forward, LeNet-5's conv1) gets no reorder before it and no say in its parameter's layout: conv1.weight takes
// its gradient's format, and the forward reads that storage as it is. In f32 the gradient is the cpu's own
// backward-weights' (written in the parameter's layout); in bf16 oneDNN's (blocked), and the forward reads
// the bf16 copy of the blocked master through a cast that keeps the layout.
NodeId node_named(const Graph& g, const std::string& name) {
    for (size_t k = 0; k < g.num_nodes(); ++k)
        if (g.node(NodeId(k)).name == name) return NodeId(k);
    return kNone;
}
TEST(Layout, AReaderOfAnyLayoutGetsNoReorder) {
    for (const DType dtype : {DType::F32, DType::BF16}) {
        Net n = build("lenet5", 4, 0);
        const NodeId conv1 = node_named(n.train.graph, "conv1");
        ASSERT_NE(conv1, kNone);
        if (!has_bit(layout_wishes(n.train.graph, conv1).any_inputs, 1)) GTEST_SKIP() << "no AVX-512: oneDNN runs conv1";
        BackendSet backends({.threads = 2});
        const Plan plan = dtype == DType::F32 ? Plan{} : precision_plan(n.train, dtype, PrecisionScope::Gemm, backends.get("cpu"));
        LowerOptions lo;
        lo.fold_casts = false;  // the cast stays a node (folded, the update writes the bf16 copy)
        const LoweredGraph lg = lower(std::move(n.train), plan, lo);
        const Graph& g = lg.train.graph;
        ASSERT_NE(node_named(g, "conv1"), kNone);
        const TensorId read = g.node(node_named(g, "conv1")).inputs[1];
        TensorId param = read;
        if (dtype == DType::BF16) {  // through the cast to bf16, which keeps the layout
            ASSERT_NE(g.tensor(read).producer, kNone) << dtype_name(dtype);
            const Node& cast = g.node(g.tensor(read).producer);
            ASSERT_EQ(cast.kind, OpKind::Cast) << cast.name;
            EXPECT_FALSE(attrs_as<CastAttrs>(cast).reorder) << cast.name;
            param = cast.inputs[0];
        }
        const Tensor& w = g.tensor(param);
        EXPECT_EQ(w.role, TensorRole::Parameter) << "conv1 reads " << w.name;
        const NodeId bw = node_named(g, "conv1.bwd_weights");
        ASSERT_NE(bw, kNone);
        const TensorDesc& grad = g.tensor(g.node(bw).outputs[0]).desc;
        EXPECT_TRUE(w.desc.layout == grad.layout && w.desc.blocking == grad.blocking) << "conv1.weight follows its gradient's format, " << dtype_name(dtype);
        EXPECT_EQ(w.desc.layout == Layout::Blocked, dtype == DType::BF16) << "oneDNN's bf16 backward-weights, the cpu's own f32 one";
        for (NodeId r : g.consumers(read))
            if (g.node(r).kind == OpKind::Cast) ADD_FAILURE() << g.node(r).name << " reads conv1's weight, " << dtype_name(dtype);
    }
}

// The blocked padding of every parameter and its state is zero (oneDNN's outputs and reorders zero it, the
// updates keep it, and write the parameters' bf16 copies with it zero).
void expect_zero_padding(const Executor& ex) {
    const Graph& g = ex.graph();
    for (size_t t = 0; t < g.num_tensors(); ++t) {
        const Tensor& x = g.tensor(TensorId(t));
        if (!persists(x.role) || x.desc.layout != Layout::Blocked) continue;
        std::vector<bool> used(size_t(x.desc.storage_numel()), false);
        for (int64_t o : x.desc.blocking.offsets()) used[size_t(o)] = true;
        const auto* p = static_cast<const std::byte*>(ex.data(TensorId(t)));
        const size_t es = dtype_size(x.desc.dtype);
        for (size_t i = 0; i < used.size(); ++i)
            ASSERT_TRUE(used[i] || std::all_of(p + i * es, p + (i + 1) * es, [](std::byte b) { return b == std::byte{0}; }))
                << x.name << " padding element " << i;
    }
}

// Training through the layout pass follows training without it: the same primitives on the same
// numbers, only stored otherwise (MobileNetV2: depthwise and 24-channel layers, whose formats pad;
// ResNet-18 in bf16: weights cast and reordered in one node, f32 masters in their gradients' layout).
TEST(Layout, TrainingMatchesTrainingWithoutIt) {
    for (const auto& [net, dtype] : {std::pair{"lenet5", DType::F32}, {"mobilenet_v2", DType::F32}, {"resnet18", DType::BF16}}) {
        const double tol = dtype == DType::F32 ? 1e-4 : 1e-3;
        std::vector<float> losses[2];
        std::vector<std::vector<float>> weights[2];
        for (int layout = 0; layout < 2; ++layout) {
            Net n = build(net, 4, std::string(net) == "lenet5" ? 0 : 32);
            BackendSet backends({.threads = 2});
            LowerOptions lo;
            lo.keep = {n.model.loss};
            lo.layout = layout == 1;
            const Plan plan = dtype == DType::F32 ? Plan{} : precision_plan(n.train, dtype, PrecisionScope::Gemm, backends.get("cpu"));
            const LoweredGraph lg = lower(std::move(n.train), plan, lo);
            // the pass stores some tensors blocked (LeNet-5 f32 with no reorder left: every reader of a blocked
            // weight takes it as stored)
            size_t blocked = 0;
            for (size_t t = 0; t < lg.train.graph.num_tensors(); ++t) blocked += lg.train.graph.tensor(TensorId(t)).desc.layout == Layout::Blocked;
            EXPECT_EQ(blocked > 0, layout == 1) << net;
            if (layout == 0) {
                EXPECT_EQ(lg.reorders, 0u) << net;
            }
            Executor ex(lg, backends, {.seed = 7});
            data::SyntheticData synth(4);
            for (int s = 0; s < 3; ++s) {
                fill_synthetic(ex, n.model, synth);
                ex.run_all();
                losses[layout].push_back(ex.f32(n.model.loss)[0]);
            }
            if (layout == 1) expect_zero_padding(ex);
            for (size_t t = 0; t < lg.train.graph.num_tensors(); ++t)
                if (lg.train.graph.tensor(TensorId(t)).role == TensorRole::Parameter) weights[layout].push_back(ex.read_f32(TensorId(t)));
        }
        for (size_t s = 0; s < losses[0].size(); ++s) EXPECT_NEAR(losses[1][s], losses[0][s], tol * std::fabs(losses[0][s])) << net << " step " << s;
        ASSERT_EQ(weights[0].size(), weights[1].size());
        for (size_t p = 0; p < weights[0].size(); ++p)
            for (size_t i = 0; i < weights[0][p].size(); ++i) ASSERT_NEAR(weights[1][p][i], weights[0][p][i], tol) << net << " parameter " << p << " element " << i;
    }
}

// A reorder node (with and without a cast, grouped weights seen as 5-D) gives the same bytes on the cpu
// (a oneDNN reorder) and on the reference (element by element).
TEST(Layout, ReordersAgreeOnCpuAndReference) {
    for (const auto& [shape, dims, format] :
         {std::tuple{Shape{24, 6, 3, 3}, dnnl::memory::dims{24, 6, 3, 3}, tag::OIhw8i16o2i}, {Shape{8, 2, 3, 3}, {2, 4, 2, 3, 3}, tag::gOIhw16i16o}}) {
        const TensorDesc b = blocked(shape, dnnl::memory::desc(dims, dnnl::memory::data_type::f32, format));
        Graph g;
        const TensorId x = g.parameter("x", {shape}, Init::normal(1.0f));
        const TensorId y = g.add1(OpKind::Cast, CastAttrs{DType::BF16, true, Layout::Blocked, b.blocking}, {x}, "to_blocked");
        const TensorId z = g.add1(OpKind::Cast, CastAttrs{DType::F32, true, Layout::Plain, {}}, {y}, "to_plain");
        // a dtype change alone, blocked to blocked (the cpu's own loop over the storage, padding included)
        const TensorId w = g.add1(OpKind::Cast, CastAttrs{DType::F32, true, Layout::Blocked, b.blocking}, {y}, "to_f32_blocked");
        EXPECT_EQ(g.tensor(y).desc.layout, Layout::Blocked);
        EXPECT_EQ(g.tensor(y).desc.bytes(), b.bytes() / 2);
        EXPECT_EQ(g.tensor(w).desc.bytes(), b.bytes());
        std::vector<std::byte> stored[2], stored_f32[2];
        std::vector<float> back[2];
        for (int r = 0; r < 2; ++r) {
            cpu::CpuBackend cpu(1);
            ReferenceBackend ref;
            Backend& be = r == 0 ? static_cast<Backend&>(cpu) : ref;
            Executor ex(g, be, {{y, z, w}, 5});
            std::memset(ex.data(y), 0xff, g.tensor(y).desc.bytes());
            std::memset(ex.data(w), 0xff, g.tensor(w).desc.bytes());
            ex.run_all();
            const auto* p = static_cast<const std::byte*>(ex.data(y));
            stored[r].assign(p, p + g.tensor(y).desc.bytes());
            const auto* q = static_cast<const std::byte*>(ex.data(w));
            stored_f32[r].assign(q, q + g.tensor(w).desc.bytes());
            back[r] = ex.read_f32(z);
            EXPECT_EQ(ex.read_f32(w), back[r]);
            const std::vector<float> xs = ex.read_f32(x), ys = ex.read_f32(y);
            for (size_t i = 0; i < xs.size(); ++i) ASSERT_NEAR(back[r][i], xs[i], std::fabs(xs[i]) / 128) << i;
            EXPECT_EQ(ys, back[r]);
        }
        EXPECT_EQ(stored[0], stored[1]) << "padding zeroed and every element in its place on both";
        EXPECT_EQ(stored_f32[0], stored_f32[1]);
        EXPECT_EQ(back[0], back[1]);
    }
}

// The cpu's own casts of a convolution weight's f32 master (ABcd16b16a) into the bf16 formats of oneDNN's
// bf16 convolutions (Xa2b AcdB forward, 8a16b2a ABcd / BAcd backward-data; with AMX 16bXa2b AcdB and 16a16b2a
// ABcd) store what oneDNN's reorder and the
// reference backend store, byte for byte: channel counts off every block (padding zero, out-channels past the
// master's padding when X = 48 or 64), odd in-channels, 1x1 and 3x3, on two threads.
TEST(Layout, WeightCastsIntoBf16ConvolutionFormatsMatchOneDnn) {
    const std::vector<tag> targets = {tag::AcdB16a2b,    tag::AcdB32a2b,    tag::AcdB48a2b,    tag::AcdB64a2b,     tag::ABcd8a16b2a,
                                      tag::BAcd8a16b2a,  tag::AcdB16b32a2b, tag::AcdB16b64a2b, tag::ABcd16a16b2a};
    for (const Shape& shape : {Shape{24, 6, 3, 3}, Shape{40, 3, 1, 1}, Shape{72, 37, 3, 3}, Shape{16, 16, 1, 1}}) {
        const dnnl::memory::dims dims(shape.begin(), shape.end());
        const TensorDesc master = blocked(shape, dnnl::memory::desc(dims, dnnl::memory::data_type::f32, tag::ABcd16b16a));
        for (const tag target : targets) {
            TensorDesc b = blocked(shape, dnnl::memory::desc(dims, dnnl::memory::data_type::bf16, target));
            b.dtype = DType::BF16;
            EXPECT_TRUE(writes_low_copy("cpu", master, b)) << b.blocking.name() << ": a loop of joule's own casts it";
            Graph g;
            const TensorId x = g.parameter("x", {shape}, Init::normal(1.0f));
            const TensorId m = g.add1(OpKind::Cast, CastAttrs{DType::F32, true, Layout::Blocked, master.blocking}, {x}, "to_master");
            const TensorId y = g.add1(OpKind::Cast, CastAttrs{DType::BF16, true, Layout::Blocked, b.blocking}, {m}, "to_bf16");
            std::vector<std::byte> stored[3];
            for (int r = 0; r < 3; ++r) {  // joule's loop, oneDNN's reorder (from the same master), the reference
                cpu::CpuBackend cpu(2);
                ReferenceBackend ref;
                Backend& be = r == 2 ? static_cast<Backend&>(ref) : cpu;
                Executor ex(g, be, {{m, y}, 5});
                std::memset(ex.data(y), 0xff, g.tensor(y).desc.bytes());
                ex.run_all();
                if (r == 1) {
                    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
                    dnnl::stream st(eng);
                    dnnl::memory from(dnnl::memory::desc(dims, dnnl::memory::data_type::f32, tag::ABcd16b16a), eng, ex.data(m));
                    dnnl::memory to(dnnl::memory::desc(dims, dnnl::memory::data_type::bf16, target), eng, ex.data(y));
                    std::memset(ex.data(y), 0xff, g.tensor(y).desc.bytes());
                    dnnl::reorder(from, to).execute(st, from, to);
                    st.wait();
                }
                const auto* p = static_cast<const std::byte*>(ex.data(y));
                stored[r].assign(p, p + g.tensor(y).desc.bytes());
            }
            const std::string what = b.blocking.name() + " " + std::to_string(shape[0]) + "x" + std::to_string(shape[1]) + "x" + std::to_string(shape[2]);
            EXPECT_EQ(stored[0], stored[1]) << what << ": joule's loop against oneDNN's reorder";
            EXPECT_EQ(stored[0], stored[2]) << what << ": against the reference";
        }
    }
}

}  // namespace
}  // namespace joule

namespace joule {
namespace {

// An update keeping bf16 copies of a convolution weight's f32 master in the bf16 convolution formats
// (plan/'s fold_casts, CopyToBf16) writes, each step, what oneDNN's reorder of the updated master stores,
// byte for byte: padding zero (out-channels past the master's padding when X = 48 or 64), one update with
// several copies (both formats and the master's own order), on two threads, split in whole tiles; the
// reference backend likewise; and the executor's first copies (initialisation) are the same bytes. SGD with
// momentum and Adam.
TEST(Layout, UpdatesWriteTheirWeightCopiesInBf16ConvolutionFormats) {
    const std::vector<std::vector<tag>> copy_sets = {{tag::AcdB64a2b, tag::BAcd8a16b2a}, {tag::AcdB48a2b, tag::ABcd8a16b2a, tag::ABcd16b16a},
                                                     {tag::AcdB16a2b}, {tag::AcdB32a2b, tag::BAcd8a16b2a},
                                                     {tag::AcdB16b32a2b, tag::ABcd16a16b2a}, {tag::AcdB16b64a2b, tag::BAcd8a16b2a, tag::ABcd16a16b2a}};
    // the last: 1.2 M elements, past kStreamBytes and several blocks per thread
    for (const Shape& shape : {Shape{24, 6, 3, 3}, Shape{40, 3, 1, 1}, Shape{72, 37, 3, 3}, Shape{16, 16, 1, 1}, Shape{512, 264, 3, 3}}) {
        const dnnl::memory::dims dims(shape.begin(), shape.end());
        const dnnl::memory::desc master_md(dims, dnnl::memory::data_type::f32, tag::ABcd16b16a);
        const TensorDesc master = blocked(shape, master_md);
        for (size_t set = 0; set < copy_sets.size(); ++set) {
            const std::vector<tag>& targets = copy_sets[set];
            const bool adam = set % 2 == 1;
            Graph g;
            const TensorId p = g.parameter("p", master, Init::normal(1.0f));
            const TensorId grad = g.state("g", master, Init::normal(1.0f)), v = g.state("v", master, Init::normal(0.1f));
            std::vector<TensorId> ins = {p, grad, v};
            if (adam) ins.push_back(g.state("v2", master, Init::zeros()));  // the second moment: m is v
            const size_t first_copy = ins.size();
            for (size_t i = 0; i < targets.size(); ++i) {
                TensorDesc c = blocked(shape, dnnl::memory::desc(dims, dnnl::memory::data_type::bf16, targets[i]));
                c.dtype = DType::BF16;
                ASSERT_TRUE(writes_low_copy("cpu", master, c)) << c.blocking.name();
                ins.push_back(g.state("c" + std::to_string(i), c, Init::zeros()));
            }
            if (adam) g.add(OpKind::AdamUpdate, AdamAttrs{0.01f, 0.9f, 0.999f, 1e-8f, 0.01f, false, int(targets.size())}, ins, "adam", Phase::Update);
            else g.add(OpKind::SgdUpdate, SgdAttrs{0.1f, 0.9f, 0.01f, int(targets.size())}, ins, "sgd", Phase::Update);
            for (int r = 0; r < 2; ++r) {  // the cpu's loops, the reference
                cpu::CpuBackend cpu(2);
                ReferenceBackend ref;
                Backend& be = r == 0 ? static_cast<Backend&>(cpu) : ref;
                Executor ex(g, be, {{}, 5});
                dnnl::engine eng(dnnl::engine::kind::cpu, 0);
                dnnl::stream st(eng);
                auto expect_copies = [&](const std::string& when) {  // each copy against oneDNN's reorder of p as it is now
                    for (size_t i = 0; i < targets.size(); ++i) {
                        const TensorId c = ins[first_copy + i];
                        const size_t bytes = g.tensor(c).desc.bytes();
                        std::vector<std::byte> want(bytes, std::byte{0xff});
                        dnnl::memory from(master_md, eng, ex.data(p)), to(dnnl::memory::desc(dims, dnnl::memory::data_type::bf16, targets[i]), eng, want.data());
                        dnnl::reorder(from, to).execute(st, from, to);
                        st.wait();
                        const auto* have = static_cast<const std::byte*>(ex.data(c));
                        EXPECT_TRUE(std::equal(want.begin(), want.end(), have))
                            << g.tensor(c).desc.blocking.name() << " of " << shape_str(shape) << (adam ? " (Adam)" : " (SGD)") << (r == 0 ? " on the cpu" : " on the reference") << ", " << when;
                    }
                };
                expect_copies("initialised");
                if (r == 0)  // the update writes every byte of the copies, padding included
                    for (size_t i = 0; i < targets.size(); ++i) std::memset(ex.data(ins[first_copy + i]), 0xff, g.tensor(ins[first_copy + i]).desc.bytes());
                ex.run_all();
                expect_copies("after a step");
            }
        }
    }
}

}  // namespace
}  // namespace joule
