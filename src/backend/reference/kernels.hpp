// Internal to backend/reference: the operand accessor every loop reads and writes through, the loop
// kernel, and the kernel factories, one per op family file.
//
// Every loop addresses elements by their *logical* row-major index (NCHW order for images); Buf maps it
// to the storage position of the tensor's layout and widens / rounds the storage dtype, so no loop
// knows about nhwc or bf16:
//
//   const Buf& x = op.in[0];
//   for (int64_t i = 0; i < x.numel(); ++i) op.out[0].set(i, std::max(0.0f, x.get(i)));
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "graph/error.hpp"

namespace joule::reference {

// One operand of a kernel: its descriptor (copied from the graph at prepare time) and its buffer.
struct Buf {
    TensorDesc desc;
    void* data = nullptr;
    std::shared_ptr<const std::vector<int64_t>> offsets;  // a blocked layout's storage offsets (Blocking::offsets)

    int64_t numel() const { return desc.numel(); }
    int64_t dim(size_t d) const { return desc.shape.at(d); }
    // Storage position of the element with logical row-major index i.
    int64_t storage(int64_t i) const;
    // The element with logical index i, widened to float (floating-point or index tensors).
    float get(int64_t i) const;
    // Stores v into the element with logical index i, rounded once to the storage dtype.
    void set(int64_t i, double v) const;
    // Integer tensors (indices, labels, arg-max).
    int64_t index(int64_t i) const;
    void set_index(int64_t i, int64_t v) const;
    // Logical index of [n, c, h, w] in a rank-4 tensor.
    int64_t at(int64_t n, int64_t c, int64_t h, int64_t w) const { return ((n * dim(1) + c) * dim(2) + h) * dim(3) + w; }
    // Copies element j of `from` into element i (bit-exact when the dtypes agree; any dtype).
    void copy(int64_t i, const Buf& from, int64_t j) const;
    // Stores every element of `values` (logical order).
    void store_all(const std::vector<double>& values) const;
    void fill(double v) const;
};

// Everything a kernel factory gets, copied out of the graph: the node (kind, attributes, name, compute
// dtype, gradient-of descriptor) and its operands.
struct Op {
    Node node;
    std::vector<Buf> in, out;
    template <class A>
    const A& attrs() const {
        return std::get<A>(node.attrs);
    }
    OpKind kind() const { return node.kind; }
    [[noreturn]] void fail(const std::string& what) const;  // throws Error naming the op
};

// A kernel that is one plain loop.
class LoopKernel : public Kernel {
public:
    explicit LoopKernel(std::function<void(const RunContext&)> f) : f_(std::move(f)) {}
    void run(const RunContext& ctx) override { f_(ctx); }

private:
    std::function<void(const RunContext&)> f_;
};
inline std::unique_ptr<Kernel> loop(std::function<void(const RunContext&)> f) { return std::make_unique<LoopKernel>(std::move(f)); }

// Whether the reference can convert to and from this storage dtype (f16 needs the compiler's _Float16).
bool storage_supported(DType t);

std::unique_ptr<Kernel> make_conv(const Op& op);     // Conv2d, ConvBackwardData, ConvBackwardWeights
std::unique_ptr<Kernel> make_linear(const Op& op);   // Linear, LinearBackwardData, LinearBackwardWeights, MatMul
std::unique_ptr<Kernel> make_norm(const Op& op);     // BatchNorm2d, LayerNorm and their backward
std::unique_ptr<Kernel> make_eltwise(const Op& op);  // activations, Sqrt, Pow and their backward, Add, Mul, Sub, Div, SumTo, Expand, Dropout
std::unique_ptr<Kernel> make_pool(const Op& op);     // max / average / global-average pooling and backward
std::unique_ptr<Kernel> make_shape(const Op& op);    // Concat, Slice, SliceBackward, Reshape, Transpose
std::unique_ptr<Kernel> make_loss(const Op& op);     // Softmax(+Backward), Embedding(+Backward), SoftmaxCrossEntropy(+Backward)
std::unique_ptr<Kernel> make_update(const Op& op);   // SgdUpdate, AdamUpdate
std::unique_ptr<Kernel> make_convert(const Op& op);  // Cast, Transfer
// The kernel of op's kind (ignoring a fused activation).
std::unique_ptr<Kernel> kernel_for(const Op& op, const Graph& g, NodeId id, const std::vector<void*>& inputs, const std::vector<void*>& outputs);
// k, then the node's fused activation (Node::post_op) applied to output 0 in place.
std::unique_ptr<Kernel> with_post_op(std::unique_ptr<Kernel> k, const Op& op);
// The node's folded backward node (Node::pre_op) pre_op(input 0, last input) written to `dz` (held by
// `scratch`), then k, which reads dz as its input 0. A batch-norm backward that recomputes the activation's
// output (NormAttrs::recompute_act) recomputes it from its X, gamma, mean, var and last input, beta.
std::unique_ptr<Kernel> with_pre_op(std::unique_ptr<Kernel> k, const Op& op, const Buf& dz, std::shared_ptr<std::vector<char>> scratch);

}  // namespace joule::reference
