// Conv2d, ConvBackwardData and ConvBackwardWeights as one loop over the convolution's taps:
//   Y[n, o, oh, ow] += X[n, g*Cg + c, oh*s - p + kh*d, ow*s - p + kw*d] * W[o, c, kh, kw]   (g = o / Og)
// forward accumulates into Y, backward-data the same product's dY * W into dX, backward-weights
// dY * X into dW. Accumulation in double, one rounding on store.
#include "backend/reference/kernels.hpp"

namespace joule::reference {

namespace {
struct ConvGeometry {
    int64_t N, H, W;        // input
    int64_t O, Cg, KH, KW;  // weights [O, Cg, KH, KW]
    int64_t OH, OW;         // output
    int64_t Og;             // output channels per group
    ConvAttrs a;
};

ConvGeometry geometry(const ConvAttrs& a, const TensorDesc& x, const TensorDesc& w, const TensorDesc& y) {
    return {x.shape[0], x.shape[2], x.shape[3], w.shape[0], w.shape[1], w.shape[2], w.shape[3], y.shape[2], y.shape[3],
            w.shape[0] / a.groups, a};
}

// Calls f(n, o, oh, ow, ic, c, kh, kw, ih, iw) for every tap that reads a real (not padding) input element.
template <class F>
void for_each_tap(const ConvGeometry& g, F f) {
    for (int64_t n = 0; n < g.N; ++n)
        for (int64_t o = 0; o < g.O; ++o) {
            const int64_t group = o / g.Og;
            for (int64_t oh = 0; oh < g.OH; ++oh)
                for (int64_t ow = 0; ow < g.OW; ++ow)
                    for (int64_t c = 0; c < g.Cg; ++c) {
                        const int64_t ic = group * g.Cg + c;
                        for (int64_t kh = 0; kh < g.KH; ++kh) {
                            const int64_t ih = oh * g.a.stride[0] - g.a.pad[0] + kh * g.a.dilation[0];
                            if (ih < 0 || ih >= g.H) continue;
                            for (int64_t kw = 0; kw < g.KW; ++kw) {
                                const int64_t iw = ow * g.a.stride[1] - g.a.pad[1] + kw * g.a.dilation[1];
                                if (iw < 0 || iw >= g.W) continue;
                                f(n, o, oh, ow, ic, c, kh, kw, ih, iw);
                            }
                        }
                    }
        }
}
}  // namespace

std::unique_ptr<Kernel> make_conv(const Op& op) {
    const ConvAttrs a = op.attrs<ConvAttrs>();
    switch (op.kind()) {
        case OpKind::Conv2d: {  // (X, W[, b]) -> Y
            const Buf x = op.in[0], w = op.in[1], y = op.out[0];
            const Buf b = a.bias ? op.in[2] : Buf{};
            const ConvGeometry g = geometry(a, x.desc, w.desc, y.desc);
            return loop([=](const RunContext&) {
                std::vector<double> acc(size_t(y.numel()), 0.0);
                for_each_tap(g, [&](int64_t n, int64_t o, int64_t oh, int64_t ow, int64_t ic, int64_t c, int64_t kh, int64_t kw, int64_t ih, int64_t iw) {
                    acc[size_t(y.at(n, o, oh, ow))] += double(x.get(x.at(n, ic, ih, iw))) * double(w.get(w.at(o, c, kh, kw)));
                });
                if (a.bias)
                    for (int64_t i = 0; i < y.numel(); ++i) acc[size_t(i)] += b.get((i / (g.OH * g.OW)) % g.O);
                y.store_all(acc);
            });
        }
        case OpKind::ConvBackwardData: {  // (dY, W) -> dX
            const Buf dy = op.in[0], w = op.in[1], dx = op.out[0];
            const ConvGeometry g = geometry(a, dx.desc, w.desc, dy.desc);
            return loop([=](const RunContext&) {
                std::vector<double> acc(size_t(dx.numel()), 0.0);
                for_each_tap(g, [&](int64_t n, int64_t o, int64_t oh, int64_t ow, int64_t ic, int64_t c, int64_t kh, int64_t kw, int64_t ih, int64_t iw) {
                    acc[size_t(dx.at(n, ic, ih, iw))] += double(dy.get(dy.at(n, o, oh, ow))) * double(w.get(w.at(o, c, kh, kw)));
                });
                dx.store_all(acc);
            });
        }
        case OpKind::ConvBackwardWeights: {  // (dY, X) -> (dW[, db])
            const Buf dy = op.in[0], x = op.in[1], dw = op.out[0];
            const Buf db = a.bias ? op.out[1] : Buf{};
            const ConvGeometry g = geometry(a, x.desc, dw.desc, dy.desc);
            return loop([=](const RunContext&) {
                std::vector<double> acc(size_t(dw.numel()), 0.0);
                for_each_tap(g, [&](int64_t n, int64_t o, int64_t oh, int64_t ow, int64_t ic, int64_t c, int64_t kh, int64_t kw, int64_t ih, int64_t iw) {
                    acc[size_t(dw.at(o, c, kh, kw))] += double(dy.get(dy.at(n, o, oh, ow))) * double(x.get(x.at(n, ic, ih, iw)));
                });
                dw.store_all(acc);
                if (!a.bias) return;
                std::vector<double> bias(size_t(g.O), 0.0);
                for (int64_t i = 0; i < dy.numel(); ++i) bias[size_t((i / (g.OH * g.OW)) % g.O)] += dy.get(i);
                db.store_all(bias);
            });
        }
        default: throw InternalError("not a convolution op");
    }
}

}  // namespace joule::reference
