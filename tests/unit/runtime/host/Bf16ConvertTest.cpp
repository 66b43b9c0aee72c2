//===- Bf16ConvertTest.cpp - fp32 to bf16: every path, IEEE's rounding ----===//

#include "runtime/host/Bf16Convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace mtrt::host;

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// A bf16's value in double; the pattern past the largest finite one (the
// exponent's all-ones with no mantissa, reached by a carry) is taken as
// 2^128, where IEEE's rounding puts the next value up.
double value_of(uint16_t b) {
  if ((b & 0x7fffu) == 0x7f80u)
    return (b & 0x8000u ? -1 : 1) * std::ldexp(1.0, 128);
  uint32_t u = uint32_t(b) << 16;
  return double(from_bits(u));
}

// Round to nearest, ties to even, worked out from the two candidates'
// distances in double, independent of the library's integer trick.
uint16_t reference(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (std::isnan(f))
    return uint16_t((u >> 16) | 0x0040u); // a quiet NaN of the same sign
  if (std::isinf(f))
    return uint16_t(u >> 16);
  const uint16_t down = uint16_t(u >> 16), up = uint16_t(down + 1);
  const double x = f, dd = std::fabs(x - value_of(down)),
               du = std::fabs(value_of(up) - x);
  if (dd != du)
    return dd < du ? down : up;
  return down % 2 == 0 ? down : up;
}

// Specials, ties on even and odd kept bits, the largest finite value and
// the halfway point above it, signalling NaNs whose payload sits below the
// kept bits, then random bit patterns.
std::vector<float> inputs() {
  std::vector<uint32_t> bits = {
      0x00000000, 0x80000000, 0x00000001, 0x807fffff, 0x00008000, 0x00018000,
      0x3f808000, 0x3f818000, 0x3f807fff, 0x3f808001, 0x7f7fffff, 0x7f7f8000,
      0x7f7f7fff, 0xff7fffff, 0x7f800000, 0xff800000, 0x7f800001, 0xff800001,
      0x7fc00000, 0x7fbfffff, 0xffffffff, 0x7f8fffff};
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i)
    bits.push_back(uint32_t(rng()));
  std::vector<float> out;
  for (uint32_t b : bits)
    out.push_back(from_bits(b));
  return out;
}

std::vector<SimdPath> supported_paths() {
  std::vector<SimdPath> paths;
  for (SimdPath p : {SimdPath::Scalar, SimdPath::Avx2, SimdPath::Avx512})
    if (simd_path_supported(p))
      paths.push_back(p);
  return paths;
}

TEST(Bf16Convert, ScalarRoundsToNearestEven) {
  const std::vector<float> in = inputs();
  std::vector<uint16_t> out(in.size());
  to_bf16_nearest(out.data(), in.data(), int64_t(in.size()), SimdPath::Scalar);
  for (size_t i = 0; i < in.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &in[i], sizeof u);
    ASSERT_EQ(out[i], reference(in[i])) << std::hex << "input 0x" << u;
  }
}

// Every path, every length around the vector widths and every start off
// a vector boundary: the scalar path's bits, nothing written past n.
TEST(Bf16Convert, EveryPathGivesTheScalarBits) {
  const std::vector<float> in = inputs();
  std::vector<uint16_t> want(in.size());
  to_bf16_nearest(want.data(), in.data(), int64_t(in.size()), SimdPath::Scalar);
  for (SimdPath path : supported_paths())
    for (int64_t start : {0, 1, 3})
      for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 1000, 99997}) {
        std::vector<uint16_t> out(n + 1, 0xabcd);
        to_bf16_nearest(out.data(), in.data() + start, n, path);
        for (int64_t k = 0; k < n; ++k)
          ASSERT_EQ(out[k], want[start + k])
              << simd_path_name(path) << " start " << start << " n " << n
              << " at " << k;
        EXPECT_EQ(out[n], 0xabcd) << simd_path_name(path) << " wrote past n";
      }
}

// Accumulators of every kind of bf16 (the inputs' top halves: specials,
// ties, random) plus gradients of every magnitude: the sum in double
// rounded to float (the float add's result: a double holds more than twice
// a float's digits), then by reference(); every path, at every length and
// start, the same.
TEST(Bf16Convert, AddToBf16RoundsTheFloatSumToNearest) {
  const std::vector<float> g = inputs();
  std::vector<uint16_t> acc0(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &g[(i * 7919) % g.size()], sizeof u);
    acc0[i] = uint16_t(u >> 16);
  }
  std::vector<uint16_t> want(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const double sum = double(from_bits(uint32_t(acc0[i]) << 16)) + g[i];
    want[i] = reference(static_cast<float>(sum));
  }
  auto same = [](uint16_t a, uint16_t b) {
    const bool nan_a = (a & 0x7fffu) > 0x7f80u, nan_b = (b & 0x7fffu) > 0x7f80u;
    return nan_a || nan_b ? nan_a == nan_b : a == b;
  };
  for (SimdPath path : supported_paths())
    for (int64_t start : {0, 1, 3})
      for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 33, 99997}) {
        std::vector<uint16_t> acc(acc0.begin() + start,
                                  acc0.begin() + start + n);
        acc.push_back(0xabcd);
        add_to_bf16(acc.data(), g.data() + start, n, path);
        for (int64_t k = 0; k < n; ++k)
          ASSERT_TRUE(same(acc[k], want[start + k]))
              << simd_path_name(path) << " start " << start << " n " << n
              << " at " << k << std::hex << ": 0x" << acc[k] << " for 0x"
              << want[start + k];
        EXPECT_EQ(acc[n], 0xabcd) << simd_path_name(path) << " wrote past n";
      }
}

TEST(Bf16Convert, RefusesAPathThisCpuLacks) {
  if (supported_paths().size() == 3)
    GTEST_SKIP() << "this CPU runs every path";
  for (SimdPath p : {SimdPath::Avx2, SimdPath::Avx512})
    if (!simd_path_supported(p)) {
      float x = 1;
      uint16_t y;
      EXPECT_THROW(to_bf16_nearest(&y, &x, 1, p), std::invalid_argument);
      EXPECT_THROW(add_to_bf16(&y, &x, 1, p), std::invalid_argument);
    }
}

} // namespace
