//===- Strided.h - walks over row-major index spaces --------------*- C++
//-*-===//
//
// The loop nest shared by the broadcasting binaries and transpose: an index
// space visited in row-major order, with up to three arrays stepping through
// it by their own element strides.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_KERNELS_STRIDED_H
#define MEGATRAIN_RUNTIME_KERNELS_STRIDED_H

#include "runtime/kernels/Kernels.h"

#include <algorithm>
#include <cstdint>

namespace mtrt::cpu {

constexpr int kMaxArrays = 3;

struct StridedSpace {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t stride[kMaxArrays][kMaxRank] = {}; // elements, 0 = not advancing
};

inline int64_t numel(const StridedSpace &s) {
  int64_t n = 1;
  for (int d = 0; d < s.rank; ++d)
    n *= s.shape[d];
  return n;
}

/// Drops unit dims and merges neighbours that every array steps through
/// contiguously, so the innermost runs are as long as they can be. Leaves at
/// least one dim.
inline void coalesce(StridedSpace &s) {
  StridedSpace out;
  for (int d = 0; d < s.rank; ++d) {
    if (s.shape[d] == 1)
      continue;
    const int last = out.rank - 1;
    bool mergeable = last >= 0;
    for (int a = 0; a < kMaxArrays && mergeable; ++a)
      mergeable = out.stride[a][last] == s.stride[a][d] * s.shape[d];
    if (mergeable) {
      out.shape[last] *= s.shape[d];
      for (int a = 0; a < kMaxArrays; ++a)
        out.stride[a][last] = s.stride[a][d];
      continue;
    }
    out.shape[out.rank] = s.shape[d];
    for (int a = 0; a < kMaxArrays; ++a)
      out.stride[a][out.rank] = s.stride[a][d];
    ++out.rank;
  }
  if (out.rank == 0) {
    out.rank = 1;
    out.shape[0] = 1;
  }
  s = out;
}

/// Visits the row-major linear indices [begin, end) of the space as runs along
/// the innermost dim: run(offset[kMaxArrays], n), where each array's run
/// starts at its offset and steps by its innermost stride.
template <class Run>
void walk(const StridedSpace &s, int64_t begin, int64_t end, Run run) {
  const int last = s.rank - 1;
  int64_t idx[kMaxRank];
  for (int64_t d = last, rest = begin; d >= 0; --d) {
    idx[d] = rest % s.shape[d];
    rest /= s.shape[d];
  }
  for (int64_t pos = begin; pos < end;) {
    int64_t offset[kMaxArrays] = {};
    for (int d = 0; d <= last; ++d)
      for (int a = 0; a < kMaxArrays; ++a)
        offset[a] += idx[d] * s.stride[a][d];
    const int64_t n = std::min(s.shape[last] - idx[last], end - pos);
    run(offset, n);
    pos += n;
    idx[last] += n;
    for (int d = last; d > 0 && idx[d] == s.shape[d]; --d) {
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

/// Elements per parallel task when a kernel splits a space into equal chunks.
constexpr int64_t kWalkChunk = 1 << 14;

inline int64_t walk_chunks(int64_t n) {
  return (n + kWalkChunk - 1) / kWalkChunk;
}

} // namespace mtrt::cpu

#endif // MEGATRAIN_RUNTIME_KERNELS_STRIDED_H
