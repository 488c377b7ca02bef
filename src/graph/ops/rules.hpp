// Shape, FLOP and gradient rules of every op, one family per file in this folder; the catalogue in
// ../op_catalog.cpp points at them. Internal to graph/.
#pragma once

#include <string>
#include <vector>

#include "graph/autodiff.hpp"
#include "graph/error.hpp"
#include "graph/graph.hpp"

namespace joule::rules {

using Descs = std::vector<TensorDesc>;

inline void require(bool cond, const std::string& msg) {
    if (!cond) throw Error(msg);
}
inline double numel(const TensorDesc& d) { return double(d.numel()); }
// Descriptor of a float tensor with the given shape, f32, plain layout.
inline TensorDesc f32(Shape s, Layout l = Layout::Plain) { return {std::move(s), DType::F32, l}; }
// The gradient-of descriptor a backward op must have been given.
const TensorDesc& grad_target(const Node& n);
void require_float(const TensorDesc& d, const char* what);

#define JOULE_DECLARE_SHAPE_FLOPS(Name)                    \
    Descs shape_##Name(const Node&, const Descs&);        \
    double flops_##Name(const Node&, const Descs&, const Descs&);
#define JOULE_DECLARE_RULES(Name)  \
    JOULE_DECLARE_SHAPE_FLOPS(Name) \
    void grad_##Name(GradBuilder&, const Node&);

// differentiable forward ops
JOULE_DECLARE_RULES(Conv2d)
JOULE_DECLARE_RULES(Linear)
JOULE_DECLARE_RULES(MatMul)
JOULE_DECLARE_RULES(BatchNorm2d)
JOULE_DECLARE_RULES(LayerNorm)
JOULE_DECLARE_RULES(Eltwise)  // Relu, Relu6, Gelu, Sigmoid, Tanh
JOULE_DECLARE_RULES(MaxPool2d)
JOULE_DECLARE_RULES(AvgPool2d)
JOULE_DECLARE_RULES(GlobalAvgPool)
JOULE_DECLARE_SHAPE_FLOPS(Binary)  // Add, Mul, Sub, Div: B broadcast to A
void grad_Add(GradBuilder&, const Node&);
void grad_Mul(GradBuilder&, const Node&);
void grad_Sub(GradBuilder&, const Node&);
void grad_Div(GradBuilder&, const Node&);
JOULE_DECLARE_RULES(SumTo)
JOULE_DECLARE_RULES(Expand)
JOULE_DECLARE_RULES(Concat)
JOULE_DECLARE_RULES(Slice)
JOULE_DECLARE_RULES(Reshape)
JOULE_DECLARE_RULES(Transpose)
JOULE_DECLARE_RULES(Dropout)
JOULE_DECLARE_RULES(Softmax)
JOULE_DECLARE_RULES(Embedding)
JOULE_DECLARE_RULES(SoftmaxCrossEntropy)
JOULE_DECLARE_RULES(Cast)
JOULE_DECLARE_RULES(Transfer)
// backward and update ops
JOULE_DECLARE_SHAPE_FLOPS(ConvBackwardData)
JOULE_DECLARE_SHAPE_FLOPS(ConvBackwardWeights)
JOULE_DECLARE_SHAPE_FLOPS(LinearBackwardData)
JOULE_DECLARE_SHAPE_FLOPS(LinearBackwardWeights)
JOULE_DECLARE_SHAPE_FLOPS(NormBackward)  // BatchNormBackward, LayerNormBackward
JOULE_DECLARE_SHAPE_FLOPS(EltwiseBackward)
JOULE_DECLARE_SHAPE_FLOPS(MaxPool2dBackward)
JOULE_DECLARE_SHAPE_FLOPS(PoolBackwardFromGrad)  // AvgPool2dBackward, GlobalAvgPoolBackward
JOULE_DECLARE_SHAPE_FLOPS(SliceBackward)
JOULE_DECLARE_SHAPE_FLOPS(SoftmaxBackward)
JOULE_DECLARE_SHAPE_FLOPS(EmbeddingBackward)
JOULE_DECLARE_SHAPE_FLOPS(SoftmaxCrossEntropyBackward)
JOULE_DECLARE_SHAPE_FLOPS(SgdUpdate)
JOULE_DECLARE_SHAPE_FLOPS(AdamUpdate)
JOULE_DECLARE_SHAPE_FLOPS(AllReduceStart)
JOULE_DECLARE_SHAPE_FLOPS(AllReduceWait)

#undef JOULE_DECLARE_RULES
#undef JOULE_DECLARE_SHAPE_FLOPS

}  // namespace joule::rules
