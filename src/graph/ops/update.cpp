// Optimizer updates, in place on their parameter and state inputs (PyTorch's semantics), with lr the
// node's times the step's lr_scale and g the gradient times the step's grad_scale (RunContext):
//   SgdUpdate(p, g[, v]):  g' = g + wd p;  v = momentum v + g';  p -= lr v   (p -= lr g' without momentum)
//   AdamUpdate(p, g, m, v): g' = g + wd p;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2;
//                           p -= lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
//   AdamW (AdamUpdate, decoupled): p *= 1 - lr wd first, then Adam's step with g' = g
#include "graph/ops/rules.hpp"

namespace joule::rules {

namespace {
void require_like_param(const Descs& in) {
    for (size_t i = 1; i < in.size(); ++i)
        require(in[i].shape == in[0].shape, "input " + std::to_string(i) + " " + shape_str(in[i].shape) + " differs from parameter " + shape_str(in[0].shape));
}
}  // namespace

Descs shape_SgdUpdate(const Node& n, const Descs& in) {
    const auto& a = attrs_as<SgdAttrs>(n);
    require(a.lr > 0, "learning rate must be > 0");
    require(in.size() == (a.momentum != 0.0f ? 3u : 2u), "momentum needs inputs (param, grad, velocity), plain SGD (param, grad)");
    require_like_param(in);
    return {};
}
double flops_SgdUpdate(const Node&, const Descs& in, const Descs&) { return 4 * numel(in[0]); }

Descs shape_AdamUpdate(const Node& n, const Descs& in) {
    require(attrs_as<AdamAttrs>(n).lr > 0, "learning rate must be > 0");
    require_like_param(in);
    return {};
}
double flops_AdamUpdate(const Node&, const Descs& in, const Descs&) { return 12 * numel(in[0]); }

}  // namespace joule::rules
