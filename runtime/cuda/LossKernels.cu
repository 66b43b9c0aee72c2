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

__global__ void __launch_bounds__(kSumThreads)
    ce_sum_kernel(float *loss, const float *row_loss, int64_t N,
                  int64_t total_rows, bool accumulate) {
  __shared__ double part[kSumThreads];
  double acc = 0.0;
  for (int64_t n = threadIdx.x; n < N; n += kSumThreads)
    acc += double(row_loss[n]);
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
                       const int32_t *targets, int64_t V, float dloss) {
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
    add_store(dz, j, coef * expf(bf2f(z[j]) - st.max) - (j == t ? dloss : 0.f));
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
  MT_LAUNCH(ce_sum_kernel, dim3(1), dim3(kSumThreads), s, loss,
            static_cast<const float *>(row_loss), N, total_rows, accumulate);
}

void CudaKernels::cross_entropy_backward(void *dlogits, const void *logits,
                                         const int32_t *targets, int64_t N,
                                         int64_t V, float dloss) {
  if (N > 0 && V > 0)
    MT_LAUNCH(ce_backward_kernel, dim3(unsigned(N)), dim3(kRowThreads),
              cudaStream_t(stream_), B(dlogits), B(logits), targets, V, dloss);
}

} // namespace mtrt::MT_KNS
