// BatchNorm2d (training): mu_c, var_c over (N, H, W); Y = gamma_c (X - mu_c) / sqrt(var_c + eps) + beta_c.
//   Inputs (X, gamma, beta, running_mean, running_var); outputs (Y, saved mean, saved variance); the
//   running statistics are updated in place with `momentum`. In inference (RunContext::training false) Y
//   uses the running statistics and the saved mean / variance outputs are left as they were.
// LayerNorm: the same over the last dimension, per row; inputs (X, gamma, beta).
// Backward: [dX, dgamma, dbeta] = {BatchNorm,LayerNorm}Backward(dY, X, gamma, mean, var), the closed form
//   dX = gamma / sigma * (dY - mean(dY) - xhat * mean(dY * xhat)).
#include "graph/ops/rules.hpp"

namespace joule::rules {

Descs shape_BatchNorm2d(const Node&, const Descs& in) {
    const TensorDesc& x = in[0];
    require_float(x, "input");
    require(x.rank() == 4, "input must be [N, C, H, W], got " + shape_str(x.shape));
    const Shape c = {x.shape[1]};
    for (size_t i = 1; i < 5; ++i)
        require(in[i].shape == c, "gamma, beta, running mean and variance must be [" + std::to_string(c[0]) + "], input " +
                                      std::to_string(i) + " is " + shape_str(in[i].shape));
    return {x, f32(c), f32(c)};
}
double flops_BatchNorm2d(const Node&, const Descs& in, const Descs&) { return 6 * numel(in[0]); }
void grad_BatchNorm2d(GradBuilder& b, const Node& n) {
    auto g = b.emit(OpKind::BatchNormBackward, n.attrs, {b.dy(0), n.inputs[0], n.inputs[1], n.outputs[1], n.outputs[2]}, "bwd");
    b.accumulate(n.inputs[0], g[0]);
    b.accumulate(n.inputs[1], g[1]);
    b.accumulate(n.inputs[2], g[2]);
}

Descs shape_LayerNorm(const Node&, const Descs& in) {
    const TensorDesc& x = in[0];
    require_float(x, "input");
    require(x.rank() >= 2 && x.layout == Layout::Plain, "input must be a plain [..., H] tensor, got " + desc_str(x));
    const Shape h = {x.shape.back()};
    require(in[1].shape == h && in[2].shape == h, "gamma and beta must be [" + std::to_string(h[0]) + "]");
    const Shape rows(x.shape.begin(), x.shape.end() - 1);
    return {x, f32(rows), f32(rows)};
}
double flops_LayerNorm(const Node&, const Descs& in, const Descs&) { return 7 * numel(in[0]); }
void grad_LayerNorm(GradBuilder& b, const Node& n) {
    auto g = b.emit(OpKind::LayerNormBackward, n.attrs, {b.dy(0), n.inputs[0], n.inputs[1], n.outputs[1], n.outputs[2]}, "bwd");
    b.accumulate(n.inputs[0], g[0]);
    b.accumulate(n.inputs[1], g[1]);
    b.accumulate(n.inputs[2], g[2]);
}

// (dY, X, gamma, mean, var) -> (dX, dgamma, dbeta)
Descs shape_NormBackward(const Node&, const Descs& in) {
    require(in[0].shape == in[1].shape, "output gradient " + shape_str(in[0].shape) + " and input " + shape_str(in[1].shape) + " differ");
    return {in[1], f32(in[2].shape), f32(in[2].shape)};
}
double flops_NormBackward(const Node&, const Descs& in, const Descs&) { return 10 * numel(in[1]); }

}  // namespace joule::rules
