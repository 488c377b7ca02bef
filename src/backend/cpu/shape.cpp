// Data movement on oneDNN concat and reorder primitives: Concat, Slice / SliceBackward (a reorder
// from / into a sub-memory view), Reshape (a copy, or a reorder where the storage layout changes) and
// Transpose (row copies where the innermost axis stays, else a reorder from a strided view).
#include <array>
#include <cstring>

#include "backend/cpu/kernels.hpp"

namespace joule::cpu {

dnnl::memory::dims strides_of(const Shape& shape, Layout layout) {
    if (layout == Layout::ChannelsLast) {
        const int64_t C = shape[1], H = shape[2], W = shape[3];
        return {H * W * C, 1, W * C, C};
    }
    dnnl::memory::dims s(shape.size());
    int64_t acc = 1;
    for (size_t i = shape.size(); i-- > 0;) {
        s[i] = acc;
        acc *= shape[i];
    }
    return s;
}

namespace {
using namespace dnnl;

// A transpose that keeps the innermost axis (BERT's [b, s, h, d] <-> [b, h, s, d]): one copy per output row
// of d contiguous elements, from where the strided view of the input puts it. oneDNN's reorder runs such a
// view through its generic jit:uni kernel at ~15 GB/s.
constexpr size_t kMaxRowCopyRank = 8;
std::unique_ptr<Kernel> row_copy_kernel(const KernelArgs& a, const memory::dims& view_strides) {
    const TensorDesc& y = a.out_desc(0);
    const size_t esize = dtype_size(y.dtype), rank = y.shape.size();
    const size_t row_bytes = size_t(y.shape.back()) * esize;
    const int64_t rows = y.numel() / y.shape.back();
    const Shape shape = y.shape;
    const auto* src = static_cast<const std::byte*>(a.in[0]);
    auto* dst = static_cast<std::byte*>(a.out[0]);
    return std::make_unique<FunctionKernel>([=](const RunContext&) {
        parallel_chunks(rows, [&](int64_t begin, int64_t end) {
            std::array<int64_t, kMaxRowCopyRank> idx{};  // the output row's index, outer axes
            int64_t r = begin, from = 0;
            for (size_t d = rank - 1; d-- > 0;) {
                idx[d] = r % shape[d], r /= shape[d];
                from += idx[d] * view_strides[d];
            }
            for (int64_t row = begin; row < end; ++row) {
                std::memcpy(dst + size_t(row) * row_bytes, src + size_t(from) * esize, row_bytes);
                for (size_t d = rank - 1; d-- > 0;) {  // next row: odometer over the outer axes
                    from += view_strides[d];
                    if (++idx[d] < shape[d]) break;
                    from -= idx[d] * view_strides[d];
                    idx[d] = 0;
                }
            }
        });
    });
}

std::unique_ptr<Kernel> reorder_kernel(const KernelArgs& a, const memory::desc& from, void* src, const memory::desc& to, void* dst) {
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    memory s = a.mem(from, src), d = a.mem(to, dst);
    k->add(reorder(s, d), {{DNNL_ARG_FROM, s}, {DNNL_ARG_TO, d}});
    return k;
}

// A kernel that zero-fills its output before running its steps.
class ZeroThenRun : public PrimitiveKernel {
public:
    ZeroThenRun(CpuContext& ctx, void* out, size_t bytes) : PrimitiveKernel(ctx), out_(out), bytes_(bytes) {}
    void run(const RunContext&) override {
        std::memset(out_, 0, bytes_);
        run_steps();
    }

private:
    void* out_;
    size_t bytes_;
};

memory::desc window_md(const TensorDesc& full, const SliceAttrs& s) {
    const int64_t axis = s.axis < 0 ? s.axis + full.rank() : s.axis;
    memory::dims dims = to_dims(full.shape), offs(full.shape.size(), 0);
    dims[size_t(axis)] = s.length;
    offs[size_t(axis)] = s.start;
    return md_of(full).submemory_desc(dims, offs);
}
}  // namespace

std::unique_ptr<Kernel> make_shape(const KernelArgs& a) {
    const TensorDesc& y = a.out_desc(0);
    switch (a.node.kind) {
        case OpKind::Concat: {
            std::vector<memory::desc> srcs;
            for (size_t i = 0; i < a.node.inputs.size(); ++i) srcs.push_back(md_of(a.in_desc(i)));
            const int axis = int(attrs_as<AxisAttrs>(a.node).axis < 0 ? attrs_as<AxisAttrs>(a.node).axis + y.rank() : attrs_as<AxisAttrs>(a.node).axis);
            concat::primitive_desc pd(md_of(y), axis, srcs, a.ctx.engine);
            auto k = std::make_unique<PrimitiveKernel>(a.ctx);
            std::unordered_map<int, memory> args = {{DNNL_ARG_DST, a.mem(md_of(y), a.out[0])}};
            for (size_t i = 0; i < srcs.size(); ++i) args[DNNL_ARG_MULTIPLE_SRC + int(i)] = a.mem(srcs[i], a.in[i]);
            k->add(concat(pd), args);
            return k;
        }
        case OpKind::Slice:
            return reorder_kernel(a, window_md(a.in_desc(0), attrs_as<SliceAttrs>(a.node)), a.in[0], md_of(y), a.out[0]);
        case OpKind::SliceBackward: {
            auto k = std::make_unique<ZeroThenRun>(a.ctx, a.out[0], y.bytes());
            memory s = a.mem(md_of(a.in_desc(0)), a.in[0]), d = a.mem(window_md(y, attrs_as<SliceAttrs>(a.node)), a.out[0]);
            k->add(reorder(s, d), {{DNNL_ARG_FROM, s}, {DNNL_ARG_TO, d}});
            return k;
        }
        case OpKind::Reshape: {
            const TensorDesc& x = a.in_desc(0);
            const bool x_plain = x.row_major(), y_plain = y.row_major();
            JOULE_ASSERT(x_plain || y_plain, "supports() refuses a reshape between two nhwc shapes");
            if (x_plain && y_plain) {  // same bytes: nothing to do where the memory plan made y a view of x, else a copy
                const size_t bytes = x.bytes();
                void *src = a.in[0], *dst = a.out[0];
                return std::make_unique<FunctionKernel>([=](const RunContext&) {
                    if (dst != src) std::memcpy(dst, src, bytes);
                });
            }
            if (!x_plain && y_plain) return reorder_kernel(a, md_of(x), a.in[0], md_of(x.shape, Layout::Plain, dnnl_type(x.dtype)), a.out[0]);
            return reorder_kernel(a, md_of(y.shape, Layout::Plain, dnnl_type(y.dtype)), a.in[0], md_of(y), a.out[0]);
        }
        case OpKind::Transpose: {
            const TensorDesc& x = a.in_desc(0);
            const auto& perm = attrs_as<TransposeAttrs>(a.node).perm;
            const memory::dims xs = strides_of(x.shape, x.layout);
            memory::dims view_strides;
            for (int64_t p : perm) view_strides.push_back(xs[size_t(p)]);
            if (y.layout == Layout::Plain && view_strides.back() == 1 && y.shape.size() <= kMaxRowCopyRank) return row_copy_kernel(a, view_strides);
            return reorder_kernel(a, memory::desc(to_dims(y.shape), dnnl_type(x.dtype), view_strides), a.in[0], md_of(y), a.out[0]);
        }
        default: throw InternalError("not a shape op");
    }
}

}  // namespace joule::cpu
