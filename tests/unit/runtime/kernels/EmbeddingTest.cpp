//===- EmbeddingTest.cpp - token and position embeddings ------------------===//

#include "runtime/kernels/Kernels.h"
#include "tests/unit/runtime/kernels/Reference.h"

namespace mtrt::test {
namespace {

using namespace mtrt::cpu;

// Repeated ids make the backward sum several rows into one.
std::vector<int32_t> token_ids(int64_t N, int64_t V, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, int32_t(V) - 1);
  std::vector<int32_t> ids(N);
  for (int32_t &id : ids)
    id = dist(gen);
  ids[N - 1] = ids[0];
  return ids;
}

// y (N, D) = table[ids]
Doubles ref_embed(const Doubles &table, const std::vector<int32_t> &ids,
                  int64_t D) {
  Doubles y(ids.size() * D);
  for (size_t n = 0; n < ids.size(); ++n)
    for (int64_t j = 0; j < D; ++j)
      y[n * D + j] = table[ids[n] * D + j];
  return y;
}

Doubles ref_embed_backward(const Doubles &dy, const std::vector<int32_t> &ids,
                           int64_t V, int64_t D) {
  Doubles dtable(V * D);
  for (size_t n = 0; n < ids.size(); ++n)
    for (int64_t j = 0; j < D; ++j)
      dtable[ids[n] * D + j] += dy[n * D + j];
  return dtable;
}

TEST(Embed, ReferenceBackwardMatchesFiniteDifferences) {
  const int64_t N = 9, V = 5, D = 3;
  const std::vector<int32_t> ids = token_ids(N, V, 101);
  const Doubles table = widen(random_floats(V * D, 102));
  const Doubles dy = widen(random_floats(N * D, 103));
  EXPECT_TRUE(matches_finite_differences(
      [&](const std::vector<Doubles> &in) { return ref_embed(in[0], ids, D); },
      {table}, dy, {ref_embed_backward(dy, ids, V, D)}));
}

TEST(Embed, MatchesReference) {
  const int64_t N = 2 * 40, V = 50, D = 130; // D spans several column blocks
  const std::vector<int32_t> ids = token_ids(N, V, 104);
  const Floats table = random_floats(V * D, 105);
  Floats y(N * D);
  embed_forward(y.data(), ids.data(), table.data(), N, V, D);
  EXPECT_TRUE(close(y, ref_embed(widen(table), ids, D), 0.0)); // a copy

  const Floats dy = random_floats(N * D, 106);
  Floats dtable = random_floats(V * D, 107);
  const Floats dtable0 = dtable;
  embed_backward(dtable.data(), dy.data(), ids.data(), N, V, D);
  // A handful of fp32 adds per entry.
  EXPECT_TRUE(close(added(dtable, dtable0),
                    ref_embed_backward(widen(dy), ids, V, D), 1e-6));
}

TEST(Embed, AccumulatesAndDeterministic) {
  const int64_t N = 300, V = 7, D = 96; // every id repeated many times
  const std::vector<int32_t> ids = token_ids(N, V, 108);
  const Floats dy = random_floats(N * D, 109);
  Floats dtable(V * D);
  const auto backward = [&](Floats &g) {
    embed_backward(g.data(), dy.data(), ids.data(), N, V, D);
  };
  expect_accumulates({&dtable}, [&] { backward(dtable); });
  Floats a(V * D), b(V * D);
  backward(a);
  backward(b);
  EXPECT_TRUE(bitwise_equal(a, b));
}

TEST(PositionEmbed, MatchesReferenceAndAccumulates) {
  const int64_t P = 20, S = 6, D = 5, offset = 3;
  const Floats table = random_floats(P * D, 110);
  Floats y(S * D);
  position_embed_forward(y.data(), table.data(), S, D, offset);
  EXPECT_TRUE(bitwise_equal(
      y, Floats(table.begin() + offset * D, table.begin() + (offset + S) * D)));

  // y is linear in the table: its reference gradient routes dy[s] to row
  // offset + s; central differences confirm it.
  const Forward fwd = [&](const std::vector<Doubles> &in) {
    return Doubles(in[0].begin() + offset * D,
                   in[0].begin() + (offset + S) * D);
  };
  const Floats dy = random_floats(S * D, 111);
  Doubles want(P * D);
  for (int64_t i = 0; i < S * D; ++i)
    want[offset * D + i] = dy[i];
  EXPECT_TRUE(
      matches_finite_differences(fwd, {widen(table)}, widen(dy), {want}));

  Floats dtable = random_floats(P * D, 112);
  const Floats dtable0 = dtable;
  position_embed_backward(dtable.data(), dy.data(), S, D, offset);
  // Exact but for the add onto the prior: half an ulp of values below 2.
  EXPECT_TRUE(close(added(dtable, dtable0), want, 2e-7));
  Floats acc(P * D);
  expect_accumulates({&acc}, [&] {
    position_embed_backward(acc.data(), dy.data(), S, D, offset);
  });
}

} // namespace
} // namespace mtrt::test
