//===- CudaKernels.h - DeviceKernels on a CUDA stream -------------*- C++
//-*-===//
//
// Storage is bf16 (__nv_bfloat16), param gradients f32, token ids i32, as
// DeviceKernels.h says; every kernel reads bf16, computes in f32 and rounds
// its storage outputs once, to nearest even. Every call only enqueues work
// on the stream set with set_stream() (the backend's compute stream) and
// returns: nothing here synchronizes.
//
//  - GEMMs: cuBLASLt, bf16 operands, f32 accumulation; dW accumulates into
//    the f32 gradient slot (C = D in f32, beta = 1); bias as an epilogue.
//  - Everything else: own kernels in ElementwiseKernels.cu, NormKernels.cu,
//    AttentionKernels.cu and LossKernels.cu. Reductions run in a fixed order
//    with no atomics, so two runs give the same bits.
//  - Scratch (row statistics, partial sums, cuDNN's attention arrays) comes
//    from one buffer that grows with cudaMallocAsync on the stream the first
//    time a shape needs more; after the first step nothing is allocated.
//
// This header has no CUDA types, so host code and tests include it freely.
// The same sources build an emulated variant in mtrt::cudaemu (see
// CudaCompat.h) for tests on machines without a GPU.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_CUDA_CUDAKERNELS_H
#define MEGATRAIN_RUNTIME_CUDA_CUDAKERNELS_H

#include "runtime/cuda/CudnnAttention.h"
#include "runtime/cuda/KernelNamespace.h"
#include "runtime/exec/DeviceKernels.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace mtrt::MT_KNS {

namespace attn {
struct ScoreForm; // AttentionCommon.cuh
} // namespace attn

/// A column-major GEMM in cuBLAS terms: D = alpha·op(A)·op(B) + beta·C (+
/// bias over rows), D = C in place. A and B are bf16; C is f32 or bf16.
/// `batch` such GEMMs, the i-th on A, B and C advanced by i times their
/// strides (elements).
struct GemmSpec {
  bool trans_a, trans_b;
  int64_t m, n, k;
  const void *a;
  int64_t lda;
  const void *b;
  int64_t ldb;
  void *c;
  int64_t ldc;
  bool c_f32;
  float beta;
  const void *bias; // bf16 (m), or null
  float alpha = 1.f;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
};

/// Maps linear's row-major products to cuBLAS's column-major GEMMs
/// (docs/primitives.md "linear"): the forward, dx and dW.
GemmSpec linear_forward_gemm(void *y, const void *x, const void *w,
                             const void *b, int64_t M, int64_t K, int64_t N,
                             bool w_in_out, bool accumulate);
GemmSpec linear_dx_gemm(void *dx, const void *dy, const void *w, int64_t M,
                        int64_t K, int64_t N, bool w_in_out, bool accumulate);
GemmSpec linear_dw_gemm(float *dw, const void *dy, const void *x, int64_t M,
                        int64_t K, int64_t N, bool w_in_out);
/// dq += scale · dS·K over the tensor-core dK/dV pass's dSᵀ (B·Hkv blocks
/// of S keys by group·S queries, attn::tensor_core_backward), dq and k laid
/// out as `layout` says: heads-major, one batched GEMM, a KV head's group
/// of query heads as the rows of each; sequence-major, group · min(B, Hkv)
/// batched GEMMs, one query head's rows each.
std::vector<GemmSpec> attention_dq_gemms(void *dq, const void *ds_t,
                                         const void *k, int64_t Bn, int64_t H,
                                         int64_t Hkv, int64_t S, int64_t D,
                                         float scale, bool accumulate,
                                         HeadLayout layout);

/// Which kernels run attention (AttentionCommon.cuh): tensor cores, CUDA
/// cores with all math in f32 (slower; a reference for the tensor-core
/// kernels), or cuDNN's fused kernels where they take the form and the
/// tensor-core kernels elsewhere (CudnnAttention.h), with cuDNN's
/// deterministic backward (Cudnn) or its other (CudnnNondeterministic).
enum class AttentionKernels {
  TensorCores,
  CudaCores,
  Cudnn,
  CudnnNondeterministic
};

/// Whether the family runs cuDNN's kernels where they take the form.
inline bool on_cudnn(AttentionKernels a) {
  return a == AttentionKernels::Cudnn ||
         a == AttentionKernels::CudnnNondeterministic;
}

/// The family MEGATRAIN_CUDA_ATTENTION names ("tensor-cores", the default,
/// "cuda-cores", "cudnn" or "cudnn-nondeterministic"); throws Error naming
/// the variable for anything else.
AttentionKernels attention_kernels_from_env();

/// The family in words, for the trainer's first line.
const char *describe(AttentionKernels k);

/// Which kernels run a mixture of experts (MoeCommon.cuh): grouped GEMMs on
/// tensor cores, or reference kernels on CUDA cores in f32 (slower; the
/// tensor-core path's oracle).
enum class MoeKernels { TensorCores, CudaCores };

/// The family MEGATRAIN_CUDA_MOE names ("tensor-cores", the default, or
/// "cuda-cores"); throws Error naming the variable for anything else.
MoeKernels moe_kernels_from_env();

/// Throws Error when the attention kernels cannot run a head dim of
/// `head_dim` or ALiBi over `alibi_heads` heads.
void check_attention_limits(int64_t head_dim, int64_t alibi_heads);

class CudaKernels final : public DeviceKernels {
public:
  /// Creates the cuBLASLt handle and its workspace on the current device.
  CudaKernels();
  ~CudaKernels() override;
  CudaKernels(const CudaKernels &) = delete;
  CudaKernels &operator=(const CudaKernels &) = delete;

  /// The stream every later call enqueues on (a cudaStream_t).
  void set_stream(void *stream) { stream_ = stream; }
  void *stream() const { return stream_; }
  /// The most scratch any call has needed so far, bytes.
  int64_t scratch_peak() const { return scratch_bytes_; }
  /// Device bytes the plan's budget (or the device's free memory, where
  /// less) leaves beyond the arenas and the reserve for kernel scratch:
  /// scratch a kernel may do without (the attention backward's dS held
  /// whole) stays within it. Unbounded until the backend sets it.
  void set_scratch_room(int64_t bytes) { scratch_room_ = bytes; }
  int64_t scratch_room() const { return scratch_room_; }
  void set_attention_kernels(AttentionKernels k) { attention_ = k; }
  AttentionKernels attention_kernels() const { return attention_; }
  /// Whether cuDNN has an engine for this shape's forward or backward
  /// (CudnnAttention::has_forward and has_backward): where it has none, the
  /// cuDNN families run the tensor-core kernels for the shape.
  bool cudnn_has_forward(const cuda::AttentionDims &d);
  bool cudnn_has_backward(const cuda::AttentionDims &d,
                          cuda::CudnnBackward how);
  void set_moe_kernels(MoeKernels k) { moe_ = k; }

  int64_t storage_size() const override { return 2; }

  void zero(void *x, int64_t n) override;
  void zero_f32(float *x, int64_t n) override;
  void copy(void *y, const void *x, int64_t n) override;
  void accumulate_f32(float *g, const void *x, int64_t n) override;

  void linear_forward(void *y, const void *x, const void *w, const void *b,
                      int64_t M, int64_t K, int64_t N, bool w_in_out,
                      bool accumulate) override;
  void linear_backward(void *dx, float *dw, float *db, const void *dy,
                       const void *x, const void *w, int64_t M, int64_t K,
                       int64_t N, bool w_in_out, bool accumulate_dx) override;
  void rms_norm_forward(void *y, const void *x, const void *w, int64_t M,
                        int64_t D, float eps) override;
  void rms_norm_backward(void *dx, float *dw, const void *dy, const void *x,
                         const void *w, int64_t M, int64_t D, float eps,
                         bool accumulate_dx) override;
  void layer_norm_forward(void *y, const void *x, const void *w, const void *b,
                          int64_t M, int64_t D, float eps) override;
  void layer_norm_backward(void *dx, float *dw, float *db, const void *dy,
                           const void *x, const void *w, int64_t M, int64_t D,
                           float eps, bool accumulate_dx) override;
  void rope_forward(void *y, const void *x, const void *cos, const void *sin,
                    int64_t B, int64_t H, int64_t S, int64_t D, int64_t R,
                    int seq_axis, bool interleaved) override;
  void rope_backward(void *dx, const void *dy, const void *cos, const void *sin,
                     int64_t B, int64_t H, int64_t S, int64_t D, int64_t R,
                     int seq_axis, bool interleaved, bool accumulate) override;
  void attention_forward(void *y, float *lse, const void *q, const void *k,
                         const void *v, int64_t B, int64_t H, int64_t Hkv,
                         int64_t S, int64_t D, float scale,
                         const KeyRange &range, float softcap,
                         const float *alibi_slopes, const void *sinks,
                         HeadLayout layout) override;
  void attention_delta(float *delta, const void *dy, const void *y, int64_t B,
                       int64_t H, int64_t S, int64_t D,
                       HeadLayout layout) override;
  void attention_backward(void *dq, void *dk, void *dv, const void *dy,
                          const void *q, const void *k, const void *v,
                          const void *y, const float *delta, const float *lse,
                          int64_t B, int64_t H, int64_t Hkv, int64_t S,
                          int64_t D, float scale, const KeyRange &range,
                          float softcap, const float *alibi_slopes,
                          const void *sinks, float *dsinks, bool accumulate,
                          HeadLayout layout) override;
  void relu_forward(void *y, const void *x, int64_t n) override;
  void relu_backward(void *dx, const void *dy, const void *x,
                     int64_t n) override;
  void sigmoid_forward(void *y, const void *x, int64_t n) override;
  void exp_forward(void *y, const void *x, int64_t n) override;
  void softplus_forward(void *y, const void *x, int64_t n) override;
  void softplus_backward(void *dx, const void *dy, const void *x,
                         int64_t n) override;
  void sigmoid_backward(void *dx, const void *dy, const void *x,
                        int64_t n) override;
  void silu_forward(void *y, const void *x, int64_t n) override;
  void silu_backward(void *dx, const void *dy, const void *x,
                     int64_t n) override;
  void gelu_forward(void *y, const void *x, int64_t n,
                    bool approximate_tanh) override;
  void gelu_backward(void *dx, const void *dy, const void *x, int64_t n,
                     bool approximate_tanh) override;
  void softcap_forward(void *y, const void *x, int64_t n, float cap) override;
  void softcap_backward(void *dx, const void *dy, const void *x, int64_t n,
                        float cap) override;
  void moe_forward(void *y, const void *x, const void *router_x,
                   const MoeParams &w, int64_t T, int64_t H, int64_t E,
                   int64_t I, int64_t k, const MoeRouting &routing,
                   const MoeExperts &experts) override;
  void moe_backward(void *dx, void *drouter_x, const MoeWeightGrads &g,
                    const void *dy, const void *x, const void *router_x,
                    const MoeParams &w, int64_t T, int64_t H, int64_t E,
                    int64_t I, int64_t k, const MoeRouting &routing,
                    const MoeExperts &experts) override;
  void causal_conv_forward(void *y, const void *x, const void *w,
                           const void *bias, int64_t B, int64_t C, int64_t S,
                           int64_t K) override;
  void causal_conv_backward(void *dx, float *dw, float *db, const void *dy,
                            const void *x, const void *w, int64_t B, int64_t C,
                            int64_t S, int64_t K) override;
  void gated_scan_forward(void *o, const void *q, const void *k, const void *v,
                          const void *g, const void *beta, int64_t B, int64_t T,
                          int64_t Hk, int64_t Hv, int64_t Dk, int64_t Dv,
                          bool delta, bool key_decay) override;
  void gated_scan_backward(void *dq, void *dk, void *dv, void *dg, void *dbeta,
                           const void *dout, const void *q, const void *k,
                           const void *v, const void *g, const void *beta,
                           int64_t B, int64_t T, int64_t Hk, int64_t Hv,
                           int64_t Dk, int64_t Dv, bool delta,
                           bool key_decay) override;
  void xielu_forward(void *y, const void *x, const void *alpha_p,
                     const void *alpha_n, int64_t n, float beta, float eps,
                     bool softplus) override;
  void xielu_backward(void *dx, float *dalpha_p, float *dalpha_n,
                      const void *dy, const void *x, const void *alpha_p,
                      const void *alpha_n, int64_t n, float beta, float eps,
                      bool softplus) override;
  void swiglu_forward(void *y, const void *gate, const void *up,
                      int64_t n) override;
  void swiglu_backward(void *dgate, void *dup, const void *dy, const void *gate,
                       const void *up, int64_t n, bool accumulate) override;
  void scale_forward(void *y, const void *x, int64_t n, float factor) override;
  void add_forward(void *y, const void *a, const void *b,
                   const Broadcast &bc) override;
  void add_backward(void *da, void *db, const void *dy,
                    const Broadcast &bc) override;
  void mul_forward(void *y, const void *a, const void *b,
                   const Broadcast &bc) override;
  void mul_backward(void *da, void *db, const void *dy, const void *a,
                    const void *b, const Broadcast &bc) override;
  void embed_forward(void *y, const int32_t *ids, const void *table, int64_t N,
                     int64_t V, int64_t D) override;
  void embed_backward(float *dtable, const void *dy, const int32_t *ids,
                      int64_t N, int64_t V, int64_t D) override;
  void embed_forward_piece(void *y, const int32_t *ids, const void *table,
                           int64_t N, int64_t Vp, int64_t D, int64_t v0,
                           int64_t V, bool first, float scale) override;
  void embed_backward_piece(float *dtable, const void *dy, const int32_t *ids,
                            int64_t N, int64_t Vp, int64_t D, int64_t v0,
                            float scale) override;
  void position_embed_forward(void *y, const void *table, int64_t S, int64_t D,
                              int64_t offset) override;
  void position_embed_backward(float *dtable, const void *dy, int64_t S,
                               int64_t D, int64_t offset) override;
  void cross_entropy_forward(float *loss, const void *logits,
                             const int32_t *targets, int64_t N, int64_t V,
                             int64_t total_rows, bool accumulate) override;
  void cross_entropy_backward(void *dlogits, const void *logits,
                              const int32_t *targets, int64_t N, int64_t V,
                              float dloss, bool accumulate) override;
  void cross_entropy_stats(float *stats, const void *logits,
                           const int32_t *targets, int64_t N, int64_t Vp,
                           int64_t v0, int64_t V, bool first) override;
  void cross_entropy_stats_loss(float *loss, const float *stats, int64_t N,
                                int64_t total_rows, bool accumulate) override;
  void cross_entropy_backward_piece(void *dlogits, const void *logits,
                                    const int32_t *targets, const float *stats,
                                    int64_t N, int64_t Vp, int64_t v0,
                                    float dloss, bool accumulate) override;
  void transpose_forward(void *y, const void *x, const int64_t *x_shape,
                         const int64_t *perm, int rank) override;
  void transpose_backward(void *dx, const void *dy, const int64_t *x_shape,
                          const int64_t *perm, int rank) override;
  void slice_forward(void *y, const void *x, int64_t outer, int64_t dim,
                     int64_t inner, int64_t start, int64_t n) override;
  void slice_backward(void *dx, const void *dy, int64_t outer, int64_t dim,
                      int64_t inner, int64_t start, int64_t n) override;

  /// Runs one GEMM (cuBLASLt on the device; a plain loop when emulated).
  void gemm(const GemmSpec &g);

private:
  /// Scratch for the current call: at least `bytes`, valid until the next
  /// call that asks for scratch (calls are ordered on one stream).
  void *scratch(int64_t bytes);
  /// One broadcast operand's gradient (add: other == null).
  void reduce_to_operand(void *d_operand, const void *dy, const void *other,
                         const Broadcast &bc, bool lhs);
  /// The attention forward and backward on cuDNN (forms
  /// CudnnAttention::takes, shapes cuDNN has an engine for).
  /// `form` as our kernels take it: its sinks (bf16, on the device) and
  /// ALiBi's slopes (by value) are what cuDNN's graphs bind, in f32.
  void cudnn_attention_forward(void *y, float *lse, const void *q,
                               const void *k, const void *v,
                               const attn::ScoreForm &form,
                               const cuda::AttentionDims &d, float scale);
  void cudnn_attention_backward(void *dq, void *dk, void *dv, const void *dy,
                                const void *q, const void *k, const void *v,
                                const void *y, const float *lse,
                                const attn::ScoreForm &form,
                                const cuda::AttentionDims &d, float scale,
                                cuda::CudnnBackward how, bool accumulate);
  /// The sinks and slopes `d` has, in f32 at `at` (their bytes: the
  /// form's), written by one kernel on the stream.
  cuda::HeadTerms cudnn_head_terms(void *at, const cuda::AttentionDims &d,
                                   const attn::ScoreForm &form);

  void *stream_ = nullptr;
  void *scratch_ = nullptr;
  int64_t scratch_bytes_ = 0;
  int64_t scratch_room_ = std::numeric_limits<int64_t>::max();
  int sm_count_ = 108;
  AttentionKernels attention_ = AttentionKernels::TensorCores;
  MoeKernels moe_ = MoeKernels::TensorCores;

  struct Lt; // cuBLASLt handle, workspace, cached plans (device build only)
  std::unique_ptr<Lt> lt_;
#ifndef MEGATRAIN_CUDA_EMULATION
  // cuDNN's attention, made at its first call.
  cuda::CudnnAttention &cudnn();
  std::unique_ptr<cuda::CudnnAttention> cudnn_;
#endif
};

/// Sleeps `ns` nanoseconds on the stream (stress mode's device-side delays).
void launch_delay(void *stream, uint32_t ns);

#ifndef MEGATRAIN_CUDA_EMULATION
/// Loads cuBLASLt (once); false, with the reason, when it cannot. Needs no
/// device.
bool load_cublaslt(std::string *why);
#endif

} // namespace mtrt::MT_KNS

#endif // MEGATRAIN_RUNTIME_CUDA_CUDAKERNELS_H
