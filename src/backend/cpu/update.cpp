// SGD (momentum, weight decay), Adam and AdamW updates as vectorised loops, in place on the parameter
// and its state (formulas in graph/ops/update.cpp), at this step's lr_scale and grad_scale (RunContext).
// Parameter, gradient and state share one layout (plan/'s layout pass), so the loops run over storage; the
// parameter's bf16 copies where the update keeps some (low_copies: its own storage order, or a convolution
// weight's bf16 formats, CopyToBf16) are rounded block by block from the updated parameter.
#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels.hpp"

namespace joule::cpu {

namespace {
// The parameter's copies, rewritten as the update goes.
struct Copies {
    std::vector<CopyToBf16> casts;
    std::vector<void*> dst;
    bool stream = false;   // non-temporal stores (CopyToBf16::run)
    int64_t unit = 1;      // the update's ranges are whole units of every cast (1 or a weight's 256-element tiles)
    void finish() const {
        for (size_t i = 0; i < casts.size(); ++i) casts[i].finish(dst[i]);
    }
};

// Runs step(b, e) over storage elements [begin, end): in blocks when the update keeps copies, each block then
// rounded into the copies while it is still in L1 (a vectorised pass, or a weight's tile casts).
constexpr int64_t kBlock = 4096;
template <class Step>
void update_range(int64_t begin, int64_t end, const Copies& copies, const float* p, Step&& step) {
    if (copies.casts.empty()) return step(begin, end);
    for (int64_t b = begin; b < end; b += kBlock) {
        const int64_t e = std::min(end, b + kBlock);
        step(b, e);
        for (size_t i = 0; i < copies.casts.size(); ++i) {
            const int64_t unit = copies.casts[i].unit();
            copies.casts[i].run(p, copies.dst[i], b / unit, e / unit, copies.stream);
        }
    }
}

// step(b, e) over all n storage elements, split between the threads in whole units of the copies' casts.
template <class Step>
void update_all(int64_t n, const Copies& copies, const float* p, Step&& step) {
    const int64_t u = copies.unit;
    parallel_chunks(n / u, [&](int64_t begin, int64_t end) { update_range(begin * u, end * u, copies, p, step); });
    copies.finish();
}
}  // namespace

std::unique_ptr<Kernel> make_update(const KernelArgs& a) {
    const int64_t n = a.in_desc(0).storage_numel();  // a blocked layout's padding is zero in all operands and stays so
    float* p = static_cast<float*>(a.in[0]);
    const float* g = static_cast<const float*>(a.in[1]);
    // the parameter's bf16 copies (plan/'s fold_casts), rewritten from the updated parameter
    Copies copies;
    for (size_t i = 1; i < a.node.inputs.size(); ++i) {
        if (!is_low_copy_input(a.node, i)) {
            JOULE_ASSERT(a.in_desc(i).layout == a.in_desc(0).layout && a.in_desc(i).blocking == a.in_desc(0).blocking,
                         "update '" + a.node.name + "': operand " + std::to_string(i) + " is not in the parameter's layout");
            continue;
        }
        std::optional<CopyToBf16> c = CopyToBf16::of(a.in_desc(0), a.in_desc(i));
        JOULE_ASSERT(c.has_value(), "update '" + a.node.name + "': no cast from the parameter's " + layout_str(a.in_desc(0)) + " into its copy's " +
                                        layout_str(a.in_desc(i)) + " (CpuBackend::writes_low_copy)");
        JOULE_ASSERT(kBlock % c->unit() == 0 && n == c->units() * c->unit(), "update '" + a.node.name + "': copy units");
        copies.unit = std::max(copies.unit, c->unit());
        copies.casts.push_back(std::move(*c));
        copies.dst.push_back(a.in[i]);
    }
    // A copy is read next in the next step, after the rest of this step's traffic: written without a read for
    // ownership, unless all the graph's copies together fit in the caches.
    double copy_bytes = 0;
    for (const auto& [param, copy] : low_copies(a.g)) copy_bytes += double(a.g.tensor(copy).desc.bytes());
    copies.stream = copy_bytes > double(kStreamBytes);
    if (a.node.kind == OpKind::SgdUpdate) {
        const auto at = attrs_as<SgdAttrs>(a.node);
        float* v = at.momentum != 0.0f ? static_cast<float*>(a.in[2]) : nullptr;
        return std::make_unique<FunctionKernel>([=](const RunContext& ctx) {
            const float lr = at.lr * ctx.lr_scale, wd = at.weight_decay, mom = at.momentum, gs = ctx.grad_scale;
            update_all(n, copies, p, [&](int64_t b, int64_t e) {
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
        update_all(n, copies, p, [&](int64_t b, int64_t e) {
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
}

}  // namespace joule::cpu
