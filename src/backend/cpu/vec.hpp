// Internal to backend/cpu: 16-lane f32 vectors (GCC's vector extension) over f32 or bf16 storage, for the
// loops of joule's own that are vectorised by hand (norm.cpp, linear_rows.cpp, convert.cpp). Such a loop is compiled
// twice: a JOULE_V4 function (AVX-512) called where the CPU has it (kHasV4), and a plain loop otherwise.
#pragma once

#include <cstdint>
#include <cstring>

namespace joule::cpu {

// The vector helpers are always inlined into the loops: no v16 crosses a call, so GCC's note that passing
// 64-byte vectors without AVX-512 changes the ABI does not apply (GCC reports it at the end of the
// including file, hence no pop).
#pragma GCC diagnostic ignored "-Wpsabi"
#define JOULE_INLINE inline __attribute__((always_inline))
// The loops' x86-64-v4 builds (JOULE_V4: the *_v4 wrappers), called where the CPU has it (kHasV4).
#if defined(__x86_64__)
#define JOULE_V4 __attribute__((target("arch=x86-64-v4")))
inline const bool kHasV4 = (__builtin_cpu_init(), __builtin_cpu_supports("x86-64-v4"));  // init: this runs among the constructors
#else
#define JOULE_V4
inline const bool kHasV4 = false;
#endif
constexpr int64_t kLanes = 16;
typedef float v16 __attribute__((vector_size(64)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
typedef uint16_t u16x16 __attribute__((vector_size(32)));
JOULE_INLINE v16 ld16(const float* p) {
    v16 v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
JOULE_INLINE v16 widen_bf16x16(u16x16 h) { return v16(__builtin_convertvector(h, u32x16) << 16); }  // exact
JOULE_INLINE v16 ld16(const uint16_t* p) {
    u16x16 h;
    std::memcpy(&h, p, sizeof h);
    return widen_bf16x16(h);
}
JOULE_INLINE void st16(float* p, v16 v) { std::memcpy(p, &v, sizeof v); }
JOULE_INLINE u16x16 to_bf16x16(v16 v) {  // f32_to_bf16 on each lane: round to nearest even, NaN kept quiet
    const u32x16 u = u32x16(v), rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return __builtin_convertvector(v != v ? (u >> 16) | 0x40u : rounded, u16x16);
}
JOULE_INLINE void st16(uint16_t* p, v16 v) {
    const u16x16 h = to_bf16x16(v);
    std::memcpy(p, &h, sizeof h);
}
JOULE_INLINE v16 splat(float x) { return v16{} + x; }

// exp(v) for v <= 0 as 2^n e^r, r = v - n ln 2 in [-ln2/2, ln2/2] (ln 2 in two parts), e^r a Cephes-style
// degree-6 polynomial (relative error ~1e-7). The coefficients are shared by the scalar form in eltwise.cpp
// (GELU, which GCC vectorises) and exp16_nonpositive below.
namespace exp_poly {
constexpr float kLog2e = 1.44269504f, kLn2Hi = 0.693145751953125f, kLn2Lo = 1.428606765330187e-06f;
constexpr float kP0 = 1.3981999507e-3f, kP1 = 8.3334519073e-3f, kP2 = 4.1665795894e-2f, kP3 = 1.6666665459e-1f, kP4 = 5.0000001201e-1f;
}  // namespace exp_poly
// Each lane's exp(v) for v <= 0; 0 below -87 (e^-87 ~ 1.6e-38), NaN kept.
JOULE_INLINE v16 exp16_nonpositive(v16 v) {
    using namespace exp_poly;
    const auto tiny = v < -87.0f;
    v = tiny ? splat(-87.0f) : v;  // keeps the conversion below in range; NaN passes (its lanes stay NaN)
    const i32x16 n = __builtin_convertvector(v * kLog2e - 0.5f, i32x16);  // round(v / ln 2), v <= 0
    const v16 fn = __builtin_convertvector(n, v16), r = (v - fn * kLn2Hi) - fn * kLn2Lo;
    v16 p = r * kP0 + kP1;
    p = p * r + kP2;
    p = p * r + kP3;
    p = p * r + kP4;
    const v16 e = (p * r * r + r + 1.0f) * v16((n + 127) << 23);
    return tiny ? splat(0.0f) : e;
}

// The sum of a vector's lanes.
JOULE_INLINE float hsum(v16 v) {
    float s = 0;
    for (int j = 0; j < kLanes; ++j) s += v[j];
    return s;
}

}  // namespace joule::cpu
