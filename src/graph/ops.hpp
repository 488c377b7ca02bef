// The op catalogue: every op kind joule knows, its attributes and its traits.
//
// Each OpKind has exactly one row in the constexpr table in op_catalog.cpp (name, arity, category,
// shape rule, FLOP rule, gradient rule); a static_assert ties the table to OpKind::Count.
// Backward rules are written in IR ops (ConvBackwardData, ReluBackward, ...), so autodiff is a graph
// pass and every backend runs backward with no extra code.
//
// Adding an op touches this short list:
//   1. graph/ops.hpp         the OpKind enumerator (and an attribute struct if it needs one)
//   2. graph/ops/<family>.cpp its shape rule, FLOP rule and gradient rule (declared in ops/rules.hpp)
//   3. graph/op_catalog.cpp  its row in the table
//   4. backend/cpu/<family>.cpp its oneDNN kernel, and the dispatch in backend/cpu/cpu_backend.cpp
//   5. backend/reference/<family>.cpp its naive reference loop (the oracle every backend is tested against)
//   6. tests/test_op_gradients.cpp a finite-difference case; tests/test_backend_ops.cpp a consistency case
// and, when it writes an input in place or keeps operands in f32, the masks in its catalogue row.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "graph/tensor_desc.hpp"

namespace joule {

enum class OpKind : uint16_t {
    // forward
    Conv2d, Linear, MatMul, BatchNorm2d, LayerNorm,
    Relu, Relu6, Gelu, Sigmoid, Tanh,
    MaxPool2d, AvgPool2d, GlobalAvgPool,
    Add, Mul, Sub, Div, Sqrt, Pow, Clip, SumTo, Expand,
    Concat, Slice, Reshape, Transpose, Dropout, Softmax, Embedding,
    SoftmaxCrossEntropy,
    // backward
    ConvBackwardData, ConvBackwardWeights, LinearBackwardData, LinearBackwardWeights,
    BatchNormBackward, LayerNormBackward,
    ReluBackward, Relu6Backward, GeluBackward, SigmoidBackward, TanhBackward, SqrtBackward, PowBackward, ClipBackward,
    MaxPool2dBackward, AvgPool2dBackward, GlobalAvgPoolBackward,
    SliceBackward, SoftmaxBackward, EmbeddingBackward, SoftmaxCrossEntropyBackward,
    // optimizer updates (write their parameter and state inputs in place)
    SgdUpdate, AdamUpdate,
    // plan-implied nodes, inserted by plan/'s passes: a storage-dtype change, a tensor crossing devices
    Cast, Transfer,
    // data-parallel gradient averaging over the job's processes, inserted by plan/'s allreduce pass
    AllReduceStart, AllReduceWait,
    Count
};

// Layer categories for per-layer-type breakdowns (the characterisation study's and CNNLab's tables).
enum class OpCategory : uint8_t { Conv, FullyConnected, Norm, Activation, Pooling, Loss, Update, Cast, Transfer, Communication, Other };
const char* category_name(OpCategory c);

struct NoAttrs {};
struct ConvAttrs {
    int64_t stride[2] = {1, 1};
    int64_t pad[2] = {0, 0};
    int64_t dilation[2] = {1, 1};
    int64_t groups = 1;
    bool bias = false;
};
struct PoolAttrs {
    int64_t kernel[2] = {2, 2};
    int64_t stride[2] = {2, 2};
    int64_t pad[2] = {0, 0};
};
struct LinearAttrs {
    bool bias = true;
};
// C = alpha * op(A) x op(B), op = transpose when the flag is set; leading dims are batch dims.
// perm_a / perm_b / perm_c (empty: none) are transposes folded into the product (plan/'s fold_transposes,
// after autodiff: such a node has no gradient rule): operand X, stored row-major, is read -- and C written --
// through the view whose dim i is the stored tensor's dim perm_x[i] (matmul_view). The last dim stays last.
struct MatMulAttrs {
    bool trans_a = false;
    bool trans_b = false;
    float alpha = 1.0f;
    std::vector<int64_t> perm_a, perm_b, perm_c;
};
// A MatMul operand as the kernels index it: `stored` (row-major) read through perm (empty: the identity),
// then its last two dims swapped where trans; each dim's stride in elements.
struct StridedView {
    Shape dims;
    std::vector<int64_t> strides;
};
StridedView matmul_view(const Shape& stored, const std::vector<int64_t>& perm, bool trans);
// Element offset of each matrix of a view: its batch dims (all but the last two) in row-major order.
std::vector<int64_t> batch_offsets(const StridedView& v);
// A MatMul's element offsets for loops over (g, i, k, j): op(A)[g, i, k] at a(g, i, k), op(B)[g, k, j] at
// b(g, k, j), C[g, i, j] at c(g, i, j), through the folded transposes (the reference's and fpga_emu's kernels).
struct MatMulIndex {
    StridedView va, vb, vc;
    std::vector<int64_t> ga, gb, gc;  // batch_offsets of each
    int64_t batch, M, N, K;
    int64_t a(int64_t g, int64_t i, int64_t k) const { return ga[size_t(g)] + i * row(va) + k * col(va); }
    int64_t b(int64_t g, int64_t k, int64_t j) const { return gb[size_t(g)] + k * row(vb) + j * col(vb); }
    int64_t c(int64_t g, int64_t i, int64_t j) const { return gc[size_t(g)] + i * row(vc) + j * col(vc); }
    static int64_t row(const StridedView& v) { return v.strides[v.strides.size() - 2]; }
    static int64_t col(const StridedView& v) { return v.strides.back(); }
};
MatMulIndex matmul_index(const MatMulAttrs& at, const Shape& a, const Shape& b, const Shape& c);
struct NormAttrs {
    float eps = 1e-5f;
    float momentum = 0.1f;  // running-statistics update factor (BatchNorm)
    // BatchNormBackward with its activation's backward folded in (Node::pre_op), set by plan/'s fuse pass
    // where the forward is a batch norm with that activation fused in, reading the same X, gamma and batch
    // statistics: the node's last input is then the forward's shift beta instead of the activation's output
    // Y, and Y is recomputed as the forward computed it, act(gamma (X - mean) / sqrt(var + eps) + beta) in
    // X's dtype -- a read of Y per pass traded for a multiply-add, and Y no longer kept for the backward.
    bool recompute_act = false;
};
struct AxisAttrs {
    int64_t axis = 1;  // Concat axis, Softmax axis
};
struct SliceAttrs {
    int64_t axis = 0;
    int64_t start = 0;
    int64_t length = 1;
};
struct ReshapeAttrs {
    Shape shape;  // one entry may be -1 (inferred)
    Layout layout = Layout::Plain;
};
struct TransposeAttrs {
    std::vector<int64_t> perm;
};
// The permutation undoing perm (a Transpose's gradient; a folded transpose's view written back).
std::vector<int64_t> inverse_permutation(const std::vector<int64_t>& perm);
// The mask of the element at storage position i at step t is a hash of (seed, the node's name, t, i):
// reproducible, parallel, the same on every backend, and unchanged when passes insert nodes (see
// dropout_stream()).
struct DropoutAttrs {
    float p = 0.5f;
    uint64_t seed = 0;
};
// Pow(X) = X^exponent (a constant exponent); gradient PowBackward(dY, X) = dY * exponent * X^(exponent - 1).
struct PowAttrs {
    float exponent = 2.0f;
};
// Clip(X) = min(max(X, lo), hi); gradient ClipBackward(dY, X) = dY where lo < X < hi, else 0 (PyTorch's
// hardtanh; ReLU6 is Clip(0, 6), kept as its own op for the zoo's nets).
struct ClipAttrs {
    float lo = 0.0f, hi = 6.0f;
};
// SumTo(X) = scale * X summed over the axes where `shape` is 1 and X is not, and over the leading axes
// `shape` lacks: X's numpy-broadcast source (ReduceSum / ReduceMean with kept dims, and the gradient of a
// broadcast operand). Expand(X) = scale * X broadcast to `shape`. Each is the other's gradient.
struct BroadcastAttrs {
    Shape shape;
    float scale = 1.0f;
    Layout layout = Layout::Plain;  // of the output (nhwc only for rank 4)
};
// Whether a tensor of shape `from` broadcasts to `to` (numpy rules, aligned at the last axis).
bool broadcasts_to(const Shape& from, const Shape& to);
// `s` with leading 1s up to `rank`: a broadcast source seen at its target's rank.
Shape padded_to_rank(const Shape& s, size_t rank);
// The row-major index into `from` (a broadcast source of `to`) of the element at row-major index i of `to`.
int64_t broadcast_source_index(const Shape& from, const Shape& to, int64_t i);

// low_copies (both updates): the last inputs, the parameter's bf16 copies (each in its reader's layout),
// which the update rewrites as it updates the parameter (plan/'s fold_casts folds the parameter's Casts into
// its update): is_low_copy_input().
struct SgdAttrs {
    float lr = 0.01f;
    float momentum = 0.0f;
    float weight_decay = 0.0f;
    int low_copies = 0;
};
struct AdamAttrs {
    float lr = 1e-3f;
    float beta1 = 0.9f;
    float beta2 = 0.999f;
    float eps = 1e-8f;
    float weight_decay = 0.0f;
    bool decoupled = false;  // AdamW: p *= 1 - lr wd before the step, and the gradient gets no wd p
    int low_copies = 0;
};

// Cast(X) = X converted to `to` (round to nearest even); gradient: a cast back. With `reorder` (plan/'s
// layout pass) the output is also stored in another layout, `layout` / `blocking`: a reorder, or a cast
// and a reorder in one pass over the tensor.
struct CastAttrs {
    DType to = DType::F32;
    bool reorder = false;
    Layout layout = Layout::Plain;
    Blocking blocking;
};
// Transfer(X) = X copied from device `from` to device `to` (plan device names, "backend[:spec]");
// gradient: a transfer back.
struct TransferAttrs {
    std::string from, to;
};

// AllReduceStart(G1..Gk) = B: the gradients packed, in order, into one f32 bucket B whose sum over the
// job's processes starts (non-blocking: backward goes on while it travels); AllReduceWait(B) = (G1'..Gk'):
// once the sum is complete, each gradient's part of it divided by the number of processes -- their mean,
// the gradient of the global batch's mean loss. The device that runs them picks the engine (the host
// backends: MPI); the graph is the same for any. Not differentiated.
// Gi sits at element bucket_offsets(shapes)[i] of B (64-byte aligned; the gaps are zeros), so the memory
// plan can store each Gi and Gi' inside B itself (PyTorch DDP's gradient_as_bucket_view): backward then
// writes the bucket, the start packs nothing and the wait averages in place.
struct AllReduceAttrs {
    std::vector<Shape> shapes;  // the bucket's gradients, in order
};
// Element offsets of a bucket's gradients, then the bucket's length (k + 1 values).
std::vector<int64_t> bucket_offsets(const std::vector<Shape>& shapes);

using Attrs = std::variant<NoAttrs, ConvAttrs, PoolAttrs, LinearAttrs, MatMulAttrs, NormAttrs, AxisAttrs, SliceAttrs,
                           ReshapeAttrs, TransposeAttrs, DropoutAttrs, SgdAttrs, AdamAttrs, CastAttrs, TransferAttrs, AllReduceAttrs,
                           PowAttrs, ClipAttrs, BroadcastAttrs>;

struct Node;
class GradBuilder;

// Shape rule: output descs from the node and its input descs; throws Error on inconsistency
// (the Graph adds the op's name to the message).
using ShapeRule = std::vector<TensorDesc> (*)(const Node&, const std::vector<TensorDesc>& in);
// FLOP rule: floating-point operations (a multiply-add counts 2) of one execution.
using FlopRule = double (*)(const Node&, const std::vector<TensorDesc>& in, const std::vector<TensorDesc>& out);
// Gradient rule: emits backward IR nodes for a forward node (nullptr for ops that are not differentiated).
using GradRule = void (*)(GradBuilder&, const Node&);

// Bit i of a mask stands for input (or output) i.
using OperandMask = uint8_t;

struct OpInfo {
    OpKind kind;
    const char* name;
    int min_inputs;
    int max_inputs;  // -1: variadic
    OpCategory category;
    ShapeRule shape;
    FlopRule flops;
    GradRule grad;
    // Inputs the op writes in place (optimizer parameter and state, BatchNorm's running statistics).
    // No pass may put a Cast or Transfer in front of them: the write must reach the tensor itself.
    OperandMask inplace = 0;
    // Floating-point inputs / outputs that stay f32 whatever the node's compute dtype (normalisation
    // statistics and scales, biases, optimizer operands). Every other floating-point operand is in the
    // node's compute dtype, unless the Plan stores an output otherwise and the backend supports it.
    OperandMask f32_inputs = 0;
    OperandMask f32_outputs = 0;
};

const OpInfo& op_info(OpKind k);
const char* op_name(OpKind k);
inline bool has_bit(OperandMask m, size_t i) { return i < 8 && (m >> i) & 1u; }
// The loss and optimizer updates compute in f32 by definition (log-sum-exp needs the range; f32 master
// weights and optimizer state), whatever a plan says for their layer; so does the all-reduce of the f32
// gradients the updates read.
inline bool f32_only_op(OpKind k) {
    const OpCategory c = op_info(k).category;
    return c == OpCategory::Loss || c == OpCategory::Update || c == OpCategory::Communication;
}
// A weight gradient's GEMM: mixed-precision plans store its output in f32 (the kernel writes it directly).
inline bool weight_gradient(OpKind k) { return k == OpKind::ConvBackwardWeights || k == OpKind::LinearBackwardWeights; }
// GEMM nodes that, computing in bf16, may store their first output in f32: the accumulator's precision,
// written directly instead of rounded to bf16 and cast back by the f32 op that reads it (weight gradients,
// and the forward / backward-data outputs of a mixed-precision plan whose readers compute in f32).
inline bool gemm_may_write_f32(OpKind k) {
    return weight_gradient(k) || k == OpKind::Conv2d || k == OpKind::ConvBackwardData || k == OpKind::Linear ||
           k == OpKind::LinearBackwardData || k == OpKind::MatMul;
}
// Nodes that, computing in f32, may store their output 0 in bf16, rounded as it is stored (the cpu backend's
// own loops: batch norm and its backward, with or without an activation fused or folded in, GELU and its
// backward, dropout (its output; the mask stays f32), max pooling's and softmax's backward; Add / Mul / Sub /
// Div: a loop of its own for same-shape operands, else oneDNN's binary into f32 scratch and a reorder; the
// reference stores any dtype): plan/'s fuse pass folds a Cast that
// follows one into it, so the f32 tensor is neither written nor read.
inline bool stores_output_low(OpKind kind) {
    switch (kind) {
        case OpKind::BatchNorm2d: case OpKind::BatchNormBackward: case OpKind::Gelu: case OpKind::GeluBackward: case OpKind::Dropout:
        case OpKind::MaxPool2dBackward: case OpKind::SoftmaxBackward: case OpKind::Add: case OpKind::Mul: case OpKind::Sub: case OpKind::Div: return true;
        default: return false;
    }
}
// Nodes that only move or copy elements (and SliceBackward's zeros): exact in every dtype, so a cast
// before one gives the same bits as a cast after it.
inline bool moves_data_only(OpKind k) {
    return k == OpKind::Reshape || k == OpKind::Transpose || k == OpKind::Slice || k == OpKind::SliceBackward || k == OpKind::Concat;
}
// Activations whose backward reads the forward output Y instead of the input X: <Op>Backward(dY, Y).
// True for those forward kinds and for their backward kinds.
inline bool backward_reads_output(OpKind k) {
    return k == OpKind::Relu || k == OpKind::Relu6 || k == OpKind::ReluBackward || k == OpKind::Relu6Backward;
}

// Whether activation `act` may be fused into a node of kind `producer` as the last step of its forward
// (oneDNN's eltwise post-op on convolution, inner product, matmul and binary; batch normalization with
// ReLU or ReLU6: the cpu backend's own loop). Only activations whose backward reads their output qualify
// (ReLU, ReLU6): the pre-activation tensor is then never stored.
inline bool fusable(OpKind producer, OpKind act) {
    if (act != OpKind::Relu && act != OpKind::Relu6) return false;
    switch (producer) {
        case OpKind::Conv2d: case OpKind::Linear: case OpKind::MatMul: case OpKind::Add: case OpKind::BatchNorm2d: return true;
        default: return false;
    }
}
// Whether a backward node of kind `pre` may be folded into the node of kind `consumer` that reads its
// result as input 0 (Node::pre_op), which then computes that input as it reads it instead of reading a
// stored one: an activation's backward (reading the activation's output Y) into batch norm's backward or
// max pooling's (whose arg-max routing commutes with the activation's mask where the pool reads the
// activation: plan/'s fuse pass), and a gradient sum (Add: a residual junction's two gradients) into the
// ReLU / ReLU6 backward reading it.
inline bool fusable_backward(OpKind pre, OpKind consumer) {
    if (pre == OpKind::Add) return consumer == OpKind::ReluBackward || consumer == OpKind::Relu6Backward;
    return (pre == OpKind::ReluBackward || pre == OpKind::Relu6Backward) && (consumer == OpKind::BatchNormBackward || consumer == OpKind::MaxPool2dBackward);
}

struct Node;
// A BatchNormBackward whose folded activation backward recomputes Y from X (NormAttrs::recompute_act).
bool recomputes_activation(const Node& n);
// Whether input i of n stays f32 whatever n computes in: the op's f32 operands (OpInfo::f32_inputs), and
// the beta that a batch-norm backward recomputing Y reads last.
bool f32_input(const Node& n, size_t i);
// Dropout's random stream: a hash of its seed attribute and the node's name (stable across passes).
uint64_t dropout_stream(const Node& n);
// splitmix64, the counter-based hash behind dropout masks.
inline uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
// Dropout keeps element i of a run whose base is mix64(stream + RunContext::run) when
// mix64(base + i) >= dropout_threshold(p), p the drop probability.
inline uint64_t dropout_threshold(float p) { return uint64_t(double(p) * 18446744073709551615.0); }
inline bool dropout_keeps(uint64_t step_base, int64_t i, float p) { return mix64(step_base + uint64_t(i)) >= dropout_threshold(p); }

}  // namespace joule
