//===- CpuFeatures.h - SIMD paths the host CPU can run -------*- C++ -*-===//
//
// The host optimizer ships a scalar kernel and AVX2 / AVX-512F kernels in one
// binary; which one runs is decided here, once, from what the CPU reports.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_HOST_CPUFEATURES_H
#define MEGATRAIN_RUNTIME_HOST_CPUFEATURES_H

namespace mtrt::host {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false; // not needed by the optimizer, which avoids FMA (AdamW.h)
  bool avx512f = false; // AVX-512 Foundation, with OS support for ZMM state
};

// Detected on first use; constant afterwards.
const CpuFeatures &cpu_features();

// Vector kernels of the host optimizer, widest last.
enum class SimdPath { Scalar, Avx2, Avx512 };

bool simd_path_supported(SimdPath path);
// The widest supported path: what the optimizer uses unless told otherwise.
SimdPath active_simd_path();
// "scalar", "avx2", "avx512".
const char *simd_path_name(SimdPath path);

} // namespace mtrt::host

#endif // MEGATRAIN_RUNTIME_HOST_CPUFEATURES_H
