// The plan's Cast (a oneDNN reorder between two layouts, or a layout and a dtype; a loop of joule's own
// for a dtype change alone) and Transfer (the cpu backend shares host memory with every device that really
// runs here, so a transfer into it is a copy).
#include <cstring>

#include "backend/cpu/kernels.hpp"
#include "graph/bf16.hpp"

namespace joule::cpu {

namespace {
// f32 <-> bf16 over storage elements [begin, end), with graph/bf16.hpp's rounding (oneDNN's: nearest even,
// NaN kept quiet). oneDNN 2.6's reorder runs a dtype-only change of a blocked or nhwc tensor through its
// generic jit:uni kernel at 9-20 GB/s; this loop is a flat pass at memory speed.
JOULE_X86_64_V4_CLONE void to_bf16(const float* __restrict x, uint16_t* __restrict y, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = f32_to_bf16(x[i]);
}
JOULE_X86_64_V4_CLONE void from_bf16(const uint16_t* __restrict x, float* __restrict y, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = bf16_to_f32(x[i]);
}
}  // namespace

std::unique_ptr<Kernel> make_cast(const KernelArgs& a) {
    const TensorDesc &x = a.in_desc(0), &y = a.out_desc(0);
    if (x.layout == y.layout && x.blocking == y.blocking && x.shape == y.shape &&
        ((x.dtype == DType::F32 && y.dtype == DType::BF16) || (x.dtype == DType::BF16 && y.dtype == DType::F32))) {
        // the same storage order: element i of one buffer is element i of the other, padding included
        const int64_t n = x.storage_numel();
        const void* src = a.in[0];
        void* dst = a.out[0];
        if (x.dtype == DType::F32)
            return std::make_unique<FunctionKernel>([=](const RunContext&) {
                parallel_chunks(n, [&](int64_t b, int64_t e) { to_bf16(static_cast<const float*>(src), static_cast<uint16_t*>(dst), b, e); });
            });
        return std::make_unique<FunctionKernel>([=](const RunContext&) {
            parallel_chunks(n, [&](int64_t b, int64_t e) { from_bf16(static_cast<const uint16_t*>(src), static_cast<float*>(dst), b, e); });
        });
    }
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    // a plain side of a reorder to or from a blocked layout is seen over the blocking's dims (a grouped
    // convolution's weights as [g, O/g, I/g, kh, kw]: the same row-major bytes)
    auto md = [](const TensorDesc& d, const TensorDesc& other) {
        if (d.layout != Layout::Plain || other.layout != Layout::Blocked) return md_of(d);
        return md_of(other.blocking.dims, Layout::Plain, dnnl_type(d.dtype));
    };
    dnnl::memory from = a.mem(md(x, y), a.in[0]), to = a.mem(md(y, x), a.out[0]);
    auto e = a.ctx.cache.get<dnnl::reorder>(key_of(x) + ">" + key_of(y),
                                            [&] { return dnnl::reorder::primitive_desc(from, to); });
    k->add(e->prim, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
    return k;
}

std::unique_ptr<Kernel> make_transfer(const KernelArgs& a) {
    const size_t bytes = a.in_desc(0).bytes();
    const void* src = a.in[0];
    void* dst = a.out[0];
    return std::make_unique<FunctionKernel>([=](const RunContext&) { std::memcpy(dst, src, bytes); });
}

}  // namespace joule::cpu
