//===- MoeKernels.cu - a mixture of gated experts: entry, reference -------===//
//
// CudaKernels::moe_forward/backward run the math of cpu::moe_forward/
// backward (docs/primitives.md, moe) over chunks of tokens, on one of two
// paths (MEGATRAIN_CUDA_MOE): grouped tensor-core GEMMs (MoeGrouped.cu, the
// default) or the reference kernels here: f32 on CUDA cores, one thread
// per output element, every sum in a fixed order, no atomics, so two runs
// give the same bits. They are correct at any size but do GEMM work
// without tensor cores; they are the tensor-core path's oracle.
//
// Reference scratch, per chunk of tokens: probabilities P [T, E], chosen
// experts X and weights W [T·k], the experts' (g; u) and a = act(g)·u per
// slot; the backward adds per-slot output and hidden gradients, the router
// logits' gradient, the experts' scales' per slot and each expert's slots
// in token order. Either path's
// chunks keep its scratch within a budget; the weight gradients add chunk
// by chunk.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/MoeCommon.cuh"
#include "runtime/exec/Error.h"

#include <cstdlib>
#include <cstring>

namespace mtrt::MT_KNS {
namespace moe {
namespace {

// Expert e's weight of the hidden unit at place q on input c, and of
// output h on unit i, in either layout (MoeExperts::in_out).
__device__ __forceinline__ float gate_up_w(const bf16 *gate_up, int64_t e,
                                           int64_t q, int64_t c,
                                           const MoeShape &s) {
  return bf2f(s.f.in_out ? gate_up[(e * s.H + c) * 2 * s.I + q]
                         : gate_up[(e * 2 * s.I + q) * s.H + c]);
}
__device__ __forceinline__ float down_w(const bf16 *down, int64_t e, int64_t h,
                                        int64_t i, const MoeShape &s) {
  return bf2f(s.f.in_out ? down[(e * s.I + i) * s.H + h]
                         : down[(e * s.H + h) * s.I + i]);
}

// GU[slot, q] = gate_up[e] unit at place q · (its input weight · x_t) + its
// bias (places in storage order); then A from each unit's (g, u).
__global__ void hidden_kernel(float *GU, const int *X, const float *W,
                              const bf16 *x, const bf16 *gate_up,
                              const bf16 *bias, MoeShape s) {
  const int64_t n = s.slots() * 2 * s.I;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t slot = i / (2 * s.I), q = i % (2 * s.I);
    const bf16 *xt = x + (slot / s.k) * s.H;
    float acc = 0.f;
    for (int64_t h = 0; h < s.H; ++h)
      acc += gate_up_w(gate_up, X[slot], q, h, s) * bf2f(xt[h]);
    GU[i] = input_weight(W, slot, s) * acc + hidden_bias(bias, X[slot], q, s);
  }
}
__global__ void activation_kernel(float *A, const float *GU, MoeShape s) {
  const int64_t n = s.slots() * s.I;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const float *gu = GU + (i / s.I) * 2 * s.I;
    const int64_t c = i % s.I;
    A[i] = activation(gu[s.place(c)], gu[s.place(s.I + c)], s.f);
  }
}

// Expert X[slot]'s output h: down row h · A[slot] + its bias.
__device__ __forceinline__ float expert_output(const bf16 *down,
                                               const bf16 *bias, const float *A,
                                               const int *X, int64_t slot,
                                               int64_t h, const MoeShape &s) {
  float o = bias ? bf2f(bias[X[slot] * s.H + h]) : 0.f;
  for (int64_t i = 0; i < s.I; ++i)
    o += down_w(down, X[slot], h, i, s) * A[slot * s.I + i];
  return o;
}

// y[t, h] = Σ_j W[t, j] · expert e_j's output h (W on the inputs: Σ_j the
// outputs).
__global__ void output_kernel(bf16 *y, const float *A, const int *X,
                              const float *W, const bf16 *down,
                              const bf16 *bias, MoeShape s) {
  const int64_t n = s.T * s.H;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t t = i / s.H, h = i % s.H;
    float acc = 0.f;
    for (int64_t j = 0; j < s.k; ++j) {
      const int64_t slot = t * s.k + j;
      acc += output_weight(W, slot, s) *
             expert_output(down, bias, A, X, slot, h, s);
    }
    y[i] = f2bf(acc);
  }
}

// A block per slot: DOUT = W·dy_t and DW = dy_t · the expert's output (W
// on the inputs: DOUT = dy_t, DW from input_weight_grad_kernel).
__global__ void slot_grad_kernel(float *DOUT, float *DW, const float *A,
                                 const int *X, const float *W, const bf16 *dy,
                                 const bf16 *down, const bf16 *bias,
                                 MoeShape s) {
  const int64_t slot = blockIdx.x, t = slot / s.k;
  float acc = 0.f;
  for (int64_t h = threadIdx.x; h < s.H; h += blockDim.x) {
    const float g = bf2f(dy[t * s.H + h]);
    DOUT[slot * s.H + h] = output_weight(W, slot, s) * g;
    if (!s.r.weigh_inputs)
      acc += g * expert_output(down, bias, A, X, slot, h, s);
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0 && !s.r.weigh_inputs)
    DW[slot] = acc;
}

// DGU[slot] (places in storage order) from da = down[e]ᵀ · DOUT through
// the activation.
__global__ void hidden_grad_kernel(float *DGU, const float *GU,
                                   const float *DOUT, const int *X,
                                   const bf16 *down, MoeShape s) {
  const int64_t n = s.slots() * s.I;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t slot = i / s.I, c = i % s.I;
    float da = 0.f;
    for (int64_t h = 0; h < s.H; ++h)
      da += down_w(down, X[slot], h, c, s) * DOUT[slot * s.H + h];
    const float *gu = GU + slot * 2 * s.I;
    float *dgu = DGU + slot * 2 * s.I;
    const int64_t qg = s.place(c), qu = s.place(s.I + c);
    activation_grad(gu[qg], gu[qu], da, s.f, dgu[qg], dgu[qu]);
  }
}

// With W on the inputs (experts without biases), a block per slot: the
// gradient of the expert's input w · x_t is gate_upᵀ · DGU, so DW =
// Σ_q DGU[q] · (gate_up unit q · x_t); then DGU becomes w · DGU, the
// hidden gradient that x and gate_up see through the weight.
__global__ void input_weight_grad_kernel(float *DW, float *DGU, const int *X,
                                         const float *W, const bf16 *x,
                                         const bf16 *gate_up, MoeShape s) {
  const int64_t slot = blockIdx.x;
  const bf16 *xt = x + (slot / s.k) * s.H;
  float *dgu = DGU + slot * 2 * s.I;
  float acc = 0.f;
  for (int64_t q = threadIdx.x; q < 2 * s.I; q += blockDim.x) {
    float hq = 0.f;
    for (int64_t h = 0; h < s.H; ++h)
      hq += gate_up_w(gate_up, X[slot], q, h, s) * bf2f(xt[h]);
    acc += dgu[q] * hq;
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0)
    DW[slot] = acc;
  for (int64_t q = threadIdx.x; q < 2 * s.I; q += blockDim.x)
    dgu[q] *= W[slot];
}

// drouter[e, c] += Σ_t DL[t, e] · x[t, c], tokens in order.
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

// acc + (routerᵀ · DL[t])[c], term by term: the router's part of its
// input's gradient.
__device__ __forceinline__ float
router_input_grad(float acc, const bf16 *router, const float *DL, int64_t t,
                  int64_t c, const MoeShape &s) {
  for (int64_t e = 0; e < s.E; ++e)
    acc += bf2f(router[e * s.H + c]) * DL[t * s.E + e];
  return acc;
}

// dx[t, c] += Σ_j gate_up[e_j]ᵀ · DGU[slot] + routerᵀ · DL[t] (the
// router's part only where router is given: where it reads x).
__global__ void input_grad_kernel(bf16 *dx, const float *DGU, const float *DL,
                                  const int *X, const bf16 *gate_up,
                                  const bf16 *router, MoeShape s) {
  const int64_t n = s.T * s.H;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t t = i / s.H, c = i % s.H;
    float acc = 0.f;
    for (int64_t j = 0; j < s.k; ++j) {
      const int64_t slot = t * s.k + j;
      for (int64_t q = 0; q < 2 * s.I; ++q)
        acc += gate_up_w(gate_up, X[slot], q, c, s) * DGU[slot * 2 * s.I + q];
    }
    if (router)
      acc = router_input_grad(acc, router, DL, t, c, s);
    add_store(dx, i, acc);
  }
}

// drouter_x[t, c] += routerᵀ · DL[t] (a router on an input of its own).
__global__ void router_input_grad_kernel(bf16 *drx, const float *DL,
                                         const bf16 *router, MoeShape s) {
  const int64_t n = s.T * s.H;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    add_store(drx, i, router_input_grad(0.f, router, DL, i / s.H, i % s.H, s));
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

// ddown and dgate_up, one thread per stored element (either layout).
__global__ void down_grad_kernel(float *ddown, const float *DOUT,
                                 const float *A, const int *LIST,
                                 const int *COUNT, MoeShape s) {
  const int64_t n = s.E * s.H * s.I;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t e = i / (s.H * s.I), within = i % (s.H * s.I);
    const int64_t h = s.f.in_out ? within % s.H : within / s.I,
                  c = s.f.in_out ? within / s.H : within % s.I;
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
    const int64_t e = i / (2 * s.I * s.H), within = i % (2 * s.I * s.H);
    const int64_t q = s.f.in_out ? within % (2 * s.I) : within / s.H,
                  c = s.f.in_out ? within / (2 * s.I) : within % s.H;
    float acc = 0.f;
    for (int m = 0; m < COUNT[e]; ++m) {
      const int64_t slot = LIST[e * s.slots() + m];
      acc += DGU[slot * 2 * s.I + q] * bf2f(x[(slot / s.k) * s.H + c]);
    }
    dgate_up[i] += acc;
  }
}

// The experts' bias gradients: each expert's rows of G [slots, n] summed
// over its slots in token order, into db [E, n].
__global__ void bias_grad_kernel(float *db, const float *G, int64_t n,
                                 const int *LIST, const int *COUNT,
                                 MoeShape s) {
  for (int64_t i = global_index(); i < s.E * n; i += global_stride()) {
    const int64_t e = i / n, c = i % n;
    float acc = 0.f;
    for (int m = 0; m < COUNT[e]; ++m)
      acc += G[LIST[e * s.slots() + m] * n + c];
    db[i] += acc;
  }
}

/// The scratch of one call, carved from one buffer of 4-byte slots.
struct Scratch {
  float *P, *W, *GU, *A, *DOUT, *DW, *DS, *DGU, *DL;
  int *X, *LIST, *COUNT;

  static int64_t words(const MoeShape &s, bool backward) {
    const int64_t S = s.slots();
    int64_t n = s.T * s.E + 2 * S + S * 3 * s.I;
    if (backward)
      n += S * s.H + 2 * S + S * 2 * s.I + s.T * s.E + S * s.E + s.E;
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
    DS = f, f += S;
    DGU = f, f += S * 2 * s.I;
    DL = f, f += s.T * s.E;
    LIST = reinterpret_cast<int *>(f), f += S * s.E;
    COUNT = reinterpret_cast<int *>(f);
  }
};

void forward_hidden(const Scratch &w, const MoeShape &s, const MoeInputs &in,
                    const MoeParams &m, cudaStream_t stream) {
  MT_LAUNCH(logits_kernel, blocks_for(s.T * s.E), kThreads, stream, w.P,
            B(in.router_input()), B(m.router), s);
  MT_LAUNCH(route_kernel, blocks_for(s.T), kThreads, stream, w.P, w.X, w.W,
            B(m.bias), B(m.router_bias), B(m.expert_scale), s);
  MT_LAUNCH(hidden_kernel, blocks_for(s.slots() * 2 * s.I), kThreads, stream,
            w.GU, static_cast<const int *>(w.X),
            static_cast<const float *>(w.W), B(in.x), B(m.gate_up),
            B(m.gate_up_bias), s);
  MT_LAUNCH(activation_kernel, blocks_for(s.slots() * s.I), kThreads, stream,
            w.A, static_cast<const float *>(w.GU), s);
}

} // namespace

namespace reference {
int64_t scratch_words(const MoeShape &s, bool backward) {
  return Scratch::words(s, backward);
}

void forward(void *scratch, const MoeShape &s, void *y, const MoeInputs &in,
             const MoeParams &m, cudaStream_t stream) {
  const Scratch w(scratch, s, false);
  forward_hidden(w, s, in, m, stream);
  MT_LAUNCH(output_kernel, blocks_for(s.T * s.H), kThreads, stream, B(y),
            static_cast<const float *>(w.A), static_cast<const int *>(w.X),
            static_cast<const float *>(w.W), B(m.down), B(m.down_bias), s);
}

void backward(void *scratch, const MoeShape &s, const MoeGrads &g,
              const void *dy, const MoeInputs &in, const MoeParams &m,
              cudaStream_t stream) {
  const Scratch w(scratch, s, true);
  const MoeWeightGrads &p = g.p;
  const int *X = w.X;
  const void *x = in.x;
  const int64_t T = s.T, H = s.H, E = s.E, I = s.I;
  forward_hidden(w, s, in, m, stream);
  MT_LAUNCH(slot_grad_kernel, dim3(unsigned(s.slots())), dim3(kThreads), stream,
            w.DOUT, w.DW, static_cast<const float *>(w.A), X,
            static_cast<const float *>(w.W), B(dy), B(m.down), B(m.down_bias),
            s);
  MT_LAUNCH(hidden_grad_kernel, blocks_for(s.slots() * I), kThreads, stream,
            w.DGU, static_cast<const float *>(w.GU),
            static_cast<const float *>(w.DOUT), X, B(m.down), s);
  if (s.r.weigh_inputs)
    MT_LAUNCH(input_weight_grad_kernel, dim3(unsigned(s.slots())),
              dim3(kThreads), stream, w.DW, w.DGU, X,
              static_cast<const float *>(w.W), B(x), B(m.gate_up), s);
  MT_LAUNCH(routing_grad_kernel, blocks_for(T), kThreads, stream, w.DL,
            p.expert_scale ? w.DS : nullptr, static_cast<const float *>(w.P), X,
            static_cast<const float *>(w.DW), B(m.expert_scale), s);
  if (p.expert_scale)
    MT_LAUNCH(expert_scale_grad_kernel, blocks_for(E), kThreads, stream,
              p.expert_scale, static_cast<const float *>(w.DS), X, s);
  if (g.dx)
    MT_LAUNCH(input_grad_kernel, blocks_for(T * H), kThreads, stream, B(g.dx),
              static_cast<const float *>(w.DGU),
              static_cast<const float *>(w.DL), X, B(m.gate_up),
              in.router_x ? nullptr : B(m.router), s);
  if (in.router_x && g.drouter_x)
    MT_LAUNCH(router_input_grad_kernel, blocks_for(T * H), kThreads, stream,
              B(g.drouter_x), static_cast<const float *>(w.DL), B(m.router), s);
  if (p.router)
    MT_LAUNCH(router_grad_kernel, blocks_for(E * H), kThreads, stream, p.router,
              static_cast<const float *>(w.DL), B(in.router_input()), s);
  if (p.router_bias)
    MT_LAUNCH(router_bias_grad_kernel, blocks_for(E), kThreads, stream,
              p.router_bias, static_cast<const float *>(w.DL), s);
  if (!p.down && !p.gate_up && !p.down_bias && !p.gate_up_bias)
    return;
  MT_LAUNCH(slot_list_kernel, blocks_for(E), kThreads, stream, w.LIST, w.COUNT,
            X, s);
  const int *list = w.LIST, *count = w.COUNT;
  const float *dout = w.DOUT, *dgu = w.DGU;
  if (p.down)
    MT_LAUNCH(down_grad_kernel, blocks_for(E * H * I), kThreads, stream, p.down,
              dout, static_cast<const float *>(w.A), list, count, s);
  if (p.gate_up)
    MT_LAUNCH(gate_up_grad_kernel, blocks_for(E * 2 * I * H), kThreads, stream,
              p.gate_up, dgu, B(x), list, count, s);
  if (p.down_bias)
    MT_LAUNCH(bias_grad_kernel, blocks_for(E * H), kThreads, stream,
              p.down_bias, dout, H, list, count, s);
  if (p.gate_up_bias)
    MT_LAUNCH(bias_grad_kernel, blocks_for(E * 2 * I), kThreads, stream,
              p.gate_up_bias, dgu, 2 * I, list, count, s);
}

} // namespace reference

namespace {

// Scratch per call: what a path's chunk of tokens may use (outside the
// plan's device budget, within the backend's reserve). The grouped path
// gets more: its GEMMs read every expert's weights once a chunk, so longer
// chunks spend less of the step on weight traffic.
constexpr int64_t kReferenceScratchBytes = int64_t(64) << 20;
constexpr int64_t kGroupedScratchBytes = int64_t(128) << 20;

struct Path {
  int64_t (*scratch_words)(const MoeShape &, bool);
  void (*forward)(void *, const MoeShape &, void *, const MoeInputs &,
                  const MoeParams &, cudaStream_t);
  void (*backward)(void *, const MoeShape &, const MoeGrads &, const void *,
                   const MoeInputs &, const MoeParams &, cudaStream_t);
  int64_t budget_bytes;
};

Path path_of(MoeKernels k) {
  if (k == MoeKernels::TensorCores)
    return {grouped_path::scratch_words, grouped_path::forward,
            grouped_path::backward, kGroupedScratchBytes};
  return {reference::scratch_words, reference::forward, reference::backward,
          kReferenceScratchBytes};
}

// Tokens per chunk: the most whose scratch fits the path's budget.
// MEGATRAIN_CUDA_MOE_CHUNK_TOKENS overrides it (the tests' ragged chunks).
int64_t chunk_tokens(const Path &p, const MoeShape &s, bool backward) {
  if (const char *env = std::getenv("MEGATRAIN_CUDA_MOE_CHUNK_TOKENS"))
    if (int64_t n = std::atoll(env); n > 0)
      return std::min(n, s.T);
  int64_t lo = 1, hi = s.T; // scratch grows with the tokens
  MoeShape c = s;
  while (lo < hi) {
    c.T = (lo + hi + 1) / 2;
    if (p.scratch_words(c, backward) * 4 <= p.budget_bytes)
      lo = c.T;
    else
      hi = c.T - 1;
  }
  return lo;
}

void check_routing(const MoeRouting &r) {
  if (r.groups > kMaxGroups)
    fail("the cuda backend's mixture-of-experts kernels take at most ",
         kMaxGroups, " expert groups; this plan's routing has ", r.groups,
         " (train it with --backend cpu)");
}

// Calls fn(scratch, chunk's shape, first token) over the chunks of s.T
// tokens that the path's budget allows, the scratch from alloc(bytes).
template <class Alloc, class Fn>
void over_chunks(const Path &p, const MoeShape &s, bool backward, Alloc alloc,
                 Fn fn) {
  check_routing(s.r);
  const int64_t chunk = chunk_tokens(p, s, backward);
  MoeShape c = s;
  c.T = chunk;
  void *buf = alloc(p.scratch_words(c, backward) * 4);
  for (int64_t t0 = 0; t0 < s.T; t0 += chunk) {
    c.T = std::min(chunk, s.T - t0);
    fn(buf, c, t0);
  }
}

} // namespace
} // namespace moe

MoeKernels moe_kernels_from_env() {
  const char *s = std::getenv("MEGATRAIN_CUDA_MOE");
  if (!s || !*s || std::strcmp(s, "tensor-cores") == 0)
    return MoeKernels::TensorCores;
  if (std::strcmp(s, "cuda-cores") == 0)
    return MoeKernels::CudaCores;
  fail("MEGATRAIN_CUDA_MOE=", s,
       ": expected tensor-cores (the default) or cuda-cores");
}

void CudaKernels::moe_forward(void *y, const void *x, const void *router_x,
                              const MoeParams &w, int64_t T, int64_t H,
                              int64_t E, int64_t I, int64_t k,
                              const MoeRouting &routing,
                              const MoeExperts &experts) {
  using namespace moe;
  if (T <= 0)
    return;
  const cudaStream_t stream = cudaStream_t(stream_);
  const Path p = path_of(moe_);
  over_chunks(
      p, MoeShape{T, H, E, I, k, routing, experts}, false,
      [&](int64_t bytes) { return scratch(bytes); },
      [&](void *buf, const MoeShape &c, int64_t t0) {
        p.forward(buf, c, at(y, t0 * H),
                  {at(x, t0 * H), router_x ? at(router_x, t0 * H) : nullptr}, w,
                  stream);
      });
}

// The param gradients add chunk by chunk, in token order.
void CudaKernels::moe_backward(void *dx, void *drouter_x,
                               const MoeWeightGrads &g, const void *dy,
                               const void *x, const void *router_x,
                               const MoeParams &w, int64_t T, int64_t H,
                               int64_t E, int64_t I, int64_t k,
                               const MoeRouting &routing,
                               const MoeExperts &experts) {
  using namespace moe;
  if (T <= 0)
    return;
  const cudaStream_t stream = cudaStream_t(stream_);
  const Path p = path_of(moe_);
  over_chunks(
      p, MoeShape{T, H, E, I, k, routing, experts}, true,
      [&](int64_t bytes) { return scratch(bytes); },
      [&](void *buf, const MoeShape &c, int64_t t0) {
        p.backward(buf, c,
                   MoeGrads{dx ? at(dx, t0 * H) : nullptr,
                            drouter_x ? at(drouter_x, t0 * H) : nullptr, g},
                   at(dy, t0 * H),
                   {at(x, t0 * H), router_x ? at(router_x, t0 * H) : nullptr},
                   w, stream);
      });
}

} // namespace mtrt::MT_KNS
