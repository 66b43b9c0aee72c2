//===- CudnnAttention.h - causal attention on cuDNN's kernels --*- C++ -*-===//
//
// Causal attention through cuDNN's graph API: the forward as a graph of
// Q·Kᵀ, the scale, the causal mask (and a sliding window's), a softmax that
// also yields each row's log-sum-exp, and P·V, and the backward as the graph of
// its gradients, each of which cuDNN runs as a fused flash-attention kernel of
// its own; soft caps (Gemma 2's), ALiBi (BLOOM's) and sinks (one more logit a
// head) go into the graphs too, as cuDNN's frontend puts them, and chunks
// (Llama 4's) as a third mask. MEGATRAIN_CUDA_ATTENTION=cudnn asks for them
// with the deterministic backward, =cudnn-nondeterministic with the other
// (CudaKernels). What they are not given (head dims past 256 or not a
// multiple of 8, a backward that leaves a gradient out, a deterministic
// backward whose dS would pass its bound, what cuDNN's frontend would not hand
// over as it stands (a backward over S not a multiple of 128 up to cuDNN
// 9.15, or S = 1; soft caps before 9.4, sinks before 9.13), and any shape
// cuDNN has no engine for) stay on the tensor-core kernels. The sinks'
// gradient is always the runtime's own.
//
// cuDNN is loaded with dlopen at first use ($MEGATRAIN_CUDNN, then
// libcudnn.so.9 on the loader's path), so that the runtime builds and runs
// without it; the build needs only its headers (cudnn_graph.h), and a build
// without them says so when this path is asked for.
//
//===----------------------------------------------------------------------===//

#ifndef MEGATRAIN_RUNTIME_CUDA_CUDNNATTENTION_H
#define MEGATRAIN_RUNTIME_CUDA_CUDNNATTENTION_H

#include "runtime/kernels/HeadLayout.h"
#include "runtime/kernels/KeyRange.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace mtrt::cuda {

/// One attention call's shape: B sequences of S positions, H query heads
/// over Hkv key/value heads, head dim D; q and y are (B, H, S, D), k and v
/// (B, Hkv, S, D), all contiguous bf16, or each with its heads and positions
/// swapped where layout.seq_major (HeadLayout.h; the graphs take either
/// by their strides). A sliding window shorter than the
/// sequence keeps keys j > i − window (KeyRange); 0 for none. A soft cap
/// turns each scaled score s into softcap · tanh(s / softcap); 0 for none.
/// With sinks, each query head's softmax has one more logit (H floats the
/// forward is given), weighing no value; the backward is the same graph.
/// With ALiBi, query head h adds slope_h · (j − i) to its scores. Chunks
/// shorter than the sequence keep keys j ≥ i − i mod chunk; 0 for none.
struct AttentionDims {
  int64_t B = 0, H = 0, Hkv = 0, S = 0, D = 0, window = 0;
  float softcap = 0;
  bool sinks = false, alibi = false;
  int64_t chunk = 0;
  HeadLayout layout = {};
};

/// The per-head arrays some forms bind, H floats each in device memory:
/// the sinks (the forward's, where AttentionDims::sinks) and ALiBi's slopes
/// (where AttentionDims::alibi); null where the form has none.
struct HeadTerms {
  const float *sinks = nullptr, *slopes = nullptr;
};

/// Which of cuDNN's attention backwards runs. The deterministic one (the
/// graph cuDNN's frontend builds for a deterministic backward on Hopper)
/// holds dS whole in cuDNN's workspace, B·H·S²·2 bytes with S rounded up to
/// 128, and writes dQ by one product over it; the other adds dQ up into an
/// f32 sum in no fixed order, in O(S) memory.
enum class CudnnBackward { Deterministic, Nondeterministic };

class CudnnAttention {
public:
  /// Loads cuDNN and makes a handle on the current device; throws Error
  /// saying what is missing.
  CudnnAttention();
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention &) = delete;
  CudnnAttention &operator=(const CudnnAttention &) = delete;

  /// Whether cuDNN is given attention at head dim D: every form the
  /// runtime has (causal, in a window or in chunks, soft-capped, with sinks
  /// or ALiBi) goes into its graphs.
  static bool takes(int64_t D) { return D > 0 && D <= 256 && D % 8 == 0; }
  /// The window and the chunk of AttentionDims for `range` over S
  /// positions: 0 where they are as long as the sequence.
  static int64_t window_of(const KeyRange &range, int64_t S) {
    return range.window > 0 && range.window < S ? range.window : 0;
  }
  static int64_t chunk_of(const KeyRange &range, int64_t S) {
    return range.chunk > 0 && range.chunk < S ? range.chunk : 0;
  }

  /// Whether cuDNN has an engine for the forward over this shape, or for
  /// the backward `how`. The first ask for a shape builds its plan (cuDNN
  /// may compile its kernel then, which takes seconds); a refusal, cuDNN's
  /// or one by version as its frontend makes them, is kept and said once on
  /// stderr with the reason, and the caller runs its own kernels for that
  /// shape. Any other failure throws Error.
  bool has_forward(const AttentionDims &d);
  bool has_backward(const AttentionDims &d, CudnnBackward how);

  /// Device bytes forward() needs as scratch for a shape it has: each
  /// row's log-sum-exp and cuDNN's workspace.
  int64_t forward_scratch_bytes(const AttentionDims &d);

  /// y = softmax(scale·q·kᵀ, causal)·v on `stream` (a cudaStream_t), and
  /// each row's log-sum-exp into lse (B·H·S floats) unless it is null;
  /// `heads` as the form of `d` asks; `scratch` holds
  /// forward_scratch_bytes(d) bytes of device memory.
  void forward(void *y, float *lse, const void *q, const void *k, const void *v,
               const HeadTerms &heads, const AttentionDims &d, float scale,
               void *scratch, void *stream);

  /// Adds n bf16 values at src into dst, on the stream.
  using AddInto = std::function<void(void *dst, const void *src, int64_t n)>;

  /// The bytes of dS the deterministic backward holds for this shape (S
  /// rounded up to 128, the tile cuDNN lays dS out in), and the workspace
  /// it asks for around them: dS, dQ summed in f32 and a little of cuDNN's
  /// own (what cuDNN 9.19 and 9.26 plan for an H200: CudnnPlanAheadTest).
  /// It runs where dS is within the bound this runtime gives it, 2 GiB (a
  /// step of 4 × 2048 tokens with 32 heads takes 1 GiB), and the workspace
  /// within `room`, what the plan's device budget leaves (CudaKernels); else
  /// the deterministic choice is the tensor-core kernels' backward.
  static int64_t deterministic_scores_bytes(const AttentionDims &d) {
    const int64_t s = (d.S + 127) / 128 * 128;
    return d.B * d.H * s * s * 2;
  }
  static int64_t deterministic_workspace_bytes(const AttentionDims &d) {
    return deterministic_scores_bytes(d) + d.B * d.H * d.S * d.D * 4 +
           (int64_t(1) << 20);
  }
  static constexpr int64_t kDeterministicBound = int64_t(2) << 30;
  static bool deterministic_backward_fits(const AttentionDims &d,
                                          int64_t room) {
    return deterministic_scores_bytes(d) <= kDeterministicBound &&
           deterministic_workspace_bytes(d) <= room;
  }

  /// Device bytes backward() needs as scratch for a shape it has; `adds`:
  /// whether its gradients are added (backward's `add` given).
  int64_t backward_scratch_bytes(const AttentionDims &d, CudnnBackward how,
                                 bool adds);

  /// The gradients of the forward above for dy, on `stream`, from that
  /// forward's y and lse (B·H·S floats, each row's log-sum-exp in natural
  /// log) by cuDNN's fused backward `how`: written into dq, dk and dv, or,
  /// given `add`, written into scratch and added into each by it.
  void backward(void *dq, void *dk, void *dv, const void *dy, const void *q,
                const void *k, const void *v, const void *y, const float *lse,
                const HeadTerms &heads, const AttentionDims &d, float scale,
                CudnnBackward how, void *scratch, void *stream,
                const AddInto &add);

  /// Builds every tensor and operation descriptor of the forward's and both
  /// backwards' graphs for `d`, all that needs no device; throws Error
  /// naming the first that cuDNN refuses, or saying why cuDNN cannot be
  /// loaded.
  static void check_descriptors(const AttentionDims &d);

  /// Plans the forward (or the backward `how`) over `d` ahead of time for
  /// the device `device_json` describes (cuDNN's JSON form of a device's
  /// properties), without a device here: "" where cuDNN has an engine for it
  /// (its workspace into `workspace`, if given), else why not, as
  /// has_forward and has_backward would say it. Throws Error if cuDNN cannot
  /// be loaded or cannot plan without a device (before 9.8).
  static std::string plan_ahead(const AttentionDims &d, bool backward,
                                CudnnBackward how,
                                const std::string &device_json,
                                int64_t *workspace = nullptr);

  /// cuDNN's JSON form of the properties of CUDA device `device` (here, with
  /// a GPU), what plan_ahead takes; throws Error where cuDNN cannot give it.
  static std::string device_properties(int device);

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Whether this build can load cuDNN here; if not, why (into `why`).
bool cudnn_loadable(std::string *why);

/// Why the forward (or a backward) over `d` is not given to the cuDNN
/// loaded, as cuDNN's own frontend would not give it (S not a multiple of
/// 128 in a backward up to cuDNN 9.15, S = 1 in a backward, versions with
/// known faults); "" where it is.
std::string cudnn_withholds(const AttentionDims &d, bool backward);

} // namespace mtrt::cuda

#endif // MEGATRAIN_RUNTIME_CUDA_CUDNNATTENTION_H
