//===- Progress.h - what a person watching the run sees ----------*- C++ -*-===//
//
// On a terminal: one redrawn line with a bar, the step, loss, tokens/s and
// the ETA. Otherwise (a log file, CI): one plain line per step.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_TRAINER_PROGRESS_H
#define MEGATRAIN_RUNTIME_TRAINER_PROGRESS_H

#include "runtime/trainer/MetricsLog.h"

#include <cstdint>
#include <cstdio>

namespace mtrt {

class Progress {
public:
  /// Steps first_step .. total_steps-1 will be reported; `tty` picks the bar.
  Progress(int64_t first_step, int64_t total_steps, bool tty, std::FILE *out);
  void step(const StepRecord &r);
  /// Ends the bar's line.
  void finish();

private:
  int64_t first_, total_;
  bool tty_;
  std::FILE *out_;
  double elapsed_ = 0;
  bool drawn_ = false;
};

/// "1h02m", "3m05s", "12s".
std::string format_duration(double seconds);

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_TRAINER_PROGRESS_H
