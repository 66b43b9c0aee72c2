//===- NormKernels.cu - RMSNorm and LayerNorm over the last dim -----------===//
//
// One block per row: the row's statistics by block reductions in f32, then
// the row's output. The backward also leaves each row's statistics in
// scratch, and the weight and bias gradients are column sums over rows
// (column_sums: fixed order, no atomics).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/KernelCommon.cuh"
#include "runtime/exec/Error.h"

namespace mtrt::MT_KNS {

namespace {

__device__ __forceinline__ float weight(const bf16 *w, int64_t j) {
  return w ? bf2f(w[j]) : 1.f;
}

__global__ void rms_forward_kernel(bf16 *y, const bf16 *x, const bf16 *w,
                                   int64_t D, float eps) {
  const bf16 *xr = x + int64_t(blockIdx.x) * D;
  bf16 *yr = y + int64_t(blockIdx.x) * D;
  float ss = 0.f;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    const float v = bf2f(xr[j]);
    ss += v * v;
  }
  ss = block_sum(ss);
  const float rstd = 1.f / sqrtf(ss / float(D) + eps);
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x)
    yr[j] = f2bf(bf2f(xr[j]) * rstd * weight(w, j));
}

/// dx (+)= rstd·g − (rstd³/D)·(g·x)·x with g = dy ⊙ w; stats[m] = rstd.
__global__ void rms_backward_kernel(bf16 *dx, float *stats, const bf16 *dy,
                                    const bf16 *x, const bf16 *w, int64_t D,
                                    float eps, bool accumulate) {
  const int64_t row = blockIdx.x;
  const bf16 *xr = x + row * D, *g = dy + row * D;
  float ss = 0.f, dot = 0.f;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    const float v = bf2f(xr[j]);
    ss += v * v;
    dot += bf2f(g[j]) * weight(w, j) * v;
  }
  ss = block_sum(ss);
  dot = block_sum(dot);
  const float rstd = 1.f / sqrtf(ss / float(D) + eps);
  if (threadIdx.x == 0)
    stats[row] = rstd;
  if (!dx)
    return;
  const float c = rstd * rstd * rstd * dot / float(D);
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x)
    write_or_add(dx, row * D + j,
                 rstd * (bf2f(g[j]) * weight(w, j)) - c * bf2f(xr[j]),
                 accumulate);
}

__global__ void layer_forward_kernel(bf16 *y, const bf16 *x, const bf16 *w,
                                     const bf16 *b, int64_t D, float eps) {
  const bf16 *xr = x + int64_t(blockIdx.x) * D;
  bf16 *yr = y + int64_t(blockIdx.x) * D;
  float sum = 0.f;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x)
    sum += bf2f(xr[j]);
  const float mean = block_sum(sum) / float(D);
  float ss = 0.f;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    const float d = bf2f(xr[j]) - mean;
    ss += d * d;
  }
  const float rstd = 1.f / sqrtf(block_sum(ss) / float(D) + eps);
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x)
    yr[j] = f2bf((bf2f(xr[j]) - mean) * rstd * weight(w, j) +
                 (b ? bf2f(b[j]) : 0.f));
}

/// dx (+)= rstd·(g − mean(g) − x̂·mean(g⊙x̂)); stats[2m] = mean, [2m+1] =
/// rstd.
__global__ void layer_backward_kernel(bf16 *dx, float *stats, const bf16 *dy,
                                      const bf16 *x, const bf16 *w, int64_t D,
                                      float eps, bool accumulate) {
  const int64_t row = blockIdx.x;
  const bf16 *xr = x + row * D, *g = dy + row * D;
  float sum = 0.f;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x)
    sum += bf2f(xr[j]);
  const float mean = block_sum(sum) / float(D);
  float ss = 0.f;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    const float d = bf2f(xr[j]) - mean;
    ss += d * d;
  }
  const float rstd = 1.f / sqrtf(block_sum(ss) / float(D) + eps);
  if (threadIdx.x == 0) {
    stats[2 * row] = mean;
    stats[2 * row + 1] = rstd;
  }
  if (!dx)
    return;
  float sg = 0.f, sgx = 0.f;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    const float gw = bf2f(g[j]) * weight(w, j);
    sg += gw;
    sgx += gw * ((bf2f(xr[j]) - mean) * rstd);
  }
  const float mean_g = block_sum(sg) / float(D);
  const float mean_gx = block_sum(sgx) / float(D);
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    const float xhat = (bf2f(xr[j]) - mean) * rstd;
    write_or_add(dx, row * D + j,
                 rstd * (bf2f(g[j]) * weight(w, j) - mean_g - xhat * mean_gx),
                 accumulate);
  }
}

// Summands of the parameter gradients, per (row m, column j).
struct RmsWeightGrad {
  const bf16 *dy, *x;
  const float *stats;
  int64_t D;
  __device__ float operator()(int64_t m, int64_t j) const {
    return bf2f(dy[m * D + j]) * (bf2f(x[m * D + j]) * stats[m]);
  }
};
struct LayerWeightGrad {
  const bf16 *dy, *x;
  const float *stats;
  int64_t D;
  __device__ float operator()(int64_t m, int64_t j) const {
    return bf2f(dy[m * D + j]) *
           ((bf2f(x[m * D + j]) - stats[2 * m]) * stats[2 * m + 1]);
  }
};
struct Rows {
  const bf16 *dy;
  int64_t D;
  __device__ float operator()(int64_t m, int64_t j) const {
    return bf2f(dy[m * D + j]);
  }
};

unsigned row_threads(int64_t D) {
  return unsigned(
      std::min<int64_t>(256, std::max<int64_t>(32, (D + 31) / 32 * 32)));
}

} // namespace

#define S_ cudaStream_t(stream_)

void CudaKernels::rms_norm_forward(void *y, const void *x, const void *w,
                                   int64_t M, int64_t D, float eps) {
  if (M > 0 && D > 0)
    MT_LAUNCH(rms_forward_kernel, dim3(unsigned(M)), dim3(row_threads(D)), S_,
              B(y), B(x), B(w), D, eps);
}

void CudaKernels::rms_norm_backward(void *dx, float *dw, const void *dy,
                                    const void *x, const void *w, int64_t M,
                                    int64_t D, float eps, bool accumulate_dx) {
  if (M <= 0 || D <= 0 || (!dx && !dw))
    return;
  float *stats = static_cast<float *>(
      scratch((M + column_chunks(M) * D) * int64_t(sizeof(float))));
  float *partials = stats + M;
  MT_LAUNCH(rms_backward_kernel, dim3(unsigned(M)), dim3(row_threads(D)), S_,
            B(dx), stats, B(dy), B(x), B(w), D, eps, accumulate_dx);
  if (dw)
    column_sums(dw, partials, M, D, RmsWeightGrad{B(dy), B(x), stats, D}, S_);
}

void CudaKernels::layer_norm_forward(void *y, const void *x, const void *w,
                                     const void *b, int64_t M, int64_t D,
                                     float eps) {
  if (M > 0 && D > 0)
    MT_LAUNCH(layer_forward_kernel, dim3(unsigned(M)), dim3(row_threads(D)), S_,
              B(y), B(x), B(w), B(b), D, eps);
}

void CudaKernels::layer_norm_backward(void *dx, float *dw, float *db,
                                      const void *dy, const void *x,
                                      const void *w, int64_t M, int64_t D,
                                      float eps, bool accumulate_dx) {
  if (M <= 0 || D <= 0 || (!dx && !dw && !db))
    return;
  float *stats = static_cast<float *>(
      scratch((2 * M + column_chunks(M) * D) * int64_t(sizeof(float))));
  float *partials = stats + 2 * M;
  MT_LAUNCH(layer_backward_kernel, dim3(unsigned(M)), dim3(row_threads(D)), S_,
            B(dx), stats, B(dy), B(x), B(w), D, eps, accumulate_dx);
  if (dw)
    column_sums(dw, partials, M, D, LayerWeightGrad{B(dy), B(x), stats, D}, S_);
  if (db)
    column_sums(db, partials, M, D, Rows{B(dy), D}, S_);
}

/// The bias gradient of linear: db[j] += Σ_m dy[m, j].
void linear_bias_grad(float *db, float *partials, const void *dy, int64_t M,
                      int64_t N, void *stream) {
  column_sums(db, partials, M, N, Rows{B(dy), N}, cudaStream_t(stream));
}

#undef S_

} // namespace mtrt::MT_KNS
