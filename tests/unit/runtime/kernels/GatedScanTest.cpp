//===- GatedScanTest.cpp - the gated scans against float64 loops ----------===//
//
// The oracle is the recurrence written out literally in double, with and
// without the delta rule's correction, with a decay per head or per key
// channel; the gradients are checked against its central differences for
// all five inputs. T = 150 spans three of the backward's 64-position checkpoint
// chunks, the last one partial; Hv = 2·Hk makes dq and dk sum two value
// heads. k stays small (|k|² ≤ Dk / 4) so that beta·|k|² < 2 and the state
// does not grow without bound, as with the L2-normalized keys of the model.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/Kernels.h"
#include "tests/unit/runtime/kernels/Reference.h"

#include <cmath>

namespace mtrt::test {
namespace {

using namespace mtrt::cpu;

struct DeltaShape {
  int64_t B, T, Hk, Hv, Dk, Dv;
  int64_t qk() const { return B * T * Hk * Dk; }
  int64_t vo() const { return B * T * Hv * Dv; }
  int64_t gb() const { return B * T * Hv; }
};

// Which recurrence: the delta rule or not; a decay per key channel or not.
struct Rule {
  bool delta, key_decay;
};

// in: q, k, v, g, beta; the recurrence of Kernels.h, step by step.
Doubles ref_scan(const DeltaShape &s, const std::vector<Doubles> &in,
                 Rule rule) {
  const Doubles &q = in[0], &k = in[1], &v = in[2], &g = in[3], &beta = in[4];
  Doubles o(s.vo(), 0.0);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.Hv; ++h) {
      const int64_t hk = h / (s.Hv / s.Hk);
      Doubles S(s.Dk * s.Dv, 0.0);
      for (int64_t t = 0; t < s.T; ++t) {
        const double *qt = &q[((b * s.T + t) * s.Hk + hk) * s.Dk];
        const double *kt = &k[((b * s.T + t) * s.Hk + hk) * s.Dk];
        const double *vt = &v[((b * s.T + t) * s.Hv + h) * s.Dv];
        const int64_t gi = (b * s.T + t) * s.Hv + h;
        for (int64_t i = 0; i < s.Dk; ++i)
          for (int64_t j = 0; j < s.Dv; ++j)
            S[i * s.Dv + j] *=
                std::exp(rule.key_decay ? g[gi * s.Dk + i] : g[gi]);
        for (int64_t j = 0; j < s.Dv; ++j) {
          double u = 0.0;
          for (int64_t i = 0; rule.delta && i < s.Dk; ++i)
            u += S[i * s.Dv + j] * kt[i];
          const double w = beta[gi] * (vt[j] - u);
          for (int64_t i = 0; i < s.Dk; ++i)
            S[i * s.Dv + j] += kt[i] * w;
        }
        double *ot = &o[((b * s.T + t) * s.Hv + h) * s.Dv];
        for (int64_t j = 0; j < s.Dv; ++j)
          for (int64_t i = 0; i < s.Dk; ++i)
            ot[j] += S[i * s.Dv + j] * qt[i];
      }
    }
  return o;
}

std::vector<Floats> random_inputs(const DeltaShape &s, uint32_t seed,
                                  Rule rule) {
  return {
      random_floats(s.qk(), seed), random_floats(s.qk(), seed + 1, -.5f, .5f),
      random_floats(s.vo(), seed + 2),
      random_floats(s.gb() * (rule.key_decay ? s.Dk : 1), seed + 3, -2.f, 0.f),
      random_floats(s.gb(), seed + 4, 0.01f, 1.f)};
}

void forward(const DeltaShape &s, Floats &o, const std::vector<Floats> &in,
             Rule rule) {
  gated_scan_forward(o.data(), in[0].data(), in[1].data(), in[2].data(),
                     in[3].data(), in[4].data(), s.B, s.T, s.Hk, s.Hv, s.Dk,
                     s.Dv, rule.delta, rule.key_decay);
}

void backward(const DeltaShape &s, std::vector<Floats> &d, const Floats &dout,
              const std::vector<Floats> &in, Rule rule) {
  gated_scan_backward(ptr(d[0]), ptr(d[1]), ptr(d[2]), ptr(d[3]), ptr(d[4]),
                      dout.data(), in[0].data(), in[1].data(), in[2].data(),
                      in[3].data(), in[4].data(), s.B, s.T, s.Hk, s.Hv, s.Dk,
                      s.Dv, rule.delta, rule.key_decay);
}

// The gated delta rule (Qwen3.5), the plain gated scan (Mamba-2), and the
// delta rule with a decay per key channel (Kimi Delta Attention).
class GatedScan : public ::testing::TestWithParam<Rule> {};
INSTANTIATE_TEST_SUITE_P(Rules, GatedScan,
                         ::testing::Values(Rule{true, false},
                                           Rule{false, false},
                                           Rule{true, true}),
                         [](const auto &info) {
                           return info.param.key_decay ? "KeyDecay"
                                  : info.param.delta   ? "Delta"
                                                       : "Linear";
                         });

const DeltaShape kShapes[] = {
    {1, 150, 1, 2, 8, 6}, {1, 70, 2, 4, 5, 3}, {2, 9, 3, 3, 4, 7}};

// The f32 recurrence differs from the f64 one by rounding, a few ulps per
// step (observed ≤ 2e-7 normwise); a wrong term or index is off by O(1).
TEST_P(GatedScan, ForwardMatchesFloat64) {
  for (const DeltaShape &s : kShapes) {
    const std::vector<Floats> in = random_inputs(s, 1, GetParam());
    Floats o(s.vo());
    forward(s, o, in, GetParam());
    EXPECT_TRUE(close(o, ref_scan(s, widen(in), GetParam()), 1e-5))
        << "T=" << s.T;
  }
}

// Central differences with h = 1e-5 in double are exact to ~1e-9 here; the
// f32 backward differs by rounding (observed ≤ 2e-7 normwise per input), so
// 1e-5 passes it with margin and fails any wrong or missing term, which is
// off by O(1).
TEST_P(GatedScan, GradientsMatchCentralDifferencesOfFloat64) {
  for (const DeltaShape &s : kShapes) {
    const std::vector<Floats> in = random_inputs(s, 10, GetParam());
    const Floats dout = random_floats(s.vo(), 20);
    std::vector<Floats> d;
    for (const Floats &x : in)
      d.emplace_back(x.size(), 0.f);
    backward(s, d, dout, in, GetParam());
    std::vector<Doubles> at = widen(in);
    constexpr double h = 1e-5;
    for (size_t a = 0; a < in.size(); ++a) {
      Doubles fd(at[a].size());
      for (size_t e = 0; e < at[a].size(); ++e) {
        const double x = at[a][e];
        at[a][e] = x + h;
        const Doubles up = ref_scan(s, at, GetParam());
        at[a][e] = x - h;
        const Doubles down = ref_scan(s, at, GetParam());
        at[a][e] = x;
        double sum = 0;
        for (size_t i = 0; i < up.size(); ++i)
          sum += dout[i] * (up[i] - down[i]);
        fd[e] = sum / (2 * h);
      }
      EXPECT_TRUE(close(d[a], fd, 1e-5)) << "T=" << s.T << " input " << a;
    }
  }
}

TEST_P(GatedScan, BackwardAccumulatesAndSkipsNull) {
  const DeltaShape s = kShapes[1];
  const std::vector<Floats> in = random_inputs(s, 30, GetParam());
  const Floats dout = random_floats(s.vo(), 40);
  std::vector<Floats> full;
  for (const Floats &x : in)
    full.emplace_back(x.size(), 0.f);
  expect_accumulates({&full[0], &full[1], &full[2], &full[3], &full[4]},
                     [&] { backward(s, full, dout, in, GetParam()); });
  // Each gradient alone, the others null: the same bits as with all five.
  for (size_t a = 0; a < in.size(); ++a) {
    std::vector<Floats> all, one(in.size());
    for (const Floats &x : in)
      all.emplace_back(x.size(), 0.f);
    one[a].assign(in[a].size(), 0.f);
    backward(s, all, dout, in, GetParam());
    backward(s, one, dout, in, GetParam());
    EXPECT_TRUE(bitwise_equal(one[a], all[a])) << "input " << a;
  }
}

} // namespace
} // namespace mtrt::test
