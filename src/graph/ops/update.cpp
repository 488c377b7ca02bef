// Optimizer updates, in place on their parameter and state inputs (PyTorch's semantics), with lr the
// node's times the step's lr_scale and g the gradient times the step's grad_scale (RunContext):
//   SgdUpdate(p, g[, v]):  g' = g + wd p;  v = momentum v + g';  p -= lr v   (p -= lr g' without momentum)
//   AdamUpdate(p, g, m, v): g' = g + wd p;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2;
//                           p -= lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
//   AdamW (AdamUpdate, decoupled): p *= 1 - lr wd first, then Adam's step with g' = g
// With low_copies = k, the last k inputs c (bf16, the parameter's shape, each in its own layout) get
// c = bf16(p) of the updated p.
#include "graph/ops/rules.hpp"

namespace joule::rules {

namespace {
void require_like_param(const Descs& in) {
    for (size_t i = 1; i < in.size(); ++i)
        require(in[i].shape == in[0].shape, "input " + std::to_string(i) + " " + shape_str(in[i].shape) + " differs from parameter " + shape_str(in[0].shape));
}
// The parameter's bf16 copies, where the update keeps some (the last `copies` inputs; their shape:
// require_like_param).
void require_low_copies(int copies, size_t state, const Descs& in) {
    require(copies >= 0, "the number of the parameter's bf16 copies must be >= 0, got " + std::to_string(copies));
    require(in.size() == state + size_t(copies),
            "the update takes " + std::to_string(state) + " inputs, then the parameter's " + std::to_string(copies) + " bf16 copies; got " +
                std::to_string(in.size()) + " inputs");
    for (size_t i = state; i < in.size(); ++i)
        require(in[i].dtype == DType::BF16, "input " + std::to_string(i) + ", a copy of the parameter, must be bf16, not " + dtype_name(in[i].dtype));
}
}  // namespace

Descs shape_SgdUpdate(const Node& n, const Descs& in) {
    const auto& a = attrs_as<SgdAttrs>(n);
    require(a.lr > 0, "learning rate must be > 0");
    const size_t state = a.momentum != 0.0f ? 3u : 2u;
    require(in.size() >= state, "momentum needs inputs (param, grad, velocity), plain SGD (param, grad); then the parameter's bf16 copies, where the update keeps some");
    require_like_param(in);
    require_low_copies(a.low_copies, state, in);
    return {};
}
double flops_SgdUpdate(const Node&, const Descs& in, const Descs&) { return 4 * numel(in[0]); }

Descs shape_AdamUpdate(const Node& n, const Descs& in) {
    const auto& a = attrs_as<AdamAttrs>(n);
    require(a.lr > 0, "learning rate must be > 0");
    require(in.size() >= 4u, "Adam needs inputs (param, grad, m, v), then the parameter's bf16 copies where the update keeps some");
    require_like_param(in);
    require_low_copies(a.low_copies, 4u, in);
    return {};
}
double flops_AdamUpdate(const Node&, const Descs& in, const Descs&) { return 12 * numel(in[0]); }

}  // namespace joule::rules
