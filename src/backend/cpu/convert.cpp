// The plan's Cast (a oneDNN reorder between two dtypes, two layouts, or both) and Transfer (the cpu backend
// shares host memory with every device that really runs here, so a transfer into it is a copy).
#include <cstring>

#include "backend/cpu/kernels.hpp"

namespace joule::cpu {

std::unique_ptr<Kernel> make_cast(const KernelArgs& a) {
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    const TensorDesc &x = a.in_desc(0), &y = a.out_desc(0);
    // a plain side of a reorder to or from a blocked layout is seen over the blocking's dims (a grouped
    // convolution's weights as [g, O/g, I/g, kh, kw]: the same row-major bytes)
    auto md = [](const TensorDesc& d, const TensorDesc& other) {
        if (d.layout != Layout::Plain || other.layout != Layout::Blocked) return md_of(d);
        return md_of(other.blocking.dims, Layout::Plain, dnnl_type(d.dtype));
    };
    dnnl::memory from = a.mem(md(x, y), a.in[0]), to = a.mem(md(y, x), a.out[0]);
    auto e = a.ctx.cache.get<dnnl::reorder>(key_of(a.in_desc(0)) + ">" + key_of(a.out_desc(0)),
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
