// Linear ([..., K] x W[N, K]^T + b, leading dims as rows), its backward, and MatMul
// (C = alpha op(A) op(B) per leading batch index). Triple loops, double accumulators.
#include "backend/reference/kernels.hpp"

namespace joule::reference {

namespace {
int64_t rows_of(const Buf& b) { return b.numel() / b.desc.shape.back(); }

std::unique_ptr<Kernel> matmul(const Op& op) {
    const MatMulAttrs a = op.attrs<MatMulAttrs>();
    const Buf A = op.in[0], B = op.in[1], C = op.out[0];
    const MatMulIndex x = matmul_index(a, A.desc.shape, B.desc.shape, C.desc.shape);  // through the folded transposes
    return loop([=](const RunContext&) {
        for (int64_t g = 0; g < x.batch; ++g)
            for (int64_t i = 0; i < x.M; ++i)
                for (int64_t j = 0; j < x.N; ++j) {
                    double s = 0;
                    for (int64_t k = 0; k < x.K; ++k) s += double(A.get(x.a(g, i, k))) * double(B.get(x.b(g, k, j)));
                    C.set(x.c(g, i, j), double(a.alpha) * s);
                }
    });
}
}  // namespace

std::unique_ptr<Kernel> make_linear(const Op& op) {
    if (op.kind() == OpKind::MatMul) return matmul(op);
    const bool bias = op.attrs<LinearAttrs>().bias;
    switch (op.kind()) {
        case OpKind::Linear: {  // (X[M, K], W[N, K][, b[N]]) -> Y[M, N]
            const Buf x = op.in[0], w = op.in[1], y = op.out[0];
            const Buf b = bias ? op.in[2] : Buf{};
            const int64_t M = rows_of(x), K = w.dim(1), N = w.dim(0);
            return loop([=](const RunContext&) {
                for (int64_t m = 0; m < M; ++m)
                    for (int64_t n = 0; n < N; ++n) {
                        double s = bias ? double(b.get(n)) : 0.0;
                        for (int64_t k = 0; k < K; ++k) s += double(x.get(m * K + k)) * double(w.get(n * K + k));
                        y.set(m * N + n, s);
                    }
            });
        }
        case OpKind::LinearBackwardData: {  // (dY[M, N], W[N, K][, G[M, K]]) -> dX[M, K] = dY W (+ G)
            const Buf dy = op.in[0], w = op.in[1], dx = op.out[0];
            const bool sum = op.in.size() == 3;
            const Buf g = sum ? op.in[2] : Buf{};
            const int64_t M = rows_of(dy), K = w.dim(1), N = w.dim(0);
            return loop([=](const RunContext&) {
                for (int64_t m = 0; m < M; ++m)
                    for (int64_t k = 0; k < K; ++k) {
                        double s = sum ? double(g.get(m * K + k)) : 0.0;
                        for (int64_t n = 0; n < N; ++n) s += double(dy.get(m * N + n)) * double(w.get(n * K + k));
                        dx.set(m * K + k, s);
                    }
            });
        }
        case OpKind::LinearBackwardWeights: {  // (dY[M, N], X[M, K]) -> (dW[N, K] = dY^T X[, db[N] = sum_m dY])
            const Buf dy = op.in[0], x = op.in[1], dw = op.out[0];
            const Buf db = bias ? op.out[1] : Buf{};
            const int64_t M = rows_of(dy), K = dw.dim(1), N = dw.dim(0);
            return loop([=](const RunContext&) {
                for (int64_t n = 0; n < N; ++n) {
                    for (int64_t k = 0; k < K; ++k) {
                        double s = 0;
                        for (int64_t m = 0; m < M; ++m) s += double(dy.get(m * N + n)) * double(x.get(m * K + k));
                        dw.set(n * K + k, s);
                    }
                    if (!bias) continue;
                    double s = 0;
                    for (int64_t m = 0; m < M; ++m) s += dy.get(m * N + n);
                    db.set(n, s);
                }
            });
        }
        default: throw InternalError("not a linear op");
    }
}

}  // namespace joule::reference
