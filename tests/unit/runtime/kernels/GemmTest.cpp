//===- GemmTest.cpp - gemm and gemm_blocked against a double loop ---------===//

#include "runtime/kernels/Gemm.h"
#include "tests/unit/runtime/kernels/Reference.h"

namespace mtrt::test {
namespace {

using GemmFn = void (*)(bool, bool, int64_t, int64_t, int64_t, float,
                        const float *, int64_t, const float *, int64_t, float,
                        float *, int64_t);

struct GemmCase {
  int64_t M, N, K;
  bool trans_a, trans_b;
  float alpha, beta;
};

// Row-major, with leading dims wider than the rows to catch ld mistakes.
void check_gemm(GemmFn gemm, const GemmCase &c) {
  const int64_t a_rows = c.trans_a ? c.K : c.M, a_cols = c.trans_a ? c.M : c.K;
  const int64_t b_rows = c.trans_b ? c.N : c.K, b_cols = c.trans_b ? c.K : c.N;
  const int64_t lda = a_cols + 3, ldb = b_cols + 5, ldc = c.N + 2;
  const Floats A = random_floats(a_rows * lda, 1),
               B = random_floats(b_rows * ldb, 2);
  Floats C = random_floats(c.M * ldc, 3);
  Doubles want(C.begin(), C.end());
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < c.K; ++p)
        sum += double(c.trans_a ? A[p * lda + i] : A[i * lda + p]) *
               (c.trans_b ? B[j * ldb + p] : B[p * ldb + j]);
      want[i * ldc + j] = c.alpha * sum + c.beta * C[i * ldc + j];
    }
  // Padding columns of C must be left alone: `want` keeps their old values.
  gemm(c.trans_a, c.trans_b, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(),
       ldb, c.beta, C.data(), ldc);
  // Random ±1 inputs, K ≤ 300: fp32 sums err by ~√K·2^-24 relative.
  EXPECT_TRUE(close(C, want, 1e-5))
      << c.M << "x" << c.N << "x" << c.K << " ta=" << c.trans_a
      << " tb=" << c.trans_b << " alpha=" << c.alpha << " beta=" << c.beta;
}

void check_all_transposes(GemmFn gemm) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_gemm(gemm, {37, 53, 71, ta, tb, 1.f, 0.f});
      check_gemm(gemm, {5, 3, 1, ta, tb, -0.5f, 1.f});
      check_gemm(gemm, {1, 70, 9, ta, tb, 2.f, 0.25f});
      // Crosses every cache block boundary of the blocked kernel.
      check_gemm(gemm, {100, 270, 300, ta, tb, 1.f, 1.f});
    }
}

TEST(Gemm, DispatchMatchesReference) { check_all_transposes(mtrt::cpu::gemm); }

TEST(Gemm, BlockedFallbackMatchesReference) {
  check_all_transposes(mtrt::cpu::gemm_blocked);
}

// beta == 0 means C is write-only: NaN already there must not survive.
TEST(Gemm, BetaZeroIgnoresC) {
  for (GemmFn gemm :
       {GemmFn(mtrt::cpu::gemm), GemmFn(mtrt::cpu::gemm_blocked)}) {
    const Floats A = random_floats(4 * 6, 4), B = random_floats(6 * 5, 5);
    Floats C(4 * 5, NAN);
    gemm(false, false, 4, 5, 6, 1.f, A.data(), 6, B.data(), 5, 0.f, C.data(),
         5);
    for (float c : C)
      EXPECT_FALSE(std::isnan(c));
  }
}

TEST(Gemm, EmptyKScalesC) {
  for (GemmFn gemm :
       {GemmFn(mtrt::cpu::gemm), GemmFn(mtrt::cpu::gemm_blocked)}) {
    Floats C = {1.f, 2.f, 3.f, 4.f};
    gemm(false, false, 2, 2, 0, 1.f, nullptr, 1, nullptr, 2, 3.f, C.data(), 2);
    EXPECT_TRUE(close(C, {3.0, 6.0, 9.0, 12.0}, 0.0));
  }
}

TEST(Gemm, BlockedIsDeterministic) {
  const Floats A = random_floats(200 * 300, 6), B = random_floats(300 * 270, 7);
  Floats C1(200 * 270), C2(200 * 270);
  mtrt::cpu::gemm_blocked(false, false, 200, 270, 300, 1.f, A.data(), 300,
                          B.data(), 270, 0.f, C1.data(), 270);
  mtrt::cpu::gemm_blocked(false, false, 200, 270, 300, 1.f, A.data(), 300,
                          B.data(), 270, 0.f, C2.data(), 270);
  EXPECT_TRUE(bitwise_equal(C1, C2));
}

} // namespace
} // namespace mtrt::test
