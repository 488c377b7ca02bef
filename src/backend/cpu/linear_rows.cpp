// Linear over a few rows (M <= kFewRows: the classifiers of AlexNet and VGG at batch 1-4), forward, backward-data
// and backward-weights, as loops of joule's own. At these batches a layer's time is the time to stream its
// weight (fc6: 38 M weights) or to write its weight gradient, and oneDNN 2.6's GEMM-based inner product on
// plain weights runs well below memory speed there in bf16 (it packs the weight for a GEMM built for many
// rows; its brgemm product wants a blocked weight: bench/linear_formats.cpp). Here each loop reads the weight
// once, a few rows at a time in storage order, keeps the rows of x or dY on chip (as f32: bf16 ones converted
// once per call), and writes a weight gradient larger than the chip's caches with non-temporal stores (no read
// for ownership). f32 arithmetic over f32 or bf16 storage, x86-64-v4 only (AVX-512, vec.hpp); elsewhere, and
// past 4 rows (at 8 rows these loops measured behind oneDNN: AlexNet fc6 bf16 forward 0.86x, backward-data
// 0.95x), oneDNN runs these nodes. Measured against oneDNN on the same memory: bench/linear_rows.cpp.
#include <immintrin.h>

#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "backend/cpu/kernels.hpp"
#include "backend/cpu/vec.hpp"

namespace joule::cpu {

namespace {

#if defined(__x86_64__)
inline float apply(float v, Clamp c) { return v < c.lo ? c.lo : v > c.hi ? c.hi : v; }

// Operand `p` ([rows, cols]) as f32: itself, or bf16 converted into `scratch`.
const float* as_f32(const float* p, int64_t, float*) { return p; }
const float* as_f32(const uint16_t* p, int64_t n, float* scratch) {
    from_bf16(p, scratch, 0, n);
    return scratch;
}

// Forward, weight rows [n, n + R): y[m, n + r] = act(sum_k x[m, k] w[n + r, k] + b[n + r]) for every m < M.
template <int M, int R, class T, class Y>
JOULE_INLINE void forward_rows(const float* x, const T* w, const float* b, Y* y, int64_t K, int64_t N, int64_t n, Clamp c) {
    v16 acc[R][M] = {};
    const int64_t kv = K / kLanes * kLanes;
    for (int64_t k = 0; k < kv; k += kLanes) {
        v16 wv[R];
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) wv[r] = ld16(w + (n + r) * K + k);
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
            const v16 xv = ld16(x + m * K + k);
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) acc[r][m] += wv[r] * xv;
        }
    }
    for (int r = 0; r < R; ++r)
        for (int m = 0; m < M; ++m) {
            float s = hsum(acc[r][m]);
            for (int64_t k = kv; k < K; ++k) s += x[m * K + k] * ld(w, (n + r) * K + k);
            st(y, m * N + n + r, apply(b ? s + b[n + r] : s, c));
        }
}
// Rows [n0, n1) of the weight, R at a time: R x M sums in registers (8-16 independent chains at 2-4 rows,
// enough to keep the FMA units busy while the weight streams in).
template <int M, class T, class Y>
JOULE_V4 void forward_v4(const float* x, const T* w, const float* b, Y* y, int64_t K, int64_t N, int64_t n0, int64_t n1, Clamp c) {
    constexpr int R = 4;
    int64_t n = n0;
    for (; n + R <= n1; n += R) forward_rows<M, R>(x, w, b, y, K, N, n, c);
    for (; n < n1; ++n) forward_rows<M, 1>(x, w, b, y, K, N, n, c);
}

// Backward-data, columns [k0, k1) of dx: dx[m, k] = sum_n dy[m, n] w[n, k]. The weight is read a block of
// kRowBlock rows at a time, each row's part of [k0, k1) in storage order, KC vectors of columns at a time;
// the partial sums stay in `sums` (dx itself when it is f32) between blocks and the last block stores dx.
// (Blocks of 32 rows, 32 streams through memory at once, ran at half the speed of blocks of 8.)
constexpr int64_t kRowBlock = 8;
template <int M, int KC, class T, class Y>
JOULE_INLINE void backward_data_columns(const float* dy, const T* w, Y* dx, float* sums, int64_t K, int64_t N, int64_t k, int64_t n0, int64_t n1) {
    v16 acc[KC][M];
#pragma GCC unroll 8
    for (int j = 0; j < KC; ++j)
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) acc[j][m] = n0 == 0 ? v16{} : ld16(sums + m * K + k + j * kLanes);
    for (int64_t n = n0; n < n1; ++n) {
        v16 d[M];
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) d[m] = splat(dy[m * N + n]);
#pragma GCC unroll 8
        for (int j = 0; j < KC; ++j) {
            const v16 wv = ld16(w + n * K + k + j * kLanes);
#pragma GCC unroll 8
            for (int m = 0; m < M; ++m) acc[j][m] += d[m] * wv;
        }
    }
    for (int j = 0; j < KC; ++j)
        for (int m = 0; m < M; ++m) {
            if (n1 == N) st16(dx + m * K + k + j * kLanes, acc[j][m]);
            else st16(sums + m * K + k + j * kLanes, acc[j][m]);
        }
}
template <int M, class T, class Y>
JOULE_V4 void backward_data_v4(const float* dy, const T* w, Y* dx, float* sums, int64_t K, int64_t N, int64_t k0, int64_t k1) {
    constexpr int KC = M <= 2 ? 4 : 2;  // KC x M sums in registers: 4-8 independent chains
    const int64_t kv = k0 + (k1 - k0) / kLanes * kLanes;
    for (int64_t n0 = 0; n0 < N; n0 += kRowBlock) {
        const int64_t n1 = std::min(N, n0 + kRowBlock);
        int64_t k = k0;
        for (; k + KC * kLanes <= kv; k += KC * kLanes) backward_data_columns<M, KC>(dy, w, dx, sums, K, N, k, n0, n1);
        for (; k < kv; k += kLanes) backward_data_columns<M, 1>(dy, w, dx, sums, K, N, k, n0, n1);
    }
    for (int64_t k = kv; k < k1; ++k)  // the last columns, past the last whole vector
        for (int m = 0; m < M; ++m) {
            float s = 0;
            for (int64_t n = 0; n < N; ++n) s += dy[m * N + n] * ld(w, n * K + k);
            st(dx, m * K + k, s);
        }
}

// Backward-weights, weight rows [n0, n1): dw[n, k] = sum_m dy[m, n] x[m, k], db[n] = sum_m dy[m, n]. R rows
// at a time share the loads of x; `stream`: non-temporal stores (dw 64-byte aligned, K a multiple of 16).
template <int M, int R, class Y>
JOULE_INLINE JOULE_V4 void backward_weights_rows(const float* dy, const float* x, Y* dw, float* db, int64_t K, int64_t N, int64_t n, bool stream) {
    v16 d[R][M];
    for (int r = 0; r < R; ++r)
        for (int m = 0; m < M; ++m) d[r][m] = splat(dy[m * N + n + r]);
    const int64_t kv = K / kLanes * kLanes;
    for (int64_t k = 0; k < kv; k += kLanes) {
        v16 xv[M];
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) xv[m] = ld16(x + m * K + k);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            v16 s = d[r][0] * xv[0];
#pragma GCC unroll 8
            for (int m = 1; m < M; ++m) s += d[r][m] * xv[m];
            if constexpr (std::is_same_v<Y, float>) {
                if (stream) {
                    _mm512_stream_ps(dw + (n + r) * K + k, s);
                    continue;
                }
            }
            st16(dw + (n + r) * K + k, s);
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int64_t k = kv; k < K; ++k) {
            float s = 0;
            for (int m = 0; m < M; ++m) s += dy[m * N + n + r] * x[m * K + k];
            st(dw, (n + r) * K + k, s);
        }
        if (!db) continue;
        float s = 0;
        for (int m = 0; m < M; ++m) s += dy[m * N + n + r];
        db[n + r] = s;
    }
}
template <int M, class Y>
JOULE_V4 void backward_weights_v4(const float* dy, const float* x, Y* dw, float* db, int64_t K, int64_t N, int64_t n0, int64_t n1, bool stream) {
    constexpr int R = 4;
    int64_t n = n0;
    for (; n + R <= n1; n += R) backward_weights_rows<M, R>(dy, x, dw, db, K, N, n, stream);
    for (; n < n1; ++n) backward_weights_rows<M, 1>(dy, x, dw, db, K, N, n, stream);
    if (stream) _mm_sfence();
}

// f(std::integral_constant<int, M>) for the runtime row count m in [1, kFewRows].
static_assert(kFewRows == 4);
template <class F>
void with_rows(int64_t m, F&& f) {
    switch (m) {
        case 1: return f(std::integral_constant<int, 1>{});
        case 2: return f(std::integral_constant<int, 2>{});
        case 3: return f(std::integral_constant<int, 3>{});
        case 4: return f(std::integral_constant<int, 4>{});
    }
    throw InternalError("a few-row Linear of " + std::to_string(m) + " rows");
}

// The node's kernel for storage types T (x, w, dy) and Y (y, dx or dw).
template <class T, class Y>
std::unique_ptr<Kernel> rows_kernel(const KernelArgs& a, int64_t M, int64_t K, int64_t N) {
    const T *in0 = static_cast<const T*>(a.in[0]), *in1 = static_cast<const T*>(a.in[1]);
    Y* out = static_cast<Y*>(a.out[0]);
    const bool bias = attrs_as<LinearAttrs>(a.node).bias;
    if (a.node.kind == OpKind::Linear) {  // (x, w[, b]) -> y
        const float* b = bias ? static_cast<const float*>(a.in[2]) : nullptr;
        const Clamp c = clamp_of(a.node);
        auto scratch = std::make_shared<std::vector<float>>(std::is_same_v<T, float> ? 0 : M * K);
        return std::make_unique<FunctionKernel>([=](const RunContext&) {
            const float* x = as_f32(in0, M * K, scratch->data());
            with_rows(M, [&](auto m) {
                parallel_chunks(N, [&](int64_t n0, int64_t n1) { forward_v4<decltype(m)::value>(x, in1, b, out, K, N, n0, n1, c); });
            });
        });
    }
    if (a.node.kind == OpKind::LinearBackwardData) {  // (dy, w) -> dx; columns split among threads a vector at a time
        auto scratch = std::make_shared<std::vector<float>>(M * N + (std::is_same_v<Y, float> ? 0 : M * K));
        return std::make_unique<FunctionKernel>([=](const RunContext&) {
            float* sums = scratch->data() + M * N;
            const float* dy = as_f32(in0, M * N, scratch->data());
            if constexpr (std::is_same_v<Y, float>) sums = out;
            with_rows(M, [&](auto m) {
                parallel_chunks((K + kLanes - 1) / kLanes, [&](int64_t c0, int64_t c1) {
                    backward_data_v4<decltype(m)::value>(dy, in1, out, sums, K, N, c0 * kLanes, std::min(K, c1 * kLanes));
                });
            });
        });
    }
    // (dy, x) -> dw[, db]
    float* db = bias ? static_cast<float*>(a.out[1]) : nullptr;
    const bool stream = std::is_same_v<Y, float> && K % kLanes == 0 && reinterpret_cast<uintptr_t>(out) % 64 == 0 &&
                        N * K * int64_t(sizeof(float)) > kStreamBytes;
    auto scratch = std::make_shared<std::vector<float>>(std::is_same_v<T, float> ? 0 : M * (N + K));
    return std::make_unique<FunctionKernel>([=](const RunContext&) {
        const float* dy = as_f32(in0, M * N, scratch->data());
        const float* x = as_f32(in1, M * K, scratch->data() + (std::is_same_v<T, float> ? 0 : M * N));
        with_rows(M, [&](auto m) {
            parallel_chunks(N, [&](int64_t n0, int64_t n1) { backward_weights_v4<decltype(m)::value>(dy, x, out, db, K, N, n0, n1, stream); });
        });
    });
}
#endif

}  // namespace

std::unique_ptr<Kernel> make_linear_rows(const KernelArgs& a) {
#if defined(__x86_64__)
    if (!kHasV4) return nullptr;
    const bool bwd_weights = a.node.kind == OpKind::LinearBackwardWeights;
    const TensorDesc &rows = bwd_weights ? a.in_desc(1) : a.node.kind == OpKind::Linear ? a.in_desc(0) : a.out_desc(0);
    const TensorDesc& w = bwd_weights ? a.out_desc(0) : a.in_desc(1);
    const int64_t K = w.shape[1], N = w.shape[0], M = rows.numel() / K;
    const DType t = a.in_desc(0).dtype, y = a.out_desc(0).dtype;
    const bool grad_sum = a.node.kind == OpKind::LinearBackwardData && a.node.inputs.size() == 3;  // folded in: oneDNN's matmul adds it
    if (M < 1 || M > kFewRows || w.layout != Layout::Plain || grad_sum) return nullptr;
    // oneDNN's forward on one row, and on two in f32, already streams the weight at memory speed (its GEMV-like
    // path; bench/linear_rows.cpp, VGG fc6: one bf16 row 0.95x, two f32 rows 0.86-1.0x of it here)
    if (a.node.kind == OpKind::Linear && (M == 1 || (M == 2 && t == DType::F32))) return nullptr;
    if (t == DType::F32 && y == DType::F32) return rows_kernel<float, float>(a, M, K, N);
    if (t == DType::BF16 && y == DType::F32) return rows_kernel<uint16_t, float>(a, M, K, N);
    if (t == DType::BF16 && y == DType::BF16) return rows_kernel<uint16_t, uint16_t>(a, M, K, N);
#endif
    return nullptr;
}

}  // namespace joule::cpu
