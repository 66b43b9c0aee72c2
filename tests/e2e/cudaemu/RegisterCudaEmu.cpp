//===- RegisterCudaEmu.cpp - "cudaemu" in a generated trainer -------------===//
//
// Linked into a generated trainer by tests/e2e/cudaemu/CMakeLists.txt: the
// CUDA backend on emulated kernels becomes `--backend cudaemu`.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/CudaBackend.h"
#include "runtime/exec/BackendRegistry.h"

namespace {
const bool kRegistered =
    (mtrt::register_backend(mtrt::cuda_emulated_backend_entry()), true);
} // namespace
