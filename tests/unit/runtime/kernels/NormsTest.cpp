//===- NormsTest.cpp - RMSNorm and LayerNorm, with and without affine -----===//

#include "runtime/kernels/Kernels.h"
#include "tests/unit/runtime/kernels/Reference.h"

namespace mtrt::test {
namespace {

using namespace mtrt::cpu;

// Large enough that dropping eps from a formula fails the 1e-5 checks.
constexpr float kEps = 1e-2f;

struct Dims {
  int64_t M, D;
  bool weight, bias; // bias: LayerNorm only
};

// inputs: x (M, D), w (D) or empty, b (D) or empty.
Doubles ref_rms_forward(const std::vector<Doubles> &in, const Dims &d) {
  Doubles y(d.M * d.D);
  for (int64_t m = 0; m < d.M; ++m) {
    const double *x = &in[0][m * d.D];
    double ms = 0.0;
    for (int64_t j = 0; j < d.D; ++j)
      ms += x[j] * x[j] / d.D;
    for (int64_t j = 0; j < d.D; ++j)
      y[m * d.D + j] = x[j] / std::sqrt(ms + kEps) * (d.weight ? in[1][j] : 1);
  }
  return y;
}

// {dx, dw}: dx = r·w⊙dy - r³/D · Σ(dy⊙w⊙x) · x, dw = Σ_rows dy⊙x·r.
std::vector<Doubles> ref_rms_backward(const Doubles &dy,
                                      const std::vector<Doubles> &in,
                                      const Dims &d) {
  Doubles dx(d.M * d.D), dw(d.weight ? d.D : 0);
  for (int64_t m = 0; m < d.M; ++m) {
    const double *x = &in[0][m * d.D], *g = &dy[m * d.D];
    double ms = 0.0, dot = 0.0;
    for (int64_t j = 0; j < d.D; ++j) {
      ms += x[j] * x[j] / d.D;
      dot += g[j] * (d.weight ? in[1][j] : 1) * x[j];
    }
    const double r = 1 / std::sqrt(ms + kEps);
    for (int64_t j = 0; j < d.D; ++j) {
      const double w = d.weight ? in[1][j] : 1;
      dx[m * d.D + j] = r * w * g[j] - r * r * r / d.D * dot * x[j];
      if (d.weight)
        dw[j] += g[j] * x[j] * r;
    }
  }
  return {dx, dw};
}

Doubles ref_layer_forward(const std::vector<Doubles> &in, const Dims &d) {
  Doubles y(d.M * d.D);
  for (int64_t m = 0; m < d.M; ++m) {
    const double *x = &in[0][m * d.D];
    double mean = 0.0, var = 0.0;
    for (int64_t j = 0; j < d.D; ++j)
      mean += x[j] / d.D;
    for (int64_t j = 0; j < d.D; ++j)
      var += (x[j] - mean) * (x[j] - mean) / d.D; // biased, as PyTorch
    for (int64_t j = 0; j < d.D; ++j)
      y[m * d.D + j] =
          (x[j] - mean) / std::sqrt(var + kEps) * (d.weight ? in[1][j] : 1) +
          (d.bias ? in[2][j] : 0);
  }
  return y;
}

// {dx, dw, db}: with xhat = (x - mean)·r and g = dy⊙w,
// dx = r·(g - mean(g) - xhat·mean(g⊙xhat)), dw = Σ dy⊙xhat, db = Σ dy.
std::vector<Doubles> ref_layer_backward(const Doubles &dy,
                                        const std::vector<Doubles> &in,
                                        const Dims &d) {
  Doubles dx(d.M * d.D), dw(d.weight ? d.D : 0), db(d.bias ? d.D : 0);
  for (int64_t m = 0; m < d.M; ++m) {
    const double *x = &in[0][m * d.D], *dyr = &dy[m * d.D];
    double mean = 0.0, var = 0.0;
    for (int64_t j = 0; j < d.D; ++j)
      mean += x[j] / d.D;
    for (int64_t j = 0; j < d.D; ++j)
      var += (x[j] - mean) * (x[j] - mean) / d.D;
    const double r = 1 / std::sqrt(var + kEps);
    double mean_g = 0.0, mean_gx = 0.0;
    for (int64_t j = 0; j < d.D; ++j) {
      const double g = dyr[j] * (d.weight ? in[1][j] : 1);
      mean_g += g / d.D;
      mean_gx += g * (x[j] - mean) * r / d.D;
    }
    for (int64_t j = 0; j < d.D; ++j) {
      const double xhat = (x[j] - mean) * r;
      const double g = dyr[j] * (d.weight ? in[1][j] : 1);
      dx[m * d.D + j] = r * (g - mean_g - xhat * mean_gx);
      if (d.weight)
        dw[j] += dyr[j] * xhat;
      if (d.bias)
        db[j] += dyr[j];
    }
  }
  return {dx, dw, db};
}

// x is offset from zero so LayerNorm's mean subtraction matters.
std::vector<Floats> inputs(const Dims &d) {
  return {random_floats(d.M * d.D, 21, 1.f, 3.f),
          d.weight ? random_floats(d.D, 22, 0.5f, 1.5f) : Floats(),
          d.bias ? random_floats(d.D, 23) : Floats()};
}

const Dims kAffine[] = {{3, 7, true, true},
                        {3, 7, true, false},
                        {3, 7, false, true},
                        {3, 7, false, false}};

TEST(RmsNorm, ReferenceBackwardMatchesFiniteDifferences) {
  for (Dims d : kAffine) {
    d.bias = false;
    const std::vector<Doubles> in = widen(inputs(d));
    const Doubles dy = widen(random_floats(d.M * d.D, 24));
    std::vector<Doubles> grads = ref_rms_backward(dy, in, d);
    grads.push_back({});
    EXPECT_TRUE(matches_finite_differences(
        [&](const std::vector<Doubles> &x) { return ref_rms_forward(x, d); },
        in, dy, grads))
        << "weight=" << d.weight;
  }
}

TEST(LayerNorm, ReferenceBackwardMatchesFiniteDifferences) {
  for (const Dims &d : kAffine) {
    const std::vector<Doubles> in = widen(inputs(d));
    const Doubles dy = widen(random_floats(d.M * d.D, 25));
    EXPECT_TRUE(matches_finite_differences(
        [&](const std::vector<Doubles> &x) { return ref_layer_forward(x, d); },
        in, dy, ref_layer_backward(dy, in, d)))
        << "weight=" << d.weight << " bias=" << d.bias;
  }
}

TEST(RmsNorm, MatchesReference) {
  for (bool weight : {true, false}) {
    const Dims d = {2 * 5, 300, weight, false}; // (B, S) flattened, D = 300
    const std::vector<Floats> in = inputs(d);
    Floats y(d.M * d.D);
    rms_norm_forward(y.data(), in[0].data(), ptr(in[1]), d.M, d.D, kEps);
    EXPECT_TRUE(close(y, ref_rms_forward(widen(in), d), 1e-5));

    const Floats dy = random_floats(d.M * d.D, 26);
    const std::vector<Doubles> want = ref_rms_backward(widen(dy), widen(in), d);
    Floats dx = random_floats(d.M * d.D, 27);
    Floats dw = weight ? random_floats(d.D, 28) : Floats();
    const Floats dx0 = dx, dw0 = dw;
    rms_norm_backward(dx.data(), ptr(dw), dy.data(), in[0].data(), ptr(in[1]),
                      d.M, d.D, kEps, /*accumulate_dx=*/true);
    EXPECT_TRUE(close(added(dx, dx0), want[0], 1e-5)) << "weight=" << weight;
    if (weight)
      EXPECT_TRUE(close(added(dw, dw0), want[1], 1e-5));
    // Not asked to accumulate, dx is written over what it held (NaN).
    Floats written(d.M * d.D, std::nanf(""));
    rms_norm_backward(written.data(), nullptr, dy.data(), in[0].data(),
                      ptr(in[1]), d.M, d.D, kEps, /*accumulate_dx=*/false);
    EXPECT_TRUE(close(written, want[0], 1e-5)) << "weight=" << weight;
  }
}

TEST(LayerNorm, MatchesReference) {
  for (Dims d : kAffine) {
    d.M = 2 * 5;
    d.D = 300;
    const std::vector<Floats> in = inputs(d);
    Floats y(d.M * d.D);
    layer_norm_forward(y.data(), in[0].data(), ptr(in[1]), ptr(in[2]), d.M, d.D,
                       kEps);
    EXPECT_TRUE(close(y, ref_layer_forward(widen(in), d), 1e-5));

    const Floats dy = random_floats(d.M * d.D, 29);
    const std::vector<Doubles> want =
        ref_layer_backward(widen(dy), widen(in), d);
    Floats dx = random_floats(d.M * d.D, 30);
    Floats dw = d.weight ? random_floats(d.D, 31) : Floats();
    Floats db = d.bias ? random_floats(d.D, 32) : Floats();
    const Floats dx0 = dx, dw0 = dw, db0 = db;
    layer_norm_backward(dx.data(), ptr(dw), ptr(db), dy.data(), in[0].data(),
                        ptr(in[1]), d.M, d.D, kEps, /*accumulate_dx=*/true);
    EXPECT_TRUE(close(added(dx, dx0), want[0], 1e-5))
        << "weight=" << d.weight << " bias=" << d.bias;
    Floats written(d.M * d.D, std::nanf(""));
    layer_norm_backward(written.data(), nullptr, nullptr, dy.data(),
                        in[0].data(), ptr(in[1]), d.M, d.D, kEps,
                        /*accumulate_dx=*/false);
    EXPECT_TRUE(close(written, want[0], 1e-5))
        << "weight=" << d.weight << " bias=" << d.bias;
    if (d.weight)
      EXPECT_TRUE(close(added(dw, dw0), want[1], 1e-5));
    if (d.bias)
      EXPECT_TRUE(close(added(db, db0), want[2], 1e-5));
  }
}

TEST(Norms, AccumulateSkipNullAndDeterministic) {
  const Dims d = {17, 520, true, true}; // D spans several column blocks
  const std::vector<Floats> in = inputs(d);
  const Floats dy = random_floats(d.M * d.D, 33);
  Floats dx(d.M * d.D), dw(d.D), db(d.D);
  const auto layer = [&](float *gx, float *gw, float *gb) {
    layer_norm_backward(gx, gw, gb, dy.data(), in[0].data(), in[1].data(), d.M,
                        d.D, kEps, /*accumulate_dx=*/true);
  };
  const auto rms = [&](float *gx, float *gw) {
    rms_norm_backward(gx, gw, dy.data(), in[0].data(), in[1].data(), d.M, d.D,
                      kEps, /*accumulate_dx=*/true);
  };
  expect_accumulates({&dx, &dw, &db},
                     [&] { layer(dx.data(), dw.data(), db.data()); });
  expect_accumulates({&dx, &dw}, [&] { rms(dx.data(), dw.data()); });

  Floats fx(d.M * d.D), fw(d.D), fb(d.D);
  layer(fx.data(), fw.data(), fb.data());
  Floats gx(d.M * d.D), gw(d.D), gb(d.D);
  layer(gx.data(), gw.data(), gb.data());
  EXPECT_TRUE(bitwise_equal(fx, gx));
  EXPECT_TRUE(bitwise_equal(fw, gw));
  EXPECT_TRUE(bitwise_equal(fb, gb));
  Floats only_x(d.M * d.D), only_b(d.D);
  layer(only_x.data(), nullptr, nullptr);
  layer(nullptr, nullptr, only_b.data());
  EXPECT_TRUE(bitwise_equal(only_x, fx));
  EXPECT_TRUE(bitwise_equal(only_b, fb));

  Floats rx(d.M * d.D), rw(d.D), sx(d.M * d.D), sw(d.D), only_w(d.D);
  rms(rx.data(), rw.data());
  rms(sx.data(), sw.data());
  rms(nullptr, only_w.data());
  EXPECT_TRUE(bitwise_equal(rx, sx));
  EXPECT_TRUE(bitwise_equal(rw, sw));
  EXPECT_TRUE(bitwise_equal(only_w, rw));
}

} // namespace
} // namespace mtrt::test
