//===- ElementwiseKernels.cu - pointwise, layout and embedding kernels ----===//
//
// Grid-stride loops over bf16 storage, f32 math, one rounding per output
// (docs/primitives.md gives each formula). Broadcast and transpose index
// spaces are coalesced on the host first (runtime/kernels/Strided.h), so
// the common cases run with rank 1 or 2.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Gelu.cuh"
#include "runtime/cuda/KernelCommon.cuh"
#include "runtime/exec/Error.h"
#include "runtime/kernels/Strided.h"

#ifdef MEGATRAIN_CUDA_EMULATION
#include <chrono>
#include <thread>
#endif

namespace mtrt::MT_KNS {

namespace {

__device__ __forceinline__ float sigmoid(float x) {
  return 1.f / (1.f + expf(-x));
}
__device__ __forceinline__ float silu(float x) { return x * sigmoid(x); }
__device__ __forceinline__ float silu_grad(float x) {
  const float s = sigmoid(x);
  return s * (1.f + x * (1.f - s));
}

// ---- pointwise ------------------------------------------------------------

enum class Pointwise : int {
  Relu,
  ReluGrad,
  Silu,
  SiluGrad,
  Sigmoid,
  SigmoidGrad,
  Exp,
  Softplus,
  SoftplusGrad,
  Gelu,
  GeluTanh,
  GeluGrad,
  GeluTanhGrad
};

/// y = f(x) (forward) or y += dy · f'(x) (backward).
template <Pointwise Op>
__global__ void pointwise_kernel(bf16 *y, const bf16 *dy, const bf16 *x,
                                 int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const float v = bf2f(x[i]);
    switch (Op) {
    case Pointwise::Relu:
      y[i] = f2bf(v > 0.f ? v : 0.f);
      break;
    case Pointwise::Silu:
      y[i] = f2bf(silu(v));
      break;
    case Pointwise::Sigmoid:
      y[i] = f2bf(sigmoid(v));
      break;
    case Pointwise::Exp:
      y[i] = f2bf(expf(v));
      break;
    case Pointwise::Softplus:
      y[i] = f2bf(fmaxf(v, 0.f) + log1pf(expf(-fabsf(v))));
      break;
    case Pointwise::Gelu:
      y[i] = f2bf(gelu(v, false));
      break;
    case Pointwise::GeluTanh:
      y[i] = f2bf(gelu(v, true));
      break;
    case Pointwise::ReluGrad:
      if (v > 0.f)
        add_store(y, i, bf2f(dy[i]));
      break;
    case Pointwise::SiluGrad:
      add_store(y, i, bf2f(dy[i]) * silu_grad(v));
      break;
    case Pointwise::SigmoidGrad: {
      const float s = sigmoid(v);
      add_store(y, i, bf2f(dy[i]) * s * (1.f - s));
      break;
    }
    case Pointwise::SoftplusGrad:
      add_store(y, i, bf2f(dy[i]) * sigmoid(v));
      break;
    case Pointwise::GeluGrad:
      add_store(y, i, bf2f(dy[i]) * gelu_grad(v, false));
      break;
    case Pointwise::GeluTanhGrad:
      add_store(y, i, bf2f(dy[i]) * gelu_grad(v, true));
      break;
    }
  }
}

// xIELU: ap and an are read from their one-element weights, themselves or
// through the softplus (cpu::xielu_alphas).
__device__ __forceinline__ float xielu_softplus(float a) {
  return a > 20.f ? a : log1pf(expf(a));
}
__device__ __forceinline__ float xielu_alpha_p(const bf16 *ap, bool softplus) {
  const float a = bf2f(ap[0]);
  return softplus ? xielu_softplus(a) : a;
}
__device__ __forceinline__ float xielu_alpha_n(const bf16 *an, float beta,
                                               bool softplus) {
  const float a = bf2f(an[0]);
  return softplus ? beta + xielu_softplus(a) : a;
}

__global__ void xielu_forward_kernel(bf16 *y, const bf16 *x, const bf16 *ap,
                                     const bf16 *an, int64_t n, float beta,
                                     float eps, bool softplus) {
  const float a_p = xielu_alpha_p(ap, softplus),
              a_n = xielu_alpha_n(an, beta, softplus);
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const float v = bf2f(x[i]);
    y[i] = f2bf(v > 0.f ? a_p * v * v + beta * v
                        : a_n * (expm1f(fminf(v, eps)) - v) + beta * v);
  }
}

__global__ void xielu_backward_kernel(bf16 *dx, const bf16 *dy, const bf16 *x,
                                      const bf16 *ap, const bf16 *an, int64_t n,
                                      float beta, float eps, bool softplus) {
  const float a_p = xielu_alpha_p(ap, softplus),
              a_n = xielu_alpha_n(an, beta, softplus);
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const float v = bf2f(x[i]);
    const float d = v > 0.f ? 2.f * a_p * v + beta
                            : a_n * ((v < eps ? expf(v) : 0.f) - 1.f) + beta;
    add_store(dx, i, bf2f(dy[i]) * d);
  }
}

// The summands of xIELU's param gradients, the n elements viewed as rows of
// kXieluCols: dy·x² above 0 (alpha_p), dy·(expm1(min(x, eps)) − x) below
// (alpha_n).
constexpr int64_t kXieluCols = 1024;
template <bool Positive> struct XieluParamGrad {
  const bf16 *dy, *x;
  int64_t n;
  float eps;
  __device__ float operator()(int64_t m, int64_t j) const {
    const int64_t i = m * kXieluCols + j;
    if (i >= n)
      return 0.f;
    const float v = bf2f(x[i]);
    if (Positive)
      return v > 0.f ? bf2f(dy[i]) * v * v : 0.f;
    return v > 0.f ? 0.f : bf2f(dy[i]) * (expm1f(fminf(v, eps)) - v);
  }
};
/// Column sums times the softplus' derivative at a one-element weight (1
/// where alpha is null).
struct ThroughSoftplus {
  const float *v;
  const bf16 *alpha;
  __device__ float operator()(int64_t m, int64_t) const {
    return alpha ? v[m] / (1.f + expf(-bf2f(alpha[0]))) : v[m];
  }
};

__global__ void swiglu_forward_kernel(bf16 *y, const bf16 *gate, const bf16 *up,
                                      int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride())
    y[i] = f2bf(silu(bf2f(gate[i])) * bf2f(up[i]));
}

__global__ void swiglu_backward_kernel(bf16 *dgate, bf16 *dup, const bf16 *dy,
                                       const bf16 *gate, const bf16 *up,
                                       int64_t n, bool accumulate) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const float g = bf2f(gate[i]), u = bf2f(up[i]), d = bf2f(dy[i]);
    if (dgate)
      write_or_add(dgate, i, d * u * silu_grad(g), accumulate);
    if (dup)
      write_or_add(dup, i, d * silu(g), accumulate);
  }
}

/// y = cap · tanh(x / cap) (forward) or y += dy · (1 − tanh²) (backward).
template <bool Backward>
__global__ void softcap_kernel(bf16 *y, const bf16 *dy, const bf16 *x,
                               int64_t n, float cap) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const float t = tanhf(bf2f(x[i]) / cap);
    if (Backward)
      add_store(y, i, bf2f(dy[i]) * (1.f - t * t));
    else
      y[i] = f2bf(cap * t);
  }
}

__global__ void scale_kernel(bf16 *y, const bf16 *x, int64_t n, float factor) {
  for (int64_t i = global_index(); i < n; i += global_stride())
    y[i] = f2bf(factor * bf2f(x[i]));
}

__global__ void accumulate_kernel(float *g, const bf16 *x, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride())
    g[i] += bf2f(x[i]);
}

// ---- strided index spaces -------------------------------------------------

/// A coalesced cpu::StridedSpace, by value in kernel parameters.
struct Space {
  int rank;
  int64_t shape[cpu::kMaxRank];
  int64_t stride[cpu::kMaxArrays][cpu::kMaxRank];
};

Space to_device(const cpu::StridedSpace &s) {
  Space d{};
  d.rank = s.rank;
  for (int i = 0; i < s.rank; ++i) {
    d.shape[i] = s.shape[i];
    for (int a = 0; a < cpu::kMaxArrays; ++a)
      d.stride[a][i] = s.stride[a][i];
  }
  return d;
}

/// Offsets of linear index i (row-major over the space) in each array.
__device__ __forceinline__ void offsets(const Space &s, int64_t i,
                                        int64_t off[cpu::kMaxArrays]) {
  off[0] = off[1] = off[2] = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    const int64_t idx = i % s.shape[d];
    i /= s.shape[d];
    off[0] += idx * s.stride[0][d];
    off[1] += idx * s.stride[1][d];
    off[2] += idx * s.stride[2][d];
  }
}

constexpr int kOut = 0, kLhs = 1, kRhs = 2;

cpu::StridedSpace binary_space(const Broadcast &bc) {
  cpu::StridedSpace s;
  s.rank = bc.rank;
  int64_t contiguous = 1;
  for (int d = bc.rank - 1; d >= 0; --d) {
    s.shape[d] = bc.shape[d];
    s.stride[kOut][d] = contiguous;
    s.stride[kLhs][d] = bc.lhs_stride[d];
    s.stride[kRhs][d] = bc.rhs_stride[d];
    contiguous *= bc.shape[d];
  }
  return s;
}

template <bool Mul>
__global__ void binary_flat_kernel(bf16 *y, const bf16 *a, const bf16 *b,
                                   int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const float x = bf2f(a[i]), z = bf2f(b[i]);
    y[i] = f2bf(Mul ? x * z : x + z);
  }
}

template <bool Mul>
__global__ void binary_kernel(bf16 *y, const bf16 *a, const bf16 *b, Space s,
                              int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    int64_t off[cpu::kMaxArrays];
    offsets(s, i, off);
    const float x = bf2f(a[off[kLhs]]), z = bf2f(b[off[kRhs]]);
    y[off[kOut]] = f2bf(Mul ? x * z : x + z);
  }
}

/// The gradient of one broadcast operand: `kept` walks the operand's
/// elements (arrays: operand, dy, other), `reduced` the dims it was
/// broadcast over (arrays: -, dy, other). Pass 1 sums a chunk of the
/// reduced index space per (element, chunk) in order; pass 2 adds the
/// chunks in order. Both are deterministic.
__global__ void reduce_partials_kernel(float *partials, const bf16 *dy,
                                       const bf16 *other, Space kept,
                                       Space reduced, int64_t E, int64_t R,
                                       int64_t per_chunk) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= E)
    return;
  int64_t k[cpu::kMaxArrays];
  offsets(kept, e, k);
  const int64_t r0 = int64_t(blockIdx.y) * per_chunk;
  const int64_t r1 = min64(R, r0 + per_chunk);
  float acc = 0.f;
  for (int64_t r = r0; r < r1; ++r) {
    int64_t o[cpu::kMaxArrays];
    offsets(reduced, r, o);
    const float g = bf2f(dy[k[1] + o[1]]);
    acc += other ? g * bf2f(other[k[2] + o[2]]) : g;
  }
  partials[int64_t(blockIdx.y) * E + e] = acc;
}

__global__ void reduce_finish_kernel(bf16 *d_operand, const float *partials,
                                     Space kept, int64_t E, int64_t chunks) {
  for (int64_t e = global_index(); e < E; e += global_stride()) {
    int64_t k[cpu::kMaxArrays];
    offsets(kept, e, k);
    float s = 0.f;
    for (int64_t c = 0; c < chunks; ++c)
      s += partials[c * E + e];
    add_store(d_operand, k[0], s);
  }
}

/// Not broadcast (R = 1): d_operand[e] += dy · other, elementwise.
__global__ void reduce_direct_kernel(bf16 *d_operand, const bf16 *dy,
                                     const bf16 *other, Space kept, int64_t E) {
  for (int64_t e = global_index(); e < E; e += global_stride()) {
    int64_t k[cpu::kMaxArrays];
    offsets(kept, e, k);
    const float g = bf2f(dy[k[1]]);
    add_store(d_operand, k[0], other ? g * bf2f(other[k[2]]) : g);
  }
}

// ---- layout ---------------------------------------------------------------

/// Arrays: 0 = y, 1 = x. Forward y[o0] = x[o1]; backward dx[o1] += dy[o0]
/// (a permutation: each dx element is written by one thread).
template <bool Backward>
__global__ void transpose_kernel(bf16 *out, const bf16 *in, Space s,
                                 int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    int64_t off[cpu::kMaxArrays];
    offsets(s, i, off);
    if (Backward)
      add_store(out, off[1], bf2f(in[off[0]]));
    else
      out[off[0]] = in[off[1]];
  }
}

/// Eight bf16 as four words, moved as one 16-byte access (the address
/// 16-byte aligned); element e is the low (e even) or high half of word
/// e / 2. Words, not an array of bf16, so that they stay in registers.
struct Bf16x8 {
  uint32_t w[4];
  __device__ __forceinline__ float operator[](int e) const {
    return __int_as_float(
        int32_t(e % 2 ? w[e / 2] & 0xffff0000u : w[e / 2] << 16));
  }
};
__device__ __forceinline__ Bf16x8 load8(const bf16 *p) {
  Bf16x8 v;
#ifdef MEGATRAIN_CUDA_EMULATION
  std::memcpy(v.w, p, 16);
#else
  const uint4 u = *reinterpret_cast<const uint4 *>(p);
  v.w[0] = u.x, v.w[1] = u.y, v.w[2] = u.z, v.w[3] = u.w;
#endif
  return v;
}
__device__ __forceinline__ void store8(bf16 *p, const Bf16x8 &v) {
#ifdef MEGATRAIN_CUDA_EMULATION
  std::memcpy(p, v.w, 16);
#else
  *reinterpret_cast<uint4 *>(p) = make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);
#endif
}
/// Eight floats rounded to bf16 (to nearest even) into p, as one access.
__device__ __forceinline__ void store8(bf16 *p, const float (&f)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#ifdef MEGATRAIN_CUDA_EMULATION
    w[j] = uint32_t(f2bf(f[2 * j]).bits) | uint32_t(f2bf(f[2 * j + 1]).bits)
                                               << 16;
#else
    w[j] = uint32_t(__bfloat16_as_ushort(f2bf(f[2 * j]))) |
           uint32_t(__bfloat16_as_ushort(f2bf(f[2 * j + 1]))) << 16;
#endif
  }
#ifdef MEGATRAIN_CUDA_EMULATION
  std::memcpy(p, w, 16);
#else
  *reinterpret_cast<uint4 *>(p) = make_uint4(w[0], w[1], w[2], w[3]);
#endif
}

/// transpose_kernel where the last dim stays in place in both layouts (a
/// head's D values, when heads and positions swap): a thread moves 8
/// elements at once, `s` counting the last dim in 8s, so the index math is
/// once per 8 elements instead of once per element.
template <bool Backward>
__global__ void transpose_rows_kernel(bf16 *out, const bf16 *in, Space s,
                                      int64_t vectors) {
  for (int64_t i = global_index(); i < vectors; i += global_stride()) {
    int64_t off[cpu::kMaxArrays];
    offsets(s, i, off);
    if (Backward) {
      const Bf16x8 g = load8(in + off[0]), x = load8(out + off[1]);
      float sum[8];
#pragma unroll
      for (int e = 0; e < 8; ++e)
        sum[e] = x[e] + g[e];
      store8(out + off[1], sum);
    } else {
      store8(out + off[0], load8(in + off[1])); // the bits as they are
    }
  }
}

template <bool Backward>
__global__ void slice_kernel(bf16 *out, const bf16 *in, int64_t dim,
                             int64_t inner, int64_t start, int64_t n,
                             int64_t total) {
  const int64_t run = n * inner; // one outer index's slice
  for (int64_t i = global_index(); i < total; i += global_stride()) {
    const int64_t o = i / run, rem = i % run;
    const int64_t xi = (o * dim + start) * inner + rem;
    if (Backward)
      add_store(out, xi, bf2f(in[i]));
    else
      out[i] = in[xi];
  }
}

// ---- rope -----------------------------------------------------------------

/// Dims d and p rotate as a pair: (i, i + R/2), or (2i, 2i + 1) when
/// interleaved; `first` is d's place in it. `accumulate`: the backward adds
/// into dx.
template <bool Backward>
__global__ void rope_kernel(bf16 *out, const bf16 *in, const bf16 *cos,
                            const bf16 *sin, int64_t H, int64_t S, int64_t D,
                            int64_t R, int seq_axis, bool interleaved,
                            bool accumulate, int64_t total) {
  const int64_t half = R / 2;
  for (int64_t i = global_index(); i < total; i += global_stride()) {
    const int64_t d = i % D, row = i - d;
    const int64_t s = seq_axis == 2 ? (i / D) % S : (i / (D * H)) % S;
    const bf16 *c = cos + s * R, *sn = sin + s * R;
    const bf16 *g = in + row;
    float v;
    if (d >= R) {
      v = bf2f(g[d]);
    } else {
      const bool first = interleaved ? d % 2 == 0 : d < half;
      const int64_t p =
          interleaved ? (first ? d + 1 : d - 1) : (first ? d + half : d - half);
      // Forward: y_d = x_d c_d ∓ x_p s_d; backward: the transpose, with s_p.
      const float sign = first == !Backward ? -1.f : 1.f;
      v = bf2f(g[d]) * bf2f(c[d]) +
          sign * bf2f(g[p]) * bf2f(Backward ? sn[p] : sn[d]);
    }
    write_or_add(out, i, v, Backward && accumulate);
  }
}

/// rope_kernel 8 dims at a time, d0 a multiple of 8: where D, R and (not
/// interleaved) R/2 are multiples of 8, the 8 dims lie on one side of R/2
/// and of R, and so do their partners (d0 ± R/2, or within the 8 when
/// interleaved). The index math is once per 8 elements and the accesses
/// 16 bytes wide (every array 16-byte aligned).
template <bool Backward>
__global__ void
rope_rows_kernel(bf16 *out, const bf16 *in, const bf16 *cos, const bf16 *sin,
                 int64_t H, int64_t S, int64_t D, int64_t R, int seq_axis,
                 bool interleaved, bool accumulate, int64_t vectors) {
  const int64_t half = R / 2;
  for (int64_t v = global_index(); v < vectors; v += global_stride()) {
    const int64_t i = v * 8, d0 = i % D, row = i - d0;
    const int64_t s = seq_axis == 2 ? (i / D) % S : (i / (D * H)) % S;
    const bf16 *g = in + row;
    const Bf16x8 x = load8(g + d0);
    float y[8];
    if (d0 >= R) {
#pragma unroll
      for (int e = 0; e < 8; ++e)
        y[e] = x[e];
    } else {
      const bool first_half = d0 < half; // not interleaved: the 8's side
      const int64_t p0 = interleaved ? d0 : first_half ? d0 + half : d0 - half;
      const Bf16x8 xp = interleaved ? x : load8(g + p0);
      const Bf16x8 c = load8(cos + s * R + d0);
      const Bf16x8 sd = load8(sin + s * R + d0);
      const Bf16x8 sp = Backward && !interleaved ? load8(sin + s * R + p0) : sd;
      // Every index a constant once unrolled: registers, not a stack frame.
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const bool first = interleaved ? e % 2 == 0 : first_half;
        const float sign = first == !Backward ? -1.f : 1.f;
        const float partner = interleaved ? x[e ^ 1] : xp[e];
        const float sn = !Backward ? sd[e] : interleaved ? sd[e ^ 1] : sp[e];
        y[e] = x[e] * c[e] + sign * partner * sn;
      }
    }
    if (Backward && accumulate) {
      const Bf16x8 o = load8(out + i);
#pragma unroll
      for (int e = 0; e < 8; ++e)
        y[e] += o[e];
    }
    store8(out + i, y);
  }
}

// ---- embeddings -----------------------------------------------------------

__global__ void embed_forward_kernel(bf16 *y, const int32_t *ids,
                                     const bf16 *table, int64_t N, int64_t V,
                                     int64_t D) {
  for (int64_t i = global_index(); i < N * D; i += global_stride()) {
    const int64_t n = i / D, j = i % D;
    const int32_t id = ids[n];
    // Out-of-range ids (stress mode's poison) give NaN, never a wild read.
    y[i] = id >= 0 && id < V ? table[int64_t(id) * D + j] : f2bf(quiet_nan());
  }
}

/// Rows of y whose id lies in the table piece [v0, v0 + Vp) get its row
/// times `scale`; with `first`, ids outside [0, V) give NaN; other rows are
/// left alone.
__global__ void embed_forward_piece_kernel(bf16 *y, const int32_t *ids,
                                           const bf16 *table, int64_t N,
                                           int64_t Vp, int64_t D, int64_t v0,
                                           int64_t V, bool first, float scale) {
  for (int64_t i = global_index(); i < N * D; i += global_stride()) {
    const int64_t n = i / D, j = i % D;
    const int64_t id = ids[n], r = id - v0;
    if (r >= 0 && r < Vp)
      y[i] = scale == 1.f ? table[r * D + j]
                          : f2bf(scale * bf2f(table[r * D + j]));
    else if (first && (id < 0 || id >= V))
      y[i] = f2bf(quiet_nan());
  }
}

constexpr int kEmbedThreads = 256;

/// The table holds ids [v0, v0 + Vp) (the whole table: v0 = 0, Vp = V). A
/// block owns its rows [r0, r1) and walks all N tokens in order, adding the
/// dy rows (times `scale`) of the tokens whose id it owns: each table row is
/// summed in token order by one block, with no atomics. With `poison` (the
/// whole table), ids outside it add NaN to row 0, as the CPU kernels do; a
/// piece skips them, since they belong to other pieces.
__global__ void __launch_bounds__(kEmbedThreads)
    embed_backward_kernel(float *dtable, const bf16 *dy, const int32_t *ids,
                          int64_t N, int64_t Vp, int64_t D, int64_t v0,
                          int64_t rows_per_block, bool poison, float scale) {
  __shared__ int32_t match[kEmbedThreads];
  __shared__ int count;
  const int64_t r0 = int64_t(blockIdx.x) * rows_per_block;
  const int64_t r1 = min64(Vp, r0 + rows_per_block);
  for (int64_t n0 = 0; n0 < N; n0 += kEmbedThreads) {
    const int64_t n = n0 + threadIdx.x;
    bool mine = false;
    if (n < N) {
      const int64_t r = int64_t(ids[n]) - v0;
      const bool outside = r < 0 || r >= Vp;
      mine = outside ? (poison && r0 == 0) : (r >= r0 && r < r1);
    }
    match[threadIdx.x] = mine ? 1 : 0;
    __syncthreads();
    if (threadIdx.x == 0) { // compact the matches, keeping token order
      int c = 0;
      for (int t = 0; t < kEmbedThreads; ++t)
        if (match[t])
          match[c++] = t; // c <= t: compacting in place is safe
      count = c;
    }
    __syncthreads();
    for (int m = 0; m < count; ++m) {
      const int64_t tok = n0 + match[m];
      const int64_t r = int64_t(ids[tok]) - v0;
      const bool outside = r < 0 || r >= Vp;
      float *row = dtable + (outside ? 0 : r) * D;
      for (int64_t j = threadIdx.x; j < D; j += kEmbedThreads)
        row[j] += outside ? quiet_nan() : scale * bf2f(dy[tok * D + j]);
    }
    __syncthreads();
  }
}

/// embed_backward_kernel over a table of Vp rows holding ids [v0, v0 + Vp).
void launch_embed_backward(float *dtable, const bf16 *dy, const int32_t *ids,
                           int64_t N, int64_t Vp, int64_t D, int64_t v0,
                           bool poison, float scale, int sm_count,
                           cudaStream_t stream) {
  if (N <= 0 || Vp <= 0 || D <= 0)
    return;
  // About 8 blocks per SM, each scanning all N ids (cheap: they sit in L2).
  const int64_t blocks = std::min<int64_t>(Vp, int64_t(sm_count) * 8);
  const int64_t rows = (Vp + blocks - 1) / blocks;
  MT_LAUNCH(embed_backward_kernel, dim3(unsigned((Vp + rows - 1) / rows)),
            dim3(kEmbedThreads), stream, dtable, dy, ids, N, Vp, D, v0, rows,
            poison, scale);
}

__global__ void position_embed_kernel(bf16 *y, const bf16 *table, int64_t n,
                                      int64_t base) {
  for (int64_t i = global_index(); i < n; i += global_stride())
    y[i] = table[base + i];
}

__global__ void position_embed_backward_kernel(float *dtable, const bf16 *dy,
                                               int64_t n, int64_t base) {
  for (int64_t i = global_index(); i < n; i += global_stride())
    dtable[base + i] += bf2f(dy[i]);
}

__global__ void delay_kernel(uint32_t ns) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
#else
  (void)ns;
#endif
}

} // namespace

// ---- the DeviceKernels entry points ---------------------------------------

namespace {
#define S_ cudaStream_t(stream_)
const dim3 kBlock(kThreads);
} // namespace

void CudaKernels::zero(void *x, int64_t n) {
  if (n > 0 && cudaMemsetAsync(x, 0, size_t(n) * 2, S_) != cudaSuccess)
    fail("cuda: cudaMemsetAsync failed in zero (", n, " elements)");
}
void CudaKernels::zero_f32(float *x, int64_t n) {
  if (n > 0 && cudaMemsetAsync(x, 0, size_t(n) * 4, S_) != cudaSuccess)
    fail("cuda: cudaMemsetAsync failed in zero_f32 (", n, " elements)");
}
void CudaKernels::copy(void *y, const void *x, int64_t n) {
  if (n > 0 && y != x &&
      cudaMemcpyAsync(y, x, size_t(n) * 2, cudaMemcpyDeviceToDevice, S_) !=
          cudaSuccess)
    fail("cuda: cudaMemcpyAsync failed in copy (", n, " elements)");
}
void CudaKernels::accumulate_f32(float *g, const void *x, int64_t n) {
  if (n > 0)
    MT_LAUNCH(accumulate_kernel, blocks_for(n), kBlock, S_, g, B(x), n);
}

void CudaKernels::relu_forward(void *y, const void *x, int64_t n) {
  if (n > 0)
    MT_LAUNCH(pointwise_kernel<Pointwise::Relu>, blocks_for(n), kBlock, S_,
              B(y), static_cast<const bf16 *>(nullptr), B(x), n);
}
void CudaKernels::relu_backward(void *dx, const void *dy, const void *x,
                                int64_t n) {
  if (n > 0)
    MT_LAUNCH(pointwise_kernel<Pointwise::ReluGrad>, blocks_for(n), kBlock, S_,
              B(dx), B(dy), B(x), n);
}
void CudaKernels::exp_forward(void *y, const void *x, int64_t n) {
  if (n > 0)
    MT_LAUNCH(pointwise_kernel<Pointwise::Exp>, blocks_for(n), kBlock, S_, B(y),
              static_cast<const bf16 *>(nullptr), B(x), n);
}
void CudaKernels::sigmoid_forward(void *y, const void *x, int64_t n) {
  if (n > 0)
    MT_LAUNCH(pointwise_kernel<Pointwise::Sigmoid>, blocks_for(n), kBlock, S_,
              B(y), static_cast<const bf16 *>(nullptr), B(x), n);
}
void CudaKernels::sigmoid_backward(void *dx, const void *dy, const void *x,
                                   int64_t n) {
  if (n > 0)
    MT_LAUNCH(pointwise_kernel<Pointwise::SigmoidGrad>, blocks_for(n), kBlock,
              S_, B(dx), B(dy), B(x), n);
}
void CudaKernels::softplus_forward(void *y, const void *x, int64_t n) {
  if (n > 0)
    MT_LAUNCH(pointwise_kernel<Pointwise::Softplus>, blocks_for(n), kBlock, S_,
              B(y), static_cast<const bf16 *>(nullptr), B(x), n);
}
void CudaKernels::softplus_backward(void *dx, const void *dy, const void *x,
                                    int64_t n) {
  if (n > 0)
    MT_LAUNCH(pointwise_kernel<Pointwise::SoftplusGrad>, blocks_for(n), kBlock,
              S_, B(dx), B(dy), B(x), n);
}
void CudaKernels::silu_forward(void *y, const void *x, int64_t n) {
  if (n > 0)
    MT_LAUNCH(pointwise_kernel<Pointwise::Silu>, blocks_for(n), kBlock, S_,
              B(y), static_cast<const bf16 *>(nullptr), B(x), n);
}
void CudaKernels::silu_backward(void *dx, const void *dy, const void *x,
                                int64_t n) {
  if (n > 0)
    MT_LAUNCH(pointwise_kernel<Pointwise::SiluGrad>, blocks_for(n), kBlock, S_,
              B(dx), B(dy), B(x), n);
}
void CudaKernels::gelu_forward(void *y, const void *x, int64_t n,
                               bool approximate_tanh) {
  if (n <= 0)
    return;
  if (approximate_tanh)
    MT_LAUNCH(pointwise_kernel<Pointwise::GeluTanh>, blocks_for(n), kBlock, S_,
              B(y), static_cast<const bf16 *>(nullptr), B(x), n);
  else
    MT_LAUNCH(pointwise_kernel<Pointwise::Gelu>, blocks_for(n), kBlock, S_,
              B(y), static_cast<const bf16 *>(nullptr), B(x), n);
}
void CudaKernels::gelu_backward(void *dx, const void *dy, const void *x,
                                int64_t n, bool approximate_tanh) {
  if (n <= 0)
    return;
  if (approximate_tanh)
    MT_LAUNCH(pointwise_kernel<Pointwise::GeluTanhGrad>, blocks_for(n), kBlock,
              S_, B(dx), B(dy), B(x), n);
  else
    MT_LAUNCH(pointwise_kernel<Pointwise::GeluGrad>, blocks_for(n), kBlock, S_,
              B(dx), B(dy), B(x), n);
}
void CudaKernels::softcap_forward(void *y, const void *x, int64_t n,
                                  float cap) {
  if (n > 0)
    MT_LAUNCH(softcap_kernel<false>, blocks_for(n), kBlock, S_, B(y),
              static_cast<const bf16 *>(nullptr), B(x), n, cap);
}
void CudaKernels::softcap_backward(void *dx, const void *dy, const void *x,
                                   int64_t n, float cap) {
  if (n > 0)
    MT_LAUNCH(softcap_kernel<true>, blocks_for(n), kBlock, S_, B(dx), B(dy),
              B(x), n, cap);
}
void CudaKernels::xielu_forward(void *y, const void *x, const void *alpha_p,
                                const void *alpha_n, int64_t n, float beta,
                                float eps, bool softplus) {
  if (n > 0)
    MT_LAUNCH(xielu_forward_kernel, blocks_for(n), kBlock, S_, B(y), B(x),
              B(alpha_p), B(alpha_n), n, beta, eps, softplus);
}

// The param gradients in fixed order, no atomics: column sums of the
// [n / 1024, 1024] view, then the sum of those 1024 columns.
void CudaKernels::xielu_backward(void *dx, float *dalpha_p, float *dalpha_n,
                                 const void *dy, const void *x,
                                 const void *alpha_p, const void *alpha_n,
                                 int64_t n, float beta, float eps,
                                 bool softplus) {
  if (n <= 0)
    return;
  if (dx)
    MT_LAUNCH(xielu_backward_kernel, blocks_for(n), kBlock, S_, B(dx), B(dy),
              B(x), B(alpha_p), B(alpha_n), n, beta, eps, softplus);
  const int64_t M = (n + kXieluCols - 1) / kXieluCols;
  const int64_t partials = std::max(column_chunks(M) * kXieluCols,
                                    column_chunks(kXieluCols));
  float *columns =
      static_cast<float *>(scratch((kXieluCols + partials) * 4));
  float *part = columns + kXieluCols;
  auto total = [&](float *out, auto summand, const void *alpha) {
    zero_f32(columns, kXieluCols);
    column_sums(columns, part, M, kXieluCols, summand, S_);
    column_sums(out, part, kXieluCols, 1,
                ThroughSoftplus{columns, softplus ? B(alpha) : nullptr}, S_);
  };
  if (dalpha_p)
    total(dalpha_p, XieluParamGrad<true>{B(dy), B(x), n, eps}, alpha_p);
  if (dalpha_n)
    total(dalpha_n, XieluParamGrad<false>{B(dy), B(x), n, eps}, alpha_n);
}
void CudaKernels::swiglu_forward(void *y, const void *gate, const void *up,
                                 int64_t n) {
  if (n > 0)
    MT_LAUNCH(swiglu_forward_kernel, blocks_for(n), kBlock, S_, B(y), B(gate),
              B(up), n);
}
void CudaKernels::swiglu_backward(void *dgate, void *dup, const void *dy,
                                  const void *gate, const void *up, int64_t n,
                                  bool accumulate) {
  if (n > 0 && (dgate || dup))
    MT_LAUNCH(swiglu_backward_kernel, blocks_for(n), kBlock, S_, B(dgate),
              B(dup), B(dy), B(gate), B(up), n, accumulate);
}
void CudaKernels::scale_forward(void *y, const void *x, int64_t n,
                                float factor) {
  if (n > 0)
    MT_LAUNCH(scale_kernel, blocks_for(n), kBlock, S_, B(y), B(x), n, factor);
}

namespace {
template <bool Mul>
void binary(const Broadcast &bc, void *y, const void *a, const void *b,
            cudaStream_t stream) {
  cpu::StridedSpace s = binary_space(bc);
  const int64_t n = cpu::numel(s);
  if (n <= 0)
    return;
  cpu::coalesce(s);
  if (s.rank == 1 && s.stride[kOut][0] == 1 && s.stride[kLhs][0] == 1 &&
      s.stride[kRhs][0] == 1) {
    MT_LAUNCH(binary_flat_kernel<Mul>, blocks_for(n), kBlock, stream, B(y),
              B(a), B(b), n);
    return;
  }
  MT_LAUNCH(binary_kernel<Mul>, blocks_for(n), kBlock, stream, B(y), B(a), B(b),
            to_device(s), n);
}
} // namespace

void CudaKernels::add_forward(void *y, const void *a, const void *b,
                              const Broadcast &bc) {
  binary<false>(bc, y, a, b, S_);
}
void CudaKernels::mul_forward(void *y, const void *a, const void *b,
                              const Broadcast &bc) {
  binary<true>(bc, y, a, b, S_);
}

void CudaKernels::reduce_to_operand(void *d_operand, const void *dy,
                                    const void *other, const Broadcast &bc,
                                    bool lhs) {
  const int slot = lhs ? kLhs : kRhs, other_slot = lhs ? kRhs : kLhs;
  cpu::StridedSpace s = binary_space(bc);
  if (cpu::numel(s) <= 0)
    return;
  cpu::coalesce(s);
  // Arrays of `kept`: 0 = operand, 1 = dy, 2 = other; of `reduced`: 1, 2.
  cpu::StridedSpace kept, reduced;
  for (int d = 0; d < s.rank; ++d) {
    cpu::StridedSpace &t = s.stride[slot][d] != 0 ? kept : reduced;
    t.shape[t.rank] = s.shape[d];
    t.stride[0][t.rank] = s.stride[slot][d];
    t.stride[1][t.rank] = s.stride[kOut][d];
    t.stride[2][t.rank] = other ? s.stride[other_slot][d] : 0;
    ++t.rank;
  }
  for (cpu::StridedSpace *t : {&kept, &reduced})
    if (t->rank == 0) {
      t->rank = 1;
      t->shape[0] = 1;
    }
  const int64_t E = cpu::numel(kept), R = cpu::numel(reduced);
  const Space k = to_device(kept), r = to_device(reduced);
  if (R == 1) {
    MT_LAUNCH(reduce_direct_kernel, blocks_for(E), kBlock, S_, B(d_operand),
              B(dy), B(other), k, E);
    return;
  }
  const int64_t e_blocks = (E + kThreads - 1) / kThreads;
  int64_t chunks = std::max<int64_t>(1, (2048 + e_blocks - 1) / e_blocks);
  chunks = std::min<int64_t>({chunks, R, 1024});
  const int64_t per_chunk = (R + chunks - 1) / chunks;
  chunks = (R + per_chunk - 1) / per_chunk;
  float *partials = static_cast<float *>(scratch(chunks * E * 4));
  MT_LAUNCH(reduce_partials_kernel, dim3(unsigned(e_blocks), unsigned(chunks)),
            kBlock, S_, partials, B(dy), B(other), k, r, E, R, per_chunk);
  MT_LAUNCH(reduce_finish_kernel, blocks_for(E), kBlock, S_, B(d_operand),
            static_cast<const float *>(partials), k, E, chunks);
}

void CudaKernels::add_backward(void *da, void *db, const void *dy,
                               const Broadcast &bc) {
  if (da)
    reduce_to_operand(da, dy, nullptr, bc, true);
  if (db)
    reduce_to_operand(db, dy, nullptr, bc, false);
}
void CudaKernels::mul_backward(void *da, void *db, const void *dy,
                               const void *a, const void *b,
                               const Broadcast &bc) {
  if (da)
    reduce_to_operand(da, dy, b, bc, true);
  if (db)
    reduce_to_operand(db, dy, a, bc, false);
}

namespace {
// Arrays: 0 = y (contiguous in its own order), 1 = x.
cpu::StridedSpace transpose_space(const int64_t *x_shape, const int64_t *perm,
                                  int rank) {
  int64_t x_stride[cpu::kMaxRank];
  for (int64_t d = rank - 1, c = 1; d >= 0; --d) {
    x_stride[d] = c;
    c *= x_shape[d];
  }
  cpu::StridedSpace s;
  s.rank = rank;
  for (int64_t d = rank - 1, c = 1; d >= 0; --d) {
    s.shape[d] = x_shape[perm[d]];
    s.stride[0][d] = c;
    s.stride[1][d] = x_stride[perm[d]];
    c *= s.shape[d];
  }
  cpu::coalesce(s);
  return s;
}

/// The transpose as rows of 8 (transpose_rows_kernel's space) where the
/// last dim is contiguous in both layouts, a multiple of 8 long, and both
/// arrays 16-byte aligned; else false.
bool rows_of_8(cpu::StridedSpace &s, const void *a, const void *b) {
  const int l = s.rank - 1;
  if (s.stride[0][l] != 1 || s.stride[1][l] != 1 || s.shape[l] % 8 != 0 ||
      reinterpret_cast<uintptr_t>(a) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(b) % 16 != 0)
    return false;
  s.shape[l] /= 8;
  s.stride[0][l] = s.stride[1][l] = 8;
  return true;
}

template <bool Backward>
void launch_transpose(bf16 *out, const bf16 *in, cpu::StridedSpace s,
                      cudaStream_t stream) {
  const int64_t n = cpu::numel(s);
  if (n == 0)
    return;
  if (rows_of_8(s, out, in))
    MT_LAUNCH(transpose_rows_kernel<Backward>, blocks_for(n / 8), kBlock,
              stream, out, in, to_device(s), n / 8);
  else
    MT_LAUNCH(transpose_kernel<Backward>, blocks_for(n), kBlock, stream, out,
              in, to_device(s), n);
}
} // namespace

void CudaKernels::transpose_forward(void *y, const void *x,
                                    const int64_t *x_shape, const int64_t *perm,
                                    int rank) {
  launch_transpose<false>(B(y), B(x), transpose_space(x_shape, perm, rank), S_);
}
void CudaKernels::transpose_backward(void *dx, const void *dy,
                                     const int64_t *x_shape,
                                     const int64_t *perm, int rank) {
  launch_transpose<true>(B(dx), B(dy), transpose_space(x_shape, perm, rank),
                         S_);
}
void CudaKernels::slice_forward(void *y, const void *x, int64_t outer,
                                int64_t dim, int64_t inner, int64_t start,
                                int64_t n) {
  const int64_t total = outer * n * inner;
  if (total > 0)
    MT_LAUNCH(slice_kernel<false>, blocks_for(total), kBlock, S_, B(y), B(x),
              dim, inner, start, n, total);
}
void CudaKernels::slice_backward(void *dx, const void *dy, int64_t outer,
                                 int64_t dim, int64_t inner, int64_t start,
                                 int64_t n) {
  const int64_t total = outer * n * inner;
  if (total > 0)
    MT_LAUNCH(slice_kernel<true>, blocks_for(total), kBlock, S_, B(dx), B(dy),
              dim, inner, start, n, total);
}

namespace {
template <bool Backward>
void launch_rope(bf16 *out, const bf16 *in, const bf16 *cos, const bf16 *sin,
                 int64_t B_, int64_t H, int64_t S, int64_t D, int64_t R,
                 int seq_axis, bool interleaved, bool accumulate,
                 cudaStream_t stream) {
  const int64_t total = B_ * H * S * D;
  if (total == 0)
    return;
  bool rows = D % 8 == 0 && R % 8 == 0 && (interleaved || R / 2 % 8 == 0);
  for (const bf16 *p : {const_cast<const bf16 *>(out), in, cos, sin})
    rows = rows && reinterpret_cast<uintptr_t>(p) % 16 == 0;
  if (rows)
    MT_LAUNCH(rope_rows_kernel<Backward>, blocks_for(total / 8), kBlock, stream,
              out, in, cos, sin, H, S, D, R, seq_axis, interleaved, accumulate,
              total / 8);
  else
    MT_LAUNCH(rope_kernel<Backward>, blocks_for(total), kBlock, stream, out, in,
              cos, sin, H, S, D, R, seq_axis, interleaved, accumulate, total);
}
} // namespace

void CudaKernels::rope_forward(void *y, const void *x, const void *cos,
                               const void *sin, int64_t B_, int64_t H,
                               int64_t S, int64_t D, int64_t R, int seq_axis,
                               bool interleaved) {
  launch_rope<false>(B(y), B(x), B(cos), B(sin), B_, H, S, D, R, seq_axis,
                     interleaved, false, S_);
}
void CudaKernels::rope_backward(void *dx, const void *dy, const void *cos,
                                const void *sin, int64_t B_, int64_t H,
                                int64_t S, int64_t D, int64_t R, int seq_axis,
                                bool interleaved, bool accumulate) {
  launch_rope<true>(B(dx), B(dy), B(cos), B(sin), B_, H, S, D, R, seq_axis,
                    interleaved, accumulate, S_);
}

void CudaKernels::embed_forward(void *y, const int32_t *ids, const void *table,
                                int64_t N, int64_t V, int64_t D) {
  if (N * D > 0)
    MT_LAUNCH(embed_forward_kernel, blocks_for(N * D), kBlock, S_, B(y), ids,
              B(table), N, V, D);
}
void CudaKernels::embed_backward(float *dtable, const void *dy,
                                 const int32_t *ids, int64_t N, int64_t V,
                                 int64_t D) {
  launch_embed_backward(dtable, B(dy), ids, N, V, D, 0, true, 1.f, sm_count_,
                        S_);
}
void CudaKernels::embed_forward_piece(void *y, const int32_t *ids,
                                      const void *table, int64_t N, int64_t Vp,
                                      int64_t D, int64_t v0, int64_t V,
                                      bool first, float scale) {
  if (N * D > 0)
    MT_LAUNCH(embed_forward_piece_kernel, blocks_for(N * D), kBlock, S_, B(y),
              ids, B(table), N, Vp, D, v0, V, first, scale);
}
void CudaKernels::embed_backward_piece(float *dtable, const void *dy,
                                       const int32_t *ids, int64_t N,
                                       int64_t Vp, int64_t D, int64_t v0,
                                       float scale) {
  launch_embed_backward(dtable, B(dy), ids, N, Vp, D, v0, false, scale,
                        sm_count_, S_);
}
void CudaKernels::position_embed_forward(void *y, const void *table, int64_t S,
                                         int64_t D, int64_t offset) {
  if (S * D > 0)
    MT_LAUNCH(position_embed_kernel, blocks_for(S * D), kBlock, S_, B(y),
              B(table), S * D, offset * D);
}
void CudaKernels::position_embed_backward(float *dtable, const void *dy,
                                          int64_t S, int64_t D,
                                          int64_t offset) {
  if (S * D > 0)
    MT_LAUNCH(position_embed_backward_kernel, blocks_for(S * D), kBlock, S_,
              dtable, B(dy), S * D, offset * D);
}

void launch_delay(void *stream, uint32_t ns) {
#ifdef MEGATRAIN_CUDA_EMULATION
  mock_enqueue(cudaStream_t(stream), [ns] {
    std::this_thread::sleep_for(std::chrono::nanoseconds(ns));
  });
#else
  MT_LAUNCH(delay_kernel, dim3(1), dim3(1), cudaStream_t(stream), ns);
#endif
}

#undef S_

} // namespace mtrt::MT_KNS
