//===- HostStoreTest.cpp - packing, accumulation and the deferred AdamW ---===//

#include "ToyProgram.h"
#include "ToyRun.h"

#include "runtime/exec/HostStore.h"
#include "runtime/host/Bf16.h"
#include "runtime/host/ThreadPool.h"
#include "runtime/kernels/Kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

using namespace mtrt;
using namespace mtrt::toy;

namespace {

// The toy's unit u3 packs head.weight (D, V) = embed.weight (V, D)
// transposed at 0, head.bias at 96 and the frozen scale at 112.
TEST(HostStoreTest, PackTransposesATiedParamAndCopiesConstants) {
  ToyProgram toy(2);
  HostStore store(toy.program(), StorageFormat::F32, OptimizerConfig{});
  load_toy_weights(store, 3);
  std::vector<float> staging(128, -7.0f);
  host::ThreadPool pool(2);
  store.pack(3, staging.data(), &pool);
  const float *E = store.values(kEmbed);
  for (int64_t d = 0; d < D; ++d)
    for (int64_t v = 0; v < V; ++v)
      ASSERT_EQ(staging[d * V + v], E[v * D + d]) << d << "," << v;
  for (int64_t v = 0; v < V; ++v)
    EXPECT_EQ(staging[96 + v], store.values(kHeadB)[v]);
  for (int64_t d = 0; d < D; ++d)
    EXPECT_EQ(staging[112 + d], store.values(kScale)[d]);
  EXPECT_EQ(staging[95], -7.0f); // padding is left alone
}

TEST(HostStoreTest, PackRoundsToBf16InBf16Modes) {
  ToyProgram toy(2);
  HostStore rounded(toy.program(), StorageFormat::F32RoundedBf16, {});
  HostStore bf16(toy.program(), StorageFormat::Bf16, {});
  load_toy_weights(rounded, 3);
  load_toy_weights(bf16, 3);
  std::vector<float> a(128);
  std::vector<uint16_t> b(128);
  rounded.pack(1, a.data(), nullptr);
  bf16.pack(1, b.data(), nullptr);
  std::vector<float> want(rounded.values(kW0), rounded.values(kW0) + D * D);
  cpu::round_to_bf16(want.data(), int64_t(want.size()));
  for (int64_t i = 0; i < D * D; ++i) {
    EXPECT_EQ(a[i], want[i]);
    uint32_t bits;
    std::memcpy(&bits, &want[i], 4);
    EXPECT_EQ(b[i], uint16_t(bits >> 16));
  }
}

TEST(HostStoreTest, AccumulateAddsTransposedTieIntoItsPrimary) {
  ToyProgram toy(2);
  HostStore store(toy.program(), StorageFormat::F32, {});
  std::vector<float> g0(128), g3(128);
  for (int i = 0; i < 128; ++i) {
    g0[i] = float(i) * 0.5f;
    g3[i] = float(i) * 0.25f + 1.0f;
  }
  host::ThreadPool pool(3);
  store.accumulate(0, g0.data(), &pool);
  store.accumulate(3, g3.data(), &pool);
  store.accumulate(3, g3.data(), nullptr);
  const float *acc = store.grad(kEmbed);
  for (int64_t v = 0; v < V; ++v)
    for (int64_t d = 0; d < D; ++d)
      ASSERT_EQ(acc[v * D + d], g0[v * D + d] + g3[d * V + v] + g3[d * V + v]);
  for (int64_t v = 0; v < V; ++v)
    EXPECT_EQ(store.grad(kHeadB)[v], 2 * g3[96 + v]);
}

// bf16 masters hold what an fp32 store holds once its values are bf16 ones:
// packing gives the same staging (f32 and bf16), accumulating exact sums
// gives the same gradients and norm, and AdamW gives the same moments and
// the fp32 update rounded to a bf16 neighbour. The store is 12 B/param.
TEST(HostStoreTest, Bf16MastersAgreeWithAnFp32StoreOnBf16Values) {
  ToyProgram toy(2);
  Program p16 = toy.program();
  p16.master = MasterFormat::Bf16;
  OptimizerConfig c;
  c.clip_grad = 0; // so that both scale the gradients alike
  HostStore f32(toy.program(), StorageFormat::F32, c);
  HostStore b16(p16, StorageFormat::F32, c);
  load_toy_weights(f32, 3);
  load_toy_weights(b16, 3);
  const int trainable[] = {kEmbed, kW0, kB0, kW1, kB1, kHeadB, kGain};
  for (int q : trainable) {
    ASSERT_EQ(b16.values(q), nullptr);
    cpu::round_to_bf16(f32.values(q), toy.program().params[q].numel);
  }
  host::ThreadPool pool(2);
  for (int u = 0; u < toy.program().num_units; ++u) {
    std::vector<float> a(128, -1.0f), b(128, -1.0f);
    f32.pack(u, a.data(), &pool);
    b16.pack(u, b.data(), &pool);
    EXPECT_EQ(a, b) << "unit " << u;
    HostStore f32_bf16(toy.program(), StorageFormat::Bf16, c);
    HostStore b16_bf16(p16, StorageFormat::Bf16, c);
    std::vector<uint16_t> x(128, 1), y(128, 1);
    load_toy_weights(f32_bf16, 3);
    load_toy_weights(b16_bf16, 3);
    f32_bf16.pack(u, x.data(), nullptr);
    b16_bf16.pack(u, y.data(), nullptr);
    EXPECT_EQ(x, y) << "unit " << u << ", bf16 staging";
    // Small integers: every partial sum is exact in bf16.
    std::vector<float> g(128);
    for (int i = 0; i < 128; ++i)
      g[i] = float((i * 7 + u) % 16);
    f32.accumulate(u, g.data(), &pool);
    b16.accumulate(u, g.data(), &pool);
  }
  for (int q : trainable)
    for (int64_t i = 0; i < toy.program().params[q].numel; ++i)
      ASSERT_EQ(bf16_widen(b16.grad_bf16(q)[i]), f32.grad(q)[i]) << q << "," << i;
  EXPECT_EQ(b16.compute_grad_norm(&pool), f32.compute_grad_norm(&pool));

  f32.schedule_update(1, 1e-2);
  b16.schedule_update(1, 1e-2);
  f32.flush(&pool);
  b16.flush(&pool);
  int64_t rounded_up = 0, trained = 0;
  for (int q : trainable)
    for (int64_t i = 0; i < toy.program().params[q].numel; ++i, ++trained) {
      ASSERT_EQ(b16.adam_m(q)[i], f32.adam_m(q)[i]);
      ASSERT_EQ(b16.adam_v(q)[i], f32.adam_v(q)[i]);
      ASSERT_EQ(b16.grad_bf16(q)[i], 0) << "accumulators are zeroed";
      uint32_t bits;
      std::memcpy(&bits, &f32.values(q)[i], 4);
      const uint16_t got = b16.values_bf16(q)[i];
      ASSERT_TRUE(got == bits >> 16 || got == (bits >> 16) + 1) << q << "," << i;
      rounded_up += got != bits >> 16;
    }
  EXPECT_GT(rounded_up, 0);
  EXPECT_LT(rounded_up, trained);
  const int64_t constants = toy.program().params[kScale].numel;
  EXPECT_EQ(b16.bytes(), 12 * b16.trainable_params() + 4 * constants);
  EXPECT_EQ(f32.bytes(), 16 * f32.trainable_params() + 4 * constants);
  EXPECT_EQ(HostStore::bytes_for(p16), b16.bytes());
  EXPECT_EQ(HostStore::bytes_for(toy.program()), f32.bytes());
}

// torch.optim.AdamW's update in float, in AdamW.h's order, for one param.
void reference_adamw(std::vector<float> &p, std::vector<float> &m,
                     std::vector<float> &v, const std::vector<float> &g,
                     double lr, double wd, int64_t k, float scale,
                     const OptimizerConfig &c) {
  const float decay = float(1.0 - lr * wd);
  const float b1 = float(c.beta1), b2 = float(c.beta2);
  const float omb1 = float(1.0 - c.beta1), omb2 = float(1.0 - c.beta2);
  const float bc2 = float(std::sqrt(1.0 - std::pow(c.beta2, double(k))));
  const float step = float(-lr / (1.0 - std::pow(c.beta1, double(k))));
  for (size_t i = 0; i < p.size(); ++i) {
    float gi = g[i] * scale;
    p[i] = p[i] * decay;
    m[i] = m[i] * b1 + omb1 * gi;
    v[i] = v[i] * b2 + (omb2 * gi) * gi;
    p[i] = p[i] + (step * m[i]) / (std::sqrt(v[i]) / bc2 + float(c.eps));
  }
}

TEST(HostStoreTest, DeferredAdamWEqualsAnImmediateScalarReference) {
  ToyProgram toy(2);
  const Program &p = toy.program();
  OptimizerConfig c;
  c.clip_grad = 0.05; // small enough to clip
  HostStore store(p, StorageFormat::F32, c);
  load_toy_weights(store, 5);
  host::ThreadPool pool(2);

  const int trainable[] = {kEmbed, kW0, kB0, kW1, kB1, kHeadB, kGain};
  std::vector<std::vector<float>> P(kNumParams), M(kNumParams), Vv(kNumParams);
  for (int q : trainable) {
    P[q].assign(store.values(q), store.values(q) + p.params[q].numel);
    M[q].assign(P[q].size(), 0.0f);
    Vv[q].assign(P[q].size(), 0.0f);
  }
  const double lrs[] = {1e-2, 5e-3, 2e-3};
  for (int step = 0; step < 3; ++step) {
    // This step's gradients: AdamW of the previous step must have zeroed the
    // accumulators (checked), then they are filled again.
    std::vector<std::vector<float>> G(kNumParams);
    double sq = 0;
    for (int q : trainable) {
      G[q].resize(P[q].size());
      for (size_t i = 0; i < G[q].size(); ++i) {
        G[q][i] = float(std::sin(double(i * 7 + q * 13 + step * 5)));
        sq += double(G[q][i]) * G[q][i];
        ASSERT_EQ(store.grad(q)[i], 0.0f);
        store.grad(q)[i] = G[q][i];
      }
    }
    double norm = store.compute_grad_norm(&pool);
    EXPECT_NEAR(norm, std::sqrt(sq), 1e-9 * std::sqrt(sq));
    float scale = float(std::min(1.0, c.clip_grad / (norm + 1e-6)));
    EXPECT_LT(scale, 1.0f);
    store.schedule_update(step + 1, lrs[step]);
    for (int q : trainable)
      reference_adamw(P[q], M[q], Vv[q], G[q], lrs[step],
                      p.params[q].rank >= 2 ? c.weight_decay : 0.0, step + 1,
                      scale, c);
    // Deferred: nothing moves until the unit's AdamW runs.
    EXPECT_TRUE(store.pending(0));
    EXPECT_NE(store.values(kW0)[0], P[kW0][0]);
    for (int u = 0; u < 4; ++u)
      store.adamw(u, &pool);
    store.adamw(1, &pool); // a second call is a no-op
    EXPECT_FALSE(store.any_pending());
    for (int q : trainable)
      for (size_t i = 0; i < P[q].size(); ++i) {
        ASSERT_FLOAT_EQ(store.values(q)[i], P[q][i]) << p.params[q].name;
        ASSERT_FLOAT_EQ(store.adam_m(q)[i], M[q][i]);
        ASSERT_FLOAT_EQ(store.adam_v(q)[i], Vv[q][i]);
      }
  }
}

// The toy's head (u3) adds into the embedding's accumulator through its
// transposed tie, so the embedding's kept sum of squares is stale once the
// head accumulates again; the norm must still be the one of every
// accumulator, summed in double here.
TEST(HostStoreTest, KeptUnitSumsOfSquaresGiveTheGlobalNorm) {
  ToyProgram toy(2);
  const Program &p = toy.program();
  HostStore store(p, StorageFormat::F32, {});
  EXPECT_EQ(store.accumulated_owners(1, 0), std::vector<int>{1});
  EXPECT_EQ(store.accumulated_owners(3, 0), (std::vector<int>{0, 3}));
  EXPECT_EQ(store.accumulated_owners(3, 0, 96), std::vector<int>{0});
  EXPECT_EQ(store.accumulated_owners(3, 96, 16), std::vector<int>{3});
  EXPECT_TRUE(store.accumulated_owners(3, 112, 8).empty()); // frozen scale

  host::ThreadPool pool(2);
  auto land = [&](int u, float scale) {
    std::vector<float> g(128);
    for (int i = 0; i < 128; ++i)
      g[i] = scale * float((i * 5 + u) % 13 - 6);
    store.accumulate(u, g.data(), &pool);
  };
  auto reference = [&] {
    double sq = 0;
    for (int q : {kEmbed, kW0, kB0, kW1, kB1, kHeadB, kGain})
      for (int64_t i = 0; i < p.params[q].numel; ++i)
        sq += double(store.grad(q)[i]) * double(store.grad(q)[i]);
    return std::sqrt(sq);
  };
  for (int u = 0; u < p.num_units; ++u)
    land(u, 0.5f);
  for (int u = 0; u < p.num_units; ++u)
    store.sum_unit_squares(u, &pool);
  EXPECT_NEAR(store.compute_grad_norm(&pool), reference(), 1e-12 * reference());

  for (int u = 0; u < p.num_units; ++u)
    store.sum_unit_squares(u, &pool);
  land(3, 3.0f); // changes the embedding's and the head's sums
  const double want = reference();
  EXPECT_NEAR(store.compute_grad_norm(&pool), want, 1e-12 * want);

  // An update zeroes the unit's accumulators: its kept sum goes with them.
  for (int u = 0; u < p.num_units; ++u)
    store.sum_unit_squares(u, &pool);
  store.schedule_update(1, 1e-3);
  store.adamw(1, &pool);
  EXPECT_NEAR(store.compute_grad_norm(&pool), reference(), 1e-12 * want);
  store.zero_grads();
  EXPECT_EQ(store.compute_grad_norm(&pool), 0.0);
}

// One unit large enough for several pool parts and update blocks per
// param: w0 [300, 257], b0 [1000] (no decay), w1 [200, 300], packed in that
// order, all owned.
struct WideUnitProgram {
  ParamDesc params[3] = {
      {"w0", 2, {300, 257, 0, 0}, 300 * 257, -1, false, false, 0},
      {"b0", 1, {1000, 0, 0, 0}, 1000, -1, false, false, 0},
      {"w1", 2, {200, 300, 0, 0}, 200 * 300, -1, false, false, 0}};
  int unit_params[3] = {0, 1, 2};
  int64_t offsets[3] = {0, 77100, 78100};
  UnitDesc units[1] = {
      {"wide", "layer", 138100, 3, unit_params, offsets, 3, unit_params}};
  Program program{"wide", "0", 1, 1, 8, 1, 3, params, 1, units};
};

// Packs that apply the pending update themselves (block by block, or all
// at once when a chunk does not start where the update got to) leave the
// same staging, masters, moments and accumulators, bit for bit, as AdamW
// then the packs. The first in-order chunk updates only what it packs.
void expect_packs_apply_the_update(MasterFormat master, StorageFormat format,
                                   const std::vector<int64_t> &chunks) {
  WideUnitProgram wide;
  Program p = wide.program;
  p.master = master;
  OptimizerConfig c;
  c.clip_grad = 0.5;
  HostStore fused(p, format, c), plain(p, format, c);
  for (HostStore *s : {&fused, &plain})
    for (int q = 0; q < 3; ++q)
      for (int64_t i = 0; i < p.params[q].numel; ++i) {
        const float w = float(std::cos(double(i * 3 + q)));
        if (s->bf16_master())
          s->values_bf16(q)[i] = bf16_nearest(w);
        else
          s->values(q)[i] = w;
      }
  const int64_t elems = p.units[0].elems;
  const size_t esize = format == StorageFormat::Bf16 ? 2 : 4;
  host::ThreadPool pool(3);
  for (int step = 1; step <= 2; ++step) {
    std::vector<float> g(static_cast<size_t>(elems));
    for (int64_t i = 0; i < elems; ++i)
      g[size_t(i)] = float(std::sin(double(i * 7 + step)));
    for (HostStore *s : {&fused, &plain}) {
      s->accumulate(0, g.data(), &pool);
      s->compute_grad_norm(&pool);
      s->schedule_update(step, 1e-2);
    }
    plain.adamw(0, &pool);
    const float w1_before = fused.bf16_master()
                                ? bf16_widen(fused.values_bf16(2)[0])
                                : fused.values(2)[0];
    for (size_t k = 0; k + 1 < chunks.size(); k += 2) {
      const int64_t begin = chunks[k], count = chunks[k + 1];
      std::vector<char> a(size_t(count) * esize, 1), b(a.size(), 2);
      fused.pack(0, a.data(), &pool, begin, count);
      plain.pack(0, b.data(), &pool, begin, count);
      ASSERT_EQ(a, b) << "step " << step << ", chunk at " << begin;
      if (k == 0 && begin == 0 && count < 78100) { // w1 not packed yet
        EXPECT_TRUE(fused.pending(0));
        EXPECT_EQ(fused.bf16_master() ? bf16_widen(fused.values_bf16(2)[0])
                                      : fused.values(2)[0],
                  w1_before);
      }
    }
    EXPECT_FALSE(fused.pending(0));
    for (int q = 0; q < 3; ++q) {
      const size_t n = size_t(p.params[q].numel);
      if (fused.bf16_master()) {
        EXPECT_EQ(
            0, std::memcmp(fused.values_bf16(q), plain.values_bf16(q), 2 * n));
        EXPECT_EQ(0,
                  std::memcmp(fused.grad_bf16(q), plain.grad_bf16(q), 2 * n));
      } else {
        EXPECT_EQ(0, std::memcmp(fused.values(q), plain.values(q), 4 * n));
        EXPECT_EQ(0, std::memcmp(fused.grad(q), plain.grad(q), 4 * n));
      }
      EXPECT_EQ(0, std::memcmp(fused.adam_m(q), plain.adam_m(q), 4 * n));
      EXPECT_EQ(0, std::memcmp(fused.adam_v(q), plain.adam_v(q), 4 * n));
    }
  }
}

TEST(HostStoreTest, PacksApplyThePendingUpdateInOrder) {
  const std::vector<int64_t> chunks = {0, 50000, 50000, 50000, 100000, 38100};
  expect_packs_apply_the_update(MasterFormat::F32, StorageFormat::Bf16, chunks);
  expect_packs_apply_the_update(MasterFormat::F32, StorageFormat::F32, chunks);
  expect_packs_apply_the_update(MasterFormat::Bf16, StorageFormat::Bf16,
                                chunks);
  expect_packs_apply_the_update(MasterFormat::F32, StorageFormat::Bf16,
                                {0, 138100});
}

TEST(HostStoreTest, PacksOutOfOrderApplyTheWholeUpdateFirst) {
  expect_packs_apply_the_update(MasterFormat::F32, StorageFormat::Bf16,
                                {70000, 68100, 0, 70000});
  expect_packs_apply_the_update(MasterFormat::Bf16, StorageFormat::F32,
                                {0, 1000, 5000, 133100, 1000, 4000});
  // Packed again from the start: updated once only.
  expect_packs_apply_the_update(MasterFormat::F32, StorageFormat::F32,
                                {0, 1000, 0, 138100});
}

TEST(HostStoreTest, DecayOnlyOnRankTwoAndAbove) {
  ToyProgram toy(2);
  OptimizerConfig c;
  c.weight_decay = 0.5;
  HostStore store(toy.program(), StorageFormat::F32, c);
  load_toy_weights(store, 5);
  float w = store.values(kW0)[3], b = store.values(kB0)[3];
  store.compute_grad_norm(nullptr); // all zero
  store.schedule_update(1, 0.1);
  store.flush(nullptr);
  EXPECT_FLOAT_EQ(store.values(kW0)[3], w * float(1.0 - 0.1 * 0.5));
  EXPECT_EQ(store.values(kB0)[3], b);
}

TEST(HostStoreTest, ClipScale) {
  ToyProgram toy(1);
  OptimizerConfig c;
  c.clip_grad = 1.0;
  HostStore store(toy.program(), StorageFormat::F32, c);
  EXPECT_EQ(store.clip_scale(0.5), 1.0);
  EXPECT_DOUBLE_EQ(store.clip_scale(4.0), 1.0 / (4.0 + 1e-6));
  c.clip_grad = 0;
  HostStore off(toy.program(), StorageFormat::F32, c);
  EXPECT_EQ(off.clip_scale(1e9), 1.0);
}

// A [4, 6] weight stored [hidden, vocab] in two vocabulary pieces of 3
// columns each (PartKind::Columns), and a [6, 4] one in two row ranges
// (PartKind::Range): each piece packs its rows of the [vocab, hidden] view,
// adds gradients back where they came from, and its AdamW updates exactly
// its part. The oracle is the index arithmetic written out.
struct PiecesProgram {
  static constexpr int64_t R = 4, C = 6, H = 3; // H columns (rows) a piece
  ParamDesc params[2] = {
      {"w_cols", 2, {R, C, 0, 0}, R * C, -1, false, false, 0},
      {"w_rows", 2, {C, R, 0, 0}, C * R, -1, false, false, 0}};
  int unit_params[2] = {0, 1};
  int64_t offsets[2] = {0, 16};
  int owned[2] = {0, 1};
  PartKind kinds[2] = {PartKind::Columns, PartKind::Range};
  int64_t begin0[2] = {0, 0}, begin1[2] = {H, H * R};
  int64_t elems[2] = {H * R, H * R};
  UnitDesc units[2] = {
      {"piece0", "head", 32, 2, unit_params, offsets, 2, owned, kinds, begin0, elems},
      {"piece1", "head", 32, 2, unit_params, offsets, 2, owned, kinds, begin1, elems}};
  Program program{"pieces", "0", 1, 1, C, 1, 2, params, 2, units};
};

TEST(HostStoreTest, VocabularyPiecesPackAccumulateAndUpdateTheirParts) {
  PiecesProgram pp;
  const Program &p = pp.program;
  constexpr int64_t R = PiecesProgram::R, C = PiecesProgram::C,
                    H = PiecesProgram::H;
  HostStore store(p, StorageFormat::F32, OptimizerConfig{});
  for (int q = 0; q < 2; ++q)
    for (int64_t k = 0; k < R * C; ++k)
      store.values(q)[k] = float(100 * q + k);
  host::ThreadPool pool(2);
  for (int u = 0; u < 2; ++u) {
    std::vector<float> staging(32, -1.0f);
    store.pack(u, staging.data(), &pool);
    for (int64_t i = 0; i < H; ++i) // row i of the piece: vocab entry u*H+i
      for (int64_t j = 0; j < R; ++j) {
        EXPECT_EQ(staging[i * R + j], store.values(0)[j * C + u * H + i]);
        EXPECT_EQ(staging[16 + i * R + j],
                  store.values(1)[(u * H + i) * R + j]);
      }
    std::vector<float> g(32);
    for (int64_t k = 0; k < 32; ++k)
      g[k] = float(1000 * (u + 1) + k);
    store.accumulate(u, g.data(), &pool);
  }
  for (int u = 0; u < 2; ++u)
    for (int64_t i = 0; i < H; ++i)
      for (int64_t j = 0; j < R; ++j) {
        EXPECT_EQ(store.grad(0)[j * C + u * H + i], float(1000 * (u + 1) + i * R + j));
        EXPECT_EQ(store.grad(1)[(u * H + i) * R + j],
                  float(1000 * (u + 1) + 16 + i * R + j));
      }
  // Piece 1's update touches its columns and rows only.
  store.compute_grad_norm(nullptr);
  store.schedule_update(1, 0.1);
  std::vector<float> before(store.values(0), store.values(0) + R * C);
  store.adamw(1, &pool);
  for (int64_t j = 0; j < R; ++j)
    for (int64_t c = 0; c < C; ++c)
      EXPECT_EQ(store.values(0)[j * C + c] != before[size_t(j * C + c)],
                c >= H)
          << j << "," << c;
  for (int64_t k = 0; k < R * C; ++k)
    EXPECT_EQ(store.grad(1)[k] == 0.0f, k >= H * R) << k;
}

} // namespace
