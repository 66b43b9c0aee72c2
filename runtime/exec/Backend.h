//===- Backend.h - the device interface the executor drives ------*- C++ -*-===//
//
// A small device abstraction in the spirit of IREE's HAL and ggml's backends:
// kNumStreams in-order streams, events with CUDA semantics, one arena per
// DType allocated once, host memory the device copies from, async copies, and
// the DeviceKernels that template functions call on the compute stream.
//
// Event semantics (ir/MtScheduleOps.td): record(s, e) captures all work
// issued to stream s so far; wait(s, e) blocks stream s until the latest
// record of e issued before the wait has completed; a wait on an event never
// recorded completes at once. Events are reused every step.
//
// Issuing never blocks on device work (a backend may block for a bounded
// queue), so one thread can issue a whole step and then synchronize().
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_EXEC_BACKEND_H
#define MEGATRAIN_RUNTIME_EXEC_BACKEND_H

#include "runtime/exec/Program.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace mtrt {

class DeviceKernels;
class Trace;

constexpr int kNumDTypes = 3; // DType::Storage, F32, I32

/// How the storage type is held in host staging and device memory.
enum class StorageFormat : uint8_t {
  F32,            // plain f32 (CPU, --precision fp32)
  F32RoundedBf16, // f32 holding bf16 values (CPU, --precision bf16)
  Bf16,           // 16-bit bf16 (CUDA)
};

struct BackendOptions {
  bool bf16 = false;         // --precision bf16
  bool stress = false;       // random 0-2 ms delays before random commands
  uint64_t stress_seed = 0;  // makes the delays reproducible per stream
  int queue_depth = 1024;    // commands a stream may hold before issue blocks
  Trace *trace = nullptr;    // when set, each command's start and end
  int64_t device_budget = 0; // the plan's device bytes budget (0: none)
};

/// Host memory the device copies from or into (pinned on CUDA).
using HostMemory = std::unique_ptr<void, void (*)(void *)>;

class Backend {
public:
  virtual ~Backend() = default;

  virtual const char *name() const = 0;
  /// What the trainer's first line adds after the name: the device and the
  /// kernels chosen for it, if the backend has any to say.
  virtual std::string details() const { return {}; }
  virtual StorageFormat storage_format() const = 0;
  int64_t storage_size() const {
    return storage_format() == StorageFormat::Bf16 ? 2 : 4;
  }
  int64_t dtype_size(DType t) const {
    return t == DType::Storage ? storage_size() : 4;
  }

  /// Throws Error, naming the limit, when the plan needs what this backend's
  /// kernels cannot do (called before anything is loaded).
  virtual void check_supported(const Program &) const {}

  /// Allocates the arenas once: elems[int(DType)] elements of each dtype,
  /// zeroed. Throws Error, naming the arena and bytes, when the device lacks
  /// the memory.
  virtual void allocate_arenas(const int64_t elems[kNumDTypes]) = 0;
  virtual void *arena(DType t) = 0;
  /// Zeroed host memory the device can copy from and into; throws Error.
  virtual HostMemory allocate_host(int64_t bytes) = 0;

  /// The kernels, running on the compute stream.
  virtual DeviceKernels &kernels() = 0;

  // ---- commands, in issue order per stream ------------------------------
  // `label` names the command in traces; it must outlive the command.

  /// Device work: fn calls kernels() (the CPU backend runs it on the stream's
  /// worker; CUDA runs it at issue, enqueuing kernels on the stream).
  virtual void launch(Stream s, const char *label, std::function<void()> fn) = 0;
  /// Host code ordered on stream s (Pack, Accumulate, AdamW, LoadBatch...).
  virtual void host_task(Stream s, const char *label,
                         std::function<void()> fn) = 0;
  /// Host to device or device to host, `bytes` long.
  virtual void copy(Stream s, const char *label, void *dst, const void *src,
                    int64_t bytes) = 0;
  /// Sets `bytes` of device memory to `byte` (stress mode's poison).
  virtual void fill_device(Stream s, void *dst, uint8_t byte,
                           int64_t bytes) = 0;
  virtual void record(Stream s, const char *label, int event) = 0;
  virtual void wait(Stream s, const char *label, int event) = 0;
  /// Blocks until every command issued so far has completed; rethrows the
  /// first error a command threw (the rest of the step is then skipped).
  virtual void synchronize() = 0;
};

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_EXEC_BACKEND_H
