// The plan's Cast (a oneDNN reorder between two layouts, or a layout and a dtype; a loop of joule's own
// for a dtype change alone) and Transfer (the cpu backend shares host memory with every device that really
// runs here, so a transfer into it is a copy).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "backend/cpu/kernels.hpp"
#include "backend/cpu/vec.hpp"
#include "graph/bf16.hpp"

namespace joule::cpu {

namespace {
// f32 <-> bf16 over storage elements [begin, end), with graph/bf16.hpp's rounding (oneDNN's: nearest even,
// NaN kept quiet). oneDNN 2.6's reorder runs a dtype-only change of a blocked or nhwc tensor through its
// generic jit:uni kernel at 9-20 GB/s; this loop is a flat pass at memory speed.
JOULE_X86_64_V4_CLONE void to_bf16(const float* __restrict x, uint16_t* __restrict y, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = f32_to_bf16(x[i]);
}
#if defined(__x86_64__)
// to_bf16 into an output larger than the caches (kStreamBytes): the same rounding, 16 lanes at a time,
// written with non-temporal stores.
JOULE_V4 void to_bf16_streaming_v4(const float* __restrict x, uint16_t* __restrict y, int64_t begin, int64_t end) {
    int64_t i = begin;
    for (; i < end && reinterpret_cast<uintptr_t>(y + i) % 32 != 0; ++i) y[i] = f32_to_bf16(x[i]);
    for (; i + kLanes <= end; i += kLanes) _mm256_stream_si256(reinterpret_cast<__m256i*>(y + i), (__m256i)to_bf16x16(ld16(x + i)));
    for (; i < end; ++i) y[i] = f32_to_bf16(x[i]);
    _mm_sfence();
}
#endif

// A convolution weight's f32 master (oneDNN's ABcd16b16a: 16 x 16 tiles, out-channel a innermost) cast into
// the bf16 formats oneDNN's bf16 convolutions take, where oneDNN 2.6's reorder ran at ~16 GB/s (ResNet-50 b1:
// 20 ms of a 123 ms step): Xa2b with order AcdB (forward: X out-channels by pairs of in-channels) and
// 8a16b2a with order ABcd or BAcd (backward-data: one tile per 16 x 16, pairs of out-channels innermost).
// Both write bf16 pairs, one 32-bit word per pair, read from one source tile's rows, and both go over the
// source's tiles in storage order (one read stream), so that an update can cast the tiles it has just
// written (make_update).
// oneDNN's AMX kernels take the same words in blocks of another size: 16bXa2b (AcdB: in-channels padded to 32,
// then the same Xa2b words) and 16a16b2a (a block of two 16 x 16 tiles, out-channels padded to 32).
struct WeightTileCast {
    enum Kind { PairsOfB, PairsOfA } kind;
    int64_t O, I, H, W, X = 16;  // X: PairsOfB's out-channel block
    bool b32 = false;            // PairsOfB: 16bXa2b (in-channels padded to a multiple of 32: 16 pairs)
    bool in_major = false;       // PairsOfA: BAcd (in-channel blocks outermost)
    int64_t a_tiles = 1;         // PairsOfA: source tiles per destination block along the out-channels (8a: 1, 16a: 2)
    int64_t tiles_o() const { return (O + 15) / 16; }
    int64_t tiles_i() const { return (I + 15) / 16; }
    int64_t tiles() const { return tiles_o() * tiles_i() * H * W; }
    int64_t pairs() const { return b32 ? (I + 31) / 32 * 16 : (I + 1) / 2; }  // PairsOfB: in-channel pairs stored
    // PairsOfA: the 128 words of source tile (ob, ib) at spatial position hw
    uint32_t* a_tile(uint32_t* dst, int64_t ob, int64_t ib, int64_t hw) const {
        const int64_t blocks_o = (tiles_o() + a_tiles - 1) / a_tiles, block = in_major ? ib * blocks_o + ob / a_tiles : ob / a_tiles * tiles_i() + ib;
        return dst + ((block * H * W + hw) * a_tiles + ob % a_tiles) * 128;
    }
};

std::optional<WeightTileCast> weight_tile_cast(const TensorDesc& x, const TensorDesc& y) {
    if (x.dtype != DType::F32 || y.dtype != DType::BF16 || x.layout != Layout::Blocked || y.layout != Layout::Blocked) return std::nullopt;
    const Blocking &f = x.blocking, &t = y.blocking;
    using Inner = std::vector<std::pair<int, int64_t>>;
    if (f.dims.size() != 4 || t.dims != f.dims || f.order != std::vector<int>{0, 1, 2, 3} || f.inner != Inner{{1, 16}, {0, 16}}) return std::nullopt;
    WeightTileCast c{WeightTileCast::PairsOfB, f.dims[0], f.dims[1], f.dims[2], f.dims[3]};
    c.b32 = t.inner.size() == 3 && t.inner[0] == std::pair<int, int64_t>{1, 16};
    const size_t ax = c.b32 ? 1 : 0;  // the out-channel block's place among the inner blocks
    const bool acdb = t.order == std::vector<int>{0, 2, 3, 1} || (c.H * c.W == 1 && t.order == std::vector<int>{0, 1, 2, 3});  // 1x1: the same bytes
    if (acdb && t.inner.size() == ax + 2 && t.inner[ax].first == 0 && t.inner[ax].second % 16 == 0 &&
        t.inner[ax + 1] == std::pair<int, int64_t>{1, 2}) {
        c.X = t.inner[ax].second;
        return c;
    }
    c.b32 = false;
    for (const int64_t a : {8, 16})  // ABcd or BAcd; 16a only ABcd (oneDNN 2.6 has no BAcd16a16b2a)
        if (t.inner == Inner{{0, a}, {1, 16}, {0, 2}} && (t.order == std::vector<int>{0, 1, 2, 3} || (a == 8 && t.order == std::vector<int>{1, 0, 2, 3}))) {
            c.kind = WeightTileCast::PairsOfA;
            c.in_major = t.order[0] == 1;
            c.a_tiles = a / 8;
            return c;
        }
    return std::nullopt;
}

inline uint32_t bf16_pair(float lo, float hi) { return uint32_t(f32_to_bf16(lo)) | uint32_t(f32_to_bf16(hi)) << 16; }

// Xa2b, AcdB: word ((((a / X) * H + h) * W + w) * I2 + b / 2) * X + a % X holds (a, b), (a, b + 1), I2 = pairs()
// (ceil(I / 2); 16bXa2b: the same words with I2 = 16 ceil(I / 32), pairs past the master's padding zeroed by
// zero_pairs_of_b).
// Each source tile's pairs of rows go to 16 contiguous words, 8 lines apart by X words (reading in the
// destination's order instead strided over the tiles and ran at the memory speed of oneDNN's reorder).
// Out-channels past the source's padding (X > 16), and in-channels (16bXa2b): zero_pairs_of_b.
JOULE_X86_64_V4_CLONE void cast_pairs_of_b(const WeightTileCast& c, const float* __restrict src, uint32_t* __restrict dst, int64_t begin, int64_t end) {
    const int64_t I2 = c.pairs();
    for (int64_t u = begin; u < end; ++u) {
        const int64_t w = u % c.W, h = u / c.W % c.H, ib = u / (c.W * c.H) % c.tiles_i(), a0 = u / (c.W * c.H * c.tiles_i()) * 16;
        const float* tile = src + u * 256;
        uint32_t* out = dst + ((((a0 / c.X) * c.H + h) * c.W + w) * I2 + ib * 8) * c.X + a0 % c.X;
        for (int64_t r = 0; r < std::min<int64_t>(8, I2 - ib * 8); ++r, out += c.X)
            for (int i = 0; i < 16; ++i) out[i] = bf16_pair(tile[32 * r + i], tile[32 * r + 16 + i]);
    }
}
void zero_pairs_of_a(const WeightTileCast& c, uint32_t* dst) {
    if (c.tiles_o() % c.a_tiles == 0) return;
    for (int64_t ib = 0; ib < c.tiles_i(); ++ib)
        for (int64_t hw = 0; hw < c.H * c.W; ++hw) std::memset(c.a_tile(dst, c.tiles_o(), ib, hw), 0, 128 * 4);
}
void zero_pairs_of_b(const WeightTileCast& c, uint32_t* dst) {
    const int64_t I2 = c.pairs(), from = c.tiles_o() * 16, to = (c.O + c.X - 1) / c.X * c.X, ax = from / c.X, blocks = to / c.X;
    if (from != to)
        for (int64_t hw = 0; hw < c.H * c.W; ++hw)
            for (int64_t bp = 0; bp < I2; ++bp) std::memset(dst + ((ax * c.H * c.W + hw) * I2 + bp) * c.X + from % c.X, 0, size_t(to - from) * 4);
    const int64_t written = std::min(I2, c.tiles_i() * 8);  // 16bXa2b: in-channel pairs past the master's padding
    if (written < I2)
        for (int64_t row = 0; row < blocks * c.H * c.W; ++row) std::memset(dst + (row * I2 + written) * c.X, 0, size_t((I2 - written) * c.X) * 4);
}

#if defined(__x86_64__)
// A 64-byte line of the destination, with a non-temporal store where `stream` (no read for ownership of a
// line the cast writes whole).
JOULE_INLINE JOULE_V4 void store_line(uint32_t* p, u32x16 w, bool stream) {
    if (stream) _mm512_stream_si512(reinterpret_cast<__m512i*>(p), __m512i(w));
    else std::memcpy(p, &w, sizeof w);
}
// The two bf16 rows of 16 lanes as pairs: word i = (lo[i], hi[i]).
JOULE_INLINE JOULE_V4 u32x16 pairs16(v16 lo, v16 hi) {
    return __builtin_convertvector(to_bf16x16(lo), u32x16) | __builtin_convertvector(to_bf16x16(hi), u32x16) << 16;
}
// cast_pairs_of_b on vectors, each row of pairs one line of the destination (a0 % X and X are multiples of 16).
JOULE_V4 void cast_pairs_of_b_v4(const WeightTileCast& c, const float* __restrict src, uint32_t* __restrict dst, int64_t begin, int64_t end, bool stream) {
    const int64_t I2 = c.pairs();
    for (int64_t u = begin; u < end; ++u) {
        const int64_t w = u % c.W, h = u / c.W % c.H, ib = u / (c.W * c.H) % c.tiles_i(), a0 = u / (c.W * c.H * c.tiles_i()) * 16;
        const float* tile = src + u * 256;
        uint32_t* out = dst + ((((a0 / c.X) * c.H + h) * c.W + w) * I2 + ib * 8) * c.X + a0 % c.X;
        for (int64_t r = 0; r < std::min<int64_t>(8, I2 - ib * 8); ++r, out += c.X) store_line(out, pairs16(ld16(tile + 32 * r), ld16(tile + 32 * r + 16)), stream);
    }
    if (stream) _mm_sfence();
}
#endif

// 8a16b2a: per 16 x 16 tile (ABcd: the source's tile order; BAcd: in-channel blocks outermost) word
// (a % 16 / 2) * 16 + b % 16 holds (a, b), (a + 1, b): the tile's rows rounded, then its pairs transposed.
// 16a16b2a: two such tiles per block (a_tile()); an odd last one's partner, past the master's padding, zero:
// zero_pairs_of_a.
JOULE_X86_64_V4_CLONE void cast_pairs_of_a(const WeightTileCast& c, const float* __restrict src, uint32_t* __restrict dst, int64_t begin, int64_t end) {
    const int64_t spatial = c.H * c.W;
    for (int64_t u = begin; u < end; ++u) {  // u: the source tile in storage order
        const int64_t hw = u % spatial, ob = u / spatial / c.tiles_i(), ib = u / spatial % c.tiles_i();
        const float* tile = src + u * 256;
        uint32_t pairs[128];  // row b: pairs (2k, 2k + 1) at b * 8 + k
        for (int i = 0; i < 128; ++i) pairs[i] = bf16_pair(tile[2 * i], tile[2 * i + 1]);
        uint32_t* out = c.a_tile(dst, ob, ib, hw);
        for (int k = 0; k < 8; ++k)
            for (int b = 0; b < 16; ++b) out[k * 16 + b] = pairs[b * 8 + k];
    }
}
#if defined(__x86_64__)
// Swaps bit L of the lane index with the bit of the register index that tells x (0) from y (1): the element
// at lane j with bit L set in x and the one at lane j with it clear in y change places (two-source permutes).
template <int L>
JOULE_INLINE JOULE_V4 void swap_lane_bit(u32x16& x, u32x16& y) {
    static_assert(L >= 0 && L < 3);
    constexpr u32x16 kX[3] = {{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30},
                              {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
                              {0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27}};
    constexpr u32x16 kY[3] = {{1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31},
                              {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31},
                              {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}};
    const u32x16 nx = __builtin_shuffle(x, y, kX[L]), ny = __builtin_shuffle(x, y, kY[L]);
    x = nx, y = ny;
}
// cast_pairs_of_a on vectors. The tile's rounded pairs are a 16 x 8 matrix of words (row b, pair k), in 8
// registers of two rows each: register (b3 b2 b1), lane (b0 k2 k1 k0); the destination wants register k,
// lane b. Three swaps of a register bit with a lane bit, then one permute inside each register, give the
// destination's 8 lines.
JOULE_V4 void cast_pairs_of_a_v4(const WeightTileCast& c, const float* __restrict src, uint32_t* __restrict dst, int64_t begin, int64_t end, bool stream) {
    const int64_t spatial = c.H * c.W;
    constexpr u32x16 kRowOrder = {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15};  // lane (b0 b3 b2 b1) -> (b3 b2 b1 b0)
    for (int64_t u = begin; u < end; ++u) {
        const int64_t hw = u % spatial, ob = u / spatial / c.tiles_i(), ib = u / spatial % c.tiles_i();
        const float* tile = src + u * 256;
        u32x16 v[8];
        for (int r = 0; r < 8; ++r) {
            const u16x16 h[2] = {to_bf16x16(ld16(tile + 32 * r)), to_bf16x16(ld16(tile + 32 * r + 16))};
            std::memcpy(&v[r], h, sizeof v[r]);
        }
        for (int r = 0; r < 8; r += 2) swap_lane_bit<0>(v[r], v[r + 1]);               // (b3 b2 k0), (b0 k2 k1 b1)
        for (int r : {0, 1, 4, 5}) swap_lane_bit<1>(v[r], v[r + 2]);                    // (b3 k1 k0), (b0 k2 b2 b1)
        for (int r = 0; r < 4; ++r) swap_lane_bit<2>(v[r], v[r + 4]);                   // (k2 k1 k0), (b0 b3 b2 b1)
        uint32_t* out = c.a_tile(dst, ob, ib, hw);
        for (int k = 0; k < 8; ++k) store_line(out + k * 16, __builtin_shuffle(v[k], kRowOrder), stream);
    }
    if (stream) _mm_sfence();
}
#endif
}  // namespace

std::optional<CopyToBf16> CopyToBf16::of(const TensorDesc& from, const TensorDesc& to) {
    if (from.dtype != DType::F32 || to.dtype != DType::BF16 || from.shape != to.shape) return std::nullopt;
    CopyToBf16 r;
    if (from.layout == to.layout && from.blocking == to.blocking) {
        r.units_ = from.storage_numel();
        return r;
    }
    const std::optional<WeightTileCast> c = weight_tile_cast(from, to);
    if (!c) return std::nullopt;
    r.unit_ = 256, r.units_ = c->tiles();
    const bool b = c->kind == WeightTileCast::PairsOfB;
    r.cast_ = [c = *c, b](const float* src, void* dst, int64_t begin, int64_t end, bool stream) {
        auto* words = static_cast<uint32_t*>(dst);
#if defined(__x86_64__)
        // whole lines on vectors, streamed where asked (the buffer's lines are its own: 64-byte aligned)
        if (kHasV4 && reinterpret_cast<uintptr_t>(dst) % 64 == 0)
            return b ? cast_pairs_of_b_v4(c, src, words, begin, end, stream) : cast_pairs_of_a_v4(c, src, words, begin, end, stream);
#endif
        b ? cast_pairs_of_b(c, src, words, begin, end) : cast_pairs_of_a(c, src, words, begin, end);
    };
    r.finish_ = [c = *c, b](void* dst) { b ? zero_pairs_of_b(c, static_cast<uint32_t*>(dst)) : zero_pairs_of_a(c, static_cast<uint32_t*>(dst)); };
    return r;
}

void CopyToBf16::run(const float* src, void* dst, int64_t begin, int64_t end, bool stream) const {
    if (cast_) return cast_(src, dst, begin, end, stream);
    to_bf16(src, static_cast<uint16_t*>(dst), begin, end, stream);
}

JOULE_X86_64_V4_CLONE void from_bf16(const uint16_t* __restrict x, float* __restrict y, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = bf16_to_f32(x[i]);
}

void to_bf16(const float* x, uint16_t* y, int64_t begin, int64_t end, bool stream) {
#if defined(__x86_64__)
    if (stream && kHasV4) return to_bf16_streaming_v4(x, y, begin, end);
#endif
    to_bf16(x, y, begin, end);
}

std::unique_ptr<Kernel> make_cast(const KernelArgs& a) {
    const TensorDesc &x = a.in_desc(0), &y = a.out_desc(0);
    if (const std::optional<CopyToBf16> c = CopyToBf16::of(x, y)) {
        const float* src = static_cast<const float*>(a.in[0]);
        void* dst = a.out[0];
        // a parameter's low-precision copy: written whole, and read only when its layer's turn comes
        // (activations stay in the caches for the node that reads them next)
        const bool stream = a.g.tensor(a.node.inputs[0]).role == TensorRole::Parameter && y.bytes() > kStreamBytes;
        return std::make_unique<FunctionKernel>([=, c = *c](const RunContext&) {
            parallel_chunks(c.units(), [&](int64_t b, int64_t e) { c.run(src, dst, b, e, stream); });
            c.finish(dst);
        });
    }
    if (x.layout == y.layout && x.blocking == y.blocking && x.shape == y.shape && x.dtype == DType::BF16 && y.dtype == DType::F32) {
        // the same storage order: element i of one buffer is element i of the other, padding included
        const int64_t n = x.storage_numel();
        const auto* src = static_cast<const uint16_t*>(a.in[0]);
        auto* dst = static_cast<float*>(a.out[0]);
        return std::make_unique<FunctionKernel>([=](const RunContext&) { parallel_chunks(n, [&](int64_t b, int64_t e) { from_bf16(src, dst, b, e); }); });
    }
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    // a plain side of a reorder to or from a blocked layout is seen over the blocking's dims (a grouped
    // convolution's weights as [g, O/g, I/g, kh, kw]: the same row-major bytes)
    auto md = [](const TensorDesc& d, const TensorDesc& other) {
        if (d.layout != Layout::Plain || other.layout != Layout::Blocked) return md_of(d);
        return md_of(other.blocking.dims, Layout::Plain, dnnl_type(d.dtype));
    };
    dnnl::memory from = a.mem(md(x, y), a.in[0]), to = a.mem(md(y, x), a.out[0]);
    auto e = a.ctx.cache.get<dnnl::reorder>(key_of(x) + ">" + key_of(y),
                                            [&] { return dnnl::reorder::primitive_desc(from, to); });
    k->add(e->prim, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
    return k;
}

std::unique_ptr<Kernel> make_transfer(const KernelArgs& a) {
    const size_t bytes = a.in_desc(0).bytes();
    const void* src = a.in[0];
    void* dst = a.out[0];
    return std::make_unique<FunctionKernel>([=](const RunContext&) { std::memcpy(dst, src, bytes); });
}

}  // namespace joule::cpu
