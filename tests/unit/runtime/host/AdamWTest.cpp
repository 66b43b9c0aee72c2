//===- AdamWTest.cpp - Host AdamW vs an fp64 reference, on every path -----===//

#include "runtime/host/AdamW.h"
#include "runtime/host/ThreadPool.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

using namespace mtrt::host;

namespace {

constexpr double kEps = std::numeric_limits<float>::epsilon();

// Float optimizer state, each buffer shifted by a different number of floats
// so that the kernels see unaligned pointers, as host buffers may be.
struct State {
  int64_t n;
  std::vector<float> storage[4];
  float *p, *m, *v, *g;

  State(int64_t count, bool misalign) : n(count) {
    float **ptrs[4] = {&p, &m, &v, &g};
    for (int b = 0; b < 4; ++b) {
      int shift = misalign ? b + 1 : 0;
      storage[b].assign(n + 4, 0.0f);
      *ptrs[b] = storage[b].data() + shift;
    }
  }
  State(const State &o) : State(o.n, o.p != o.storage[0].data()) {
    copy_from(o);
  }
  void copy_from(const State &o) {
    std::memcpy(p, o.p, n * sizeof(float));
    std::memcpy(m, o.m, n * sizeof(float));
    std::memcpy(v, o.v, n * sizeof(float));
    std::memcpy(g, o.g, n * sizeof(float));
  }
  bool same_bits(const State &o) const {
    return std::memcmp(p, o.p, n * sizeof(float)) == 0 &&
           std::memcmp(m, o.m, n * sizeof(float)) == 0 &&
           std::memcmp(v, o.v, n * sizeof(float)) == 0;
  }
};

// Gradients spanning many magnitudes, including ones below eps, so that both
// the eps-dominated and the sqrt(v)-dominated regimes are exercised.
void fill_grad(float *g, int64_t n, std::mt19937 &rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-10.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i)
    g[i] = normal(rng) * std::pow(10.0f, exponent(rng));
}

// A state as after some steps: nonzero moments, v >= 0.
State random_state(int64_t n, bool misalign, uint32_t seed) {
  State s(n, misalign);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    s.p[i] = 0.5f * normal(rng);
    s.m[i] = 1e-2f * normal(rng);
    float r = normal(rng);
    s.v[i] = 1e-4f * r * r;
  }
  fill_grad(s.g, n, rng);
  return s;
}

// The update in double, written from the definition, with a running error
// bound per element: a few float roundings of each term per step.
struct Reference {
  std::vector<double> p, m, v, tol_p, tol_m, tol_v;

  explicit Reference(const State &s)
      : p(s.p, s.p + s.n), m(s.m, s.m + s.n), v(s.v, s.v + s.n),
        tol_p(s.n, 0.0), tol_m(s.n, 0.0), tol_v(s.n, 0.0) {}

  void step(const float *grad, const AdamWHyper &h, double grad_scale) {
    const double bc1 = 1.0 - std::pow(h.beta1, double(h.step));
    const double bc2 = 1.0 - std::pow(h.beta2, double(h.step));
    for (size_t i = 0; i < p.size(); ++i) {
      double g = double(grad[i]) * grad_scale;
      double decayed = p[i] * (1.0 - h.lr * h.weight_decay);
      double m_old = h.beta1 * m[i], m_new = (1.0 - h.beta1) * g;
      double v_old = h.beta2 * v[i], v_new = (1.0 - h.beta2) * g * g;
      m[i] = m_old + m_new;
      v[i] = v_old + v_new;
      double m_hat = m[i] / bc1, v_hat = v[i] / bc2;
      double update = h.lr * m_hat / (std::sqrt(v_hat) + h.eps);
      p[i] = decayed - update;
      tol_m[i] =
          h.beta1 * tol_m[i] + 4 * kEps * (std::abs(m_old) + std::abs(m_new));
      tol_v[i] = h.beta2 * tol_v[i] + 5 * kEps * (v_old + v_new);
      // The update's relative error: m's and v's, plus ~6 roundings of its own.
      double rel_update = tol_m[i] / std::max(std::abs(m[i]), 1e-300) +
                          0.5 * tol_v[i] / std::max(v[i], 1e-300) + 8 * kEps;
      tol_p[i] += 2 * kEps * std::abs(decayed) +
                  std::min(rel_update, 1.0) * std::abs(update) + 1e-30;
    }
  }

  void expect_near(const State &s, const char *what) const {
    int reported = 0;
    for (int64_t i = 0; i < s.n && reported < 5; ++i) {
      bool ok = std::abs(s.p[i] - p[i]) <= tol_p[i] &&
                std::abs(s.m[i] - m[i]) <= tol_m[i] + 1e-38 &&
                std::abs(s.v[i] - v[i]) <= tol_v[i] + 1e-38;
      if (!ok) {
        ++reported;
        ADD_FAILURE() << what << " element " << i << ": p " << s.p[i] << " vs "
                      << p[i] << " (tol " << tol_p[i] << "), m " << s.m[i]
                      << " vs " << m[i] << " (tol " << tol_m[i] << "), v "
                      << s.v[i] << " vs " << v[i] << " (tol " << tol_v[i]
                      << ")";
      }
    }
  }
};

AdamWHyper hyper(double weight_decay, int64_t step) {
  AdamWHyper h;
  h.lr = 3e-3;
  h.weight_decay = weight_decay;
  h.step = step;
  return h;
}

class AdamWPath : public ::testing::TestWithParam<SimdPath> {
protected:
  void SetUp() override {
    if (!simd_path_supported(GetParam()))
      GTEST_SKIP() << simd_path_name(GetParam())
                   << " not supported on this CPU";
  }
};

// Sizes around the vector widths exercise the tails of every path.
const int64_t kSizes[] = {1, 7, 8, 9, 15, 16, 17, 31, 33, 64, 1000, 4099};

TEST_P(AdamWPath, OneStepMatchesReference) {
  for (int64_t n : kSizes)
    for (double wd : {0.0, 0.1})
      for (float scale : {1.0f, 0.37f})
        for (int64_t step : {1, 7, 1000}) {
          State s = random_state(n, /*misalign=*/true, 1234 + uint32_t(n));
          Reference ref(s);
          AdamWHyper h = hyper(wd, step);
          ref.step(s.g, h, scale);
          adamw_update(s.p, s.m, s.v, s.g, n, h, scale, nullptr, GetParam());
          ref.expect_near(s, "one step");
        }
}

TEST_P(AdamWPath, TwentyStepTrajectoryMatchesReference) {
  for (double wd : {0.0, 0.1})
    for (float scale : {1.0f, 0.5f}) {
      const int64_t n = 1003;
      State s(n, /*misalign=*/true);
      std::fill(s.p, s.p + n, 0.25f);
      Reference ref(s);
      std::mt19937 rng(99);
      for (int64_t t = 1; t <= 20; ++t) {
        fill_grad(s.g, n, rng);
        AdamWHyper h = hyper(wd, t);
        ref.step(s.g, h, scale);
        adamw_update(s.p, s.m, s.v, s.g, n, h, scale, nullptr, GetParam());
      }
      ref.expect_near(s, "after 20 steps");
    }
}

// Every path performs the same float operations, so all agree bit for bit.
TEST_P(AdamWPath, BitwiseEqualToScalarPath) {
  for (int64_t n : kSizes) {
    State s = random_state(n, /*misalign=*/true, 7);
    State scalar(s);
    AdamWHyper h = hyper(0.1, 3);
    adamw_update(s.p, s.m, s.v, s.g, n, h, 0.8f, nullptr, GetParam());
    adamw_update(scalar.p, scalar.m, scalar.v, scalar.g, n, h, 0.8f, nullptr,
                 SimdPath::Scalar);
    EXPECT_TRUE(s.same_bits(scalar)) << "n " << n;
  }
}

TEST_P(AdamWPath, ThreadCountDoesNotChangeBits) {
  const int64_t n = 100003; // several parts, a ragged last one
  State base = random_state(n, /*misalign=*/false, 5);
  State inline_run(base);
  AdamWHyper h = hyper(0.01, 2);
  adamw_update(inline_run.p, inline_run.m, inline_run.v, inline_run.g, n, h,
               1.0f, nullptr, GetParam());
  for (int threads : {1, 2, 3, 7}) {
    ThreadPool pool(threads);
    for (int run = 0; run < 2; ++run) {
      State s(base);
      adamw_update(s.p, s.m, s.v, s.g, n, h, 1.0f, &pool, GetParam());
      EXPECT_TRUE(s.same_bits(inline_run))
          << threads << " threads, run " << run;
    }
  }
}

#if defined(__x86_64__) || defined(__i386__)
// Moments of a weight whose gradient stays zero decay into denormals; the
// update flushes them (they would otherwise stick and slow every later step)
// and leaves the caller's floating-point mode as it found it.
TEST_P(AdamWPath, FlushesDenormalMoments) {
  const int64_t n = 37;
  State s(n, /*misalign=*/true);
  const float denormal = std::numeric_limits<float>::denorm_min() * 100;
  std::fill(s.p, s.p + n, 1.0f);
  std::fill(s.m, s.m + n, denormal);
  std::fill(s.v, s.v + n, denormal);
  // Control bits only: the exception flags below bit 6 are sticky status.
  const unsigned kControl = 0xFFC0;
  const unsigned mode = _mm_getcsr() & kControl;
  adamw_update(s.p, s.m, s.v, s.g, n, hyper(0.0, 1000), 1.0f, nullptr,
               GetParam());
  EXPECT_EQ(_mm_getcsr() & kControl, mode);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(s.m[i], 0.0f) << i;
    EXPECT_EQ(s.v[i], 0.0f) << i;
    EXPECT_EQ(s.p[i], 1.0f) << i;
  }
}
#endif

INSTANTIATE_TEST_SUITE_P(Paths, AdamWPath,
                         ::testing::Values(SimdPath::Scalar, SimdPath::Avx2,
                                           SimdPath::Avx512),
                         [](const ::testing::TestParamInfo<SimdPath> &p) {
                           return std::string(simd_path_name(p.param));
                         });

// Independent of the reference: from zero moments, step 1 moves every weight
// by lr against the sign of its gradient when |g| >> eps.
TEST(AdamW, FirstStepMovesByLearningRate) {
  const int64_t n = 37;
  State s(n, /*misalign=*/false);
  for (int64_t i = 0; i < n; ++i) {
    s.p[i] = 1.0f;
    s.g[i] = (i % 2 ? 1.0f : -1.0f) * float(i + 1);
  }
  AdamWHyper h = hyper(0.0, 1);
  adamw_update(s.p, s.m, s.v, s.g, n, h, 1.0f, nullptr);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_NEAR(s.p[i], 1.0 - h.lr * (i % 2 ? 1 : -1), 1e-6) << i;
}

TEST(AdamW, WeightDecayIsDecoupled) {
  State s(4, /*misalign=*/false);
  std::fill(s.p, s.p + 4, 2.0f); // zero gradient: only the decay acts
  AdamWHyper h = hyper(0.5, 1);
  adamw_update(s.p, s.m, s.v, s.g, 4, h, 1.0f, nullptr);
  for (int i = 0; i < 4; ++i)
    EXPECT_FLOAT_EQ(s.p[i], 2.0f * float(1.0 - h.lr * 0.5));
}

TEST(AdamW, RejectsBadArguments) {
  State s(4, false);
  EXPECT_THROW(adamw_update(s.p, s.m, s.v, s.g, 4, hyper(0, 0), 1.0f, nullptr),
               std::invalid_argument);
  EXPECT_THROW(adamw_update(s.p, s.m, s.v, s.g, -1, hyper(0, 1), 1.0f, nullptr),
               std::invalid_argument);
  for (SimdPath path : {SimdPath::Avx2, SimdPath::Avx512}) {
    if (!simd_path_supported(path)) {
      EXPECT_THROW(
          adamw_update(s.p, s.m, s.v, s.g, 4, hyper(0, 1), 1.0f, nullptr, path),
          std::invalid_argument);
    }
  }
}

TEST(AdamW, ZeroElementsIsANoOp) {
  ThreadPool pool(2);
  adamw_update(nullptr, nullptr, nullptr, nullptr, 0, hyper(0.1, 1), 1.0f,
               &pool);
}

TEST(CpuFeatures, ActivePathIsSupportedAndWidest) {
  SimdPath active = active_simd_path();
  EXPECT_TRUE(simd_path_supported(active));
  EXPECT_TRUE(simd_path_supported(SimdPath::Scalar));
  SimdPath widest = cpu_features().avx512f ? SimdPath::Avx512
                    : cpu_features().avx2  ? SimdPath::Avx2
                                           : SimdPath::Scalar;
  EXPECT_EQ(active, widest);
  std::printf("active host optimizer path: %s\n", simd_path_name(active));
}

} // namespace
