//===- MoeGrouped.cu - a mixture of gated experts on tensor cores ---------===//
//
// The experts' products as grouped GEMMs (GroupedGemm.cuh): after routing,
// each expert's slots are laid out contiguously in token order (its
// "positions"), and one launch runs every expert's product over its own
// positions, bf16 operands and f32 accumulation. Per chunk of tokens:
//
//   forward   GU = x·gate_upᵀ (per position, bf16), A = act(g + b_g,
//             u + b_u) (bf16), YP = A·downᵀ (f32), y_t = Σ_j w_j ·
//             (YP[pos(t, j)] + b_down)
//   backward  the forward up to A again; DAP = dy·down (unweighted),
//             then per position dw = DAP·a + dy·b_down, da = w·DAP,
//             (ḡ; ū) = DGU and ō = w·dy (bf16); the routing gradient as
//             the reference's; ddown_e += ōᵀ·A and dgate_up_e += DGUᵀ·x
//             over the expert's positions (grouped K), the biases' the
//             sums of ō and DGU; DXP = DGU·gate_up, then
//             dx_t += Σ_j DXP[pos(t, j)] + routerᵀ·l̄_t (the router's
//             part to drouter_x instead where the router reads its own
//             input, router_x).
//
// With the weights on the experts' inputs (MoeRouting::weigh_inputs, no
// expert biases), (g; u) = w·GU, y_t = Σ_j YP[pos(t, j)]; in the backward
// da = DAP, ō = dy, dw = (ḡ; ū)·GU and DGU = w·(ḡ; ū): the hidden gradient
// that x and gate_up see through the weight.
//
// Either layout of the matrices (MoeExperts::in_out) is an operand stored
// the other way round (`rows` or `k_rows`), and the weight gradients are
// the same products with their operands swapped; GU and DGU keep gate_up's
// order of units (interleaved or not), which only the activation reads.
//
// The router's products (the logits; in the backward its gradient and its
// part of dx, with l̄ in bf16) are the same GEMMs over all tokens as one
// group. Every sum runs in a fixed order (positions are in token order,
// each output element is one block's sum), so results are deterministic.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/GroupedGemm.cuh"
#include "runtime/cuda/MoeCommon.cuh"

#include <type_traits>

namespace mtrt::MT_KNS::moe {
namespace {

using grouped::Groups;
using grouped::Operand;
using grouped::Output;
using grouped::Store;

/// A chunk's scratch, carved in 16-byte aligned arrays. Positions: POS
/// [slot] is a slot's position, ROW [position] its slot; OFF and TILES
/// [E + 1] the experts' first positions and first row tiles; WHOLE the one
/// group of all T tokens (the router's products). DAP (backward, [S, I])
/// and DXP ([S, H]) are live at different times and share a region.
struct Scratch {
  float *P = nullptr, *W = nullptr, *YP = nullptr, *DAP = nullptr,
        *DW = nullptr, *DS = nullptr, *DXP = nullptr, *DL = nullptr,
        *DXR = nullptr;
  int *X = nullptr, *POS = nullptr, *ROW = nullptr, *OFF = nullptr,
      *TILES = nullptr, *WHOLE = nullptr;
  bf16 *GU = nullptr, *A = nullptr, *DGU = nullptr, *DOUT = nullptr,
       *DLB = nullptr;
  int64_t bytes = 0;

  Scratch(void *base, const MoeShape &s, bool backward) {
    char *p = static_cast<char *>(base);
    auto take = [&](auto *&ptr, int64_t n) {
      using T = std::remove_reference_t<decltype(*ptr)>;
      ptr = reinterpret_cast<T *>(p ? p + bytes : nullptr);
      bytes += (n * int64_t(sizeof(T)) + 15) / 16 * 16;
    };
    const int64_t S = s.slots();
    take(P, s.T * s.E), take(W, S), take(X, S), take(POS, S), take(ROW, S);
    take(OFF, s.E + 1), take(TILES, s.E + 1), take(WHOLE, 4);
    take(GU, S * 2 * s.I), take(A, S * s.I);
    if (!backward) {
      take(YP, S * s.H);
      return;
    }
    take(DAP, S * max64(s.I, s.H));
    DXP = DAP;
    take(DW, S), take(DS, S), take(DGU, S * 2 * s.I), take(DOUT, S * s.H),
        take(DL, s.T * s.E), take(DLB, s.T * s.E), take(DXR, s.T * s.H);
  }
};

// One block: each expert's count of slots, then (thread 0) the prefix of
// positions and of row tiles, then each expert's slots in token order.
__global__ void expert_slots_kernel(int *POS, int *ROW, int *OFF, int *TILES,
                                    const int *X, MoeShape s) {
  for (int64_t e = threadIdx.x; e < s.E; e += blockDim.x) {
    int n = 0;
    for (int64_t slot = 0; slot < s.slots(); ++slot)
      n += X[slot] == int(e);
    OFF[e + 1] = n;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    OFF[0] = TILES[0] = 0;
    for (int64_t e = 0; e < s.E; ++e) {
      const int n = OFF[e + 1];
      OFF[e + 1] = OFF[e] + n;
      TILES[e + 1] = TILES[e] + (n + grouped::kBM - 1) / grouped::kBM;
    }
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < s.E; e += blockDim.x) {
    int pos = OFF[e];
    for (int64_t slot = 0; slot < s.slots(); ++slot)
      if (X[slot] == int(e)) {
        POS[slot] = pos;
        ROW[pos++] = int(slot);
      }
  }
}

// Position p's unit c: (g, u) from GU's bf16 products, times the slot's
// input weight, plus the expert's biases (f32).
struct HiddenUnit {
  float g, u;
  int64_t qg, qu; // their places along 2I
};
__device__ __forceinline__ HiddenUnit hidden_unit(const bf16 *GU,
                                                  const bf16 *bias, int e,
                                                  float in_w, int64_t pos,
                                                  int64_t c,
                                                  const MoeShape &s) {
  const int64_t qg = s.place(c), qu = s.place(s.I + c);
  const bf16 *gu = GU + pos * 2 * s.I;
  return {in_w * bf2f(gu[qg]) + hidden_bias(bias, e, qg, s),
          in_w * bf2f(gu[qu]) + hidden_bias(bias, e, qu, s), qg, qu};
}

// A[p, c] = act(g, u) of position p's unit c.
__global__ void activation_kernel(bf16 *A, const bf16 *GU, const int *ROW,
                                  const int *X, const float *W,
                                  const bf16 *bias, MoeShape s) {
  const int64_t n = s.slots() * s.I;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t pos = i / s.I, slot = ROW[pos];
    const HiddenUnit v = hidden_unit(GU, bias, X[slot],
                                     input_weight(W, slot, s), pos, i % s.I, s);
    A[i] = f2bf(activation(v.g, v.u, s.f));
  }
}

// y[t, h] = Σ_j W[t, j] · (YP[pos(t, j), h] + bias[e_j, h]) (W on the
// inputs: Σ_j YP[pos(t, j), h]).
__global__ void combine_kernel(bf16 *y, const float *YP, const int *POS,
                               const int *X, const float *W, const bf16 *bias,
                               MoeShape s) {
  const int64_t n = s.T * s.H;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t t = i / s.H, h = i % s.H;
    float acc = 0.f;
    for (int64_t j = 0; j < s.k; ++j) {
      const int64_t slot = t * s.k + j;
      const float b = bias ? bf2f(bias[X[slot] * s.H + h]) : 0.f;
      acc += output_weight(W, slot, s) * (YP[POS[slot] * s.H + h] + b);
    }
    y[i] = f2bf(acc);
  }
}

// A block per position: DW[slot] = DAP·a + dy_t·b_down, then with da =
// w·DAP the hidden gradient DGU (through the activation, at the units'
// places) and DOUT = w·dy_t. With w on the input: da = DAP, DW = (ḡ; ū) ·
// GU, DGU = w·(ḡ; ū), DOUT = dy_t.
__global__ void slot_backward_kernel(float *DW, bf16 *DGU, bf16 *DOUT,
                                     const float *DAP, const bf16 *A,
                                     const bf16 *GU, const int *ROW,
                                     const int *X, const float *W,
                                     const bf16 *dy, const bf16 *gate_up_bias,
                                     const bf16 *down_bias, MoeShape s) {
  const int64_t pos = blockIdx.x, slot = ROW[pos], t = slot / s.k;
  const int e = X[slot];
  const float in_w = input_weight(W, slot, s),
              out_w = output_weight(W, slot, s);
  const bool on_input = s.r.weigh_inputs;
  const float *dap = DAP + pos * s.I;
  const bf16 *gu = GU + pos * 2 * s.I;
  float acc = 0.f;
  if (!on_input) {
    for (int64_t c = threadIdx.x; c < s.I; c += blockDim.x)
      acc += dap[c] * bf2f(A[pos * s.I + c]);
    if (down_bias)
      for (int64_t h = threadIdx.x; h < s.H; h += blockDim.x)
        acc += bf2f(dy[t * s.H + h]) * bf2f(down_bias[e * s.H + h]);
  }
  bf16 *dgu = DGU + pos * 2 * s.I;
  for (int64_t c = threadIdx.x; c < s.I; c += blockDim.x) {
    const HiddenUnit v = hidden_unit(GU, gate_up_bias, e, in_w, pos, c, s);
    float dg, du;
    activation_grad(v.g, v.u, out_w * dap[c], s.f, dg, du);
    if (on_input)
      acc += dg * bf2f(gu[v.qg]) + du * bf2f(gu[v.qu]);
    dgu[v.qg] = f2bf(in_w * dg);
    dgu[v.qu] = f2bf(in_w * du);
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0)
    DW[slot] = acc;
  for (int64_t h = threadIdx.x; h < s.H; h += blockDim.x)
    DOUT[pos * s.H + h] = f2bf(out_w * bf2f(dy[t * s.H + h]));
}

// db[e, c] += Σ over expert e's positions of G[p, c] (n columns), in
// order: the experts' bias gradients from DGU or DOUT.
__global__ void bias_grad_kernel(float *db, const bf16 *G, int64_t n,
                                 const int *OFF, MoeShape s) {
  for (int64_t i = global_index(); i < s.E * n; i += global_stride()) {
    const int64_t e = i / n, c = i % n;
    float acc = 0.f;
    for (int p = OFF[e]; p < OFF[e + 1]; ++p)
      acc += bf2f(G[p * n + c]);
    db[i] += acc;
  }
}

// dx[t, c] += Σ_j DXP[pos(t, j), c] + DXR[t, c] (routerᵀ · l̄_t; none
// where DXR is null: the router reads router_x).
__global__ void input_combine_kernel(bf16 *dx, const float *DXP,
                                     const float *DXR, const int *POS,
                                     MoeShape s) {
  const int64_t n = s.T * s.H;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t t = i / s.H, c = i % s.H;
    float acc = DXR ? DXR[i] : 0.f;
    for (int64_t j = 0; j < s.k; ++j)
      acc += DXP[POS[t * s.k + j] * s.H + c];
    add_store(dx, i, acc);
  }
}

// y += x over n elements (drouter_x from DXR).
__global__ void add_f32_kernel(bf16 *y, const float *x, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride())
    add_store(y, i, x[i]);
}

// The group of all T tokens: offsets {0, T}, row tiles {0, ⌈T / 128⌉}.
__global__ void whole_group_kernel(int *g, MoeShape s) {
  g[0] = 0, g[1] = int(s.T), g[2] = 0;
  g[3] = int((s.T + grouped::kBM - 1) / grouped::kBM);
}

__global__ void to_bf16_kernel(bf16 *y, const float *x, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride())
    y[i] = f2bf(x[i]);
}

/// An operand stored with K contiguous (rows) or along its rows (k_rows).
Operand rows(const void *m, int64_t ld, int64_t group_stride = 0,
             const int *gather = nullptr, int div = 1) {
  return {B(m), ld, group_stride, gather, div, false};
}
Operand k_rows(const void *m, int64_t ld, int64_t group_stride = 0,
               const int *gather = nullptr, int div = 1) {
  return {B(m), ld, group_stride, gather, div, true};
}

/// Rows grouped by expert (their positions), or all T tokens as one group
/// (the router's products), with the most row tiles a launch may need.
struct Grouping {
  Groups groups;
  int64_t rows;
};
Grouping by_expert(const Scratch &w, const MoeShape &s) {
  return {Groups{w.OFF, w.TILES, int(s.E)}, s.slots()};
}
Grouping whole(const Scratch &w, const MoeShape &s) {
  return {Groups{w.WHOLE, w.WHOLE + 2, 1}, s.T};
}

/// C[p, :N] over every group's rows p (grouped M).
template <Store S>
void product_m(const Operand &a, const Operand &b, void *c, const Grouping &g,
               int64_t N, int64_t K, cudaStream_t stream) {
  const dim3 grid(unsigned(grouped::max_row_tiles(g.rows, g.groups.experts)),
                  unsigned((N + grouped::kBN - 1) / grouped::kBN));
  launch_kernel("moe_grouped_m_kernel", grouped::grouped_m_kernel<S>, grid,
                dim3(grouped::kGemmThreads), stream, a, b, Output{c, N, 0},
                g.groups, N, K);
}

/// C_e[:M, :N] += Σ over group e's rows (grouped K).
void product_k(const Operand &a, const Operand &b, float *c, const Grouping &g,
               int64_t M, int64_t N, cudaStream_t stream) {
  const int64_t tiles = ((M + grouped::kBM - 1) / grouped::kBM) *
                        ((N + grouped::kBN - 1) / grouped::kBN);
  launch_kernel("moe_grouped_k_kernel",
                grouped::grouped_k_kernel<Store::F32Add>,
                dim3(unsigned(tiles), unsigned(g.groups.experts)),
                dim3(grouped::kGemmThreads), stream, a, b, Output{c, N, M * N},
                g.groups, M, N);
}

// Routing, positions, GU and A: what the forward and the backward share.
void forward_hidden(const Scratch &w, const MoeShape &s, const MoeInputs &in,
                    const MoeParams &m, cudaStream_t stream) {
  const void *x = in.x;
  MT_LAUNCH(whole_group_kernel, dim3(1), dim3(1), stream, w.WHOLE, s);
  product_m<Store::F32>(rows(in.router_input(), s.H), rows(m.router, s.H), w.P,
                        whole(w, s), s.E, s.H, stream);
  MT_LAUNCH(route_kernel, blocks_for(s.T), kThreads, stream, w.P, w.X, w.W,
            B(m.bias), B(m.router_bias), B(m.expert_scale), s);
  MT_LAUNCH(expert_slots_kernel, dim3(1), dim3(kThreads), stream, w.POS, w.ROW,
            w.OFF, w.TILES, static_cast<const int *>(w.X), s);
  const int64_t H = s.H, I = s.I;
  product_m<Store::Bf16>(rows(x, H, 0, w.ROW, int(s.k)),
                         s.f.in_out ? k_rows(m.gate_up, 2 * I, 2 * I * H)
                                    : rows(m.gate_up, H, 2 * I * H),
                         w.GU, by_expert(w, s), 2 * I, H, stream);
  MT_LAUNCH(activation_kernel, blocks_for(s.slots() * I), kThreads, stream, w.A,
            static_cast<const bf16 *>(w.GU), static_cast<const int *>(w.ROW),
            static_cast<const int *>(w.X), static_cast<const float *>(w.W),
            B(m.gate_up_bias), s);
}

} // namespace

namespace grouped_path {

int64_t scratch_words(const MoeShape &s, bool backward) {
  return Scratch(nullptr, s, backward).bytes / 4;
}

void forward(void *scratch, const MoeShape &s, void *y, const MoeInputs &in,
             const MoeParams &m, cudaStream_t stream) {
  const Scratch w(scratch, s, false);
  const int64_t H = s.H, I = s.I;
  forward_hidden(w, s, in, m, stream);
  product_m<Store::F32>(rows(w.A, I),
                        s.f.in_out ? k_rows(m.down, H, H * I)
                                   : rows(m.down, I, H * I),
                        w.YP, by_expert(w, s), H, I, stream);
  MT_LAUNCH(combine_kernel, blocks_for(s.T * H), kThreads, stream, B(y),
            static_cast<const float *>(w.YP), static_cast<const int *>(w.POS),
            static_cast<const int *>(w.X), static_cast<const float *>(w.W),
            B(m.down_bias), s);
}

void backward(void *scratch, const MoeShape &s, const MoeGrads &g,
              const void *dy, const MoeInputs &in, const MoeParams &m,
              cudaStream_t stream) {
  const Scratch w(scratch, s, true);
  const int64_t H = s.H, I = s.I;
  const bool in_out = s.f.in_out;
  const MoeWeightGrads &p = g.p;
  const void *x = in.x;
  forward_hidden(w, s, in, m, stream);
  const Grouping experts = by_expert(w, s), tokens = whole(w, s);
  product_m<Store::F32>(rows(dy, H, 0, w.ROW, int(s.k)),
                        in_out ? rows(m.down, H, H * I)
                               : k_rows(m.down, I, H * I),
                        w.DAP, experts, I, H, stream);
  MT_LAUNCH(slot_backward_kernel, dim3(unsigned(s.slots())), dim3(kThreads),
            stream, w.DW, w.DGU, w.DOUT, static_cast<const float *>(w.DAP),
            static_cast<const bf16 *>(w.A), static_cast<const bf16 *>(w.GU),
            static_cast<const int *>(w.ROW), static_cast<const int *>(w.X),
            static_cast<const float *>(w.W), B(dy), B(m.gate_up_bias),
            B(m.down_bias), s);
  MT_LAUNCH(routing_grad_kernel, blocks_for(s.T), kThreads, stream, w.DL,
            p.expert_scale ? w.DS : nullptr, static_cast<const float *>(w.P),
            static_cast<const int *>(w.X), static_cast<const float *>(w.DW),
            B(m.expert_scale), s);
  if (p.expert_scale)
    MT_LAUNCH(expert_scale_grad_kernel, blocks_for(s.E), kThreads, stream,
              p.expert_scale, static_cast<const float *>(w.DS),
              static_cast<const int *>(w.X), s);
  // The router's gradients as products over all tokens, l̄ in bf16.
  MT_LAUNCH(to_bf16_kernel, blocks_for(s.T * s.E), kThreads, stream, w.DLB,
            static_cast<const float *>(w.DL), s.T * s.E);
  if (p.router)
    product_k(k_rows(w.DLB, s.E), k_rows(in.router_input(), H), p.router,
              tokens, s.E, H, stream);
  if (p.router_bias)
    MT_LAUNCH(router_bias_grad_kernel, blocks_for(s.E), kThreads, stream,
              p.router_bias, static_cast<const float *>(w.DL), s);
  // The weight gradients in storage order: [H, I] (or [I, H]) and [2I, H]
  // (or [H, 2I]) per expert.
  const Operand dout = k_rows(w.DOUT, H), a = k_rows(w.A, I),
                dgu = k_rows(w.DGU, 2 * I),
                xs = k_rows(x, H, 0, w.ROW, int(s.k));
  if (p.down)
    in_out ? product_k(a, dout, p.down, experts, I, H, stream)
           : product_k(dout, a, p.down, experts, H, I, stream);
  if (p.gate_up)
    in_out ? product_k(xs, dgu, p.gate_up, experts, H, 2 * I, stream)
           : product_k(dgu, xs, p.gate_up, experts, 2 * I, H, stream);
  if (p.down_bias)
    MT_LAUNCH(bias_grad_kernel, blocks_for(s.E * H), kThreads, stream,
              p.down_bias, static_cast<const bf16 *>(w.DOUT), H,
              static_cast<const int *>(w.OFF), s);
  if (p.gate_up_bias)
    MT_LAUNCH(bias_grad_kernel, blocks_for(s.E * 2 * I), kThreads, stream,
              p.gate_up_bias, static_cast<const bf16 *>(w.DGU), 2 * I,
              static_cast<const int *>(w.OFF), s);
  // The router's input gradient: into drouter_x, or with dx's.
  void *drouter_input = in.router_x ? g.drouter_x : g.dx;
  if (drouter_input)
    product_m<Store::F32>(rows(w.DLB, s.E), k_rows(m.router, H), w.DXR, tokens,
                          H, s.E, stream);
  if (in.router_x && g.drouter_x)
    MT_LAUNCH(add_f32_kernel, blocks_for(s.T * H), kThreads, stream,
              B(g.drouter_x), static_cast<const float *>(w.DXR), s.T * H);
  if (!g.dx)
    return;
  product_m<Store::F32>(rows(w.DGU, 2 * I),
                        in_out ? rows(m.gate_up, 2 * I, 2 * I * H)
                               : k_rows(m.gate_up, H, 2 * I * H),
                        w.DXP, experts, H, 2 * I, stream);
  MT_LAUNCH(input_combine_kernel, blocks_for(s.T * H), kThreads, stream,
            B(g.dx), static_cast<const float *>(w.DXP),
            in.router_x ? nullptr : static_cast<const float *>(w.DXR),
            static_cast<const int *>(w.POS), s);
}

} // namespace grouped_path
} // namespace mtrt::MT_KNS::moe
