// Plan-implied nodes (inserted by plan/'s passes, never by a network):
//   Cast(X) = X in dtype `to` (bf16: round to nearest even); dX = Cast(dY) back to X's dtype.
//   Transfer(X) = X copied from device `from` to `to`; dX = Transfer(dY) from `to` back to `from`.
// Both have no arithmetic: their cost is the bytes they read and write (a link's, for a transfer).
#include "graph/ops/rules.hpp"

namespace joule::rules {

Descs shape_Cast(const Node& n, const Descs& in) {
    const DType to = attrs_as<CastAttrs>(n).to;
    require_float(in[0], "input");
    require(is_float(to), std::string("cannot cast to ") + dtype_name(to));
    return {TensorDesc{in[0].shape, to, in[0].layout}};
}
double flops_Cast(const Node&, const Descs&, const Descs&) { return 0; }
void grad_Cast(GradBuilder& b, const Node& n) {
    const TensorId x = n.inputs[0];
    b.accumulate(x, b.emit(OpKind::Cast, CastAttrs{b.tensor(x).desc.dtype}, {b.dy(0)}, "bwd", x)[0]);
}

Descs shape_Transfer(const Node& n, const Descs& in) {
    const auto& a = attrs_as<TransferAttrs>(n);
    require(!a.from.empty() && !a.to.empty() && a.from != a.to, "a transfer needs two different devices, got '" + a.from + "' -> '" + a.to + "'");
    return {in[0]};
}
double flops_Transfer(const Node&, const Descs&, const Descs&) { return 0; }
void grad_Transfer(GradBuilder& b, const Node& n) {
    const auto& a = attrs_as<TransferAttrs>(n);
    b.accumulate(n.inputs[0], b.emit(OpKind::Transfer, TransferAttrs{a.to, a.from}, {b.dy(0)}, "bwd", n.inputs[0])[0]);
}

}  // namespace joule::rules
