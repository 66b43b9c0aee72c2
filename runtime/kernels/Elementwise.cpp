//===- Elementwise.cpp - broadcasting add and mul -------------------------===//

#include "runtime/kernels/Kernels.h"
#include "runtime/kernels/Strided.h"

#include <vector>

namespace mtrt::cpu {
namespace {

// Array slots of a binary's space.
constexpr int kOut = 0, kLhs = 1, kRhs = 2;

StridedSpace binary_space(const Broadcast &bc) {
  StridedSpace s;
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

// y[t] = op(a[t·sa], b[t·sb]). Along the innermost dim a broadcast operand
// steps by 0 or 1, and those cases get loops that vectorize.
template <class Op>
void binary_run(float *y, const float *a, int64_t sa, const float *b,
                int64_t sb, int64_t n, Op op) {
  if (sa == 1 && sb == 1) {
    for (int64_t t = 0; t < n; ++t)
      y[t] = op(a[t], b[t]);
  } else if (sa == 1 && sb == 0) {
    const float bv = *b;
    for (int64_t t = 0; t < n; ++t)
      y[t] = op(a[t], bv);
  } else if (sa == 0 && sb == 1) {
    const float av = *a;
    for (int64_t t = 0; t < n; ++t)
      y[t] = op(av, b[t]);
  } else {
    for (int64_t t = 0; t < n; ++t)
      y[t] = op(a[t * sa], b[t * sb]);
  }
}

template <class Op>
void binary_forward(float *y, const float *a, const float *b,
                    const Broadcast &bc, Op op) {
  StridedSpace s = binary_space(bc);
  coalesce(s);
  const int64_t n = numel(s);
  const int64_t chunks = walk_chunks(n);
  const int last = s.rank - 1;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c)
    walk(s, c * kWalkChunk, std::min(n, (c + 1) * kWalkChunk),
         [&](const int64_t *off, int64_t len) {
           binary_run(y + off[kOut], a + off[kLhs], s.stride[kLhs][last],
                      b + off[kRhs], s.stride[kRhs][last], len, op);
         });
}

// d_operand += dy · other, summed over the dims the operand broadcasts over;
// other == null means 1 (add). `slot` is the operand's array in the space.
void reduce_to_operand(float *d_operand, const float *dy, const float *other,
                       const Broadcast &bc, int slot) {
  const int other_slot = slot == kLhs ? kRhs : kLhs;
  StridedSpace s = binary_space(bc);
  static const float kOne = 1.f;
  if (!other) {
    other = &kOne;
    for (int d = 0; d < s.rank; ++d)
      s.stride[other_slot][d] = 0;
  }
  coalesce(s);
  const int64_t n = numel(s);
  const int last = s.rank - 1;
  const int64_t so = s.stride[other_slot][last];
  if (n == 0)
    return;

  int64_t operand_numel = 1;
  int split = -1; // the operand's widest kept dim: tasks own slices of it
  for (int d = 0; d < s.rank; ++d) {
    if (s.stride[slot][d] == 0)
      continue;
    operand_numel *= s.shape[d];
    if (split < 0 || s.shape[d] > s.shape[split])
      split = d;
  }

  if (operand_numel == n) {
    // Not broadcast: the operand is laid out like the output.
    const int64_t chunks = walk_chunks(n);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c)
      walk(s, c * kWalkChunk, std::min(n, (c + 1) * kWalkChunk),
           [&](const int64_t *off, int64_t len) {
             float *dx = d_operand + off[kOut];
             const float *g = dy + off[kOut];
             const float *o = other + off[other_slot];
             if (so == 0) {
               const float ov = *o;
               for (int64_t t = 0; t < len; ++t)
                 dx[t] += g[t] * ov;
             } else if (so == 1) {
               for (int64_t t = 0; t < len; ++t)
                 dx[t] += g[t] * o[t];
             } else {
               for (int64_t t = 0; t < len; ++t)
                 dx[t] += g[t] * o[t * so];
             }
           });
    return;
  }

  // Sums in double, each operand element over the output in row-major order:
  // a task owns a slice of `split`, so no two tasks touch one element and the
  // order does not depend on how the slices are dealt out.
  std::vector<double> sum(operand_numel, 0.0);
  const int64_t width = split < 0 ? 1 : s.shape[split];
  const int64_t tasks = std::min<int64_t>(width, 64);
#pragma omp parallel for schedule(dynamic)
  for (int64_t task = 0; task < tasks; ++task) {
    StridedSpace slice = s;
    int64_t base[kMaxArrays] = {};
    if (split >= 0) {
      const int64_t lo = width * task / tasks, hi = width * (task + 1) / tasks;
      slice.shape[split] = hi - lo;
      for (int a = 0; a < kMaxArrays; ++a)
        base[a] = lo * s.stride[a][split];
    }
    const int64_t sx = s.stride[slot][last];
    walk(slice, 0, numel(slice), [&](const int64_t *off, int64_t len) {
      const float *g = dy + base[kOut] + off[kOut];
      const float *o = other + base[other_slot] + off[other_slot];
      double *acc = sum.data() + base[slot] + off[slot];
      if (sx == 0) {
        double run = 0.0;
        for (int64_t t = 0; t < len; ++t)
          run += double(g[t]) * o[t * so];
        *acc += run;
      } else {
        for (int64_t t = 0; t < len; ++t)
          acc[t * sx] += double(g[t]) * o[t * so];
      }
    });
  }
#pragma omp parallel for schedule(static)
  for (int64_t e = 0; e < operand_numel; ++e)
    d_operand[e] += float(sum[e]);
}

} // namespace

bool make_broadcast(Broadcast &bc, const int64_t *lhs_shape, int lhs_rank,
                    const int64_t *rhs_shape, int rhs_rank) {
  const int rank = std::max(lhs_rank, rhs_rank);
  if (lhs_rank < 0 || rhs_rank < 0 || rank > kMaxRank)
    return false;
  bc.rank = rank;
  int64_t lhs_contiguous = 1, rhs_contiguous = 1;
  for (int d = rank - 1; d >= 0; --d) {
    // Right-aligned: dim d of the output is dim d - (rank - r) of an operand.
    const int li = d - (rank - lhs_rank), ri = d - (rank - rhs_rank);
    const int64_t l = li >= 0 ? lhs_shape[li] : 1;
    const int64_t r = ri >= 0 ? rhs_shape[ri] : 1;
    if (l != r && l != 1 && r != 1)
      return false;
    bc.shape[d] = l == 1 ? r : l;
    bc.lhs_stride[d] = l == 1 ? 0 : lhs_contiguous;
    bc.rhs_stride[d] = r == 1 ? 0 : rhs_contiguous;
    lhs_contiguous *= l;
    rhs_contiguous *= r;
  }
  return true;
}

void add_forward(float *y, const float *a, const float *b,
                 const Broadcast &bc) {
  binary_forward(y, a, b, bc, [](float x, float z) { return x + z; });
}

void add_backward(float *da, float *db, const float *dy, const Broadcast &bc) {
  if (da)
    reduce_to_operand(da, dy, nullptr, bc, kLhs);
  if (db)
    reduce_to_operand(db, dy, nullptr, bc, kRhs);
}

void mul_forward(float *y, const float *a, const float *b,
                 const Broadcast &bc) {
  binary_forward(y, a, b, bc, [](float x, float z) { return x * z; });
}

void mul_backward(float *da, float *db, const float *dy, const float *a,
                  const float *b, const Broadcast &bc) {
  if (da)
    reduce_to_operand(da, dy, b, bc, kLhs);
  if (db)
    reduce_to_operand(db, dy, a, bc, kRhs);
}

} // namespace mtrt::cpu
