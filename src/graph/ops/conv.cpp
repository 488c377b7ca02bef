// Conv2d: Y[n,o,h,w] = b[o] + sum_{c,i,j} X[n, g*C/G + c, h*s + i*d - p, w*s + j*d - p] * W[o, c, i, j]
// Gradients: dX = ConvBackwardData(dY, W) (the transposed convolution), [dW, db] = ConvBackwardWeights(dY, X).
#include "graph/ops/rules.hpp"

namespace joule::rules {

namespace {
int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

// Checks X, W (and b) against the attributes; returns the output shape.
Shape conv_out_shape(const ConvAttrs& a, const TensorDesc& x, const TensorDesc& w) {
    require(x.rank() == 4, "input must be [N, C, H, W], got " + shape_str(x.shape));
    require(w.rank() == 4, "weight must be [OC, C/groups, KH, KW], got " + shape_str(w.shape));
    require(a.groups >= 1 && x.shape[1] % a.groups == 0 && w.shape[0] % a.groups == 0,
            "groups=" + std::to_string(a.groups) + " must divide input channels " + std::to_string(x.shape[1]) +
                " and output channels " + std::to_string(w.shape[0]));
    require(w.shape[1] * a.groups == x.shape[1], "input has " + std::to_string(x.shape[1]) + " channels but weight " +
                                                     shape_str(w.shape) + " with groups=" + std::to_string(a.groups) +
                                                     " expects " + std::to_string(w.shape[1] * a.groups));
    for (int i = 0; i < 2; ++i)
        require(a.stride[i] >= 1 && a.dilation[i] >= 1 && a.pad[i] >= 0, "stride and dilation must be >= 1, padding >= 0");
    const int64_t oh = out_dim(x.shape[2], w.shape[2], a.stride[0], a.pad[0], a.dilation[0]);
    const int64_t ow = out_dim(x.shape[3], w.shape[3], a.stride[1], a.pad[1], a.dilation[1]);
    require(oh >= 1 && ow >= 1, "kernel " + std::to_string(w.shape[2]) + "x" + std::to_string(w.shape[3]) +
                                    " does not fit input " + std::to_string(x.shape[2]) + "x" + std::to_string(x.shape[3]) +
                                    " (output would be " + std::to_string(oh) + "x" + std::to_string(ow) + ")");
    return {x.shape[0], w.shape[0], oh, ow};
}

double conv_macs(const TensorDesc& y, const TensorDesc& w) { return numel(y) * double(w.shape[1] * w.shape[2] * w.shape[3]); }
}  // namespace

Descs shape_Conv2d(const Node& n, const Descs& in) {
    const auto& a = attrs_as<ConvAttrs>(n);
    require_float(in[0], "input");
    require(int(in.size()) == (a.bias ? 3 : 2), a.bias ? "bias=true needs inputs (X, W, b)" : "bias=false needs inputs (X, W)");
    Shape y = conv_out_shape(a, in[0], in[1]);
    if (a.bias) require(in[2].shape == Shape{in[1].shape[0]}, "bias must be [" + std::to_string(in[1].shape[0]) + "], got " + shape_str(in[2].shape));
    return {TensorDesc{y, in[0].dtype, in[0].layout}};
}
double flops_Conv2d(const Node& n, const Descs& in, const Descs& out) {
    return 2 * conv_macs(out[0], in[1]) + (attrs_as<ConvAttrs>(n).bias ? numel(out[0]) : 0);
}
void grad_Conv2d(GradBuilder& b, const Node& n) {
    const auto& a = attrs_as<ConvAttrs>(n);
    const TensorId x = n.inputs[0], w = n.inputs[1];
    if (b.needs_grad(x)) b.accumulate(x, b.emit(OpKind::ConvBackwardData, a, {b.dy(0), w}, "bwd_data", x)[0]);
    if (b.needs_grad(w) || (a.bias && b.needs_grad(n.inputs[2]))) {
        auto g = b.emit(OpKind::ConvBackwardWeights, a, {b.dy(0), x}, "bwd_weights", w);
        b.accumulate(w, g[0]);
        if (a.bias) b.accumulate(n.inputs[2], g[1]);
    }
}

Descs shape_ConvBackwardData(const Node& n, const Descs& in) {
    const TensorDesc& x = grad_target(n);
    require(conv_out_shape(attrs_as<ConvAttrs>(n), x, in[1]) == in[0].shape, "output gradient shape " + shape_str(in[0].shape) + " does not match the convolution");
    return {TensorDesc{x.shape, in[0].dtype, x.layout}};
}
double flops_ConvBackwardData(const Node&, const Descs& in, const Descs&) { return 2 * conv_macs(in[0], in[1]); }

Descs shape_ConvBackwardWeights(const Node& n, const Descs& in) {
    const auto& a = attrs_as<ConvAttrs>(n);
    const TensorDesc& w = grad_target(n);
    require(conv_out_shape(a, in[1], w) == in[0].shape, "output gradient shape " + shape_str(in[0].shape) + " does not match the convolution");
    Descs out = {f32(w.shape)};
    if (a.bias) out.push_back(f32({w.shape[0]}));
    return out;
}
double flops_ConvBackwardWeights(const Node& n, const Descs& in, const Descs& out) {
    return 2 * conv_macs(in[0], out[0]) + (attrs_as<ConvAttrs>(n).bias ? numel(in[0]) : 0);
}

const TensorDesc& grad_target(const Node& n) {
    if (!n.grad_of) throw Error("backward op needs the descriptor of the tensor it differentiates (grad_of)");
    return *n.grad_of;
}

void require_float(const TensorDesc& d, const char* what) {
    require(is_float(d.dtype), std::string(what) + " must be a floating-point tensor, got " + desc_str(d));
}

}  // namespace joule::rules
