//===- MetricsLog.cpp - one JSON object per step --------------------------===//

#include "runtime/trainer/MetricsLog.h"

#include "runtime/trainer/Json.h"

namespace mtrt {

std::string step_json(const StepRecord &r) {
  return "{\"step\": " + std::to_string(r.step) +
         ", \"loss\": " + json_number(r.loss) +
         ", \"lr\": " + json_number(r.lr) +
         ", \"grad_norm\": " + json_number(r.grad_norm) +
         ", \"tokens_per_s\": " + json_number(r.tokens_per_s) +
         ", \"tokens\": " + std::to_string(r.tokens) + "}";
}

MetricsLog::MetricsLog(const std::string &path) : file_(path) {}

void MetricsLog::append(const StepRecord &r) {
  file_.write(step_json(r) + "\n");
  file_.flush();
}

void MetricsLog::commit() { file_.commit(); }

} // namespace mtrt
