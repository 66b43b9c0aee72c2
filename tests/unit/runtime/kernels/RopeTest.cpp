//===- RopeTest.cpp - rotary embedding: partial, both layouts, both pairings =//

#include "runtime/kernels/Kernels.h"
#include "tests/unit/runtime/kernels/Reference.h"

namespace mtrt::test {
namespace {

using namespace mtrt::cpu;

struct Dims {
  int64_t B, H, S, D, R;
  int seq_axis;
  bool interleaved = false;
};

int64_t at(const Dims &d, int64_t b, int64_t h, int64_t s, int64_t i) {
  return d.seq_axis == 2 ? ((b * d.H + h) * d.S + s) * d.D + i
                         : ((b * d.S + s) * d.H + h) * d.D + i;
}

// rot(x)[i] = sign · x[partner]: rotate_half pairs i < R/2 with i + R/2
// (-x[i + R/2], then x[i - R/2]); rotate_every_two pairs even i with i + 1
// (-x[i + 1], then x[i - 1]).
int64_t partner(int64_t i, const Dims &d) {
  if (d.interleaved)
    return i % 2 == 0 ? i + 1 : i - 1;
  return i < d.R / 2 ? i + d.R / 2 : i - d.R / 2;
}
double sign(int64_t i, const Dims &d) {
  return (d.interleaved ? i % 2 == 0 : i < d.R / 2) ? -1.0 : 1.0;
}

// inputs: x, cos (S, R), sin (S, R).
Doubles ref_forward(const std::vector<Doubles> &in, const Dims &d) {
  Doubles y(in[0].size());
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h)
      for (int64_t s = 0; s < d.S; ++s) {
        const double *x = &in[0][at(d, b, h, s, 0)];
        for (int64_t i = 0; i < d.D; ++i)
          y[at(d, b, h, s, i)] =
              i < d.R ? x[i] * in[1][s * d.R + i] +
                            sign(i, d) * x[partner(i, d)] * in[2][s * d.R + i]
                      : x[i];
      }
  return y;
}

// Scatters each output's derivative back along the paths of the forward:
// y[i] reads x[i] through cos and its partner through sin.
Doubles ref_backward(const Doubles &dy, const std::vector<Doubles> &in,
                     const Dims &d) {
  Doubles dx(dy.size());
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.H; ++h)
      for (int64_t s = 0; s < d.S; ++s) {
        double *g = &dx[at(d, b, h, s, 0)];
        const double *up = &dy[at(d, b, h, s, 0)];
        for (int64_t i = 0; i < d.D; ++i) {
          if (i >= d.R) {
            g[i] += up[i];
            continue;
          }
          g[i] += up[i] * in[1][s * d.R + i];
          g[partner(i, d)] += sign(i, d) * up[i] * in[2][s * d.R + i];
        }
      }
  return dx;
}

std::vector<Floats> inputs(const Dims &d) {
  return {random_floats(d.B * d.H * d.S * d.D, 41),
          random_floats(d.S * d.R, 42), random_floats(d.S * d.R, 43)};
}

// Full and partial rotation, each in both layouts and both pairings.
const Dims kCases[] = {{2, 3, 4, 8, 8, 2},       {2, 3, 4, 8, 8, 1},
                       {2, 3, 4, 8, 4, 2},       {2, 3, 4, 8, 4, 1},
                       {2, 3, 4, 8, 8, 2, true}, {2, 3, 4, 8, 8, 1, true},
                       {2, 3, 4, 8, 4, 2, true}, {2, 3, 4, 8, 4, 1, true}};

TEST(Rope, ReferenceBackwardMatchesFiniteDifferences) {
  for (const Dims &d : kCases) {
    const std::vector<Doubles> in = widen(inputs(d));
    const Doubles dy = widen(random_floats(in[0].size(), 44));
    // cos and sin are frozen tables: no gradient.
    EXPECT_TRUE(matches_finite_differences(
        [&](const std::vector<Doubles> &x) { return ref_forward(x, d); }, in,
        dy, {ref_backward(dy, in, d), {}, {}}))
        << "R=" << d.R << " seq_axis=" << d.seq_axis
        << " interleaved=" << d.interleaved;
  }
}

TEST(Rope, MatchesReference) {
  for (Dims d : kCases) {
    d.S = 7;
    d.D = 16;
    d.R = d.R == 8 ? 16 : 10;
    const std::vector<Floats> in = inputs(d);
    Floats y(in[0].size());
    rope_forward(y.data(), in[0].data(), in[1].data(), in[2].data(), d.B, d.H,
                 d.S, d.D, d.R, d.seq_axis, d.interleaved);
    // Two products and a sum per element: a few ulps.
    EXPECT_TRUE(close(y, ref_forward(widen(in), d), 1e-6))
        << "R=" << d.R << " seq_axis=" << d.seq_axis
        << " interleaved=" << d.interleaved;

    const Floats dy = random_floats(y.size(), 45);
    Floats dx = random_floats(y.size(), 46);
    const Floats dx0 = dx;
    rope_backward(dx.data(), dy.data(), in[1].data(), in[2].data(), d.B, d.H,
                  d.S, d.D, d.R, d.seq_axis, d.interleaved,
                  /*accumulate=*/true);
    const Doubles want = ref_backward(widen(dy), widen(in), d);
    EXPECT_TRUE(close(added(dx, dx0), want, 1e-6))
        << "R=" << d.R << " seq_axis=" << d.seq_axis
        << " interleaved=" << d.interleaved;
    // Not asked to accumulate, dx is written over what it held (NaN).
    Floats written(y.size(), std::nanf(""));
    rope_backward(written.data(), dy.data(), in[1].data(), in[2].data(), d.B,
                  d.H, d.S, d.D, d.R, d.seq_axis, d.interleaved,
                  /*accumulate=*/false);
    EXPECT_TRUE(close(written, want, 1e-6))
        << "R=" << d.R << " seq_axis=" << d.seq_axis
        << " interleaved=" << d.interleaved;
  }
}

TEST(Rope, AccumulatesAndDeterministic) {
  const Dims d = {2, 4, 9, 12, 8, 1, true};
  const std::vector<Floats> in = inputs(d);
  const Floats dy = random_floats(in[0].size(), 47);
  Floats dx(dy.size());
  const auto backward = [&](Floats &g) {
    rope_backward(g.data(), dy.data(), in[1].data(), in[2].data(), d.B, d.H,
                  d.S, d.D, d.R, d.seq_axis, d.interleaved,
                  /*accumulate=*/true);
  };
  expect_accumulates({&dx}, [&] { backward(dx); });
  Floats a(dy.size()), b(dy.size());
  backward(a);
  backward(b);
  EXPECT_TRUE(bitwise_equal(a, b));
}

} // namespace
} // namespace mtrt::test
