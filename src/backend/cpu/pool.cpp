// Max, average and global-average pooling on oneDNN pooling primitives. Max pooling's workspace is
// the graph's explicit arg-max tensor: oneDNN's workspace holds the same thing (the index kh * KW + kw
// inside the window, u8 up to 255 elements, in the output's layout), checked when the kernel is prepared.
// Max-pooling backward over windows that tile the image, in nhwc, is a loop of joule's own (below). With an
// activation's backward folded in (Node::pre_op, (dY, argmax, Y_pool)), dY is masked where the activation's
// derivative at Y_pool is 0: in that loop as it reads dY, before oneDNN's primitive into a scratch copy.
#include <immintrin.h>

#include <bit>
#include <cstring>
#include <functional>

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
// without AVX-512 those stay on oneDNN, as do overlapping windows (a summing row loop of this kind lost on
// ResNet's 3x3 / 2). With AVX-512 the channels of a window go 16 at a time under masks
// (max_pool_backward_row_v4): LeNet-5's pool1 (6 channels) 2.4x faster than the scalar loop, one thread;
// LeNet-5's pool2 (16 channels) ties oneDNN, and runs here for the folded ReLU backward and bf16 store.
struct PoolRows {
    int64_t N, H, W, C, OH, OW, KH, KW;
};
// A folded activation backward (Node::pre_op, commuted by plan/'s fuse pass): dY passes where the activation's
// derivative at the pool's output is 1 -- ReLU: Y_pool > 0, ReLU6: 0 < Y_pool < 6 (NaN: not), as the reference.
enum class Pass { All, Relu, Relu6 };
template <Pass P>
bool passes(float y) {
    return P == Pass::All || (y > 0 && (P == Pass::Relu || y < 6));
}
// v (f32, or bf16's bits) in the output's type (an f32 node storing bf16: stores_output_low), zero unless keep,
// as a bit mask: no branch in the scalar loop short channel counts run in
template <class O, class T>
O masked(T v, bool keep) {
    if constexpr (std::is_same_v<O, float>) return std::bit_cast<float>(std::bit_cast<uint32_t>(v) & -uint32_t(keep));
    else if constexpr (std::is_same_v<T, float>) return O(f32_to_bf16(v) & -O(keep));
    else return O(v & -O(keep));
}
// Input row kh of window row (dy, am[, y_pool]); the columns past the last window zeroed.
template <class T, class O, class A, Pass P>
JOULE_X86_64_V4_CLONE void max_pool_backward_row(const PoolRows& g, const T* __restrict dy, const A* __restrict am, const T* __restrict yp,
                                                 O* __restrict x, int64_t kh) {
    for (int64_t ow = 0; ow < g.OW; ++ow) {
        const T* __restrict d = dy + ow * g.C;
        const A* __restrict m = am + ow * g.C;
        for (int64_t kw = 0; kw < g.KW; ++kw, x += g.C) {
            const A code = A(kh * g.KW + kw);
            for (int64_t c = 0; c < g.C; ++c) x[c] = masked<O>(d[c], m[c] == code && (P == Pass::All || passes<P>(ld(yp, ow * g.C + c))));
        }
    }
    std::memset(static_cast<void*>(x), 0, size_t((g.W - g.OW * g.KW) * g.C) * sizeof(O));
}
#if defined(__x86_64__)
// The same row with AVX-512 masks (kHasV4): per window, its channels 16 at a time (a part masked) -- the
// arg-max codes loaded once, compared with each kw's, dY loaded once under the lanes that pass (converted to
// the output's type), and stored under the channel mask with the hits kept; the scalar loop above runs each
// of few channels by itself.
JOULE_V4 inline __mmask16 lanes_of(int64_t n) { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1); }
JOULE_V4 inline __m128i codes_of(const uint8_t* m, __mmask16 lanes) { return _mm_maskz_loadu_epi8(lanes, m); }
JOULE_V4 inline __m512i codes_of(const int32_t* m, __mmask16 lanes) { return _mm512_maskz_loadu_epi32(lanes, m); }
JOULE_V4 inline __mmask16 hits(__m128i codes, int64_t code, __mmask16 lanes) { return _mm_mask_cmpeq_epi8_mask(lanes, codes, _mm_set1_epi8(char(code))); }
JOULE_V4 inline __mmask16 hits(__m512i codes, int64_t code, __mmask16 lanes) { return _mm512_mask_cmpeq_epi32_mask(lanes, codes, _mm512_set1_epi32(int(code))); }
JOULE_V4 inline __m512 load_f32(const float* p, __mmask16 lanes) { return _mm512_maskz_loadu_ps(lanes, p); }
JOULE_V4 inline __m512 load_f32(const uint16_t* p, __mmask16 lanes) { return __m512(widen_bf16x16(u16x16(_mm256_maskz_loadu_epi16(lanes, p)))); }
// dY's lanes in the output's type: f32, or bf16 bits (as stored, or rounded from f32)
template <class O>
JOULE_V4 inline auto load_as(const O* p, __mmask16 lanes) {
    if constexpr (std::is_same_v<O, float>) return _mm512_maskz_loadu_ps(lanes, p);
    else return _mm256_maskz_loadu_epi16(lanes, p);
}
template <class O>
JOULE_V4 inline __m256i load_as(const float* p, __mmask16 lanes) requires std::is_same_v<O, uint16_t> {
    return __m256i(to_bf16x16(v16(_mm512_maskz_loadu_ps(lanes, p))));
}
JOULE_V4 inline void store_kept(float* x, __m512 d, __mmask16 lanes, __mmask16 hit) { _mm512_mask_storeu_ps(x, lanes, _mm512_maskz_mov_ps(hit, d)); }
JOULE_V4 inline void store_kept(uint16_t* x, __m256i d, __mmask16 lanes, __mmask16 hit) {
    _mm256_mask_storeu_epi16(x, lanes, _mm256_maskz_mov_epi16(hit, d));
}
template <class T, class O, class A, Pass P>
JOULE_V4 void max_pool_backward_row_v4(const PoolRows& g, const T* dy, const A* am, const T* yp, O* x, int64_t kh) {
    const __m512 zero = _mm512_setzero_ps(), six = _mm512_set1_ps(6.0f);
    for (int64_t ow = 0; ow < g.OW; ++ow)
        for (int64_t c = 0; c < g.C; c += 16) {
            const __mmask16 lanes = lanes_of(g.C - c);
            const int64_t i = ow * g.C + c;
            __mmask16 pass = lanes;
            if constexpr (P != Pass::All) {
                const __m512 y = load_f32(yp + i, lanes);
                pass = _mm512_mask_cmp_ps_mask(lanes, y, zero, _CMP_GT_OQ);
                if constexpr (P == Pass::Relu6) pass = _mm512_mask_cmp_ps_mask(pass, y, six, _CMP_LT_OQ);
            }
            const auto codes = codes_of(am + i, pass);
            const auto d = load_as<O>(dy + i, pass);
            for (int64_t kw = 0; kw < g.KW; ++kw) store_kept(x + (ow * g.KW + kw) * g.C + c, d, lanes, hits(codes, kh * g.KW + kw, pass));
        }
    std::memset(static_cast<void*>(x + g.OW * g.KW * g.C), 0, size_t((g.W - g.OW * g.KW) * g.C) * sizeof(O));
}
#endif
template <class T, class O, class A, Pass P>
std::unique_ptr<Kernel> max_pool_backward_loop(const KernelArgs& a, const PoolRows g) {
    const T* dy = static_cast<const T*>(a.in[0]);
    const A* am = static_cast<const A*>(a.in[1]);
    const T* yp = P == Pass::All ? nullptr : static_cast<const T*>(a.in[2]);
    O* dx = static_cast<O*>(a.out[0]);
    void (*row_loop)(const PoolRows&, const T*, const A*, const T*, O*, int64_t) = &max_pool_backward_row<T, O, A, P>;
#if defined(__x86_64__)
    if (kHasV4) row_loop = &max_pool_backward_row_v4<T, O, A, P>;
#endif
    return std::make_unique<FunctionKernel>([=](const RunContext&) {
        parallel_chunks(g.N * g.H, [&](int64_t begin, int64_t end) {
            const int64_t row = g.W * g.C;
            for (int64_t r = begin; r < end; ++r) {
                const int64_t n = r / g.H, ih = r % g.H, oh = ih / g.KH, o = (n * g.OH + oh) * g.OW * g.C;
                if (oh < g.OH)
                    row_loop(g, dy + o, am + o, P == Pass::All ? nullptr : yp + o, dx + r * row, ih % g.KH);
                else  // below the last window
                    std::memset(static_cast<void*>(dx + r * row), 0, size_t(row) * sizeof(O));
            }
        });
    });
}
template <class T, class O, class A>
std::unique_ptr<Kernel> max_pool_backward_loop(const KernelArgs& a, const PoolRows g) {
    switch (a.node.pre_op) {
        case OpKind::ReluBackward: return max_pool_backward_loop<T, O, A, Pass::Relu>(a, g);
        case OpKind::Relu6Backward: return max_pool_backward_loop<T, O, A, Pass::Relu6>(a, g);
        default: return max_pool_backward_loop<T, O, A, Pass::All>(a, g);
    }
}
template <class A>
std::unique_ptr<Kernel> max_pool_backward_loop(const KernelArgs& a, const PoolRows g) {
    if (a.in_desc(0).dtype == DType::BF16) return max_pool_backward_loop<uint16_t, uint16_t, A>(a, g);
    if (a.out_desc(0).dtype == DType::BF16) return max_pool_backward_loop<float, uint16_t, A>(a, g);
    return max_pool_backward_loop<float, float, A>(a, g);
}
// The loop's node (above): windows tiling the image, nhwc, dY in the compute dtype (f32 or bf16) and dX in
// it or, from f32, in bf16, an arg-max of u8 or i32, with or without a folded activation backward; without
// AVX-512, fewer than 16 or at least 64 channels only; else nullptr (oneDNN).
std::unique_ptr<Kernel> max_pool_backward(const KernelArgs& a) {
    const TensorDesc &dy = a.in_desc(0), &am = a.in_desc(1), &dx = a.out_desc(0);
    const auto& p = attrs_as<PoolAttrs>(a.node);
    const int64_t C = dx.shape[1];
    if (p.stride[0] != p.kernel[0] || p.stride[1] != p.kernel[1] || p.pad[0] != 0 || p.pad[1] != 0 || (C >= 16 && C < 64 && !kHasV4) ||
        dx.layout != Layout::ChannelsLast || dy.layout != Layout::ChannelsLast || am.layout != Layout::ChannelsLast ||
        dnnl_type(dy.dtype) != compute_type(a.node.compute) || (dy.dtype != dx.dtype && dx.dtype != DType::BF16))
        return nullptr;
    const PoolRows g{dx.shape[0], dx.shape[2], dx.shape[3], C, dy.shape[2], dy.shape[3], p.kernel[0], p.kernel[1]};
    switch (am.dtype) {
        case DType::U8: return max_pool_backward_loop<uint8_t>(a, g);
        case DType::I32: return max_pool_backward_loop<int32_t>(a, g);
        default: return nullptr;
    }
}
// oneDNN's max-pooling backward with a folded activation backward: dY masked into a scratch copy first (dY's
// size: a window's share of dX) by the ReLU / ReLU6 backward's loop, then the primitive over it.
class MaskedPoolBackward : public PrimitiveKernel {
public:
    MaskedPoolBackward(CpuContext& ctx, std::function<void()> mask) : PrimitiveKernel(ctx), mask_(std::move(mask)) {}
    void run(const RunContext& rc) override {
        mask_();
        PrimitiveKernel::run(rc);
    }

private:
    std::function<void()> mask_;
};
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
    memory diff_dst = compute_input(a, dst, a.in[0], type);
    if (a.node.pre_op != OpKind::Count) {  // (dY, argmax, Y_pool): the primitive reads dY masked by the activation's backward
        memory masked_dy(diff_dst.get_desc(), a.ctx.engine);
        const int64_t n = y.storage_numel();
        const bool bf16 = type == dt::bf16, six = a.node.pre_op == OpKind::Relu6Backward;
        const void *dy = a.in[0], *y_pool = a.in[2];
        void* out = masked_dy.get_data_handle();
        k = std::make_unique<MaskedPoolBackward>(a.ctx, [=] {
            parallel_chunks(n, [&](int64_t begin, int64_t end) { act_backward_range(bf16, six, dy, y_pool, out, begin, end); });
        });
        diff_dst = masked_dy;
    }
    // an f32 node storing bf16 (a folded cast): the primitive writes f32 scratch, reordered into dX
    memory diff_src = dnnl_type(x.dtype) == type ? outs.add(a, src, a.out[0], type) : outs.add(a, src, a.out[0], csrc);
    std::unordered_map<int, memory> args = {{DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_DIFF_SRC, diff_src}};
    if (max) args[DNNL_ARG_WORKSPACE] = argmax_memory(a, e->pd.workspace_desc(), a.in_desc(1), a.in[1]);
    k->add(e->prim, args);
    outs.finish(*k);
    return k;
}

}  // namespace joule::cpu
