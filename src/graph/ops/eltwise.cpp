// Elementwise ops.
//   Relu(x) = max(x, 0)      Relu6(x) = min(max(x, 0), 6)      Gelu(x) = x Phi(x) (erf form)
//   Sigmoid(x) = 1 / (1 + e^-x)   Tanh(x)   Sqrt(x)   Pow(x) = x^c (PowAttrs)   Clip(x) = min(max(x, lo), hi)
//   Backward: dX = <Op>Backward(dY, X) = dY * f'(X); Relu and Relu6 read their output instead,
//   <Op>Backward(dY, Y): y > 0 exactly where x > 0 and 0 < y < 6 where 0 < x < 6, so the gradient is the
//   same everywhere (kinks included), and the input need not outlive the forward op (which lets plan/'s
//   fuse pass fold the activation into its producer).
// Binary ops: B broadcasts to A (numpy rules), Y has A's shape; a broadcast B's gradient is summed back
// to B's shape (SumTo).
// Add(A, B) = A + B: dA = dY, dB = dY.   Mul(A, B) = A * B: dA = dY * B, dB = dY * A.
// Sub(A, B) = A - B: dA = dY, dB = -dY.  Div(A, B) = A / B: dA = dY / B, dB = -(dY / B) * Y.
// SumTo(X) sums to a broadcast source's shape, Expand(X) broadcasts: dX = Expand(dY) / SumTo(dY), same scale.
// Dropout(X) = (Y, mask), Y = X * mask, mask in {0, 1/(1-p)}: dX = dY * mask.
#include "graph/ops/rules.hpp"

namespace joule::rules {

namespace {
OpKind backward_of(OpKind k) {
    switch (k) {
        case OpKind::Relu: return OpKind::ReluBackward;
        case OpKind::Relu6: return OpKind::Relu6Backward;
        case OpKind::Gelu: return OpKind::GeluBackward;
        case OpKind::Sigmoid: return OpKind::SigmoidBackward;
        case OpKind::Tanh: return OpKind::TanhBackward;
        case OpKind::Sqrt: return OpKind::SqrtBackward;
        case OpKind::Pow: return OpKind::PowBackward;
        case OpKind::Clip: return OpKind::ClipBackward;
        default: throw InternalError("not an eltwise op");
    }
}
double cost_per_element(OpKind k) {
    switch (k) {
        case OpKind::Gelu: case OpKind::GeluBackward: case OpKind::Pow: case OpKind::PowBackward: return 10;
        case OpKind::Sqrt: case OpKind::SqrtBackward: return 4;
        case OpKind::Sigmoid: case OpKind::Tanh: case OpKind::SigmoidBackward: case OpKind::TanhBackward: return 4;
        default: return 1;
    }
}
void require_same_shape(const Descs& in) {
    require(in[0].shape == in[1].shape, "operand shapes " + shape_str(in[0].shape) + " and " + shape_str(in[1].shape) + " differ");
}
}  // namespace

Descs shape_Eltwise(const Node&, const Descs& in) {
    require_float(in[0], "input");
    return {in[0]};
}
double flops_Eltwise(const Node& n, const Descs& in, const Descs&) { return cost_per_element(n.kind) * numel(in[0]); }
void grad_Eltwise(GradBuilder& b, const Node& n) {
    const TensorId saved = backward_reads_output(n.kind) ? n.outputs[0] : n.inputs[0];
    b.accumulate(n.inputs[0], b.emit(backward_of(n.kind), n.attrs, {b.dy(0), saved}, "bwd", n.inputs[0])[0]);  // Pow's exponent goes along
}

Descs shape_EltwiseBackward(const Node&, const Descs& in) {
    require_same_shape(in);
    return {in[1]};
}
double flops_EltwiseBackward(const Node& n, const Descs& in, const Descs&) { return (1 + cost_per_element(n.kind)) * numel(in[0]); }

Descs shape_Binary(const Node&, const Descs& in) {
    require_float(in[0], "A");
    require_float(in[1], "B");
    require(broadcasts_to(in[1].shape, in[0].shape), "B " + shape_str(in[1].shape) + " does not broadcast to A " + shape_str(in[0].shape));
    return {in[0]};
}
double flops_Binary(const Node& n, const Descs& in, const Descs&) { return (n.kind == OpKind::Div ? 4 : 1) * numel(in[0]); }

namespace {
// g (shaped like the output) as the gradient of operand t: summed to t's shape where t was broadcast, scaled.
TensorId reduce_to(GradBuilder& b, TensorId g, TensorId t, float scale, const char* suffix) {
    const TensorDesc& d = b.tensor(t).desc;
    if (b.tensor(g).desc.shape == d.shape && scale == 1.0f) return g;
    return b.emit(OpKind::SumTo, BroadcastAttrs{d.shape, scale, d.layout}, {g}, suffix, t)[0];
}
}  // namespace

void grad_Add(GradBuilder& b, const Node& n) {
    b.accumulate(n.inputs[0], b.dy(0));
    if (b.needs_grad(n.inputs[1])) b.accumulate(n.inputs[1], reduce_to(b, b.dy(0), n.inputs[1], 1.0f, "grad_b"));
}
void grad_Sub(GradBuilder& b, const Node& n) {
    b.accumulate(n.inputs[0], b.dy(0));
    if (b.needs_grad(n.inputs[1])) b.accumulate(n.inputs[1], reduce_to(b, b.dy(0), n.inputs[1], -1.0f, "grad_b"));
}
void grad_Mul(GradBuilder& b, const Node& n) {
    const TensorId a = n.inputs[0], c = n.inputs[1];
    if (b.needs_grad(a)) b.accumulate(a, b.emit(OpKind::Mul, NoAttrs{}, {b.dy(0), c}, "grad_a", a)[0]);
    if (b.needs_grad(c)) {
        const TensorId full = b.tensor(a).desc.shape == b.tensor(c).desc.shape ? b.emit(OpKind::Mul, NoAttrs{}, {b.dy(0), a}, "grad_b", c)[0]
                                                                              : b.emit(OpKind::Mul, NoAttrs{}, {b.dy(0), a}, "grad_b_full")[0];
        b.accumulate(c, reduce_to(b, full, c, 1.0f, "grad_b"));
    }
}
void grad_Div(GradBuilder& b, const Node& n) {
    const TensorId a = n.inputs[0], c = n.inputs[1];
    const bool same = b.tensor(a).desc.shape == b.tensor(c).desc.shape;
    const TensorId t = b.emit(OpKind::Div, NoAttrs{}, {b.dy(0), c}, "grad_a", a)[0];  // dY / B
    b.accumulate(a, t);
    if (b.needs_grad(c)) {
        const TensorId full = same ? b.emit(OpKind::Mul, NoAttrs{}, {t, n.outputs[0]}, "grad_b_prod", c)[0] : b.emit(OpKind::Mul, NoAttrs{}, {t, n.outputs[0]}, "grad_b_full")[0];
        b.accumulate(c, reduce_to(b, full, c, -1.0f, "grad_b"));
    }
}

Descs shape_SumTo(const Node& n, const Descs& in) {
    const auto& a = attrs_as<BroadcastAttrs>(n);
    require_float(in[0], "input");
    require(broadcasts_to(a.shape, in[0].shape), "target " + shape_str(a.shape) + " does not broadcast to the input " + shape_str(in[0].shape));
    require(a.layout == Layout::Plain || a.shape.size() == 4, "nhwc layout needs a rank-4 shape, got " + shape_str(a.shape));
    return {TensorDesc{a.shape, in[0].dtype, a.layout}};
}
double flops_SumTo(const Node&, const Descs& in, const Descs&) { return numel(in[0]); }
void grad_SumTo(GradBuilder& b, const Node& n) {
    const TensorDesc& x = b.tensor(n.inputs[0]).desc;
    b.accumulate(n.inputs[0], b.emit(OpKind::Expand, BroadcastAttrs{x.shape, attrs_as<BroadcastAttrs>(n).scale, x.layout}, {b.dy(0)}, "bwd", n.inputs[0])[0]);
}

Descs shape_Expand(const Node& n, const Descs& in) {
    const auto& a = attrs_as<BroadcastAttrs>(n);
    require_float(in[0], "input");
    require(broadcasts_to(in[0].shape, a.shape), "the input " + shape_str(in[0].shape) + " does not broadcast to " + shape_str(a.shape));
    require(a.layout == Layout::Plain || a.shape.size() == 4, "nhwc layout needs a rank-4 shape, got " + shape_str(a.shape));
    return {TensorDesc{a.shape, in[0].dtype, a.layout}};
}
double flops_Expand(const Node&, const Descs&, const Descs& out) { return numel(out[0]); }
void grad_Expand(GradBuilder& b, const Node& n) {
    const TensorDesc& x = b.tensor(n.inputs[0]).desc;
    b.accumulate(n.inputs[0], b.emit(OpKind::SumTo, BroadcastAttrs{x.shape, attrs_as<BroadcastAttrs>(n).scale, x.layout}, {b.dy(0)}, "bwd", n.inputs[0])[0]);
}

Descs shape_Dropout(const Node& n, const Descs& in) {
    const float p = attrs_as<DropoutAttrs>(n).p;
    require(p >= 0.0f && p < 1.0f, "probability must be in [0, 1), got " + std::to_string(p));
    require_float(in[0], "input");
    return {in[0], in[0]};
}
double flops_Dropout(const Node&, const Descs& in, const Descs&) { return 2 * numel(in[0]); }
void grad_Dropout(GradBuilder& b, const Node& n) {
    b.accumulate(n.inputs[0], b.emit(OpKind::Mul, NoAttrs{}, {b.dy(0), n.outputs[1]}, "bwd", n.inputs[0])[0]);
}

}  // namespace joule::rules
