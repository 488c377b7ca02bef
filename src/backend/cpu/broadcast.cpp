// SumTo (a oneDNN reduction to the broadcast source's shape, scaled by a post-op; a scaled reorder when
// nothing is summed) and Expand (a broadcasting loop over the output, f32 or bf16 storage, any layout).
#include <type_traits>

#include "backend/cpu/kernels.hpp"
#include "graph/bf16.hpp"

namespace joule::cpu {

namespace {
using namespace dnnl;

template <class T>
void expand_loop(const T* x, T* y, const Shape& out, const memory::dims& ys, const memory::dims& xs, float scale) {
    auto load = [](T v) { if constexpr (std::is_same_v<T, float>) return v; else return bf16_to_f32(v); };
    auto store = [](float v) { if constexpr (std::is_same_v<T, float>) return v; else return f32_to_bf16(v); };
    int64_t n = 1;
    for (int64_t d : out) n *= d;
    const size_t r = out.size();
    parallel_chunks(n, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            int64_t rest = i, yo = 0, xo = 0;
            for (size_t k = r; k-- > 0;) {
                const int64_t c = rest % out[k];
                rest /= out[k];
                yo += c * ys[k], xo += c * xs[k];
            }
            y[yo] = store(scale * load(x[xo]));
        }
    });
}
}  // namespace

std::unique_ptr<Kernel> make_sum_to(const KernelArgs& a) {
    const auto& at = attrs_as<BroadcastAttrs>(a.node);
    const TensorDesc &x = a.in_desc(0), &y = a.out_desc(0);
    const dt type = compute_type(a.node.compute);
    const memory::desc src = md_of(x), dst = md_of(padded_to_rank(y.shape, x.shape.size()), y.shape.size() == x.shape.size() ? y.layout : Layout::Plain, dnnl_type(y.dtype));
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    StagedOutputs outs;
    const std::string key = "sumto" + key_of(x) + key_of(y) + std::to_string(at.scale) + "t" + std::to_string(int(type));
    if (x.shape == y.shape) {  // nothing to sum: a scaled copy (into another layout, perhaps)
        primitive_attr attr;
        attr.set_output_scales(0, {at.scale});
        auto r = a.ctx.cache.get<reorder>(key, [&] { return reorder::primitive_desc(a.ctx.engine, with_type(src, type), a.ctx.engine, with_type(dst, type), attr); });
        k->add(r->prim, {{DNNL_ARG_FROM, compute_input(a, src, a.in[0], type)}, {DNNL_ARG_TO, outs.add(a, dst, a.out[0], type)}});
    } else {
        auto r = a.ctx.cache.get<reduction>(key, [&] {
            primitive_attr attr;
            if (at.scale != 1.0f) {
                post_ops po;
                po.append_eltwise(1.0f, algorithm::eltwise_linear, at.scale, 0.0f);
                attr.set_post_ops(po);
            }
            return reduction::primitive_desc({algorithm::reduction_sum, with_type(src, type), with_type(dst, type), 0.0f, 0.0f}, attr, a.ctx.engine);
        });
        k->add(r->prim, {{DNNL_ARG_SRC, compute_input(a, src, a.in[0], type)}, {DNNL_ARG_DST, outs.add(a, dst, a.out[0], type)}});
    }
    outs.finish(*k);
    return k;
}

std::unique_ptr<Kernel> make_expand(const KernelArgs& a) {
    const auto& at = attrs_as<BroadcastAttrs>(a.node);
    const TensorDesc &x = a.in_desc(0), &y = a.out_desc(0);
    if (x.dtype != y.dtype || (x.dtype != DType::F32 && x.dtype != DType::BF16))
        throw Error("op '" + a.node.name + "' (Expand): f32 or bf16 storage, the same for input and output, got " + desc_str(x) + " and " + desc_str(y));
    memory::dims xs = strides_of(x.shape, x.layout);
    xs.insert(xs.begin(), y.shape.size() - x.shape.size(), 0);  // the axes x lacks
    const Shape xp = padded_to_rank(x.shape, y.shape.size());
    for (size_t k = 0; k < xp.size(); ++k)
        if (xp[k] == 1) xs[k] = 0;  // broadcast: the same element along this axis
    const memory::dims ys = strides_of(y.shape, y.layout);
    const Shape out = y.shape;
    const float scale = at.scale;
    void *in = a.in[0], *o = a.out[0];
    const bool bf16 = x.dtype == DType::BF16;
    return std::make_unique<FunctionKernel>([=](const RunContext&) {
        if (bf16) expand_loop(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(o), out, ys, xs, scale);
        else expand_loop(static_cast<const float*>(in), static_cast<float*>(o), out, ys, xs, scale);
    });
}

}  // namespace joule::cpu
