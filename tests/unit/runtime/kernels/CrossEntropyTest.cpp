//===- CrossEntropyTest.cpp - softmax cross-entropy -----------------------===//

#include "runtime/kernels/Kernels.h"
#include "tests/unit/runtime/kernels/Reference.h"

namespace mtrt::test {
namespace {

using namespace mtrt::cpu;

std::vector<int32_t> targets(int64_t N, int64_t V, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, int32_t(V) - 1);
  std::vector<int32_t> t(N);
  for (int32_t &x : t)
    x = dist(gen);
  return t;
}

// Σ_n logsumexp(row n) - row n [t_n], with the max taken out so that rows of
// large logits stay finite in double too.
double ref_loss(const Doubles &logits, const std::vector<int32_t> &t,
                int64_t V) {
  double loss = 0.0;
  for (size_t n = 0; n < t.size(); ++n) {
    const double *row = &logits[n * V];
    const double max = *std::max_element(row, row + V);
    double sum = 0.0;
    for (int64_t j = 0; j < V; ++j)
      sum += std::exp(row[j] - max);
    loss += max + std::log(sum) - row[t[n]];
  }
  return loss;
}

// dloss · (softmax(row) - onehot(t))
Doubles ref_backward(const Doubles &logits, const std::vector<int32_t> &t,
                     int64_t V, double dloss) {
  Doubles d(logits.size());
  for (size_t n = 0; n < t.size(); ++n) {
    const double *row = &logits[n * V];
    const double max = *std::max_element(row, row + V);
    double sum = 0.0;
    for (int64_t j = 0; j < V; ++j)
      sum += std::exp(row[j] - max);
    for (int64_t j = 0; j < V; ++j)
      d[n * V + j] = dloss * (std::exp(row[j] - max) / sum - (j == t[n]));
  }
  return d;
}

TEST(CrossEntropy, ReferenceBackwardMatchesFiniteDifferences) {
  const int64_t N = 4, V = 6;
  const std::vector<int32_t> t = targets(N, V, 121);
  const Doubles logits = widen(random_floats(N * V, 122, -3.f, 3.f));
  const double dloss = 0.25;
  EXPECT_TRUE(matches_finite_differences(
      [&](const std::vector<Doubles> &in) {
        return Doubles{ref_loss(in[0], t, V)};
      },
      {logits}, {dloss}, {ref_backward(logits, t, V, dloss)}));
}

// `shift` moves every logit: 1000 overflows exp without the max subtraction.
void check_kernels(float shift) {
  const int64_t N = 2 * 12, V = 1000;
  const std::vector<int32_t> t = targets(N, V, 123);
  Floats logits = random_floats(N * V, 124, -8.f, 8.f);
  for (float &l : logits)
    l += shift;
  const double loss = cross_entropy_forward(logits.data(), t.data(), N, V);
  const double want = ref_loss(widen(logits), t, V);
  // Each row's loss is ~log V; exp in fp32 errs by ~1 ulp per term.
  EXPECT_NEAR(loss, want, 1e-6 * std::fabs(want)) << "shift " << shift;

  const float dloss = 1.f / N;
  Floats d = random_floats(N * V, 125, -1e-3f, 1e-3f);
  const Floats d0 = d;
  cross_entropy_backward(d.data(), logits.data(), t.data(), N, V, dloss);
  EXPECT_TRUE(
      close(added(d, d0), ref_backward(widen(logits), t, V, dloss), 1e-5))
      << "shift " << shift;
}

TEST(CrossEntropy, MatchesReference) { check_kernels(0.f); }

TEST(CrossEntropy, LargeLogitsStayFinite) { check_kernels(1000.f); }

TEST(CrossEntropy, ChunksAddUpAccumulatesDeterministic) {
  const int64_t N = 16, V = 300;
  const std::vector<int32_t> t = targets(N, V, 126);
  const Floats logits = random_floats(N * V, 127, -5.f, 5.f);
  const double whole = cross_entropy_forward(logits.data(), t.data(), N, V);
  const double halves =
      cross_entropy_forward(logits.data(), t.data(), N / 2, V) +
      cross_entropy_forward(logits.data() + N / 2 * V, t.data() + N / 2, N / 2,
                            V);
  EXPECT_NEAR(whole, halves, 1e-12 * whole);
  EXPECT_EQ(whole, cross_entropy_forward(logits.data(), t.data(), N, V));

  Floats d(N * V);
  const auto backward = [&](Floats &g) {
    cross_entropy_backward(g.data(), logits.data(), t.data(), N, V, 0.5f);
  };
  expect_accumulates({&d}, [&] { backward(d); });
  Floats a(N * V), b(N * V);
  backward(a);
  backward(b);
  EXPECT_TRUE(bitwise_equal(a, b));
}

} // namespace
} // namespace mtrt::test
