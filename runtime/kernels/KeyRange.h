//===- KeyRange.h - which keys a causal attention's query sees ------------===//
//
// Query i sees key j when j <= i and j >= first_key(i): a sliding window W
// starts the row at i − W + 1, chunked attention (Llama 4) at the start of
// i's chunk of C tokens, both at the later of the two. first_key grows with
// i and last_query(j), the last query that sees key j, with j, so a tile of
// rows or keys is bounded by its first and last member. Shared by the CPU
// and CUDA kernels.
//
//===----------------------------------------------------------------------===//

#ifndef MEGATRAIN_RUNTIME_KERNELS_KEYRANGE_H
#define MEGATRAIN_RUNTIME_KERNELS_KEYRANGE_H

#include <cstdint>

#if defined(__CUDACC__)
#define MT_KEY_RANGE_FN __host__ __device__ __forceinline__
#else
#define MT_KEY_RANGE_FN inline
#endif

namespace mtrt {

struct KeyRange {
  int64_t window = 0; // > 0: keys j > i − window
  int64_t chunk = 0;  // > 0: keys of i's chunk, j >= i − i mod chunk

  MT_KEY_RANGE_FN int64_t first_key(int64_t i) const {
    int64_t first = 0;
    if (window > 0 && i - window + 1 > first)
      first = i - window + 1;
    if (chunk > 0 && i - i % chunk > first)
      first = i - i % chunk;
    return first;
  }
  /// The last of S queries that sees key j < S (j itself at least).
  MT_KEY_RANGE_FN int64_t last_query(int64_t j, int64_t S) const {
    int64_t last = S - 1;
    if (window > 0 && j + window - 1 < last)
      last = j + window - 1;
    if (chunk > 0 && j - j % chunk + chunk - 1 < last)
      last = j - j % chunk + chunk - 1;
    return last;
  }
  MT_KEY_RANGE_FN bool visible(int64_t i, int64_t j) const {
    return j <= i && j >= first_key(i);
  }
  /// Whether each of S queries sees every key up to itself: no window or
  /// chunk narrower than the sequence (Mistral's 4096 at 2048 tokens).
  MT_KEY_RANGE_FN bool plain_causal(int64_t S) const {
    return (window <= 0 || window >= S) && (chunk <= 0 || chunk >= S);
  }
};

} // namespace mtrt

#undef MT_KEY_RANGE_FN

#endif // MEGATRAIN_RUNTIME_KERNELS_KEYRANGE_H
