//===- Bf16.h - bf16 bits to and from float ---------------------*- C++ -*-===//
//
// bf16 is the top half of an IEEE float: widening is exact; narrowing here
// rounds to nearest even (stochastic rounding lives with the optimizer).
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_HOST_BF16_H
#define MEGATRAIN_RUNTIME_HOST_BF16_H

#include <cstdint>
#include <cstring>

namespace mtrt {

inline float bf16_widen(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest even. NaN is quieted so that truncation keeps a mantissa
// bit; adding 0x7fff plus the kept lsb rounds half to even, and a carry into
// the exponent is the right answer (up to infinity).
inline uint16_t bf16_nearest(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((u | 0x00400000u) >> 16);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_HOST_BF16_H
