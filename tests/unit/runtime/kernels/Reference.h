//===- Reference.h - helpers for checking kernels against fp64 loops -*- C++
//-*-===//
//
// Each kernel test pairs the fp32 kernel with a naive double-precision
// reference written from the math in docs/primitives.md. The reference
// backward is itself checked against central differences of the reference
// forward, so a wrong formula cannot hide in both places.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_TESTS_UNIT_RUNTIME_KERNELS_REFERENCE_H
#define MEGATRAIN_TESTS_UNIT_RUNTIME_KERNELS_REFERENCE_H

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace mtrt::test {

using Doubles = std::vector<double>;
using Floats = std::vector<float>;

inline Floats random_floats(int64_t n, uint32_t seed, float lo = -1.f,
                            float hi = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Floats v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

inline Doubles widen(const Floats &v) { return Doubles(v.begin(), v.end()); }

inline std::vector<Doubles> widen(const std::vector<Floats> &vs) {
  std::vector<Doubles> out;
  for (const Floats &v : vs)
    out.push_back(widen(v));
  return out;
}

/// An optional operand: empty means absent (null).
inline const float *ptr(const Floats &v) {
  return v.empty() ? nullptr : v.data();
}
inline float *ptr(Floats &v) { return v.empty() ? nullptr : v.data(); }

inline double max_abs(const Doubles &v) {
  double m = 0.0;
  for (double x : v)
    m = std::max(m, std::fabs(x));
  return m;
}

/// Normwise relative error: max |got - want| / max |want|. An fp32 kernel
/// differs from the fp64 loop by rounding only, a few units of 2^-24 ≈ 6e-8
/// times the growth of its sums, so 1e-5 passes correct kernels and fails a
/// wrong index, a missing term or a wrong sign by orders of magnitude.
inline ::testing::AssertionResult close(const Doubles &got, const Doubles &want,
                                        double rtol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << "size " << got.size() << " != " << want.size();
  const double scale = std::max(max_abs(want), 1e-30);
  double worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]);
    if (std::isnan(err) || err > worst) {
      worst = err;
      at = i;
    }
    if (std::isnan(err))
      break;
  }
  if (worst <= rtol * scale)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "relative error " << worst / scale << " > " << rtol << " at " << at
         << ": got " << got[at] << ", want " << want[at];
}

inline ::testing::AssertionResult close(const Floats &got, const Doubles &want,
                                        double rtol) {
  return close(widen(got), want, rtol);
}

/// The increment a backward added on top of `prior`, in double.
inline Doubles added(const Floats &after, const Floats &prior) {
  Doubles d(after.size());
  for (size_t i = 0; i < after.size(); ++i)
    d[i] = double(after[i]) - prior[i];
  return d;
}

inline ::testing::AssertionResult bitwise_equal(const Floats &a,
                                                const Floats &b) {
  if (a.size() == b.size() &&
      std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "buffers differ";
}

/// A forward in double: inputs to output.
using Forward = std::function<Doubles(const std::vector<Doubles> &)>;

/// Checks a reference backward (`grads[a]` = d(dout · fwd)/d inputs[a])
/// against central differences of the reference forward, element by element.
/// With h = 1e-5 in double the truncation error is O(h²) ≈ 1e-10 and the
/// cancellation error O(1e-16 / h) ≈ 1e-11, so 1e-7 is far above noise and far
/// below any formula error.
inline ::testing::AssertionResult
matches_finite_differences(const Forward &fwd, std::vector<Doubles> inputs,
                           const Doubles &dout,
                           const std::vector<Doubles> &grads) {
  constexpr double h = 1e-5, tol = 1e-7;
  auto loss = [&](const std::vector<Doubles> &in) {
    const Doubles y = fwd(in);
    double l = 0.0;
    for (size_t i = 0; i < y.size(); ++i)
      l += dout[i] * y[i];
    return l;
  };
  for (size_t a = 0; a < inputs.size(); ++a) {
    if (grads[a].empty())
      continue; // not differentiable (ids) or not checked
    const double scale = std::max(1.0, max_abs(grads[a]));
    for (size_t e = 0; e < inputs[a].size(); ++e) {
      const double x = inputs[a][e];
      inputs[a][e] = x + h;
      const double up = loss(inputs);
      inputs[a][e] = x - h;
      const double down = loss(inputs);
      inputs[a][e] = x;
      const double fd = (up - down) / (2 * h);
      if (std::fabs(fd - grads[a][e]) > tol * scale)
        return ::testing::AssertionFailure()
               << "input " << a << " element " << e << ": analytic "
               << grads[a][e] << ", finite difference " << fd;
    }
  }
  return ::testing::AssertionSuccess();
}

/// Runs `backward` twice from zeroed gradients and checks that the second run
/// added as much again (the += convention).
inline void expect_accumulates(const std::vector<Floats *> &grads,
                               const std::function<void()> &backward) {
  for (Floats *g : grads)
    std::fill(g->begin(), g->end(), 0.f);
  backward();
  std::vector<Floats> once;
  for (Floats *g : grads)
    once.push_back(*g);
  backward();
  for (size_t i = 0; i < grads.size(); ++i) {
    Doubles twice(once[i].size());
    for (size_t e = 0; e < twice.size(); ++e)
      twice[e] = 2.0 * once[i][e];
    // Kernels that add term by term into the buffer (attention's dk over S
    // rows) round differently on the second pass, by a few ulps per term;
    // overwriting instead of adding is off by 50%.
    EXPECT_TRUE(close(*grads[i], twice, 1e-5)) << "gradient " << i;
  }
}

} // namespace mtrt::test

#endif // MEGATRAIN_TESTS_UNIT_RUNTIME_KERNELS_REFERENCE_H
