//===- ActivationsTest.cpp - relu, silu, gelu, softcap, xielu, swiglu ----===//

#include "runtime/kernels/Kernels.h"
#include "tests/unit/runtime/kernels/Reference.h"

namespace mtrt::test {
namespace {

using namespace mtrt::cpu;

double relu(double x) { return x > 0 ? x : 0; }
double relu_grad(double x) { return x > 0 ? 1 : 0; }
double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double silu(double x) { return x * sigmoid(x); }
double silu_grad(double x) { return sigmoid(x) * (1 + x * (1 - sigmoid(x))); }

const double kPi = 3.14159265358979323846;

double gelu(double x, bool tanh_form) {
  if (tanh_form)
    return 0.5 * x *
           (1 + std::tanh(std::sqrt(2 / kPi) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}

double gelu_grad(double x, bool tanh_form) {
  if (tanh_form) {
    const double c = std::sqrt(2 / kPi);
    const double t = std::tanh(c * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) +
           0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
  }
  return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
         x * std::exp(-x * x / 2) / std::sqrt(2 * kPi);
}

// Soft-capping at 3: the test values (up to ±8) reach well into its tail.
double softcap(double x) { return 3 * std::tanh(x / 3); }
double softcap_grad(double x) {
  const double t = std::tanh(x / 3);
  return 1 - t * t;
}

// An elementwise unary op: its value and derivative in double, and its
// kernels.
struct Unary {
  const char *name;
  double (*value)(double);
  double (*grad)(double);
  void (*forward)(float *, const float *, int64_t);
  void (*backward)(float *, const float *, const float *, int64_t);
};

double sigmoid_grad(double x) { return sigmoid(x) * (1 - sigmoid(x)); }
double softplus(double x) { return std::log(1 + std::exp(x)); }

const Unary kUnaries[] = {
    {"relu", relu, relu_grad, relu_forward, relu_backward},
    {"sigmoid", sigmoid, sigmoid_grad, sigmoid_forward, sigmoid_backward},
    {"softplus", softplus, sigmoid, softplus_forward, softplus_backward},
    {"silu", silu, silu_grad, silu_forward, silu_backward},
    {"gelu", [](double x) { return gelu(x, false); },
     [](double x) { return gelu_grad(x, false); },
     [](float *y, const float *x, int64_t n) { gelu_forward(y, x, n, false); },
     [](float *dx, const float *dy, const float *x, int64_t n) {
       gelu_backward(dx, dy, x, n, false);
     }},
    {"gelu_tanh", [](double x) { return gelu(x, true); },
     [](double x) { return gelu_grad(x, true); },
     [](float *y, const float *x, int64_t n) { gelu_forward(y, x, n, true); },
     [](float *dx, const float *dy, const float *x, int64_t n) {
       gelu_backward(dx, dy, x, n, true);
     }},
    {"softcap", softcap, softcap_grad,
     [](float *y, const float *x, int64_t n) { softcap_forward(y, x, n, 3.f); },
     [](float *dx, const float *dy, const float *x, int64_t n) {
       softcap_backward(dx, dy, x, n, 3.f);
     }},
    {"scale", [](double x) { return -2.5 * x; }, [](double) { return -2.5; },
     [](float *y, const float *x, int64_t n) { scale_forward(y, x, n, -2.5f); },
     [](float *dx, const float *dy, const float *, int64_t n) {
       scale_backward(dx, dy, n, -2.5f);
     }},
};

TEST(Activations, ReferenceGradientsMatchFiniteDifferences) {
  const Doubles x = widen(random_floats(40, 61, -5.f, 5.f));
  const Doubles dy = widen(random_floats(40, 62));
  for (const Unary &op : kUnaries) {
    const Forward fwd = [&](const std::vector<Doubles> &in) {
      Doubles y(in[0].size());
      for (size_t i = 0; i < y.size(); ++i)
        y[i] = op.value(in[0][i]);
      return y;
    };
    Doubles dx(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      dx[i] = dy[i] * op.grad(x[i]);
    EXPECT_TRUE(matches_finite_differences(fwd, {x}, dy, {dx})) << op.name;
  }
}

// Sizes on both sides of the kernels' parallel threshold. Values up to ±8
// reach the tails where sigmoid and erf saturate. Each value chains a few
// fp32 libm calls and products, each within an ulp or two: 2e-6 of the
// largest value.
TEST(Activations, MatchReference) {
  for (int64_t n : {int64_t(1000), int64_t(40000)})
    for (const Unary &op : kUnaries) {
      const Floats x = random_floats(n, 63, -8.f, 8.f);
      Floats y(n);
      op.forward(y.data(), x.data(), n);
      Doubles want(n);
      for (int64_t i = 0; i < n; ++i)
        want[i] = op.value(x[i]);
      EXPECT_TRUE(close(y, want, 2e-6)) << op.name << " n=" << n;

      const Floats dy = random_floats(n, 64);
      Floats dx = random_floats(n, 65);
      const Floats dx0 = dx;
      op.backward(dx.data(), dy.data(), x.data(), n);
      for (int64_t i = 0; i < n; ++i)
        want[i] = dy[i] * op.grad(x[i]);
      EXPECT_TRUE(close(added(dx, dx0), want, 2e-6)) << op.name << " n=" << n;
    }
}

// exp spans orders of magnitude over [−8, 8]: each element within a few
// fp32 ulps of its own value, not of the largest. (Its gradient is ȳ · y,
// an mt.mul.)
TEST(Activations, ExpMatchesReference) {
  for (int64_t n : {int64_t(1000), int64_t(40000)}) {
    const Floats x = random_floats(n, 68, -8.f, 8.f);
    Floats y(n);
    exp_forward(y.data(), x.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double want = std::exp(double(x[i]));
      ASSERT_LE(std::fabs(y[i] - want), 5e-7 * want)
          << "element " << i << " of " << n << ": exp(" << x[i] << ")";
    }
  }
}

TEST(Activations, AccumulateAndDeterministic) {
  const int64_t n = 50000;
  const Floats x = random_floats(n, 66, -6.f, 6.f), dy = random_floats(n, 67);
  for (const Unary &op : kUnaries) {
    Floats dx(n);
    expect_accumulates({&dx},
                       [&] { op.backward(dx.data(), dy.data(), x.data(), n); });
    Floats y1(n), y2(n);
    op.forward(y1.data(), x.data(), n);
    op.forward(y2.data(), x.data(), n);
    EXPECT_TRUE(bitwise_equal(y1, y2)) << op.name;
  }
}

// xIELU with Apertus's constants: inputs x, {ap}, {an}.
constexpr double kXieluBeta = 0.5, kXieluEps = -1e-6;

Doubles ref_xielu(const std::vector<Doubles> &in) {
  const double ap = in[1][0], an = in[2][0];
  Doubles y(in[0].size());
  for (size_t i = 0; i < y.size(); ++i) {
    const double x = in[0][i];
    y[i] = x > 0 ? ap * x * x + kXieluBeta * x
                 : an * (std::expm1(std::min(x, kXieluEps)) - x) +
                       kXieluBeta * x;
  }
  return y;
}

// {dx, {dap}, {dan}}
std::vector<Doubles> ref_xielu_backward(const Doubles &dy,
                                        const std::vector<Doubles> &in) {
  const double ap = in[1][0], an = in[2][0];
  Doubles dx(dy.size()), dap{0.0}, dan{0.0};
  for (size_t i = 0; i < dy.size(); ++i) {
    const double x = in[0][i];
    if (x > 0) {
      dx[i] = dy[i] * (2 * ap * x + kXieluBeta);
      dap[0] += dy[i] * x * x;
    } else {
      dx[i] = dy[i] *
              (an * ((x < kXieluEps ? std::exp(x) : 0.0) - 1) + kXieluBeta);
      dan[0] += dy[i] * (std::expm1(std::min(x, kXieluEps)) - x);
    }
  }
  return {dx, dap, dan};
}

TEST(Xielu, ReferenceBackwardMatchesFiniteDifferences) {
  const std::vector<Doubles> in = {widen(random_floats(30, 76, -5.f, 5.f)),
                                   {0.8}, {0.3}};
  const Doubles dy = widen(random_floats(30, 77));
  EXPECT_TRUE(matches_finite_differences(ref_xielu, in, dy,
                                         ref_xielu_backward(dy, in)));
}

// The param gradients are sums over all n elements, in double: within a
// few ulps of float's rounding of the double sum.
TEST(Xielu, MatchesReferenceAccumulatesDeterministic) {
  const float ap = 0.8f, an = 0.3f;
  for (int64_t n : {int64_t(1000), int64_t(40000)}) {
    const Floats x = random_floats(n, 78, -8.f, 8.f), dy = random_floats(n, 79);
    const std::vector<Doubles> in = {widen(x), {ap}, {an}};
    Floats y(n);
    xielu_forward(y.data(), x.data(), n, ap, an, 0.5f, -1e-6f);
    EXPECT_TRUE(close(y, ref_xielu(in), 2e-6)) << n;

    const std::vector<Doubles> want = ref_xielu_backward(widen(dy), in);
    Floats dx = random_floats(n, 80), dap{0.25f}, dan{-0.5f};
    const Floats dx0 = dx, dap0 = dap, dan0 = dan;
    const auto backward = [&](float *gx, float *gp, float *gn) {
      xielu_backward(gx, gp, gn, dy.data(), x.data(), n, ap, an, 0.5f, -1e-6f);
    };
    backward(dx.data(), dap.data(), dan.data());
    EXPECT_TRUE(close(added(dx, dx0), want[0], 2e-6)) << n;
    EXPECT_TRUE(close(added(dap, dap0), want[1], 1e-6)) << n;
    EXPECT_TRUE(close(added(dan, dan0), want[2], 1e-6)) << n;

    expect_accumulates({&dx, &dap, &dan},
                       [&] { backward(dx.data(), dap.data(), dan.data()); });
    Floats p1{0.f}, p2{0.f}, only_p{0.f}, only_x(n);
    backward(nullptr, p1.data(), nullptr);
    backward(only_x.data(), nullptr, nullptr);
    backward(nullptr, p2.data(), nullptr);
    EXPECT_TRUE(bitwise_equal(p1, p2)) << n;
    Floats full_x(n);
    backward(full_x.data(), only_p.data(), nullptr);
    EXPECT_TRUE(bitwise_equal(only_x, full_x)) << n;
  }
}

// transformers' parametrization, ap = softplus(p) and an = beta +
// softplus(n) (p itself past torch's threshold of 20), and the derivatives,
// against double and its central differences; without it, p and n as they
// are.
TEST(Xielu, SoftplusAlphasMatchDouble) {
  const auto softplus = [](double a) {
    return a > 20 ? a : std::log1p(std::exp(a));
  };
  for (float p : {-4.f, -0.3f, 0.f, 0.8f, 7.f, 19.5f, 24.f}) {
    const float n = 0.5f - p;
    const XieluAlphas a = xielu_alphas(p, n, 0.5f, true);
    const double h = 1e-4;
    EXPECT_NEAR(a.ap, softplus(p), 2e-6 * (1 + std::fabs(p))) << p;
    EXPECT_NEAR(a.an, 0.5 + softplus(n), 2e-6 * (1 + std::fabs(n))) << p;
    EXPECT_NEAR(a.dap, (softplus(p + h) - softplus(p - h)) / (2 * h), 1e-6)
        << p;
    EXPECT_NEAR(a.dan, (softplus(n + h) - softplus(n - h)) / (2 * h), 1e-6)
        << p;
    const XieluAlphas same = xielu_alphas(p, n, 0.5f, false);
    EXPECT_EQ(same.ap, p);
    EXPECT_EQ(same.an, n);
    EXPECT_EQ(same.dap, 1.f);
    EXPECT_EQ(same.dan, 1.f);
  }
}

// inputs: gate, up. Output silu(gate)·up.
Doubles ref_swiglu(const std::vector<Doubles> &in) {
  Doubles y(in[0].size());
  for (size_t i = 0; i < y.size(); ++i)
    y[i] = silu(in[0][i]) * in[1][i];
  return y;
}

// {dgate = dy·up·silu'(gate), dup = dy·silu(gate)}
std::vector<Doubles> ref_swiglu_backward(const Doubles &dy,
                                         const std::vector<Doubles> &in) {
  Doubles dg(dy.size()), du(dy.size());
  for (size_t i = 0; i < dy.size(); ++i) {
    dg[i] = dy[i] * in[1][i] * silu_grad(in[0][i]);
    du[i] = dy[i] * silu(in[0][i]);
  }
  return {dg, du};
}

TEST(Swiglu, ReferenceBackwardMatchesFiniteDifferences) {
  const std::vector<Doubles> in = {widen(random_floats(30, 68, -5.f, 5.f)),
                                   widen(random_floats(30, 69))};
  const Doubles dy = widen(random_floats(30, 70));
  EXPECT_TRUE(matches_finite_differences(ref_swiglu, in, dy,
                                         ref_swiglu_backward(dy, in)));
}

TEST(Swiglu, MatchesReferenceAccumulatesSkipsNull) {
  const int64_t n = 40000;
  const std::vector<Floats> in = {random_floats(n, 71, -8.f, 8.f),
                                  random_floats(n, 72)};
  Floats y(n);
  swiglu_forward(y.data(), in[0].data(), in[1].data(), n);
  EXPECT_TRUE(close(y, ref_swiglu(widen(in)), 2e-6));

  const Floats dy = random_floats(n, 73);
  const std::vector<Doubles> want = ref_swiglu_backward(widen(dy), widen(in));
  Floats dg = random_floats(n, 74), du = random_floats(n, 75);
  const Floats dg0 = dg, du0 = du;
  const auto backward = [&](float *g, float *u) {
    swiglu_backward(g, u, dy.data(), in[0].data(), in[1].data(), n, true);
  };
  backward(dg.data(), du.data());
  EXPECT_TRUE(close(added(dg, dg0), want[0], 2e-6));
  EXPECT_TRUE(close(added(du, du0), want[1], 2e-6));

  expect_accumulates({&dg, &du}, [&] { backward(dg.data(), du.data()); });
  Floats full_g(n), full_u(n), only_g(n), only_u(n);
  backward(full_g.data(), full_u.data());
  backward(only_g.data(), nullptr);
  backward(nullptr, only_u.data());
  EXPECT_TRUE(bitwise_equal(only_g, full_g));
  EXPECT_TRUE(bitwise_equal(only_u, full_u));

  // Not accumulating: written over whatever was there (NaN).
  Floats wg(n, std::nanf("")), wu(n, std::nanf(""));
  swiglu_backward(wg.data(), wu.data(), dy.data(), in[0].data(), in[1].data(),
                  n, false);
  EXPECT_TRUE(close(wg, want[0], 2e-6));
  EXPECT_TRUE(close(wu, want[1], 2e-6));
}

} // namespace
} // namespace mtrt::test
