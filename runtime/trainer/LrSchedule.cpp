//===- LrSchedule.cpp - the learning rate of each step --------------------===//

#include "runtime/trainer/LrSchedule.h"

#include <algorithm>
#include <cmath>

namespace mtrt {

constexpr double kPi = 3.14159265358979323846; // math.pi

double LrSchedule::at(int64_t step) const {
  if (step < warmup)
    return lr * double(step + 1) / double(warmup);
  if (!cosine)
    return lr;
  const double progress =
      double(step - warmup) / double(std::max<int64_t>(1, steps - warmup));
  const double low = lr * min_lr_ratio;
  return low + 0.5 * (lr - low) * (1.0 + std::cos(kPi * progress));
}

} // namespace mtrt
