//===- CausalConvTest.cpp - the causal convolution against float64 loops --===//
//
// The oracle is a float64 loop over the definition (zero before position 0);
// the gradients are checked against its central differences (the op is
// bilinear, so they are exact up to rounding) for x, w and the bias. Shapes
// cover one tap, taps longer than the sequence, and several batch rows and
// channels.
//
//===----------------------------------------------------------------------===//

#include "runtime/kernels/Kernels.h"
#include "tests/unit/runtime/kernels/Reference.h"

namespace mtrt::test {
namespace {

using namespace mtrt::cpu;

struct ConvShape {
  int64_t B, C, S, K;
};

// in: x [B, C, S], w [C, K], bias [C].
Doubles ref_conv(const ConvShape &s, const std::vector<Doubles> &in) {
  const Doubles &x = in[0], &w = in[1], &bias = in[2];
  Doubles y(s.B * s.C * s.S, 0.0);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t t = 0; t < s.S; ++t) {
        y[(b * s.C + c) * s.S + t] = bias[c];
        for (int64_t j = 0; j < s.K; ++j) {
          const int64_t src = t - (s.K - 1) + j;
          if (src >= 0)
            y[(b * s.C + c) * s.S + t] +=
                w[c * s.K + j] * x[(b * s.C + c) * s.S + src];
        }
      }
  return y;
}

const ConvShape kShapes[] = {{2, 3, 9, 3}, {1, 4, 5, 1}, {3, 2, 2, 4}};

TEST(CausalConv, ForwardMatchesFloat64) {
  for (const ConvShape &s : kShapes) {
    const std::vector<Floats> in{random_floats(s.B * s.C * s.S, 1),
                                 random_floats(s.C * s.K, 2),
                                 random_floats(s.C, 9)};
    Floats y(s.B * s.C * s.S);
    causal_conv_forward(y.data(), in[0].data(), in[1].data(), in[2].data(), s.B,
                        s.C, s.S, s.K);
    EXPECT_TRUE(close(y, ref_conv(s, widen(in)), 1e-6)) << "K=" << s.K;
    // Without a bias: the bias input at 0.
    std::vector<Floats> unbiased = in;
    unbiased[2].assign(s.C, 0.f);
    causal_conv_forward(y.data(), in[0].data(), in[1].data(), nullptr, s.B,
                        s.C, s.S, s.K);
    EXPECT_TRUE(close(y, ref_conv(s, widen(unbiased)), 1e-6)) << "K=" << s.K;
  }
}

TEST(CausalConv, GradientsMatchCentralDifferencesOfFloat64) {
  for (const ConvShape &s : kShapes) {
    const std::vector<Floats> in{random_floats(s.B * s.C * s.S, 3),
                                 random_floats(s.C * s.K, 4),
                                 random_floats(s.C, 10)};
    const Floats dy = random_floats(s.B * s.C * s.S, 5);
    std::vector<Floats> g;
    for (const Floats &v : in)
      g.emplace_back(v.size(), 0.f);
    causal_conv_backward(g[0].data(), g[1].data(), g[2].data(), dy.data(),
                         in[0].data(), in[1].data(), s.B, s.C, s.S, s.K);
    std::vector<Doubles> at = widen(in);
    constexpr double h = 1e-6;
    for (size_t a = 0; a < in.size(); ++a) {
      Doubles fd(at[a].size());
      for (size_t e = 0; e < at[a].size(); ++e) {
        const double v = at[a][e];
        at[a][e] = v + h;
        const Doubles up = ref_conv(s, at);
        at[a][e] = v - h;
        const Doubles down = ref_conv(s, at);
        at[a][e] = v;
        double d = 0;
        for (size_t i = 0; i < up.size(); ++i)
          d += dy[i] * (up[i] - down[i]) / (2 * h);
        fd[e] = d;
      }
      EXPECT_TRUE(close(g[a], fd, 1e-5)) << "K=" << s.K << " input " << a;
    }
  }
}

TEST(CausalConv, BackwardAccumulatesAndSkipsNull) {
  const ConvShape s = kShapes[0];
  const Floats x = random_floats(s.B * s.C * s.S, 6),
               w = random_floats(s.C * s.K, 7),
               dy = random_floats(s.B * s.C * s.S, 8);
  Floats dx(x.size(), 0.f), dw(w.size(), 0.f), db(s.C, 0.f);
  expect_accumulates({&dx, &dw, &db}, [&] {
    causal_conv_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(),
                         w.data(), s.B, s.C, s.S, s.K);
  });
  Floats only(w.size(), 0.f), full(w.size(), 0.f), dx2(x.size(), 0.f),
      db2(s.C, 0.f);
  causal_conv_backward(nullptr, only.data(), nullptr, dy.data(), x.data(),
                       w.data(), s.B, s.C, s.S, s.K);
  causal_conv_backward(dx2.data(), full.data(), db2.data(), dy.data(), x.data(),
                       w.data(), s.B, s.C, s.S, s.K);
  EXPECT_TRUE(bitwise_equal(only, full));
}

} // namespace
} // namespace mtrt::test
