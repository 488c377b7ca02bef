// Max, average and global-average pooling on oneDNN pooling primitives. Max pooling's workspace is
// the graph's explicit arg-max tensor: oneDNN's workspace holds the same thing (the index kh * KW + kw
// inside the window, u8 up to 255 elements, in the output's layout), checked when the kernel is prepared.
// Max-pooling backward over windows that tile the image, in nhwc, is a loop of joule's own (below).
#include <immintrin.h>

#include <bit>
#include <cstring>

#include "backend/cpu/kernels.hpp"
#include "backend/cpu/vec.hpp"

namespace joule::cpu {

namespace {
using namespace dnnl;

struct PoolGeometry {
    algorithm alg;
    memory::dims strides, kernel, pad_l, pad_r;
};
PoolGeometry pool_geometry(const Node& n, const TensorDesc& x) {
    switch (n.kind) {
        case OpKind::GlobalAvgPool: case OpKind::GlobalAvgPoolBackward:
            return {algorithm::pooling_avg_exclude_padding, {1, 1}, {x.shape[2], x.shape[3]}, {0, 0}, {0, 0}};
        default: {
            const auto& a = attrs_as<PoolAttrs>(n);
            const bool max = n.kind == OpKind::MaxPool2d || n.kind == OpKind::MaxPool2dBackward;
            return {max ? algorithm::pooling_max : algorithm::pooling_avg_include_padding, {a.stride[0], a.stride[1]},
                    {a.kernel[0], a.kernel[1]}, {a.pad[0], a.pad[1]}, {a.pad[0], a.pad[1]}};
        }
    }
}
std::string pool_key(const PoolGeometry& g, const TensorDesc& x, const TensorDesc& y) {
    std::string k = key_of(x) + key_of(y) + std::to_string(int(g.alg));
    for (const auto* v : {&g.strides, &g.kernel, &g.pad_l}) k += "," + std::to_string((*v)[0]) + "," + std::to_string((*v)[1]);
    return k;
}

// The arg-max tensor as oneDNN's workspace: same element type, same dims, same (dst) layout.
memory argmax_memory(const KernelArgs& a, const memory::desc& ws, const TensorDesc& argmax, void* p) {
    const memory::desc want = md_of(argmax);
    if (ws != want)
        throw InternalError("op '" + a.node.name + "': oneDNN's max-pooling workspace is not the arg-max tensor " + desc_str(argmax));
    return a.mem(ws, p);
}
// MaxPool2dBackward in nhwc where the windows tile the image (stride = window, no padding: LeNet-5's and
// VGG's 2x2 pools), a loop of joule's own: each element is in one window at most, so an input row (n, ih)
// is window row oh = ih / KH's gradients, stored where the arg-max names the element (row kh = ih % KH of
// its window) and zero elsewhere -- one write per element, no zeroing pass, no sums. oneDNN 2.6's jit
// backward zeroes dX, then goes window by window per 16-channel block. Against it, one process, 2 threads
// (a throwaway bench of this loop and the primitive on the same nhwc tensors, f32, 2x2 / 2): 6 channels
// 28x28 (LeNet-5) 1.5x faster, 64-512 channels 14x14-224x224 (VGG) 1.1-3.5x faster, but 16 and 32 channels
// 10x10 1.2-1.4x slower (this loop's u8 compare vectorises 32 or 64 channels at a time; 16 run scalar), so
// those stay on oneDNN, as do overlapping windows (a summing row loop of this kind lost on ResNet's 3x3 / 2).
// With AVX-512 the channels of a window go 16 at a time under masks (max_pool_backward_row_v4): LeNet-5's
// pool1 (6 channels) 2.4x faster than the scalar loop, one thread; LeNet-5's pool2 (16 channels) ties oneDNN.
struct PoolRows {
    int64_t N, H, W, C, OH, OW, KH, KW;
};
// v (f32, or bf16's bits) where keep, else 0, as a bit mask: no branch in the scalar loop short channel counts run in
template <class T>
T masked(T v, bool keep) {
    if constexpr (std::is_same_v<T, float>) return std::bit_cast<float>(std::bit_cast<uint32_t>(v) & -uint32_t(keep));
    else return T(v & -T(keep));
}
// Input row kh of window row (dy, am); the columns past the last window zeroed.
template <class T, class A>
JOULE_X86_64_V4_CLONE void max_pool_backward_row(const PoolRows& g, const T* __restrict dy, const A* __restrict am, T* __restrict x, int64_t kh) {
    for (int64_t ow = 0; ow < g.OW; ++ow) {
        const T* __restrict d = dy + ow * g.C;
        const A* __restrict m = am + ow * g.C;
        for (int64_t kw = 0; kw < g.KW; ++kw, x += g.C) {
            const A code = A(kh * g.KW + kw);
            for (int64_t c = 0; c < g.C; ++c) x[c] = masked(d[c], m[c] == code);
        }
    }
    std::memset(static_cast<void*>(x), 0, size_t((g.W - g.OW * g.KW) * g.C) * sizeof(T));
}
#if defined(__x86_64__)
// The same row with AVX-512 masks (kHasV4): per window, its channels 16 at a time (a part masked) -- the
// arg-max codes loaded once, compared with each kw's, and dY loaded with the hits as a zeroing mask and stored
// under the channel mask; the scalar loop above runs each of few channels by itself.
JOULE_V4 inline __mmask16 lanes_of(int64_t n) { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1); }
JOULE_V4 inline __m128i codes_of(const uint8_t* m, __mmask16 lanes) { return _mm_maskz_loadu_epi8(lanes, m); }
JOULE_V4 inline __m512i codes_of(const int32_t* m, __mmask16 lanes) { return _mm512_maskz_loadu_epi32(lanes, m); }
JOULE_V4 inline __mmask16 hits(__m128i codes, int64_t code, __mmask16 lanes) { return _mm_mask_cmpeq_epi8_mask(lanes, codes, _mm_set1_epi8(char(code))); }
JOULE_V4 inline __mmask16 hits(__m512i codes, int64_t code, __mmask16 lanes) { return _mm512_mask_cmpeq_epi32_mask(lanes, codes, _mm512_set1_epi32(int(code))); }
JOULE_V4 inline void store_kept(float* x, const float* d, __mmask16 lanes, __mmask16 hit) {
    _mm512_mask_storeu_ps(x, lanes, _mm512_maskz_loadu_ps(hit, d));
}
JOULE_V4 inline void store_kept(uint16_t* x, const uint16_t* d, __mmask16 lanes, __mmask16 hit) {
    _mm256_mask_storeu_epi16(x, lanes, _mm256_maskz_loadu_epi16(hit, d));
}
template <class T, class A>
JOULE_V4 void max_pool_backward_row_v4(const PoolRows& g, const T* dy, const A* am, T* x, int64_t kh) {
    for (int64_t ow = 0; ow < g.OW; ++ow)
        for (int64_t c = 0; c < g.C; c += 16) {
            const __mmask16 lanes = lanes_of(g.C - c);
            const int64_t i = ow * g.C + c;
            const auto codes = codes_of(am + i, lanes);
            for (int64_t kw = 0; kw < g.KW; ++kw) store_kept(x + (ow * g.KW + kw) * g.C + c, dy + i, lanes, hits(codes, kh * g.KW + kw, lanes));
        }
    std::memset(static_cast<void*>(x + g.OW * g.KW * g.C), 0, size_t((g.W - g.OW * g.KW) * g.C) * sizeof(T));
}
#endif
template <class T, class A>
std::unique_ptr<Kernel> max_pool_backward_loop(const KernelArgs& a, const PoolRows g) {
    const T* dy = static_cast<const T*>(a.in[0]);
    const A* am = static_cast<const A*>(a.in[1]);
    T* dx = static_cast<T*>(a.out[0]);
    void (*row_loop)(const PoolRows&, const T*, const A*, T*, int64_t) = &max_pool_backward_row<T, A>;
#if defined(__x86_64__)
    if (kHasV4) row_loop = &max_pool_backward_row_v4<T, A>;
#endif
    return std::make_unique<FunctionKernel>([=](const RunContext&) {
        parallel_chunks(g.N * g.H, [&](int64_t begin, int64_t end) {
            const int64_t row = g.W * g.C;
            for (int64_t r = begin; r < end; ++r) {
                const int64_t n = r / g.H, ih = r % g.H, oh = ih / g.KH, o = (n * g.OH + oh) * g.OW * g.C;
                if (oh < g.OH)
                    row_loop(g, dy + o, am + o, dx + r * row, ih % g.KH);
                else  // below the last window
                    std::memset(static_cast<void*>(dx + r * row), 0, size_t(row) * sizeof(T));
            }
        });
    });
}
// The loop's node (above): windows tiling the image, fewer than 16 or at least 64 channels, nhwc, the
// gradients in the compute dtype (f32 or bf16), an arg-max of u8 or i32; else nullptr (oneDNN).
std::unique_ptr<Kernel> max_pool_backward(const KernelArgs& a) {
    const TensorDesc &dy = a.in_desc(0), &am = a.in_desc(1), &dx = a.out_desc(0);
    const auto& p = attrs_as<PoolAttrs>(a.node);
    const int64_t C = dx.shape[1];
    if (p.stride[0] != p.kernel[0] || p.stride[1] != p.kernel[1] || p.pad[0] != 0 || p.pad[1] != 0 || (C >= 16 && C < 64) ||
        dx.layout != Layout::ChannelsLast || dy.layout != Layout::ChannelsLast || am.layout != Layout::ChannelsLast || dy.dtype != dx.dtype ||
        dnnl_type(dx.dtype) != compute_type(a.node.compute))
        return nullptr;
    const PoolRows g{dx.shape[0], dx.shape[2], dx.shape[3], C, dy.shape[2], dy.shape[3], p.kernel[0], p.kernel[1]};
    const bool bf16 = dx.dtype == DType::BF16;
    switch (am.dtype) {
        case DType::U8: return bf16 ? max_pool_backward_loop<uint16_t, uint8_t>(a, g) : max_pool_backward_loop<float, uint8_t>(a, g);
        case DType::I32: return bf16 ? max_pool_backward_loop<uint16_t, int32_t>(a, g) : max_pool_backward_loop<float, int32_t>(a, g);
        default: return nullptr;
    }
}
}  // namespace

std::unique_ptr<Kernel> make_pool(const KernelArgs& a) {
    const bool forward = op_info(a.node.kind).grad != nullptr;
    if (a.node.kind == OpKind::MaxPool2dBackward)
        if (auto k = max_pool_backward(a)) return k;
    // forward: (X) -> (Y[, argmax]); MaxPool2dBackward: (dY, argmax) -> dX; avg backward: (dY) -> dX
    const TensorDesc& x = forward ? a.in_desc(0) : a.out_desc(0);
    const TensorDesc& y = forward ? a.out_desc(0) : a.in_desc(0);
    const PoolGeometry g = pool_geometry(a.node, x);
    const dt type = compute_type(a.node.compute);
    const memory::desc src = md_of(x), dst = md_of(y), csrc = with_type(src, type), cdst = with_type(dst, type);
    const std::string key = pool_key(g, x, y) + "t" + std::to_string(int(type));
    auto fwd = a.ctx.cache.get<pooling_forward>(key, [&] {
        return pooling_forward::primitive_desc({prop_kind::forward_training, g.alg, csrc, cdst, g.strides, g.kernel, g.pad_l, g.pad_r}, a.ctx.engine);
    });
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    StagedOutputs outs;
    const bool max = g.alg == algorithm::pooling_max;
    if (forward) {
        std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, compute_input(a, src, a.in[0], type)}, {DNNL_ARG_DST, outs.add(a, dst, a.out[0], type)}};
        if (max) args[DNNL_ARG_WORKSPACE] = argmax_memory(a, fwd->pd.workspace_desc(), a.out_desc(1), a.out[1]);
        k->add(fwd->prim, args);
        outs.finish(*k);
        return k;
    }
    auto e = a.ctx.cache.get<pooling_backward>(key, [&] {
        return pooling_backward::primitive_desc({g.alg, csrc, cdst, g.strides, g.kernel, g.pad_l, g.pad_r}, a.ctx.engine, fwd->pd);
    });
    std::unordered_map<int, memory> args = {{DNNL_ARG_DIFF_DST, compute_input(a, dst, a.in[0], type)}, {DNNL_ARG_DIFF_SRC, outs.add(a, src, a.out[0], type)}};
    if (max) args[DNNL_ARG_WORKSPACE] = argmax_memory(a, e->pd.workspace_desc(), a.in_desc(1), a.in[1]);
    k->add(e->prim, args);
    outs.finish(*k);
    return k;
}

}  // namespace joule::cpu
