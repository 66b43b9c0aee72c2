//===- LrSchedule.h - the learning rate of each step -------------*- C++ -*-===//
//
// As the oracle (tests/e2e/oracle/reference_train.py) computes it, for step t
// of N: lr*(t+1)/W while t < W; then lr (constant) or, for cosine,
// lr*R + 0.5*(lr - lr*R)*(1 + cos(pi*p)) with p = (t - W) / max(1, N - W).
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_TRAINER_LRSCHEDULE_H
#define MEGATRAIN_RUNTIME_TRAINER_LRSCHEDULE_H

#include <cstdint>

namespace mtrt {

struct LrSchedule {
  double lr = 3e-4;
  int64_t warmup = 0;
  bool cosine = true;
  double min_lr_ratio = 0.1;
  int64_t steps = 1; // N: the run's total steps

  double at(int64_t step) const;
};

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_TRAINER_LRSCHEDULE_H
