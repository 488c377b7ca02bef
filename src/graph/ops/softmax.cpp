// Softmax(axis): Y = exp(X) / sum exp(X); dX = SoftmaxBackward(dY, Y) = Y * (dY - sum(dY * Y)).
// Embedding: Y[..., :] = table[idx[...], :]; dtable = EmbeddingBackward(dY, idx) (scatter-add).
// SoftmaxCrossEntropy(logits [N, C], labels i32 [N]) -> (loss [1] = mean -log softmax[label], probs);
//   dlogits = SoftmaxCrossEntropyBackward(dloss, probs, labels) = dloss * (probs - onehot) / N.
#include "graph/ops/rules.hpp"

namespace joule::rules {

Descs shape_Softmax(const Node& n, const Descs& in) {
    require_float(in[0], "input");
    const int64_t axis = attrs_as<AxisAttrs>(n).axis;
    require(axis == -1 || axis == in[0].rank() - 1, "only the last axis is supported, got axis " + std::to_string(axis));
    require(in[0].layout == Layout::Plain, "input must be a plain tensor");
    return {in[0]};
}
double flops_Softmax(const Node&, const Descs& in, const Descs&) { return 5 * numel(in[0]); }
void grad_Softmax(GradBuilder& b, const Node& n) {
    b.accumulate(n.inputs[0], b.emit(OpKind::SoftmaxBackward, n.attrs, {b.dy(0), n.outputs[0]}, "bwd", n.inputs[0])[0]);
}
Descs shape_SoftmaxBackward(const Node&, const Descs& in) {
    require(in[0].shape == in[1].shape, "output gradient " + shape_str(in[0].shape) + " and output " + shape_str(in[1].shape) + " differ");
    return {in[1]};
}
double flops_SoftmaxBackward(const Node&, const Descs& in, const Descs&) { return 4 * numel(in[0]); }

Descs shape_Embedding(const Node&, const Descs& in) {
    require(in[0].dtype == DType::I32, "indices must be i32, got " + desc_str(in[0]));
    require(in[1].rank() == 2, "table must be [vocabulary, dim], got " + shape_str(in[1].shape));
    Shape y = in[0].shape;
    y.push_back(in[1].shape[1]);
    return {f32(y)};
}
double flops_Embedding(const Node&, const Descs&, const Descs&) { return 0; }
void grad_Embedding(GradBuilder& b, const Node& n) {
    b.accumulate(n.inputs[1], b.emit(OpKind::EmbeddingBackward, NoAttrs{}, {b.dy(0), n.inputs[0]}, "bwd", n.inputs[1])[0]);
}
Descs shape_EmbeddingBackward(const Node& n, const Descs& in) {
    const TensorDesc& table = grad_target(n);
    Shape want = in[1].shape;
    want.push_back(table.shape[1]);
    require(in[0].shape == want, "output gradient " + shape_str(in[0].shape) + " does not match indices " + shape_str(in[1].shape));
    return {table};
}
double flops_EmbeddingBackward(const Node&, const Descs& in, const Descs&) { return numel(in[0]); }

Descs shape_SoftmaxCrossEntropy(const Node&, const Descs& in) {
    const TensorDesc &logits = in[0], &labels = in[1];
    require_float(logits, "logits");
    require(logits.rank() == 2 && logits.layout == Layout::Plain, "logits must be plain [N, classes], got " + desc_str(logits));
    require(labels.dtype == DType::I32 && labels.shape == Shape{logits.shape[0]},
            "labels must be i32[" + std::to_string(logits.shape[0]) + "], got " + desc_str(labels));
    return {f32({1}), logits};
}
double flops_SoftmaxCrossEntropy(const Node&, const Descs& in, const Descs&) { return 6 * numel(in[0]); }
void grad_SoftmaxCrossEntropy(GradBuilder& b, const Node& n) {
    b.accumulate(n.inputs[0], b.emit(OpKind::SoftmaxCrossEntropyBackward, NoAttrs{}, {b.dy(0), n.outputs[1], n.inputs[1]}, "bwd", n.inputs[0])[0]);
}
Descs shape_SoftmaxCrossEntropyBackward(const Node&, const Descs& in) {
    require(in[0].numel() == 1, "loss gradient must be a scalar");
    return {in[1]};
}
double flops_SoftmaxCrossEntropyBackward(const Node&, const Descs& in, const Descs&) { return 2 * numel(in[1]); }

}  // namespace joule::rules
