// Data-movement ops.
//   Concat(axis) of inputs equal except along `axis`: dX_i = Slice(dY, axis, offset_i, len_i).
//   Slice(axis, start, length): dX = SliceBackward(dY) (zeros outside the window).
//   Reshape(shape, layout): same elements, new shape / storage layout; dX = Reshape(dY) back.
//   Transpose(perm): Y = X permuted; dX = Transpose(dY, perm^-1).
#include <algorithm>
#include <numeric>

#include "graph/ops/rules.hpp"

namespace joule::rules {

namespace {
int64_t norm_axis(int64_t axis, int64_t rank) {
    const int64_t a = axis < 0 ? axis + rank : axis;
    require(a >= 0 && a < rank, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
    return a;
}
}  // namespace

Descs shape_Concat(const Node& n, const Descs& in) {
    const int64_t axis = norm_axis(attrs_as<AxisAttrs>(n).axis, in[0].rank());
    Shape y = in[0].shape;
    y[size_t(axis)] = 0;
    for (size_t i = 0; i < in.size(); ++i) {
        require_float(in[i], "input");
        require(in[i].rank() == in[0].rank(), "input " + std::to_string(i) + " has rank " + std::to_string(in[i].rank()) + ", input 0 has " + std::to_string(in[0].rank()));
        for (size_t d = 0; d < y.size(); ++d)
            require(int64_t(d) == axis || in[i].shape[d] == in[0].shape[d],
                    "input " + std::to_string(i) + " " + shape_str(in[i].shape) + " differs from input 0 " + shape_str(in[0].shape) + " outside axis " + std::to_string(axis));
        y[size_t(axis)] += in[i].shape[size_t(axis)];
    }
    return {TensorDesc{y, in[0].dtype, in[0].layout}};
}
double flops_Concat(const Node&, const Descs&, const Descs&) { return 0; }
void grad_Concat(GradBuilder& b, const Node& n) {
    const int64_t axis = norm_axis(attrs_as<AxisAttrs>(n).axis, b.tensor(n.inputs[0]).desc.rank());
    int64_t offset = 0;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
        const int64_t len = b.tensor(n.inputs[i]).desc.shape[size_t(axis)];
        if (b.needs_grad(n.inputs[i]))
            b.accumulate(n.inputs[i], b.emit(OpKind::Slice, SliceAttrs{axis, offset, len}, {b.dy(0)}, "grad" + std::to_string(i))[0]);
        offset += len;
    }
}

Descs shape_Slice(const Node& n, const Descs& in) {
    const auto& a = attrs_as<SliceAttrs>(n);
    const int64_t axis = norm_axis(a.axis, in[0].rank());
    const int64_t dim = in[0].shape[size_t(axis)];
    require(a.start >= 0 && a.length >= 1 && a.start + a.length <= dim,
            "window [" + std::to_string(a.start) + ", " + std::to_string(a.start + a.length) + ") is outside dimension " + std::to_string(dim));
    Shape y = in[0].shape;
    y[size_t(axis)] = a.length;
    return {TensorDesc{y, in[0].dtype, in[0].layout}};
}
double flops_Slice(const Node&, const Descs&, const Descs&) { return 0; }
void grad_Slice(GradBuilder& b, const Node& n) {
    b.accumulate(n.inputs[0], b.emit(OpKind::SliceBackward, n.attrs, {b.dy(0)}, "bwd", n.inputs[0])[0]);
}
Descs shape_SliceBackward(const Node& n, const Descs& in) {
    const TensorDesc& x = grad_target(n);
    Descs y = shape_Slice(n, {x});
    require(y[0].shape == in[0].shape, "output gradient " + shape_str(in[0].shape) + " does not match the slice of " + shape_str(x.shape));
    return {TensorDesc{x.shape, x.dtype, in[0].layout == x.layout ? x.layout : in[0].layout}};
}
double flops_SliceBackward(const Node&, const Descs&, const Descs&) { return 0; }

Descs shape_Reshape(const Node& n, const Descs& in) {
    const auto& a = attrs_as<ReshapeAttrs>(n);
    Shape y = a.shape;
    int64_t known = 1, infer = -1;
    for (size_t i = 0; i < y.size(); ++i) {
        if (y[i] == -1) {
            require(infer < 0, "at most one dimension may be -1 in " + shape_str(y));
            infer = int64_t(i);
        } else {
            require(y[i] >= 1, "dimensions must be >= 1 or -1, got " + shape_str(y));
            known *= y[i];
        }
    }
    if (infer >= 0) {
        require(in[0].numel() % known == 0, "cannot infer -1 in " + shape_str(y) + " from " + shape_str(in[0].shape));
        y[size_t(infer)] = in[0].numel() / known;
    }
    require(TensorDesc{y}.numel() == in[0].numel(), "cannot reshape " + shape_str(in[0].shape) + " (" + std::to_string(in[0].numel()) +
                                                        " elements) to " + shape_str(y));
    require(a.layout == Layout::Plain || y.size() == 4, "nhwc layout needs a rank-4 shape, got " + shape_str(y));
    return {TensorDesc{y, in[0].dtype, a.layout}};
}
double flops_Reshape(const Node&, const Descs&, const Descs&) { return 0; }
void grad_Reshape(GradBuilder& b, const Node& n) {
    const TensorDesc& x = b.tensor(n.inputs[0]).desc;
    b.accumulate(n.inputs[0], b.emit(OpKind::Reshape, ReshapeAttrs{x.shape, x.layout}, {b.dy(0)}, "bwd")[0]);
}

Descs shape_Transpose(const Node& n, const Descs& in) {
    const auto& perm = attrs_as<TransposeAttrs>(n).perm;
    require(int64_t(perm.size()) == in[0].rank(), "permutation has " + std::to_string(perm.size()) + " entries for a rank-" + std::to_string(in[0].rank()) + " input");
    std::vector<int64_t> sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> iota(perm.size());
    std::iota(iota.begin(), iota.end(), 0);
    require(sorted == iota, "perm is not a permutation of 0.." + std::to_string(perm.size() - 1));
    Shape y;
    for (int64_t p : perm) y.push_back(in[0].shape[size_t(p)]);
    return {TensorDesc{y, in[0].dtype, Layout::Plain}};
}
double flops_Transpose(const Node&, const Descs&, const Descs&) { return 0; }
void grad_Transpose(GradBuilder& b, const Node& n) {
    b.accumulate(n.inputs[0], b.emit(OpKind::Transpose, TransposeAttrs{inverse_permutation(attrs_as<TransposeAttrs>(n).perm)}, {b.dy(0)}, "bwd")[0]);
}

}  // namespace joule::rules
