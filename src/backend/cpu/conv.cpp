// Conv2d forward, backward-data and backward-weights on oneDNN convolution primitives (a forward with fewer
// output channels than a vector holds: conv_small.cpp).
// Activations stay in their storage layout (nhwc for image tensors). Weights and weight gradients stored
// in a blocked layout (plan/'s layout pass asks layout_wishes() which) are the primitive's own; plain
// ones (a graph lowered without that pass) are reordered into the preferred format inside the kernel.
#include "backend/cpu/kernels.hpp"

namespace joule::cpu {

namespace {
using namespace dnnl;

struct ConvShapes {
    TensorDesc x, w, y;
};
// The shapes with plain weights: for the forward primitive descriptor the backward ones take as a hint
// (oneDNN's own choice of weights format, whatever the weights' storage), and for layout_wishes.
ConvShapes unblocked(ConvShapes s) {
    s.w.layout = Layout::Plain, s.w.blocking = {};
    return s;
}

// The weights' descriptor: a blocked tensor's own; else oneDNN's choice (any) or plain oihw / goihw.
memory::desc weights_md(const TensorDesc& w, int64_t groups, dt type, bool any) {
    if (w.layout == Layout::Blocked) return md_of(w, type);
    const Shape& s = w.shape;
    memory::dims d = groups == 1 ? to_dims(s) : memory::dims{groups, s[0] / groups, s[1], s[2], s[3]};
    if (any) return {d, type, tag::any};
    return {d, type, groups == 1 ? tag::oihw : tag::goihw};
}

struct Geometry {
    memory::dims strides, dilates, pad_l, pad_r;
};
Geometry geometry(const ConvAttrs& a) {
    return {{a.stride[0], a.stride[1]}, {a.dilation[0] - 1, a.dilation[1] - 1}, {a.pad[0], a.pad[1]}, {a.pad[0], a.pad[1]}};
}

// Keys include every storage dtype (md_of / key_of), so a bf16 node writing f32 weight gradients gets its own.
std::string conv_key(const ConvAttrs& a, const ConvShapes& s, dt type) {
    return key_of(s.x) + key_of(s.w) + key_of(s.y) + "s" + std::to_string(a.stride[0]) + std::to_string(a.stride[1]) + "p" +
           std::to_string(a.pad[0]) + "," + std::to_string(a.pad[1]) + "d" + std::to_string(a.dilation[0]) +
           std::to_string(a.dilation[1]) + "g" + std::to_string(a.groups) + (a.bias ? "b" : "") + "t" + std::to_string(int(type));
}

// attr: a fused activation (the forward node's; the backward nodes' hint has none)
convolution_forward::primitive_desc forward_pd(const engine& eng, const ConvAttrs& a, const ConvShapes& s, dt type,
                                               const primitive_attr& attr = {}) {
    const Geometry g = geometry(a);
    const memory::desc src = md_of(s.x, type), wei = weights_md(s.w, a.groups, type, true), dst = md_of(s.y);
    if (a.bias) {
        const memory::desc bias({s.w.shape[0]}, dt::f32, tag::a);
        return {{prop_kind::forward_training, algorithm::convolution_direct, src, wei, bias, dst, g.strides, g.dilates, g.pad_l, g.pad_r}, attr, eng};
    }
    return {{prop_kind::forward_training, algorithm::convolution_direct, src, wei, dst, g.strides, g.dilates, g.pad_l, g.pad_r}, attr, eng};
}

convolution_backward_data::primitive_desc backward_data_pd(const engine& eng, const ConvAttrs& a, const ConvShapes& s, dt type,
                                                           const convolution_forward::primitive_desc& hint) {
    const Geometry g = geometry(a);
    return {{algorithm::convolution_direct, md_of(s.x), weights_md(s.w, a.groups, type, true), md_of(s.y, type), g.strides, g.dilates, g.pad_l, g.pad_r},
            eng, hint};
}

// The weight gradient in its storage dtype (f32 from a bf16 node: the accumulator's precision).
convolution_backward_weights::primitive_desc backward_weights_pd(const engine& eng, const ConvAttrs& a, const ConvShapes& s, dt type,
                                                                 const convolution_forward::primitive_desc& hint) {
    const Geometry g = geometry(a);
    const memory::desc src = md_of(s.x, type), dw = weights_md(s.w, a.groups, dnnl_type(s.w.dtype), true), dy = md_of(s.y, type);
    if (a.bias)
        return {{algorithm::convolution_direct, src, dw, memory::desc({s.w.shape[0]}, dt::f32, tag::a), dy, g.strides, g.dilates, g.pad_l, g.pad_r}, eng, hint};
    return {{algorithm::convolution_direct, src, dw, dy, g.strides, g.dilates, g.pad_l, g.pad_r}, eng, hint};
}

std::unique_ptr<Kernel> conv_forward(const KernelArgs& a, const ConvAttrs& at, dt type) {
    const ConvShapes s{a.in_desc(0), a.in_desc(1), a.out_desc(0)};
    auto e = a.ctx.cache.get<convolution_forward>(conv_key(at, s, type) + post_op_key(a.node),
                                                  [&] { return forward_pd(a.ctx.engine, at, s, type, post_op_attr(a.node)); });
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    memory x = reordered_input(*k, a.ctx, a.mem(md_of(s.x), a.in[0]), e->pd.src_desc());
    memory w = reordered_input(*k, a.ctx, a.mem(weights_md(s.w, at.groups, type, false), a.in[1]), e->pd.weights_desc());
    StagedOutputs outs;
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, outs.add(a, md_of(s.y), a.out[0], e->pd.dst_desc())}};
    if (at.bias) args[DNNL_ARG_BIAS] = a.mem(e->pd.bias_desc(), a.in[2]);
    k->add(e->prim, args);
    outs.finish(*k);
    return k;
}

std::unique_ptr<Kernel> conv_backward_data(const KernelArgs& a, const ConvAttrs& at, dt type) {
    const ConvShapes s{a.out_desc(0), a.in_desc(1), a.in_desc(0)};
    const std::string key = conv_key(at, s, type);
    const ConvShapes h = unblocked(s);
    auto fwd = a.ctx.cache.get<convolution_forward>(conv_key(at, h, type), [&] { return forward_pd(a.ctx.engine, at, h, type); });
    auto e = a.ctx.cache.get<convolution_backward_data>(key, [&] { return backward_data_pd(a.ctx.engine, at, s, type, fwd->pd); });
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    memory dy = reordered_input(*k, a.ctx, a.mem(md_of(s.y), a.in[0]), e->pd.diff_dst_desc());
    memory w = reordered_input(*k, a.ctx, a.mem(weights_md(s.w, at.groups, type, false), a.in[1]), e->pd.weights_desc());
    StagedOutputs outs;
    k->add(e->prim, {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DIFF_SRC, outs.add(a, md_of(s.x), a.out[0], e->pd.diff_src_desc())}});
    outs.finish(*k);
    return k;
}

std::unique_ptr<Kernel> conv_backward_weights(const KernelArgs& a, const ConvAttrs& at, dt type) {
    const ConvShapes s{a.in_desc(1), a.out_desc(0), a.in_desc(0)};
    const std::string key = conv_key(at, s, type);
    const ConvShapes h = unblocked(s);
    auto fwd = a.ctx.cache.get<convolution_forward>(conv_key(at, h, type), [&] { return forward_pd(a.ctx.engine, at, h, type); });
    auto e = a.ctx.cache.get<convolution_backward_weights>(key, [&] { return backward_weights_pd(a.ctx.engine, at, s, type, fwd->pd); });
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    memory dy = reordered_input(*k, a.ctx, a.mem(md_of(s.y), a.in[0]), e->pd.diff_dst_desc());
    memory x = reordered_input(*k, a.ctx, a.mem(md_of(s.x), a.in[1]), e->pd.src_desc());
    StagedOutputs outs;
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_SRC, x},
        {DNNL_ARG_DIFF_WEIGHTS, outs.add(a, weights_md(s.w, at.groups, dnnl_type(s.w.dtype), false), a.out[0], e->pd.diff_weights_desc())}};
    if (at.bias) args[DNNL_ARG_DIFF_BIAS] = a.mem(e->pd.diff_bias_desc(), a.out[1]);
    k->add(e->prim, args);
    outs.finish(*k);
    return k;
}

const dnnl::engine& wish_engine() {
    static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
    return e;
}

// A oneDNN weights format as the weight tensor's desc, when a Blocking describes it.
std::optional<TensorDesc> blocked_as(const TensorDesc& w, const memory::desc& md) {
    std::optional<Blocking> b = blocking_of(md);
    if (!b) return std::nullopt;
    return TensorDesc{w.shape, w.dtype, Layout::Blocked, *b};
}
}  // namespace

LayoutWishes conv_layout_wishes(const Graph& g, NodeId id) {
    const Node& n = g.node(id);
    LayoutWishes w = LayoutWishes::none(n);
    const auto& at = attrs_as<ConvAttrs>(n);
    const dt type = compute_type(n.compute);
    const engine& eng = wish_engine();
    auto desc = [&](TensorId t) { return g.tensor(t).desc; };
    if (conv_small_applies(n, desc(n.inputs[0]), desc(n.inputs[1]), desc(n.outputs[0]))) {
        // joule's loops read the weight in any layout and write its gradient in the one it has
        if (n.kind != OpKind::ConvBackwardWeights) w.any_inputs = 0b10;
        return w;
    }
    if (n.kind == OpKind::Conv2d) {
        const ConvShapes s = unblocked({desc(n.inputs[0]), desc(n.inputs[1]), desc(n.outputs[0])});
        w.inputs[1] = blocked_as(s.w, forward_pd(eng, at, s, type).weights_desc());
    } else if (n.kind == OpKind::ConvBackwardData) {
        const ConvShapes s = unblocked({desc(n.outputs[0]), desc(n.inputs[1]), desc(n.inputs[0])});
        w.inputs[1] = blocked_as(s.w, backward_data_pd(eng, at, s, type, forward_pd(eng, at, s, type)).weights_desc());
    } else {
        const ConvShapes s = unblocked({desc(n.inputs[1]), desc(n.outputs[0]), desc(n.inputs[0])});
        w.outputs[0] = blocked_as(s.w, backward_weights_pd(eng, at, s, type, forward_pd(eng, at, s, type)).diff_weights_desc());
    }
    return w;
}

std::unique_ptr<Kernel> make_conv(const KernelArgs& a) {
    if (auto k = make_conv_small(a)) return k;
    const auto& at = attrs_as<ConvAttrs>(a.node);
    const dt type = compute_type(a.node.compute);
    switch (a.node.kind) {
        case OpKind::Conv2d: return conv_forward(a, at, type);
        case OpKind::ConvBackwardData: return conv_backward_data(a, at, type);
        default: return conv_backward_weights(a, at, type);
    }
}

}  // namespace joule::cpu
