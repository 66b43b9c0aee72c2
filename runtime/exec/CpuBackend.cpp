//===- CpuBackend.cpp - the device interface on CPU threads ---------------===//

#include "runtime/exec/CpuBackend.h"

#include "runtime/exec/Error.h"
#include "runtime/exec/Trace.h"

#include <cstdlib>
#include <cstring>

namespace mtrt {

namespace {
const char *const kStreamNames[kNumStreams] = {"h2d", "compute", "d2h",
                                               "host"};
const char *const kDTypeNames[kNumDTypes] = {"storage", "f32", "i32"};

void free_memory(void *p) { std::free(p); }

// Zeroed, 64-byte aligned; null on failure (or for 0 bytes).
void *allocate_zeroed(int64_t bytes) {
  if (bytes <= 0)
    return nullptr;
  size_t size = (size_t(bytes) + 63) & ~size_t(63);
  void *p = std::aligned_alloc(64, size);
  if (p)
    std::memset(p, 0, size);
  return p;
}
} // namespace

CpuBackend::CpuBackend(const BackendOptions &opts)
    : opts_(opts), kernels_(opts.bf16) {
  for (int s = 0; s < kNumStreams; ++s) {
    CpuStream::Options so;
    so.index = s;
    so.queue_depth = opts.queue_depth;
    so.trace = opts.trace;
    so.stress = opts.stress;
    so.stress_seed = opts.stress_seed;
    streams_[s] = std::make_unique<CpuStream>(so, fences_);
    if (opts.trace)
      opts.trace->name_row(s, kStreamNames[s]);
  }
}

CpuBackend::~CpuBackend() {
  for (int s = 0; s < kNumStreams; ++s)
    fences_.wait(s, streams_[s]->issued());
  fences_.take_error();
}

void CpuBackend::allocate_arenas(const int64_t elems[kNumDTypes]) {
  for (int t = 0; t < kNumDTypes; ++t) {
    int64_t bytes = elems[t] * dtype_size(DType(t));
    if (elems[t] < 0)
      fail("negative size for the ", kDTypeNames[t], " device arena");
    void *p = allocate_zeroed(bytes);
    if (bytes > 0 && !p)
      fail("the cpu backend cannot allocate ", bytes, " bytes for the ",
           kDTypeNames[t],
           " device arena (out of memory; a smaller --batch or --seq-len at "
           "compile time shrinks it)");
    arenas_[t] = HostMemory(p, free_memory);
  }
}

HostMemory CpuBackend::allocate_host(int64_t bytes) {
  void *p = allocate_zeroed(bytes);
  if (bytes > 0 && !p)
    fail("cannot allocate ", bytes, " bytes of host memory");
  return HostMemory(p, free_memory);
}

CpuStream &CpuBackend::stream(Stream s) {
  int i = int(s);
  if (i < 0 || i >= kNumStreams)
    fail("stream ", i, " does not exist (", kNumStreams, " streams)");
  return *streams_[i];
}

CpuBackend::EventFence &CpuBackend::event(int e) {
  if (e < 0)
    fail("event ", e, " does not exist");
  if (size_t(e) >= events_.size())
    events_.resize(size_t(e) + 1);
  return events_[size_t(e)];
}

void CpuBackend::launch(Stream s, const char *label,
                        std::function<void()> fn) {
  stream(s).push(label, std::move(fn));
}

void CpuBackend::host_task(Stream s, const char *label,
                           std::function<void()> fn) {
  stream(s).push(label, std::move(fn));
}

void CpuBackend::copy(Stream s, const char *label, void *dst, const void *src,
                      int64_t bytes) {
  stream(s).push(label, [dst, src, bytes] {
    if (bytes > 0)
      std::memcpy(dst, src, size_t(bytes));
  });
}

void CpuBackend::fill_device(Stream s, void *dst, uint8_t byte,
                             int64_t bytes) {
  stream(s).push("poison", [dst, byte, bytes] {
    if (bytes > 0)
      std::memset(dst, byte, size_t(bytes));
  });
}

void CpuBackend::record(Stream s, const char *label, int e) {
  EventFence &fence = event(e);
  // The record is itself a command: it completes after all earlier ones.
  uint64_t count = stream(s).push(label, [] {});
  fence.stream = int(s);
  fence.count = count;
}

void CpuBackend::wait(Stream s, const char *label, int e) {
  EventFence fence = event(e); // captured now: the latest record so far
  if (fence.stream < 0 || fence.stream == int(s)) {
    // Never recorded: completes at once. Same stream: already ordered.
    stream(s).push(label, [] {});
    return;
  }
  CpuFences *fences = &fences_;
  stream(s).push(label, [fences, fence] {
    fences->wait(fence.stream, fence.count);
  });
}

void CpuBackend::synchronize() {
  for (int s = 0; s < kNumStreams; ++s)
    fences_.wait(s, streams_[s]->issued());
  if (std::exception_ptr e = fences_.take_error())
    std::rethrow_exception(e);
}

} // namespace mtrt
