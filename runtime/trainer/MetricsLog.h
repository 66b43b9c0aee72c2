//===- MetricsLog.h - one JSON object per step -------------------*- C++ -*-===//
//
// --log-jsonl F: {"step", "loss", "lr", "grad_norm", "tokens_per_s",
// "tokens"} per step, as the oracle writes them. Lines go to F.tmp as they
// come (flushed, for watching a run) and F appears when training succeeded.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_TRAINER_METRICSLOG_H
#define MEGATRAIN_RUNTIME_TRAINER_METRICSLOG_H

#include "runtime/trainer/AtomicFile.h"

#include <cstdint>
#include <memory>
#include <string>

namespace mtrt {

struct StepRecord {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double tokens_per_s = 0;
  int64_t tokens = 0;
  double seconds = 0; // wall time of the step
};

std::string step_json(const StepRecord &r);

class MetricsLog {
public:
  explicit MetricsLog(const std::string &path);
  void append(const StepRecord &r);
  void commit();

private:
  AtomicFile file_;
};

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_TRAINER_METRICSLOG_H
