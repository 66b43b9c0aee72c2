//===- TrainerFlags.h - the trainer's command line ---------------*- C++
//-*-===//
//
// design.md section 8's flags plus the optimizer, schedule and service
// flags. `--flag value` and `--flag=value` both work; every bad value is an
// Error naming the flag and the value.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_TRAINER_TRAINERFLAGS_H
#define MEGATRAIN_RUNTIME_TRAINER_TRAINERFLAGS_H

#include <cstdint>
#include <string>

namespace mtrt {

struct TrainerOptions {
  std::string data;            // --data (required)
  std::string backend = "cpu"; // --backend cpu|cuda
  int64_t steps = 1;
  double lr = 3e-4;
  int64_t warmup = 0;
  std::string lr_schedule = "cosine"; // cosine|constant
  double min_lr_ratio = 0.1;
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double clip_grad = 1.0; // 0 disables
  int64_t grad_accum = 1;
  std::string precision; // fp32|bf16; empty: the backend's default
  uint64_t seed = 0;
  std::string init = "onnx"; // onnx|random
  std::string weights; // --weights; default: weights.safetensors by the binary
  std::string log_jsonl, dump_grads, trace, export_path;
  std::string checkpoint_dir, resume;
  bool resume_other_plan = false; // --resume-other-plan
  int64_t checkpoint_every = 0;   // 0: only at the end of training
  bool stress = false;
  int64_t threads = 0; // host pool; 0: hardware concurrency
  bool help = false;
};

/// Parses argv[1..argc); throws Error on an unknown flag or bad value.
TrainerOptions parse_trainer_flags(int argc, char **argv);
std::string trainer_usage(const char *argv0);

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_TRAINER_TRAINERFLAGS_H
