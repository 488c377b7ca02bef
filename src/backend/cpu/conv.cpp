// Conv2d forward, backward-data and backward-weights on oneDNN convolution primitives.
// Activations stay in their storage layout (nhwc for image tensors); weights are reordered into the
// primitive's preferred blocked format each run (they change every step) and weight gradients back.
#include "backend/cpu/kernels.hpp"

namespace joule::cpu {

namespace {
using namespace dnnl;

struct ConvShapes {
    TensorDesc x, w, y;
};

memory::desc weights_md(const Shape& w, int64_t groups, dt type, bool any) {
    memory::dims d = groups == 1 ? to_dims(w) : memory::dims{groups, w[0] / groups, w[1], w[2], w[3]};
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
    const memory::desc src = md_of(s.x, type), wei = weights_md(s.w.shape, a.groups, type, true), dst = md_of(s.y);
    if (a.bias) {
        const memory::desc bias({s.w.shape[0]}, dt::f32, tag::a);
        return {{prop_kind::forward_training, algorithm::convolution_direct, src, wei, bias, dst, g.strides, g.dilates, g.pad_l, g.pad_r}, attr, eng};
    }
    return {{prop_kind::forward_training, algorithm::convolution_direct, src, wei, dst, g.strides, g.dilates, g.pad_l, g.pad_r}, attr, eng};
}

std::unique_ptr<Kernel> conv_forward(const KernelArgs& a, const ConvAttrs& at, dt type) {
    const ConvShapes s{a.in_desc(0), a.in_desc(1), a.out_desc(0)};
    auto e = a.ctx.cache.get<convolution_forward>(conv_key(at, s, type) + post_op_key(a.node),
                                                  [&] { return forward_pd(a.ctx.engine, at, s, type, post_op_attr(a.node)); });
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    memory x = reordered_input(*k, a.ctx, a.mem(md_of(s.x), a.in[0]), e->pd.src_desc());
    memory w = reordered_input(*k, a.ctx, a.mem(weights_md(s.w.shape, at.groups, type, false), a.in[1]), e->pd.weights_desc());
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
    auto fwd = a.ctx.cache.get<convolution_forward>(key, [&] { return forward_pd(a.ctx.engine, at, s, type); });
    auto e = a.ctx.cache.get<convolution_backward_data>(key, [&] {
        const Geometry g = geometry(at);
        return convolution_backward_data::primitive_desc(
            {algorithm::convolution_direct, md_of(s.x), weights_md(s.w.shape, at.groups, type, true), md_of(s.y, type), g.strides,
             g.dilates, g.pad_l, g.pad_r},
            a.ctx.engine, fwd->pd);
    });
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    memory dy = reordered_input(*k, a.ctx, a.mem(md_of(s.y), a.in[0]), e->pd.diff_dst_desc());
    memory w = reordered_input(*k, a.ctx, a.mem(weights_md(s.w.shape, at.groups, type, false), a.in[1]), e->pd.weights_desc());
    StagedOutputs outs;
    k->add(e->prim, {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DIFF_SRC, outs.add(a, md_of(s.x), a.out[0], e->pd.diff_src_desc())}});
    outs.finish(*k);
    return k;
}

std::unique_ptr<Kernel> conv_backward_weights(const KernelArgs& a, const ConvAttrs& at, dt type) {
    const ConvShapes s{a.in_desc(1), a.out_desc(0), a.in_desc(0)};
    const std::string key = conv_key(at, s, type);
    auto fwd = a.ctx.cache.get<convolution_forward>(key, [&] { return forward_pd(a.ctx.engine, at, s, type); });
    auto e = a.ctx.cache.get<convolution_backward_weights>(key, [&] {
        const Geometry g = geometry(at);
        const memory::desc src = md_of(s.x, type), dw = weights_md(s.w.shape, at.groups, dnnl_type(s.w.dtype), true), dy = md_of(s.y, type);
        if (at.bias)
            return convolution_backward_weights::primitive_desc(
                {algorithm::convolution_direct, src, dw, memory::desc({s.w.shape[0]}, dt::f32, tag::a), dy, g.strides, g.dilates, g.pad_l, g.pad_r},
                a.ctx.engine, fwd->pd);
        return convolution_backward_weights::primitive_desc(
            {algorithm::convolution_direct, src, dw, dy, g.strides, g.dilates, g.pad_l, g.pad_r}, a.ctx.engine, fwd->pd);
    });
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    memory dy = reordered_input(*k, a.ctx, a.mem(md_of(s.y), a.in[0]), e->pd.diff_dst_desc());
    memory x = reordered_input(*k, a.ctx, a.mem(md_of(s.x), a.in[1]), e->pd.src_desc());
    StagedOutputs outs;
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_SRC, x},
        {DNNL_ARG_DIFF_WEIGHTS, outs.add(a, weights_md(s.w.shape, at.groups, dnnl_type(s.w.dtype), false), a.out[0], e->pd.diff_weights_desc())}};
    if (at.bias) args[DNNL_ARG_DIFF_BIAS] = a.mem(e->pd.diff_bias_desc(), a.out[1]);
    k->add(e->prim, args);
    outs.finish(*k);
    return k;
}
}  // namespace

std::unique_ptr<Kernel> make_conv(const KernelArgs& a) {
    const auto& at = attrs_as<ConvAttrs>(a.node);
    const dt type = compute_type(a.node.compute);
    switch (a.node.kind) {
        case OpKind::Conv2d: return conv_forward(a, at, type);
        case OpKind::ConvBackwardData: return conv_backward_data(a, at, type);
        default: return conv_backward_weights(a, at, type);
    }
}

}  // namespace joule::cpu
