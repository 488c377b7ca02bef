// BatchNorm2d (statistics per channel over N, H, W) and LayerNorm (per row over the last dim), forward
// and closed-form backward, in double:
//   xhat = (x - mean) / sqrt(var + eps),  y = gamma xhat + beta          (var biased)
//   dbeta = sum dy,  dgamma = sum dy xhat,
//   dx = rstd (g - mean(g) - xhat mean(g xhat)),  g = gamma dy          (means over the reduced elements)
// BatchNorm training uses the batch statistics, writes them to its saved mean / variance outputs and
// updates the running statistics in place (running = (1 - momentum) running + momentum batch, with the
// unbiased variance); inference normalises with the running statistics and writes neither.
#include <cmath>

#include "backend/reference/kernels.hpp"

namespace joule::reference {

namespace {
std::unique_ptr<Kernel> batch_norm(const Op& op) {
    const NormAttrs a = op.attrs<NormAttrs>();
    const Buf x = op.in[0], gamma = op.in[1], beta = op.in[2], run_mean = op.in[3], run_var = op.in[4];
    const Buf y = op.out[0], mean_out = op.out[1], var_out = op.out[2];
    const int64_t N = x.dim(0), C = x.dim(1), S = x.dim(2) * x.dim(3), M = N * S;
    auto idx = [=](int64_t n, int64_t c, int64_t s) { return (n * C + c) * S + s; };  // logical [n, c, h*W + w]
    return loop([=](const RunContext& rc) {
        for (int64_t c = 0; c < C; ++c) {
            double mean = 0, var = 0;
            if (rc.training) {
                for (int64_t n = 0; n < N; ++n)
                    for (int64_t s = 0; s < S; ++s) mean += x.get(idx(n, c, s));
                mean /= double(M);
                for (int64_t n = 0; n < N; ++n)
                    for (int64_t s = 0; s < S; ++s) var += (x.get(idx(n, c, s)) - mean) * (x.get(idx(n, c, s)) - mean);
                var /= double(M);
                mean_out.set(c, mean);
                var_out.set(c, var);
                const double m = a.momentum, unbias = M > 1 ? double(M) / double(M - 1) : 1.0;
                run_mean.set(c, (1 - m) * run_mean.get(c) + m * double(float(mean)));
                run_var.set(c, (1 - m) * run_var.get(c) + m * double(float(var)) * unbias);
            } else {
                mean = run_mean.get(c);
                var = run_var.get(c);
            }
            const double rstd = 1.0 / std::sqrt(var + double(a.eps));
            for (int64_t n = 0; n < N; ++n)
                for (int64_t s = 0; s < S; ++s)
                    y.set(idx(n, c, s), double(gamma.get(c)) * (x.get(idx(n, c, s)) - mean) * rstd + double(beta.get(c)));
        }
    });
}

std::unique_ptr<Kernel> batch_norm_backward(const Op& op) {
    const NormAttrs a = op.attrs<NormAttrs>();
    const Buf dy = op.in[0], x = op.in[1], gamma = op.in[2], mean_in = op.in[3], var_in = op.in[4];
    const Buf dx = op.out[0], dgamma = op.out[1], dbeta = op.out[2];
    const int64_t N = x.dim(0), C = x.dim(1), S = x.dim(2) * x.dim(3), M = N * S;
    auto idx = [=](int64_t n, int64_t c, int64_t s) { return (n * C + c) * S + s; };
    return loop([=](const RunContext&) {
        for (int64_t c = 0; c < C; ++c) {
            const double mean = mean_in.get(c), rstd = 1.0 / std::sqrt(double(var_in.get(c)) + double(a.eps)), g = gamma.get(c);
            double sum_dy = 0, sum_dy_xhat = 0;
            for (int64_t n = 0; n < N; ++n)
                for (int64_t s = 0; s < S; ++s) {
                    const int64_t i = idx(n, c, s);
                    sum_dy += dy.get(i);
                    sum_dy_xhat += dy.get(i) * (x.get(i) - mean) * rstd;
                }
            dbeta.set(c, sum_dy);
            dgamma.set(c, sum_dy_xhat);
            for (int64_t n = 0; n < N; ++n)
                for (int64_t s = 0; s < S; ++s) {
                    const int64_t i = idx(n, c, s);
                    const double xhat = (x.get(i) - mean) * rstd;
                    dx.set(i, g * rstd * (dy.get(i) - sum_dy / double(M) - xhat * sum_dy_xhat / double(M)));
                }
        }
    });
}

std::unique_ptr<Kernel> layer_norm(const Op& op) {
    const NormAttrs a = op.attrs<NormAttrs>();
    const Buf x = op.in[0], gamma = op.in[1], beta = op.in[2], y = op.out[0], mean_out = op.out[1], var_out = op.out[2];
    const int64_t H = x.desc.shape.back(), rows = x.numel() / H;
    return loop([=](const RunContext&) {
        for (int64_t r = 0; r < rows; ++r) {
            double mean = 0, var = 0;
            for (int64_t h = 0; h < H; ++h) mean += x.get(r * H + h);
            mean /= double(H);
            for (int64_t h = 0; h < H; ++h) var += (x.get(r * H + h) - mean) * (x.get(r * H + h) - mean);
            var /= double(H);
            mean_out.set(r, mean);
            var_out.set(r, var);
            const double rstd = 1.0 / std::sqrt(var + double(a.eps));
            for (int64_t h = 0; h < H; ++h)
                y.set(r * H + h, double(gamma.get(h)) * (x.get(r * H + h) - mean) * rstd + double(beta.get(h)));
        }
    });
}

std::unique_ptr<Kernel> layer_norm_backward(const Op& op) {
    const NormAttrs a = op.attrs<NormAttrs>();
    const Buf dy = op.in[0], x = op.in[1], gamma = op.in[2], mean_in = op.in[3], var_in = op.in[4];
    const Buf dx = op.out[0], dgamma = op.out[1], dbeta = op.out[2];
    const int64_t H = x.desc.shape.back(), rows = x.numel() / H;
    return loop([=](const RunContext&) {
        std::vector<double> dg(size_t(H), 0.0), db(size_t(H), 0.0);
        for (int64_t r = 0; r < rows; ++r) {
            const double mean = mean_in.get(r), rstd = 1.0 / std::sqrt(double(var_in.get(r)) + double(a.eps));
            auto xhat = [&](int64_t h) { return (x.get(r * H + h) - mean) * rstd; };
            double sum_g = 0, sum_g_xhat = 0;  // g = gamma dy
            for (int64_t h = 0; h < H; ++h) {
                const double d = dy.get(r * H + h), g = double(gamma.get(h)) * d;
                dg[size_t(h)] += d * xhat(h);
                db[size_t(h)] += d;
                sum_g += g;
                sum_g_xhat += g * xhat(h);
            }
            for (int64_t h = 0; h < H; ++h) {
                const double g = double(gamma.get(h)) * dy.get(r * H + h);
                dx.set(r * H + h, rstd * (g - sum_g / double(H) - xhat(h) * sum_g_xhat / double(H)));
            }
        }
        dgamma.store_all(dg);
        dbeta.store_all(db);
    });
}
}  // namespace

std::unique_ptr<Kernel> make_norm(const Op& op) {
    switch (op.kind()) {
        case OpKind::BatchNorm2d: return batch_norm(op);
        case OpKind::BatchNormBackward: return batch_norm_backward(op);
        case OpKind::LayerNorm: return layer_norm(op);
        case OpKind::LayerNormBackward: return layer_norm_backward(op);
        default: throw InternalError("not a normalisation op");
    }
}

}  // namespace joule::reference
