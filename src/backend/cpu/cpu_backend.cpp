#include "backend/cpu/cpu_backend.hpp"

#include <omp.h>

#include "backend/collective.hpp"
#include "backend/cpu/cores.hpp"
#include "backend/cpu/kernels.hpp"
#include "graph/cost.hpp"

namespace joule::cpu {

dnnl::memory::dims to_dims(const Shape& s) { return dnnl::memory::dims(s.begin(), s.end()); }

dnnl::memory::desc md_of(const Shape& shape, Layout layout, dt type) {
    static const tag plain[] = {tag::undef, tag::a, tag::ab, tag::abc, tag::abcd, tag::abcde, tag::abcdef};
    if (layout == Layout::ChannelsLast) {
        JOULE_ASSERT(shape.size() == 4, "nhwc needs rank 4");
        return {to_dims(shape), type, tag::acdb};
    }
    if (shape.size() >= 1 && shape.size() <= 6) return {to_dims(shape), type, plain[shape.size()]};
    // higher ranks: row-major strides
    dnnl::memory::dims strides(shape.size());
    int64_t s = 1;
    for (size_t i = shape.size(); i-- > 0;) {
        strides[i] = s;
        s *= shape[i];
    }
    return {to_dims(shape), type, strides};
}

dnnl::memory::desc md_of(const TensorDesc& d, dt type) {
    if (d.layout != Layout::Blocked) return md_of(d.shape, d.layout, type);
    const Blocking& b = d.blocking;
    JOULE_ASSERT(b.dims.size() <= DNNL_MAX_NDIMS && b.inner.size() <= DNNL_MAX_NDIMS, "blocking of rank " + std::to_string(b.dims.size()));
    dnnl_memory_desc_t md{};
    md.ndims = int(b.dims.size());
    md.data_type = static_cast<dnnl_data_type_t>(type);
    md.format_kind = dnnl_blocked;
    const Shape padded = b.padded_dims();
    for (size_t i = 0; i < b.dims.size(); ++i) md.dims[i] = b.dims[i], md.padded_dims[i] = padded[i];
    auto& blk = md.format_desc.blocking;
    blk.inner_nblks = int(b.inner.size());
    std::vector<int64_t> block(b.dims.size(), 1);
    int64_t stride = 1;
    for (size_t k = 0; k < b.inner.size(); ++k) {
        blk.inner_blks[k] = b.inner[k].second, blk.inner_idxs[k] = b.inner[k].first;
        block[size_t(b.inner[k].first)] *= b.inner[k].second;
        stride *= b.inner[k].second;
    }
    for (size_t k = b.order.size(); k-- > 0;) {
        const size_t i = size_t(b.order[k]);
        blk.strides[i] = stride;
        stride *= padded[i] / block[i];
    }
    return dnnl::memory::desc(md);
}

std::optional<Blocking> blocking_of(const dnnl::memory::desc& m) {
    const dnnl_memory_desc_t& md = m.data;
    if (md.format_kind != dnnl_blocked || md.offset0 != 0 || md.extra.flags != 0 || md.ndims < 1) return std::nullopt;
    Blocking b;
    for (int i = 0; i < md.ndims; ++i) {
        if (md.padded_offsets[i] != 0) return std::nullopt;
        b.dims.push_back(md.dims[i]);
        b.order.push_back(i);
    }
    const auto& blk = md.format_desc.blocking;
    for (int k = 0; k < blk.inner_nblks; ++k) b.inner.emplace_back(int(blk.inner_idxs[k]), int64_t(blk.inner_blks[k]));
    // outer dims by decreasing stride; a dim of one outer block has the stride of the dim it sits inside
    // of (oneDNN's convention), so among equal strides the dims of several blocks come first
    std::vector<int64_t> outer(size_t(md.ndims));
    for (int i = 0; i < md.ndims; ++i) outer[size_t(i)] = md.padded_dims[i];
    for (int k = 0; k < blk.inner_nblks; ++k) outer[size_t(blk.inner_idxs[k])] /= blk.inner_blks[k];
    std::stable_sort(b.order.begin(), b.order.end(), [&](int x, int y) {
        return blk.strides[x] != blk.strides[y] ? blk.strides[x] > blk.strides[y] : (outer[size_t(x)] > 1 && outer[size_t(y)] == 1);
    });
    // oneDNN's == ignores the strides of one-element dims, but a primitive given other such strides than its
    // own computed wrong results in a test (depthwise weights): the strides must be the very same
    const dnnl::memory::desc back = md_of(TensorDesc{b.dims, DType::F32, Layout::Blocked, b}, m.data_type());
    if (!(back == m)) return std::nullopt;
    for (int i = 0; i < md.ndims; ++i)
        if (back.data.format_desc.blocking.strides[i] != blk.strides[i]) return std::nullopt;
    return b;
}

dt dnnl_type(DType t) {
    switch (t) {
        case DType::F32: return dt::f32;
        case DType::BF16: return dt::bf16;
        case DType::F16: return dt::f16;
        case DType::I32: return dt::s32;
        case DType::U8: return dt::u8;
    }
    throw InternalError("unknown dtype");
}

dt compute_type(DType compute) {
    switch (compute) {
        case DType::F32: return dt::f32;
        case DType::BF16: return dt::bf16;
        default: throw Error(std::string("the cpu backend cannot compute in ") + dtype_name(compute), "use f32 or bf16");
    }
}

std::string key_of(const TensorDesc& d) { return desc_str(d); }

dnnl::primitive_attr post_op_attr(const Node& n) {
    dnnl::primitive_attr attr;
    if (n.post_op == OpKind::Count) return attr;
    dnnl::post_ops po;
    if (n.post_op == OpKind::Relu) po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    else if (n.post_op == OpKind::Relu6) po.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip_v2, 0.0f, 6.0f);
    else throw InternalError(std::string("no oneDNN post-op for ") + op_name(n.post_op));
    attr.set_post_ops(po);
    return attr;
}
std::string post_op_key(const Node& n) { return n.post_op == OpKind::Count ? "" : std::string("+") + op_name(n.post_op); }

void PrimitiveKernel::add(dnnl::primitive p, const std::unordered_map<int, dnnl::memory>& args) {
    Step s{std::move(p), {}, {}};
    for (const auto& [arg, m] : args) {
        s.memories.push_back(m);
        s.args.push_back({arg, m.get()});
    }
    steps_.push_back(std::move(s));
}

void PrimitiveKernel::run_steps() {
    for (const Step& s : steps_)
        if (const dnnl_status_t st = dnnl_primitive_execute(s.prim.get(), ctx_.stream.get(), int(s.args.size()), s.args.data()); st != dnnl_success)
            throw InternalError("oneDNN failed to execute a prepared primitive (status " + std::to_string(int(st)) + ")");
    if (const dnnl_status_t st = dnnl_stream_wait(ctx_.stream.get()); st != dnnl_success)
        throw InternalError("oneDNN stream wait failed (status " + std::to_string(int(st)) + ")");
}
void PrimitiveKernel::run(const RunContext&) { run_steps(); }

dnnl::memory reordered_input(PrimitiveKernel& k, CpuContext& ctx, const dnnl::memory& user, const dnnl::memory::desc& want) {
    if (user.get_desc() == want) return user;
    JOULE_ASSERT(user.get_desc().data_type() == want.data_type(), "a kernel may re-lay-out an operand but never cast it");
    dnnl::memory m(want, ctx.engine);
    k.add(dnnl::reorder(user, m), {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, m}});
    return m;
}


dnnl::memory::desc with_type(const dnnl::memory::desc& md, dt type) {
    dnnl_memory_desc_t d = md.data;
    JOULE_ASSERT(d.format_kind == dnnl_blocked && d.format_desc.blocking.inner_nblks == 0, "with_type needs a plain strided descriptor");
    d.data_type = static_cast<dnnl_data_type_t>(type);
    return dnnl::memory::desc(d);
}

dnnl::memory compute_input(const KernelArgs& a, const dnnl::memory::desc& user, void* p, dt type) {
    JOULE_ASSERT(user.data_type() == type, "op '" + a.node.name + "': an operand is not stored in the compute dtype (missing Cast)");
    return a.mem(user, p);
}

dnnl::memory StagedOutputs::add(const KernelArgs& a, const dnnl::memory::desc& user, void* p, dt type) {
    JOULE_ASSERT(user.data_type() == type, "op '" + a.node.name + "': an output is not stored in the compute dtype");
    return a.mem(user, p);
}

dnnl::memory StagedOutputs::add(const KernelArgs& a, const dnnl::memory::desc& user, void* p, const dnnl::memory::desc& want) {
    dnnl::memory u = a.mem(user, p);
    if (want == user) return u;
    dnnl::memory scratch(want, a.ctx.engine);
    pairs_.emplace_back(scratch, u);
    return scratch;
}

void StagedOutputs::finish(PrimitiveKernel& k) {
    for (auto& [scratch, u] : pairs_) k.add(dnnl::reorder(scratch, u), {{DNNL_ARG_FROM, scratch}, {DNNL_ARG_TO, u}});
}

std::unique_ptr<Kernel> src_to_dst_kernel(const KernelArgs& a, const dnnl::primitive& prim, const dnnl::memory::desc& data, dt type) {
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    StagedOutputs outs;
    k->add(prim, {{DNNL_ARG_SRC, compute_input(a, data, a.in[0], type)}, {DNNL_ARG_DST, outs.add(a, data, a.out[0], type)}});
    outs.finish(*k);
    return k;
}

CpuBackend::CpuBackend(int threads, std::string device, bool serial_small_nodes)
    : device_(std::move(device)), serial_small_nodes_(serial_small_nodes), ctx_(std::make_unique<CpuContext>()) {
    if (threads < 0) throw Error("thread count must be >= 0, got " + std::to_string(threads));
    threads_ = threads > 0 ? threads : usable_cores();  // the affinity mask, not omp_get_num_procs()
    omp_set_num_threads(threads_);
}

namespace {
// Operands the cpu kernels take in a blocked layout: convolution weights and weight gradients (oneDNN's
// formats), the element-wise optimizer updates, and the reorders (Cast) between layouts.
bool blocked_ok(const Node& n, bool input, size_t i) {
    switch (n.kind) {
        case OpKind::Conv2d: case OpKind::ConvBackwardData: return input && i == 1;
        case OpKind::ConvBackwardWeights: return !input && i == 0;
        case OpKind::SgdUpdate: case OpKind::AdamUpdate: case OpKind::Cast: return true;
        default: return false;
    }
}
}  // namespace

Support CpuBackend::supports(const Graph& g, NodeId id) const {
    const Node& n = g.node(id);
    for (size_t i = 0; i < n.inputs.size() + n.outputs.size(); ++i) {
        const bool input = i < n.inputs.size();
        const TensorId t = input ? n.inputs[i] : n.outputs[i - n.inputs.size()];
        if (g.tensor(t).desc.layout == Layout::Blocked && !blocked_ok(n, input, input ? i : i - n.inputs.size()))
            return {false, std::string(input ? "input" : "output") + " '" + g.tensor(t).name + "' is in a blocked layout, which this op's cpu kernel does not read"};
    }
    if (Support s = f32_bf16_support(g, id, device_, "cpu"); !s.ok || n.kind == OpKind::Transfer || n.kind == OpKind::Cast) return s;
    if (n.compute == DType::BF16) {
        // oneDNN runs bf16 natively with avx512_bf16 and emulates it on plain avx512_core.
        const unsigned need = unsigned(dnnl::cpu_isa::avx512_core);
        if ((unsigned(dnnl::get_effective_cpu_isa()) & need) != need)
            return {false, "this CPU has no avx512_core, which oneDNN's bf16 kernels need"};
    }
    if (n.kind == OpKind::Reshape && !g.tensor(n.inputs[0]).desc.row_major() && !g.tensor(n.outputs[0]).desc.row_major())
        return {false, "a reshape between two nhwc shapes is not supported; reshape through a plain tensor"};
    // bf16 GEMMs may write their first output in f32 directly, some f32 loops theirs in bf16
    return check_host_dtypes(g, id);
}

namespace {
// OpenMP's thread count for oneDNN and the loops (omp_get_max_threads) set to n while in scope.
class ThreadCount {
public:
    explicit ThreadCount(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
    ~ThreadCount() { omp_set_num_threads(saved_); }
    ThreadCount(const ThreadCount&) = delete;
    ThreadCount& operator=(const ThreadCount&) = delete;

private:
    int saved_;
};

// A small node's kernel, run with the one thread its primitives were created for.
class SerialKernel : public Kernel {
public:
    explicit SerialKernel(std::unique_ptr<Kernel> k) : k_(std::move(k)) {}
    void run(const RunContext& ctx) override {
        ThreadCount one(1);
        k_->run(ctx);
    }

private:
    std::unique_ptr<Kernel> k_;
};
}  // namespace

bool CpuBackend::writes_low_copy(const TensorDesc& param, const TensorDesc& copy) { return CopyToBf16::of(param, copy).has_value(); }

LayoutWishes CpuBackend::layout_wishes(const Graph& g, NodeId id) {
    const Node& n = g.node(id);
    if (n.kind == OpKind::Conv2d || n.kind == OpKind::ConvBackwardData || n.kind == OpKind::ConvBackwardWeights) {
        try {
            return conv_layout_wishes(g, id);
        } catch (const dnnl::error&) {  // no primitive (or no such compute dtype) for it: supports() and prepare() say so
        } catch (const Error&) {
        }
    }
    return LayoutWishes::none(n);
}

bool CpuBackend::serial(const Graph& g, NodeId id) {
    const OpKind k = g.node(id).kind;
    if (k == OpKind::AllReduceStart || k == OpKind::AllReduceWait) return false;  // MPI's, not a loop of ours
    return small_node(node_cost(g, id));
}

std::unique_ptr<Kernel> CpuBackend::prepare(const Graph& g, NodeId id, const std::vector<void*>& inputs,
                                            const std::vector<void*>& outputs) {
    if (serial_small_nodes_ && threads_ > 1 && serial(g, id)) {
        ThreadCount one(1);  // its primitives are created for one thread
        return std::make_unique<SerialKernel>(prepare_kernel(g, id, inputs, outputs));
    }
    return prepare_kernel(g, id, inputs, outputs);
}

std::unique_ptr<Kernel> CpuBackend::prepare_kernel(const Graph& g, NodeId id, const std::vector<void*>& inputs,
                                                   const std::vector<void*>& outputs) {
    const Node& n = g.node(id);
    const Support s = supports(g, id);
    if (!s.ok) throw Error("op '" + n.name + "' (" + op_name(n.kind) + "): " + s.reason);
    JOULE_ASSERT(inputs.size() == n.inputs.size() && outputs.size() == n.outputs.size(), "buffer count of " + n.name);
    const KernelArgs a{*ctx_, g, n, id, inputs, outputs};
    try {
        switch (n.kind) {
            case OpKind::Conv2d: case OpKind::ConvBackwardData: case OpKind::ConvBackwardWeights: return make_conv(a);
            case OpKind::Linear: case OpKind::LinearBackwardData: case OpKind::LinearBackwardWeights: return make_linear(a);
            case OpKind::MatMul: return make_matmul(a);
            case OpKind::BatchNorm2d: case OpKind::BatchNormBackward: case OpKind::LayerNorm: case OpKind::LayerNormBackward:
                return make_norm(a);
            case OpKind::Relu: case OpKind::Relu6: case OpKind::Gelu: case OpKind::Sigmoid: case OpKind::Tanh:
            case OpKind::ReluBackward: case OpKind::Relu6Backward: case OpKind::GeluBackward: case OpKind::SigmoidBackward:
            case OpKind::TanhBackward: case OpKind::Sqrt: case OpKind::Pow: case OpKind::SqrtBackward: case OpKind::PowBackward:
            case OpKind::Clip: case OpKind::ClipBackward:
                return make_eltwise(a);
            case OpKind::Add: case OpKind::Mul: case OpKind::Sub: case OpKind::Div: return make_binary(a);
            case OpKind::SumTo: return make_sum_to(a);
            case OpKind::Expand: return make_expand(a);
            case OpKind::Dropout: return make_dropout(a);
            case OpKind::MaxPool2d: case OpKind::AvgPool2d: case OpKind::GlobalAvgPool: case OpKind::MaxPool2dBackward:
            case OpKind::AvgPool2dBackward: case OpKind::GlobalAvgPoolBackward:
                return make_pool(a);
            case OpKind::Concat: case OpKind::Slice: case OpKind::SliceBackward: case OpKind::Reshape: case OpKind::Transpose:
                return make_shape(a);
            case OpKind::Softmax: case OpKind::SoftmaxBackward: return make_softmax(a);
            case OpKind::Embedding: case OpKind::EmbeddingBackward: return make_embedding(a);
            case OpKind::SoftmaxCrossEntropy: case OpKind::SoftmaxCrossEntropyBackward: return make_cross_entropy(a);
            case OpKind::SgdUpdate: case OpKind::AdamUpdate: return make_update(a);
            case OpKind::Cast: return make_cast(a);
            case OpKind::Transfer: return make_transfer(a);
            case OpKind::AllReduceStart: case OpKind::AllReduceWait: return make_allreduce_kernel(g, id, inputs, outputs);
            case OpKind::Count: break;
        }
    } catch (const dnnl::error& e) {
        throw Error("op '" + n.name + "' (" + op_name(n.kind) + "): oneDNN cannot run it: " + e.what());
    }
    throw InternalError("no cpu kernel for " + std::string(op_name(n.kind)));
}

}  // namespace joule::cpu
