//===- ToyRun.h - train the toy program for a few steps ----------*- C++ -*-===//
//
// The loop trainer_main runs, minus the services: A micro-steps, the grad
// norm, schedule_update, repeat; a flush at the end. Tests compare what
// comes out of differently run (stressed, mutated) programs bit for bit.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_TESTS_UNIT_RUNTIME_EXEC_TOYRUN_H
#define MEGATRAIN_TESTS_UNIT_RUNTIME_EXEC_TOYRUN_H

#include "ToyProgram.h"

#include "runtime/exec/Backend.h"
#include "runtime/exec/HostStore.h"

#include <string>
#include <vector>

namespace mtrt::toy {

struct ToyRunOptions {
  std::string backend = "cpu";
  bool stress = false;
  uint64_t seed = 0;
  int steps = 3;
  int grad_accum = 1;
  bool bf16 = false;
  double lr = 1e-2;
  Trace *trace = nullptr;
  /// Stop after the first step whose losses differ from this run's (or are
  /// not finite): a caught mutation need not run to the end.
  const struct ToyRunResult *stop_on_mismatch = nullptr;
};

struct ToyRunResult {
  std::vector<float> losses;     // every micro-batch loss of every step
  std::vector<double> norms;     // per step
  std::vector<float> masters;    // all trainable params after the flush
  bool finite() const;
  bool same_bits(const ToyRunResult &o) const;
};

/// Sets the store's untied params from toy_initial_weights(seed).
void load_toy_weights(HostStore &store, uint64_t seed);

ToyRunResult run_toy(const Program &p, const ToyRunOptions &opts);

} // namespace mtrt::toy

#endif // MEGATRAIN_TESTS_UNIT_RUNTIME_EXEC_TOYRUN_H
