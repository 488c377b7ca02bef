// Optimizer updates, in place on their parameter and state inputs (PyTorch's semantics), with lr the
// node's times the step's lr_scale and g the gradient times the step's grad_scale (RunContext):
//   SgdUpdate(p, g[, v]):  g' = g + wd p;  v = momentum v + g';  p -= lr v   (p -= lr g' without momentum)
//   AdamUpdate(p, g, m, v): g' = g + wd p;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2;
//                           p -= lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
//   AdamW (AdamUpdate, decoupled): p *= 1 - lr wd first, then Adam's step with g' = g
// With low_copy, a last input c (bf16, the parameter's layout) gets c = bf16(p) of the updated p.
#include "graph/ops/rules.hpp"

namespace joule::rules {

namespace {
void require_like_param(const Descs& in) {
    for (size_t i = 1; i < in.size(); ++i)
        require(in[i].shape == in[0].shape, "input " + std::to_string(i) + " " + shape_str(in[i].shape) + " differs from parameter " + shape_str(in[0].shape));
}
// The parameter's bf16 copy, when the update keeps one (the last input).
void require_low_copy(bool low_copy, const Descs& in) {
    if (low_copy) require(in.back().dtype == DType::BF16 && in.back().layout == in[0].layout && in.back().blocking == in[0].blocking,
                          "the parameter's low-precision copy (the last input) must be bf16 in the parameter's layout");
}
}  // namespace

Descs shape_SgdUpdate(const Node& n, const Descs& in) {
    const auto& a = attrs_as<SgdAttrs>(n);
    require(a.lr > 0, "learning rate must be > 0");
    require(in.size() == (a.momentum != 0.0f ? 3u : 2u) + (a.low_copy ? 1u : 0u),
            "momentum needs inputs (param, grad, velocity), plain SGD (param, grad); then the parameter's bf16 copy, where the update keeps one");
    require_like_param(in);
    require_low_copy(a.low_copy, in);
    return {};
}
double flops_SgdUpdate(const Node&, const Descs& in, const Descs&) { return 4 * numel(in[0]); }

Descs shape_AdamUpdate(const Node& n, const Descs& in) {
    const auto& a = attrs_as<AdamAttrs>(n);
    require(a.lr > 0, "learning rate must be > 0");
    require(in.size() == (a.low_copy ? 5u : 4u), "Adam needs inputs (param, grad, m, v), then the parameter's bf16 copy where the update keeps one");
    require_like_param(in);
    require_low_copy(a.low_copy, in);
    return {};
}
double flops_AdamUpdate(const Node&, const Descs& in, const Descs&) { return 12 * numel(in[0]); }

}  // namespace joule::rules
