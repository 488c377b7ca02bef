// SGD (momentum, weight decay), Adam and AdamW updates as vectorised loops, in place on the parameter
// and its state (formulas in graph/ops/update.cpp), at this step's lr_scale and grad_scale (RunContext).
// Parameter, gradient and state share one layout (plan/'s layout pass), so the loops run over storage; so
// does the parameter's bf16 copy where the update keeps one (low_copy), rounded block by block.
#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels.hpp"

namespace joule::cpu {

namespace {
// Runs step(b, e) over [begin, end): in blocks when the update keeps a bf16 copy, each block then rounded
// into the copy while it is still in L1 (a vectorised pass; non-temporal stores for a copy past the caches).
constexpr int64_t kBlock = 4096;
template <class Step>
void update_range(int64_t begin, int64_t end, uint16_t* c, bool stream, const float* p, Step&& step) {
    if (!c) return step(begin, end);
    for (int64_t b = begin; b < end; b += kBlock) {
        const int64_t e = std::min(end, b + kBlock);
        step(b, e);
        to_bf16(p, c, b, e, stream);
    }
}
}  // namespace

std::unique_ptr<Kernel> make_update(const KernelArgs& a) {
    for (size_t i = 1; i < a.node.inputs.size(); ++i)
        JOULE_ASSERT(a.in_desc(i).layout == a.in_desc(0).layout && a.in_desc(i).blocking == a.in_desc(0).blocking,
                     "update '" + a.node.name + "': operand " + std::to_string(i) + " is not in the parameter's layout");
    const int64_t n = a.in_desc(0).storage_numel();  // a blocked layout's padding is zero in all operands and stays so
    float* p = static_cast<float*>(a.in[0]);
    const float* g = static_cast<const float*>(a.in[1]);
    // the parameter's bf16 copy (plan/'s fold_casts), rewritten from the updated parameter
    const int copy_at = low_copy_input(a.node);
    uint16_t* c = copy_at >= 0 ? static_cast<uint16_t*>(a.in[size_t(copy_at)]) : nullptr;
    const bool stream = n * 2 > kStreamBytes;
    if (a.node.kind == OpKind::SgdUpdate) {
        const auto at = attrs_as<SgdAttrs>(a.node);
        float* v = at.momentum != 0.0f ? static_cast<float*>(a.in[2]) : nullptr;
        return std::make_unique<FunctionKernel>([=](const RunContext& ctx) {
            const float lr = at.lr * ctx.lr_scale, wd = at.weight_decay, mom = at.momentum, gs = ctx.grad_scale;
            parallel_chunks(n, [&](int64_t begin, int64_t end) {
                update_range(begin, end, c, stream, p, [&](int64_t b, int64_t e) {
                    if (v) {
#pragma omp simd
                        for (int64_t i = b; i < e; ++i) {
                            const float gi = gs * g[i] + wd * p[i];
                            v[i] = mom * v[i] + gi;
                            p[i] -= lr * v[i];
                        }
                    } else {
#pragma omp simd
                        for (int64_t i = b; i < e; ++i) p[i] -= lr * (gs * g[i] + wd * p[i]);
                    }
                });
            });
        });
    }
    const auto at = attrs_as<AdamAttrs>(a.node);
    float* m = static_cast<float*>(a.in[2]);
    float* v = static_cast<float*>(a.in[3]);
    return std::make_unique<FunctionKernel>([=](const RunContext& ctx) {
        const int64_t t = ctx.step;
        const float lr = at.lr * ctx.lr_scale, gs = ctx.grad_scale;
        const float b1 = at.beta1, b2 = at.beta2, eps = at.eps;
        const float wd = at.decoupled ? 0.0f : at.weight_decay, decay = at.decoupled ? 1.0f - lr * at.weight_decay : 1.0f;
        const float c1 = 1.0f - std::pow(b1, float(t)), c2 = 1.0f - std::pow(b2, float(t));
        const float step_size = lr / c1, inv_sqrt_c2 = 1.0f / std::sqrt(c2);
        parallel_chunks(n, [&](int64_t begin, int64_t end) {
            update_range(begin, end, c, stream, p, [&](int64_t b, int64_t e) {
#pragma omp simd
                for (int64_t i = b; i < e; ++i) {
                    p[i] *= decay;
                    const float gi = gs * g[i] + wd * p[i];
                    m[i] = b1 * m[i] + (1 - b1) * gi;
                    v[i] = b2 * v[i] + (1 - b2) * gi * gi;
                    p[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_c2 + eps);
                }
            });
        });
    });
}

}  // namespace joule::cpu
