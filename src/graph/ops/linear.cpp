// Linear:  Y[..., n] = b[n] + sum_k X[..., k] W[n, k]
//   dX = LinearBackwardData(dY, W[, G]) = dY W (+ G: a gradient sum folded in, plan/'s fold_grad_sums);  [dW, db] = LinearBackwardWeights(dY, X): dW = dY^T X, db = sum dY.
// MatMul:  C = alpha op(A) op(B) over leading batch dims; its gradients are MatMuls again.
#include "graph/ops/rules.hpp"

namespace joule::rules {

namespace {
// Rows of a [..., K] tensor viewed as a matrix.
int64_t rows(const TensorDesc& d) { return d.numel() / d.shape.back(); }
}  // namespace

Descs shape_Linear(const Node& n, const Descs& in) {
    const auto& a = attrs_as<LinearAttrs>(n);
    require(int(in.size()) == (a.bias ? 3 : 2), a.bias ? "bias=true needs inputs (X, W, b)" : "bias=false needs inputs (X, W)");
    const TensorDesc &x = in[0], &w = in[1];
    require_float(x, "input");
    require(x.rank() >= 2 && x.layout == Layout::Plain, "input must be a plain [..., in_features] tensor, got " + desc_str(x) + " (flatten it first)");
    require(w.rank() == 2, "weight must be [out_features, in_features], got " + shape_str(w.shape));
    require(x.shape.back() == w.shape[1], "input has " + std::to_string(x.shape.back()) + " features but weight " +
                                              shape_str(w.shape) + " expects " + std::to_string(w.shape[1]));
    if (a.bias) require(in[2].shape == Shape{w.shape[0]}, "bias must be [" + std::to_string(w.shape[0]) + "], got " + shape_str(in[2].shape));
    Shape y = x.shape;
    y.back() = w.shape[0];
    return {TensorDesc{y, x.dtype, Layout::Plain}};
}
double flops_Linear(const Node& n, const Descs& in, const Descs& out) {
    return 2 * numel(out[0]) * double(in[1].shape[1]) + (attrs_as<LinearAttrs>(n).bias ? numel(out[0]) : 0);
}
void grad_Linear(GradBuilder& b, const Node& n) {
    const auto& a = attrs_as<LinearAttrs>(n);
    const TensorId x = n.inputs[0], w = n.inputs[1];
    if (b.needs_grad(x)) b.accumulate(x, b.emit(OpKind::LinearBackwardData, a, {b.dy(0), w}, "bwd_data", x)[0]);
    auto g = b.emit(OpKind::LinearBackwardWeights, a, {b.dy(0), x}, "bwd_weights", w);
    b.accumulate(w, g[0]);
    if (a.bias) b.accumulate(n.inputs[2], g[1]);
}

Descs shape_LinearBackwardData(const Node& n, const Descs& in) {
    const TensorDesc& x = grad_target(n);
    require(in[0].shape.back() == in[1].shape[0] && x.shape.back() == in[1].shape[1] && rows(in[0]) == rows(x),
            "output gradient " + shape_str(in[0].shape) + " does not match weight " + shape_str(in[1].shape));
    if (in.size() == 3)
        require(in[2].shape == x.shape && in[2].layout == x.layout,
                "the gradient it adds to must have its output's shape " + shape_str(x.shape) + ", got " + desc_str(in[2]));
    return {x};
}
double flops_LinearBackwardData(const Node&, const Descs& in, const Descs& out) {
    return 2 * numel(in[0]) * double(out[0].shape.back()) + (in.size() == 3 ? numel(out[0]) : 0);
}

Descs shape_LinearBackwardWeights(const Node& n, const Descs& in) {
    const TensorDesc& w = grad_target(n);
    require(in[0].shape.back() == w.shape[0] && in[1].shape.back() == w.shape[1] && rows(in[0]) == rows(in[1]),
            "output gradient " + shape_str(in[0].shape) + " and input " + shape_str(in[1].shape) + " do not match weight " + shape_str(w.shape));
    Descs out = {f32(w.shape)};
    if (attrs_as<LinearAttrs>(n).bias) out.push_back(f32({w.shape[0]}));
    return out;
}
double flops_LinearBackwardWeights(const Node& n, const Descs& in, const Descs&) {
    return 2 * numel(in[0]) * double(in[1].shape.back()) + (attrs_as<LinearAttrs>(n).bias ? numel(in[0]) : 0);
}

namespace {
// A folded transpose (MatMulAttrs::perm_*): none, or a permutation of the operand's dims keeping the last last.
void require_perm(const std::vector<int64_t>& perm, size_t rank, const std::string& what) {
    if (perm.empty()) return;
    std::vector<bool> seen(rank, false);
    bool ok = perm.size() == rank && perm.back() == int64_t(rank) - 1;
    for (const int64_t p : perm) {
        ok = ok && p >= 0 && p < int64_t(rank) && !seen[size_t(p)];
        if (ok) seen[size_t(p)] = true;
    }
    require(ok, what + "'s folded transpose " + shape_str(perm) + " must permute its " + std::to_string(rank) + " dims, the last one last");
}
}  // namespace

Descs shape_MatMul(const Node& n, const Descs& in) {
    const auto& a = attrs_as<MatMulAttrs>(n);
    const TensorDesc &x = in[0], &y = in[1];
    require_float(x, "A");
    require_float(y, "B");
    require(x.rank() >= 2 && x.rank() == y.rank(), "A " + shape_str(x.shape) + " and B " + shape_str(y.shape) + " must have the same rank >= 2");
    require(x.layout == Layout::Plain && y.layout == Layout::Plain, "operands must be plain tensors");
    const size_t r = x.shape.size();
    require_perm(a.perm_a, r, "A");
    require_perm(a.perm_b, r, "B");
    require_perm(a.perm_c, r, "C");
    // the operands as the product reads them (through their folded transposes)
    const Shape xs = matmul_view(x.shape, a.perm_a, false).dims, ys = matmul_view(y.shape, a.perm_b, false).dims;
    for (size_t i = 0; i + 2 < r; ++i)
        require(xs[i] == ys[i], "batch dimensions of A " + shape_str(xs) + " and B " + shape_str(ys) + " differ");
    const int64_t m = a.trans_a ? xs[r - 1] : xs[r - 2];
    const int64_t k = a.trans_a ? xs[r - 2] : xs[r - 1];
    const int64_t k2 = a.trans_b ? ys[r - 1] : ys[r - 2];
    const int64_t nn = a.trans_b ? ys[r - 2] : ys[r - 1];
    require(k == k2, "inner dimensions differ: A " + shape_str(xs) + (a.trans_a ? "^T" : "") + " x B " + shape_str(ys) + (a.trans_b ? "^T" : ""));
    Shape out(xs.begin(), xs.end() - 2);
    out.push_back(m);
    out.push_back(nn);
    Shape stored = out;  // C written through its view: stored dim perm_c[i] is the product's dim i
    for (size_t i = 0; i < a.perm_c.size(); ++i) stored[size_t(a.perm_c[i])] = out[i];
    return {TensorDesc{stored, x.dtype, Layout::Plain}};
}
double flops_MatMul(const Node& n, const Descs& in, const Descs& out) {
    const auto& a = attrs_as<MatMulAttrs>(n);
    const Shape x = matmul_view(in[0].shape, a.perm_a, a.trans_a).dims;
    return 2 * numel(out[0]) * double(x.back());
}
void grad_MatMul(GradBuilder& b, const Node& n) {
    const auto& a = attrs_as<MatMulAttrs>(n);
    if (!a.perm_a.empty() || !a.perm_b.empty() || !a.perm_c.empty())
        throw InternalError("MatMul '" + n.name + "' has folded transposes: a lowered graph's node, past autodiff");
    const TensorId A = n.inputs[0], B = n.inputs[1], dC = b.dy(0);
    const float s = a.alpha;
    // (first, second, trans_first, trans_second) for dA and dB, from C = op(A) op(B).
    if (b.needs_grad(A)) {
        std::vector<TensorId> ins = a.trans_a ? std::vector<TensorId>{B, dC} : std::vector<TensorId>{dC, B};
        MatMulAttrs g = a.trans_a ? MatMulAttrs{a.trans_b, true, s} : MatMulAttrs{false, !a.trans_b, s};
        b.accumulate(A, b.emit(OpKind::MatMul, g, ins, "grad_a", A)[0]);
    }
    if (b.needs_grad(B)) {
        std::vector<TensorId> ins = a.trans_b ? std::vector<TensorId>{dC, A} : std::vector<TensorId>{A, dC};
        MatMulAttrs g = a.trans_b ? MatMulAttrs{true, a.trans_a, s} : MatMulAttrs{!a.trans_a, false, s};
        b.accumulate(B, b.emit(OpKind::MatMul, g, ins, "grad_b", B)[0]);
    }
}

}  // namespace joule::rules
