//===- AdamWBf16Test.cpp - bf16-master AdamW: rounding, bits, unbiasedness ===//

#include "runtime/host/AdamW.h"
#include "runtime/host/Bf16.h"
#include "runtime/host/GradNorm.h"
#include "runtime/host/ThreadPool.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace mtrt::host;

namespace {

float widen(uint16_t b) { return mtrt::bf16_widen(b); }

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

uint16_t to_bf16(float f) { return mtrt::bf16_nearest(f); }

// bf16 weights and gradients, fp32 moments, as after some steps.
struct State {
  std::vector<uint16_t> p, g;
  std::vector<float> m, v;

  State(int64_t n, uint32_t seed) : p(n), g(n), m(n), v(n) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> exponent(-8.0f, 1.0f);
    for (int64_t i = 0; i < n; ++i) {
      p[i] = to_bf16(0.5f * normal(rng));
      g[i] = to_bf16(normal(rng) * std::pow(10.0f, exponent(rng)));
      m[i] = 1e-2f * normal(rng);
      float r = normal(rng);
      v[i] = 1e-4f * r * r;
    }
  }
  bool operator==(const State &o) const {
    return p == o.p && g == o.g &&
           std::memcmp(m.data(), o.m.data(), m.size() * 4) == 0 &&
           std::memcmp(v.data(), o.v.data(), v.size() * 4) == 0;
  }
  void update(const AdamWHyper &h, float scale, uint32_t key, uint32_t index0,
              ThreadPool *pool, SimdPath path, int64_t lo = 0,
              int64_t hi = -1) {
    if (hi < 0)
      hi = int64_t(p.size());
    adamw_update_bf16(p.data() + lo, m.data() + lo, v.data() + lo,
                      g.data() + lo, hi - lo, h, scale, key,
                      index0 + uint32_t(lo), pool, path);
  }
};

AdamWHyper hyper(double lr, double weight_decay, int64_t step) {
  AdamWHyper h;
  h.lr = lr;
  h.weight_decay = weight_decay;
  h.step = step;
  return h;
}

class AdamWBf16Path : public ::testing::TestWithParam<SimdPath> {
protected:
  void SetUp() override {
    if (!simd_path_supported(GetParam()))
      GTEST_SKIP() << simd_path_name(GetParam())
                   << " not supported on this CPU";
  }
};

const int64_t kSizes[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 64, 1000, 4099};

// The update in float is the fp32 AdamW's on the widened values (itself
// checked against fp64 in AdamWTest): m and v must match it bit for bit, and
// the new weight must be that float rounded down or up to a bf16 neighbour
// (exactly it when representable).
TEST_P(AdamWBf16Path, IsTheFloatUpdateRoundedToANeighbour) {
  for (int64_t n : kSizes)
    for (int64_t step : {1, 5, 1000}) {
      State s(n, 11 + uint32_t(n));
      std::vector<float> p(n), m(s.m), v(s.v), g(n);
      for (int64_t i = 0; i < n; ++i) {
        p[i] = widen(s.p[i]);
        g[i] = widen(s.g[i]);
      }
      AdamWHyper h = hyper(3e-3, 0.1, step);
      adamw_update(p.data(), m.data(), v.data(), g.data(), n, h, 0.7f, nullptr,
                   SimdPath::Scalar);
      s.update(h, 0.7f, 0x1234567u, 0, nullptr, GetParam());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(bits_of(s.m[i]), bits_of(m[i])) << "m, element " << i;
        ASSERT_EQ(bits_of(s.v[i]), bits_of(v[i])) << "v, element " << i;
        const uint32_t down = bits_of(p[i]) >> 16;
        const bool exact = (bits_of(p[i]) & 0xffffu) == 0;
        ASSERT_TRUE(s.p[i] == down || (!exact && s.p[i] == down + 1))
            << "element " << i << ": " << widen(s.p[i]) << " from " << p[i];
      }
    }
}

// The noise is drawn per element index, not per thread or call: every path,
// pool size and split of the range gives the scalar path's bits.
TEST_P(AdamWBf16Path, SameBitsOnEveryPathSplitAndThreadCount) {
  const AdamWHyper h = hyper(1e-2, 0.1, 3);
  for (int64_t n : kSizes) {
    State scalar(n, 5), s(n, 5);
    scalar.update(h, 0.9f, 77, 1000, nullptr, SimdPath::Scalar);
    s.update(h, 0.9f, 77, 1000, nullptr, GetParam());
    EXPECT_TRUE(s == scalar) << "n " << n;
    if (n < 3)
      continue;
    State split(n, 5); // two calls, the second from an odd offset
    split.update(h, 0.9f, 77, 1000, nullptr, GetParam(), 0, n / 2 + 1);
    split.update(h, 0.9f, 77, 1000, nullptr, GetParam(), n / 2 + 1, n);
    EXPECT_TRUE(split == scalar) << "split, n " << n;
  }
  const int64_t n = 100003; // several parts, a ragged last one
  State alone(n, 9);
  alone.update(h, 1.0f, 3, 0, nullptr, SimdPath::Scalar);
  for (int threads : {2, 3, 7}) {
    ThreadPool pool(threads);
    State s(n, 9);
    s.update(h, 1.0f, 3, 0, &pool, GetParam());
    EXPECT_TRUE(s == alone) << threads << " threads";
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, AdamWBf16Path,
                         ::testing::Values(SimdPath::Scalar, SimdPath::Avx2,
                                           SimdPath::Avx512),
                         [](const ::testing::TestParamInfo<SimdPath> &p) {
                           return std::string(simd_path_name(p.param));
                         });

// The point of stochastic rounding: an update of 1e-4 on weights of 1.0,
// where a bf16 ulp is 2^-7 (round to nearest would never move them), moves
// their mean by 1e-4. Each weight drops one ulp with probability
// 1e-4 / 2^-7 = 1.3%; over 2^18 weights the mean's standard deviation is
// 2^-7 * sqrt(0.013 / 2^18) = 1.7e-6, so the bound below is ~6 sigma.
TEST(AdamWBf16, StochasticRoundingIsUnbiased) {
  const int64_t n = int64_t(1) << 18;
  std::vector<uint16_t> p(n, to_bf16(1.0f)), g(n, to_bf16(1.0f));
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  // Step 1 from zero moments with |g| >> eps moves every weight by lr.
  adamw_update_bf16(p.data(), m.data(), v.data(), g.data(), n,
                    hyper(1e-4, 0.0, 1), 1.0f, 0xabcdefu, 0, nullptr);
  double sum = 0;
  int64_t moved = 0;
  for (int64_t i = 0; i < n; ++i) {
    sum += widen(p[i]);
    moved += p[i] != to_bf16(1.0f);
  }
  EXPECT_NEAR(sum / double(n), 1.0 - 1e-4, 1e-5);
  EXPECT_GT(moved, 0);
  // Round to nearest would leave every weight at 1.0.
  EXPECT_EQ(to_bf16(1.0f - 1e-4f), to_bf16(1.0f));
}

TEST(AdamWBf16, KeysDrawDifferentNoise) {
  const int64_t n = 4096;
  State a(n, 1), b(n, 1), c(n, 1);
  const AdamWHyper h = hyper(1e-3, 0.0, 2);
  a.update(h, 1.0f, 1, 0, nullptr, active_simd_path());
  b.update(h, 1.0f, 1, 0, nullptr, active_simd_path());
  c.update(h, 1.0f, 2, 0, nullptr, active_simd_path());
  EXPECT_TRUE(a == b);
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i)
    differ += a.p[i] != c.p[i];
  EXPECT_GT(differ, n / 100) << "another key must round some weights otherwise";
}

TEST(AdamWBf16, NonFiniteWeightsStayNonFinite) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<uint16_t> p = {to_bf16(inf), to_bf16(-inf), 0x7f81, 0xffc0},
                        g(4, to_bf16(1.0f));
  std::vector<float> m(4, 0.0f), v(4, 0.0f);
  for (SimdPath path : {SimdPath::Scalar, active_simd_path()}) {
    std::vector<uint16_t> q(p);
    adamw_update_bf16(q.data(), m.data(), v.data(), g.data(), 4,
                      hyper(1e-3, 0.0, 1), 1.0f, 0xffffffffu, 0, nullptr,
                      path);
    EXPECT_EQ(widen(q[0]), inf);
    EXPECT_EQ(widen(q[1]), -inf);
    EXPECT_TRUE(std::isnan(widen(q[2])));
    EXPECT_TRUE(std::isnan(widen(q[3])));
  }
}

// The bf16 accumulator's norm: the widened values' sum of squares, the same
// bits on every path and thread count.
TEST(GradNormBf16, MatchesLongDoubleSumOnEveryPath) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<uint16_t>> buffers;
  for (int64_t n : {0, 1, 17, 65537, 200001, 4099}) {
    std::vector<uint16_t> b(n + 1);
    for (uint16_t &x : b)
      x = to_bf16(normal(rng) * (rng() % 2 ? 1e-3f : 10.0f));
    buffers.push_back(std::move(b));
  }
  std::vector<GradSpanBf16> spans;
  long double ref = 0;
  for (auto &b : buffers) {
    spans.push_back({b.data() + 1, int64_t(b.size()) - 1});
    for (size_t i = 1; i < b.size(); ++i)
      ref += (long double)widen(b[i]) * widen(b[i]);
  }
  const double scalar =
      grad_sum_squares(spans.data(), spans.size(), nullptr, SimdPath::Scalar);
  EXPECT_NEAR(scalar, double(ref), 1e-13 * double(ref));
  ThreadPool pool(3);
  for (SimdPath path : {SimdPath::Avx2, SimdPath::Avx512})
    if (simd_path_supported(path)) {
      EXPECT_EQ(grad_sum_squares(spans.data(), spans.size(), nullptr, path),
                scalar)
          << simd_path_name(path);
      EXPECT_EQ(grad_sum_squares(spans.data(), spans.size(), &pool, path),
                scalar)
          << simd_path_name(path) << ", 3 threads";
    }
}

} // namespace
