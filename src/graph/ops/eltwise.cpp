// Elementwise ops.
//   Relu(x) = max(x, 0)      Relu6(x) = min(max(x, 0), 6)      Gelu(x) = x Phi(x) (erf form)
//   Sigmoid(x) = 1 / (1 + e^-x)   Tanh(x)
//   Backward: dX = <Op>Backward(dY, X) = dY * f'(X).
// Add(A, B) = A + B: dA = dB = dY.   Mul(A, B) = A * B: dA = dY * B, dB = dY * A.
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
        default: throw InternalError("not an eltwise op");
    }
}
double cost_per_element(OpKind k) {
    switch (k) {
        case OpKind::Gelu: case OpKind::GeluBackward: return 10;
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
    b.accumulate(n.inputs[0], b.emit(backward_of(n.kind), NoAttrs{}, {b.dy(0), n.inputs[0]}, "bwd", n.inputs[0])[0]);
}

Descs shape_EltwiseBackward(const Node&, const Descs& in) {
    require_same_shape(in);
    return {in[1]};
}
double flops_EltwiseBackward(const Node& n, const Descs& in, const Descs&) { return (1 + cost_per_element(n.kind)) * numel(in[0]); }

Descs shape_Add(const Node&, const Descs& in) {
    require_float(in[0], "A");
    require_same_shape(in);
    return {in[0]};
}
double flops_Add(const Node&, const Descs& in, const Descs&) { return numel(in[0]); }
void grad_Add(GradBuilder& b, const Node& n) {
    b.accumulate(n.inputs[0], b.dy(0));
    b.accumulate(n.inputs[1], b.dy(0));
}

Descs shape_Mul(const Node&, const Descs& in) {
    require_float(in[0], "A");
    require_same_shape(in);
    return {in[0]};
}
double flops_Mul(const Node&, const Descs& in, const Descs&) { return numel(in[0]); }
void grad_Mul(GradBuilder& b, const Node& n) {
    const TensorId a = n.inputs[0], c = n.inputs[1];
    if (b.needs_grad(a)) b.accumulate(a, b.emit(OpKind::Mul, NoAttrs{}, {b.dy(0), c}, "grad_a", a)[0]);
    if (b.needs_grad(c)) b.accumulate(c, b.emit(OpKind::Mul, NoAttrs{}, {b.dy(0), a}, "grad_b", c)[0]);
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
