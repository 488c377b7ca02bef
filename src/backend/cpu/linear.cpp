// Linear on oneDNN inner-product primitives ([..., K] viewed as [M, K]); MatMul on the matmul
// primitive (leading dims merged where contiguous, transposes -- the trans flags and folded ones -- expressed
// as strides, alpha as an output scale).
// Linear weights and their gradients stay in their plain [out, in] storage: the inner product runs on
// them directly (oneDNN's GEMM implementation; over 1-4 rows, loops of joule's own: linear_rows.cpp). Letting oneDNN choose (tag::any) picks a blocked format
// that had to be re-laid-out every step, forward and backward, and the gradient back: for AlexNet b4 and
// VGG-16 b2 those reorders of the classifier's 38-103 M weights took longer than the layers themselves.
#include "backend/cpu/kernels.hpp"

namespace joule::cpu {

namespace {
using namespace dnnl;

memory::desc matrix_md(const TensorDesc& d, dt type) { return {{d.numel() / d.shape.back(), d.shape.back()}, type, tag::ab}; }
memory::desc matrix_md(const TensorDesc& d) { return matrix_md(d, dnnl_type(d.dtype)); }

// dst_type: the output's storage (the compute type, or f32 written directly by a bf16 product).
// attr: a fused activation (the forward node's; the backward nodes' hint has none).
inner_product_forward::primitive_desc linear_forward_pd(const engine& eng, bool bias, const TensorDesc& x, const TensorDesc& w, dt type,
                                                        dt dst_type, const primitive_attr& attr = {}) {
    const memory::desc src = matrix_md(x, type), wei(to_dims(w.shape), type, tag::ab);
    const memory::desc dst({x.numel() / x.shape.back(), w.shape[0]}, dst_type, tag::ab);
    if (bias) return {{prop_kind::forward_training, src, wei, memory::desc({w.shape[0]}, dt::f32, tag::a), dst}, attr, eng};
    return {{prop_kind::forward_training, src, wei, dst}, attr, eng};
}

std::string linear_key(bool bias, const TensorDesc& x, const TensorDesc& w, dt type) {
    return key_of(x) + key_of(w) + (bias ? "b" : "") + std::to_string(int(type));  // w: the weight or its gradient's storage
}
}  // namespace

std::unique_ptr<Kernel> make_linear(const KernelArgs& a) {
    if (auto rows = make_linear_rows(a)) return rows;
    const bool bias = attrs_as<LinearAttrs>(a.node).bias;
    const dt type = compute_type(a.node.compute);
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    const memory::desc w_plain = [&] {
        const TensorDesc& w = a.node.kind == OpKind::LinearBackwardWeights ? a.out_desc(0) : a.in_desc(1);
        return memory::desc(to_dims(w.shape), dnnl_type(w.dtype), tag::ab);
    }();
    if (a.node.kind == OpKind::Linear) {
        const TensorDesc &x = a.in_desc(0), &w = a.in_desc(1);
        const dt y_type = dnnl_type(a.out_desc(0).dtype);
        const std::string key = linear_key(bias, x, w, type) + (y_type == type ? "" : "y" + std::to_string(int(y_type))) + post_op_key(a.node);
        auto e = a.ctx.cache.get<inner_product_forward>(key, [&] { return linear_forward_pd(a.ctx.engine, bias, x, w, type, y_type, post_op_attr(a.node)); });
        std::unordered_map<int, memory> args = {
            {DNNL_ARG_SRC, reordered_input(*k, a.ctx, a.mem(matrix_md(x), a.in[0]), e->pd.src_desc())},
            {DNNL_ARG_WEIGHTS, reordered_input(*k, a.ctx, a.mem(w_plain, a.in[1]), e->pd.weights_desc())},
            {DNNL_ARG_DST, a.mem(e->pd.dst_desc(), a.out[0])}};
        if (bias) args[DNNL_ARG_BIAS] = a.mem(e->pd.bias_desc(), a.in[2]);
        k->add(e->prim, args);
    } else if (a.node.kind == OpKind::LinearBackwardData) {
        const TensorDesc &x = a.out_desc(0), &w = a.in_desc(1), &dy = a.in_desc(0);
        const std::string key = linear_key(bias, x, w, type);
        auto fwd = a.ctx.cache.get<inner_product_forward>(key, [&] { return linear_forward_pd(a.ctx.engine, bias, x, w, type, type); });
        auto e = a.ctx.cache.get<inner_product_backward_data>(key, [&] {
            return inner_product_backward_data::primitive_desc(
                {matrix_md(x), memory::desc(to_dims(w.shape), type, tag::ab), matrix_md(dy, type)}, a.ctx.engine, fwd->pd);
        });
        k->add(e->prim, {{DNNL_ARG_DIFF_DST, reordered_input(*k, a.ctx, a.mem(matrix_md(dy), a.in[0]), e->pd.diff_dst_desc())},
                         {DNNL_ARG_WEIGHTS, reordered_input(*k, a.ctx, a.mem(w_plain, a.in[1]), e->pd.weights_desc())},
                         {DNNL_ARG_DIFF_SRC, a.mem(e->pd.diff_src_desc(), a.out[0])}});
    } else {
        const TensorDesc &x = a.in_desc(1), &w = a.out_desc(0), &dy = a.in_desc(0);
        const std::string key = linear_key(bias, x, w, type);
        auto fwd = a.ctx.cache.get<inner_product_forward>(key, [&] { return linear_forward_pd(a.ctx.engine, bias, x, w, type, type); });
        auto e = a.ctx.cache.get<inner_product_backward_weights>(key, [&] {
            const memory::desc src = matrix_md(x, type), dw(to_dims(w.shape), dnnl_type(w.dtype), tag::ab), ddst = matrix_md(dy, type);
            if (bias)
                return inner_product_backward_weights::primitive_desc({src, dw, memory::desc({w.shape[0]}, dt::f32, tag::a), ddst}, a.ctx.engine, fwd->pd);
            return inner_product_backward_weights::primitive_desc({src, dw, ddst}, a.ctx.engine, fwd->pd);
        });
        StagedOutputs outs;
        std::unordered_map<int, memory> args = {
            {DNNL_ARG_DIFF_DST, reordered_input(*k, a.ctx, a.mem(matrix_md(dy), a.in[0]), e->pd.diff_dst_desc())},
            {DNNL_ARG_SRC, reordered_input(*k, a.ctx, a.mem(matrix_md(x), a.in[1]), e->pd.src_desc())},
            {DNNL_ARG_DIFF_WEIGHTS, outs.add(a, w_plain, a.out[0], e->pd.diff_weights_desc())}};
        if (bias) args[DNNL_ARG_DIFF_BIAS] = a.mem(e->pd.diff_bias_desc(), a.out[1]);
        k->add(e->prim, args);
        outs.finish(*k);
    }
    return k;
}

namespace {
// oneDNN descs of op(A), op(B) and C: each operand's view (through its folded transpose and trans flag) as
// strides, with adjacent batch dims merged wherever they are contiguous in all three views -- plain operands
// become [batch, rows, cols], BERT's head-split ones stay [B, heads, S, D] over [B, S, heads, D] storage.
std::array<memory::desc, 3> matmul_mds(const std::array<StridedView, 3>& views, const std::array<dt, 3>& types) {
    const size_t r = views[0].dims.size();
    std::array<memory::dims, 3> dims, strides;
    for (size_t k = 0; k + 2 < r; ++k) {
        const bool merge = !dims[0].empty() && std::all_of(views.begin(), views.end(), [&](const StridedView& v) {
            return v.strides[k - 1] == v.strides[k] * v.dims[k];
        });
        for (size_t o = 0; o < 3; ++o) {
            if (merge) {
                dims[o].back() *= views[o].dims[k];
                strides[o].back() = views[o].strides[k];
            } else {
                dims[o].push_back(views[o].dims[k]);
                strides[o].push_back(views[o].strides[k]);
            }
        }
    }
    std::array<memory::desc, 3> mds;
    for (size_t o = 0; o < 3; ++o) {
        const StridedView& v = views[o];
        if (dims[o].empty()) {  // no batch dims: one matrix
            dims[o].push_back(1);
            strides[o].push_back(v.dims[r - 2] * v.dims[r - 1]);
        }
        dims[o].insert(dims[o].end(), {v.dims[r - 2], v.dims[r - 1]});
        strides[o].insert(strides[o].end(), {v.strides[r - 2], v.strides[r - 1]});
        mds[o] = memory::desc(dims[o], types[o], strides[o]);
    }
    return mds;
}
// The same dims, dense row-major.
memory::desc dense(const memory::desc& m, dt type) {
    const memory::dims d = m.dims();
    memory::dims s(d.size(), 1);
    for (size_t k = d.size() - 1; k-- > 0;) s[k] = s[k + 1] * d[k + 1];
    return {d, type, s};
}
std::string perms_key(const MatMulAttrs& at) {
    std::string s;
    for (const auto* p : {&at.perm_a, &at.perm_b, &at.perm_c}) {
        s += 'p';
        for (const int64_t d : *p) s += std::to_string(d) + ",";
    }
    return s;
}
}  // namespace

std::unique_ptr<Kernel> make_matmul(const KernelArgs& a) {
    const auto& at = attrs_as<MatMulAttrs>(a.node);
    const dt type = compute_type(a.node.compute);
    const auto [A, B, C] = matmul_mds({matmul_view(a.in_desc(0).shape, at.perm_a, at.trans_a), matmul_view(a.in_desc(1).shape, at.perm_b, at.trans_b),
                                       matmul_view(a.out_desc(0).shape, at.perm_c, false)},
                                      {type, type, dnnl_type(a.out_desc(0).dtype)});  // C f32 where a bf16 product writes f32
    const std::string key = key_of(a.in_desc(0)) + key_of(a.in_desc(1)) + key_of(a.out_desc(0)) + std::to_string(at.trans_a) +
                            std::to_string(at.trans_b) + perms_key(at) + std::to_string(at.alpha) + std::to_string(int(type)) + post_op_key(a.node);
    auto e = a.ctx.cache.get<matmul>(key, [&] {
        primitive_attr attr = post_op_attr(a.node);
        if (at.alpha != 1.0f) attr.set_output_scales(0, {at.alpha});
        // the transposes as strides (f32, and bf16 where oneDNN has a kernel of its own for them: its brgemm
        // matmul, which reads a transposed or head-split bf16 operand at 0.9-1.0x the speed of a plain one);
        // else dense operands, which the kernel's reorder steps lay out at every call
        if (type == dt::f32) return matmul::primitive_desc({A, B, C}, attr, a.ctx.engine);
        try {
            matmul::primitive_desc pd({A, B, C}, attr, a.ctx.engine);
            if (std::string(pd.impl_info_str()).rfind("ref", 0) != 0) return pd;
        } catch (const dnnl::error&) {
        }
        return matmul::primitive_desc({dense(A, type), dense(B, type), C}, attr, a.ctx.engine);
    });
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    k->add(e->prim, {{DNNL_ARG_SRC, reordered_input(*k, a.ctx, a.mem(A, a.in[0]), e->pd.src_desc())},
                     {DNNL_ARG_WEIGHTS, reordered_input(*k, a.ctx, a.mem(B, a.in[1]), e->pd.weights_desc())},
                     {DNNL_ARG_DST, a.mem(C, a.out[0])}});
    return k;
}

}  // namespace joule::cpu
