//===- GradNormTest.cpp - Global grad norm: exact enough and repeatable ---===//

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

// Buffers straddling the internal chunk size (65536) and the lane width, an
// empty one, and one that starts off a 16-float boundary.
struct Grads {
  std::vector<std::vector<float>> buffers;
  std::vector<GradSpan> spans;

  Grads() {
    std::mt19937 rng(42);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t n : {0, 1, 17, 65536, 65537, 200001, 3, 4099}) {
      std::vector<float> b(n + 1);
      for (float &x : b)
        x = normal(rng) * (rng() % 2 ? 1e-3f : 10.0f);
      buffers.push_back(std::move(b));
    }
    for (auto &b : buffers)
      spans.push_back({b.data() + 1, int64_t(b.size()) - 1});
  }
};

uint64_t bits(double x) {
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

TEST(GradNorm, MatchesLongDoubleSum) {
  Grads g;
  long double ref = 0;
  for (const GradSpan &s : g.spans)
    for (int64_t i = 0; i < s.n; ++i)
      ref += (long double)s.data[i] * s.data[i];
  double got = grad_sum_squares(g.spans.data(), g.spans.size(), nullptr);
  EXPECT_NEAR(got, double(ref), 1e-13 * double(ref));
  EXPECT_DOUBLE_EQ(global_grad_norm(g.spans.data(), g.spans.size(), nullptr),
                   std::sqrt(got));
}

TEST(GradNorm, SameBitsOnEveryPathThreadCountAndRun) {
  Grads g;
  const double expected = grad_sum_squares(g.spans.data(), g.spans.size(),
                                           nullptr, SimdPath::Scalar);
  for (SimdPath path : {SimdPath::Scalar, SimdPath::Avx2, SimdPath::Avx512}) {
    if (!simd_path_supported(path))
      continue;
    EXPECT_EQ(
        bits(grad_sum_squares(g.spans.data(), g.spans.size(), nullptr, path)),
        bits(expected))
        << simd_path_name(path) << " inline";
    for (int threads : {1, 2, 3, 5}) {
      ThreadPool pool(threads);
      for (int run = 0; run < 3; ++run)
        EXPECT_EQ(
            bits(grad_sum_squares(g.spans.data(), g.spans.size(), &pool, path)),
            bits(expected))
            << simd_path_name(path) << " " << threads << " threads";
    }
  }
}

TEST(GradNorm, EmptyIsZero) {
  EXPECT_EQ(grad_sum_squares(static_cast<const GradSpan *>(nullptr), 0, nullptr), 0.0);
  GradSpan empty{nullptr, 0};
  EXPECT_EQ(global_grad_norm(&empty, 1, nullptr), 0.0);
}

TEST(GradNorm, NonFiniteGradientsPropagate) {
  std::vector<float> a(100, 1.0f);
  a[50] = std::numeric_limits<float>::infinity();
  GradSpan span{a.data(), int64_t(a.size())};
  EXPECT_TRUE(std::isinf(global_grad_norm(&span, 1, nullptr)));
  a[51] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(global_grad_norm(&span, 1, nullptr)));
}

} // namespace
