//===- LrScheduleTest.cpp - the oracle's learning-rate formula ------------===//

#include "runtime/trainer/LrSchedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

using namespace mtrt;

namespace {

// tests/e2e/oracle/reference_train.py: lr_at, transcribed.
double oracle_lr(double lr, int64_t W, bool cosine, double R, int64_t N,
                 int64_t step) {
  if (step < W)
    return lr * double(step + 1) / double(W);
  if (!cosine)
    return lr;
  double progress = double(step - W) / double(std::max<int64_t>(1, N - W));
  double low = lr * R;
  return low + 0.5 * (lr - low) * (1 + std::cos(3.141592653589793 * progress));
}

TEST(LrScheduleTest, MatchesTheOracle) {
  for (bool cosine : {true, false})
    for (int64_t W : {0, 1, 3, 10})
      for (int64_t N : {1, 2, 7, 10, 100}) {
        LrSchedule s;
        s.lr = 3e-4;
        s.warmup = W;
        s.cosine = cosine;
        s.min_lr_ratio = 0.1;
        s.steps = N;
        for (int64_t t = 0; t < N + 2; ++t)
          EXPECT_EQ(s.at(t), oracle_lr(3e-4, W, cosine, 0.1, N, t))
              << "W " << W << " N " << N << " t " << t;
      }
}

TEST(LrScheduleTest, Landmarks) {
  LrSchedule s;
  s.lr = 1.0;
  s.warmup = 4;
  s.steps = 14;
  s.min_lr_ratio = 0.25;
  EXPECT_DOUBLE_EQ(s.at(0), 0.25);
  EXPECT_DOUBLE_EQ(s.at(3), 1.0);
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);           // cosine starts at the peak
  EXPECT_NEAR(s.at(9), 0.625, 1e-15);       // halfway: midpoint
  EXPECT_NEAR(s.at(14), 0.25, 1e-15);       // the end: lr * R
}

} // namespace
