//===- NumericsTest.cpp - bf16 rounding and sums of squares ---------------===//

#include "runtime/kernels/Kernels.h"
#include "tests/unit/runtime/kernels/Reference.h"

namespace mtrt::test {
namespace {

using namespace mtrt::cpu;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

uint32_t rounded_bits(uint32_t u) {
  float f = from_bits(u);
  round_to_bf16(&f, 1);
  return to_bits(f);
}

TEST(RoundToBf16, TiesGoToEven) {
  // {input, expected}: bf16 keeps the upper 16 bits.
  const uint32_t cases[][2] = {
      {0x3f800000, 0x3f800000}, // 1.0 is exact
      {0x3f808000, 0x3f800000}, // halfway, kept lsb even: down
      {0x3f818000, 0x3f820000}, // halfway, kept lsb odd: up
      {0x3f808001, 0x3f810000}, // just above halfway: up
      {0x3f807fff, 0x3f800000}, // just below halfway: down
      {0xbf808000, 0xbf800000}, // the sign does not matter
      {0xbf818000, 0xbf820000},
      {0x3fffffff, 0x40000000}, // the carry rolls into the exponent
      {0x00008000, 0x00000000}, // subnormal tie to even zero
      {0x00018000, 0x00020000},
      {0x80000000, 0x80000000}, // -0 stays -0
      {0x7f7f7fff, 0x7f7f0000}, // below half an ulp from FLT_MAX's bf16
      {0x7f7f8000, 0x7f800000}, // the tie past the largest bf16 is infinity
      {0x7f7fffff, 0x7f800000},
      {0x7f800000, 0x7f800000}, // ±inf stay
      {0xff800000, 0xff800000},
  };
  for (const auto &c : cases)
    EXPECT_EQ(rounded_bits(c[0]), c[1]) << std::hex << c[0];
}

TEST(RoundToBf16, NanStaysNan) {
  // A signalling NaN whose payload sits in the dropped bits would become
  // infinity if truncated.
  for (uint32_t nan :
       {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fbfffffu, 0xffffffffu}) {
    const uint32_t r = rounded_bits(nan);
    EXPECT_TRUE(std::isnan(from_bits(r))) << std::hex << nan;
    EXPECT_EQ(r & 0xffffu, 0u) << std::hex << nan;
    EXPECT_EQ(r & 0x80000000u, nan & 0x80000000u) << std::hex << nan;
  }
}

// Against the definition: the nearer of the two bf16 values around x, the
// even one on a tie, over random finite bit patterns.
TEST(RoundToBf16, NearestOnRandomValues) {
  std::mt19937 gen(141);
  Floats x(200000);
  for (float &f : x) {
    do
      f = from_bits(gen());
    while (!std::isfinite(f));
  }
  Floats r = x;
  round_to_bf16(r.data(), int64_t(r.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t u = to_bits(x[i]);
    const uint32_t down = u & 0xffff0000u, up = down + 0x10000u;
    const double dd = std::fabs(double(x[i]) - from_bits(down));
    // Past the largest bf16 the upper neighbour is 2^128 (the exponent taken
    // as unbounded), which then overflows to infinity.
    const double up_value = (up & 0x7fffffffu) == 0x7f800000u
                                ? std::copysign(std::ldexp(1.0, 128), x[i])
                                : from_bits(up);
    const double du = std::fabs(up_value - x[i]);
    const uint32_t want = dd < du   ? down
                          : du < dd ? up
                                    : ((down >> 16) & 1 ? up : down);
    ASSERT_EQ(to_bits(r[i]), want) << std::hex << u;
  }
}

TEST(SumSquares, MatchesReferenceAndDeterministic) {
  const Floats x = random_floats(300001, 142, -3.f, 3.f); // several chunks
  double want = 0.0;
  for (float v : x)
    want += double(v) * v;
  const double got = sum_squares(x.data(), int64_t(x.size()));
  // Both sum in double, in different orders.
  EXPECT_NEAR(got, want, 1e-12 * want);
  EXPECT_EQ(got, sum_squares(x.data(), int64_t(x.size())));
  EXPECT_EQ(sum_squares(x.data(), 0), 0.0);
}

} // namespace
} // namespace mtrt::test
