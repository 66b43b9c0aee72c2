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
  cross_entropy_backward(d.data(), logits.data(), t.data(), N, V, dloss,
                         /*accumulate=*/true);
  const Doubles grad = ref_backward(widen(logits), t, V, dloss);
  EXPECT_TRUE(close(added(d, d0), grad, 1e-5)) << "shift " << shift;
  // Not asked to accumulate, dlogits is written over what it held (NaN).
  Floats w(N * V, std::nanf(""));
  cross_entropy_backward(w.data(), logits.data(), t.data(), N, V, dloss,
                         /*accumulate=*/false);
  EXPECT_TRUE(close(w, grad, 1e-5)) << "shift " << shift;
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
    cross_entropy_backward(g.data(), logits.data(), t.data(), N, V, 0.5f,
                           /*accumulate=*/true);
  };
  expect_accumulates({&d}, [&] { backward(d); });
  Floats a(N * V), b(N * V);
  backward(a);
  backward(b);
  EXPECT_TRUE(bitwise_equal(a, b));
}

// ---- a vocabulary in pieces ------------------------------------------------

struct Piece {
  int64_t v0, Vp; // vocabulary entries [v0, v0 + Vp)
};

// Three uneven pieces of V = 301, in order.
const std::vector<Piece> kPieces = {{0, 100}, {100, 150}, {250, 51}};

// Columns [v0, v0 + Vp) of every row: the logits one piece of the head
// makes.
Floats piece_of(const Floats &whole, int64_t V, const Piece &p) {
  const int64_t N = int64_t(whole.size()) / V;
  Floats out(N * p.Vp);
  for (int64_t n = 0; n < N; ++n)
    std::copy(whole.begin() + n * V + p.v0, whole.begin() + n * V + p.v0 + p.Vp,
              out.begin() + n * p.Vp);
  return out;
}

// Logits whose max moves between pieces: each row has one entry raised by
// 12 in a random place, and rows alternate shifts of 0, +1000 and -1000
// (exp over- or underflows unless the running max is taken out).
Floats piece_logits(int64_t N, int64_t V, uint32_t seed) {
  Floats logits = random_floats(N * V, seed, -8.f, 8.f);
  std::mt19937 gen(seed + 1);
  std::uniform_int_distribution<int64_t> at(0, V - 1);
  for (int64_t n = 0; n < N; ++n) {
    logits[n * V + at(gen)] += 12.f;
    const float shift = n % 3 == 1 ? 1000.f : n % 3 == 2 ? -1000.f : 0.f;
    for (int64_t j = 0; j < V; ++j)
      logits[n * V + j] += shift;
  }
  return logits;
}

// Stats merged over the pieces in the given order, starting from garbage
// (`first` must reset them).
Floats merged_stats(const Floats &logits, const std::vector<int32_t> &t,
                    int64_t V, const std::vector<Piece> &order) {
  const int64_t N = int64_t(t.size());
  Floats stats(3 * N, 1e30f);
  for (size_t i = 0; i < order.size(); ++i)
    cross_entropy_stats(stats.data(), piece_of(logits, V, order[i]).data(),
                        t.data(), N, order[i].Vp, order[i].v0, V, i == 0);
  return stats;
}

// Both losses sum the same f32 exponentials up to their shift: expf and the
// rounding of z - max err by ~2^-24 relative per term, and the merged sum is
// rounded to f32 once per piece, so a row's log s (and its loss, whose m - t
// is exact) differs by a few 1e-7 at most (1.6e-7 over 200 seeds). Rows
// lose ~11 on average here, so the mean is off by < 1e-7 relative: 1e-6 is
// above that rounding and far below a missing rescale or a lost piece,
// which move a row's loss by O(1).
constexpr double kPieceLoss = 1e-6;

TEST(CrossEntropyPieces, MatchWholeVocabulary) {
  const int64_t N = 37, V = 301;
  const std::vector<int32_t> t = targets(N, V, 130);
  const Floats logits = piece_logits(N, V, 131);
  const Floats stats = merged_stats(logits, t, V, kPieces);
  for (int64_t n = 0; n < N; ++n) {
    const float *row = &logits[n * V];
    EXPECT_EQ(stats[3 * n], *std::max_element(row, row + V)) << "row " << n;
    EXPECT_EQ(stats[3 * n + 2], row[t[n]]) << "row " << n;
  }
  const double whole = cross_entropy_forward(logits.data(), t.data(), N, V) / N;
  const double pieces = cross_entropy_stats_loss(stats.data(), N) / N;
  EXPECT_NEAR(pieces, whole, kPieceLoss * whole);

  // Each piece's dlogits are the whole row's columns: the exponentials are
  // the same (complete stats hold the row's max) and only 1/s rounds
  // differently, by < 1e-6 relative on values of at most dloss = 0.027, so
  // by < 3e-8 (6e-9 seen); a wrong max or sum moves them by far more.
  const float dloss = 1.f / N;
  const Floats d0 = random_floats(N * V, 132, -1e-3f, 1e-3f);
  Floats d = d0;
  cross_entropy_backward(d.data(), logits.data(), t.data(), N, V, dloss,
                         /*accumulate=*/true);
  Floats written(N * V, std::nanf(""));
  cross_entropy_backward(written.data(), logits.data(), t.data(), N, V, dloss,
                         /*accumulate=*/false);
  for (const Piece &p : kPieces) {
    // Added into the priors, or written over NaN.
    for (const bool accumulate : {true, false}) {
      Floats dp =
          accumulate ? piece_of(d0, V, p) : Floats(N * p.Vp, std::nanf(""));
      cross_entropy_backward_piece(dp.data(), piece_of(logits, V, p).data(),
                                   t.data(), stats.data(), N, p.Vp, p.v0, dloss,
                                   accumulate);
      const Floats want = piece_of(accumulate ? d : written, V, p);
      for (size_t i = 0; i < dp.size(); ++i)
        ASSERT_NEAR(dp[i], want[i], 1e-6) << "piece at " << p.v0 << ", " << i
                                          << ", accumulate " << accumulate;
    }
  }
}

// The online log-sum-exp commutes up to rounding. The order starts with an
// empty piece, whose max stays -inf: merging it with the fresh -inf must
// not give exp(-inf + inf) = NaN.
TEST(CrossEntropyPieces, OrderDoesNotMatter) {
  const int64_t N = 37, V = 301;
  const std::vector<int32_t> t = targets(N, V, 133);
  const Floats logits = piece_logits(N, V, 134);
  const double in_order =
      cross_entropy_stats_loss(merged_stats(logits, t, V, kPieces).data(), N);
  const std::vector<Piece> shuffled = {
      {100, 0}, kPieces[2], kPieces[0], {301, 0}, kPieces[1]};
  const double reordered =
      cross_entropy_stats_loss(merged_stats(logits, t, V, shuffled).data(), N);
  EXPECT_NEAR(reordered, in_order, kPieceLoss * in_order);
}

TEST(CrossEntropyPieces, TargetsOutsideTheVocabularyGiveNaN) {
  const int64_t N = 3, V = 301;
  const std::vector<int32_t> t = {5, -1, int32_t(V)};
  const Floats logits = random_floats(N * V, 135, -3.f, 3.f);
  const Floats stats = merged_stats(logits, t, V, kPieces);
  EXPECT_TRUE(std::isnan(cross_entropy_stats_loss(stats.data(), N)));
  EXPECT_FALSE(std::isnan(cross_entropy_stats_loss(stats.data(), 1)));
  for (const Piece &p : kPieces) {
    Floats dp(N * p.Vp);
    cross_entropy_backward_piece(dp.data(), piece_of(logits, V, p).data(),
                                 t.data(), stats.data(), N, p.Vp, p.v0, 1.f,
                                 /*accumulate=*/true);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < p.Vp; ++j)
        ASSERT_EQ(std::isnan(dp[n * p.Vp + j]), n > 0)
            << "row " << n << ", piece at " << p.v0;
  }
}

} // namespace
} // namespace mtrt::test
