// Softmax (f32: loops of joule's own, the forward under AVX-512; else oneDNN's softmax primitives), Embedding and
// SoftmaxCrossEntropy (loops: oneDNN has no gather/scatter or fused loss primitive in 2.6). Out-of-range indices
// or labels are a clear error.
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cpu/kernels.hpp"
#include "backend/cpu/vec.hpp"

namespace joule::cpu {

namespace {
using namespace dnnl;

constexpr int64_t kSmallTableBytes = 1 << 20;  // an embedding gradient summed in a table per thread up to this size

void check_indices(const int32_t* idx, int64_t n, int64_t limit, const std::string& node, const char* what) {
    for (int64_t i = 0; i < n; ++i)
        if (idx[i] < 0 || idx[i] >= limit)
            throw Error("op '" + node + "': " + what + " " + std::to_string(idx[i]) + " at position " + std::to_string(i) +
                        " is outside [0, " + std::to_string(limit) + ")");
}

// Softmax over rows of h f32 values as a loop of joule's own: each row (in L1) passes max, exp-and-sum (vec.hpp's
// exp16_nonpositive; a tail under 16 in one padded vector) and scale. oneDNN 2.6's softmax forward took 1.5x as
// long on BERT's attention rows ([8192, 128] f32, 2 threads: 262 against 176 us).
JOULE_INLINE void softmax_rows(const float* x, float* y, int64_t h, int64_t begin, int64_t end) {
    const int64_t full = h / kLanes * kLanes, tail = h - full;
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    for (int64_t r = begin; r < end; ++r) {
        const float* xr = x + r * h;
        float* yr = y + r * h;
        v16 m = splat(kNegInf), xt = splat(kNegInf);  // xt: the row's tail, padded with -inf (exp: 0)
        for (int64_t i = 0; i < full; i += kLanes) {
            const v16 v = ld16(xr + i);
            m = v > m ? v : m;
        }
        if (tail) {
            std::memcpy(&xt, xr + full, size_t(tail) * sizeof(float));
            m = xt > m ? xt : m;
        }
        float mx = m[0];
        for (int j = 1; j < kLanes; ++j) mx = m[j] > mx ? m[j] : mx;
        v16 s{};
        for (int64_t i = 0; i < full; i += kLanes) {
            const v16 e = exp16_nonpositive(ld16(xr + i) - mx);
            st16(yr + i, e);
            s += e;
        }
        if (tail) {
            const v16 e = exp16_nonpositive(xt - mx);
            std::memcpy(yr + full, &e, size_t(tail) * sizeof(float));
            s += e;
        }
        const float inv = 1.0f / hsum(s);
        for (int64_t i = 0; i < full; i += kLanes) st16(yr + i, ld16(yr + i) * inv);
        for (int64_t i = full; i < h; ++i) yr[i] *= inv;
    }
}
JOULE_V4 void softmax_rows_v4(const float* x, float* y, int64_t h, int64_t begin, int64_t end) { softmax_rows(x, y, h, begin, end); }

// Its backward, dX = Y (dY - sum(dY Y)) per row, stored in U: f32, or bf16 rounded as stored where the plan folded
// the Cast after it (stores_output_low). oneDNN's f32 primitive wrote f32, which a Cast node then read again.
template <class U>
JOULE_INLINE void softmax_backward_rows(const float* dy, const float* y, U* dx, int64_t h, int64_t begin, int64_t end) {
    const int64_t full = h / kLanes * kLanes;
    for (int64_t r = begin; r < end; ++r) {
        const float *dyr = dy + r * h, *yr = y + r * h;
        U* dxr = dx + r * h;
        v16 s{};
        for (int64_t i = 0; i < full; i += kLanes) s += ld16(dyr + i) * ld16(yr + i);
        float dot = hsum(s);
        for (int64_t i = full; i < h; ++i) dot += dyr[i] * yr[i];
        for (int64_t i = 0; i < full; i += kLanes) st16(dxr + i, ld16(yr + i) * (ld16(dyr + i) - dot));
        for (int64_t i = full; i < h; ++i) st(dxr, i, yr[i] * (dyr[i] - dot));
    }
}
template <class U>
JOULE_V4 void softmax_backward_rows_v4(const float* dy, const float* y, U* dx, int64_t h, int64_t begin, int64_t end) {
    softmax_backward_rows(dy, y, dx, h, begin, end);
}
template <class U>
std::unique_ptr<Kernel> softmax_backward_loop(const KernelArgs& a, int64_t h) {
    const float* dy = static_cast<const float*>(a.in[0]);
    const float* y = static_cast<const float*>(a.in[1]);
    U* dx = static_cast<U*>(a.out[0]);
    const int64_t rows = a.in_desc(1).numel() / h;
    return std::make_unique<FunctionKernel>([=](const RunContext&) {
        parallel_chunks(rows, [&](int64_t begin, int64_t end) {
            (kHasV4 ? softmax_backward_rows_v4<U> : softmax_backward_rows<U>)(dy, y, dx, h, begin, end);
        });
    });
}
}  // namespace

std::unique_ptr<Kernel> make_softmax(const KernelArgs& a) {
    const bool forward = a.node.kind == OpKind::Softmax;
    const TensorDesc& x = forward ? a.in_desc(0) : a.in_desc(1);
    const int64_t h = x.shape.back();
    if (forward && kHasV4 && x.dtype == DType::F32 && a.out_desc(0).dtype == DType::F32 && a.node.compute == DType::F32) {
        const float* in = static_cast<const float*>(a.in[0]);
        float* out = static_cast<float*>(a.out[0]);
        const int64_t rows = x.numel() / h;
        return std::make_unique<FunctionKernel>([=](const RunContext&) {
            parallel_chunks(rows, [&](int64_t begin, int64_t end) { softmax_rows_v4(in, out, h, begin, end); });
        });
    }
    if (!forward && a.node.compute == DType::F32) {  // (dY, Y) in f32 (check_host_dtypes), dX in f32 or bf16
        JOULE_ASSERT(a.in_desc(0).dtype == DType::F32 && x.dtype == DType::F32, "op '" + a.node.name + "': an f32 softmax backward reads f32");
        return a.out_desc(0).dtype == DType::BF16 ? softmax_backward_loop<uint16_t>(a, h) : softmax_backward_loop<float>(a, h);
    }
    const dt type = compute_type(a.node.compute);
    const memory::desc data({x.numel() / h, h}, dnnl_type(x.dtype), tag::ab), cdata = with_type(data, type);
    const std::string key = key_of(x) + "t" + std::to_string(int(type));
    auto fwd = a.ctx.cache.get<softmax_forward>(key, [&] {
        return softmax_forward::primitive_desc({prop_kind::forward_training, cdata, 1}, a.ctx.engine);
    });
    if (forward) return src_to_dst_kernel(a, fwd->prim, data, type);
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    StagedOutputs outs;
    auto e = a.ctx.cache.get<softmax_backward>(key, [&] {
        return softmax_backward::primitive_desc({cdata, cdata, 1}, a.ctx.engine, fwd->pd);
    });
    k->add(e->prim, {{DNNL_ARG_DIFF_DST, compute_input(a, data, a.in[0], type)}, {DNNL_ARG_DST, compute_input(a, data, a.in[1], type)},
                     {DNNL_ARG_DIFF_SRC, outs.add(a, data, a.out[0], type)}});
    outs.finish(*k);
    return k;
}

std::unique_ptr<Kernel> make_embedding(const KernelArgs& a) {
    const std::string name = a.node.name;
    if (a.node.kind == OpKind::Embedding) {
        const int32_t* idx = static_cast<const int32_t*>(a.in[0]);
        const float* table = static_cast<const float*>(a.in[1]);
        float* y = static_cast<float*>(a.out[0]);
        const int64_t n = a.in_desc(0).numel(), vocab = a.in_desc(1).shape[0], dim = a.in_desc(1).shape[1];
        return std::make_unique<FunctionKernel>([=](const RunContext&) {
            check_indices(idx, n, vocab, name, "index");
            parallel_chunks(n, [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i) std::memcpy(y + i * dim, table + int64_t(idx[i]) * dim, size_t(dim) * sizeof(float));
            });
        });
    }
    const float* dy = static_cast<const float*>(a.in[0]);
    const int32_t* idx = static_cast<const int32_t*>(a.in[1]);
    float* dtable = static_cast<float*>(a.out[0]);
    const int64_t n = a.in_desc(1).numel(), vocab = a.out_desc(0).shape[0], dim = a.out_desc(0).shape[1];
    // A small table (BERT's position and token-type embeddings: 256 KB, 1 KB): each thread sums its own rows of dY
    // (the rows its producer wrote, in its cache) into a table of its own, thread 0's the gradient itself, and
    // the tables are then added up by rows. Split by columns instead, each thread read half of every row of dY,
    // half of them from the other core's cache: at bert-tiny b32, 4096 rows of 128, 221 us and 85 us (2 threads).
    // Only while the tables together are no larger than dY (many threads: the sums would outweigh dY's reads).
    const int64_t table = vocab * dim, partials = omp_get_max_threads() - 1;
    if (partials > 0 && table * int64_t(sizeof(float)) <= kSmallTableBytes && (partials + 1) * table <= n * dim) {
        auto others = std::make_shared<std::vector<float>>(size_t(partials * table));  // threads 1.. tables
        return std::make_unique<FunctionKernel>([=](const RunContext&) {
            check_indices(idx, n, vocab, name, "index");
#pragma omp parallel num_threads(int(std::min<int64_t>(omp_get_max_threads(), partials + 1)))
            {
                const int64_t t = omp_get_thread_num(), threads = omp_get_num_threads();
                float* own = t == 0 ? dtable : others->data() + (t - 1) * table;
                std::memset(own, 0, size_t(table) * sizeof(float));
                const auto [i0, i1] = thread_chunk(n, t, threads);  // the rows parallel_chunks gave the producer
                for (int64_t i = i0; i < i1; ++i) {
                    float* row = own + int64_t(idx[i]) * dim;
                    const float* g = dy + i * dim;
#pragma omp simd
                    for (int64_t d = 0; d < dim; ++d) row[d] += g[d];
                }
#pragma omp barrier
                const int64_t e0 = table * t / threads, e1 = table * (t + 1) / threads;
                for (int64_t o = 1; o < threads; ++o) {
                    const float* part = others->data() + (o - 1) * table;
#pragma omp simd
                    for (int64_t e = e0; e < e1; ++e) dtable[e] += part[e];
                }
            }
        });
    }
    return std::make_unique<FunctionKernel>([=](const RunContext&) {
        check_indices(idx, n, vocab, name, "index");
        // Zeroed by all threads (a word embedding's gradient is the whole table: BERT's 15.6 MB), then summed
        // parallel over the embedding dimension, each thread its own columns (whole 64-byte lines) in one pass
        // over the indices: no two threads touch the same element, and each gradient row it adds to is fetched
        // once (one pass per 16 columns fetched every row from memory again: 2.0 ms at bert-tiny b32).
        parallel_chunks(vocab, [&](int64_t begin, int64_t end) { std::memset(dtable + begin * dim, 0, size_t((end - begin) * dim) * sizeof(float)); });
        const int64_t lines = (dim + 15) / 16;
#pragma omp parallel
        {
            const int64_t t = omp_get_thread_num(), threads = omp_get_num_threads();
            const int64_t d0 = std::min(dim, lines * t / threads * 16), d1 = std::min(dim, lines * (t + 1) / threads * 16);
            constexpr int64_t kAhead = 8;  // rows fetched ahead: the indices are random, no prefetcher guesses them
            for (int64_t i = 0; i < n && d0 < d1; ++i) {
                if (i + kAhead < n) __builtin_prefetch(dtable + int64_t(idx[i + kAhead]) * dim + d0, 1);
                float* row = dtable + int64_t(idx[i]) * dim;
                const float* g = dy + i * dim;
#pragma omp simd
                for (int64_t d = d0; d < d1; ++d) row[d] += g[d];
            }
        }
    });
}

std::unique_ptr<Kernel> make_cross_entropy(const KernelArgs& a) {
    const std::string name = a.node.name;
    if (a.node.kind == OpKind::SoftmaxCrossEntropy) {
        const float* logits = static_cast<const float*>(a.in[0]);
        const int32_t* labels = static_cast<const int32_t*>(a.in[1]);
        float* loss = static_cast<float*>(a.out[0]);
        float* probs = static_cast<float*>(a.out[1]);
        const int64_t n = a.in_desc(0).shape[0], c = a.in_desc(0).shape[1];
        return std::make_unique<FunctionKernel>([=](const RunContext&) {
            check_indices(labels, n, c, name, "label");
            double total = 0;
            parallel_chunks(n, [&](int64_t begin, int64_t end) {
                double part = 0;
                for (int64_t i = begin; i < end; ++i) {
                    const float* z = logits + i * c;
                    float* p = probs + i * c;
                    float m = z[0];
                    for (int64_t j = 1; j < c; ++j) m = std::max(m, z[j]);
                    double s = 0;
                    for (int64_t j = 0; j < c; ++j) s += std::exp(double(z[j] - m));
                    const double log_s = std::log(s);
                    for (int64_t j = 0; j < c; ++j) p[j] = float(std::exp(double(z[j] - m) - log_s));
                    part += log_s - double(z[labels[i]] - m);
                }
#pragma omp atomic
                total += part;
            });
            loss[0] = float(total / double(n));
        });
    }
    const float* dloss = static_cast<const float*>(a.in[0]);
    const float* probs = static_cast<const float*>(a.in[1]);
    const int32_t* labels = static_cast<const int32_t*>(a.in[2]);
    float* dz = static_cast<float*>(a.out[0]);
    const int64_t n = a.in_desc(1).shape[0], c = a.in_desc(1).shape[1];
    return std::make_unique<FunctionKernel>([=](const RunContext&) {
        check_indices(labels, n, c, name, "label");
        const float s = dloss[0] / float(n);
        parallel_chunks(n, [&](int64_t begin, int64_t end) {
            for (int64_t i = begin; i < end; ++i)
                for (int64_t j = 0; j < c; ++j) dz[i * c + j] = s * (probs[i * c + j] - (j == labels[i] ? 1.0f : 0.0f));
        });
    });
}

}  // namespace joule::cpu
