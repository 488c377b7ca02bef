// Max, average and global-average pooling and their backward.
//   MaxPool2d: Y = the window's maximum over real (not padding) elements; arg-max = kh * KW + kw of the
//              first maximal one. MaxPool2dBackward: dX = 0, then dX[window element argmax] += dY.
//   AvgPool2d: Y = sum over the window's real elements / (KH * KW) (padding counts, PyTorch's default).
//              AvgPool2dBackward: dX[each real window element] += dY / (KH * KW).
//   GlobalAvgPool: Y = mean over H, W; backward: dX = dY / (H * W).
#include <cmath>

#include "backend/reference/kernels.hpp"

namespace joule::reference {

namespace {
struct Window {
    int64_t N, C, H, W, OH, OW;
    PoolAttrs a;
    int64_t size() const { return a.kernel[0] * a.kernel[1]; }
    int64_t ih(int64_t oh, int64_t kh) const { return oh * a.stride[0] - a.pad[0] + kh; }
    int64_t iw(int64_t ow, int64_t kw) const { return ow * a.stride[1] - a.pad[1] + kw; }
    bool inside(int64_t h, int64_t w) const { return h >= 0 && h < H && w >= 0 && w < W; }
};
Window window(const PoolAttrs& a, const Buf& x, const Buf& y) { return {x.dim(0), x.dim(1), x.dim(2), x.dim(3), y.dim(2), y.dim(3), a}; }

// Calls f(n, c, oh, ow) for every output element.
template <class F>
void for_each_output(const Window& g, F f) {
    for (int64_t n = 0; n < g.N; ++n)
        for (int64_t c = 0; c < g.C; ++c)
            for (int64_t oh = 0; oh < g.OH; ++oh)
                for (int64_t ow = 0; ow < g.OW; ++ow) f(n, c, oh, ow);
}

std::unique_ptr<Kernel> max_pool(const Op& op) {
    const Buf x = op.in[0], y = op.out[0], argmax = op.out[1];
    const Window g = window(op.attrs<PoolAttrs>(), x, y);
    return loop([=](const RunContext&) {
        for_each_output(g, [&](int64_t n, int64_t c, int64_t oh, int64_t ow) {
            bool found = false;
            float best = 0;
            int64_t best_k = 0;
            for (int64_t kh = 0; kh < g.a.kernel[0]; ++kh)
                for (int64_t kw = 0; kw < g.a.kernel[1]; ++kw) {
                    const int64_t h = g.ih(oh, kh), w = g.iw(ow, kw);
                    if (!g.inside(h, w)) continue;  // padding never wins
                    const float v = x.get(x.at(n, c, h, w));
                    if (!found || v > best) {  // strict: the first of equal maxima wins
                        found = true;
                        best = v;
                        best_k = kh * g.a.kernel[1] + kw;
                    }
                }
            y.set(y.at(n, c, oh, ow), best);
            argmax.set_index(argmax.at(n, c, oh, ow), best_k);
        });
    });
}

std::unique_ptr<Kernel> max_pool_backward(const Op& op) {
    const Buf dy = op.in[0], argmax = op.in[1], dx = op.out[0];
    const Window g = window(op.attrs<PoolAttrs>(), dx, dy);
    const std::string name = op.node.name;
    return loop([=](const RunContext&) {
        std::vector<double> acc(size_t(dx.numel()), 0.0);
        for_each_output(g, [&](int64_t n, int64_t c, int64_t oh, int64_t ow) {
            const int64_t k = argmax.index(argmax.at(n, c, oh, ow));
            const int64_t h = g.ih(oh, k / g.a.kernel[1]), w = g.iw(ow, k % g.a.kernel[1]);
            if (k < 0 || k >= g.size() || !g.inside(h, w))
                throw Error("op '" + name + "' (MaxPool2dBackward): arg-max " + std::to_string(k) + " at output [" + std::to_string(n) +
                            ", " + std::to_string(c) + ", " + std::to_string(oh) + ", " + std::to_string(ow) +
                            "] is not a real element of its window");
            acc[size_t(dx.at(n, c, h, w))] += dy.get(dy.at(n, c, oh, ow));
        });
        dx.store_all(acc);
    });
}

std::unique_ptr<Kernel> avg_pool(const Op& op) {
    const Buf x = op.in[0], y = op.out[0];
    const Window g = window(op.attrs<PoolAttrs>(), x, y);
    return loop([=](const RunContext&) {
        for_each_output(g, [&](int64_t n, int64_t c, int64_t oh, int64_t ow) {
            double s = 0;
            for (int64_t kh = 0; kh < g.a.kernel[0]; ++kh)
                for (int64_t kw = 0; kw < g.a.kernel[1]; ++kw)
                    if (g.inside(g.ih(oh, kh), g.iw(ow, kw))) s += x.get(x.at(n, c, g.ih(oh, kh), g.iw(ow, kw)));
            y.set(y.at(n, c, oh, ow), s / double(g.size()));
        });
    });
}

std::unique_ptr<Kernel> avg_pool_backward(const Op& op) {
    const Buf dy = op.in[0], dx = op.out[0];
    const Window g = window(op.attrs<PoolAttrs>(), dx, dy);
    return loop([=](const RunContext&) {
        std::vector<double> acc(size_t(dx.numel()), 0.0);
        for_each_output(g, [&](int64_t n, int64_t c, int64_t oh, int64_t ow) {
            const double share = dy.get(dy.at(n, c, oh, ow)) / double(g.size());
            for (int64_t kh = 0; kh < g.a.kernel[0]; ++kh)
                for (int64_t kw = 0; kw < g.a.kernel[1]; ++kw)
                    if (g.inside(g.ih(oh, kh), g.iw(ow, kw))) acc[size_t(dx.at(n, c, g.ih(oh, kh), g.iw(ow, kw)))] += share;
        });
        dx.store_all(acc);
    });
}

// GlobalAvgPool (X -> Y[N, C, 1, 1]) and its backward (dY -> dX).
std::unique_ptr<Kernel> global_avg_pool(const Op& op, bool forward) {
    const Buf big = forward ? op.in[0] : op.out[0], small = forward ? op.out[0] : op.in[0];
    const int64_t NC = big.dim(0) * big.dim(1), S = big.dim(2) * big.dim(3);
    return loop([=](const RunContext&) {
        for (int64_t i = 0; i < NC; ++i) {  // logical [n, c] of both tensors: small at i, big at i * S + s
            if (forward) {
                double s = 0;
                for (int64_t k = 0; k < S; ++k) s += big.get(i * S + k);
                small.set(i, s / double(S));
            } else {
                for (int64_t k = 0; k < S; ++k) big.set(i * S + k, double(small.get(i)) / double(S));
            }
        }
    });
}
}  // namespace

std::unique_ptr<Kernel> make_pool(const Op& op) {
    switch (op.kind()) {
        case OpKind::MaxPool2d: return max_pool(op);
        case OpKind::MaxPool2dBackward: return max_pool_backward(op);
        case OpKind::AvgPool2d: return avg_pool(op);
        case OpKind::AvgPool2dBackward: return avg_pool_backward(op);
        case OpKind::GlobalAvgPool: return global_avg_pool(op, true);
        case OpKind::GlobalAvgPoolBackward: return global_avg_pool(op, false);
        default: throw InternalError("not a pooling op");
    }
}

}  // namespace joule::reference
