//===- Trainer.h - a training run, start to finish ---------------*- C++ -*-===//
//
// Wires the services around the executor: the data loader, the host store
// and its initial weights (or a checkpoint), the backend, the LR schedule,
// logging, checkpoints, --dump-grads, --export and --trace. One optimizer
// step is A runs of the program's commands (micro-steps); after it, the
// update of its gradients is scheduled and applied by the next step's AdamW
// commands (or a flush before a checkpoint, an export and at the end).
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_TRAINER_TRAINER_H
#define MEGATRAIN_RUNTIME_TRAINER_TRAINER_H

#include "runtime/exec/Program.h"
#include "runtime/trainer/TrainerFlags.h"

#include <cstdio>
#include <string>

namespace mtrt {

class Trainer {
public:
  /// `exe_dir`: where weights.safetensors is looked for by default.
  Trainer(const Program &p, TrainerOptions opts, std::string exe_dir);
  /// Trains; throws Error. Progress goes to `out`, warnings to `err`.
  void run(std::FILE *out, std::FILE *err);

  /// Host bytes per trainable param measured in the last run (the store,
  /// the staging and landing buffers).
  double host_bytes_per_param() const { return host_bytes_per_param_; }

private:
  const Program &p_;
  TrainerOptions opts_;
  std::string exe_dir_;
  double host_bytes_per_param_ = 0;
};

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_TRAINER_TRAINER_H
