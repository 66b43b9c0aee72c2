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

// ---- the table in vocabulary pieces ----------------------------------------

struct Piece {
  int64_t v0, Vp; // table rows [v0, v0 + Vp)
};

TEST(EmbedPieces, MatchWholeTable) {
  const int64_t N = 80, V = 50, D = 130;
  const std::vector<Piece> pieces = {{0, 17}, {17, 20}, {37, 13}};
  const std::vector<int32_t> ids = token_ids(N, V, 113);
  const Floats table = random_floats(V * D, 114);
  Floats want(N * D);
  embed_forward(want.data(), ids.data(), table.data(), N, V, D);

  constexpr float kUntouched = 7.f; // no table entry is outside [-1, 1]
  Floats y(N * D, kUntouched);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece &p = pieces[i];
    embed_forward_piece(y.data(), ids.data(), table.data() + p.v0 * D, N, p.Vp,
                        D, p.v0, V, i == 0, 1.f);
    if (i == 0) // rows of other pieces are left alone
      for (int64_t n = 0; n < N; ++n)
        EXPECT_EQ(y[n * D], ids[n] < p.Vp ? want[n * D] : kUntouched)
            << "row " << n;
  }
  EXPECT_TRUE(bitwise_equal(y, want));

  // The oracle adds in token order into each entry, as the kernel does, so
  // the sums agree to the bit.
  const Floats dy = random_floats(N * D, 115);
  const Floats dtable0 = random_floats(V * D, 116);
  Floats oracle = dtable0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < D; ++j)
      oracle[ids[n] * D + j] += dy[n * D + j];
  Floats dtable = dtable0;
  for (const Piece &p : pieces)
    embed_backward_piece(dtable.data() + p.v0 * D, dy.data(), ids.data(), N,
                         p.Vp, D, p.v0, 1.f);
  EXPECT_TRUE(bitwise_equal(dtable, oracle));
}

// A scaled embedding (Gemma's √D): each piece writes its rows times the
// scale and scatters the dy rows times the scale, in token order.
TEST(EmbedPieces, ScaleRowsAndGradients) {
  const int64_t N = 60, V = 40, D = 70;
  const float scale = 2.75f;
  const std::vector<Piece> pieces = {{0, 15}, {15, 25}};
  const std::vector<int32_t> ids = token_ids(N, V, 119);
  const Floats table = random_floats(V * D, 120);
  Floats y(N * D), want(N * D);
  for (size_t i = 0; i < pieces.size(); ++i)
    embed_forward_piece(y.data(), ids.data(), table.data() + pieces[i].v0 * D,
                        N, pieces[i].Vp, D, pieces[i].v0, V, i == 0, scale);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < D; ++j)
      want[n * D + j] = scale * table[ids[n] * D + j];
  EXPECT_TRUE(bitwise_equal(y, want));

  const Floats dy = random_floats(N * D, 121);
  Floats dtable(V * D), oracle(V * D);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < D; ++j)
      oracle[ids[n] * D + j] += scale * dy[n * D + j];
  for (const Piece &p : pieces)
    embed_backward_piece(dtable.data() + p.v0 * D, dy.data(), ids.data(), N,
                         p.Vp, D, p.v0, scale);
  EXPECT_TRUE(bitwise_equal(dtable, oracle));
}

// A poisoned id shows as a NaN row from the first piece on; no piece reads
// or writes a row for it.
TEST(EmbedPieces, IdsOutsideTheTableGiveNaN) {
  const int64_t N = 5, V = 50, D = 3;
  const std::vector<Piece> pieces = {{0, 25}, {25, 25}};
  const std::vector<int32_t> ids = {1, -1, 49, int32_t(V), 20};
  const Floats table = random_floats(V * D, 117);
  Floats y(N * D, 7.f);
  for (size_t i = 0; i < pieces.size(); ++i)
    embed_forward_piece(y.data(), ids.data(), table.data() + pieces[i].v0 * D,
                        N, pieces[i].Vp, D, pieces[i].v0, V, i == 0, 1.f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < D; ++j) {
      const bool poisoned = ids[n] < 0 || ids[n] >= V;
      if (poisoned)
        EXPECT_TRUE(std::isnan(y[n * D + j])) << "row " << n;
      else
        EXPECT_EQ(y[n * D + j], table[ids[n] * D + j]) << "row " << n;
    }

  const Floats dy = random_floats(N * D, 118);
  Floats dtable(V * D);
  for (const Piece &p : pieces)
    embed_backward_piece(dtable.data() + p.v0 * D, dy.data(), ids.data(), N,
                         p.Vp, D, p.v0, 1.f);
  Floats want(V * D);
  for (int64_t n : {0, 2, 4})
    std::copy(dy.begin() + n * D, dy.begin() + (n + 1) * D,
              want.begin() + ids[n] * D);
  EXPECT_TRUE(bitwise_equal(dtable, want));
}

} // namespace
} // namespace mtrt::test
