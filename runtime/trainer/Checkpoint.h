//===- Checkpoint.h - save and resume the optimizer state --------*- C++
//-*-===//
//
// A checkpoint is a directory D/step-NNNNNNNN holding state.safetensors (the
// master weights and Adam moments of every trainable param, as
// "master/NAME", "adam_m/NAME", "adam_v/NAME") and manifest.json (step, data
// position, optimizer step count, seed, plan_hash, the flags that affect the
// math, and the state file's size and checksum). D/latest names the newest;
// D keeps only that one once a new one is complete.
//
// Writing is crash-safe: the directory is built under a temporary name,
// fsynced and renamed, then D/latest is replaced atomically, and only then
// are the previous checkpoint and leftovers of killed saves removed. The caller
// flushes the pending AdamW first, so a checkpoint holds no half-applied step
// and resuming continues bitwise as if uninterrupted.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_TRAINER_CHECKPOINT_H
#define MEGATRAIN_RUNTIME_TRAINER_CHECKPOINT_H

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace mtrt {

class HostStore;

struct CheckpointManifest {
  std::string model, plan_hash;
  int64_t step = 0;            // optimizer steps done: training resumes here
  int64_t optimizer_steps = 0; // AdamW updates applied to the state
  int64_t data_position = 0;   // the first window of step `step`
  uint64_t seed = 0;
  std::map<std::string, std::string> flags; // math-relevant flags, as text
};

/// Test hook: called with "before_rename" (the new checkpoint is complete
/// under its temporary name) and "before_latest" (renamed, D/latest not yet
/// updated). Throwing from it simulates a crash at that point.
using CheckpointHook = std::function<void(const std::string &stage)>;

/// Writes `store` (nothing pending) as D/step-<manifest.step>; returns its
/// directory. Throws Error naming the file on any failure, leaving the
/// previous checkpoint in place.
std::string save_checkpoint(const std::string &dir, const HostStore &store,
                            const CheckpointManifest &manifest,
                            const CheckpointHook &hook = nullptr);

/// Reads the checkpoint D/latest names (or D itself when it holds a
/// manifest.json) into `store`: every trainable param's master and moments.
/// Throws Error naming the file when it is missing, corrupt, or from another
/// plan than store.program() unless `other_plan` allows one whose trainable
/// params match this plan's by name and shape (masters in either format
/// are converted: fp32 to bf16 rounds to nearest, bf16 to fp32 is exact).
CheckpointManifest load_checkpoint(const std::string &dir, HostStore &store,
                                   bool other_plan = false);

/// The checkpoint directory that `dir` resolves to, without reading it.
std::string resolve_checkpoint(const std::string &dir);

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_TRAINER_CHECKPOINT_H
