// Convolutions with fewer channels than a vector holds, as loops of joule's own (LeNet-5's conv1, 1 -> 6
// channels, forward and backward-weights, and conv2's backward-data, 16 -> 6). In nhwc an AVX-512 vector
// holds 16 channels, so oneDNN 2.6 leaves most lanes idle there (LeNet-5 b64 f32: conv1's forward at ~45
// GFLOP/s against a ~375 f32 GEMM peak; conv2's backward-data at ~85 against ~190 on a busy machine).
// The forward (fewer than 16 output channels) vectorises over image columns instead: each image band is copied
// once into planar f32 scratch (a channel's rows side by side, zero padding around them, so a tap (kh, kw) is
// one unaligned load of 16 columns; nhwc pixels de-interleaved 16 at a time with vpermt2ps), then
// out[o][r][w..w+16) += wt[c][kh][kw][o] x[c][r+kh][w+kw..] with OB output channels x NV column vectors in
// registers and the weight a broadcast, rows of zero padding skipped, bias and the fused ReLU / ReLU6 applied
// in registers, and each output row interleaved back into the tensor's layout.
// The backward-weights (fewer than 16 output channels) sums dY's planar rows against x's shifted ones over
// the same copies; the backward-data into at most 8 channels from whole vectors of dY's (nhwc) keeps a
// vector of partial sums over dY's channels per (input pixel, channel) and sums their lanes at the end.
// All: stride 1, no dilation, one group, x86-64-v4 only; the forward in f32 arithmetic over f32 or bf16
// storage, the backward ones f32 (oneDNN's bf16 ones run at twice its f32 speed here, within noise of these
// loops); elsewhere oneDNN runs them (conv_small_applies). The weight is read in whatever layout it is
// stored (a blocked one through its offsets), gathered at each run into the loop's own table, and dW is
// written in the layout it has.
// Tried and left on oneDNN, measured (LeNet-5, node times, old and new binaries alternating in one run):
// the backward-data as this forward over dY padded by K - 1 - pad (conv2's: 0.94-1.0x oneDNN; the padding's
// zeros are multiplied too); the backward-weights over dY's nhwc rows as stored against x expanded 6-fold so
// that each lane meets its pixel's input (git stash "conv-small-flat": f32 0.96-1.04x, bf16 0.6x); the
// forward and the backward-data over such expanded rows (no faster; 0.35x). For 16 output channels (conv2,
// 6 -> 16) as whole vectors with x's values broadcast: the forward (git stash "wide-forward": f32 193 -> 211
// us, bf16 with channel pairs in vdpbf16ps 132 -> 134) and the backward-weights ("wide-bwd-w": b64 171 ->
// 149, b16 40.5 -> 42.9) -- oneDNN's run near this machine's FMA rate there already.
#include <immintrin.h>

#include <cstring>
#include <memory>
#include <vector>

#include "backend/cpu/kernels.hpp"
#include "backend/cpu/vec.hpp"

namespace joule::cpu {

namespace {
constexpr int64_t kMaxSmallChannels = 15;      // channels that leave an nhwc vector part empty
constexpr int64_t kBandBytes = int64_t(256) << 10;  // planar scratch per thread: an image band within L2

struct Dims {
    int64_t N, C, H, W;     // logical nchw
    int64_t sn, sc, sh, sw;  // element strides in storage
};
Dims dims_of(const TensorDesc& d) {
    const dnnl::memory::dims s = strides_of(d.shape, d.layout);
    return {d.shape[0], d.shape[1], d.shape[2], d.shape[3], s[0], s[1], s[2], s[3]};
}

#if defined(__x86_64__)
// Permutes between 16 pixels of an nhwc row (C channels interleaved: C vectors) and the pixels' C planar
// vectors (one per channel): vector v of the result takes lane l from the source vectors 2j and 2j + 1
// (vpermt2ps, index idx[v][j][l]) for the pairs j whose mask[v][j] has bit l. De-interleaving: lane l of
// channel c is flat element l * C + c; interleaving: lane l of flat vector v is pixel (16v + l) / C of
// channel (16v + l) % C. The tables are constants of each C's own unrolled loop.
template <int C, bool Interleave>
struct PermuteTable {
    static constexpr int kPairs = (C + 1) / 2;
    int32_t idx[C][kPairs][kLanes] = {};
    uint16_t mask[C][kPairs] = {};
    constexpr PermuteTable() {
        for (int v = 0; v < C; ++v)
            for (int l = 0; l < kLanes; ++l) {
                // the source vector and lane of result lane (v, l)
                const int f = Interleave ? (16 * v + l) % C * kLanes + (16 * v + l) / C : l * C + v;
                idx[v][f / (2 * kLanes)][l] = f % (2 * kLanes);
                mask[v][f / (2 * kLanes)] |= uint16_t(1u << l);
            }
    }
};
template <int C, bool Interleave>
JOULE_V4 void permute(const v16* in, v16* out) {
    static constexpr PermuteTable<C, Interleave> t{};
#pragma GCC unroll 16
    for (int v = 0; v < C; ++v) {
        __m512 r = _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int j = 0; j < t.kPairs; ++j) {
            if (!t.mask[v][j]) continue;
            const __m512 b = 2 * j + 1 < C ? __m512(in[2 * j + 1]) : _mm512_setzero_ps();
            const __m512i ix = _mm512_loadu_si512(t.idx[v][j]);
            r = _mm512_mask_mov_ps(r, t.mask[v][j], _mm512_permutex2var_ps(__m512(in[2 * j]), ix, b));
        }
        out[v] = v16(r);
    }
}
using PermuteFn = void (*)(const v16*, v16*);
template <int... C>
constexpr PermuteFn permute_for(int64_t c, bool interleave, std::integer_sequence<int, C...>) {
    PermuteFn f = nullptr;
    ((f = c == C + 1 ? (interleave ? &permute<C + 1, true> : &permute<C + 1, false>) : f), ...);
    return f;
}
// The permute of C channels (null past 16: those go element by element).
PermuteFn permute_for(int64_t C, bool interleave) { return permute_for(C, interleave, std::make_integer_sequence<int, kLanes>{}); }

// The first n < 16 lanes of a vector, loaded (the rest zero; no access past them) or stored.
JOULE_INLINE JOULE_V4 v16 ld16_part(const float* p, int64_t n) { return v16(_mm512_maskz_loadu_ps(__mmask16((1u << n) - 1), p)); }
JOULE_INLINE JOULE_V4 v16 ld16_part(const uint16_t* p, int64_t n) {
    const __m256i b = _mm256_maskz_loadu_epi16(__mmask16((1u << n) - 1), p);
    u16x16 h;
    std::memcpy(&h, &b, sizeof h);
    return widen_bf16x16(h);
}
JOULE_INLINE JOULE_V4 void st16_part(float* p, v16 v, int64_t n) { _mm512_mask_storeu_ps(p, __mmask16((1u << n) - 1), __m512(v)); }
JOULE_INLINE JOULE_V4 void st16_part(uint16_t* p, v16 v, int64_t n) {
    const u16x16 h = to_bf16x16(v);
    __m256i b;
    std::memcpy(&b, &h, sizeof b);
    _mm256_mask_storeu_epi16(p, __mmask16((1u << n) - 1), b);
}
// Vector k of a block of n elements: whole, part, or nothing.
template <class T>
JOULE_INLINE JOULE_V4 v16 ld16_block(const T* p, int64_t n, int64_t k) {
    const int64_t m = n - k * kLanes;
    return m >= kLanes ? ld16(p + k * kLanes) : m > 0 ? ld16_part(p + k * kLanes, m) : v16{};
}
template <class Y>
JOULE_INLINE JOULE_V4 void st16_block(Y* p, v16 v, int64_t n, int64_t k) {
    const int64_t m = n - k * kLanes;
    if (m >= kLanes) st16(p + k * kLanes, v);
    else if (m > 0) st16_part(p + k * kLanes, v, m);
}

// The planar scratch of one band: channels [0, C) of image n, `plane` elements apart, padded rows [row0, row0
// + rows) (source row = padded row - top; rows outside the source are zeros), each row Wp wide: `left` zeros,
// the W source columns, zeros to the end (Wp >= left + W rounded up to 16). An nhwc source goes through `de`
// (its channels' de-interleaving) 16 pixels at a time.
template <class T>
JOULE_V4 void fill_planar(const T* src, const Dims& d, PermuteFn de, int64_t n, int64_t top, int64_t left, int64_t row0, int64_t rows,
                          int64_t Wp, int64_t plane, float* P) {
    const bool nhwc = d.sc == 1 && d.sw == d.C && d.C <= kLanes;
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t sr = row0 + r - top;
        const bool data = sr >= 0 && sr < d.H;
        for (int64_t c = 0; c < d.C; ++c) {
            float* row = P + c * plane + r * Wp;
            if (!data) {
                std::memset(row, 0, size_t(Wp) * sizeof(float));
                continue;
            }
            std::memset(row, 0, size_t(left) * sizeof(float));
            std::memset(row + left + d.W, 0, size_t(Wp - left - d.W) * sizeof(float));
        }
        if (!data) continue;
        const T* s = src + n * d.sn + sr * d.sh;
        float* prow = P + r * Wp + left;
        if (nhwc)
            for (int64_t w = 0; w < d.W; w += kLanes) {
                const int64_t count = std::min(kLanes, d.W - w) * d.C;
                v16 in[kLanes], out[kLanes];
                for (int64_t k = 0; k < d.C; ++k) in[k] = ld16_block(s + w * d.C, count, k);
                de(in, out);
                for (int64_t c = 0; c < d.C; ++c) st16(prow + c * plane + w, out[c]);
            }
        else if (d.sw == 1)
            for (int64_t w = 0; w < d.W; w += kLanes)
                for (int64_t c = 0; c < d.C; ++c) st16(prow + c * plane + w, ld16_block(s + c * d.sc + w, d.W - w, 0));
        else
            for (int64_t w = 0; w < d.W; ++w)
                for (int64_t c = 0; c < d.C; ++c) prow[c * plane + w] = ld(s, c * d.sc + w * d.sw);
    }
}

// Row `row` of a band's tiles (channel o at tile + o * tplane, W columns rounded up to 16) into dst's row,
// through `inter` (the channels' interleaving) 16 pixels at a time where dst is nhwc.
template <class Y>
JOULE_V4 void store_row(const float* tile, int64_t tplane, const Dims& d, PermuteFn inter, Y* row) {
    const bool nhwc = d.sc == 1 && d.sw == d.C;
    if (nhwc)
        for (int64_t w = 0; w < d.W; w += kLanes) {
            const int64_t count = std::min(kLanes, d.W - w) * d.C;
            v16 in[kLanes], out[kLanes];
            for (int64_t o = 0; o < d.C; ++o) in[o] = ld16(tile + o * tplane + w);
            inter(in, out);
            for (int64_t k = 0; k < d.C; ++k) st16_block(row + w * d.C, out[k], count, k);
        }
    else if (d.sw == 1)
        for (int64_t w = 0; w < d.W; w += kLanes)
            for (int64_t o = 0; o < d.C; ++o) st16_block(row + o * d.sc + w, ld16(tile + o * tplane + w), d.W - w, 0);
    else
        for (int64_t w = 0; w < d.W; ++w)
            for (int64_t o = 0; o < d.C; ++o) st(row, w * d.sw + o * d.sc, tile[o * tplane + w]);
}

// NV column vectors of one band, output channels [o0, o0 + OB), into the band's tiles: the vectors
// start at poff[i] in the planar rows (row r of the output reads planar rows r + kh) and are stored at
// toff[i] in each channel's tile plane; taps kh in [kh0, kh1) (the others read zero padding).
struct RowsGeo {
    int64_t C, O, KH, KW;  // input channels, output channels, window
    int64_t Wp, plane;     // planar row length and channel plane (elements)
    int64_t tplane;        // tile plane per output channel
};
// x in every lane (vbroadcastss; vec.hpp's splat adds it to a zero vector first)
JOULE_INLINE JOULE_V4 v16 bcast(float x) { return v16(_mm512_set1_ps(x)); }
template <int OB, int NV>
JOULE_V4 void out_block(const float* P, const RowsGeo& g, const float* wt, const int64_t* poff, const int64_t* toff, float* tile,
                        int64_t o0, int64_t kh0, int64_t kh1, const float* bias, Clamp c) {
    v16 acc[OB][NV];
#pragma GCC unroll 8
    for (int ob = 0; ob < OB; ++ob) {
        const v16 b = bcast(bias ? bias[o0 + ob] : 0.0f);
#pragma GCC unroll 8
        for (int i = 0; i < NV; ++i) acc[ob][i] = b;
    }
    for (int64_t ci = 0; ci < g.C; ++ci)
        for (int64_t kh = kh0; kh < kh1; ++kh) {
            const float* pr = P + ci * g.plane + kh * g.Wp;
            const float* wk = wt + (ci * g.KH + kh) * g.KW * g.O + o0;
            for (int64_t kw = 0; kw < g.KW; ++kw, wk += g.O) {
                v16 x[NV];
#pragma GCC unroll 8
                for (int i = 0; i < NV; ++i) x[i] = ld16(pr + poff[i] + kw);
#pragma GCC unroll 8
                for (int ob = 0; ob < OB; ++ob) {
                    const v16 w = bcast(wk[ob]);
#pragma GCC unroll 8
                    for (int i = 0; i < NV; ++i) acc[ob][i] += w * x[i];
                }
            }
        }
    const v16 lo = splat(c.lo), hi = splat(c.hi);
#pragma GCC unroll 8
    for (int ob = 0; ob < OB; ++ob)
#pragma GCC unroll 8
        for (int i = 0; i < NV; ++i) {
            v16 v = acc[ob][i];
            v = v < lo ? lo : v;  // NaN passes both
            v = v > hi ? hi : v;
            st16(tile + (o0 + ob) * g.tplane + toff[i], v);
        }
}
// Up to 8 output channels at a time; column vectors per call so that OB x NV sums (8-18) keep the FMA
// units busy and fit the registers with the NV loads.
constexpr int kOutBlock = 8;
constexpr int vectors_for(int ob) { return ob <= 4 ? 4 : ob <= 6 ? 3 : 2; }
using OutBlockFn = void (*)(const float*, const RowsGeo&, const float*, const int64_t*, const int64_t*, float*, int64_t, int64_t, int64_t,
                            const float*, Clamp);
template <int... OB>
constexpr OutBlockFn out_block_for(int ob, std::integer_sequence<int, OB...>) {
    OutBlockFn f = nullptr;
    ((f = ob == OB + 1 ? &out_block<OB + 1, vectors_for(OB + 1)> : f), ...);
    return f;
}

// Run f(thread, begin, end) over [0, n) in static chunks on at most `threads` OpenMP threads (the per-thread
// scratch prepared for them).
template <class F>
void chunks(int64_t n, int threads, F&& f) {
    const int nthr = std::max(1, std::min<int>({omp_get_max_threads(), threads, int(std::max<int64_t>(n, 1))}));
    if (nthr == 1) {
        f(0, int64_t(0), n);
        return;
    }
#pragma omp parallel num_threads(nthr)
    {
        const int t = omp_get_thread_num();
        const int64_t chunk = (n + omp_get_num_threads() - 1) / omp_get_num_threads();
        const int64_t begin = std::min(n, t * chunk), end = std::min(n, begin + chunk);
        if (begin < end) f(t, begin, end);
    }
}

// Storage offset of each weight element in logical (o, c, kh, kw) order.
std::vector<int64_t> storage_offsets(const TensorDesc& w) {
    if (w.layout == Layout::Blocked) return w.blocking.offsets();
    const Dims d = dims_of(w);
    std::vector<int64_t> off;
    off.reserve(size_t(w.numel()));
    for (int64_t o = 0; o < d.N; ++o)
        for (int64_t c = 0; c < d.C; ++c)
            for (int64_t h = 0; h < d.H; ++h)
                for (int64_t x = 0; x < d.W; ++x) off.push_back(o * d.sn + c * d.sc + h * d.sh + x * d.sw);
    return off;
}

// The planar row length: the output's column vectors (Wv columns) read KW - 1 columns past them, and the
// source's columns are copied 16 at a time.
int64_t planar_width(int64_t Wv, int64_t KW, int64_t left, int64_t W) {
    return std::max(Wv + KW - 1, left + (W + kLanes - 1) / kLanes * kLanes);
}

// Image bands: rows of the output per work item, so that a batch smaller than twice the threads still
// splits, and the band's planar scratch (C channels, rows + KH - 1 rows of Wp) stays within kBandBytes.
int64_t band_rows(int64_t N, int64_t OH, int64_t KH, int64_t C, int64_t Wp, int threads) {
    int64_t rows = N >= 2 * threads ? OH : std::max<int64_t>(1, (OH * N + 2 * threads - 1) / (2 * threads) / N);
    const int64_t fit = kBandBytes / int64_t(sizeof(float)) / (C * Wp) - KH + 1;
    return std::clamp<int64_t>(std::min(rows, fit), 1, OH);
}

// The node's kernel for storage types T (x, w) and Y (y). The window table wt[c][kh][kw][o] = w[o][c][kh][kw]
// (the weight through its storage offsets) is built at each run, before the bands.
template <class T, class Y>
std::unique_ptr<Kernel> forward_kernel(const KernelArgs& a) {
    const auto& at = attrs_as<ConvAttrs>(a.node);
    const TensorDesc& wd = a.in_desc(1);
    const Dims s = dims_of(a.in_desc(0)), d = dims_of(a.out_desc(0));
    const int64_t KH = wd.shape[2], KW = wd.shape[3], top = at.pad[0], left = at.pad[1], CKK = s.C * KH * KW;
    const int threads = omp_get_max_threads();
    const int64_t nv = (d.W + kLanes - 1) / kLanes, Wv = nv * kLanes, Wp = planar_width(Wv, KW, left, s.W);
    const int64_t brows = band_rows(d.N, d.H, KH, s.C, Wp, threads), bands = (d.H + brows - 1) / brows;
    const RowsGeo g{s.C, d.C, KH, KW, Wp, (brows + KH - 1) * Wp, brows * Wv};
    const int64_t per_thread = s.C * g.plane + d.C * g.tplane;
    auto scratch = std::make_shared<std::vector<float>>(size_t(threads * per_thread + CKK * d.C));
    auto offsets = std::make_shared<const std::vector<int64_t>>(storage_offsets(wd));
    const PermuteFn de = permute_for(s.C, false), inter = permute_for(d.C, true);
    const T *src = static_cast<const T*>(a.in[0]), *w = static_cast<const T*>(a.in[1]);
    const float* bias = at.bias ? static_cast<const float*>(a.in[2]) : nullptr;
    Y* dst = static_cast<Y*>(a.out[0]);
    const Clamp clamp = clamp_of(a.node);
    return std::make_unique<FunctionKernel>([=](const RunContext&) {
        float* wt = scratch->data() + threads * per_thread;
        for (int64_t o = 0; o < d.C; ++o)
            for (int64_t e = 0; e < CKK; ++e) wt[e * d.C + o] = ld(w, (*offsets)[size_t(o * CKK + e)]);
        chunks(d.N * bands, threads, [&](int t, int64_t begin, int64_t end) {
            float* P = scratch->data() + t * per_thread;
            float* tile = P + s.C * g.plane;
            for (int64_t item = begin; item < end; ++item) {
                const int64_t n = item / bands, o_b = item % bands * brows, br = std::min(d.H, o_b + brows) - o_b;
                fill_planar(src, s, de, n, top, left, o_b, br + KH - 1, Wp, g.plane, P);
                // the band's column vectors, row by row, NV at a time (the last group repeats its last vector)
                const int64_t count = br * nv;
                for (int64_t o0 = 0; o0 < d.C; o0 += kOutBlock) {
                    const int ob = int(std::min<int64_t>(kOutBlock, d.C - o0)), NV = vectors_for(ob);
                    const OutBlockFn f = out_block_for(ob, std::make_integer_sequence<int, kOutBlock>{});
                    for (int64_t j0 = 0; j0 < count; j0 += NV) {
                        int64_t poff[4], toff[4];
                        for (int i = 0; i < NV; ++i) {
                            const int64_t j = std::min(count - 1, j0 + i), r = j / nv, v = j % nv;
                            poff[i] = r * Wp + v * kLanes, toff[i] = r * Wv + v * kLanes;
                        }
                        // taps whose planar row holds source data for some row of the group
                        const int64_t r_min = j0 / nv, r_max = std::min(count - 1, j0 + NV - 1) / nv;
                        const int64_t kh0 = std::max<int64_t>(0, top - o_b - r_max), kh1 = std::min(KH, top + s.H - o_b - r_min);
                        f(P, g, wt, poff, toff, tile, o0, kh0, std::max(kh0, kh1), bias, clamp);
                    }
                }
                for (int64_t r = 0; r < br; ++r) store_row(tile + r * Wv, g.tplane, d, inter, dst + n * d.sn + (o_b + r) * d.sh);
            }
        });
    });
}

// ---- backward-data into fewer channels than a vector (LeNet-5's conv2, 16 -> 6) ----
// dX[n][ih][iw][c] = sum over (kh, kw, o) of dY[n][ih + top - kh][iw + left - kw][o] w[o][c][kh][kw]. In nhwc a
// pixel of dY is whole vectors of output channels, so each (input pixel, channel) keeps a vector of partial
// sums over o: P pixels x C channels of them in registers, the C weight vectors of a tap (table
// wt[kh][kw][o / 16][c][o % 16]) shared by the P pixels, taps that leave dY skipped rather than multiplied by
// padding. The P x C vectors are then summed across their lanes 16 at a time (sums16) into dX's P x C
// contiguous values. f32 only: in bf16, this loop over widened dY and a variant pairing adjacent taps in
// AVX512_BF16's vdpbf16ps (half the products) both ran within noise of oneDNN's bf16 backward-data (LeNet-5
// b64, 2 threads, min of 15: 193 -> 184 us; b16: 52 -> 57; one thread 365 -> 311).

// Lane l of the result: the sum of v[l]'s lanes. Four levels of shuffles and adds, each halving the
// partial sums per vector; they leave the sum of input i in lane kSumLane[i], an involution, so the inputs
// are read through it.
JOULE_INLINE JOULE_V4 v16 sums16(const v16* v) {
    constexpr int kSumLane[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};
    v16 b[8], c[4], d[2];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {  // 256-bit halves: lanes 0-7 hold input kSumLane[j]'s, 8-15 kSumLane[j + 8]'s
        const v16 p = v[kSumLane[j]], q = v[kSumLane[j + 8]];
        b[j] = __builtin_shuffle(p, q, i32x16{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}) +
               __builtin_shuffle(p, q, i32x16{8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31});
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j)  // 128-bit quarters
        c[j] = __builtin_shuffle(b[j], b[j + 4], i32x16{0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27}) +
               __builtin_shuffle(b[j], b[j + 4], i32x16{4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31});
#pragma GCC unroll 2
    for (int j = 0; j < 2; ++j)  // pairs within a quarter
        d[j] = __builtin_shuffle(c[j], c[j + 2], i32x16{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29}) +
               __builtin_shuffle(c[j], c[j + 2], i32x16{2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31});
    return __builtin_shuffle(d[0], d[1], i32x16{0, 2, 16, 18, 4, 6, 20, 22, 8, 10, 24, 26, 12, 14, 28, 30}) +
           __builtin_shuffle(d[0], d[1], i32x16{1, 3, 17, 19, 5, 7, 21, 23, 9, 11, 25, 27, 13, 15, 29, 31});
}

// The first n of K vectors' lane sums into dx (n contiguous values).
template <int K>
JOULE_INLINE JOULE_V4 void store_sums(const v16* acc, int64_t n, float* dx) {
#pragma GCC unroll 4
    for (int g = 0; g < (K + kLanes - 1) / kLanes; ++g) {
        v16 v[kLanes];
#pragma GCC unroll 16
        for (int i = 0; i < kLanes; ++i) v[i] = g * kLanes + i < K ? acc[g * kLanes + i] : v16{};
        st16_block(dx, sums16(v), n, g);
    }
}

// Pixels per block for C channels: P x C sums, the C weights and a dY vector within the 32 registers.
constexpr int kMaxDataChannels = 8;
constexpr int pixels_for(int C) { return std::min(16, (31 - C) / C); }

// P (at most; pw here) pixels of one dX row from column iw = ow0 - left on, into dx (pw x C values): taps kh
// in [kh0, kh1) read dY row oh0 - kh of image dy (rows sh, pixels sw apart; OW columns), tap kw pixel j reads
// dY column ow0 + j - kw where that is within [0, OW).
template <int C, int P>
JOULE_V4 void dx_block(const float* dy, int64_t sh, int64_t sw, int64_t OW, int64_t OB, int64_t KW, int64_t oh0, int64_t kh0, int64_t kh1,
                       int64_t ow0, int64_t pw, const float* wt, float* dx) {
    v16 acc[P * C];
#pragma GCC unroll 64
    for (int k = 0; k < P * C; ++k) acc[k] = v16{};
    for (int64_t kh = kh0; kh < kh1; ++kh) {
        const float* row = dy + (oh0 - kh) * sh;
        for (int64_t kw = 0; kw < KW; ++kw) {
            const int64_t jlo = std::max<int64_t>(0, kw - ow0), jhi = std::min(pw, OW + kw - ow0);
            const float* wk = wt + (kh * KW + kw) * OB * C * kLanes;
            const float* px = row + (ow0 - kw) * sw;
            for (int64_t ob = 0; ob < OB; ++ob, wk += C * kLanes, px += kLanes) {
                v16 w[C];
#pragma GCC unroll 16
                for (int c = 0; c < C; ++c) w[c] = ld16(wk + c * kLanes);
                if (jlo == 0 && jhi == P) {
#pragma GCC unroll 16
                    for (int j = 0; j < P; ++j) {
                        const v16 y = ld16(px + j * sw);
#pragma GCC unroll 16
                        for (int c = 0; c < C; ++c) acc[j * C + c] += y * w[c];
                    }
                } else {
#pragma GCC unroll 16
                    for (int j = 0; j < P; ++j)
                        if (j >= jlo && j < jhi) {
                            const v16 y = ld16(px + j * sw);
#pragma GCC unroll 16
                            for (int c = 0; c < C; ++c) acc[j * C + c] += y * w[c];
                        }
                }
            }
        }
    }
    store_sums<P * C>(acc, pw * C, dx);
}
using DxBlockFn = void (*)(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, const float*, float*);
template <int... C>
constexpr DxBlockFn dx_block_for(int c, std::integer_sequence<int, C...>) {
    DxBlockFn f = nullptr;
    ((f = c == C + 1 ? &dx_block<C + 1, pixels_for(C + 1)> : f), ...);
    return f;
}

// The node's kernel (f32 dY, w and dX). Its table is gathered at each run from the weight as stored, before
// the rows.
std::unique_ptr<Kernel> backward_data_kernel(const KernelArgs& a) {
    const auto& at = attrs_as<ConvAttrs>(a.node);
    const TensorDesc& wd = a.in_desc(1);
    const Dims yd = dims_of(a.in_desc(0)), xd = dims_of(a.out_desc(0));
    const int64_t KH = wd.shape[2], KW = wd.shape[3], C = xd.C, OB = yd.C / kLanes, top = at.pad[0], left = at.pad[1];
    const int P = pixels_for(int(C));
    const DxBlockFn f = dx_block_for(int(C), std::make_integer_sequence<int, kMaxDataChannels>{});
    // the table wt[kh][kw][o / 16][c][o % 16]: element i is the weight's element at storage offset from[i]
    auto from = std::make_shared<std::vector<int64_t>>(size_t(KH * KW * yd.C * C));
    const std::vector<int64_t> offsets = storage_offsets(wd);
    for (int64_t o = 0; o < yd.C; ++o)
        for (int64_t c = 0; c < C; ++c)
            for (int64_t kh = 0; kh < KH; ++kh)
                for (int64_t kw = 0; kw < KW; ++kw)
                    (*from)[size_t((((kh * KW + kw) * OB + o / kLanes) * C + c) * kLanes + o % kLanes)] = offsets[size_t(((o * C + c) * KH + kh) * KW + kw)];
    auto table = std::make_shared<std::vector<float>>(from->size());
    const float* dy = static_cast<const float*>(a.in[0]);
    const float* w = static_cast<const float*>(a.in[1]);
    float* dx = static_cast<float*>(a.out[0]);
    return std::make_unique<FunctionKernel>([=](const RunContext&) {
        float* wt = table->data();
        for (size_t i = 0; i < from->size(); ++i) wt[i] = w[(*from)[i]];
        parallel_chunks(xd.N * xd.H, [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
                const int64_t n = r / xd.H, ih = r % xd.H, oh0 = ih + top;
                const int64_t kh0 = std::max<int64_t>(0, oh0 - yd.H + 1), kh1 = std::max(kh0, std::min(KH, oh0 + 1));
                for (int64_t iw = 0; iw < xd.W; iw += P)
                    f(dy + n * yd.sn, yd.sh, yd.sw, yd.W, OB, KW, oh0, kh0, kh1, iw + left, std::min<int64_t>(P, xd.W - iw), wt,
                      dx + n * xd.sn + ih * xd.sh + iw * xd.sw);
            }
        });
    });
}

// ---- backward-weights of a convolution with fewer output channels than a vector (LeNet-5's conv1, 1 -> 6) ----
// dW[o][c][kh][kw] = sum over (n, oh, ow) of dY[n][o][oh][ow] x[n][c][oh + kh - top][ow + kw - left], over the
// same planar copies as the forward: each image band's x (zero padding around it) and dY (zero columns past
// OW) de-interleaved once, then per (c, kh) and block of OB output channels, OB x KW vector sums in registers
// over the band's column vectors -- dY's vector of output channel o times x's row shifted by kw -- added
// into the thread's partial sums, whose lanes and threads are summed at the end.
constexpr int kMaxWeightWidth = 7;
constexpr int kMaxWeightBlock = 8;
// Output channels per block for a window KW wide: OB x KW sums, OB dY vectors and an x vector in registers.
constexpr int weight_block_for(int KW) { return std::min(kMaxWeightBlock, 31 / (KW + 1)); }
template <int OB, int KW>
JOULE_V4 void dw_block(const float* X, int64_t Wp, const float* D, int64_t dplane, int64_t Wv, int64_t rows, float* part, int64_t ostride) {
    v16 acc[OB][KW];
#pragma GCC unroll 8
    for (int ob = 0; ob < OB; ++ob)
#pragma GCC unroll 8
        for (int kw = 0; kw < KW; ++kw) acc[ob][kw] = v16{};
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t v = 0; v < Wv; v += kLanes) {
            const float *xr = X + r * Wp + v, *dr = D + r * Wv + v;
            v16 d[OB];
#pragma GCC unroll 8
            for (int ob = 0; ob < OB; ++ob) d[ob] = ld16(dr + ob * dplane);
            // each shifted x row loaded once into a register (GCC would otherwise fold the load into every
            // product: OB unaligned loads, most across two cache lines)
            v16 x[KW];
#pragma GCC unroll 8
            for (int kw = 0; kw < KW; ++kw) {
                x[kw] = ld16(xr + kw);
                __asm__("" : "+v"(x[kw]));
            }
#pragma GCC unroll 8
            for (int kw = 0; kw < KW; ++kw)
#pragma GCC unroll 8
                for (int ob = 0; ob < OB; ++ob) acc[ob][kw] += d[ob] * x[kw];
        }
#pragma GCC unroll 8
    for (int ob = 0; ob < OB; ++ob)
#pragma GCC unroll 8
        for (int kw = 0; kw < KW; ++kw) st16(part + (ob * ostride + kw) * kLanes, ld16(part + (ob * ostride + kw) * kLanes) + acc[ob][kw]);
}
using DwBlockFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, int64_t, float*, int64_t);
template <int KW, int... OB>
constexpr DwBlockFn dw_block_for(int ob, std::integer_sequence<int, OB...>) {
    DwBlockFn f = nullptr;
    ((f = ob == OB + 1 && OB + 1 <= weight_block_for(KW) ? &dw_block<OB + 1, KW> : f), ...);
    return f;
}
template <int... KW>
constexpr DwBlockFn dw_block_for(int ob, int kw, std::integer_sequence<int, KW...>) {
    DwBlockFn f = nullptr;
    ((f = kw == KW + 1 ? dw_block_for<KW + 1>(ob, std::make_integer_sequence<int, kMaxWeightBlock>{}) : f), ...);
    return f;
}

// The sums of dY's planar channels [0, O) (n elements each, plane apart) added into part[o].
JOULE_V4 void bias_sums(const float* D, int64_t O, int64_t plane, int64_t n, float* part) {
    for (int64_t o = 0; o < O; ++o) {
        v16 s0{}, s1{};
        int64_t i = 0;
        for (; i + 2 * kLanes <= n; i += 2 * kLanes) s0 += ld16(D + o * plane + i), s1 += ld16(D + o * plane + i + kLanes);
        for (; i < n; i += kLanes) s0 += ld16(D + o * plane + i);
        st16(part + o * kLanes, ld16(part + o * kLanes) + s0 + s1);
    }
}

// The node's kernel (f32 dY, x, dW and dB, when the node has a bias).
std::unique_ptr<Kernel> backward_weights_kernel(const KernelArgs& a) {
    const auto& at = attrs_as<ConvAttrs>(a.node);
    const TensorDesc& wd = a.out_desc(0);
    const Dims dyd = dims_of(a.in_desc(0)), s = dims_of(a.in_desc(1));
    const int64_t O = dyd.C, C = s.C, KH = wd.shape[2], KW = wd.shape[3], top = at.pad[0], left = at.pad[1], CKK = C * KH * KW;
    const int threads = omp_get_max_threads();
    const int64_t Wv = (dyd.W + kLanes - 1) / kLanes * kLanes, Wp = planar_width(Wv, KW, left, s.W);
    const int64_t brows = band_rows(dyd.N, dyd.H, KH, 1, C * Wp + O * Wv, threads), bands = (dyd.H + brows - 1) / brows;
    // output channels in equal blocks of at most weight_block_for(KW); dY's planar copy has zero planes up to
    // blocks x OB
    const int64_t blocks = (O + weight_block_for(int(KW)) - 1) / weight_block_for(int(KW)), OB = (O + blocks - 1) / blocks;
    const DwBlockFn f = dw_block_for(int(OB), int(KW), std::make_integer_sequence<int, kMaxWeightWidth>{});
    const int64_t xplane = (brows + KH - 1) * Wp, dplane = brows * Wv, Op = blocks * OB;
    const int64_t scratch_floats = C * xplane + Op * dplane, parts = Op * CKK + O;  // per thread: floats, partial sums
    auto scratch = std::make_shared<std::vector<float>>(size_t(threads * (scratch_floats + parts * kLanes)));  // zero planes stay zero
    auto offsets = std::make_shared<const std::vector<int64_t>>(storage_offsets(wd));
    const PermuteFn de_x = permute_for(C, false), de_dy = permute_for(O, false);
    const float *dy = static_cast<const float*>(a.in[0]), *src = static_cast<const float*>(a.in[1]);
    float* dw = static_cast<float*>(a.out[0]);
    float* db = at.bias ? static_cast<float*>(a.out[1]) : nullptr;
    return std::make_unique<FunctionKernel>([=](const RunContext&) {
        float* base = scratch->data();
        float* parts0 = base + threads * scratch_floats;  // [thread][part][lane]
        std::fill(parts0, parts0 + threads * parts * kLanes, 0.0f);
        chunks(dyd.N * bands, threads, [&](int t, int64_t begin, int64_t end) {
            float* X = base + t * scratch_floats;
            float* D = X + C * xplane;
            float* part = parts0 + t * parts * kLanes;
            for (int64_t item = begin; item < end; ++item) {
                const int64_t n = item / bands, o_b = item % bands * brows, br = std::min(dyd.H, o_b + brows) - o_b;
                fill_planar(src, s, de_x, n, top, left, o_b, br + KH - 1, Wp, xplane, X);
                fill_planar(dy, dyd, de_dy, n, 0, 0, o_b, br, Wv, dplane, D);
                for (int64_t c = 0; c < C; ++c)
                    for (int64_t kh = 0; kh < KH; ++kh)
                        for (int64_t o0 = 0; o0 < O; o0 += OB)
                            f(X + c * xplane + kh * Wp, Wp, D + o0 * dplane, dplane, Wv, br, part + ((o0 * C + c) * KH + kh) * KW * kLanes, CKK);
                if (db) bias_sums(D, O, dplane, br * Wv, part + Op * CKK * kLanes);
            }
        });
        // the partial sums' lanes and threads, into dW (through its storage offsets) and dB
        auto total = [&](int64_t i) {
            v16 sum{};
            for (int t = 0; t < threads; ++t) sum += ld16(parts0 + (t * parts + i) * kLanes);
            return hsum(sum);
        };
        for (int64_t i = 0; i < O * CKK; ++i) dw[(*offsets)[size_t(i)]] = total(i);
        for (int64_t o = 0; db && o < O; ++o) db[o] = total(Op * CKK + o);
    });
}
#endif
}  // namespace

bool conv_small_applies(const Node& n, const TensorDesc& in, const TensorDesc& w, const TensorDesc& out) {
#if defined(__x86_64__)
    const auto& a = attrs_as<ConvAttrs>(n);
    if (!kHasV4 || a.groups != 1 || a.stride[0] != 1 || a.stride[1] != 1 || a.dilation[0] != 1 || a.dilation[1] != 1) return false;
    // activations in plain layouts (dW in any: written through its storage offsets)
    const bool weights = n.kind == OpKind::ConvBackwardWeights;
    if (in.layout == Layout::Blocked || (out.layout == Layout::Blocked && !weights) || (w.layout == Layout::Blocked && weights) || w.dtype != in.dtype)
        return false;
    const bool types = (in.dtype == DType::F32 && out.dtype == DType::F32) || (in.dtype == DType::BF16 && (out.dtype == DType::BF16 || out.dtype == DType::F32));
    if (!types) return false;
    if (n.kind == OpKind::Conv2d) return out.shape[1] <= kMaxSmallChannels;  // (x, w) -> y, any plain layout
    // (dY, x) -> dW: few output channels, a window within the blocks; f32 only (oneDNN's bf16 backward-weights
    // runs at twice its f32 speed here, and ahead of this loop over bf16 widened to f32)
    if (weights) return in.dtype == DType::F32 && in.shape[1] <= kMaxSmallChannels && out.shape[3] <= kMaxWeightWidth;
    // (dY, w) -> dX, both nhwc: whole vectors of dY's channels, dX's within the register blocks
    return n.kind == OpKind::ConvBackwardData && in.layout == Layout::ChannelsLast && out.layout == Layout::ChannelsLast &&
           in.shape[1] % kLanes == 0 && out.shape[1] <= kMaxDataChannels && in.dtype == DType::F32;
#else
    (void)n, (void)in, (void)w, (void)out;
    return false;
#endif
}

std::unique_ptr<Kernel> make_conv_small(const KernelArgs& a) {
#if defined(__x86_64__)
    if (!conv_small_applies(a.node, a.in_desc(0), a.in_desc(1), a.out_desc(0))) return nullptr;
    const bool f32 = a.in_desc(0).dtype == DType::F32, f32_out = a.out_desc(0).dtype == DType::F32;
    if (a.node.kind == OpKind::ConvBackwardWeights) return backward_weights_kernel(a);
    if (a.node.kind == OpKind::ConvBackwardData) return backward_data_kernel(a);
    return f32 ? forward_kernel<float, float>(a) : f32_out ? forward_kernel<uint16_t, float>(a) : forward_kernel<uint16_t, uint16_t>(a);
#else
    (void)a;
    return nullptr;
#endif
}

}  // namespace joule::cpu
