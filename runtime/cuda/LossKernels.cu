//===- LossKernels.cu - softmax cross-entropy over rows of logits ---------===//
//
// One block per row, two passes over the row for a stable log-sum-exp: the
// max, then Σ exp(z − max) (every exponential in (0, 1]). The forward leaves
// each row's loss in scratch (N floats) and one block sums them in a fixed
// order, in double, and writes (or adds) the sum over the launch's rows; the
// backward recomputes the statistics and adds dloss·(softmax − onehot) into
// dlogits. Nothing beyond the given logits and N floats is ever held, so the
// caller passes the logits in row chunks (the head's loss_chunk).
// A target outside [0, V) (stress mode's poison) gives NaN, never a wild
// read.
//
// A vocabulary in pieces (the head's weight split over streaming units)
// keeps per-row statistics instead: the running max m, Σ exp(z − m) and the
// target's logit, merged piece by piece (an online log-sum-exp) by one
// block per row; the loss is then summed from them like the forward's, and
// the backward of each piece takes its softmax from the complete stats.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/KernelCommon.cuh"
#include "runtime/exec/Error.h"

namespace mtrt::MT_KNS {

namespace {

constexpr int kRowThreads = 256;
constexpr int kSumThreads = 256;

struct RowStats {
  float max, sum;
};

__device__ __forceinline__ RowStats row_stats(const bf16 *z, int64_t V) {
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
    m = fmaxf(m, bf2f(z[j]));
  m = block_max(m);
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
    s += expf(bf2f(z[j]) - m);
  return {m, block_sum(s)};
}

__global__ void __launch_bounds__(kRowThreads)
    ce_forward_kernel(float *row_loss, const bf16 *logits,
                      const int32_t *targets, int64_t V) {
  const int64_t n = blockIdx.x;
  const bf16 *z = logits + n * V;
  const RowStats st = row_stats(z, V);
  if (threadIdx.x == 0) {
    const int32_t t = targets[n];
    row_loss[n] =
        t >= 0 && t < V ? logf(st.sum) + st.max - bf2f(z[t]) : quiet_nan();
  }
}

/// Row n's loss as the forward left it in scratch.
struct ScratchLoss {
  const float *row_loss;
  __device__ double operator()(int64_t n) const { return double(row_loss[n]); }
};

/// Row n's loss from complete piece stats (m, s, t): m − t + log s, the
/// difference first and exact, since m and t are large when the logits are.
struct StatsLoss {
  const float *stats;
  __device__ double operator()(int64_t n) const {
    const float *st = stats + 3 * n;
    return double(st[0]) - double(st[2]) + double(logf(st[1]));
  }
};

template <class RowLoss>
__global__ void __launch_bounds__(kSumThreads)
    ce_sum_kernel(float *loss, RowLoss row_loss, int64_t N, int64_t total_rows,
                  bool accumulate) {
  __shared__ double part[kSumThreads];
  double acc = 0.0;
  for (int64_t n = threadIdx.x; n < N; n += kSumThreads)
    acc += row_loss(n);
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kSumThreads / 2; w > 0; w >>= 1) {
    if (int(threadIdx.x) < w)
      part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    *loss = (accumulate ? *loss : 0.f) + float(part[0] / double(total_rows));
}

__global__ void __launch_bounds__(kRowThreads)
    ce_backward_kernel(bf16 *dlogits, const bf16 *logits,
                       const int32_t *targets, int64_t V, float dloss,
                       bool accumulate) {
  const int64_t n = blockIdx.x;
  const bf16 *z = logits + n * V;
  bf16 *dz = dlogits + n * V;
  const RowStats st = row_stats(z, V);
  const int32_t t = targets[n];
  if (t < 0 || t >= V) {
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
      dz[j] = f2bf(quiet_nan());
    return;
  }
  const float coef = dloss / st.sum;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
    write_or_add(dz, j,
                 coef * expf(bf2f(z[j]) - st.max) - (j == t ? dloss : 0.f),
                 accumulate);
}

/// exp(from − to), which moves a sum of exp(z − from) to the max `to` >=
/// from. Equal maxima give 1, so merging while both are still −inf
/// (nothing seen yet) gives no exp(−inf + inf) = NaN.
__device__ __forceinline__ float rescale(float from, float to) {
  return from == to ? 1.f : expf(from - to);
}

/// One block per row merges the piece's max and sum into the row's stats
/// (m, s, t) and takes t from the piece when it holds the target.
__global__ void __launch_bounds__(kRowThreads)
    ce_stats_kernel(float *stats, const bf16 *logits, const int32_t *targets,
                    int64_t Vp, int64_t v0, int64_t V, bool first) {
  const int64_t n = blockIdx.x;
  const bf16 *z = logits + n * Vp;
  const RowStats piece = row_stats(z, Vp); // (−inf, 0) for an empty piece
  if (threadIdx.x == 0) {
    float *st = stats + 3 * n;
    const int64_t t = targets[n];
    const float m = first ? -INFINITY : st[0];
    const float s = first ? 0.f : st[1];
    float zt = first ? (t >= 0 && t < V ? 0.f : quiet_nan()) : st[2];
    if (t >= v0 && t < v0 + Vp)
      zt = bf2f(z[t - v0]);
    const float merged = fmaxf(m, piece.max);
    st[0] = merged;
    st[1] = s * rescale(m, merged) + piece.sum * rescale(piece.max, merged);
    st[2] = zt;
  }
}

/// NaN is the one value unequal to itself: a poisoned target's t.
__device__ __forceinline__ bool has_nan(const float *st) {
  return !(st[0] == st[0] && st[1] == st[1] && st[2] == st[2]);
}

__global__ void __launch_bounds__(kRowThreads)
    ce_backward_piece_kernel(bf16 *dlogits, const bf16 *logits,
                             const int32_t *targets, const float *stats,
                             int64_t Vp, int64_t v0, float dloss,
                             bool accumulate) {
  const int64_t n = blockIdx.x;
  const bf16 *z = logits + n * Vp;
  bf16 *dz = dlogits + n * Vp;
  const float *st = stats + 3 * n;
  if (has_nan(st)) {
    for (int64_t j = threadIdx.x; j < Vp; j += blockDim.x)
      dz[j] = f2bf(quiet_nan());
    return;
  }
  const int64_t t = int64_t(targets[n]) - v0; // in the piece or not
  const float coef = dloss / st[1];
  for (int64_t j = threadIdx.x; j < Vp; j += blockDim.x)
    write_or_add(dz, j,
                 coef * expf(bf2f(z[j]) - st[0]) - (j == t ? dloss : 0.f),
                 accumulate);
}

} // namespace

void CudaKernels::cross_entropy_forward(float *loss, const void *logits,
                                        const int32_t *targets, int64_t N,
                                        int64_t V, int64_t total_rows,
                                        bool accumulate) {
  if (N <= 0 || V <= 0) {
    if (!accumulate)
      zero_f32(loss, 1);
    return;
  }
  float *row_loss = static_cast<float *>(scratch(N * int64_t(sizeof(float))));
  const cudaStream_t s = cudaStream_t(stream_);
  MT_LAUNCH(ce_forward_kernel, dim3(unsigned(N)), dim3(kRowThreads), s,
            row_loss, B(logits), targets, V);
  MT_LAUNCH(ce_sum_kernel<ScratchLoss>, dim3(1), dim3(kSumThreads), s, loss,
            ScratchLoss{row_loss}, N, total_rows, accumulate);
}

void CudaKernels::cross_entropy_backward(void *dlogits, const void *logits,
                                         const int32_t *targets, int64_t N,
                                         int64_t V, float dloss,
                                         bool accumulate) {
  if (N > 0 && V > 0)
    MT_LAUNCH(ce_backward_kernel, dim3(unsigned(N)), dim3(kRowThreads),
              cudaStream_t(stream_), B(dlogits), B(logits), targets, V, dloss,
              accumulate);
}

void CudaKernels::cross_entropy_stats(float *stats, const void *logits,
                                      const int32_t *targets, int64_t N,
                                      int64_t Vp, int64_t v0, int64_t V,
                                      bool first) {
  if (N > 0)
    MT_LAUNCH(ce_stats_kernel, dim3(unsigned(N)), dim3(kRowThreads),
              cudaStream_t(stream_), stats, B(logits), targets, Vp, v0, V,
              first);
}

void CudaKernels::cross_entropy_stats_loss(float *loss, const float *stats,
                                           int64_t N, int64_t total_rows,
                                           bool accumulate) {
  if (N <= 0) {
    if (!accumulate)
      zero_f32(loss, 1);
    return;
  }
  MT_LAUNCH(ce_sum_kernel<StatsLoss>, dim3(1), dim3(kSumThreads),
            cudaStream_t(stream_), loss, StatsLoss{stats}, N, total_rows,
            accumulate);
}

void CudaKernels::cross_entropy_backward_piece(void *dlogits,
                                               const void *logits,
                                               const int32_t *targets,
                                               const float *stats, int64_t N,
                                               int64_t Vp, int64_t v0,
                                               float dloss, bool accumulate) {
  if (N > 0 && Vp > 0)
    MT_LAUNCH(ce_backward_piece_kernel, dim3(unsigned(N)), dim3(kRowThreads),
              cudaStream_t(stream_), B(dlogits), B(logits), targets, stats, Vp,
              v0, dloss, accumulate);
}

} // namespace mtrt::MT_KNS
