//===- MoeCommon.cuh - what both mixture-of-experts paths share ---*- C++
//-*-===//
//
// The routing (softmax or sigmoid, grouped top-k of p + bias,
// renormalization, the experts' scales and scaling) from the router
// logits, and its gradient back into the logits and the experts' scales,
// on CUDA cores in f32 with fixed-order sums; the
// experts' activation (MoeExperts) and its gradient; and
// the interface of the two paths over the experts (MoeKernels.cu: reference
// kernels; MoeGrouped.cu: grouped tensor-core GEMMs), each of which runs on
// one chunk of tokens in scratch of its own layout.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_CUDA_MOECOMMON_CUH
#define MEGATRAIN_RUNTIME_CUDA_MOECOMMON_CUH

#include "runtime/cuda/Gelu.cuh"
#include "runtime/cuda/KernelCommon.cuh"

namespace mtrt::MT_KNS::moe {

struct MoeShape {
  int64_t T, H, E, I, k;
  MoeRouting r;
  MoeExperts f;
  __host__ __device__ int64_t slots() const { return T * k; }
  /// Hidden unit r's place along gate_up's 2I (g_i is unit i, u_i unit
  /// I + i).
  __host__ __device__ int64_t place(int64_t r) const {
    return f.interleaved ? (r < I ? 2 * r : 2 * (r - I) + 1) : r;
  }
};

/// The most expert groups the routing kernel takes (DeepSeek V3 and GLM-4.5
/// have 8 or 1).
constexpr int64_t kMaxGroups = 64;

/// A chunk's inputs: x, and the router's input router_x (x where null).
struct MoeInputs {
  const void *x, *router_x;
  const void *router_input() const { return router_x ? router_x : x; }
};

/// A chunk's gradients: dx and drouter_x may be null (no input gradient;
/// drouter_x is, where router_x is); the f32 param gradients are added
/// to, each may be null.
struct MoeGrads {
  void *dx, *drouter_x;
  MoeWeightGrads p;
};

namespace {

__device__ __forceinline__ float sigmoidf(float v) {
  return 1.f / (1.f + expf(-v));
}

/// a = g'·σ(alpha·g')·(u' + up_shift), g' and u' clamped under a limit;
/// or gelu_tanh(g)·u (MoeExperts::gelu).
__device__ __forceinline__ float activation(float g, float u,
                                            const MoeExperts &f) {
  if (f.gelu)
    return gelu(g, true) * u;
  if (f.limit > 0.f) {
    g = fminf(g, f.limit);
    u = fminf(fmaxf(u, -f.limit), f.limit);
  }
  return g * sigmoidf(f.alpha * g) * (u + f.up_shift);
}
/// (dg, du) from da; a clamp passes the gradient within its bounds, ends
/// included (as torch's clamp).
__device__ __forceinline__ void activation_grad(float g, float u, float da,
                                                const MoeExperts &f, float &dg,
                                                float &du) {
  if (f.gelu) {
    dg = da * u * gelu_grad(g, true);
    du = da * gelu(g, true);
    return;
  }
  bool g_in = true, u_in = true;
  if (f.limit > 0.f) {
    g_in = g <= f.limit;
    u_in = u >= -f.limit && u <= f.limit;
    g = fminf(g, f.limit);
    u = fminf(fmaxf(u, -f.limit), f.limit);
  }
  const float sg = sigmoidf(f.alpha * g);
  dg = g_in ? da * (u + f.up_shift) * sg * (1.f + f.alpha * g * (1.f - sg))
            : 0.f;
  du = u_in ? da * g * sg : 0.f;
}

/// A slot's weight on its expert's input (MoeRouting::weigh_inputs) and on
/// its output: W[slot] on one, 1 on the other.
__device__ __forceinline__ float input_weight(const float *W, int64_t slot,
                                              const MoeShape &s) {
  return s.r.weigh_inputs ? W[slot] : 1.f;
}
__device__ __forceinline__ float output_weight(const float *W, int64_t slot,
                                               const MoeShape &s) {
  return s.r.weigh_inputs ? 1.f : W[slot];
}

/// Expert e's bias of the hidden unit at place q (0 without biases).
__device__ __forceinline__ float hidden_bias(const bf16 *b, int e, int64_t q,
                                             const MoeShape &s) {
  return b ? bf2f(b[e * 2 * s.I + q]) : 0.f;
}

// Among the top_groups groups whose two best scores (p + bias) sum largest,
// ties to the lower group: whether expert e competes. `chosen` holds the
// groups.
__device__ __forceinline__ bool competes(const int *chosen, int64_t e,
                                         const MoeShape &s) {
  if (s.r.groups <= 1)
    return true;
  const int64_t g = e / (s.E / s.r.groups);
  for (int64_t i = 0; i < s.r.top_groups; ++i)
    if (chosen[i] == int(g))
      return true;
  return false;
}

__device__ __forceinline__ float biased(const float *p, const bf16 *bias,
                                        int64_t e) {
  return p[e] + (bias ? bf2f(bias[e]) : 0.f);
}

// The top_groups best groups of one token (its thread's serial work).
__device__ void choose_groups(int *chosen, const float *p, const bf16 *bias,
                              const MoeShape &s) {
  const int64_t n = s.E / s.r.groups;
  for (int64_t j = 0; j < s.r.top_groups; ++j) {
    int best = -1;
    float best_sum = 0.f;
    for (int64_t g = 0; g < s.r.groups; ++g) {
      bool taken = false;
      for (int64_t i = 0; i < j; ++i)
        taken = taken || chosen[i] == int(g);
      float b1 = -INFINITY, b2 = -INFINITY;
      for (int64_t e = g * n; e < (g + 1) * n; ++e) {
        const float v = biased(p, bias, e);
        if (v > b1)
          b2 = b1, b1 = v;
        else if (v > b2)
          b2 = v;
      }
      if (!taken && (best < 0 || b1 + b2 > best_sum)) {
        best = int(g);
        best_sum = b1 + b2;
      }
    }
    chosen[j] = best;
  }
}

// P[t, e] = router[e] · x_t in f32: the reference path's router logits (the
// grouped path's are a GEMM).
__global__ void logits_kernel(float *P, const bf16 *x, const bf16 *router,
                              MoeShape s) {
  const int64_t n = s.T * s.E;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t t = i / s.E, e = i % s.E;
    float l = 0.f;
    for (int64_t h = 0; h < s.H; ++h)
      l += bf2f(router[e * s.H + h]) * bf2f(x[t * s.H + h]);
    P[i] = l;
  }
}

// A thread per token, from its logits in P [T, E] (plus the router's bias,
// if any): the scores (softmax or sigmoid, in place), then the top k of p +
// bias among the competing groups (ties to the lower index). X, W [T·k]:
// the chosen experts and their weights (renormalized, times their
// expert's scale, scaled).
__global__ void route_kernel(float *P, int *X, float *W, const bf16 *bias,
                             const bf16 *router_bias, const bf16 *expert_scale,
                             MoeShape s) {
  for (int64_t t = global_index(); t < s.T; t += global_stride()) {
    float *p = P + t * s.E;
    if (router_bias)
      for (int64_t e = 0; e < s.E; ++e)
        p[e] += bf2f(router_bias[e]);
    if (s.r.sigmoid) {
      for (int64_t e = 0; e < s.E; ++e)
        p[e] = sigmoidf(p[e]);
    } else {
      float m = -INFINITY, sum = 0.f;
      for (int64_t e = 0; e < s.E; ++e)
        m = fmaxf(m, p[e]);
      for (int64_t e = 0; e < s.E; ++e)
        sum += p[e] = expf(p[e] - m);
      for (int64_t e = 0; e < s.E; ++e)
        p[e] /= sum;
    }
    int chosen[kMaxGroups];
    if (s.r.groups > 1)
      choose_groups(chosen, p, bias, s);
    float total = 0.f;
    for (int64_t j = 0; j < s.k; ++j) {
      int best = -1;
      float best_score = 0.f;
      for (int64_t e = 0; e < s.E; ++e) {
        bool taken = !competes(chosen, e, s);
        for (int64_t i = 0; i < j; ++i)
          taken = taken || X[t * s.k + i] == int(e);
        const float score = biased(p, bias, e);
        if (!taken && (best < 0 || score > best_score)) {
          best = int(e);
          best_score = score;
        }
      }
      X[t * s.k + j] = best;
      total += W[t * s.k + j] = p[best];
    }
    for (int64_t j = 0; j < s.k; ++j) {
      const float es = expert_scale ? bf2f(expert_scale[X[t * s.k + j]]) : 1.f;
      W[t * s.k + j] =
          (s.r.normalize ? W[t * s.k + j] / total : W[t * s.k + j]) * es *
          s.r.scale;
    }
  }
}

// Per token: the chosen weights' gradient DW [T·k] through the scalings
// (w = n · expert scale · scale; DS [T·k], unless null, gets each slot's
// part of its expert scale's gradient) and the renormalization, then the
// softmax or the sigmoid, into the router logits, DL [T, E].
__global__ void routing_grad_kernel(float *DL, float *DS, const float *P,
                                    const int *X, const float *DW,
                                    const bf16 *expert_scale, MoeShape s) {
  for (int64_t t = global_index(); t < s.T; t += global_stride()) {
    const float *p = P + t * s.E;
    float *dl = DL + t * s.E;
    float mean = 0.f, total = 0.f, dot = 0.f;
    for (int64_t j = 0; j < s.k; ++j)
      total += p[X[t * s.k + j]];
    for (int64_t e = 0; e < s.E; ++e)
      dl[e] = 0.f;
    // dn_j, kept in dl at its expert, and Σ_j dn_j · n_j.
    for (int64_t j = 0; j < s.k; ++j) {
      const int64_t slot = t * s.k + j, e = X[slot];
      const float n = s.r.normalize ? p[e] / total : p[e];
      const float es = expert_scale ? bf2f(expert_scale[e]) : 1.f;
      if (DS)
        DS[slot] = DW[slot] * n * s.r.scale;
      dl[e] = DW[slot] * es * s.r.scale;
      mean += dl[e] * n;
    }
    if (s.r.normalize)
      for (int64_t j = 0; j < s.k; ++j) {
        const int64_t e = X[t * s.k + j];
        dl[e] = (dl[e] - mean) / total;
      }
    if (s.r.sigmoid) {
      for (int64_t e = 0; e < s.E; ++e)
        dl[e] *= p[e] * (1.f - p[e]);
      continue;
    }
    for (int64_t e = 0; e < s.E; ++e)
      dot += dl[e] * p[e];
    for (int64_t e = 0; e < s.E; ++e)
      dl[e] = p[e] * (dl[e] - dot);
  }
}

// dexpert_scale[e] += Σ DS over e's slots, in token order.
__global__ void expert_scale_grad_kernel(float *dexpert_scale, const float *DS,
                                         const int *X, MoeShape s) {
  for (int64_t e = global_index(); e < s.E; e += global_stride()) {
    float acc = 0.f;
    for (int64_t slot = 0; slot < s.slots(); ++slot)
      if (X[slot] == int(e))
        acc += DS[slot];
    dexpert_scale[e] += acc;
  }
}

// drouter_bias[e] += Σ_t DL[t, e], tokens in order.
__global__ void router_bias_grad_kernel(float *drouter_bias, const float *DL,
                                        MoeShape s) {
  for (int64_t e = global_index(); e < s.E; e += global_stride()) {
    float acc = 0.f;
    for (int64_t t = 0; t < s.T; ++t)
      acc += DL[t * s.E + e];
    drouter_bias[e] += acc;
  }
}

} // namespace

/// The reference kernels (MoeKernels.cu): f32 on CUDA cores.
namespace reference {
/// Scratch of a chunk of s.T tokens, in 4-byte words.
int64_t scratch_words(const MoeShape &s, bool backward);
void forward(void *scratch, const MoeShape &s, void *y, const MoeInputs &in,
             const MoeParams &m, cudaStream_t stream);
void backward(void *scratch, const MoeShape &s, const MoeGrads &g,
              const void *dy, const MoeInputs &in, const MoeParams &m,
              cudaStream_t stream);
} // namespace reference

/// Grouped GEMMs on tensor cores (MoeGrouped.cu).
namespace grouped_path {
int64_t scratch_words(const MoeShape &s, bool backward);
void forward(void *scratch, const MoeShape &s, void *y, const MoeInputs &in,
             const MoeParams &m, cudaStream_t stream);
void backward(void *scratch, const MoeShape &s, const MoeGrads &g,
              const void *dy, const MoeInputs &in, const MoeParams &m,
              cudaStream_t stream);
} // namespace grouped_path

} // namespace mtrt::MT_KNS::moe

#endif // MEGATRAIN_RUNTIME_CUDA_MOECOMMON_CUH
