// The emulated FPGA's GEMM kernel: the kernel model's loop nest, run for its results.
//
//   for g, m0 (tile_m), n0 (tile_n):
//     C tile = 0
//     for k0 (tile_k):                       load A[m0.., k0..], B[k0.., n0..] into on-chip buffers
//       for each pe_rows x pe_cols block:    PE(r, c) += adder_tree(A[r, k:k+vec] * B[k:k+vec, c])
//     store C tile (+ bias)
//
// Each op is a GEMM by predict::gemm_shape()'s mapping; a convolution's A (or B) is gathered from the
// activation on the fly, as line buffers assemble windows on chip (padding reads zero), never stored as
// im2col. With double buffering the next k tile is loaded into the other buffer before this one is
// computed (the model overlaps the two; here they run one after the other, same results).
#include <algorithm>

#include "backend/fpga_emu/fpga_emu_backend.hpp"
#include "backend/reference/kernels.hpp"

namespace joule::fpga_emu {

namespace {

using reference::Buf;

// Sum of v[0..n) as a pipelined adder tree adds it: pairwise.
float tree_sum(float* v, int64_t n) {
    for (int64_t w = 1; w < n; w *= 2)
        for (int64_t i = 0; i + w < n; i += 2 * w) v[i] += v[i + w];
    return n > 0 ? v[0] : 0.0f;
}

struct Tiling {
    int64_t rows, cols, vec, tm, tn, tk;
    bool double_buffer;
};

// The loop nest over G groups of an M x N x K GEMM; a(g, m, k), b(g, k, n) read operands (0 for
// padding), c(g, m, n, v) stores a finished C element.
template <class A, class B, class C>
void tiled_gemm(const Tiling& t, int64_t G, int64_t M, int64_t N, int64_t K, A a, B b, C c) {
    const int64_t tm = std::min(t.tm, M), tn = std::min(t.tn, N), tk = std::min(t.tk, K);
    std::vector<float> abuf[2], bbuf[2];
    for (int p = 0; p < 2; ++p) abuf[p].resize(size_t(tm * tk)), bbuf[p].resize(size_t(tk * tn));
    std::vector<float> cbuf(size_t(tm * tn)), lanes(size_t(t.vec));
    for (int64_t g = 0; g < G; ++g)
        for (int64_t m0 = 0; m0 < M; m0 += tm)
            for (int64_t n0 = 0; n0 < N; n0 += tn) {
                const int64_t sm = std::min(tm, M - m0), sn = std::min(tn, N - n0);
                std::fill(cbuf.begin(), cbuf.end(), 0.0f);
                auto load = [&](int p, int64_t k0) {
                    const int64_t sk = std::min(tk, K - k0);
                    for (int64_t i = 0; i < sm; ++i)
                        for (int64_t k = 0; k < sk; ++k) abuf[p][size_t(i * tk + k)] = a(g, m0 + i, k0 + k);
                    for (int64_t k = 0; k < sk; ++k)
                        for (int64_t j = 0; j < sn; ++j) bbuf[p][size_t(k * tn + j)] = b(g, k0 + k, n0 + j);
                };
                int p = 0;
                load(p, 0);
                for (int64_t k0 = 0; k0 < K; k0 += tk) {
                    const int64_t sk = std::min(tk, K - k0);
                    const bool more = k0 + tk < K;
                    if (more && t.double_buffer) load(1 - p, k0 + tk);  // ping-pong: the next tile while this one computes
                    const float* A_ = abuf[p].data();
                    const float* B_ = bbuf[p].data();
                    for (int64_t r0 = 0; r0 < sm; r0 += t.rows)
                        for (int64_t c0 = 0; c0 < sn; c0 += t.cols)
                            for (int64_t r = r0; r < std::min(r0 + t.rows, sm); ++r)
                                for (int64_t cc = c0; cc < std::min(c0 + t.cols, sn); ++cc) {
                                    float acc = cbuf[size_t(r * tn + cc)];
                                    for (int64_t k = 0; k < sk; k += t.vec) {
                                        const int64_t w = std::min(t.vec, sk - k);
                                        for (int64_t v = 0; v < w; ++v) lanes[size_t(v)] = A_[r * tk + k + v] * B_[(k + v) * tn + cc];
                                        acc += tree_sum(lanes.data(), w);
                                    }
                                    cbuf[size_t(r * tn + cc)] = acc;
                                }
                    if (more) {
                        if (t.double_buffer) p = 1 - p;
                        else load(p, k0 + tk);
                    }
                }
                for (int64_t i = 0; i < sm; ++i)
                    for (int64_t j = 0; j < sn; ++j) c(g, m0 + i, n0 + j, cbuf[size_t(i * tn + j)]);
            }
}

class GemmKernel : public Kernel {
public:
    explicit GemmKernel(std::function<void()> f) : f_(std::move(f)) {}
    void run(const RunContext&) override { f_(); }

private:
    std::function<void()> f_;
};

struct Conv {
    int64_t N, C, H, W, O, Cg, KH, KW, OH, OW, Og, groups, s0, s1, p0, p1, d0, d1;
    struct Pos {
        int64_t n, h, w;
    };
    struct Tap {
        int64_t c, kh, kw;  // (c, kh, kw) of a weight row, or (o, kh, kw) backward-data
    };
    Pos out_pos(int64_t m) const { return {m / (OW * OH), (m / OW) % OH, m % OW}; }  // GEMM row -> output pixel
    Pos in_pos(int64_t m) const { return {m / (W * H), (m / W) % H, m % W}; }        // GEMM row -> input pixel
    Tap tap(int64_t k) const { return {k / (KW * KH), (k / KW) % KH, k % KW}; }
    // The input element tap t of output pixel p reads in group g (0 where it falls on padding): what a
    // line buffer hands the PE array.
    float window(const Buf& x, int64_t g, Pos p, Tap t) const {
        const int64_t ih = p.h * s0 - p0 + t.kh * d0, iw = p.w * s1 - p1 + t.kw * d1;
        return ih < 0 || ih >= H || iw < 0 || iw >= W ? 0.0f : x.get(x.at(p.n, g * Cg + t.c, ih, iw));
    }
    // The output-gradient element that tap t (over output channels) sends to input pixel p (0 where
    // no output pixel reads p through it: strides and borders).
    float scatter(const Buf& dy, int64_t g, Pos p, Tap t) const {
        const int64_t hh = p.h + p0 - t.kh * d0, ww = p.w + p1 - t.kw * d1;
        if (hh < 0 || ww < 0 || hh % s0 || ww % s1 || hh / s0 >= OH || ww / s1 >= OW) return 0.0f;
        return dy.get(dy.at(p.n, g * Og + t.c, hh / s0, ww / s1));
    }
};

Conv conv_of(const ConvAttrs& a, const TensorDesc& x, const TensorDesc& w, const TensorDesc& y) {
    return {x.shape[0], x.shape[1], x.shape[2], x.shape[3], w.shape[0], w.shape[1], w.shape[2], w.shape[3], y.shape[2], y.shape[3], w.shape[0] / a.groups,
            a.groups, a.stride[0], a.stride[1], a.pad[0], a.pad[1], a.dilation[0], a.dilation[1]};
}

std::unique_ptr<Kernel> conv(const reference::Op& op, const Tiling& t) {
    const ConvAttrs at = op.attrs<ConvAttrs>();
    switch (op.kind()) {
        case OpKind::Conv2d: {  // C[(n,oh,ow), o] = A[(n,oh,ow), (c,kh,kw)] B[(c,kh,kw), o] per group
            const Buf x = op.in[0], w = op.in[1], y = op.out[0];
            const Buf bias = at.bias ? op.in[2] : Buf{};
            const Conv v = conv_of(at, x.desc, w.desc, y.desc);
            return std::make_unique<GemmKernel>([=] {
                const int64_t K = v.Cg * v.KH * v.KW;
                tiled_gemm(
                    t, v.groups, v.N * v.OH * v.OW, v.Og, K, [&](int64_t g, int64_t m, int64_t k) { return v.window(x, g, v.out_pos(m), v.tap(k)); },
                    [&](int64_t g, int64_t k, int64_t o) { return w.get((g * v.Og + o) * K + k); },
                    [&](int64_t g, int64_t m, int64_t o, float acc) {
                        const Conv::Pos p = v.out_pos(m);
                        y.set(y.at(p.n, g * v.Og + o, p.h, p.w), double(acc) + (at.bias ? double(bias.get(g * v.Og + o)) : 0.0));
                    });
            });
        }
        case OpKind::ConvBackwardData: {  // C[(n,ih,iw), c] = A[(n,ih,iw), (o,kh,kw)] B[(o,kh,kw), c]: dY at the taps that read (ih, iw)
            const Buf dy = op.in[0], w = op.in[1], dx = op.out[0];
            const Conv v = conv_of(at, dx.desc, w.desc, dy.desc);
            return std::make_unique<GemmKernel>([=] {
                tiled_gemm(
                    t, v.groups, v.N * v.H * v.W, v.Cg, v.Og * v.KH * v.KW, [&](int64_t g, int64_t m, int64_t k) { return v.scatter(dy, g, v.in_pos(m), v.tap(k)); },
                    [&](int64_t g, int64_t k, int64_t c) {
                        const Conv::Tap p = v.tap(k);
                        return w.get(w.at(g * v.Og + p.c, c, p.kh, p.kw));
                    },
                    [&](int64_t g, int64_t m, int64_t c, float acc) {
                        const Conv::Pos p = v.in_pos(m);
                        dx.set(dx.at(p.n, g * v.Cg + c, p.h, p.w), acc);
                    });
            });
        }
        case OpKind::ConvBackwardWeights: {  // C[o, (c,kh,kw)] = A[o, (n,oh,ow)] B[(n,oh,ow), (c,kh,kw)]
            const Buf dy = op.in[0], x = op.in[1], dw = op.out[0];
            const Buf db = at.bias ? op.out[1] : Buf{};
            const Conv v = conv_of(at, x.desc, dw.desc, dy.desc);
            return std::make_unique<GemmKernel>([=] {
                const int64_t Kw = v.Cg * v.KH * v.KW;
                tiled_gemm(
                    t, v.groups, v.Og, Kw, v.N * v.OH * v.OW,
                    [&](int64_t g, int64_t o, int64_t k) {
                        const Conv::Pos p = v.out_pos(k);
                        return dy.get(dy.at(p.n, g * v.Og + o, p.h, p.w));
                    },
                    [&](int64_t g, int64_t k, int64_t j) { return v.window(x, g, v.out_pos(k), v.tap(j)); },
                    [&](int64_t g, int64_t o, int64_t j, float acc) { dw.set((g * v.Og + o) * Kw + j, acc); });
                if (!at.bias) return;
                // the bias gradient: a stream reduction of dY per output channel
                std::vector<float> sum(size_t(v.O), 0.0f);
                for (int64_t i = 0; i < dy.numel(); ++i) sum[size_t((i / (v.OH * v.OW)) % v.O)] += dy.get(i);
                for (int64_t o = 0; o < v.O; ++o) db.set(o, sum[size_t(o)]);
            });
        }
        default: throw InternalError("not a convolution op");
    }
}

std::unique_ptr<Kernel> linear(const reference::Op& op, const Tiling& t) {
    auto rows = [](const Buf& b) { return b.numel() / b.desc.shape.back(); };
    if (op.kind() == OpKind::MatMul) {  // C = alpha op(A) op(B) per batch matrix
        const MatMulAttrs at = op.attrs<MatMulAttrs>();
        const Buf A = op.in[0], B = op.in[1], C = op.out[0];
        const MatMulIndex x = matmul_index(at, A.desc.shape, B.desc.shape, C.desc.shape);  // through the folded transposes
        return std::make_unique<GemmKernel>([=] {
            tiled_gemm(
                t, x.batch, x.M, x.N, x.K, [&](int64_t g, int64_t i, int64_t k) { return A.get(x.a(g, i, k)); },
                [&](int64_t g, int64_t k, int64_t j) { return B.get(x.b(g, k, j)); },
                [&](int64_t g, int64_t i, int64_t j, float acc) { C.set(x.c(g, i, j), double(at.alpha) * acc); });
        });
    }
    const bool bias = op.attrs<LinearAttrs>().bias;
    switch (op.kind()) {
        case OpKind::Linear: {  // Y[M, N] = X[M, K] W[N, K]^T + b
            const Buf x = op.in[0], w = op.in[1], y = op.out[0];
            const Buf b = bias ? op.in[2] : Buf{};
            const int64_t M = rows(x), K = w.dim(1), N = w.dim(0);
            return std::make_unique<GemmKernel>([=] {
                tiled_gemm(
                    t, 1, M, N, K, [&](int64_t, int64_t m, int64_t k) { return x.get(m * K + k); }, [&](int64_t, int64_t k, int64_t n) { return w.get(n * K + k); },
                    [&](int64_t, int64_t m, int64_t n, float acc) { y.set(m * N + n, double(acc) + (bias ? double(b.get(n)) : 0.0)); });
            });
        }
        case OpKind::LinearBackwardData: {  // dX[M, K] = dY[M, N] W[N, K] (+ G[M, K], added as the tile is stored)
            const Buf dy = op.in[0], w = op.in[1], dx = op.out[0];
            const bool sum = op.in.size() == 3;
            const Buf g = sum ? op.in[2] : Buf{};
            const int64_t M = rows(dy), K = w.dim(1), N = w.dim(0);
            return std::make_unique<GemmKernel>([=] {
                tiled_gemm(
                    t, 1, M, K, N, [&](int64_t, int64_t m, int64_t n) { return dy.get(m * N + n); }, [&](int64_t, int64_t n, int64_t k) { return w.get(n * K + k); },
                    [&](int64_t, int64_t m, int64_t k, float acc) { dx.set(m * K + k, sum ? acc + g.get(m * K + k) : acc); });
            });
        }
        case OpKind::LinearBackwardWeights: {  // dW[N, K] = dY[M, N]^T X[M, K]; db[N] = sum_m dY
            const Buf dy = op.in[0], x = op.in[1], dw = op.out[0];
            const Buf db = bias ? op.out[1] : Buf{};
            const int64_t M = rows(dy), K = dw.dim(1), N = dw.dim(0);
            return std::make_unique<GemmKernel>([=] {
                tiled_gemm(
                    t, 1, N, K, M, [&](int64_t, int64_t n, int64_t m) { return dy.get(m * N + n); }, [&](int64_t, int64_t m, int64_t k) { return x.get(m * K + k); },
                    [&](int64_t, int64_t n, int64_t k, float acc) { dw.set(n * K + k, acc); });
                if (!bias) return;
                for (int64_t n = 0; n < N; ++n) {
                    float s = 0;
                    for (int64_t m = 0; m < M; ++m) s += dy.get(m * N + n);
                    db.set(n, s);
                }
            });
        }
        default: throw InternalError("not a linear op");
    }
}

}  // namespace

std::unique_ptr<Kernel> make_gemm(const Graph& g, NodeId id, const std::vector<void*>& inputs, const std::vector<void*>& outputs,
                                  const predict::FpgaConfig& c) {
    const Node& n = g.node(id);
    reference::Op op{n, {}, {}};
    for (size_t i = 0; i < inputs.size(); ++i) op.in.push_back({g.tensor(n.inputs[i]).desc, inputs[i]});
    for (size_t i = 0; i < outputs.size(); ++i) op.out.push_back({g.tensor(n.outputs[i]).desc, outputs[i]});
    const Tiling t{c.pe_rows, c.pe_cols, c.vec, int64_t(c.tile_m), int64_t(c.tile_n), int64_t(c.tile_k), c.double_buffer};
    switch (n.kind) {
        case OpKind::Conv2d: case OpKind::ConvBackwardData: case OpKind::ConvBackwardWeights: return conv(op, t);
        default: return linear(op, t);
    }
}

}  // namespace joule::fpga_emu
