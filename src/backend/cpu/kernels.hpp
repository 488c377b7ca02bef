// Internal to backend/cpu: memory-descriptor helpers and the kernel factories, one per op family file.
#pragma once

#include <omp.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "graph/bf16.hpp"
#include "graph/error.hpp"

namespace joule::cpu {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

dnnl::memory::dims to_dims(const Shape& s);
// Memory descriptor of a tensor with the given shape and layout (plain row-major or nhwc).
dnnl::memory::desc md_of(const Shape& shape, Layout layout, dt type);
dt dnnl_type(DType t);            // the storage type oneDNN sees for a joule dtype
// A tensor's memory descriptor in its layout (blocked ones over their Blocking::dims) and the given type,
// or its storage dtype.
dnnl::memory::desc md_of(const TensorDesc& d, dt type);
inline dnnl::memory::desc md_of(const TensorDesc& d) { return md_of(d, dnnl_type(d.dtype)); }
// A oneDNN blocked format as a Blocking (over the descriptor's dims), when md_of gives it back exactly:
// dense, no offsets, no extra flags.
std::optional<Blocking> blocking_of(const dnnl::memory::desc& md);
dt compute_type(DType compute);  // f32 or bf16; throws for unsupported ones
std::string key_of(const TensorDesc& d);  // for primitive-cache keys
// The node's fused activation (Node::post_op) as a oneDNN eltwise post-op (empty attributes without one),
// and the primitive-cache key suffix that tells the two apart.
dnnl::primitive_attr post_op_attr(const Node& n);
std::string post_op_key(const Node& n);

// Everything a kernel factory gets.
struct KernelArgs {
    CpuContext& ctx;
    const Graph& g;
    const Node& node;
    NodeId id;
    const std::vector<void*>& in;
    const std::vector<void*>& out;
    const TensorDesc& in_desc(size_t i) const { return g.tensor(node.inputs[i]).desc; }
    const TensorDesc& out_desc(size_t i) const { return g.tensor(node.outputs[i]).desc; }
    dnnl::memory mem(const dnnl::memory::desc& md, void* p) const { return dnnl::memory(md, ctx.engine, p); }
};

// A kernel running a list of (primitive, arguments) steps on the context's stream. The arguments are
// turned into oneDNN's C argument array once, here: the C++ execute() would build one per call.
class PrimitiveKernel : public Kernel {
public:
    explicit PrimitiveKernel(CpuContext& ctx) : ctx_(ctx) {}
    void add(dnnl::primitive p, const std::unordered_map<int, dnnl::memory>& args);
    void run(const RunContext&) override;

protected:
    void run_steps();
    CpuContext& ctx_;
    struct Step {
        dnnl::primitive prim;
        std::vector<dnnl::memory> memories;  // owns what args point to
        std::vector<dnnl_exec_arg_t> args;
    };
    std::vector<Step> steps_;
};

// `user` memory as seen in descriptor `want`: the same memory when the formats agree, else a scratch
// memory filled by a reorder step added to `k` (before the compute step). Used for weights in oneDNN's
// preferred blocked format (a layout change of the same dtype; dtype changes are the plan's Cast nodes).
dnnl::memory reordered_input(PrimitiveKernel& k, CpuContext& ctx, const dnnl::memory& user, const dnnl::memory::desc& want);

// The same descriptor with another element type (plain strided descriptors only: strides are in elements).
dnnl::memory::desc with_type(const dnnl::memory::desc& md, dt type);
// `user` memory at p, which the plan's cast insertion already put in the compute type (checked: a kernel
// never casts behind the plan's back).
dnnl::memory compute_input(const KernelArgs& a, const dnnl::memory::desc& user, void* p, dt type);
// Outputs a primitive writes in a descriptor other than their storage (bf16, or a blocked weight format):
// the primitive writes a scratch memory, and finish() adds the reorder back into storage after it.
class StagedOutputs {
public:
    // Memory for the primitive to write: storage itself when `want` matches `user`, else a scratch.
    dnnl::memory add(const KernelArgs& a, const dnnl::memory::desc& user, void* p, const dnnl::memory::desc& want);
    // An output stored in the compute type (checked, as for compute_input).
    dnnl::memory add(const KernelArgs& a, const dnnl::memory::desc& user, void* p, dt type);
    void finish(PrimitiveKernel& k);  // call after adding the compute step

private:
    std::vector<std::pair<dnnl::memory, dnnl::memory>> pairs_;  // (scratch, storage)
};

// A one-input one-output primitive (eltwise, softmax forward) with casts to and from `type`.
std::unique_ptr<Kernel> src_to_dst_kernel(const KernelArgs& a, const dnnl::primitive& prim, const dnnl::memory::desc& data, dt type);

// Thread t's share [begin, end) of [0, n) split among `threads`: ceil(n / threads) each, the last ones shorter
// or empty. The loops of joule's own split rows so, so a consumer split alike reads the rows its producer wrote.
inline std::pair<int64_t, int64_t> thread_chunk(int64_t n, int64_t t, int64_t threads) {
    const int64_t chunk = (n + threads - 1) / threads, begin = std::min(n, t * chunk);
    return {begin, std::min(n, begin + chunk)};
}

// f(begin, end) over [0, n) in one static chunk per OpenMP thread, or f(0, n) directly when one thread is
// allowed (a small node: CpuBackend::serial). The loops written here go through it because
// `#pragma omp parallel for` starts a team (~1 us) even for one thread.
template <class F>
void parallel_chunks(int64_t n, F&& f) {
    const int nthr = omp_get_max_threads();
    if (nthr == 1 || n < 2) {
        f(int64_t(0), n);
        return;
    }
#pragma omp parallel num_threads(nthr)
    {
        const auto [begin, end] = thread_chunk(n, omp_get_thread_num(), omp_get_num_threads());
        if (begin < end) f(begin, end);
    }
}

// A plain loop compiled twice and picked once at load time: for x86-64-v4 (AVX-512) and for the baseline.
// Good for loops GCC auto-vectorises; GCC 12 scalarises generic vector-extension comparisons inside such a
// clone (see norm.cpp), so hand-vectorised loops use explicit target("arch=x86-64-v4") wrappers instead.
#if defined(__x86_64__)
#define JOULE_X86_64_V4_CLONE __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define JOULE_X86_64_V4_CLONE
#endif

// Element i of f32 or bf16 storage as f32, and an f32 stored into it (bf16.hpp's rounding): the loops of
// joule's own compute in f32 over either storage.
inline float ld(const float* p, int64_t i) { return p[i]; }
inline float ld(const uint16_t* p, int64_t i) { return bf16_to_f32(p[i]); }
inline void st(float* p, int64_t i, float v) { p[i] = v; }
inline void st(uint16_t* p, int64_t i, float v) { p[i] = f32_to_bf16(v); }

// A fused activation (Node::post_op: ReLU, ReLU6 or none) as the bounds the loops of joule's own clamp to:
// act(v) = v below lo clamped to lo, above hi to hi (NaN passes).
struct Clamp {
    float lo, hi;
};
inline Clamp clamp_of(const Node& n) {
    constexpr float inf = std::numeric_limits<float>::infinity();
    if (n.post_op == OpKind::Relu) return {0.0f, inf};
    if (n.post_op == OpKind::Relu6) return {0.0f, 6.0f};
    JOULE_ASSERT(n.post_op == OpKind::Count, "op '" + n.name + "': no fused " + op_name(n.post_op) + " in a loop of joule's own");
    return {-inf, inf};
}

// A kernel written as a plain loop (ops oneDNN has no primitive for).
class FunctionKernel : public Kernel {
public:
    explicit FunctionKernel(std::function<void(const RunContext&)> f) : f_(std::move(f)) {}
    void run(const RunContext& ctx) override { f_(ctx); }

private:
    std::function<void(const RunContext&)> f_;
};

std::unique_ptr<Kernel> make_conv(const KernelArgs& a);
LayoutWishes conv_layout_wishes(const Graph& g, NodeId n);  // CpuBackend::layout_wishes of a convolution node
// A convolution with fewer channels than a vector holds (conv_small.cpp: the forward and backward-weights
// with fewer output channels, the backward-data into fewer input channels): whether a loop of joule's own
// runs node n (in, w, out: its first two inputs and first output), and its kernel, or null where it does not.
bool conv_small_applies(const Node& n, const TensorDesc& in, const TensorDesc& w, const TensorDesc& out);
std::unique_ptr<Kernel> make_conv_small(const KernelArgs& a);
std::unique_ptr<Kernel> make_linear(const KernelArgs& a);
// An output larger than this (the chip's caches) is worth writing with non-temporal stores where a loop of
// joule's own writes it whole: no read for ownership of lines that are all overwritten.
constexpr int64_t kStreamBytes = int64_t(2) << 20;
// y[i] = x[i] rounded to bf16 (graph/bf16.hpp) for i in [begin, end), vectorised; `stream`: with
// non-temporal stores where the CPU has AVX-512 (an output larger than kStreamBytes).
void to_bf16(const float* x, uint16_t* y, int64_t begin, int64_t end, bool stream);
// y[i] = x[i] widened to f32 for i in [begin, end), vectorised.
void from_bf16(const uint16_t* x, float* y, int64_t begin, int64_t end);
// An f32 tensor rounded into a bf16 one, a range of the source at a time (convert.cpp: a Cast, and an
// update's copies of its parameter, written as the update stores each block): the same storage order
// (units of one element), or a convolution weight's f32 master (ABcd16b16a) into a bf16 convolution format
// (units of one 16 x 16 tile, 256 elements; the source's storage order either way). of(): null for other
// pairs of layouts.
class CopyToBf16 {
public:
    static std::optional<CopyToBf16> of(const TensorDesc& from, const TensorDesc& to);
    int64_t unit() const { return unit_; }    // source storage elements per unit
    int64_t units() const { return units_; }  // in the whole source
    // Rounds the source's units [begin, end) into dst; `stream`: with non-temporal stores (a copy that is
    // not read soon: past kStreamBytes, or an update's), where the CPU has AVX-512.
    void run(const float* src, void* dst, int64_t begin, int64_t end, bool stream) const;
    // Zeroes what no source unit writes (a format's out-channel block past the master's padding): once
    // per write of the whole copy, after run().
    void finish(void* dst) const {
        if (finish_) finish_(dst);
    }

private:
    int64_t unit_ = 1, units_ = 0;
    std::function<void(const float*, void*, int64_t, int64_t, bool)> cast_;  // a format change (null: the same order)
    std::function<void(void*)> finish_;
};
// A Linear node (forward, backward-data or -weights) over at most kFewRows rows as loops of joule's own
// (linear_rows.cpp), or null where they do not apply (more rows, a blocked weight, no AVX-512, mixed dtypes).
constexpr int64_t kFewRows = 4;
std::unique_ptr<Kernel> make_linear_rows(const KernelArgs& a);
std::unique_ptr<Kernel> make_matmul(const KernelArgs& a);
std::unique_ptr<Kernel> make_norm(const KernelArgs& a);
std::unique_ptr<Kernel> make_eltwise(const KernelArgs& a);
// The ReLU / ReLU6 (six) backward's loop (eltwise.cpp): dX = dZ f'(Y) over elements [begin, end) of f32 or
// bf16 storage, all three in one dtype; max pooling's backward runs it for its folded activation backward.
void act_backward_range(bool bf16, bool six, const void* dz, const void* y, void* dx, int64_t begin, int64_t end);
std::unique_ptr<Kernel> make_binary(const KernelArgs& a);
std::unique_ptr<Kernel> make_dropout(const KernelArgs& a);
std::unique_ptr<Kernel> make_sum_to(const KernelArgs& a);
// Element strides of `shape` stored in `layout` (row-major, or nhwc for rank 4).
dnnl::memory::dims strides_of(const Shape& shape, Layout layout);
std::unique_ptr<Kernel> make_expand(const KernelArgs& a);
std::unique_ptr<Kernel> make_pool(const KernelArgs& a);
std::unique_ptr<Kernel> make_shape(const KernelArgs& a);
std::unique_ptr<Kernel> make_softmax(const KernelArgs& a);
std::unique_ptr<Kernel> make_embedding(const KernelArgs& a);
std::unique_ptr<Kernel> make_cross_entropy(const KernelArgs& a);
std::unique_ptr<Kernel> make_update(const KernelArgs& a);
std::unique_ptr<Kernel> make_cast(const KernelArgs& a);
std::unique_ptr<Kernel> make_transfer(const KernelArgs& a);

}  // namespace joule::cpu
