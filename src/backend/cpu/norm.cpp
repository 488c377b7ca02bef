// BatchNorm2d and LayerNorm, forward (training and inference) and backward. LayerNorm runs oneDNN's normalisation
// primitives (separate scale and shift), but its backward in f32 a loop of joule's own. BatchNorm2d runs loops of
// joule's own, which take what oneDNN 2.6's cannot: any activation fused into the forward (Node::post_op: ReLU,
// ReLU6; oneDNN fuses ReLU alone, with a mask workspace of its own) and folded into the backward (Node::pre_op), Y
// recomputed in the backward as the forward rounded it (NormAttrs::recompute_act), output stored in bf16 from f32 (a
// Cast folded in), and they beat oneDNN's over nhwc (ResNet-50 b1 f32: 1.87 -> 1.51 ms of batch-norm forwards per
// step). BatchNorm updates the running statistics after each training forward as PyTorch does (unbiased variance
// into the running estimate). In bf16 the data tensors are bf16; statistics, scale and shift stay f32.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>

#include "backend/cpu/kernels.hpp"
#include "backend/cpu/vec.hpp"
#include "graph/bf16.hpp"

namespace joule::cpu {

namespace {
using namespace dnnl;
const normalization_flags kScaleShift = normalization_flags::use_scale | normalization_flags::use_shift;

std::string norm_key(const TensorDesc& x, const NormAttrs& at, dt type) { return key_of(x) + std::to_string(at.eps) + "t" + std::to_string(int(type)); }

// After a training forward: running = (1 - momentum) running + momentum batch, the variance unbiased as PyTorch's.
void update_running_stats(float m, int64_t channels, int64_t count, const float* mean, const float* var, float* running_mean, float* running_var) {
    const float unbias = count > 1 ? float(count) / float(count - 1) : 1.0f;
    for (int64_t c = 0; c < channels; ++c) {
        running_mean[c] = (1 - m) * running_mean[c] + m * mean[c];
        running_var[c] = (1 - m) * running_var[c] + m * var[c] * unbias;
    }
}

// Batch norm's loops (f32 arithmetic over f32 or bf16 storage). The data tensor is seen as [outer, C,
// inner]: nhwc as [N*H*W, C, 1] (a row of C channels per pixel), nchw as [N, C, H*W]. nhwc (every batch
// norm of the zoo) runs on 16-lane vectors (GCC's vector extension) over tiled rows (NormView), the sums
// kept in registers for up to 128 lanes at a time, a row block at a time; nchw runs plain loops. The loops
// are compiled twice, for x86-64-v4 (AVX-512: the *_v4 wrappers) and for the baseline, and picked at run
// time (kHasV4). Channel sums end in double, per part of the rows, added up after; forward's are shifted
// by the channel's first element (robust one-pass variance).


// The fused activation's ceiling: ReLU6 6, ReLU none. act(v) = min(max(v, 0), hi); its gradient from its
// output y is dy where 0 < y < hi (zero at both ends, as PyTorch's), else 0.
inline float act_ceiling(OpKind a) { return a == OpKind::Relu6 || a == OpKind::Relu6Backward ? 6.0f : std::numeric_limits<float>::infinity(); }
inline float act_grad(float dy, float y, float hi) { return dy * float((y > 0.0f) & (y < hi)); }
// GCC 12 lowers a vector comparison lane by lane unless the function it is written in targets AVX-512 (an
// inlined helper, or a target_clones clone, does not), but folds `a < b ? a : b` to a min: so the mask is
// integer arithmetic on
// d = max(min(y, hi - y), 0) + 0, which is +0 exactly where f'(y) = 0: (bits | -bits) >> 31 is all ones
// iff bits != 0.
JOULE_INLINE v16 act_grad(v16 dy, v16 y, v16 hi) {
    const v16 zero = {}, t = hi - y, m = y < t ? y : t, d = (m > zero ? m : zero) + zero;
    const i32x16 bits = i32x16(d), mask = (bits | -bits) >> 31;
    return v16(i32x16(dy) & mask);
}
inline float act(float v, float hi) { return std::min(std::max(v, 0.0f), hi); }
JOULE_INLINE v16 act(v16 v, v16 hi) {
    v = v > 0.0f ? v : 0.0f;
    return v < hi ? v : hi;
}
// The forward's pre-activation (x - mean_c) s_c + beta_c, s_c = gamma_c / sqrt(var_c + eps) (x - mean first:
// exact for x near the mean, where x s_c - mean_c s_c would cancel): one expression for the forward and for
// the backward that recomputes it (NormAttrs::recompute_act), so both round alike.
inline float forward_scale(float gamma, float var, float eps) { return gamma / std::sqrt(var + eps); }
JOULE_INLINE float pre_activation(float x, float mean, float s, float beta) { return (x - mean) * s + beta; }
JOULE_INLINE v16 pre_activation(v16 x, v16 mean, v16 s, v16 beta) { return (x - mean) * s + beta; }
// v as a T holds it (bf16: rounded to nearest even).
template <class T>
JOULE_INLINE float as_stored(float v) {
    if constexpr (std::is_same_v<T, uint16_t>) return round_to_bf16(v);
    return v;
}
template <class T>
JOULE_INLINE v16 as_stored(v16 v) {
    if constexpr (std::is_same_v<T, uint16_t>) return widen_bf16x16(to_bf16x16(v));
    return v;
}

// nhwc data runs on vectors as rows of `tile` = lcm(C, 16) elements -- a whole number of pixels and of
// vectors, so each lane keeps its channel (C = 24: rows of two pixels, three vectors) -- with per-channel
// parameters repeated along the tile (tiled()); the elements after the last whole row (fewer than a row:
// the tail) go one by one. A lane's channel in the tile is its index mod C.
struct NormView {
    int64_t outer, channels, inner;
    int64_t count() const { return outer * inner; }  // elements per channel
    bool vectors() const { return inner == 1; }
    int64_t tile() const { return vectors() ? channels * (kLanes / std::gcd(channels, kLanes)) : channels; }
    int64_t rows() const { return outer * channels / tile(); }  // whole tiled rows (vectors)
    int64_t size() const { return outer * channels * inner; }
};
NormView norm_view(const TensorDesc& x) {
    const int64_t n = x.shape[0], c = x.shape[1], hw = x.shape[2] * x.shape[3];
    return x.layout == Layout::ChannelsLast ? NormView{n * hw, c, 1} : NormView{n, c, hw};
}
// A per-channel array repeated along the view's tile (its first C entries are the array itself, which the
// scalar loops index by channel), in `store` at a 64-byte boundary: the vector loops load a whole vector of
// it per vector of data, and one split across two cache lines costs two.
const float* tiled(const NormView& v, const float* per_channel, std::vector<float>& store) {
    store.resize(size_t(v.tile() + kLanes));
    float* out = store.data() + (kLanes - reinterpret_cast<uintptr_t>(store.data()) / sizeof(float) % kLanes) % kLanes;
    for (int64_t j = 0; j < v.tile(); j += v.channels) std::copy(per_channel, per_channel + v.channels, out + j);
    return out;
}

// Per channel c: s1[c], s2[c], the sums of the pair f(i, c) gives for element i of channel c (f.vec: for
// the 16 elements from i, tile positions c..c+15). Vectors: per block of tiled rows, V vectors summed in
// registers, then added in double into their part's slice of `partial`, then the tile's positions into
// their channels, then the tail. Otherwise: channels split, summed in double.
constexpr int64_t kRowBlock = 256;
template <int V, class F>
JOULE_INLINE void block_sums(const F& f, int64_t C, int64_t c0, int64_t r0, int64_t r1, double* __restrict s1, double* __restrict s2) {
    v16 u[V] = {}, w[V] = {};
    for (int64_t r = r0; r < r1; ++r)
        for (int k = 0; k < V; ++k) {
            const auto [a, b] = f.vec(r * C + c0 + k * kLanes, c0 + k * kLanes);
            u[k] += a, w[k] += b;
        }
    for (int k = 0; k < V; ++k)
        for (int j = 0; j < kLanes; ++j) s1[c0 + k * kLanes + j] += double(u[k][j]), s2[c0 + k * kLanes + j] += double(w[k][j]);
}
// Rows [begin, end) of tile positions [l0, l1) (multiples of 16) of tiled rows of C positions. A lane's sums
// do not depend on which other lanes are summed beside it.
template <class F>
JOULE_INLINE void row_sums(const F& f, int64_t C, int64_t l0, int64_t l1, int64_t begin, int64_t end, double* s1, double* s2) {
    for (int64_t r0 = begin; r0 < end; r0 += kRowBlock)
        for (int64_t c0 = l0; c0 < l1; c0 += 8 * kLanes) {
            const int64_t r1 = std::min(end, r0 + kRowBlock);
            switch (std::min<int64_t>(8, (l1 - c0) / kLanes)) {
                case 1: block_sums<1>(f, C, c0, r0, r1, s1, s2); break;
                case 2: block_sums<2>(f, C, c0, r0, r1, s1, s2); break;
                case 3: block_sums<3>(f, C, c0, r0, r1, s1, s2); break;
                case 4: block_sums<4>(f, C, c0, r0, r1, s1, s2); break;
                case 5: block_sums<5>(f, C, c0, r0, r1, s1, s2); break;
                case 6: block_sums<6>(f, C, c0, r0, r1, s1, s2); break;
                case 7: block_sums<7>(f, C, c0, r0, r1, s1, s2); break;
                default: block_sums<8>(f, C, c0, r0, r1, s1, s2); break;
            }
        }
}
template <class F>
JOULE_V4 void row_sums_v4(const F& f, int64_t C, int64_t l0, int64_t l1, int64_t begin, int64_t end, double* s1, double* s2) {
    row_sums(f, C, l0, l1, begin, end, s1, s2);
}
// The rows are summed in parts fixed by the shape (up to kParts, a row block or more each), the parts in
// order at the end, so the sums -- and every result after them -- do not depend on the thread count (a node
// runs on one thread when small: a plan that stores its output in bf16 instead of f32 may make it so). Rows
// of one part (at most a row block: ResNet-50's last stages at batch 1, 49 and 196 pixels of 2048 and 1024
// channels) are split by lanes between the threads instead, each summing its lanes over every row: the same
// additions as on one thread.
constexpr int64_t kParts = 16;
// How many parts `rows` rows are summed in, and part p's rows [first, last).
int64_t row_parts(int64_t rows) { return std::clamp<int64_t>((rows + kRowBlock - 1) / kRowBlock, 1, kParts); }
std::pair<int64_t, int64_t> part_rows(int64_t rows, int64_t p, int64_t parts) { return {rows * p / parts, rows * (p + 1) / parts}; }
template <class F>
void channel_sums(const NormView& v, std::vector<double>& partial, double* s1, double* s2, const F& f) {
    const int64_t C = v.channels;
    if (v.vectors()) {
        const int64_t L = v.tile(), rows = v.rows(), parts = row_parts(rows);
        partial.assign(size_t(2 * L * parts), 0.0);
        const auto sums = [&](int64_t l0, int64_t l1, int64_t begin, int64_t end, double* a) {
            kHasV4 ? row_sums_v4(f, L, l0, l1, begin, end, a, a + L) : row_sums(f, L, l0, l1, begin, end, a, a + L);
        };
        if (parts == 1) {
            parallel_chunks(L / kLanes, [&](int64_t v0, int64_t v1) { sums(v0 * kLanes, v1 * kLanes, 0, rows, partial.data()); });
        } else {
            parallel_chunks(parts, [&](int64_t p0, int64_t p1) {
                for (int64_t p = p0; p < p1; ++p) {
                    const auto [first, last] = part_rows(rows, p, parts);
                    sums(0, L, first, last, partial.data() + 2 * L * p);
                }
            });
        }
        std::fill(s1, s1 + C, 0.0);
        std::fill(s2, s2 + C, 0.0);
        for (int64_t p = 0; p < parts; ++p)
            for (int64_t j = 0; j < L; j += C)
                for (int64_t c = 0; c < C; ++c) s1[c] += partial[size_t(2 * L * p + j + c)], s2[c] += partial[size_t(2 * L * p + L + j + c)];
        for (int64_t i = rows * L; i < v.size(); ++i) {
            const auto [u, w] = f(i, i % C);
            s1[i % C] += double(u), s2[i % C] += double(w);
        }
        return;
    }
    parallel_chunks(C, [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
            s1[c] = s2[c] = 0;
            for (int64_t o = 0; o < v.outer; ++o)
                for (int64_t i = (o * C + c) * v.inner; i < (o * C + c + 1) * v.inner; ++i) {
                    const auto [u, w] = f(i, c);
                    s1[c] += double(u), s2[c] += double(w);
                }
        }
    });
}

// Forward's shifted sums: x - k_c and its square (k_c: the channel's first element).
template <class T>
struct ShiftedSums {
    const T* x;
    const float* k;
    std::pair<float, float> operator()(int64_t i, int64_t c) const {
        const float d = ld(x, i) - k[c];
        return {d, d * d};
    }
    JOULE_INLINE std::pair<v16, v16> vec(int64_t i, int64_t c) const {
        const v16 d = ld16(x + i) - ld16(k + c);
        return {d, d * d};
    }
};

// The gradient dz batch norm's backward takes at element i of channel c (x: X there): dy itself (None), or
// a folded activation's dy f'(y), Y read (Read) or recomputed from X as the forward stored it in X's dtype
// T (Recompute) -- f'(y) = f'(z) for the pre-activation z, and the activations' ends (0, 6) are bf16
// values, so rounding z gives Y's mask.
enum class Mask { None, Read, Recompute };
template <class T, Mask M>
struct ActGrad {
    const T* y;                        // Y (Read)
    const float *mean, *scale, *beta;  // the forward's statistics, scale and shift (Recompute)
    float hi;
    float operator()(float dy, float x, int64_t i, int64_t c) const {
        if constexpr (M == Mask::Recompute) return act_grad(dy, as_stored<T>(pre_activation(x, mean[c], scale[c], beta[c])), hi);
        if constexpr (M == Mask::Read) return act_grad(dy, ld(y, i), hi);
        return dy;
    }
    JOULE_INLINE v16 vec(v16 dy, v16 x, int64_t i, int64_t c) const {
        if constexpr (M == Mask::Recompute) return act_grad(dy, as_stored<T>(pre_activation(x, ld16(mean + c), ld16(scale + c), ld16(beta + c))), splat(hi));
        if constexpr (M == Mask::Read) return act_grad(dy, ld16(y + i), splat(hi));
        return dy;
    }
};

// Backward's sums: dz and dz (x - mean_c).
template <class T, class G>
struct GradSums {
    const T *dy, *x;
    const float* mean;
    G grad;
    std::pair<float, float> operator()(int64_t i, int64_t c) const {
        const float xv = ld(x, i), dz = grad(ld(dy, i), xv, i, c);
        return {dz, dz * (xv - mean[c])};
    }
    JOULE_INLINE std::pair<v16, v16> vec(int64_t i, int64_t c) const {
        const v16 xv = ld16(x + i), dz = grad.vec(ld16(dy + i), xv, i, c);
        return {dz, dz * (xv - ld16(mean + c))};
    }
};

// Element-wise passes over tiled rows (nhwc; the chunk ending at the last row does the tail too) or (n, c)
// runs (nchw) [begin, end), per-channel parameters tiled. Forward: y = act(pre_activation(x)) (Act) or
// pre_activation(x), stored as U (X's dtype T, or bf16 from f32: a Cast folded into the node).
template <bool Act, class T, class U>
JOULE_INLINE void scale_shift_act(const T* __restrict x, U* __restrict y, const float* __restrict mean, const float* __restrict s,
                                  const float* __restrict beta, NormView v, float hi, int64_t begin, int64_t end) {
    auto one = [=](int64_t i, int64_t c) {
        const float z = pre_activation(ld(x, i), mean[c], s[c], beta[c]);
        st(y, i, Act ? act(z, hi) : z);
    };
    if (v.vectors()) {
        const int64_t L = v.tile();
        const v16 h = splat(hi);
        for (int64_t r = begin; r < end; ++r)
            for (int64_t c = 0; c < L; c += kLanes) {
                const v16 z = pre_activation(ld16(x + r * L + c), ld16(mean + c), ld16(s + c), ld16(beta + c));
                st16(y + r * L + c, Act ? act(z, h) : z);
            }
        if (end == v.rows())
            for (int64_t i = v.rows() * L; i < v.size(); ++i) one(i, i % v.channels);
        return;
    }
    for (int64_t u = begin; u < end; ++u)
        for (int64_t i = u * v.inner; i < (u + 1) * v.inner; ++i) one(i, u % v.channels);
}
// Backward: dx = dz a_c + (x - mean_c) b_c + k_c.
template <class T, class U, class G>
JOULE_INLINE void grad_input(const T* __restrict dy, const T* __restrict x, const G& grad, U* __restrict dx, const float* __restrict mean,
                             const float* __restrict a, const float* __restrict b, const float* __restrict k, NormView v, int64_t begin, int64_t end) {
    auto one = [=](int64_t i, int64_t c) {
        const float xv = ld(x, i);
        st(dx, i, grad(ld(dy, i), xv, i, c) * a[c] + (xv - mean[c]) * b[c] + k[c]);
    };
    if (v.vectors()) {
        const int64_t L = v.tile();
        for (int64_t r = begin; r < end; ++r)
            for (int64_t c = 0; c < L; c += kLanes) {
                const int64_t i = r * L + c;
                const v16 xv = ld16(x + i);
                st16(dx + i, grad.vec(ld16(dy + i), xv, i, c) * ld16(a + c) + (xv - ld16(mean + c)) * ld16(b + c) + ld16(k + c));
            }
        if (end == v.rows())
            for (int64_t i = v.rows() * L; i < v.size(); ++i) one(i, i % v.channels);
        return;
    }
    for (int64_t u = begin; u < end; ++u)
        for (int64_t i = u * v.inner; i < (u + 1) * v.inner; ++i) one(i, u % v.channels);
}
// The element-wise passes' unit of work: tiled rows (nhwc) or (n, c) runs (nchw).
int64_t pass_units(const NormView& v) { return v.vectors() ? v.rows() : v.outer * v.channels; }

// The loops above compiled for x86-64-v4 (row_sums_v4 is beside row_sums).
template <bool Act, class T, class U>
JOULE_V4 void scale_shift_act_v4(const T* x, U* y, const float* mean, const float* s, const float* beta, NormView v, float hi, int64_t begin, int64_t end) {
    scale_shift_act<Act>(x, y, mean, s, beta, v, hi, begin, end);
}
template <class T, class U, class G>
JOULE_V4 void grad_input_v4(const T* dy, const T* x, const G& grad, U* dx, const float* mean, const float* a, const float* b, const float* k, NormView v,
                            int64_t begin, int64_t end) {
    grad_input(dy, x, grad, dx, mean, a, b, k, v, begin, end);
}

// BatchNorm2d, with or without a fused activation (Node::post_op): training forward in two passes over X
// (shifted sums; normalise, scale, shift and activate), inference in one. Y as X's dtype or, from f32, bf16
// (a Cast the plan folded into the node: rounded as stored).
class BatchNormForward : public Kernel {
public:
    explicit BatchNormForward(const KernelArgs& a)
        : attrs_(attrs_as<NormAttrs>(a.node)), view_(norm_view(a.in_desc(0))), post_(a.node.post_op), bf16_(a.in_desc(0).dtype == DType::BF16),
          out_bf16_(a.out_desc(0).dtype == DType::BF16), x_(a.in[0]), y_(a.out[0]), gamma_(static_cast<const float*>(a.in[1])),
          beta_(static_cast<const float*>(a.in[2])), running_mean_(static_cast<float*>(a.in[3])), running_var_(static_cast<float*>(a.in[4])),
          mean_(static_cast<float*>(a.out[1])), var_(static_cast<float*>(a.out[2])), scale_(size_t(view_.channels)), first_(size_t(view_.channels)),
          s1_(size_t(view_.channels)), s2_(size_t(view_.channels)) {
        const DType x = a.in_desc(0).dtype, y = a.out_desc(0).dtype;
        JOULE_ASSERT((x == DType::F32 || bf16_) && (y == x || (x == DType::F32 && out_bf16_)), "batch norm loops: f32 or bf16 data, Y as X or bf16");
    }
    void run(const RunContext& rc) override {
        if (bf16_) run_as<uint16_t, uint16_t>(rc);
        else if (out_bf16_) run_as<float, uint16_t>(rc);
        else run_as<float, float>(rc);
    }

private:
    template <class T, class U>
    void run_as(const RunContext& rc) {
        const T* x = static_cast<const T*>(x_);
        const int64_t C = view_.channels;
        const float* mean = running_mean_;
        const float* var = running_var_;
        if (rc.training) {
            for (int64_t c = 0; c < C; ++c) first_[size_t(c)] = ld(x, c * view_.inner);  // element (0, c, 0)
            channel_sums(view_, partial_, s1_.data(), s2_.data(), ShiftedSums<T>{x, tiled(view_, first_.data(), first_t_)});
            const double m = double(view_.count());
            for (int64_t c = 0; c < C; ++c) {
                const double d = s1_[size_t(c)] / m;
                mean_[c] = float(double(first_[size_t(c)]) + d);
                var_[c] = float(std::max(0.0, s2_[size_t(c)] / m - d * d));
            }
            mean = mean_, var = var_;
        }
        for (int64_t c = 0; c < C; ++c) scale_[size_t(c)] = forward_scale(gamma_[c], var[c], attrs_.eps);
        const float *m = tiled(view_, mean, mean_t_), *s = tiled(view_, scale_.data(), scale_t_), *b = tiled(view_, beta_, beta_t_);
        parallel_chunks(pass_units(view_), [&](int64_t begin, int64_t end) {
            U* y = static_cast<U*>(y_);
            const float hi = act_ceiling(post_);
            if (post_ == OpKind::Count) (kHasV4 ? scale_shift_act_v4<false, T, U> : scale_shift_act<false, T, U>)(x, y, m, s, b, view_, hi, begin, end);
            else (kHasV4 ? scale_shift_act_v4<true, T, U> : scale_shift_act<true, T, U>)(x, y, m, s, b, view_, hi, begin, end);
        });
        if (rc.training) update_running_stats(attrs_.momentum, C, view_.count(), mean_, var_, running_mean_, running_var_);
    }

    NormAttrs attrs_;
    NormView view_;
    OpKind post_;
    bool bf16_, out_bf16_;
    const void* x_;
    void* y_;
    const float *gamma_, *beta_;
    float *running_mean_, *running_var_, *mean_, *var_;
    std::vector<float> scale_, first_, first_t_, mean_t_, scale_t_, beta_t_;  // *_t_: tiled (NormView)
    std::vector<double> s1_, s2_, partial_;
};

// BatchNormBackward in two passes (channel sums; dX): (dY, X, gamma, mean, var) -> (dX, dgamma, dbeta). With
// the activation's backward folded in (Node::pre_op), the node reads Y last and computes the activation's
// gradient dY f'(Y) where it reads dY, instead of a stored gradient written by one node and read twice by
// another; recomputing Y (NormAttrs::recompute_act) it reads beta last and passes over (dY, X) only.
class BatchNormBackward : public Kernel {
public:
    explicit BatchNormBackward(const KernelArgs& a)
        : eps_(attrs_as<NormAttrs>(a.node).eps), view_(norm_view(a.in_desc(1))), pre_(a.node.pre_op), bf16_(a.in_desc(1).dtype == DType::BF16),
          out_bf16_(a.out_desc(0).dtype == DType::BF16),
          mask_(a.node.pre_op == OpKind::Count ? Mask::None : recomputes_activation(a.node) ? Mask::Recompute : Mask::Read), dy_(a.in[0]), x_(a.in[1]),
          last_(a.node.pre_op == OpKind::Count ? nullptr : a.in[5]),
          dx_(a.out[0]), gamma_(static_cast<const float*>(a.in[2])), mean_(static_cast<const float*>(a.in[3])), var_(static_cast<const float*>(a.in[4])),
          dgamma_(static_cast<float*>(a.out[1])), dbeta_(static_cast<float*>(a.out[2])), a_(size_t(view_.channels)), b_(size_t(view_.channels)),
          k_(size_t(view_.channels)), scale_(size_t(view_.channels)), s1_(size_t(view_.channels)), s2_(size_t(view_.channels)) {
        // dX as the data or, from f32, bf16 (a Cast the plan folded into the node: rounded as stored)
        const DType x = a.in_desc(1).dtype, dx = a.out_desc(0).dtype;
        JOULE_ASSERT(a.node.inputs.size() == (last_ ? 6u : 5u) && (x == DType::F32 || bf16_) && (dx == x || (x == DType::F32 && dx == DType::BF16)),
                     "batch norm loops: f32 or bf16 data, dX as X or bf16, Y or beta last with a folded activation");
    }
    void run(const RunContext&) override {
        if (bf16_) run_with<uint16_t, uint16_t>();
        else if (out_bf16_) run_with<float, uint16_t>();
        else run_with<float, float>();
    }

private:
    template <class T, class U>
    void run_with() {
        switch (mask_) {
            case Mask::None: return run_as<T, U, Mask::None>();
            case Mask::Read: return run_as<T, U, Mask::Read>();
            case Mask::Recompute: return run_as<T, U, Mask::Recompute>();
        }
    }
    template <class T, class U, Mask M>
    void run_as() {
        const T *dy = static_cast<const T*>(dy_), *x = static_cast<const T*>(x_);
        const int64_t C = view_.channels;
        const float *mean = tiled(view_, mean_, mean_t_), *scale = nullptr, *beta = nullptr;
        if (M == Mask::Recompute) {
            for (int64_t c = 0; c < C; ++c) scale_[size_t(c)] = forward_scale(gamma_[c], var_[c], eps_);
            scale = tiled(view_, scale_.data(), scale_t_), beta = tiled(view_, static_cast<const float*>(last_), beta_t_);
        }
        const ActGrad<T, M> grad{static_cast<const T*>(last_), mean, scale, beta, act_ceiling(pre_)};
        channel_sums(view_, partial_, s1_.data(), s2_.data(), GradSums<T, ActGrad<T, M>>{dy, x, mean, grad});
        const double m = double(view_.count());
        for (int64_t c = 0; c < C; ++c) {
            const double rstd = 1.0 / std::sqrt(double(var_[c]) + double(eps_)), g = double(gamma_[c]);
            dbeta_[c] = float(s1_[size_t(c)]);
            dgamma_[c] = float(s2_[size_t(c)] * rstd);
            a_[size_t(c)] = float(g * rstd);
            b_[size_t(c)] = float(-g * rstd * rstd * rstd * s2_[size_t(c)] / m);
            k_[size_t(c)] = float(-g * rstd * s1_[size_t(c)] / m);
        }
        const float *a = tiled(view_, a_.data(), a_t_), *b = tiled(view_, b_.data(), b_t_), *k = tiled(view_, k_.data(), k_t_);
        parallel_chunks(pass_units(view_), [&](int64_t begin, int64_t end) {
            using G = ActGrad<T, M>;
            (kHasV4 ? grad_input_v4<T, U, G> : grad_input<T, U, G>)(dy, x, grad, static_cast<U*>(dx_), mean, a, b, k, view_, begin, end);
        });
    }

    float eps_;
    NormView view_;
    OpKind pre_;
    bool bf16_, out_bf16_;
    Mask mask_;
    const void *dy_, *x_, *last_;  // last_: Y (Mask::Read), beta (Mask::Recompute) or none
    void* dx_;
    const float *gamma_, *mean_, *var_;
    float *dgamma_, *dbeta_;
    std::vector<float> a_, b_, k_, scale_, mean_t_, scale_t_, beta_t_, a_t_, b_t_, k_t_;  // *_t_: tiled (NormView)
    std::vector<double> s1_, s2_, partial_;
};

// (dY, X, gamma, mean, var) -> (dX, dgamma, dbeta) on oneDNN's backward primitive, given its forward's.
template <class Backward, class Forward>
std::unique_ptr<Kernel> norm_backward(const KernelArgs& a, const memory::desc& data, const memory::desc& stat, const memory::desc& chan,
                                      const std::shared_ptr<PrimitiveCache::Entry<Forward>>& fwd, const std::string& key, dt type,
                                      const typename Backward::desc& desc) {
    auto e = a.ctx.cache.get<Backward>(key, [&] { return typename Backward::primitive_desc(desc, a.ctx.engine, fwd->pd); });
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    StagedOutputs outs;
    // oneDNN 2.6 wants the shift argument with use_shift even in backward, where it is not read.
    k->add(e->prim, {{DNNL_ARG_DIFF_DST, compute_input(a, data, a.in[0], type)},
                     {DNNL_ARG_SRC, compute_input(a, data, a.in[1], type)},
                     {DNNL_ARG_SCALE, a.mem(chan, a.in[2])},
                     {DNNL_ARG_SHIFT, a.mem(chan, a.in[2])},
                     {DNNL_ARG_MEAN, a.mem(stat, a.in[3])},
                     {DNNL_ARG_VARIANCE, a.mem(stat, a.in[4])},
                     {DNNL_ARG_DIFF_SRC, outs.add(a, data, a.out[0], type)},
                     {DNNL_ARG_DIFF_SCALE, a.mem(chan, a.out[1])},
                     {DNNL_ARG_DIFF_SHIFT, a.mem(chan, a.out[2])}});
    outs.finish(*k);
    return k;
}

// LayerNorm's backward in f32 as a loop of joule's own over rows [begin, end), a row in L1: dX = rstd (g - mean(g)
// - xhat mean(g xhat)), g = gamma dY, and the rows' dgamma (dY xhat) and dbeta (dY) sums added into dg, db.
// oneDNN 2.6's primitive took 1.15-1.5x as long on BERT's [4096, 128] rows in four runs of five, 2 threads (README).
JOULE_X86_64_V4_CLONE void layer_norm_backward_rows(const float* __restrict dy, const float* __restrict x, const float* __restrict gamma,
                                                    const float* __restrict mean, const float* __restrict var, float* __restrict dx, float* __restrict dg,
                                                    float* __restrict db, int64_t h, float eps, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
        const float *dyr = dy + r * h, *xr = x + r * h;
        float* dxr = dx + r * h;
        const float m = mean[r], rstd = 1.0f / std::sqrt(var[r] + eps);
        float sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
        for (int64_t i = 0; i < h; ++i) {
            const float xh = (xr[i] - m) * rstd, g = gamma[i] * dyr[i];
            sg += g, sgx += g * xh;
            dg[i] += dyr[i] * xh, db[i] += dyr[i];
        }
        const float mg = sg / float(h), mgx = sgx / float(h);
#pragma omp simd
        for (int64_t i = 0; i < h; ++i) dxr[i] = rstd * (gamma[i] * dyr[i] - mg - (xr[i] - m) * rstd * mgx);
    }
}
// dgamma and dbeta are summed in parts of rows fixed by the shape (as batch norm's channel sums), added in order:
// the same bits on any thread count.
std::unique_ptr<Kernel> layer_norm_backward_loop(const KernelArgs& a) {
    const float eps = attrs_as<NormAttrs>(a.node).eps;
    const int64_t h = a.out_desc(0).shape.back(), rows = a.out_desc(0).numel() / h;
    auto in = [&](size_t i) { return static_cast<const float*>(a.in[i]); };
    const float *dy = in(0), *x = in(1), *gamma = in(2), *mean = in(3), *var = in(4);
    float *dx = static_cast<float*>(a.out[0]), *dgamma = static_cast<float*>(a.out[1]), *dbeta = static_cast<float*>(a.out[2]);
    const int64_t parts = row_parts(rows);
    auto partial = std::make_shared<std::vector<float>>(size_t(2 * h * parts));
    return std::make_unique<FunctionKernel>([=](const RunContext&) {
        std::fill(partial->begin(), partial->end(), 0.0f);
        parallel_chunks(parts, [&](int64_t p0, int64_t p1) {
            for (int64_t p = p0; p < p1; ++p) {
                float* dg = partial->data() + 2 * h * p;
                const auto [first, last] = part_rows(rows, p, parts);
                layer_norm_backward_rows(dy, x, gamma, mean, var, dx, dg, dg + h, h, eps, first, last);
            }
        });
        for (int64_t i = 0; i < h; ++i) {
            double g = 0, b = 0;
            for (int64_t p = 0; p < parts; ++p) g += (*partial)[size_t(2 * h * p + i)], b += (*partial)[size_t(2 * h * p + h + i)];
            dgamma[i] = float(g), dbeta[i] = float(b);
        }
    });
}

// LayerNorm over the last dim of a [..., H] tensor, viewed as [rows, H]: oneDNN's primitives, but the loop above
// for the backward in f32.
std::unique_ptr<Kernel> layer_norm(const KernelArgs& a) {
    const auto& at = attrs_as<NormAttrs>(a.node);
    const bool fwd_node = a.node.kind == OpKind::LayerNorm;
    const TensorDesc& x = fwd_node ? a.in_desc(0) : a.in_desc(1);
    if (!fwd_node && a.node.compute == DType::F32 && x.dtype == DType::F32 && a.in_desc(0).dtype == DType::F32 && a.out_desc(0).dtype == DType::F32)
        return layer_norm_backward_loop(a);
    const dt type = compute_type(a.node.compute);
    const int64_t h = x.shape.back(), rows = x.numel() / h;
    const memory::desc data({rows, h}, dnnl_type(x.dtype), tag::ab), cdata = with_type(data, type), stat({rows}, dt::f32, tag::a), chan({h}, dt::f32, tag::a);
    const std::string key = norm_key(x, at, type);
    auto fwd = a.ctx.cache.get<layer_normalization_forward>(key, [&] {
        return layer_normalization_forward::primitive_desc({prop_kind::forward_training, cdata, stat, at.eps, kScaleShift}, a.ctx.engine);
    });
    if (!fwd_node)
        return norm_backward<layer_normalization_backward>(a, data, stat, chan, fwd, key, type,
                                                           {prop_kind::backward, cdata, cdata, stat, at.eps, kScaleShift});
    auto k = std::make_unique<PrimitiveKernel>(a.ctx);
    StagedOutputs outs;
    k->add(fwd->prim, {{DNNL_ARG_SRC, compute_input(a, data, a.in[0], type)}, {DNNL_ARG_SCALE, a.mem(chan, a.in[1])},
                       {DNNL_ARG_SHIFT, a.mem(chan, a.in[2])}, {DNNL_ARG_DST, outs.add(a, data, a.out[0], type)},
                       {DNNL_ARG_MEAN, a.mem(stat, a.out[1])}, {DNNL_ARG_VARIANCE, a.mem(stat, a.out[2])}});
    outs.finish(*k);
    return k;
}
}  // namespace

std::unique_ptr<Kernel> make_norm(const KernelArgs& a) {
    switch (a.node.kind) {
        case OpKind::BatchNorm2d: return std::make_unique<BatchNormForward>(a);
        case OpKind::BatchNormBackward: return std::make_unique<BatchNormBackward>(a);
        default: return layer_norm(a);
    }
}

}  // namespace joule::cpu
