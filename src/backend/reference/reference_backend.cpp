// The reference backend's operand accessor, supports() and the dispatch to the op-family loops.
#include "backend/reference/reference_backend.hpp"

#include <cstring>

#include "backend/collective.hpp"
#include "backend/reference/kernels.hpp"
#include "graph/bf16.hpp"

namespace joule {

namespace reference {

#if defined(__FLT16_MANT_DIG__)
bool storage_supported(DType) { return true; }
namespace {
float f16_get(const void* p, int64_t s) { return float(static_cast<const _Float16*>(p)[s]); }
void f16_set(void* p, int64_t s, float v) { static_cast<_Float16*>(p)[s] = _Float16(v); }  // round to nearest even
}  // namespace
#else
bool storage_supported(DType t) { return t != DType::F16; }
namespace {
float f16_get(const void*, int64_t) { throw InternalError("f16 storage needs _Float16"); }
void f16_set(void*, int64_t, float) { throw InternalError("f16 storage needs _Float16"); }
}  // namespace
#endif

int64_t Buf::storage(int64_t i) const {
    if (desc.layout == Layout::Plain) return i;
    if (desc.layout == Layout::Blocked) return (*offsets)[size_t(i)];
    // logical [n, c, h, w] stored as [n, h, w, c]
    const int64_t C = dim(1), H = dim(2), W = dim(3);
    const int64_t w = i % W, h = (i / W) % H, c = (i / (W * H)) % C, n = i / (W * H * C);
    return ((n * H + h) * W + w) * C + c;
}

float Buf::get(int64_t i) const {
    const int64_t s = storage(i);
    switch (desc.dtype) {
        case DType::F32: return static_cast<const float*>(data)[s];
        case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(data)[s]);
        case DType::F16: return f16_get(data, s);
        case DType::I32: return float(static_cast<const int32_t*>(data)[s]);
        case DType::U8: return float(static_cast<const uint8_t*>(data)[s]);
    }
    throw InternalError("unknown dtype");
}

void Buf::set(int64_t i, double v) const {
    const int64_t s = storage(i);
    switch (desc.dtype) {
        case DType::F32: static_cast<float*>(data)[s] = float(v); return;
        case DType::BF16: static_cast<uint16_t*>(data)[s] = f32_to_bf16(float(v)); return;
        case DType::F16: f16_set(data, s, float(v)); return;
        default: throw InternalError("set() on an integer tensor");
    }
}

int64_t Buf::index(int64_t i) const {
    const int64_t s = storage(i);
    if (desc.dtype == DType::I32) return static_cast<const int32_t*>(data)[s];
    if (desc.dtype == DType::U8) return static_cast<const uint8_t*>(data)[s];
    throw InternalError("index() on a floating-point tensor");
}

void Buf::set_index(int64_t i, int64_t v) const {
    const int64_t s = storage(i);
    if (desc.dtype == DType::I32) static_cast<int32_t*>(data)[s] = int32_t(v);
    else if (desc.dtype == DType::U8) static_cast<uint8_t*>(data)[s] = uint8_t(v);
    else throw InternalError("set_index() on a floating-point tensor");
}

void Buf::copy(int64_t i, const Buf& from, int64_t j) const {
    if (from.desc.dtype == desc.dtype) {
        const size_t size = dtype_size(desc.dtype);
        std::memcpy(static_cast<char*>(data) + size_t(storage(i)) * size, static_cast<const char*>(from.data) + size_t(from.storage(j)) * size, size);
    } else if (is_float(desc.dtype)) {
        set(i, from.get(j));
    } else {
        set_index(i, from.index(j));
    }
}

void Buf::store_all(const std::vector<double>& values) const {
    JOULE_ASSERT(int64_t(values.size()) == numel(), "store_all: element count");
    for (int64_t i = 0; i < numel(); ++i) set(i, values[size_t(i)]);
}

void Buf::fill(double v) const {
    for (int64_t i = 0; i < numel(); ++i) {
        if (is_float(desc.dtype)) set(i, v);
        else set_index(i, int64_t(v));
    }
}

void Op::fail(const std::string& what) const { throw Error("op '" + node.name + "' (" + op_name(node.kind) + "): " + what); }

}  // namespace reference

Support ReferenceBackend::supports(const Graph& g, NodeId id) const {
    const Node& n = g.node(id);
    for (TensorId t : n.inputs)
        if (!reference::storage_supported(g.tensor(t).desc.dtype)) return {false, "this build of the reference has no f16 storage"};
    for (TensorId t : n.outputs)
        if (!reference::storage_supported(g.tensor(t).desc.dtype)) return {false, "this build of the reference has no f16 storage"};
    if (Support s = f32_bf16_support(g, id, device_, "the reference"); !s.ok || n.kind == OpKind::Transfer || n.kind == OpKind::Cast) return s;
    // bf16 GEMMs may write their first output in f32 directly, some f32 loops theirs in bf16
    return check_host_dtypes(g, id);
}

std::unique_ptr<Kernel> ReferenceBackend::prepare(const Graph& g, NodeId id, const std::vector<void*>& inputs,
                                                  const std::vector<void*>& outputs) {
    using namespace reference;
    const Node& n = g.node(id);
    const Support s = supports(g, id);
    if (!s.ok) throw Error("op '" + n.name + "' (" + op_name(n.kind) + "): " + s.reason);
    if (inputs.size() != n.inputs.size() || outputs.size() != n.outputs.size())
        throw Error("op '" + n.name + "' (" + op_name(n.kind) + "): prepared with " + std::to_string(inputs.size()) + " inputs and " +
                    std::to_string(outputs.size()) + " outputs, the node has " + std::to_string(n.inputs.size()) + " and " +
                    std::to_string(n.outputs.size()));
    Op op{n, {}, {}};
    auto buf = [](const TensorDesc& d, void* p) {  // the reference reads every layout through Buf::storage
        Buf b{d, p};
        if (d.layout == Layout::Blocked) b.offsets = std::make_shared<const std::vector<int64_t>>(d.blocking.offsets());
        return b;
    };
    for (size_t i = 0; i < inputs.size(); ++i) op.in.push_back(buf(g.tensor(n.inputs[i]).desc, inputs[i]));
    for (size_t i = 0; i < outputs.size(); ++i) op.out.push_back(buf(g.tensor(n.outputs[i]).desc, outputs[i]));
    std::unique_ptr<Kernel> k;
    if (n.pre_op != OpKind::Count) {  // the op reads the activation's gradient from scratch storage, without Y
        Op inner = op;
        auto scratch = std::make_shared<std::vector<char>>(op.in[0].desc.bytes());
        inner.in[0].data = scratch->data();
        inner.in.pop_back();
        k = with_pre_op(kernel_for(inner, g, id, inputs, outputs), op, inner.in[0], std::move(scratch));
    } else {
        k = kernel_for(op, g, id, inputs, outputs);
    }
    if (n.post_op != OpKind::Count) k = with_post_op(std::move(k), op);
    std::vector<Buf> padded;  // blocked outputs: the loops write the elements, the padding must hold zeros
    for (const Buf& b : op.out)
        if (b.desc.layout == Layout::Blocked && b.desc.storage_numel() != b.numel()) padded.push_back(b);
    if (padded.empty()) return k;
    return loop([k = std::shared_ptr<Kernel>(std::move(k)), padded](const RunContext& ctx) {
        for (const Buf& b : padded) std::memset(b.data, 0, b.desc.bytes());
        k->run(ctx);
    });
}

namespace reference {
std::unique_ptr<Kernel> kernel_for(const Op& op, const Graph& g, NodeId id, const std::vector<void*>& inputs, const std::vector<void*>& outputs) {
    const Node& n = op.node;
    switch (n.kind) {
        case OpKind::Conv2d: case OpKind::ConvBackwardData: case OpKind::ConvBackwardWeights: return make_conv(op);
        case OpKind::Linear: case OpKind::LinearBackwardData: case OpKind::LinearBackwardWeights: case OpKind::MatMul:
            return make_linear(op);
        case OpKind::BatchNorm2d: case OpKind::BatchNormBackward: case OpKind::LayerNorm: case OpKind::LayerNormBackward:
            return make_norm(op);
        case OpKind::Relu: case OpKind::Relu6: case OpKind::Gelu: case OpKind::Sigmoid: case OpKind::Tanh:
        case OpKind::ReluBackward: case OpKind::Relu6Backward: case OpKind::GeluBackward: case OpKind::SigmoidBackward:
        case OpKind::TanhBackward: case OpKind::Add: case OpKind::Mul: case OpKind::Dropout: case OpKind::Sub: case OpKind::Div:
        case OpKind::Sqrt: case OpKind::Pow: case OpKind::SqrtBackward: case OpKind::PowBackward: case OpKind::SumTo: case OpKind::Expand:
        case OpKind::Clip: case OpKind::ClipBackward:
            return make_eltwise(op);
        case OpKind::MaxPool2d: case OpKind::AvgPool2d: case OpKind::GlobalAvgPool: case OpKind::MaxPool2dBackward:
        case OpKind::AvgPool2dBackward: case OpKind::GlobalAvgPoolBackward:
            return make_pool(op);
        case OpKind::Concat: case OpKind::Slice: case OpKind::SliceBackward: case OpKind::Reshape: case OpKind::Transpose:
            return make_shape(op);
        case OpKind::Softmax: case OpKind::SoftmaxBackward: case OpKind::Embedding: case OpKind::EmbeddingBackward:
        case OpKind::SoftmaxCrossEntropy: case OpKind::SoftmaxCrossEntropyBackward:
            return make_loss(op);
        case OpKind::SgdUpdate: case OpKind::AdamUpdate: return make_update(op);
        case OpKind::Cast: case OpKind::Transfer: return make_convert(op);
        case OpKind::AllReduceStart: case OpKind::AllReduceWait: return make_allreduce_kernel(g, id, inputs, outputs);
        case OpKind::Count: break;
    }
    throw InternalError("no reference kernel for " + std::string(op_name(n.kind)));
}
}  // namespace reference

}  // namespace joule
