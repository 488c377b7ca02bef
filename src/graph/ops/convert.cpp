// Plan-implied nodes (inserted by plan/'s passes, never by a network):
//   Cast(X) = X in dtype `to` (bf16: round to nearest even), and in another layout when it reorders;
//             dX = Cast(dY) back to X's dtype.
//   Transfer(X) = X copied from device `from` to `to`; dX = Transfer(dY) from `to` back to `from`.
// Both have no arithmetic: their cost is the bytes they read and write (a link's, for a transfer).
#include "graph/ops/rules.hpp"

namespace joule::rules {

Descs shape_Cast(const Node& n, const Descs& in) {
    const auto& a = attrs_as<CastAttrs>(n);
    require_float(in[0], "input");
    require(is_float(a.to), std::string("cannot cast to ") + dtype_name(a.to));
    TensorDesc out = in[0];
    out.dtype = a.to;
    if (a.reorder) {
        int64_t view = 1;
        for (int64_t d : a.blocking.dims) view *= d;
        require(a.layout != Layout::Blocked || view == in[0].numel(), "a blocked layout over " + shape_str(a.blocking.dims) + " for a tensor of shape " + shape_str(in[0].shape));
        require(a.layout != Layout::ChannelsLast || in[0].rank() == 4, "nhwc for a tensor of rank " + std::to_string(in[0].rank()));
        out.layout = a.layout;
        out.blocking = a.layout == Layout::Blocked ? a.blocking : Blocking{};
    }
    return {out};
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
