//===- CudnnAttention.h - attention forward on cuDNN's kernels -*- C++ -*-===//
//
// The causal attention forward through cuDNN's graph API: a graph of Q·Kᵀ,
// the scale, the causal mask, a softmax that also yields each row's
// log-sum-exp, and P·V, which cuDNN runs as one fused flash-attention
// kernel of its own. MEGATRAIN_CUDA_ATTENTION=cudnn asks for it
// (CudaKernels). The forms it is not given (sliding windows, chunks, soft
// caps, ALiBi, sinks, head dims past 128 or not a multiple of 8) and the
// whole backward stay on the tensor-core kernels, whose dQ pass finds the
// log-sum-exp again itself, so the two families mix freely.
//
// cuDNN is loaded with dlopen at first use ($MEGATRAIN_CUDNN, then
// libcudnn.so.9 on the loader's path), so that the runtime builds and runs
// without it; the build needs only its headers (cudnn_graph.h), and a build
// without them says so when this path is asked for.
//
//===----------------------------------------------------------------------===//

#ifndef MEGATRAIN_RUNTIME_CUDA_CUDNNATTENTION_H
#define MEGATRAIN_RUNTIME_CUDA_CUDNNATTENTION_H

#include <cstdint>
#include <memory>
#include <string>

namespace mtrt::cuda {

/// One attention call's shape: B sequences of S positions, H query heads
/// over Hkv key/value heads, head dim D; q and y are (B, H, S, D), k and v
/// (B, Hkv, S, D), all contiguous bf16.
struct AttentionDims {
  int64_t B = 0, H = 0, Hkv = 0, S = 0, D = 0;
};

class CudnnAttention {
public:
  /// Loads cuDNN and makes a handle on the current device; throws Error
  /// saying what is missing.
  CudnnAttention();
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention &) = delete;
  CudnnAttention &operator=(const CudnnAttention &) = delete;

  /// Whether cuDNN is given the attention of this form (the file comment).
  static bool takes(int64_t D, int64_t window, int64_t chunk, float softcap,
                    bool alibi, bool sinks) {
    return D > 0 && D <= 128 && D % 8 == 0 && window == 0 && chunk == 0 &&
           softcap == 0.f && !alibi && !sinks;
  }

  /// Device bytes forward() needs as scratch for this shape: each row's
  /// log-sum-exp and cuDNN's workspace. The first call for a shape builds
  /// its plan (cuDNN may compile its kernel then, which takes seconds).
  int64_t scratch_bytes(const AttentionDims &d, float scale);

  /// y = softmax(scale·q·kᵀ, causal)·v on `stream` (a cudaStream_t);
  /// `scratch` holds scratch_bytes(d, scale) bytes of device memory.
  void forward(void *y, const void *q, const void *k, const void *v,
               const AttentionDims &d, float scale, void *scratch,
               void *stream);

  /// Builds every tensor and operation descriptor of the forward's graph
  /// for `d`, all that needs no device; throws Error naming the first that
  /// cuDNN refuses, or saying why cuDNN cannot be loaded.
  static void check_descriptors(const AttentionDims &d);

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Whether this build can load cuDNN here; if not, why (into `why`).
bool cudnn_loadable(std::string *why);

} // namespace mtrt::cuda

#endif // MEGATRAIN_RUNTIME_CUDA_CUDNNATTENTION_H
