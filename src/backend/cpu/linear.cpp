// Linear on oneDNN inner-product primitives ([..., K] viewed as [M, K]; in bf16 on a machine with AMX, forward and
// both backwards on the matmul primitive, as is a backward-data with a gradient sum folded in); MatMul on the matmul
// primitive (leading dims merged where contiguous, transposes -- the trans flags and folded ones -- expressed
// as strides, alpha as an output scale).
// Linear weights and their gradients stay in their plain [out, in] storage: the inner product runs on
// them directly (oneDNN's GEMM implementation; over 1-4 rows, loops of joule's own: linear_rows.cpp). Letting oneDNN choose (tag::any) picks a blocked format
// that had to be re-laid-out every step, forward and backward, and the gradient back: for AlexNet b4 and
// VGG-16 b2 those reorders of the classifier's 38-103 M weights took longer than the layers themselves.
#include "backend/cpu/kernels.hpp"
#include "backend/cpu/vec.hpp"

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

// Linear and LinearBackwardData on oneDNN's matmul: Y = act(X W^T + b), W^T the stored [N, K] weight read
// through strides; dX = dY W (+ G, a gradient sum folded in by plan/'s fold_grad_sums, as a binary post-op:
// the inner product's backward takes no post-ops). nullptr when `amx_only` and oneDNN's kernel for it does not
// use AMX: with AMX, oneDNN 2.6's inner product still runs its plain-weight bf16 GEMM (gemm:jit) while the
// matmul's brgemm kernel runs on the tiles (bert-tiny b32 bf16 on a Xeon 6: Linear 2x, backward-data 1.5x faster).
std::unique_ptr<Kernel> linear_matmul(const KernelArgs& a, bool amx_only) {
    const bool fwd = a.node.kind == OpKind::Linear, bias = fwd && attrs_as<LinearAttrs>(a.node).bias, sum = !fwd && a.node.inputs.size() == 3;
    const dt type = compute_type(a.node.compute);
    const TensorDesc &in = a.in_desc(0), &w = a.in_desc(1), &out = a.out_desc(0);
    const int64_t N = w.shape[0], K = w.shape[1];
    auto weight_md = [&](dt t) { return fwd ? memory::desc({K, N}, t, memory::dims{1, K}) : memory::desc({N, K}, t, tag::ab); };
    const std::string key = std::string(fwd ? "ip-mm" : "ip-mm-bwd") + key_of(in) + key_of(w) + key_of(out) + (bias ? "b" : "") +
                            (sum ? "+" + key_of(a.in_desc(2)) : "") + std::to_string(int(type)) + post_op_key(a.node);
    auto e = a.ctx.cache.get<matmul>(key, [&] {
        primitive_attr attr = post_op_attr(a.node);
        if (sum) {
            post_ops po;
            po.append_binary(algorithm::binary_add, matrix_md(a.in_desc(2)));
            attr.set_post_ops(po);
        }
        const memory::desc src = matrix_md(in, type), wei = weight_md(type), dst = matrix_md(out);
        if (bias) return matmul::primitive_desc({src, wei, memory::desc({1, N}, dt::f32, tag::ab), dst}, attr, a.ctx.engine);  // b: f32 [N]
        return matmul::primitive_desc({src, wei, dst}, attr, a.ctx.engine);
    });
    if (amx_only && std::string(e->pd.impl_info_str()).find("amx") == std::string::npos) return nullptr;
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, reordered_input(*k, a.ctx, a.mem(matrix_md(in), a.in[0]), e->pd.src_desc())},
                                            {DNNL_ARG_WEIGHTS, reordered_input(*k, a.ctx, a.mem(weight_md(dnnl_type(w.dtype)), a.in[1]), e->pd.weights_desc())},
                                            {DNNL_ARG_DST, a.mem(e->pd.dst_desc(), a.out[0])}};
    if (bias) args[DNNL_ARG_BIAS] = a.mem(memory::desc({1, N}, dt::f32, tag::ab), a.in[2]);
    if (sum) args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] = a.mem(matrix_md(a.in_desc(2)), a.in[2]);
    k->add(e->prim, args);
    return k;
}
// db[n0, n1) = sum over the M rows of dY [M, N] (bf16), row by row: the same additions whatever the threads.
// Four vectors of columns at a time in registers (the AMX path only: AVX-512 is there).
JOULE_V4 void column_sums(const uint16_t* dy, float* db, int64_t M, int64_t N, int64_t n0, int64_t n1) {
    int64_t n = n0;
    for (; n + 4 * kLanes <= n1; n += 4 * kLanes) {
        v16 acc[4] = {};
        for (int64_t m = 0; m < M; ++m)
#pragma GCC unroll 4
            for (int r = 0; r < 4; ++r) acc[r] += ld16(dy + m * N + n + r * kLanes);
        for (int r = 0; r < 4; ++r) st16(db + n + r * kLanes, acc[r]);
    }
    for (; n < n1; ++n) {
        float s = 0.0f;
        for (int64_t m = 0; m < M; ++m) s += bf16_to_f32(dy[m * N + n]);
        db[n] = s;
    }
}

// LinearBackwardWeights in bf16 on AMX (as above, the inner product's backward does not use it): dW = dY^T X on
// the matmul (dY^T as strides, dW written in f32), then db by column_sums (oneDNN 2.6's reduction of bf16 rows
// is its reference kernel). nullptr when dY is not stored bf16 or the matmul's kernel is not an AMX one.
std::unique_ptr<Kernel> weight_gradient_matmul(const KernelArgs& a) {
    const dt type = compute_type(a.node.compute);
    const TensorDesc &dy = a.in_desc(0), &x = a.in_desc(1), &dw = a.out_desc(0);
    if (dy.dtype != DType::BF16) return nullptr;
    const int64_t N = dw.shape[0], M = dy.numel() / N;
    const memory::desc dy_t({N, M}, type, memory::dims{1, N});
    const std::string key = "ip-mm-bww" + key_of(dy) + key_of(x) + key_of(dw) + std::to_string(int(type));
    auto e = a.ctx.cache.get<matmul>(key, [&] { return matmul::primitive_desc({dy_t, matrix_md(x, type), matrix_md(dw)}, a.ctx.engine); });
    if (std::string(e->pd.impl_info_str()).find("amx") == std::string::npos) return nullptr;
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    k->add(e->prim, {{DNNL_ARG_SRC, a.mem(dy_t, a.in[0])},
                     {DNNL_ARG_WEIGHTS, reordered_input(*k, a.ctx, a.mem(matrix_md(x), a.in[1]), e->pd.weights_desc())},
                     {DNNL_ARG_DST, a.mem(e->pd.dst_desc(), a.out[0])}});
    if (!attrs_as<LinearAttrs>(a.node).bias) return k;
    const std::shared_ptr<PrimitiveKernel> product = std::move(k);
    const uint16_t* rows = static_cast<const uint16_t*>(a.in[0]);
    float* db = static_cast<float*>(a.out[1]);
    return std::make_unique<FunctionKernel>([=](const RunContext& rc) {
        product->run(rc);
        parallel_chunks(N, [&](int64_t n0, int64_t n1) { column_sums(rows, db, M, N, n0, n1); });
    });
}
}  // namespace

std::unique_ptr<Kernel> make_linear(const KernelArgs& a) {
    if (auto rows = make_linear_rows(a)) return rows;
    if (a.node.kind == OpKind::LinearBackwardData && a.node.inputs.size() == 3) return linear_matmul(a, false);
    if (a.node.compute == DType::BF16)
        if (auto k = a.node.kind == OpKind::LinearBackwardWeights ? weight_gradient_matmul(a) : linear_matmul(a, true)) return k;
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
