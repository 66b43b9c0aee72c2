//===- ConvKernels.cu - a depthwise causal convolution over positions -----===//
//
// cpu::causal_conv_forward/backward (docs/primitives.md, causal_conv) on
// CUDA cores in f32: a thread per output element for y and dx, a block per
// (channel, tap) for dw and per channel for db, whose sums over the batch's
// positions are fixed reduction trees, so the bits repeat.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/KernelCommon.cuh"

namespace mtrt::MT_KNS {
namespace {

__global__ void causal_conv_forward_kernel(bf16 *y, const bf16 *x,
                                           const bf16 *w, const bf16 *bias,
                                           int64_t Bn, int64_t C, int64_t S,
                                           int64_t K) {
  const int64_t n = Bn * C * S;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t s = i % S, c = i / S % C;
    float acc = 0.f;
    for (int64_t j = 0; j < K; ++j)
      if (const int64_t t = s - (K - 1) + j; t >= 0)
        acc += bf2f(w[c * K + j]) * bf2f(x[i - s + t]);
    y[i] = f2bf(bias ? acc + bf2f(bias[c]) : acc);
  }
}

__global__ void causal_conv_dx_kernel(bf16 *dx, const bf16 *dy, const bf16 *w,
                                      int64_t Bn, int64_t C, int64_t S,
                                      int64_t K) {
  const int64_t n = Bn * C * S;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t t = i % S, c = i / S % C;
    float acc = 0.f;
    for (int64_t j = 0; j < K; ++j)
      if (const int64_t s = t + (K - 1) - j; s < S)
        acc += bf2f(w[c * K + j]) * bf2f(dy[i - t + s]);
    add_store(dx, i, acc);
  }
}

// A block per (channel c, tap j): Σ_b Σ_s dy[b, c, s] · x[b, c, s − (K−1) + j].
__global__ void causal_conv_dw_kernel(float *dw, const bf16 *dy, const bf16 *x,
                                      int64_t Bn, int64_t C, int64_t S,
                                      int64_t K) {
  const int64_t c = blockIdx.x / K, j = blockIdx.x % K;
  const int64_t first = K - 1 - j, per_row = S - first;
  float acc = 0.f;
  for (int64_t i = threadIdx.x; i < Bn * per_row; i += blockDim.x) {
    const int64_t b = i / per_row, s = first + i % per_row;
    const int64_t row = (b * C + c) * S;
    acc += bf2f(dy[row + s]) * bf2f(x[row + s - first]);
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0)
    dw[c * K + j] += acc;
}

// A block per channel c: Σ_b Σ_s dy[b, c, s].
__global__ void causal_conv_db_kernel(float *db, const bf16 *dy, int64_t Bn,
                                      int64_t C, int64_t S) {
  const int64_t c = blockIdx.x;
  float acc = 0.f;
  for (int64_t i = threadIdx.x; i < Bn * S; i += blockDim.x)
    acc += bf2f(dy[(i / S * C + c) * S + i % S]);
  acc = block_sum(acc);
  if (threadIdx.x == 0)
    db[c] += acc;
}

} // namespace

void CudaKernels::causal_conv_forward(void *y, const void *x, const void *w,
                                      const void *bias, int64_t Bn, int64_t C,
                                      int64_t S, int64_t K) {
  if (Bn * C * S <= 0)
    return;
  MT_LAUNCH(causal_conv_forward_kernel, blocks_for(Bn * C * S), kThreads,
            cudaStream_t(stream_), B(y), B(x), B(w), B(bias), Bn, C, S, K);
}

void CudaKernels::causal_conv_backward(void *dx, float *dw, float *db,
                                       const void *dy, const void *x,
                                       const void *w, int64_t Bn, int64_t C,
                                       int64_t S, int64_t K) {
  if (Bn * C * S <= 0)
    return;
  const cudaStream_t s = cudaStream_t(stream_);
  if (dx)
    MT_LAUNCH(causal_conv_dx_kernel, blocks_for(Bn * C * S), kThreads, s, B(dx),
              B(dy), B(w), Bn, C, S, K);
  if (dw)
    MT_LAUNCH(causal_conv_dw_kernel, dim3(unsigned(C * K)), dim3(kThreads), s,
              dw, B(dy), B(x), Bn, C, S, K);
  if (db)
    MT_LAUNCH(causal_conv_db_kernel, dim3(unsigned(C)), dim3(kThreads), s, db,
              B(dy), Bn, C, S);
}

} // namespace mtrt::MT_KNS
