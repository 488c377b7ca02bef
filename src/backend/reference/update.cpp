// Optimizer updates, in place on the parameter and its state: the formulas of graph/ops/update.cpp.
// Adam's step t is the RunContext's. f32, and the parameter's bf16 copies where the update keeps some.
#include <cmath>

#include "backend/reference/kernels.hpp"

namespace joule::reference {

std::unique_ptr<Kernel> make_update(const Op& op) {
    const Buf p = op.in[0], g = op.in[1];
    // the parameter's bf16 copies (low_copies, any layout): the updated parameter, rounded
    const std::vector<Buf> copies(op.in.end() - low_copy_count(op.node), op.in.end());
    if (op.kind() == OpKind::SgdUpdate) {
        const SgdAttrs a = op.attrs<SgdAttrs>();
        const bool momentum = a.momentum != 0.0f;
        const Buf v = momentum ? op.in[2] : Buf{};
        return loop([=](const RunContext& ctx) {
            const double lr = double(a.lr) * double(ctx.lr_scale);
            for (int64_t i = 0; i < p.numel(); ++i) {
                const double gi = double(ctx.grad_scale) * double(g.get(i)) + double(a.weight_decay) * double(p.get(i));
                double step = gi;
                if (momentum) {
                    v.set(i, double(a.momentum) * double(v.get(i)) + gi);
                    step = v.get(i);
                }
                p.set(i, double(p.get(i)) - lr * step);
                for (const Buf& c : copies) c.set(i, p.get(i));
            }
        });
    }
    if (op.kind() != OpKind::AdamUpdate) throw InternalError("not an optimizer update");
    const AdamAttrs a = op.attrs<AdamAttrs>();
    const Buf m = op.in[2], v = op.in[3];
    return loop([=](const RunContext& ctx) {
        const int64_t t = ctx.step;
        const double lr = double(a.lr) * double(ctx.lr_scale), b1 = a.beta1, b2 = a.beta2;
        const double c1 = 1.0 - std::pow(b1, double(t)), c2 = 1.0 - std::pow(b2, double(t));
        for (int64_t i = 0; i < p.numel(); ++i) {
            if (a.decoupled) p.set(i, double(p.get(i)) * (1 - lr * double(a.weight_decay)));
            const double gi = double(ctx.grad_scale) * double(g.get(i)) + (a.decoupled ? 0.0 : double(a.weight_decay) * double(p.get(i)));
            m.set(i, b1 * double(m.get(i)) + (1 - b1) * gi);
            v.set(i, b2 * double(v.get(i)) + (1 - b2) * gi * gi);
            const double m_hat = double(m.get(i)) / c1, v_hat = double(v.get(i)) / c2;
            p.set(i, double(p.get(i)) - lr * m_hat / (std::sqrt(v_hat) + double(a.eps)));
            for (const Buf& c : copies) c.set(i, p.get(i));
        }
    });
}

}  // namespace joule::reference
