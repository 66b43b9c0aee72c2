//===- Executor.h - runs one step of a Program on a Backend ------*- C++
//-*-===//
//
// The issuing thread walks Program.commands in order and hands each to its
// stream (never blocking on device work, except for a backend's bounded
// queue), then waits for all streams: a step ends with a barrier.
//
//  - Launch calls templates[tmpl].fn with LaunchArgs resolved once from
//    buffer indices. A Tokens input points at the micro-batch's ids
//    (element mb*2*B*S); its targets follow B*S elements later. A Loss
//    output points at entry mb. The workspace is one storage buffer of the
//    largest workspace_elems, after the storage arena's buffers. A `fresh`
//    launch first zeroes the unit's region of its gradient slot.
//  - Pack, Accumulate, GradNorm, AdamW and LoadBatch run on the host stream
//    with the HostStore, the BatchSource and a ThreadPool. GradNorm runs in
//    the last micro-step of an optimizer step only. In that micro-step the
//    last Accumulate into a unit's accumulators is followed by the sum of
//    their squares, while the device still computes, so GradNorm only adds.
//    An AdamW(u) whose stream's next host-store command is u's first Pack
//    issues nothing: the packs apply the update as they go (HostStore).
//  - In stress mode, recording a BufferFree event first fills its buffer
//    with 0xFF bytes (NaN in f32 and bf16, -1 as a token id) on the
//    recording stream, so any reader not ordered by a wait sees poison.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_EXEC_EXECUTOR_H
#define MEGATRAIN_RUNTIME_EXEC_EXECUTOR_H

#include "runtime/exec/Backend.h"
#include "runtime/exec/Program.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mtrt {

class HostStore;
namespace host {
class ThreadPool;
}

/// Supplies LoadBatch with the step's token windows.
class BatchSource {
public:
  virtual ~BatchSource() = default;
  /// Fills `batch`, laid out [M][B*S ids][B*S targets], for micro-step
  /// `micro` of optimizer step `step`.
  virtual void fill(int64_t step, int micro, int32_t *batch) = 0;
};

struct ExecutorOptions {
  int grad_accum = 1;  // micro-steps per optimizer step (dloss divides by it)
  bool stress = false; // poison buffers as their BufferFree events record
};

class Executor {
public:
  /// Checks the program, allocates the arenas and host buffers once; throws
  /// Error.
  Executor(const Program &p, Backend &backend, HostStore &store,
           BatchSource &batches, host::ThreadPool *pool,
           const ExecutorOptions &opts);
  ~Executor();

  /// Runs the step's commands as micro-step `micro` of optimizer step
  /// `step`; returns when every stream is done. Rethrows a command's error.
  void run(int64_t step, int micro);
  /// The per-micro-batch mean losses the last run landed (M of them).
  std::vector<float> losses() const;

  /// d(step loss)/d(sum of token losses) = 1 / (A*M*B*S).
  float dloss() const { return dloss_; }
  void *buffer(int b) const { return addr_[size_t(b)]; }
  int64_t buffer_bytes(int b) const;
  int64_t host_bytes() const { return host_bytes_; }
  int64_t device_bytes() const { return device_bytes_; }

private:
  struct ResolvedLaunch {
    std::vector<void *> inputs, outputs;
    LaunchArgs args;
    int64_t zero_elems; // > 0: zero this much of the gradient slot first
  };
  void issue(int c, int64_t step, int micro);
  void issue_poison(Stream s, int buffer);

  const Program &p_;
  Backend &backend_;
  HostStore &store_;
  BatchSource &batches_;
  host::ThreadPool *pool_;
  ExecutorOptions opts_;
  float dloss_;

  std::vector<HostMemory> host_memory_;
  std::vector<void *> addr_; // per buffer
  void *workspace_ = nullptr;
  std::vector<ResolvedLaunch> launches_;
  std::vector<std::string> labels_; // per command, for traces
  /// Per command: the units whose accumulators this Accumulate is the
  /// step's last to add into.
  std::vector<std::vector<int>> squares_after_;
  std::vector<std::string> squares_labels_; // per unit
  std::vector<char> left_to_packs_; // per command: an AdamW its packs apply
  std::vector<std::string> poison_labels_; // per buffer
  int loss_host_ = -1;
  int64_t host_bytes_ = 0, device_bytes_ = 0;
};

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_EXEC_EXECUTOR_H
