//===- LinearTest.cpp - linear forward/backward, both weight layouts ------===//

#include "runtime/kernels/Kernels.h"
#include "tests/unit/runtime/kernels/Reference.h"

namespace mtrt::test {
namespace {

using namespace mtrt::cpu;

struct Dims {
  int64_t M, K, N;
  bool in_out, bias;
};

// W(n, k) of either layout.
double weight(const Doubles &w, const Dims &d, int64_t n, int64_t k) {
  return d.in_out ? w[k * d.N + n] : w[n * d.K + k];
}

// inputs: x (M, K), w, b (N) or empty.
Doubles ref_forward(const std::vector<Doubles> &in, const Dims &d) {
  Doubles y(d.M * d.N);
  for (int64_t m = 0; m < d.M; ++m)
    for (int64_t n = 0; n < d.N; ++n) {
      double sum = d.bias ? in[2][n] : 0.0;
      for (int64_t k = 0; k < d.K; ++k)
        sum += in[0][m * d.K + k] * weight(in[1], d, n, k);
      y[m * d.N + n] = sum;
    }
  return y;
}

// {dx, dw (layout of w), db}
std::vector<Doubles>
ref_backward(const Doubles &dy, const std::vector<Doubles> &in, const Dims &d) {
  Doubles dx(d.M * d.K), dw(d.K * d.N), db(d.bias ? d.N : 0);
  for (int64_t m = 0; m < d.M; ++m)
    for (int64_t n = 0; n < d.N; ++n) {
      const double g = dy[m * d.N + n];
      for (int64_t k = 0; k < d.K; ++k) {
        dx[m * d.K + k] += g * weight(in[1], d, n, k);
        dw[d.in_out ? k * d.N + n : n * d.K + k] += g * in[0][m * d.K + k];
      }
      if (d.bias)
        db[n] += g;
    }
  return {dx, dw, db};
}

std::vector<Floats> inputs(const Dims &d) {
  return {random_floats(d.M * d.K, 11), random_floats(d.K * d.N, 12),
          d.bias ? random_floats(d.N, 13) : Floats()};
}

const Dims kLayouts[] = {{6, 5, 4, false, false},
                         {6, 5, 4, false, true},
                         {6, 5, 4, true, false},
                         {6, 5, 4, true, true}};

TEST(Linear, ReferenceBackwardMatchesFiniteDifferences) {
  for (const Dims &d : kLayouts) {
    const std::vector<Doubles> in = widen(inputs(d));
    const Doubles dy = widen(random_floats(d.M * d.N, 14));
    EXPECT_TRUE(matches_finite_differences(
        [&](const std::vector<Doubles> &x) { return ref_forward(x, d); }, in,
        dy, ref_backward(dy, in, d)))
        << "in_out=" << d.in_out << " bias=" << d.bias;
  }
}

// A rank-3 input (B, S, K) is the same call with M = B·S.
void check_kernels(const Dims &d) {
  const std::vector<Floats> in = inputs(d);
  const float *b = d.bias ? in[2].data() : nullptr;
  // Written over whatever y held (NaN here), or added onto it.
  Floats y(d.M * d.N, std::nanf(""));
  linear_forward(y.data(), in[0].data(), in[1].data(), b, d.M, d.K, d.N,
                 d.in_out, /*accumulate=*/false);
  EXPECT_TRUE(close(y, ref_forward(widen(in), d), 1e-5));
  Floats y_sum = random_floats(d.M * d.N, 23);
  const Floats y0 = y_sum;
  linear_forward(y_sum.data(), in[0].data(), in[1].data(), b, d.M, d.K, d.N,
                 d.in_out, /*accumulate=*/true);
  EXPECT_TRUE(close(added(y_sum, y0), ref_forward(widen(in), d), 1e-5));

  const Floats dy = random_floats(d.M * d.N, 15);
  const std::vector<Doubles> want = ref_backward(widen(dy), widen(in), d);
  // Gradients start non-zero: the kernel must add onto them.
  Floats dx = random_floats(d.M * d.K, 16), dw = random_floats(d.K * d.N, 17),
         db = random_floats(d.N, 18);
  const Floats dx0 = dx, dw0 = dw, db0 = db;
  linear_backward(dx.data(), dw.data(), d.bias ? db.data() : nullptr, dy.data(),
                  in[0].data(), in[1].data(), d.M, d.K, d.N, d.in_out,
                  /*accumulate_dx=*/true);
  // Increments are compared in double; the priors' rounding (≤ 2^-24 of 1)
  // stays well inside the tolerance.
  EXPECT_TRUE(close(added(dx, dx0), want[0], 1e-5));
  EXPECT_TRUE(close(added(dw, dw0), want[1], 1e-5));
  if (d.bias)
    EXPECT_TRUE(close(added(db, db0), want[2], 1e-5));
  else
    EXPECT_TRUE(bitwise_equal(db, db0));
}

TEST(Linear, MatchesReferenceBothLayouts) {
  for (Dims d : kLayouts) {
    d.M = 2 * 9; // (B = 2, S = 9) flattened
    d.K = 40;
    d.N = 33;
    check_kernels(d);
  }
}

TEST(Linear, AccumulatesAndSkipsNullGradients) {
  const Dims d = {8, 16, 12, false, true};
  const std::vector<Floats> in = inputs(d);
  const Floats dy = random_floats(d.M * d.N, 19);
  Floats dx(d.M * d.K), dw(d.K * d.N), db(d.N);
  const auto backward = [&](float *gx, float *gw, float *gb) {
    linear_backward(gx, gw, gb, dy.data(), in[0].data(), in[1].data(), d.M, d.K,
                    d.N, d.in_out, /*accumulate_dx=*/true);
  };
  expect_accumulates({&dx, &dw, &db},
                     [&] { backward(dx.data(), dw.data(), db.data()); });

  Floats dx_full(d.M * d.K), dw_full(d.K * d.N), db_full(d.N);
  backward(dx_full.data(), dw_full.data(), db_full.data());
  for (int skip = 0; skip < 3; ++skip) {
    Floats gx(d.M * d.K), gw(d.K * d.N), gb(d.N);
    backward(skip == 0 ? nullptr : gx.data(), skip == 1 ? nullptr : gw.data(),
             skip == 2 ? nullptr : gb.data());
    if (skip != 0)
      EXPECT_TRUE(bitwise_equal(gx, dx_full));
    if (skip != 1)
      EXPECT_TRUE(bitwise_equal(gw, dw_full));
    if (skip != 2)
      EXPECT_TRUE(bitwise_equal(gb, db_full));
  }
}

// Without accumulate_dx, dx is written whatever it held (NaN here); dw
// still adds.
TEST(Linear, WritesDxUnlessAskedToAccumulate) {
  for (const Dims &d : kLayouts) {
    const std::vector<Floats> in = inputs(d);
    const Floats dy = random_floats(d.M * d.N, 21);
    const std::vector<Doubles> want = ref_backward(widen(dy), widen(in), d);
    Floats dx(d.M * d.K, std::nanf("")), dw = random_floats(d.K * d.N, 22);
    const Floats dw0 = dw;
    linear_backward(dx.data(), dw.data(), nullptr, dy.data(), in[0].data(),
                    in[1].data(), d.M, d.K, d.N, d.in_out, false);
    EXPECT_TRUE(close(dx, want[0], 1e-5));
    EXPECT_TRUE(close(added(dw, dw0), want[1], 1e-5));
  }
}

TEST(Linear, Deterministic) {
  const Dims d = {64, 96, 80, true, true};
  const std::vector<Floats> in = inputs(d);
  const Floats dy = random_floats(d.M * d.N, 20);
  std::vector<Floats> runs;
  for (int run = 0; run < 2; ++run) {
    Floats y(d.M * d.N), dx(d.M * d.K), dw(d.K * d.N), db(d.N);
    linear_forward(y.data(), in[0].data(), in[1].data(), in[2].data(), d.M, d.K,
                   d.N, d.in_out, false);
    linear_backward(dx.data(), dw.data(), db.data(), dy.data(), in[0].data(),
                    in[1].data(), d.M, d.K, d.N, d.in_out, false);
    for (Floats *f : {&y, &dx, &dw, &db})
      runs.push_back(*f);
  }
  for (size_t i = 0; i < 4; ++i)
    EXPECT_TRUE(bitwise_equal(runs[i], runs[i + 4])) << "buffer " << i;
}

} // namespace
} // namespace mtrt::test
