// The plan's Cast (a oneDNN reorder between two dtypes of the same layout) and Transfer (the cpu backend
// shares host memory with every device that really runs here, so a transfer into it is a copy).
#include <cstring>

#include "backend/cpu/kernels.hpp"

namespace joule::cpu {

std::unique_ptr<Kernel> make_cast(const KernelArgs& a) {
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    dnnl::memory from = a.mem(md_of(a.in_desc(0)), a.in[0]), to = a.mem(md_of(a.out_desc(0)), a.out[0]);
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
