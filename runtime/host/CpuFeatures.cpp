//===- CpuFeatures.cpp - SIMD paths the host CPU can run ------------------===//

#include "runtime/host/CpuFeatures.h"

namespace mtrt::host {

static CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's check also requires the OS to save the YMM/ZMM state (XCR0).
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
#endif
  return f;
}

const CpuFeatures &cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

bool simd_path_supported(SimdPath path) {
  switch (path) {
  case SimdPath::Scalar:
    return true;
  case SimdPath::Avx2:
    return cpu_features().avx2;
  case SimdPath::Avx512:
    return cpu_features().avx512f;
  }
  return false;
}

SimdPath active_simd_path() {
  if (simd_path_supported(SimdPath::Avx512))
    return SimdPath::Avx512;
  if (simd_path_supported(SimdPath::Avx2))
    return SimdPath::Avx2;
  return SimdPath::Scalar;
}

const char *simd_path_name(SimdPath path) {
  switch (path) {
  case SimdPath::Scalar:
    return "scalar";
  case SimdPath::Avx2:
    return "avx2";
  case SimdPath::Avx512:
    return "avx512";
  }
  return "unknown";
}

} // namespace mtrt::host
