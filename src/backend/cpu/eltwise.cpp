// Activations, Sqrt, Pow (oneDNN eltwise forward/backward; ReLU / ReLU6 backward and GELU both ways are loops of joule's
// own, below), Add/Mul/Sub/Div with B broadcast (oneDNN binary) and Dropout (a counter-based RNG loop, f32 or bf16: the
// mask of element i in run t (RunContext::run) is graph/ops.hpp's dropout_keeps, the same on every backend).
#include <bit>
#include <cmath>
#include <cstring>

#include <type_traits>

#include "backend/cpu/kernels.hpp"
#include "backend/cpu/vec.hpp"
#include "graph/bf16.hpp"

namespace joule::cpu {

namespace {
using namespace dnnl;

struct EltwiseAlg {
    algorithm alg;
    float alpha, beta;
};
EltwiseAlg eltwise_alg(const Node& n) {
    switch (n.kind) {
        case OpKind::Sqrt: case OpKind::SqrtBackward: return {algorithm::eltwise_sqrt, 0.f, 0.f};
        case OpKind::Pow: case OpKind::PowBackward: return {algorithm::eltwise_pow, 1.f, attrs_as<PowAttrs>(n).exponent};
        case OpKind::Clip: case OpKind::ClipBackward: return {algorithm::eltwise_clip_v2, attrs_as<ClipAttrs>(n).lo, attrs_as<ClipAttrs>(n).hi};
        case OpKind::Relu: case OpKind::ReluBackward: return {algorithm::eltwise_relu, 0.f, 0.f};
        case OpKind::Relu6: case OpKind::Relu6Backward: return {algorithm::eltwise_clip_v2, 0.f, 6.f};  // v2: zero gradient at both ends, as PyTorch
        case OpKind::Gelu: case OpKind::GeluBackward: return {algorithm::eltwise_gelu_erf, 0.f, 0.f};
        case OpKind::Sigmoid: case OpKind::SigmoidBackward: return {algorithm::eltwise_logistic, 0.f, 0.f};
        case OpKind::Tanh: case OpKind::TanhBackward: return {algorithm::eltwise_tanh, 0.f, 0.f};
        default: throw InternalError("not an eltwise op");
    }
}
}  // namespace

namespace {
// ReluBackward / Relu6Backward as a loop of joule's own (oneDNN 2.6's use-dst eltwise backward ran at 20-23
// GB/s where this runs at memory speed): dX = dZ f'(Y) over elements [begin, end), where dZ is input 0 or,
// with the gradient sum folded in (Node::pre_op Add, Sum), a + b rounded to the storage dtype first (as the
// unfused Add stores it).
template <bool Sum, bool Six>
JOULE_X86_64_V4_CLONE void act_backward_f32(const float* __restrict a, const float* __restrict b, const float* __restrict y, float* __restrict dx,
                                            int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
        const float s = Sum ? a[i] + b[i] : a[i];
        dx[i] = y[i] > 0.0f && (!Six || y[i] < 6.0f) ? s : 0.0f;
    }
}
template <bool Sum, bool Six>
JOULE_X86_64_V4_CLONE void act_backward_bf16(const uint16_t* __restrict a, const uint16_t* __restrict b, const uint16_t* __restrict y,
                                             uint16_t* __restrict dx, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
        const uint16_t s = Sum ? f32_to_bf16(bf16_to_f32(a[i]) + bf16_to_f32(b[i])) : a[i];
        const float v = bf16_to_f32(y[i]);
        dx[i] = v > 0.0f && (!Six || v < 6.0f) ? s : uint16_t(0);
    }
}
template <class T>
using ActBackwardLoop = void (*)(const T*, const T*, const T*, T*, int64_t, int64_t);
template <class T>
ActBackwardLoop<T> act_backward_loop(bool sum, bool six) {
    if constexpr (std::is_same_v<T, float>)
        return sum ? (six ? act_backward_f32<true, true> : act_backward_f32<true, false>) : (six ? act_backward_f32<false, true> : act_backward_f32<false, false>);
    else
        return sum ? (six ? act_backward_bf16<true, true> : act_backward_bf16<true, false>) : (six ? act_backward_bf16<false, true> : act_backward_bf16<false, false>);
}

// Whether a loop of this file can run the node: it computes in its output's dtype (f32 or bf16) and reads
// every input in that dtype and storage (a plan casts and reorders before; a summed backward always does,
// Graph::infer matched a and b, and its Y as compute_input would).
// Whether every input is stored in its output's element order (layout, blocking, shape), whatever its dtype.
bool inputs_in_output_order(const KernelArgs& a) {
    const TensorDesc& out = a.out_desc(0);
    for (size_t i = 0; i < a.node.inputs.size(); ++i) {
        const TensorDesc& t = a.in_desc(i);
        if (t.layout != out.layout || t.blocking != out.blocking || t.shape != out.shape) return false;
    }
    return true;
}
bool same_storage_loop(const KernelArgs& a) {
    const TensorDesc& out = a.out_desc(0);
    if ((out.dtype != DType::F32 && out.dtype != DType::BF16) || compute_type(a.node.compute) != dnnl_type(out.dtype)) return false;
    for (size_t i = 0; i < a.node.inputs.size(); ++i)
        if (a.in_desc(i).dtype != out.dtype) return false;
    return inputs_in_output_order(a);
}
}  // namespace

void act_backward_range(bool bf16, bool six, const void* dz, const void* y, void* dx, int64_t begin, int64_t end) {
    if (bf16)
        act_backward_loop<uint16_t>(false, six)(static_cast<const uint16_t*>(dz), nullptr, static_cast<const uint16_t*>(y), static_cast<uint16_t*>(dx),
                                                begin, end);
    else
        act_backward_loop<float>(false, six)(static_cast<const float*>(dz), nullptr, static_cast<const float*>(y), static_cast<float*>(dx), begin, end);
}

namespace {
bool act_backward_by_loop(const KernelArgs& a) {
    return (a.node.kind == OpKind::ReluBackward || a.node.kind == OpKind::Relu6Backward) && same_storage_loop(a);
}

std::unique_ptr<Kernel> act_backward(const KernelArgs& a) {
    const int64_t n = a.out_desc(0).storage_numel();
    const bool bf16 = a.out_desc(0).dtype == DType::BF16, six = a.node.kind == OpKind::Relu6Backward, sum = a.node.pre_op == OpKind::Add;
    // (dZ, Y) or, summed, (a, Y, b)
    const void *x0 = a.in[0], *y = a.in[1], *x1 = sum ? a.in[2] : nullptr;
    void* dx = a.out[0];
    return std::make_unique<FunctionKernel>([=](const RunContext&) {
        parallel_chunks(n, [&](int64_t begin, int64_t end) {
            if (bf16)
                act_backward_loop<uint16_t>(sum, six)(static_cast<const uint16_t*>(x0), static_cast<const uint16_t*>(x1), static_cast<const uint16_t*>(y),
                                                      static_cast<uint16_t*>(dx), begin, end);
            else
                act_backward_loop<float>(sum, six)(static_cast<const float*>(x0), static_cast<const float*>(x1), static_cast<const float*>(y),
                                                   static_cast<float*>(dx), begin, end);
        });
    });
}

// GELU (erf form) and its backward as loops of joule's own: oneDNN 2.6's eltwise gelu_erf backward ran at 1/3
// to 1/2 of these loops' speed on BERT's [tokens, 4 x hidden] activations (forward ~1.2x), one process, 2
// threads. erf is Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7, the approximation oneDNN's kernel uses too),
// exp a Cephes-style polynomial; both plain code GCC vectorises.
// c ? a : b on the bits: GCC (under -ftrapping-math) will not turn a float select into a vector blend.
inline float select(bool c, float a, float b) {
    const uint32_t m = -uint32_t(c);
    return std::bit_cast<float>((std::bit_cast<uint32_t>(a) & m) | (std::bit_cast<uint32_t>(b) & ~m));
}
// exp(v) for v <= 0 (vec.hpp's exp_poly); v below -87 is taken as -87 (e^-87 ~ 1.6e-38, which the callers
// multiply to 0), and so is NaN (the callers' other factor is NaN then too), so that the conversion to int below
// is always defined.
inline float exp_nonpositive(float v) {
    using namespace exp_poly;
    v = select(v >= -87.0f, v, -87.0f);
    const int32_t n = int32_t(v * kLog2e - 0.5f);  // round(v / ln 2), v <= 0
    const float fn = float(n), r = (v - fn * kLn2Hi) - fn * kLn2Lo;
    float p = kP0;
    p = p * r + kP1;
    p = p * r + kP2;
    p = p * r + kP3;
    p = p * r + kP4;
    return (p * r * r + r + 1.0f) * std::bit_cast<float>(uint32_t(n + 127) << 23);
}
// Phi(x) = 0.5 (1 + erf(x / sqrt 2)) and e = exp(-x^2 / 2); for x < 0, Phi is the small 0.5 erfc(|x| / sqrt 2)
// itself (no 1 - (1 - tiny) cancellation).
struct Phi {
    float cdf, e;
};
inline Phi gelu_phi(float x) {
    const float z = std::fabs(x) * 0.70710678118654752f, t = 1.0f / (1.0f + 0.3275911f * z);
    const float p = (((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f;
    const float e = exp_nonpositive(-z * z), tail = 0.5f * t * p * e;
    return {select(x < 0.0f, tail, 1.0f - tail), e};
}
template <class T, class U>
JOULE_X86_64_V4_CLONE void gelu_forward(const T* __restrict x, U* __restrict y, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
        const float v = ld(x, i);
        st(y, i, v * gelu_phi(v).cdf);
    }
}
template <class T, class U>
JOULE_X86_64_V4_CLONE void gelu_backward(const T* __restrict dy, const T* __restrict x, U* __restrict dx, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
        const float v = ld(x, i);
        const Phi f = gelu_phi(v);
        st(dx, i, ld(dy, i) * (f.cdf + v * 0.3989422804014327f * f.e));  // 0.39894: 1 / sqrt(2 pi)
    }
}
// T: the inputs' storage, U: the output's (bf16 from f32 inputs: the plan folded the Cast after the node)
template <class T, class U>
std::unique_ptr<Kernel> gelu_loop(const KernelArgs& a) {
    const int64_t n = a.out_desc(0).storage_numel();
    const bool forward = a.node.kind == OpKind::Gelu;
    // Gelu: (X) -> Y; GeluBackward: (dY, X) -> dX
    const T* in0 = static_cast<const T*>(a.in[0]);
    const T* in1 = forward ? nullptr : static_cast<const T*>(a.in[1]);
    U* out = static_cast<U*>(a.out[0]);
    return std::make_unique<FunctionKernel>([=](const RunContext&) {
        parallel_chunks(n, [&](int64_t begin, int64_t end) {
            if (forward) gelu_forward(in0, out, begin, end);
            else gelu_backward(in0, in1, out, begin, end);
        });
    });
}
}  // namespace

std::unique_ptr<Kernel> make_eltwise(const KernelArgs& a) {
    if (a.node.pre_op == OpKind::Add) {
        JOULE_ASSERT(act_backward_by_loop(a), "op '" + a.node.name + "': a summed ReLU backward reads one dtype and storage");
        return act_backward(a);
    }
    if (act_backward_by_loop(a)) return act_backward(a);
    if (a.node.kind == OpKind::Gelu || a.node.kind == OpKind::GeluBackward) {
        if (same_storage_loop(a)) return a.out_desc(0).dtype == DType::BF16 ? gelu_loop<uint16_t, uint16_t>(a) : gelu_loop<float, float>(a);
        if (a.out_desc(0).dtype == DType::BF16 && a.node.compute == DType::F32) {  // f32 inputs (check_dtypes), rounded as stored
            JOULE_ASSERT(inputs_in_output_order(a), "op '" + a.node.name + "': a GELU storing bf16 reads its output's storage order");
            return gelu_loop<float, uint16_t>(a);
        }
    }
    const EltwiseAlg alg = eltwise_alg(a.node);
    const bool forward = op_info(a.node.kind).grad != nullptr;
    const TensorDesc& x = forward ? a.in_desc(0) : a.in_desc(1);
    const dt type = compute_type(a.node.compute);
    const memory::desc data = md_of(x), cdata = with_type(data, type);
    const std::string key = key_of(x) + std::to_string(int(alg.alg)) + "a" + std::to_string(alg.alpha) + "b" + std::to_string(alg.beta) + "t" + std::to_string(int(type));
    auto fwd = a.ctx.cache.get<eltwise_forward>(key, [&] {
        return eltwise_forward::primitive_desc({prop_kind::forward_training, alg.alg, cdata, alg.alpha, alg.beta}, a.ctx.engine);
    });
    if (forward) return src_to_dst_kernel(a, fwd->prim, data, type);
    // ReluBackward / Relu6Backward read the forward output (graph/ops.hpp backward_reads_output)
    const bool from_dst = backward_reads_output(a.node.kind);
    const algorithm bwd_alg = !from_dst ? alg.alg : alg.alg == algorithm::eltwise_relu ? algorithm::eltwise_relu_use_dst_for_bwd
                                                                                       : algorithm::eltwise_clip_v2_use_dst_for_bwd;
    const std::string bkey = key + (from_dst ? "dst" : "src");
    auto hint = a.ctx.cache.get<eltwise_forward>(bkey, [&] {
        return eltwise_forward::primitive_desc({prop_kind::forward_training, bwd_alg, cdata, alg.alpha, alg.beta}, a.ctx.engine);
    });
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    StagedOutputs outs;
    auto e = a.ctx.cache.get<eltwise_backward>(bkey, [&] {
        return eltwise_backward::primitive_desc({bwd_alg, cdata, cdata, alg.alpha, alg.beta}, a.ctx.engine, hint->pd);
    });
    k->add(e->prim, {{DNNL_ARG_DIFF_DST, compute_input(a, data, a.in[0], type)},
                     {from_dst ? DNNL_ARG_DST : DNNL_ARG_SRC, compute_input(a, data, a.in[1], type)},
                     {DNNL_ARG_DIFF_SRC, outs.add(a, data, a.out[0], type)}});
    outs.finish(*k);
    return k;
}

namespace {
// y = a op b over [begin, end), f32 operands, y rounded to bf16 as stored.
template <OpKind K>
JOULE_X86_64_V4_CLONE void binary_to_bf16(const float* __restrict a, const float* __restrict b, uint16_t* __restrict y, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
        const float v = K == OpKind::Add ? a[i] + b[i] : K == OpKind::Mul ? a[i] * b[i] : K == OpKind::Sub ? a[i] - b[i] : a[i] / b[i];
        st(y, i, v);
    }
}
}  // namespace

std::unique_ptr<Kernel> make_binary(const KernelArgs& a) {
    const OpKind kind = a.node.kind;
    // An f32 node storing bf16 (stores_output_low: the plan's Cast after it folded in), operands of its shape
    // and order, nothing fused: a loop of joule's own (oneDNN 2.6 has only its reference kernel for an f32
    // binary storing bf16); else oneDNN writes f32 into a scratch and a reorder rounds it into storage.
    const bool low_out = a.node.compute == DType::F32 && a.out_desc(0).dtype == DType::BF16;
    if (low_out && a.node.post_op == OpKind::Count && inputs_in_output_order(a)) {
        const auto loop = kind == OpKind::Add ? binary_to_bf16<OpKind::Add> : kind == OpKind::Mul ? binary_to_bf16<OpKind::Mul>
                        : kind == OpKind::Sub ? binary_to_bf16<OpKind::Sub> : binary_to_bf16<OpKind::Div>;
        const int64_t n = a.out_desc(0).storage_numel();
        const float *x0 = static_cast<const float*>(a.in[0]), *x1 = static_cast<const float*>(a.in[1]);
        uint16_t* y = static_cast<uint16_t*>(a.out[0]);
        return std::make_unique<FunctionKernel>([=](const RunContext&) { parallel_chunks(n, [&](int64_t begin, int64_t end) { loop(x0, x1, y, begin, end); }); });
    }
    const algorithm alg = kind == OpKind::Add ? algorithm::binary_add : kind == OpKind::Mul ? algorithm::binary_mul
                        : kind == OpKind::Sub ? algorithm::binary_sub : algorithm::binary_div;
    const dt type = compute_type(a.node.compute);
    // B broadcast to A: its dims padded with leading 1s to A's rank (oneDNN broadcasts src1's 1-dims)
    const TensorDesc& b = a.in_desc(1);
    const memory::desc s0 = md_of(a.in_desc(0)), s1 = md_of(padded_to_rank(b.shape, a.in_desc(0).shape.size()), b.layout, dnnl_type(b.dtype)),
                       d = md_of(a.out_desc(0));
    const std::string key = key_of(a.in_desc(0)) + key_of(a.in_desc(1)) + std::to_string(int(alg)) + "t" + std::to_string(int(type)) + post_op_key(a.node);
    auto e = a.ctx.cache.get<binary>(key, [&] {
        return binary::primitive_desc({alg, with_type(s0, type), with_type(s1, type), with_type(d, type)}, post_op_attr(a.node), a.ctx.engine);
    });
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    StagedOutputs outs;
    k->add(e->prim, {{DNNL_ARG_SRC_0, compute_input(a, s0, a.in[0], type)}, {DNNL_ARG_SRC_1, compute_input(a, s1, a.in[1], type)},
                     {DNNL_ARG_DST, low_out ? outs.add(a, d, a.out[0], with_type(d, type)) : outs.add(a, d, a.out[0], type)}});
    outs.finish(*k);
    return k;
}

namespace {
// y = x * mask and the mask over elements [begin, end) (counter first + i), f32 or bf16 storage: the mask is
// dropout_keeps() (graph/ops.hpp), the reference's test. Compiled twice, picked once at load time: for x86-64-v4
// (AVX-512, where the counter hash's 64-bit multiplies vectorise: ~4x) and for the baseline (x86-64 only).
struct DropoutRun {
    int64_t first;
    uint64_t base;
    float p, scale;
};
JOULE_X86_64_V4_CLONE void dropout_f32(const float* __restrict x, float* __restrict y, float* __restrict mask, int64_t begin, int64_t end,
                                       DropoutRun r) {
    for (int64_t i = begin; i < end; ++i) {
        const float m = dropout_keeps(r.base, r.first + i, r.p) ? r.scale : 0.0f;
        mask[i] = m;
        y[i] = x[i] * m;
    }
}
JOULE_X86_64_V4_CLONE void dropout_bf16(const uint16_t* __restrict x, uint16_t* __restrict y, uint16_t* __restrict mask, int64_t begin,
                                        int64_t end, DropoutRun r) {
    for (int64_t i = begin; i < end; ++i) {
        const float m = dropout_keeps(r.base, r.first + i, r.p) ? r.scale : 0.0f;
        mask[i] = f32_to_bf16(m);
        y[i] = f32_to_bf16(bf16_to_f32(x[i]) * m);
    }
}
// f32 in, the output stored in bf16 (plan/'s fold_casts: a bf16 GEMM reads it), the mask f32: dropout_f32
// a chunk at a time into L1, then rounded (one loop doing both ran slower than the two vectorised ones).
void dropout_f32_to_bf16(const float* x, uint16_t* y, float* mask, int64_t begin, int64_t end, DropoutRun r) {
    constexpr int64_t kChunk = 1024;
    float out[kChunk];
    for (int64_t b = begin; b < end; b += kChunk) {
        const int64_t e = std::min(end, b + kChunk);
        dropout_f32(x + b, out, mask + b, 0, e - b, {r.first + b, r.base, r.p, r.scale});
        to_bf16(out, y + b, 0, e - b, false);
    }
}
}  // namespace

std::unique_ptr<Kernel> make_dropout(const KernelArgs& a) {
    const auto at = attrs_as<DropoutAttrs>(a.node);
    const int64_t n = a.in_desc(0).numel();
    const bool bf16 = a.in_desc(0).dtype == DType::BF16;
    const bool low_out = !bf16 && a.out_desc(0).dtype == DType::BF16;  // f32 computed, stored bf16 (stores_output_low)
    const size_t bytes = a.in_desc(0).bytes();
    void *x = a.in[0], *y = a.out[0], *mask = a.out[1];
    const uint64_t stream = dropout_stream(a.node);
    return std::make_unique<FunctionKernel>([=](const RunContext& rc) {
        if (!rc.training || at.p == 0.0f) {
            if (low_out) to_bf16(static_cast<const float*>(x), static_cast<uint16_t*>(y), 0, n, false);
            else std::memcpy(y, x, bytes);
            if (bf16) std::fill_n(static_cast<uint16_t*>(mask), n, f32_to_bf16(1.0f));
            else std::fill_n(static_cast<float*>(mask), n, 1.0f);
            return;
        }
        const DropoutRun r{rc.shard * n, mix64(stream + rc.run), at.p, 1.0f / (1.0f - at.p)};
        parallel_chunks(n, [&](int64_t begin, int64_t end) {
            if (bf16) dropout_bf16(static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y), static_cast<uint16_t*>(mask), begin, end, r);
            else if (low_out) dropout_f32_to_bf16(static_cast<const float*>(x), static_cast<uint16_t*>(y), static_cast<float*>(mask), begin, end, r);
            else dropout_f32(static_cast<const float*>(x), static_cast<float*>(y), static_cast<float*>(mask), begin, end, r);
        });
    });
}

}  // namespace joule::cpu
