//===- CpuBackend.h - the device interface on CPU threads --------*- C++ -*-===//
//
// Executes the same schedule as the GPU: one worker thread per stream, events
// as fences over per-stream completion counts (CpuStream.h), arenas in host
// memory, kernels from runtime/kernels. Storage is f32; with bf16 on, kernels
// round their storage outputs to bf16 as the GPU's storage would.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_EXEC_CPUBACKEND_H
#define MEGATRAIN_RUNTIME_EXEC_CPUBACKEND_H

#include "runtime/exec/Backend.h"
#include "runtime/exec/CpuKernels.h"
#include "runtime/exec/CpuStream.h"

#include <memory>
#include <vector>

namespace mtrt {

class CpuBackend final : public Backend {
public:
  explicit CpuBackend(const BackendOptions &opts);
  /// Waits for what was issued, then stops the workers.
  ~CpuBackend() override;

  const char *name() const override { return "cpu"; }
  StorageFormat storage_format() const override {
    return opts_.bf16 ? StorageFormat::F32RoundedBf16 : StorageFormat::F32;
  }

  void allocate_arenas(const int64_t elems[kNumDTypes]) override;
  void *arena(DType t) override { return arenas_[int(t)].get(); }
  HostMemory allocate_host(int64_t bytes) override;
  DeviceKernels &kernels() override { return kernels_; }

  void launch(Stream s, const char *label, std::function<void()> fn) override;
  void host_task(Stream s, const char *label,
                 std::function<void()> fn) override;
  void copy(Stream s, const char *label, void *dst, const void *src,
            int64_t bytes) override;
  void fill_device(Stream s, void *dst, uint8_t byte, int64_t bytes) override;
  void record(Stream s, const char *label, int event) override;
  void wait(Stream s, const char *label, int event) override;
  void synchronize() override;

private:
  /// Where an event's latest record sits: `count` commands of `stream`.
  struct EventFence {
    int stream = -1; // never recorded
    uint64_t count = 0;
  };
  CpuStream &stream(Stream s);
  EventFence &event(int e);

  BackendOptions opts_;
  CpuKernels kernels_;
  CpuFences fences_;
  std::unique_ptr<CpuStream> streams_[kNumStreams];
  std::vector<EventFence> events_; // issuing thread only
  HostMemory arenas_[kNumDTypes] = {{nullptr, nullptr},
                                    {nullptr, nullptr},
                                    {nullptr, nullptr}};
};

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_EXEC_CPUBACKEND_H
