//===- CudaBackend.cpp - the device interface on one CUDA GPU -------------===//

#include "runtime/cuda/CudaBackend.h"

#include "runtime/cuda/CudaKernels.h"
#include "runtime/exec/CpuStream.h"
#include "runtime/exec/Error.h"
#include "runtime/exec/Trace.h"

#ifdef MEGATRAIN_CUDA_EMULATION
#include "runtime/cuda/CudaCompat.h" // the runtime calls on CPU threads
#else
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <mutex>
#include <unistd.h>
#include <vector>

namespace mtrt {
namespace MT_KNS {

bool device_available(std::string *why);

namespace {

const char *const kStreamNames[kNumStreams] = {"h2d", "compute", "d2h", "host"};
const char *const kDTypeNames[kNumDTypes] = {"storage (bf16)", "f32", "i32"};
constexpr int kHost = int(Stream::Host);
constexpr int kDeviceStreams = 3; // h2d, compute, d2h: Stream values 0-2

// Kernel scratch, the cuBLASLt workspace and the CUDA context's own needs
// beyond the arenas.
constexpr int64_t kReserveBytes = int64_t(256) << 20;

void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess)
    fail("cuda: ", what, " failed: ", cudaGetErrorString(e));
}

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(1 << 30));
  return buf;
}

void free_pinned(void *p) {
  if (p)
    cudaFreeHost(p);
}

uint64_t splitmix64(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// cudaEvents for records, reused once nothing refers to them.
struct EventPool {
  std::mutex mu;
  std::vector<cudaEvent_t> free, all;
  ~EventPool() {
    for (cudaEvent_t e : all)
      cudaEventDestroy(e);
  }
};
struct PooledEvent {
  cudaEvent_t event;
};
using EventRef = std::shared_ptr<PooledEvent>;

EventRef take_event(const std::shared_ptr<EventPool> &pool) {
  cudaEvent_t e;
  {
    std::lock_guard<std::mutex> lock(pool->mu);
    if (pool->free.empty()) {
      // Blocking sync: a host worker waiting on it sleeps instead of
      // spinning a core the optimizer needs.
      check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming |
                                             cudaEventBlockingSync),
            "cudaEventCreate");
      pool->all.push_back(e);
    } else {
      e = pool->free.back();
      pool->free.pop_back();
    }
  }
  std::shared_ptr<EventPool> keep = pool;
  return EventRef(new PooledEvent{e}, [keep](PooledEvent *p) {
    std::lock_guard<std::mutex> lock(keep->mu);
    keep->free.push_back(p->event);
    delete p;
  });
}

struct HostFn {
  std::function<void()> fn;
  CpuFences *fences;
};
void CUDART_CB run_host_fn(void *arg) {
  std::unique_ptr<HostFn> f(static_cast<HostFn *>(arg));
  try {
    f->fn();
  } catch (...) {
    f->fences->set_error(std::current_exception());
  }
}

int64_t pinned_limit() {
  if (const char *s = std::getenv("MEGATRAIN_PINNED_LIMIT")) {
    char *end = nullptr;
    const double v = std::strtod(s, &end);
    double scale = 1;
    if (end && (*end == 'G' || *end == 'g'))
      scale = double(1 << 30);
    else if (end && (*end == 'M' || *end == 'm'))
      scale = double(1 << 20);
    if (v > 0)
      return int64_t(v * scale);
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? int64_t(pages) * page / 2 : int64_t(1) << 34;
}

class CudaBackend final : public Backend {
public:
  explicit CudaBackend(const BackendOptions &opts);
  ~CudaBackend() override;

  const char *name() const override { return "cuda"; }
  std::string details() const override {
    return device_name_ + "; attention on " +
           describe(kernels_->attention_kernels());
  }
  StorageFormat storage_format() const override { return StorageFormat::Bf16; }

  void check_supported(const Program &p) const override {
    check_attention_limits(p.max_head_dim, p.max_alibi_heads);
  }
  void allocate_arenas(const int64_t elems[kNumDTypes]) override;
  void *arena(DType t) override { return arenas_[int(t)]; }
  HostMemory allocate_host(int64_t bytes) override;
  DeviceKernels &kernels() override { return *kernels_; }

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
  /// Where an event's latest record sits: `count` commands of `stream`
  /// (issued, for a device stream), and its CUDA event for device records.
  struct EventRecord {
    int stream = -1; // never recorded
    uint64_t count = 0;
    EventRef handle;
  };
  struct Timing {
    const char *label;
    cudaEvent_t start, end;
    bool busy; // work (kernels, copies), not a wait or a record
  };
  /// What one step (one synchronize) moved and kept busy, for
  /// MEGATRAIN_CUDA_STATS; busy times need --trace.
  struct StepStats {
    double wall_s = 0;
    int64_t bytes[kDeviceStreams] = {0, 0, 0};
    double busy_s[kDeviceStreams] = {0, 0, 0};
  };
  /// A device stream's state; touched only by its issue thread, and by the
  /// issuing thread while every worker is idle (synchronize).
  struct DeviceStream {
    cudaStream_t stream = nullptr;
    uint64_t rng = 0;
    std::vector<Timing> pending;
    std::vector<cudaEvent_t> timing_events;
    size_t timing_used = 0;
  };

  CpuStream &stream(Stream s);
  EventRecord &event(int e);
  /// Queues op on a device stream's issue thread; returns its count.
  uint64_t push_device(Stream s, const char *label,
                       std::function<void(cudaStream_t)> op, bool busy = true);
  void run_device(DeviceStream &ds, const char *label,
                  const std::function<void(cudaStream_t)> &op, bool busy);
  void wait_idle();
  void flush_timings();
  void rebase_timings();
  void write_stats();

  BackendOptions opts_;
  std::string device_name_;
  int64_t device_total_ = 0;
  std::unique_ptr<CudaKernels> kernels_;
  std::shared_ptr<EventPool> pool_;
  DeviceStream dev_[kDeviceStreams];
  CpuFences fences_;
  std::unique_ptr<CpuStream> streams_[kNumStreams];
  std::vector<EventRecord> events_; // issuing thread only
  void *arenas_[kNumDTypes] = {nullptr, nullptr, nullptr};
  int64_t arena_bytes_ = 0;
  int64_t pinned_bytes_ = 0, pinned_limit_ = 0;
  size_t min_free_ = SIZE_MAX;
  cudaEvent_t base_ = nullptr; // timing origin of the current step
  double base_us_ = 0.0;
  std::vector<StepStats> steps_;
  uint64_t issued_at_sync_ = 0;
  StepStats step_;
  std::chrono::steady_clock::time_point step_start_ =
      std::chrono::steady_clock::now();
};

CudaBackend::CudaBackend(const BackendOptions &opts) : opts_(opts) {
  if (!opts.bf16)
    fail("--precision fp32: the cuda backend stores activations and weights "
         "in bf16 only (drop --precision, or pass --precision bf16)");
  std::string why;
  if (!device_available(&why))
    fail("--backend cuda: not available on this machine (", why, ")");
  check(cudaSetDevice(0), "cudaSetDevice");
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  device_name_ = prop.name;
  device_total_ = int64_t(prop.totalGlobalMem);
  pinned_limit_ = pinned_limit();

  kernels_ = std::make_unique<CudaKernels>();
  const AttentionKernels attention = attention_kernels_from_env();
  if (on_cudnn(attention)) { // refused now, not mid-step
    const char *named = std::getenv("MEGATRAIN_CUDA_ATTENTION");
#ifdef MEGATRAIN_CUDA_EMULATION
    fail("MEGATRAIN_CUDA_ATTENTION=", named,
         ": cuDNN runs on a GPU only, not on the emulator");
#else
    if (!cuda::cudnn_loadable(&why))
      fail("MEGATRAIN_CUDA_ATTENTION=", named, ": ", why);
#endif
  }
  kernels_->set_attention_kernels(attention);
  kernels_->set_moe_kernels(moe_kernels_from_env());
  pool_ = std::make_shared<EventPool>();
  for (int s = 0; s < kDeviceStreams; ++s) {
    check(cudaStreamCreateWithFlags(&dev_[s].stream, cudaStreamNonBlocking),
          "cudaStreamCreate");
    dev_[s].rng = opts.stress_seed * 0x9e3779b97f4a7c15ull + uint64_t(s) + 17;
  }
  kernels_->set_stream(dev_[int(Stream::Compute)].stream);
  for (int s = 0; s < kNumStreams; ++s) {
    CpuStream::Options so;
    so.index = s;
    so.queue_depth = opts.queue_depth;
    so.trace = s == kHost ? opts.trace : nullptr; // devices: timing events
    so.stress = opts.stress;
    so.stress_seed = opts.stress_seed;
    streams_[s] = std::make_unique<CpuStream>(so, fences_);
    if (opts.trace)
      opts.trace->name_row(s, kStreamNames[s]);
  }
  if (opts.trace) {
    check(cudaEventCreate(&base_), "cudaEventCreate");
    rebase_timings();
  }
}

CudaBackend::~CudaBackend() {
  wait_idle();
  for (DeviceStream &ds : dev_)
    cudaStreamSynchronize(ds.stream);
  fences_.take_error();
  write_stats();
  for (auto &s : streams_)
    s.reset(); // joins the workers: nothing refers to events any more
  events_.clear();
  for (DeviceStream &ds : dev_) {
    for (cudaEvent_t e : ds.timing_events)
      cudaEventDestroy(e);
    cudaStreamDestroy(ds.stream);
  }
  if (base_)
    cudaEventDestroy(base_);
  kernels_.reset();
  for (void *&a : arenas_) {
    if (a)
      cudaFree(a);
    a = nullptr;
  }
  pool_.reset();
}

CpuStream &CudaBackend::stream(Stream s) {
  const int i = int(s);
  if (i < 0 || i >= kNumStreams)
    fail("stream ", i, " does not exist (", kNumStreams, " streams)");
  return *streams_[i];
}

CudaBackend::EventRecord &CudaBackend::event(int e) {
  if (e < 0)
    fail("event ", e, " does not exist");
  if (size_t(e) >= events_.size())
    events_.resize(size_t(e) + 1);
  return events_[size_t(e)];
}

void CudaBackend::run_device(DeviceStream &ds, const char *label,
                             const std::function<void(cudaStream_t)> &op,
                             bool busy) {
  if (opts_.stress) {
    // A quarter of the commands wait up to 0.5 ms on the device first.
    const uint64_t r = splitmix64(ds.rng);
    if ((r & 3) == 0)
      launch_delay(ds.stream, uint32_t((r >> 8) % 500000));
  }
  if (!opts_.trace) {
    op(ds.stream);
    return;
  }
  if (ds.timing_used + 2 > ds.timing_events.size())
    for (int k = 0; k < 2; ++k) {
      cudaEvent_t e;
      check(cudaEventCreate(&e), "cudaEventCreate");
      ds.timing_events.push_back(e);
    }
  Timing t{label, ds.timing_events[ds.timing_used],
           ds.timing_events[ds.timing_used + 1], busy};
  ds.timing_used += 2;
  check(cudaEventRecord(t.start, ds.stream), "cudaEventRecord");
  op(ds.stream);
  check(cudaEventRecord(t.end, ds.stream), "cudaEventRecord");
  ds.pending.push_back(t);
}

uint64_t CudaBackend::push_device(Stream s, const char *label,
                                  std::function<void(cudaStream_t)> op,
                                  bool busy) {
  const int i = int(s);
  if (i < 0 || i >= kDeviceStreams)
    fail("stream ", i, " is not a device stream");
  DeviceStream *ds = &dev_[i];
  return streams_[i]->push(label, [this, ds, label, op = std::move(op), busy] {
    run_device(*ds, label, op, busy);
  });
}

void CudaBackend::launch(Stream s, const char *label,
                         std::function<void()> fn) {
  if (s != Stream::Compute)
    fail("the cuda backend runs kernels on the compute stream only ('", label,
         "' was issued on ", kStreamNames[int(s) & 3], ")");
  push_device(s, label, [fn = std::move(fn)](cudaStream_t) { fn(); });
}

void CudaBackend::host_task(Stream s, const char *label,
                            std::function<void()> fn) {
  if (s == Stream::Host) {
    stream(s).push(label, std::move(fn));
    return;
  }
  // Ordered on a device stream (stress mode's poison of a host buffer).
  CpuFences *fences = &fences_;
  push_device(s, label, [fn = std::move(fn), fences](cudaStream_t cs) {
    auto *f = new HostFn{fn, fences};
    const cudaError_t e = cudaLaunchHostFunc(cs, run_host_fn, f);
    if (e != cudaSuccess) {
      delete f;
      check(e, "cudaLaunchHostFunc");
    }
  });
}

void CudaBackend::copy(Stream s, const char *label, void *dst, const void *src,
                       int64_t bytes) {
  if (s == Stream::Host) {
    stream(s).push(label, [dst, src, bytes] {
      if (bytes > 0)
        check(cudaMemcpy(dst, src, size_t(bytes), cudaMemcpyDefault),
              "cudaMemcpy");
    });
    return;
  }
  step_.bytes[int(s)] += std::max<int64_t>(0, bytes);
  push_device(s, label, [dst, src, bytes](cudaStream_t cs) {
    if (bytes > 0)
      check(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDefault, cs),
            "cudaMemcpyAsync");
  });
}

void CudaBackend::fill_device(Stream s, void *dst, uint8_t byte,
                              int64_t bytes) {
  if (s == Stream::Host) {
    stream(s).push("poison", [dst, byte, bytes] {
      if (bytes > 0)
        check(cudaMemset(dst, byte, size_t(bytes)), "cudaMemset");
    });
    return;
  }
  push_device(s, "poison", [dst, byte, bytes](cudaStream_t cs) {
    if (bytes > 0)
      check(cudaMemsetAsync(dst, byte, size_t(bytes), cs), "cudaMemsetAsync");
  });
}

void CudaBackend::record(Stream s, const char *label, int e) {
  EventRecord &rec = event(e);
  if (s == Stream::Host) {
    // The record is itself a command: it completes after all earlier ones.
    rec = {kHost, stream(s).push(label, [] {}), nullptr};
    return;
  }
  EventRef handle = take_event(pool_);
  const uint64_t count = push_device(
      s, label,
      [handle](cudaStream_t cs) {
        check(cudaEventRecord(handle->event, cs), "cudaEventRecord");
      },
      false);
  rec = {int(s), count, std::move(handle)};
}

void CudaBackend::wait(Stream s, const char *label, int e) {
  const EventRecord rec = event(e); // captured now: the latest record so far
  const int si = int(s);
  CpuFences *fences = &fences_;
  if (rec.stream < 0 || rec.stream == si) {
    // Never recorded: completes at once. Same stream: already ordered.
    if (s == Stream::Host)
      stream(s).push(label, [] {});
    else
      push_device(
          s, label, [](cudaStream_t) {}, false);
    return;
  }
  if (s == Stream::Host) {
    stream(s).push(label, [fences, rec] {
      fences->wait(rec.stream, rec.count); // the record has been issued
      check(cudaEventSynchronize(rec.handle->event), "cudaEventSynchronize");
    });
  } else if (rec.stream == kHost) {
    // Later work of this stream is issued only once the host got there.
    push_device(
        s, label,
        [fences, rec](cudaStream_t) { fences->wait(kHost, rec.count); }, false);
  } else {
    push_device(
        s, label,
        [fences, rec](cudaStream_t cs) {
          fences->wait(rec.stream, rec.count);
          check(cudaStreamWaitEvent(cs, rec.handle->event, 0),
                "cudaStreamWaitEvent");
        },
        false);
  }
}

void CudaBackend::wait_idle() {
  for (int s = 0; s < kNumStreams; ++s)
    if (streams_[s])
      fences_.wait(s, streams_[s]->issued());
}

void CudaBackend::synchronize() {
  wait_idle();
  cudaError_t first = cudaSuccess;
  for (DeviceStream &ds : dev_) {
    const cudaError_t e = cudaStreamSynchronize(ds.stream);
    if (first == cudaSuccess)
      first = e;
  }
  size_t free = 0, total = 0;
  if (first == cudaSuccess && cudaMemGetInfo(&free, &total) == cudaSuccess)
    min_free_ = std::min(min_free_, free);
  if (opts_.trace && first == cudaSuccess)
    flush_timings();
  uint64_t issued = 0;
  for (auto &st : streams_)
    issued += st->issued();
  if (issued != issued_at_sync_) { // a step ran (not an idle synchronize)
    const auto now = std::chrono::steady_clock::now();
    step_.wall_s = std::chrono::duration<double>(now - step_start_).count();
    steps_.push_back(step_);
    step_ = StepStats();
    step_start_ = now;
    issued_at_sync_ = issued;
  }
  if (std::exception_ptr e = fences_.take_error())
    std::rethrow_exception(e);
  if (first != cudaSuccess)
    fail("cuda: the step failed on the device: ", cudaGetErrorString(first),
         " (a kernel or copy faulted; CUDA_LAUNCH_BLOCKING=1 names it)");
}

void CudaBackend::rebase_timings() {
  check(cudaEventRecord(base_, dev_[int(Stream::Compute)].stream),
        "cudaEventRecord");
  check(cudaEventSynchronize(base_), "cudaEventSynchronize");
  base_us_ = opts_.trace->now_us();
}

void CudaBackend::flush_timings() {
  for (int s = 0; s < kDeviceStreams; ++s) {
    DeviceStream &ds = dev_[s];
    for (const Timing &t : ds.pending) {
      float start = 0.f, end = 0.f;
      if (cudaEventElapsedTime(&start, base_, t.start) != cudaSuccess ||
          cudaEventElapsedTime(&end, base_, t.end) != cudaSuccess)
        continue;
      opts_.trace->add(s, t.label, base_us_ + 1000.0 * start,
                       base_us_ + 1000.0 * end);
      if (t.busy)
        step_.busy_s[s] += 1e-3 * double(end - start);
    }
    ds.pending.clear();
    ds.timing_used = 0;
  }
  rebase_timings();
}

void CudaBackend::allocate_arenas(const int64_t elems[kNumDTypes]) {
  for (void *&a : arenas_) {
    if (a)
      cudaFree(a);
    a = nullptr;
  }
  int64_t bytes[kNumDTypes], need = 0;
  for (int t = 0; t < kNumDTypes; ++t) {
    if (elems[t] < 0)
      fail("negative size for the ", kDTypeNames[t], " device arena");
    bytes[t] = elems[t] * dtype_size(DType(t));
    need += bytes[t];
  }
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  if (need + kReserveBytes > int64_t(free))
    fail("the cuda backend needs ", gib(need),
         " of device memory for its arenas (storage ", gib(bytes[0]), ", f32 ",
         gib(bytes[1]), ", i32 ", gib(bytes[2]), ") plus ", gib(kReserveBytes),
         " for kernel scratch, but ", device_name_, " has ", gib(int64_t(free)),
         " free of ", gib(int64_t(total)),
         " (compile with a smaller --gpu-mem-limit, --batch or --seq-len)");
  for (int t = 0; t < kNumDTypes; ++t) {
    if (bytes[t] == 0)
      continue;
    if (cudaMalloc(&arenas_[t], size_t(bytes[t])) != cudaSuccess)
      fail("the cuda backend cannot allocate ", gib(bytes[t]), " for the ",
           kDTypeNames[t], " device arena on ", device_name_,
           " (out of memory)");
    check(cudaMemset(arenas_[t], 0, size_t(bytes[t])), "cudaMemset");
  }
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); // setup only
  arena_bytes_ = need;
  // The kernels' optional scratch (dS held whole) stays within what the
  // plan's budget leaves, and what the device had free, beyond the arenas
  // and the reserve.
  int64_t room = int64_t(free);
  if (opts_.device_budget > 0)
    room = std::min(room, opts_.device_budget);
  kernels_->set_scratch_room(std::max<int64_t>(0, room - need - kReserveBytes));
}

HostMemory CudaBackend::allocate_host(int64_t bytes) {
  if (bytes <= 0)
    return HostMemory(nullptr, free_pinned);
  if (pinned_bytes_ + bytes > pinned_limit_)
    fail("the cuda backend's pinned host buffers would reach ",
         gib(pinned_bytes_ + bytes), ", over the limit of ", gib(pinned_limit_),
         " (MEGATRAIN_PINNED_LIMIT, default half the host RAM; fewer --slots "
         "or smaller units at compile time need less)");
  void *p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, size_t(bytes), cudaHostAllocPortable);
  if (e != cudaSuccess)
    fail("cannot pin ", bytes,
         " bytes of host memory: ", cudaGetErrorString(e));
  std::memset(p, 0, size_t(bytes));
  pinned_bytes_ += bytes;
  return HostMemory(p, free_pinned);
}

void CudaBackend::write_stats() {
  const char *path = std::getenv("MEGATRAIN_CUDA_STATS");
  if (!path || !*path)
    return;
  std::FILE *f = std::fopen(path, "w");
  if (!f)
    return;
  const long long used = min_free_ == SIZE_MAX ? -1
                                               : (long long)(device_total_) -
                                                     (long long)(min_free_);
  std::fprintf(f,
               "{\"device\": \"%s\", \"device_total_bytes\": %lld, "
               "\"arena_bytes\": %lld, \"scratch_bytes\": %lld, "
               "\"pinned_host_bytes\": %lld, \"device_used_peak_bytes\": %lld, "
               "\"traced\": %s, \"steps\": [",
               device_name_.c_str(), (long long)device_total_,
               (long long)arena_bytes_, (long long)kernels_->scratch_peak(),
               (long long)pinned_bytes_, used, opts_.trace ? "true" : "false");
  for (size_t i = 0; i < steps_.size(); ++i) {
    const StepStats &st = steps_[i];
    std::fprintf(f,
                 "%s\n  {\"wall_s\": %.6f, \"h2d_bytes\": %lld, "
                 "\"compute_bytes\": %lld, \"d2h_bytes\": %lld, "
                 "\"h2d_busy_s\": %.6f, \"compute_busy_s\": %.6f, "
                 "\"d2h_busy_s\": %.6f}",
                 i ? "," : "", st.wall_s, (long long)st.bytes[0],
                 (long long)st.bytes[1], (long long)st.bytes[2], st.busy_s[0],
                 st.busy_s[1], st.busy_s[2]);
  }
  std::fprintf(f, "]}\n");
  std::fclose(f);
}

} // namespace

bool device_available(std::string *why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError(); // not sticky; clear it
    if (!why)
      return false;
    if (e == cudaErrorInsufficientDriver) {
      void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
      int runtime = 0;
      cudaRuntimeGetVersion(&runtime);
      *why = driver ? "the CUDA driver is older than this build's CUDA " +
                          std::to_string(runtime / 1000) + "." +
                          std::to_string(runtime % 1000 / 10) + " runtime"
                    : std::string("no CUDA driver (libcuda.so.1) is installed");
      if (driver)
        dlclose(driver);
    } else {
      *why = std::string("no usable CUDA device: ") + cudaGetErrorString(e);
    }
    return false;
  }
  if (n == 0) {
    if (why)
      *why = "no CUDA device";
    return false;
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    if (why)
      *why = "cannot read the properties of CUDA device 0";
    return false;
  }
  if (prop.major < 8) {
    if (why)
      *why = std::string(prop.name) + " is sm_" + std::to_string(prop.major) +
             std::to_string(prop.minor) +
             "; the cuda backend needs sm_80 or newer (bf16 tensor cores)";
    return false;
  }
  return true;
}

std::unique_ptr<Backend> create_backend(const BackendOptions &opts) {
  return std::make_unique<CudaBackend>(opts);
}

} // namespace MT_KNS

#ifdef MEGATRAIN_CUDA_EMULATION
BackendEntry cuda_emulated_backend_entry() {
  return {"cudaemu", cudaemu::create_backend, cudaemu::device_available, true};
}
#else
bool cuda_available(std::string *why) { return cuda::device_available(why); }
std::unique_ptr<Backend> create_cuda_backend(const BackendOptions &opts) {
  return cuda::create_backend(opts);
}
BackendEntry cuda_backend_entry() {
  return {"cuda", create_cuda_backend, cuda_available, true};
}
#endif

} // namespace mtrt
