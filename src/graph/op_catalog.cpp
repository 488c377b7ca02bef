// The one op catalogue (see ops.hpp for what adding an op touches).
#include <array>

#include "graph/graph.hpp"
#include "graph/ops/rules.hpp"

namespace joule {

namespace {
using namespace rules;
using C = OpCategory;
using K = OpKind;

constexpr std::array<OpInfo, size_t(OpKind::Count)> kOps = {{
    {K::Conv2d, "Conv2d", 2, 3, C::Conv, shape_Conv2d, flops_Conv2d, grad_Conv2d, 0, 0b100},
    {K::Linear, "Linear", 2, 3, C::FullyConnected, shape_Linear, flops_Linear, grad_Linear, 0, 0b100},
    {K::MatMul, "MatMul", 2, 2, C::FullyConnected, shape_MatMul, flops_MatMul, grad_MatMul},
    {K::BatchNorm2d, "BatchNorm2d", 5, 5, C::Norm, shape_BatchNorm2d, flops_BatchNorm2d, grad_BatchNorm2d, 0b11000, 0b11110, 0b110},
    {K::LayerNorm, "LayerNorm", 3, 3, C::Norm, shape_LayerNorm, flops_LayerNorm, grad_LayerNorm, 0, 0b110, 0b110},
    {K::Relu, "Relu", 1, 1, C::Activation, shape_Eltwise, flops_Eltwise, grad_Eltwise},
    {K::Relu6, "Relu6", 1, 1, C::Activation, shape_Eltwise, flops_Eltwise, grad_Eltwise},
    {K::Gelu, "Gelu", 1, 1, C::Activation, shape_Eltwise, flops_Eltwise, grad_Eltwise},
    {K::Sigmoid, "Sigmoid", 1, 1, C::Activation, shape_Eltwise, flops_Eltwise, grad_Eltwise},
    {K::Tanh, "Tanh", 1, 1, C::Activation, shape_Eltwise, flops_Eltwise, grad_Eltwise},
    {K::MaxPool2d, "MaxPool2d", 1, 1, C::Pooling, shape_MaxPool2d, flops_MaxPool2d, grad_MaxPool2d},
    {K::AvgPool2d, "AvgPool2d", 1, 1, C::Pooling, shape_AvgPool2d, flops_AvgPool2d, grad_AvgPool2d},
    {K::GlobalAvgPool, "GlobalAvgPool", 1, 1, C::Pooling, shape_GlobalAvgPool, flops_GlobalAvgPool, grad_GlobalAvgPool},
    {K::Add, "Add", 2, 2, C::Other, shape_Binary, flops_Binary, grad_Add},
    {K::Mul, "Mul", 2, 2, C::Other, shape_Binary, flops_Binary, grad_Mul},
    {K::Sub, "Sub", 2, 2, C::Other, shape_Binary, flops_Binary, grad_Sub},
    {K::Div, "Div", 2, 2, C::Other, shape_Binary, flops_Binary, grad_Div},
    {K::Sqrt, "Sqrt", 1, 1, C::Other, shape_Eltwise, flops_Eltwise, grad_Eltwise},
    {K::Pow, "Pow", 1, 1, C::Other, shape_Eltwise, flops_Eltwise, grad_Eltwise},
    {K::Clip, "Clip", 1, 1, C::Activation, shape_Eltwise, flops_Eltwise, grad_Eltwise},
    {K::SumTo, "SumTo", 1, 1, C::Other, shape_SumTo, flops_SumTo, grad_SumTo},
    {K::Expand, "Expand", 1, 1, C::Other, shape_Expand, flops_Expand, grad_Expand},
    {K::Concat, "Concat", 1, -1, C::Other, shape_Concat, flops_Concat, grad_Concat},
    {K::Slice, "Slice", 1, 1, C::Other, shape_Slice, flops_Slice, grad_Slice},
    {K::Reshape, "Reshape", 1, 1, C::Other, shape_Reshape, flops_Reshape, grad_Reshape},
    {K::Transpose, "Transpose", 1, 1, C::Other, shape_Transpose, flops_Transpose, grad_Transpose},
    {K::Dropout, "Dropout", 1, 1, C::Other, shape_Dropout, flops_Dropout, grad_Dropout},
    {K::Softmax, "Softmax", 1, 1, C::Activation, shape_Softmax, flops_Softmax, grad_Softmax},
    {K::Embedding, "Embedding", 2, 2, C::Other, shape_Embedding, flops_Embedding, grad_Embedding},
    {K::SoftmaxCrossEntropy, "SoftmaxCrossEntropy", 2, 2, C::Loss, shape_SoftmaxCrossEntropy, flops_SoftmaxCrossEntropy, grad_SoftmaxCrossEntropy},
    {K::ConvBackwardData, "ConvBackwardData", 2, 2, C::Conv, shape_ConvBackwardData, flops_ConvBackwardData, nullptr},
    {K::ConvBackwardWeights, "ConvBackwardWeights", 2, 2, C::Conv, shape_ConvBackwardWeights, flops_ConvBackwardWeights, nullptr, 0, 0, 0b10},
    {K::LinearBackwardData, "LinearBackwardData", 2, 3, C::FullyConnected, shape_LinearBackwardData, flops_LinearBackwardData, nullptr, 0, 0b100},
    {K::LinearBackwardWeights, "LinearBackwardWeights", 2, 2, C::FullyConnected, shape_LinearBackwardWeights, flops_LinearBackwardWeights, nullptr, 0, 0, 0b10},
    {K::BatchNormBackward, "BatchNormBackward", 5, 5, C::Norm, shape_NormBackward, flops_NormBackward, nullptr, 0, 0b11100, 0b110},
    {K::LayerNormBackward, "LayerNormBackward", 5, 5, C::Norm, shape_NormBackward, flops_NormBackward, nullptr, 0, 0b11100, 0b110},
    {K::ReluBackward, "ReluBackward", 2, 2, C::Activation, shape_EltwiseBackward, flops_EltwiseBackward, nullptr},
    {K::Relu6Backward, "Relu6Backward", 2, 2, C::Activation, shape_EltwiseBackward, flops_EltwiseBackward, nullptr},
    {K::GeluBackward, "GeluBackward", 2, 2, C::Activation, shape_EltwiseBackward, flops_EltwiseBackward, nullptr},
    {K::SigmoidBackward, "SigmoidBackward", 2, 2, C::Activation, shape_EltwiseBackward, flops_EltwiseBackward, nullptr},
    {K::TanhBackward, "TanhBackward", 2, 2, C::Activation, shape_EltwiseBackward, flops_EltwiseBackward, nullptr},
    {K::SqrtBackward, "SqrtBackward", 2, 2, C::Other, shape_EltwiseBackward, flops_EltwiseBackward, nullptr},
    {K::PowBackward, "PowBackward", 2, 2, C::Other, shape_EltwiseBackward, flops_EltwiseBackward, nullptr},
    {K::ClipBackward, "ClipBackward", 2, 2, C::Activation, shape_EltwiseBackward, flops_EltwiseBackward, nullptr},
    {K::MaxPool2dBackward, "MaxPool2dBackward", 2, 2, C::Pooling, shape_MaxPool2dBackward, flops_MaxPool2dBackward, nullptr},
    {K::AvgPool2dBackward, "AvgPool2dBackward", 1, 1, C::Pooling, shape_PoolBackwardFromGrad, flops_PoolBackwardFromGrad, nullptr},
    {K::GlobalAvgPoolBackward, "GlobalAvgPoolBackward", 1, 1, C::Pooling, shape_PoolBackwardFromGrad, flops_PoolBackwardFromGrad, nullptr},
    {K::SliceBackward, "SliceBackward", 1, 1, C::Other, shape_SliceBackward, flops_SliceBackward, nullptr},
    {K::SoftmaxBackward, "SoftmaxBackward", 2, 2, C::Activation, shape_SoftmaxBackward, flops_SoftmaxBackward, nullptr},
    {K::EmbeddingBackward, "EmbeddingBackward", 2, 2, C::Other, shape_EmbeddingBackward, flops_EmbeddingBackward, nullptr},
    {K::SoftmaxCrossEntropyBackward, "SoftmaxCrossEntropyBackward", 3, 3, C::Loss, shape_SoftmaxCrossEntropyBackward, flops_SoftmaxCrossEntropyBackward, nullptr},
    // the updates' last inputs may be bf16 copies of the parameter (low_copies), written in place: up to 8
    // operands in all, as far as an OperandMask reaches
    {K::SgdUpdate, "SgdUpdate", 2, 8, C::Update, shape_SgdUpdate, flops_SgdUpdate, nullptr, 0b11111101, 0b111},
    {K::AdamUpdate, "AdamUpdate", 4, 8, C::Update, shape_AdamUpdate, flops_AdamUpdate, nullptr, 0b11111101, 0b1111},
    {K::Cast, "Cast", 1, 1, C::Cast, shape_Cast, flops_Cast, grad_Cast},
    {K::Transfer, "Transfer", 1, 1, C::Transfer, shape_Transfer, flops_Transfer, grad_Transfer},
    {K::AllReduceStart, "AllReduceStart", 1, -1, C::Communication, shape_AllReduceStart, flops_AllReduceStart, nullptr},
    {K::AllReduceWait, "AllReduceWait", 1, 1, C::Communication, shape_AllReduceWait, flops_AllReduceWait, nullptr},
}};

constexpr bool table_in_enum_order() {
    for (size_t i = 0; i < kOps.size(); ++i)
        if (size_t(kOps[i].kind) != i) return false;
    return true;
}
static_assert(kOps.size() == size_t(OpKind::Count), "one catalogue row per OpKind");
static_assert(table_in_enum_order(), "catalogue rows must follow OpKind order");
}  // namespace

const OpInfo& op_info(OpKind k) { return kOps.at(size_t(k)); }

bool broadcasts_to(const Shape& from, const Shape& to) {
    if (from.size() > to.size()) return false;
    for (size_t i = 0; i < from.size(); ++i) {
        const int64_t f = from[from.size() - 1 - i], t = to[to.size() - 1 - i];
        if (f != t && f != 1) return false;
    }
    return true;
}

Shape padded_to_rank(const Shape& s, size_t rank) {
    Shape p(rank - s.size(), 1);
    p.insert(p.end(), s.begin(), s.end());
    return p;
}

int64_t broadcast_source_index(const Shape& from, const Shape& to, int64_t i) {
    int64_t j = 0, stride = 1;
    const size_t off = to.size() - from.size();
    for (size_t k = to.size(); k-- > off;) {
        const int64_t c = i % to[k], d = from[k - off];
        i /= to[k];
        if (d != 1) j += c * stride;
        stride *= d;
    }
    return j;
}

std::vector<int64_t> inverse_permutation(const std::vector<int64_t>& perm) {
    std::vector<int64_t> inv(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inv[size_t(perm[i])] = int64_t(i);
    return inv;
}

StridedView matmul_view(const Shape& stored, const std::vector<int64_t>& perm, bool trans) {
    const size_t r = stored.size();
    std::vector<int64_t> row_major(r, 1);
    for (size_t k = r - 1; k-- > 0;) row_major[k] = row_major[k + 1] * stored[k + 1];
    StridedView v{stored, row_major};
    for (size_t i = 0; i < perm.size(); ++i) {
        v.dims[i] = stored[size_t(perm[i])];
        v.strides[i] = row_major[size_t(perm[i])];
    }
    if (trans) {
        std::swap(v.dims[r - 1], v.dims[r - 2]);
        std::swap(v.strides[r - 1], v.strides[r - 2]);
    }
    return v;
}

std::vector<int64_t> batch_offsets(const StridedView& v) {
    std::vector<int64_t> offsets{0};
    for (size_t k = 0; k + 2 < v.dims.size(); ++k) {  // each batch dim multiplies the matrices so far
        std::vector<int64_t> next;
        next.reserve(offsets.size() * size_t(v.dims[k]));
        for (int64_t o : offsets)
            for (int64_t i = 0; i < v.dims[k]; ++i) next.push_back(o + i * v.strides[k]);
        offsets = std::move(next);
    }
    return offsets;
}

MatMulIndex matmul_index(const MatMulAttrs& at, const Shape& a, const Shape& b, const Shape& c) {
    MatMulIndex x{matmul_view(a, at.perm_a, at.trans_a), matmul_view(b, at.perm_b, at.trans_b), matmul_view(c, at.perm_c, false), {}, {}, {}, 0, 0, 0, 0};
    x.ga = batch_offsets(x.va);
    x.gb = batch_offsets(x.vb);
    x.gc = batch_offsets(x.vc);
    const size_t r = x.vc.dims.size();
    x.batch = int64_t(x.gc.size());
    x.M = x.vc.dims[r - 2];
    x.N = x.vc.dims[r - 1];
    x.K = x.va.dims[r - 1];
    return x;
}

uint64_t dropout_stream(const Node& n) {
    uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a of the name
    for (unsigned char c : n.name) h = (h ^ c) * 0x100000001b3ULL;
    return mix64(attrs_as<DropoutAttrs>(n).seed ^ h);
}
bool recomputes_activation(const Node& n) {
    return n.kind == OpKind::BatchNormBackward && n.pre_op != OpKind::Count && attrs_as<NormAttrs>(n).recompute_act;
}
bool f32_input(const Node& n, size_t i) { return has_bit(op_info(n.kind).f32_inputs, i) || (recomputes_activation(n) && i + 1 == n.inputs.size()); }
const char* op_name(OpKind k) { return op_info(k).name; }

const char* category_name(OpCategory c) {
    switch (c) {
        case OpCategory::Conv: return "conv";
        case OpCategory::FullyConnected: return "fc";
        case OpCategory::Norm: return "norm";
        case OpCategory::Activation: return "activation";
        case OpCategory::Pooling: return "pooling";
        case OpCategory::Loss: return "loss";
        case OpCategory::Update: return "update";
        case OpCategory::Cast: return "cast";
        case OpCategory::Transfer: return "transfer";
        case OpCategory::Communication: return "allreduce";
        case OpCategory::Other: return "other";
    }
    return "?";
}

}  // namespace joule
