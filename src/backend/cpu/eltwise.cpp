// Activations (oneDNN eltwise forward/backward), Add/Mul (oneDNN binary) and Dropout (a counter-based
// RNG loop: the mask of element i at step t is a hash of (seed, t, i), so it is reproducible and
// parallel).
#include <cstring>

#include "backend/cpu/kernels.hpp"

namespace joule::cpu {

namespace {
using namespace dnnl;

struct EltwiseAlg {
    algorithm alg;
    float alpha, beta;
};
EltwiseAlg eltwise_alg(OpKind k) {
    switch (k) {
        case OpKind::Relu: case OpKind::ReluBackward: return {algorithm::eltwise_relu, 0.f, 0.f};
        case OpKind::Relu6: case OpKind::Relu6Backward: return {algorithm::eltwise_clip, 0.f, 6.f};
        case OpKind::Gelu: case OpKind::GeluBackward: return {algorithm::eltwise_gelu_erf, 0.f, 0.f};
        case OpKind::Sigmoid: case OpKind::SigmoidBackward: return {algorithm::eltwise_logistic, 0.f, 0.f};
        case OpKind::Tanh: case OpKind::TanhBackward: return {algorithm::eltwise_tanh, 0.f, 0.f};
        default: throw InternalError("not an eltwise op");
    }
}
}  // namespace

std::unique_ptr<Kernel> make_eltwise(const KernelArgs& a) {
    const EltwiseAlg alg = eltwise_alg(a.node.kind);
    const bool forward = op_info(a.node.kind).grad != nullptr;
    const TensorDesc& x = forward ? a.in_desc(0) : a.in_desc(1);
    const dt type = compute_type(a.node.compute);
    const memory::desc data = md_of(x), cdata = with_type(data, type);
    const std::string key = key_of(x) + std::to_string(int(alg.alg)) + "t" + std::to_string(int(type));
    auto fwd = a.ctx.cache.get<eltwise_forward>(key, [&] {
        return eltwise_forward::primitive_desc({prop_kind::forward_training, alg.alg, cdata, alg.alpha, alg.beta}, a.ctx.engine);
    });
    if (forward) return src_to_dst_kernel(a, fwd->prim, data, type);
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    StagedOutputs outs;
    auto e = a.ctx.cache.get<eltwise_backward>(key, [&] {
        return eltwise_backward::primitive_desc({alg.alg, cdata, cdata, alg.alpha, alg.beta}, a.ctx.engine, fwd->pd);
    });
    k->add(e->prim, {{DNNL_ARG_DIFF_DST, cast_input(*k, a, data, a.in[0], type)}, {DNNL_ARG_SRC, cast_input(*k, a, data, a.in[1], type)},
                     {DNNL_ARG_DIFF_SRC, outs.add(a, data, a.out[0], type)}});
    outs.finish(*k);
    return k;
}

std::unique_ptr<Kernel> make_binary(const KernelArgs& a) {
    const algorithm alg = a.node.kind == OpKind::Add ? algorithm::binary_add : algorithm::binary_mul;
    const dt type = compute_type(a.node.compute);
    const memory::desc s0 = md_of(a.in_desc(0)), s1 = md_of(a.in_desc(1)), d = md_of(a.out_desc(0));
    auto e = a.ctx.cache.get<binary>(key_of(a.in_desc(0)) + key_of(a.in_desc(1)) + std::to_string(int(alg)) + "t" + std::to_string(int(type)), [&] {
        return binary::primitive_desc({alg, with_type(s0, type), with_type(s1, type), with_type(d, type)}, a.ctx.engine);
    });
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    StagedOutputs outs;
    k->add(e->prim, {{DNNL_ARG_SRC_0, cast_input(*k, a, s0, a.in[0], type)}, {DNNL_ARG_SRC_1, cast_input(*k, a, s1, a.in[1], type)},
                     {DNNL_ARG_DST, outs.add(a, d, a.out[0], type)}});
    outs.finish(*k);
    return k;
}

namespace {
inline uint64_t splitmix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
}  // namespace

std::unique_ptr<Kernel> make_dropout(const KernelArgs& a) {
    const auto at = attrs_as<DropoutAttrs>(a.node);
    const int64_t n = a.in_desc(0).numel();
    const float* x = static_cast<const float*>(a.in[0]);
    float* y = static_cast<float*>(a.out[0]);
    float* mask = static_cast<float*>(a.out[1]);
    auto step = std::make_shared<uint64_t>(0);
    const uint64_t seed = splitmix64(at.seed ^ uint64_t(a.id) * 0x100000001b3ULL);
    return std::make_unique<FunctionKernel>([=](const RunContext& rc) {
        if (!rc.training || at.p == 0.0f) {
            std::memcpy(y, x, size_t(n) * sizeof(float));
            std::fill(mask, mask + n, 1.0f);
            return;
        }
        const uint64_t base = splitmix64(seed + (*step)++);
        const float keep_scale = 1.0f / (1.0f - at.p);
        const uint64_t threshold = uint64_t(double(at.p) * 18446744073709551615.0);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) {
            const float m = splitmix64(base + uint64_t(i)) >= threshold ? keep_scale : 0.0f;
            mask[i] = m;
            y[i] = x[i] * m;
        }
    });
}

}  // namespace joule::cpu
