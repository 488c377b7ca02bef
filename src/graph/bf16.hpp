// bfloat16 <-> float conversions (round to nearest even, NaN kept quiet), the one definition every
// backend's cast and every bf16 reference loop uses.
#pragma once

#include <cstdint>
#include <cstring>

namespace joule {

inline float bf16_to_f32(uint16_t h) {
    const uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return uint16_t((u >> 16) | 0x40u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
}

// The value f32 -> bf16 -> f32 gives: what a bf16 store keeps of f.
inline float round_to_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

}  // namespace joule
