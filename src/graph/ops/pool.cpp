// MaxPool2d / AvgPool2d (k, stride, padding; average counts padding like PyTorch's default) and
// GlobalAvgPool ([N, C, H, W] -> [N, C, 1, 1]).
// MaxPool2d has two outputs: Y and the arg-max, per output element the index kh * KW + kw of the
// window element that won (the first of equal ones), u8 when the window has at most 255 elements, else
// i32 — an explicit tensor, so forward and backward may run on different devices.
// Backward: dX = MaxPool2dBackward(dY, argmax) routes dY to the arg-max; AvgPool2dBackward(dY) and
// GlobalAvgPoolBackward(dY) spread dY evenly over each window.
#include "graph/ops/rules.hpp"

namespace joule::rules {

namespace {
Shape pool_out_shape(const PoolAttrs& a, const TensorDesc& x) {
    require(x.rank() == 4, "input must be [N, C, H, W], got " + shape_str(x.shape));
    Shape y = x.shape;
    for (int i = 0; i < 2; ++i) {
        require(a.kernel[i] >= 1 && a.stride[i] >= 1 && a.pad[i] >= 0 && a.pad[i] * 2 <= a.kernel[i],
                "kernel and stride must be >= 1 and padding at most half the kernel");
        y[2 + i] = (x.shape[2 + i] + 2 * a.pad[i] - a.kernel[i]) / a.stride[i] + 1;
        require(x.shape[2 + i] + 2 * a.pad[i] >= a.kernel[i], "window " + std::to_string(a.kernel[0]) + "x" + std::to_string(a.kernel[1]) +
                                                                  " does not fit input " + shape_str(x.shape));
    }
    return y;
}
}  // namespace

Descs shape_MaxPool2d(const Node& n, const Descs& in) {
    require_float(in[0], "input");
    const auto& a = attrs_as<PoolAttrs>(n);
    const TensorDesc y{pool_out_shape(a, in[0]), in[0].dtype, in[0].layout};
    return {y, TensorDesc{y.shape, a.kernel[0] * a.kernel[1] <= 255 ? DType::U8 : DType::I32, y.layout}};
}
double flops_MaxPool2d(const Node& n, const Descs&, const Descs& out) {
    const auto& a = attrs_as<PoolAttrs>(n);
    return numel(out[0]) * double(a.kernel[0] * a.kernel[1]);
}
void grad_MaxPool2d(GradBuilder& b, const Node& n) {
    b.accumulate(n.inputs[0], b.emit(OpKind::MaxPool2dBackward, n.attrs, {b.dy(0), n.outputs[1]}, "bwd", n.inputs[0])[0]);
}
Descs shape_MaxPool2dBackward(const Node& n, const Descs& in) {
    const TensorDesc& x = grad_target(n);
    require(pool_out_shape(attrs_as<PoolAttrs>(n), x) == in[0].shape, "output gradient " + shape_str(in[0].shape) + " does not match the pooling");
    require(in[1].shape == in[0].shape && !is_float(in[1].dtype), "arg-max " + desc_str(in[1]) + " must be an index tensor shaped like the output gradient");
    return {TensorDesc{x.shape, in[0].dtype, x.layout}};
}
double flops_MaxPool2dBackward(const Node&, const Descs& in, const Descs& out) { return numel(in[0]) + numel(out[0]); }

Descs shape_AvgPool2d(const Node& n, const Descs& in) { return shape_MaxPool2d(n, in); }
double flops_AvgPool2d(const Node& n, const Descs& in, const Descs& out) { return flops_MaxPool2d(n, in, out); }
void grad_AvgPool2d(GradBuilder& b, const Node& n) {
    b.accumulate(n.inputs[0], b.emit(OpKind::AvgPool2dBackward, n.attrs, {b.dy(0)}, "bwd", n.inputs[0])[0]);
}

Descs shape_GlobalAvgPool(const Node&, const Descs& in) {
    require_float(in[0], "input");
    require(in[0].rank() == 4, "input must be [N, C, H, W], got " + shape_str(in[0].shape));
    return {TensorDesc{{in[0].shape[0], in[0].shape[1], 1, 1}, in[0].dtype, in[0].layout}};
}
double flops_GlobalAvgPool(const Node&, const Descs& in, const Descs&) { return numel(in[0]); }
void grad_GlobalAvgPool(GradBuilder& b, const Node& n) {
    b.accumulate(n.inputs[0], b.emit(OpKind::GlobalAvgPoolBackward, NoAttrs{}, {b.dy(0)}, "bwd", n.inputs[0])[0]);
}

Descs shape_PoolBackwardFromGrad(const Node& n, const Descs& in) {
    const TensorDesc& x = grad_target(n);
    const Shape y = n.kind == OpKind::AvgPool2dBackward ? pool_out_shape(attrs_as<PoolAttrs>(n), x)
                                                        : Shape{x.shape[0], x.shape[1], 1, 1};
    require(y == in[0].shape, "output gradient " + shape_str(in[0].shape) + " does not match the pooling of " + shape_str(x.shape));
    return {x};
}
double flops_PoolBackwardFromGrad(const Node&, const Descs&, const Descs& out) { return numel(out[0]); }

}  // namespace joule::rules
