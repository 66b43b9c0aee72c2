//===- MoeKernels.cu - a mixture of SwiGLU experts: reference kernels -----===//
//
// The math of cpu::moe_forward/backward (docs/primitives.md, moe) on CUDA
// cores in f32: one thread per output element, every sum in a fixed order,
// no atomics, so two runs give the same bits. The routing (softmax, top-k,
// renormalization) runs a block per token; the experts' products gather
// each slot's (token, choice) expert rows. These are reference kernels:
// they are correct at any size but do GEMM work without tensor cores;
// grouped tensor-core GEMMs over the tokens each expert received are the
// fast path still to build.
//
// Scratch, per chunk of tokens: probabilities P [T, E], chosen experts X
// and weights W [T·k], the experts' (g; u) and a = silu(g)·u per slot; the
// backward adds per-slot output and hidden gradients, the router logits'
// gradient and each expert's slots in token order. Chunks of tokens keep it
// under 64 MiB; the weight gradients add chunk by chunk.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/KernelCommon.cuh"
#include "runtime/exec/Error.h"

#include <cstdlib>

namespace mtrt::MT_KNS {
namespace {

struct MoeShape {
  int64_t T, H, E, I, k;
  bool normalize;
  __host__ __device__ int64_t slots() const { return T * k; }
};

__device__ __forceinline__ float sigmoidf(float v) {
  return 1.f / (1.f + expf(-v));
}

// A row of bf16 against an f32 vector.
__device__ float dot_bf(const bf16 *a, const float *b, int64_t n) {
  float s = 0.f;
  for (int64_t i = 0; i < n; ++i)
    s += bf2f(a[i]) * b[i];
  return s;
}

// A block per token: logits by thread over experts, then thread 0 takes the
// softmax and the top k of p + bias (ties to the lower index).
__global__ void route_kernel(float *P, int *X, float *W, const bf16 *x,
                             const bf16 *router, const bf16 *bias, MoeShape s) {
  const int64_t t = blockIdx.x;
  float *p = P + t * s.E;
  for (int64_t e = threadIdx.x; e < s.E; e += blockDim.x) {
    float l = 0.f;
    for (int64_t h = 0; h < s.H; ++h)
      l += bf2f(router[e * s.H + h]) * bf2f(x[t * s.H + h]);
    p[e] = l;
  }
  __syncthreads();
  if (threadIdx.x != 0)
    return;
  float m = -INFINITY, sum = 0.f, total = 0.f;
  for (int64_t e = 0; e < s.E; ++e)
    m = fmaxf(m, p[e]);
  for (int64_t e = 0; e < s.E; ++e)
    sum += p[e] = expf(p[e] - m);
  for (int64_t e = 0; e < s.E; ++e)
    p[e] /= sum;
  for (int64_t j = 0; j < s.k; ++j) {
    int best = -1;
    float best_score = 0.f;
    for (int64_t e = 0; e < s.E; ++e) {
      bool taken = false;
      for (int64_t i = 0; i < j; ++i)
        taken = taken || X[t * s.k + i] == int(e);
      const float score = p[e] + (bias ? bf2f(bias[e]) : 0.f);
      if (!taken && (best < 0 || score > best_score)) {
        best = int(e);
        best_score = score;
      }
    }
    X[t * s.k + j] = best;
    total += W[t * s.k + j] = p[best];
  }
  if (s.normalize)
    for (int64_t j = 0; j < s.k; ++j)
      W[t * s.k + j] /= total;
}

// GU[slot, r] = gate_up[e] row r · x_t; then A = silu(g) ⊙ u.
__global__ void hidden_kernel(float *GU, const int *X, const bf16 *x,
                              const bf16 *gate_up, MoeShape s) {
  const int64_t n = s.slots() * 2 * s.I;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t slot = i / (2 * s.I), r = i % (2 * s.I);
    const bf16 *row = gate_up + (X[slot] * 2 * s.I + r) * s.H;
    const bf16 *xt = x + (slot / s.k) * s.H;
    float acc = 0.f;
    for (int64_t h = 0; h < s.H; ++h)
      acc += bf2f(row[h]) * bf2f(xt[h]);
    GU[i] = acc;
  }
}
__global__ void activation_kernel(float *A, const float *GU, MoeShape s) {
  const int64_t n = s.slots() * s.I;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const float *gu = GU + (i / s.I) * 2 * s.I;
    const float g = gu[i % s.I], u = gu[s.I + i % s.I];
    A[i] = g * sigmoidf(g) * u;
  }
}

// y[t, h] = Σ_j W[t, j] · down[e_j] row h · A[slot].
__global__ void output_kernel(bf16 *y, const float *A, const int *X,
                              const float *W, const bf16 *down, MoeShape s) {
  const int64_t n = s.T * s.H;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t t = i / s.H, h = i % s.H;
    float acc = 0.f;
    for (int64_t j = 0; j < s.k; ++j) {
      const int64_t slot = t * s.k + j;
      acc += W[slot] *
             dot_bf(down + (X[slot] * s.H + h) * s.I, A + slot * s.I, s.I);
    }
    y[i] = f2bf(acc);
  }
}

// A block per slot: DOUT = W·dy_t and DW = dy_t · (down[e] · a).
__global__ void slot_grad_kernel(float *DOUT, float *DW, const float *A,
                                 const int *X, const float *W, const bf16 *dy,
                                 const bf16 *down, MoeShape s) {
  const int64_t slot = blockIdx.x, t = slot / s.k;
  float acc = 0.f;
  for (int64_t h = threadIdx.x; h < s.H; h += blockDim.x) {
    const float g = bf2f(dy[t * s.H + h]);
    DOUT[slot * s.H + h] = W[slot] * g;
    acc += g * dot_bf(down + (X[slot] * s.H + h) * s.I, A + slot * s.I, s.I);
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0)
    DW[slot] = acc;
}

// DGU[slot] = (da ⊙ u ⊙ silu'(g); da ⊙ silu(g)), da = down[e]ᵀ · DOUT.
__global__ void hidden_grad_kernel(float *DGU, const float *GU,
                                   const float *DOUT, const int *X,
                                   const bf16 *down, MoeShape s) {
  const int64_t n = s.slots() * s.I;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t slot = i / s.I, c = i % s.I;
    const bf16 *D = down + X[slot] * s.H * s.I;
    float da = 0.f;
    for (int64_t h = 0; h < s.H; ++h)
      da += bf2f(D[h * s.I + c]) * DOUT[slot * s.H + h];
    const float g = GU[slot * 2 * s.I + c], u = GU[slot * 2 * s.I + s.I + c];
    const float sg = sigmoidf(g);
    DGU[slot * 2 * s.I + c] = da * u * sg * (1.f + g * (1.f - sg));
    DGU[slot * 2 * s.I + s.I + c] = da * g * sg;
  }
}

// Per token: the chosen weights' gradient through the renormalization and
// the softmax into the router logits, DL [T, E].
__global__ void routing_grad_kernel(float *DL, const float *P, const int *X,
                                    const float *W, const float *DW,
                                    MoeShape s) {
  for (int64_t t = global_index(); t < s.T; t += global_stride()) {
    const float *p = P + t * s.E;
    float *dl = DL + t * s.E;
    float mean = 0.f, total = 0.f, dot = 0.f;
    for (int64_t j = 0; j < s.k; ++j) {
      mean += DW[t * s.k + j] * W[t * s.k + j];
      total += p[X[t * s.k + j]];
    }
    for (int64_t e = 0; e < s.E; ++e)
      dl[e] = 0.f;
    for (int64_t j = 0; j < s.k; ++j) {
      const float dw = DW[t * s.k + j];
      dl[X[t * s.k + j]] = s.normalize ? (dw - mean) / total : dw;
    }
    for (int64_t e = 0; e < s.E; ++e)
      dot += dl[e] * p[e];
    for (int64_t e = 0; e < s.E; ++e)
      dl[e] = p[e] * (dl[e] - dot);
  }
}

// dx[t, c] += Σ_j gate_up[e_j]ᵀ · DGU[slot] + routerᵀ · DL[t].
__global__ void input_grad_kernel(bf16 *dx, const float *DGU, const float *DL,
                                  const int *X, const bf16 *gate_up,
                                  const bf16 *router, MoeShape s) {
  const int64_t n = s.T * s.H;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t t = i / s.H, c = i % s.H;
    float acc = 0.f;
    for (int64_t j = 0; j < s.k; ++j) {
      const int64_t slot = t * s.k + j;
      const bf16 *G = gate_up + X[slot] * 2 * s.I * s.H;
      for (int64_t r = 0; r < 2 * s.I; ++r)
        acc += bf2f(G[r * s.H + c]) * DGU[slot * 2 * s.I + r];
    }
    for (int64_t e = 0; e < s.E; ++e)
      acc += bf2f(router[e * s.H + c]) * DL[t * s.E + e];
    add_store(dx, i, acc);
  }
}

__global__ void router_grad_kernel(float *drouter, const float *DL,
                                   const bf16 *x, MoeShape s) {
  const int64_t n = s.E * s.H;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t e = i / s.H, c = i % s.H;
    float acc = 0.f;
    for (int64_t t = 0; t < s.T; ++t)
      acc += DL[t * s.E + e] * bf2f(x[t * s.H + c]);
    drouter[i] += acc;
  }
}

// Each expert's slots in token order: LIST[e·slots + n], COUNT[e].
__global__ void slot_list_kernel(int *LIST, int *COUNT, const int *X,
                                 MoeShape s) {
  for (int64_t e = global_index(); e < s.E; e += global_stride()) {
    int n = 0;
    for (int64_t slot = 0; slot < s.slots(); ++slot)
      if (X[slot] == int(e))
        LIST[e * s.slots() + n++] = int(slot);
    COUNT[e] = n;
  }
}

__global__ void down_grad_kernel(float *ddown, const float *DOUT,
                                 const float *A, const int *LIST,
                                 const int *COUNT, MoeShape s) {
  const int64_t n = s.E * s.H * s.I;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t e = i / (s.H * s.I), h = i / s.I % s.H, c = i % s.I;
    float acc = 0.f;
    for (int m = 0; m < COUNT[e]; ++m) {
      const int64_t slot = LIST[e * s.slots() + m];
      acc += DOUT[slot * s.H + h] * A[slot * s.I + c];
    }
    ddown[i] += acc;
  }
}

__global__ void gate_up_grad_kernel(float *dgate_up, const float *DGU,
                                    const bf16 *x, const int *LIST,
                                    const int *COUNT, MoeShape s) {
  const int64_t n = s.E * 2 * s.I * s.H;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t e = i / (2 * s.I * s.H), r = i / s.H % (2 * s.I), c = i % s.H;
    float acc = 0.f;
    for (int m = 0; m < COUNT[e]; ++m) {
      const int64_t slot = LIST[e * s.slots() + m];
      acc += DGU[slot * 2 * s.I + r] * bf2f(x[(slot / s.k) * s.H + c]);
    }
    dgate_up[i] += acc;
  }
}

/// The scratch of one call, carved from one buffer of 4-byte slots.
struct Scratch {
  float *P, *W, *GU, *A, *DOUT, *DW, *DGU, *DL;
  int *X, *LIST, *COUNT;

  static int64_t words(const MoeShape &s, bool backward) {
    const int64_t S = s.slots();
    int64_t n = s.T * s.E + 2 * S + S * 3 * s.I;
    if (backward)
      n += S * s.H + S + S * 2 * s.I + s.T * s.E + S * s.E + s.E;
    return n;
  }
  Scratch(void *base, const MoeShape &s, bool backward) {
    const int64_t S = s.slots();
    float *f = static_cast<float *>(base);
    P = f, f += s.T * s.E;
    W = f, f += S;
    X = reinterpret_cast<int *>(f), f += S;
    GU = f, f += S * 2 * s.I;
    A = f, f += S * s.I;
    if (!backward)
      return;
    DOUT = f, f += S * s.H;
    DW = f, f += S;
    DGU = f, f += S * 2 * s.I;
    DL = f, f += s.T * s.E;
    LIST = reinterpret_cast<int *>(f), f += S * s.E;
    COUNT = reinterpret_cast<int *>(f);
  }
};

// The experts' inputs and weights: the pointers a call shares by chunk.
struct MoeWeights {
  const void *router, *gate_up, *down, *bias;
};

void forward_hidden(const Scratch &w, const MoeShape &s, const void *x,
                    const MoeWeights &m, cudaStream_t stream) {
  MT_LAUNCH(route_kernel, dim3(unsigned(s.T)), dim3(kThreads), stream, w.P, w.X,
            w.W, B(x), B(m.router), B(m.bias), s);
  MT_LAUNCH(hidden_kernel, blocks_for(s.slots() * 2 * s.I), kThreads, stream,
            w.GU, static_cast<const int *>(w.X), B(x), B(m.gate_up), s);
  MT_LAUNCH(activation_kernel, blocks_for(s.slots() * s.I), kThreads, stream,
            w.A, static_cast<const float *>(w.GU), s);
}

void forward_tokens(void *scratch, const MoeShape &s, void *y, const void *x,
                    const MoeWeights &m, cudaStream_t stream) {
  const Scratch w(scratch, s, false);
  forward_hidden(w, s, x, m, stream);
  MT_LAUNCH(output_kernel, blocks_for(s.T * s.H), kThreads, stream, B(y),
            static_cast<const float *>(w.A), static_cast<const int *>(w.X),
            static_cast<const float *>(w.W), B(m.down), s);
}

void backward_tokens(void *scratch, const MoeShape &s, void *dx, float *drouter,
                     float *dgate_up, float *ddown, const void *dy,
                     const void *x, const MoeWeights &m, cudaStream_t stream) {
  const Scratch w(scratch, s, true);
  const int *X = w.X;
  const int64_t T = s.T, H = s.H, E = s.E, I = s.I;
  const void *router = m.router, *gate_up = m.gate_up, *down = m.down;
  forward_hidden(w, s, x, m, stream);
  MT_LAUNCH(slot_grad_kernel, dim3(unsigned(s.slots())), dim3(kThreads), stream,
            w.DOUT, w.DW, static_cast<const float *>(w.A), X,
            static_cast<const float *>(w.W), B(dy), B(down), s);
  MT_LAUNCH(hidden_grad_kernel, blocks_for(s.slots() * I), kThreads, stream,
            w.DGU, static_cast<const float *>(w.GU),
            static_cast<const float *>(w.DOUT), X, B(down), s);
  MT_LAUNCH(routing_grad_kernel, blocks_for(T), kThreads, stream, w.DL,
            static_cast<const float *>(w.P), X, static_cast<const float *>(w.W),
            static_cast<const float *>(w.DW), s);
  if (dx)
    MT_LAUNCH(input_grad_kernel, blocks_for(T * H), kThreads, stream, B(dx),
              static_cast<const float *>(w.DGU),
              static_cast<const float *>(w.DL), X, B(gate_up), B(router), s);
  if (drouter)
    MT_LAUNCH(router_grad_kernel, blocks_for(E * H), kThreads, stream, drouter,
              static_cast<const float *>(w.DL), B(x), s);
  if (!ddown && !dgate_up)
    return;
  MT_LAUNCH(slot_list_kernel, blocks_for(E), kThreads, stream, w.LIST, w.COUNT,
            X, s);
  if (ddown)
    MT_LAUNCH(down_grad_kernel, blocks_for(E * H * I), kThreads, stream, ddown,
              static_cast<const float *>(w.DOUT),
              static_cast<const float *>(w.A), static_cast<const int *>(w.LIST),
              static_cast<const int *>(w.COUNT), s);
  if (dgate_up)
    MT_LAUNCH(gate_up_grad_kernel, blocks_for(E * 2 * I * H), kThreads, stream,
              dgate_up, static_cast<const float *>(w.DGU), B(x),
              static_cast<const int *>(w.LIST),
              static_cast<const int *>(w.COUNT), s);
}

// Tokens per call of the kernels above: the scratch stays under 64 MiB
// whatever the plan's token count (it is outside the plan's device budget,
// within the backend's reserve). MEGATRAIN_CUDA_MOE_CHUNK_TOKENS overrides
// it (the tests' ragged chunks).
int64_t chunkTokens(const MoeShape &s, bool backward) {
  if (const char *env = std::getenv("MEGATRAIN_CUDA_MOE_CHUNK_TOKENS"))
    if (int64_t n = std::atoll(env); n > 0)
      return n;
  MoeShape one = s;
  one.T = 1;
  constexpr int64_t kScratchWords = (int64_t(64) << 20) / 4;
  return std::max<int64_t>(1, kScratchWords / Scratch::words(one, backward));
}

// Calls fn(scratch, chunk's shape, first token) over chunks of `chunk`
// tokens.
template <class Fn>
void overChunks(void *scratch, const MoeShape &s, int64_t chunk, Fn fn) {
  MoeShape c = s;
  for (int64_t t0 = 0; t0 < s.T; t0 += chunk) {
    c.T = std::min(chunk, s.T - t0);
    fn(scratch, c, t0);
  }
}

int64_t scratchBytes(MoeShape s, int64_t chunk, bool backward) {
  s.T = chunk;
  return Scratch::words(s, backward) * 4;
}

} // namespace

void CudaKernels::moe_forward(void *y, const void *x, const void *router,
                              const void *gate_up, const void *down,
                              const void *bias, int64_t T, int64_t H, int64_t E,
                              int64_t I, int64_t k, bool normalize) {
  if (T <= 0)
    return;
  cudaStream_t stream = cudaStream_t(stream_);
  const MoeShape s{T, H, E, I, k, normalize};
  const int64_t chunk = std::min(T, chunkTokens(s, false));
  overChunks(scratch(scratchBytes(s, chunk, false)), s, chunk,
             [&](void *scratch, const MoeShape &c, int64_t t0) {
               forward_tokens(scratch, c, at(y, t0 * H), at(x, t0 * H),
                              MoeWeights{router, gate_up, down, bias}, stream);
             });
}

// The param gradients add chunk by chunk, in token order.
void CudaKernels::moe_backward(void *dx, float *drouter, float *dgate_up,
                               float *ddown, const void *dy, const void *x,
                               const void *router, const void *gate_up,
                               const void *down, const void *bias, int64_t T,
                               int64_t H, int64_t E, int64_t I, int64_t k,
                               bool normalize) {
  if (T <= 0)
    return;
  cudaStream_t stream = cudaStream_t(stream_);
  const MoeShape s{T, H, E, I, k, normalize};
  const int64_t chunk = std::min(T, chunkTokens(s, true));
  overChunks(scratch(scratchBytes(s, chunk, true)), s, chunk,
             [&](void *scratch, const MoeShape &c, int64_t t0) {
               backward_tokens(scratch, c, dx ? at(dx, t0 * H) : nullptr,
                               drouter, dgate_up, ddown, at(dy, t0 * H),
                               at(x, t0 * H),
                               MoeWeights{router, gate_up, down, bias}, stream);
             });
}

} // namespace mtrt::MT_KNS
