//===- AttentionTest.cpp - causal GQA attention against an S x S reference ===//

#include "runtime/kernels/Kernels.h"
#include "tests/unit/runtime/kernels/Reference.h"

namespace mtrt::test {
namespace {

using namespace mtrt::cpu;

struct Dims {
  int64_t B, H, Hkv, S, D;
  float scale;
  const float *slopes = nullptr; // ALiBi, one per query head
  int64_t window = 0;            // keys i - window < j <= i; 0: all j <= i
  int64_t chunk = 0;             // keys of i's chunk of `chunk`; 0: all j <= i
  float softcap = 0.f;           // scores s become softcap · tanh(s / softcap)
  bool sinks = false;            // a 4th input: one softmax logit per head
  bool seq_major = false;        // q, k, v (B, S, heads, D)
};

// The first key query i sees.
int64_t first_key(const Dims &d, int64_t i) {
  const int64_t window = d.window ? std::max<int64_t>(0, i - d.window + 1) : 0;
  return d.chunk ? std::max(window, i / d.chunk * d.chunk) : window;
}
KeyRange keys_of(const Dims &d) { return {d.window, d.chunk}; }
HeadLayout layout_of(const Dims &d) { return {d.seq_major}; }

// Row (b, h, i) of a tensor of `heads` heads.
int64_t row_at(const Dims &d, int64_t heads, int64_t b, int64_t h, int64_t i) {
  return (d.seq_major ? (b * d.S + i) * heads + h : (b * heads + h) * d.S + i) *
         d.D;
}
int64_t q_at(const Dims &d, int64_t b, int64_t h, int64_t i) {
  return row_at(d, d.H, b, h, i);
}
int64_t kv_at(const Dims &d, int64_t b, int64_t h, int64_t j) {
  return row_at(d, d.Hkv, b, h / (d.H / d.Hkv), j);
}

// s = scale · q_i · k_j for query (b, h, i) and key j.
double scaled_product(const std::vector<Doubles> &in, const Dims &d, int64_t b,
                      int64_t h, int64_t i, int64_t j) {
  double s = 0.0;
  for (int64_t e = 0; e < d.D; ++e)
    s += in[0][q_at(d, b, h, i) + e] * in[1][kv_at(d, b, h, j) + e];
  return d.scale * s;
}
// What s becomes before the softmax (softcap · tanh(s / softcap) under a
// cap, else s), and that function's slope at s.
double capped(const Dims &d, double s) {
  return d.softcap ? d.softcap * std::tanh(s / d.softcap) : s;
}
double cap_slope(const Dims &d, double s) {
  const double t = d.softcap ? std::tanh(s / d.softcap) : 0.0;
  return 1.0 - t * t;
}

// The causal softmax row of query (b, h, i) over its keys first_key..i,
// indexed by key, then the sink's probability if the head has one (0 if
// not). ALiBi adds m_h · j here, as BLOOM writes it: the kernels' m_h · (j −
// i) differs by a constant per row, which the softmax cancels (the sink's
// logit is not biased, so with both it would not: no test combines them).
Doubles probabilities(const std::vector<Doubles> &in, const Dims &d, int64_t b,
                      int64_t h, int64_t i) {
  Doubles p(i + 2);
  const double sink = d.sinks ? in[3][h] : -INFINITY;
  double max = sink, sum = 0.0;
  for (int64_t j = first_key(d, i); j <= i; ++j) {
    p[j] = capped(d, scaled_product(in, d, b, h, i, j)) +
           (d.slopes ? double(d.slopes[h]) * double(j) : 0.0);
    max = std::max(max, p[j]);
  }
  for (int64_t j = first_key(d, i); j <= i; ++j)
    sum += p[j] = std::exp(p[j] - max);
  sum += p[i + 1] = std::exp(sink - max);
  for (double &x : p)
    x /= sum;
  return p;
}

// inputs: q (B, H, S, D), k, v (B, Hkv, S, D), or each seq-major.
Doubles ref_forward(const std::vector<Doubles> &in, const Dims &d) {
  Doubles y(in[0].size());
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h)
      for (int64_t i = 0; i < d.S; ++i) {
        const Doubles p = probabilities(in, d, b, h, i);
        for (int64_t j = first_key(d, i); j <= i; ++j)
          for (int64_t e = 0; e < d.D; ++e)
            y[q_at(d, b, h, i) + e] += p[j] * in[2][kv_at(d, b, h, j) + e];
      }
  return y;
}

// Each row's log-sum-exp as the forward keeps it: log Σ_j exp(score_ij)
// with ALiBi's m_h · (j − i) (BLOOM's m_h · j would add m_h · i: the
// softmax cancels it, the log-sum-exp does not), the sink's logit included.
Doubles ref_lse(const std::vector<Doubles> &in, const Dims &d) {
  Doubles lse(d.B * d.H * d.S);
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h)
      for (int64_t i = 0; i < d.S; ++i) {
        Doubles s;
        for (int64_t j = first_key(d, i); j <= i; ++j)
          s.push_back(capped(d, scaled_product(in, d, b, h, i, j)) +
                      (d.slopes ? double(d.slopes[h]) * double(j - i) : 0.0));
        if (d.sinks)
          s.push_back(in[3][h]);
        const double max = *std::max_element(s.begin(), s.end());
        double sum = 0.0;
        for (double x : s)
          sum += std::exp(x - max);
        lse[(b * d.H + h) * d.S + i] = max + std::log(sum);
      }
  return lse;
}

// {dq, dk, dv[, dsinks]}: dv_j += p_ij·dy_i; ds_ij = p_ij·(dy_i·v_j -
// Σ_l p_il·dy_i·v_l) times the soft cap's slope; dq_i += scale·Σ_j
// ds_ij·k_j; dk_j += scale·ds_ij·q_i; the sink, whose value is 0, gets
// p_sink·(0 - Σ_l p_il·dy_i·v_l).
std::vector<Doubles>
ref_backward(const Doubles &dy, const std::vector<Doubles> &in, const Dims &d) {
  Doubles dq(in[0].size()), dk(in[1].size()), dv(in[2].size()), dsinks(d.H);
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h)
      for (int64_t i = 0; i < d.S; ++i) {
        const Doubles p = probabilities(in, d, b, h, i);
        const int64_t qi = q_at(d, b, h, i);
        Doubles dp(i + 1);
        double expected = 0.0;
        for (int64_t j = first_key(d, i); j <= i; ++j) {
          for (int64_t e = 0; e < d.D; ++e)
            dp[j] += dy[qi + e] * in[2][kv_at(d, b, h, j) + e];
          expected += p[j] * dp[j];
        }
        dsinks[h] -= p[i + 1] * expected;
        for (int64_t j = first_key(d, i); j <= i; ++j) {
          const double ds = p[j] * (dp[j] - expected) *
                            cap_slope(d, scaled_product(in, d, b, h, i, j));
          const int64_t kj = kv_at(d, b, h, j);
          for (int64_t e = 0; e < d.D; ++e) {
            dv[kj + e] += p[j] * dy[qi + e];
            dq[qi + e] += d.scale * ds * in[1][kj + e];
            dk[kj + e] += d.scale * ds * in[0][qi + e];
          }
        }
      }
  if (d.sinks)
    return {dq, dk, dv, dsinks};
  return {dq, dk, dv};
}

// q, k, v and, with sinks, logits around the scores' size (sinks well
// below every score would not matter).
std::vector<Floats> inputs(const Dims &d, float range = 1.f) {
  std::vector<Floats> in{
      random_floats(d.B * d.H * d.S * d.D, 51, -range, range),
      random_floats(d.B * d.Hkv * d.S * d.D, 52, -range, range),
      random_floats(d.B * d.Hkv * d.S * d.D, 53, -range, range)};
  if (d.sinks)
    in.push_back(random_floats(d.H, 50, -1.f, 2.f));
  return in;
}
const float *sinks_of(const std::vector<Floats> &in) {
  return in.size() > 3 ? in[3].data() : nullptr;
}

// Grouped (H = 4, Hkv = 2), plain multi-head (H = Hkv), multi-query (Hkv = 1).
const Dims kHeads[] = {
    {1, 4, 2, 5, 3, 0.6f}, {2, 2, 2, 4, 3, 0.6f}, {1, 3, 1, 4, 2, 0.7f}};

// ALiBi slopes of BLOOM's form for 4 heads (2^-2, 2^-4, ...) and a larger
// one: over 130 keys the bias reaches -130·0.9.
const float kSlopes[] = {0.25f, 0.0625f, 0.015625f, 0.9f};

// Causal, with ALiBi, with a window of 2 keys, soft-capped, and together;
// with sinks (windowed, soft-capped), without ALiBi; in chunks of 3 keys.
// plain_causal(S) says that visible() hides no earlier key from any of S
// queries: checked against visible() itself over small ranges.
TEST(KeyRange, PlainCausalIsEveryEarlierKeyVisible) {
  for (int64_t S = 1; S <= 12; ++S)
    for (int64_t w = 0; w <= 14; ++w)
      for (int64_t c = 0; c <= 14; ++c) {
        const KeyRange r{w, c};
        bool all = true;
        for (int64_t i = 0; i < S; ++i)
          for (int64_t j = 0; j <= i; ++j)
            all = all && r.visible(i, j);
        EXPECT_EQ(r.plain_causal(S), all)
            << "S " << S << " window " << w << " chunk " << c;
      }
}

TEST(Attention, ReferenceBackwardMatchesFiniteDifferences) {
  for (int form = 0; form < 14; ++form)
    for (Dims d : kHeads) {
      d.sinks = form >= 8 && form < 12;
      d.slopes = form & 1 && !d.sinks ? kSlopes : nullptr;
      d.window = form & 2 ? 2 : 0;
      d.softcap = form & 4 ? 0.5f : 0.f;
      d.chunk = form >= 12 ? 3 : 0;
      d.seq_major = form % 3 == 0;
      const std::vector<Doubles> in = widen(inputs(d));
      const Doubles dy = widen(random_floats(in[0].size(), 54));
      EXPECT_TRUE(matches_finite_differences(
          [&](const std::vector<Doubles> &x) { return ref_forward(x, d); }, in,
          dy, ref_backward(dy, in, d)))
          << "H=" << d.H << " Hkv=" << d.Hkv << " form " << form;
    }
}

// Heads-major and sequence-major: the same inputs, laid out each way.
void check_kernels(Dims d, float range, double rtol);
void check_kernels_in(const Dims &d, float range, double rtol) {
  const std::vector<Floats> in = inputs(d, range);
  Floats y(in[0].size()), lse(y.size() / d.D);
  attention_forward(y.data(), lse.data(), in[0].data(), in[1].data(),
                    in[2].data(), d.B, d.H, d.Hkv, d.S, d.D, d.scale,
                    keys_of(d), d.softcap, d.slopes, sinks_of(in),
                    layout_of(d));
  EXPECT_TRUE(close(y, ref_forward(widen(in), d), rtol))
      << "H=" << d.H << " Hkv=" << d.Hkv << " S=" << d.S
      << " seq-major=" << d.seq_major;
  EXPECT_TRUE(close(lse, ref_lse(widen(in), d), rtol))
      << "lse, H=" << d.H << " Hkv=" << d.Hkv << " S=" << d.S;

  const Floats dy = random_floats(y.size(), 55);
  const std::vector<Doubles> want = ref_backward(widen(dy), widen(in), d);
  Floats dq = random_floats(in[0].size(), 56),
         dk = random_floats(in[1].size(), 57),
         dv = random_floats(in[2].size(), 58);
  Floats dsinks = random_floats(d.H, 59);
  const Floats dq0 = dq, dk0 = dk, dv0 = dv, dsinks0 = dsinks;
  Floats delta(y.size() / d.D);
  attention_delta(delta.data(), dy.data(), y.data(), d.B, d.H, d.S, d.D,
                  layout_of(d));
  attention_backward(dq.data(), dk.data(), dv.data(), dy.data(), in[0].data(),
                     in[1].data(), in[2].data(), delta.data(), lse.data(), d.B,
                     d.H, d.Hkv, d.S, d.D, d.scale, keys_of(d), d.softcap,
                     d.slopes, sinks_of(in), d.sinks ? dsinks.data() : nullptr,
                     /*accumulate=*/true, layout_of(d));
  EXPECT_TRUE(close(added(dq, dq0), want[0], rtol)) << "dq, H=" << d.H;
  EXPECT_TRUE(close(added(dk, dk0), want[1], rtol)) << "dk, H=" << d.H;
  EXPECT_TRUE(close(added(dv, dv0), want[2], rtol)) << "dv, H=" << d.H;
  // Not asked to accumulate, the gradients are written over what the
  // buffers held (NaN).
  Floats wq(dq.size(), std::nanf("")), wk(dk.size(), std::nanf("")),
      wv(dv.size(), std::nanf(""));
  attention_backward(wq.data(), wk.data(), wv.data(), dy.data(), in[0].data(),
                     in[1].data(), in[2].data(), delta.data(), lse.data(), d.B,
                     d.H, d.Hkv, d.S, d.D, d.scale, keys_of(d), d.softcap,
                     d.slopes, sinks_of(in), nullptr, /*accumulate=*/false,
                     layout_of(d));
  EXPECT_TRUE(close(wq, want[0], rtol)) << "dq written, H=" << d.H;
  EXPECT_TRUE(close(wk, want[1], rtol)) << "dk written, H=" << d.H;
  EXPECT_TRUE(close(wv, want[2], rtol)) << "dv written, H=" << d.H;
  if (d.sinks)
    EXPECT_TRUE(close(added(dsinks, dsinks0), want[3], rtol))
        << "dsinks, H=" << d.H;
}
void check_kernels(Dims d, float range, double rtol) {
  for (bool seq_major : {false, true}) {
    d.seq_major = seq_major;
    check_kernels_in(d, range, rtol);
  }
}

// S = 130 spans two full key tiles of the online softmax and a partial one.
// Softmax sums over ≤ 130 terms of size ≤ 1 and dot products over D = 16:
// errors stay near √S·2^-24.
TEST(Attention, MatchesReference) {
  for (Dims d : kHeads) {
    d.S = 130;
    d.D = 16;
    d.scale = 0.25f;
    check_kernels(d, 1.f, 1e-5);
  }
}

// Scores near ±100: without the max subtraction exp overflows. Scores carry
// an fp32 error of ~100·2^-24·√D, which the exponentials turn into relative
// errors of a few 1e-5 in the outputs.
TEST(Attention, LargeScoresStayAccurate) {
  check_kernels({2, 4, 2, 70, 16, 1.f}, 5.f, 2e-4);
}

// ALiBi over two key tiles and a partial one.
TEST(Attention, AlibiMatchesReference) {
  for (Dims d : kHeads) {
    d.S = 130;
    d.D = 16;
    d.scale = 0.25f;
    d.slopes = kSlopes;
    check_kernels(d, 1.f, 1e-5);
  }
}

// Windows inside a key tile, across tiles, and one key (the diagonal).
TEST(Attention, SlidingWindowMatchesReference) {
  for (int64_t window : {int64_t(1), int64_t(7), int64_t(100)})
    for (Dims d : kHeads) {
      d.S = 130;
      d.D = 16;
      d.scale = 0.25f;
      d.window = window;
      d.slopes = window == 7 ? kSlopes : nullptr;
      check_kernels(d, 1.f, 1e-5);
    }
}

// Chunks (Llama 4): one key, inside a key tile, a tile's width, across
// tiles; with ALiBi, with sinks, and under a window shorter than the chunk.
TEST(Attention, ChunksMatchReference) {
  const int64_t forms[][2] = {{1, 0},   {5, 0},  {64, 0},
                              {100, 0}, {50, 7}, {5, 100}};
  for (int f = 0; f < 6; ++f)
    for (Dims d : kHeads) {
      d.S = 130;
      d.D = 16;
      d.scale = 0.25f;
      d.chunk = forms[f][0];
      d.window = forms[f][1];
      d.slopes = f == 1 ? kSlopes : nullptr;
      d.sinks = f == 3;
      check_kernels(d, 1.f, 1e-5);
    }
}

// Soft-capped scores (Gemma 2's form, with a cap small enough to bend the
// scores: |s| reaches ~4 against a cap of 2), alone, with ALiBi, with a
// window.
TEST(Attention, SoftcapMatchesReference) {
  for (int form = 0; form < 3; ++form)
    for (Dims d : kHeads) {
      d.S = 130;
      d.D = 16;
      d.scale = 0.5f;
      d.softcap = 2.f;
      d.slopes = form == 1 ? kSlopes : nullptr;
      d.window = form == 2 ? 7 : 0;
      check_kernels(d, 1.f, 1e-5);
    }
}

// Sinks (gpt-oss), causal, in a window inside a key tile and across tiles,
// soft-capped.
TEST(Attention, SinksMatchReference) {
  for (int form = 0; form < 4; ++form)
    for (Dims d : kHeads) {
      d.S = 130;
      d.D = 16;
      d.scale = 0.25f;
      d.sinks = true;
      d.window = form == 1 ? 7 : form == 2 ? 100 : 0;
      d.softcap = form == 3 ? 2.f : 0.f;
      check_kernels(d, 1.f, 1e-5);
    }
}

// δ of rows of 70 (a tail the vector loop leaves) against a double loop,
// in (B, H, S) order from either layout.
TEST(Attention, DeltaMatchesNaiveLoop) {
  for (bool seq_major : {false, true}) {
    Dims d{2, 3, 3, 5, 70, 1.f};
    d.seq_major = seq_major;
    const int64_t rows = d.B * d.H * d.S;
    const Floats dy = random_floats(rows * d.D, 80),
                 y = random_floats(rows * d.D, 81);
    Floats delta(rows);
    attention_delta(delta.data(), dy.data(), y.data(), d.B, d.H, d.S, d.D,
                    layout_of(d));
    Doubles want(rows);
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t h = 0; h < d.H; ++h)
        for (int64_t i = 0; i < d.S; ++i)
          for (int64_t e = 0; e < d.D; ++e)
            want[(b * d.H + h) * d.S + i] +=
                double(dy[q_at(d, b, h, i) + e]) * y[q_at(d, b, h, i) + e];
    EXPECT_TRUE(close(delta, want, 1e-6)) << "seq-major " << seq_major;
  }
}

TEST(Attention, AccumulatesSkipsNullAndDeterministic) {
  const Dims d = {2, 4, 2, 33, 8, 0.35f, kSlopes};
  const Floats sinks = random_floats(d.H, 60);
  const std::vector<Floats> in = inputs(d);
  const Floats dy = random_floats(in[0].size(), 59);
  Floats y(in[0].size()), delta(in[0].size() / d.D), lse(delta.size());
  attention_forward(y.data(), lse.data(), in[0].data(), in[1].data(),
                    in[2].data(), d.B, d.H, d.Hkv, d.S, d.D, d.scale,
                    keys_of(d), d.softcap, d.slopes, sinks.data(),
                    layout_of(d));
  attention_delta(delta.data(), dy.data(), y.data(), d.B, d.H, d.S, d.D,
                  layout_of(d));
  const auto backward = [&](float *dq, float *dk, float *dv, float *ds) {
    attention_backward(dq, dk, dv, dy.data(), in[0].data(), in[1].data(),
                       in[2].data(), delta.data(), lse.data(), d.B, d.H, d.Hkv,
                       d.S, d.D, d.scale, keys_of(d), d.softcap, d.slopes,
                       sinks.data(), ds, /*accumulate=*/true, layout_of(d));
  };
  Floats dq(in[0].size()), dk(in[1].size()), dv(in[2].size()), ds(d.H);
  expect_accumulates({&dq, &dk, &dv, &ds}, [&] {
    backward(dq.data(), dk.data(), dv.data(), ds.data());
  });

  Floats fq(dq.size()), fk(dk.size()), fv(dv.size()), fs(d.H);
  backward(fq.data(), fk.data(), fv.data(), fs.data());
  Floats gq(dq.size()), gk(dk.size()), gv(dv.size()), gs(d.H);
  backward(gq.data(), gk.data(), gv.data(), gs.data());
  EXPECT_TRUE(bitwise_equal(fq, gq));
  EXPECT_TRUE(bitwise_equal(fk, gk));
  EXPECT_TRUE(bitwise_equal(fv, gv));
  EXPECT_TRUE(bitwise_equal(fs, gs));
  Floats only_q(dq.size()), only_k(dk.size()), only_v(dv.size()), only_s(d.H);
  backward(only_q.data(), nullptr, nullptr, nullptr);
  backward(nullptr, only_k.data(), nullptr, nullptr);
  backward(nullptr, nullptr, only_v.data(), nullptr);
  backward(nullptr, nullptr, nullptr, only_s.data());
  EXPECT_TRUE(bitwise_equal(only_q, fq));
  EXPECT_TRUE(bitwise_equal(only_k, fk));
  EXPECT_TRUE(bitwise_equal(only_v, fv));
  EXPECT_TRUE(bitwise_equal(only_s, fs));

  Floats y1(in[0].size()), y2(in[0].size());
  for (Floats *y : {&y1, &y2})
    attention_forward(y->data(), nullptr, in[0].data(), in[1].data(),
                      in[2].data(), d.B, d.H, d.Hkv, d.S, d.D, d.scale,
                      keys_of(d), d.softcap, d.slopes, sinks.data(),
                      layout_of(d));
  EXPECT_TRUE(bitwise_equal(y1, y2));
}

} // namespace
} // namespace mtrt::test
