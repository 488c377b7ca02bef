// Data movement by logical index, so every combination of storage layouts works the same way:
//   Concat / Slice / SliceBackward view a tensor as [outer, axis, inner] (outer = dims before the axis,
//   inner = dims after it); Reshape keeps the logical row-major order; Transpose permutes the indices.
#include "backend/reference/kernels.hpp"

namespace joule::reference {

namespace {
int64_t norm_axis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }
int64_t product(const Shape& s, size_t from, size_t to) {
    int64_t p = 1;
    for (size_t i = from; i < to; ++i) p *= s[i];
    return p;
}

std::unique_ptr<Kernel> concat(const Op& op) {
    const std::vector<Buf> in = op.in;
    const Buf y = op.out[0];
    const size_t axis = size_t(norm_axis(op.attrs<AxisAttrs>().axis, y.desc.rank()));
    const int64_t outer = product(y.desc.shape, 0, axis), inner = product(y.desc.shape, axis + 1, y.desc.shape.size()), total = y.dim(axis);
    return loop([=](const RunContext&) {
        int64_t offset = 0;
        for (const Buf& x : in) {
            const int64_t len = x.dim(axis);
            for (int64_t o = 0; o < outer; ++o)
                for (int64_t a = 0; a < len; ++a)
                    for (int64_t r = 0; r < inner; ++r) y.copy((o * total + offset + a) * inner + r, x, (o * len + a) * inner + r);
            offset += len;
        }
    });
}

// Slice (full -> window) and SliceBackward (window -> zero-filled full).
std::unique_ptr<Kernel> slice(const Op& op, bool forward) {
    const SliceAttrs s = op.attrs<SliceAttrs>();
    const Buf full = forward ? op.in[0] : op.out[0], part = forward ? op.out[0] : op.in[0];
    const size_t axis = size_t(norm_axis(s.axis, full.desc.rank()));
    const int64_t outer = product(full.desc.shape, 0, axis), inner = product(full.desc.shape, axis + 1, full.desc.shape.size());
    const int64_t dim = full.dim(axis);
    return loop([=](const RunContext&) {
        if (!forward) full.fill(0.0);
        for (int64_t o = 0; o < outer; ++o)
            for (int64_t a = 0; a < s.length; ++a)
                for (int64_t r = 0; r < inner; ++r) {
                    const int64_t f = (o * dim + s.start + a) * inner + r, p = (o * s.length + a) * inner + r;
                    if (forward) part.copy(p, full, f);
                    else full.copy(f, part, p);
                }
    });
}

std::unique_ptr<Kernel> transpose(const Op& op) {
    const std::vector<int64_t> perm = op.attrs<TransposeAttrs>().perm;
    const Buf x = op.in[0], y = op.out[0];
    return loop([=](const RunContext&) {
        const size_t r = perm.size();
        std::vector<int64_t> yi(r, 0);  // y's multi-index, advanced in row-major order
        for (int64_t i = 0; i < y.numel(); ++i) {
            int64_t xi = 0;  // x's logical index: x index[perm[k]] = y index[k]
            std::vector<int64_t> xidx(r);
            for (size_t k = 0; k < r; ++k) xidx[size_t(perm[k])] = yi[k];
            for (size_t d = 0; d < r; ++d) xi = xi * x.dim(d) + xidx[d];
            y.copy(i, x, xi);
            for (size_t d = r; d-- > 0;) {
                if (++yi[d] < y.dim(d)) break;
                yi[d] = 0;
            }
        }
    });
}
}  // namespace

std::unique_ptr<Kernel> make_shape(const Op& op) {
    switch (op.kind()) {
        case OpKind::Concat: return concat(op);
        case OpKind::Slice: return slice(op, true);
        case OpKind::SliceBackward: return slice(op, false);
        case OpKind::Reshape: {  // same logical row-major order, whatever the two layouts
            const Buf x = op.in[0], y = op.out[0];
            return loop([=](const RunContext&) {
                for (int64_t i = 0; i < x.numel(); ++i) y.copy(i, x, i);
            });
        }
        case OpKind::Transpose: return transpose(op);
        default: throw InternalError("not a data-movement op");
    }
}

}  // namespace joule::reference
