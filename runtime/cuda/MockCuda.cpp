//===- MockCuda.cpp - the CUDA runtime calls we use, on CPU threads -------===//

#include "runtime/cuda/MockCuda.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

namespace mtrt::cudaemu {

struct MockStream {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> ops;
  uint64_t enqueued = 0, completed = 0;
  bool stopping = false;
  std::thread worker;

  MockStream() : worker([this] { loop(); }) {}
  ~MockStream() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
    }
    cv.notify_all();
    worker.join();
  }
  uint64_t push(std::function<void()> op) {
    std::lock_guard<std::mutex> lock(mu);
    ops.push_back(std::move(op));
    cv.notify_all();
    return ++enqueued;
  }
  void wait_for(uint64_t count) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return completed >= count; });
  }
  void loop() {
    for (;;) {
      std::function<void()> op;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stopping || !ops.empty(); });
        if (ops.empty())
          return;
        op = std::move(ops.front());
        ops.pop_front();
      }
      op();
      {
        std::lock_guard<std::mutex> lock(mu);
        ++completed;
      }
      cv.notify_all();
    }
  }
};

struct MockEvent {
  std::mutex mu;
  MockStream *stream = nullptr; // of the latest record; null: none
  uint64_t count = 0;
  double time_us = 0; // when the latest record completed
};

namespace {

std::mutex streams_mu;
std::set<MockStream *> streams;

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

} // namespace

void mock_enqueue(cudaStream_t s, std::function<void()> op) {
  static const bool sync = std::getenv("MEGATRAIN_MOCK_CUDA_SYNC") != nullptr;
  if (s && !sync)
    s->push(std::move(op));
  else
    op();
}

const char *cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess ? "no error" : "emulated error";
}
cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaGetDeviceCount(int *n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaGetDevice(int *d) {
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
  std::memset(p, 0, sizeof *p);
  std::strcpy(p->name, "emulated GPU");
  p->major = 9;
  p->totalGlobalMem = size_t(1) << 34;
  p->multiProcessorCount = 4;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr, int) {
  *v = 4;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int *v) {
  *v = 13000;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  std::lock_guard<std::mutex> lock(streams_mu);
  for (MockStream *s : streams)
    cudaStreamSynchronize(s);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free, size_t *total) {
  *total = size_t(1) << 34;
  *free = size_t(1) << 33;
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
  *s = new MockStream;
  std::lock_guard<std::mutex> lock(streams_mu);
  streams.insert(*s);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  {
    std::lock_guard<std::mutex> lock(streams_mu);
    streams.erase(s);
  }
  delete s; // runs what is queued first
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (!s)
    return cudaSuccess;
  uint64_t n;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    n = s->enqueued;
  }
  s->wait_for(n);
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  MockStream *on;
  uint64_t count;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    on = e->stream;
    count = e->count;
  }
  if (!on || on == s)
    return cudaSuccess; // never recorded, or already in order
  mock_enqueue(s, [on, count] { on->wait_for(count); });
  return cudaSuccess;
}
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *arg) {
  mock_enqueue(s, [fn, arg] { fn(arg); });
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) {
  *e = new MockEvent;
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) {
  return cudaEventCreate(e);
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (!s) {
    std::lock_guard<std::mutex> lock(e->mu);
    e->stream = nullptr;
    e->time_us = now_us();
    return cudaSuccess;
  }
  // Holding the event's lock across the push keeps (stream, count) and the
  // queue in step if two threads record it at once.
  std::lock_guard<std::mutex> lock(e->mu);
  e->stream = s;
  e->count = s->push([e] {
    std::lock_guard<std::mutex> l(e->mu);
    e->time_us = now_us();
  });
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  MockStream *on;
  uint64_t count;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    on = e->stream;
    count = e->count;
  }
  if (on)
    on->wait_for(count);
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  std::scoped_lock lock(a->mu, b->mu);
  *ms = float((b->time_us - a->time_us) / 1000.0);
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t n) {
  *p = std::calloc(std::max<size_t>(n, 1), 1);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned) {
  return cudaMalloc(p, n);
}
cudaError_t cudaFreeHost(void *p) { return cudaFree(p); }
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t) {
  return cudaMalloc(p, n); // usable at once: ordered before what follows
}
cudaError_t cudaFreeAsync(void *p, cudaStream_t s) {
  mock_enqueue(s, [p] { std::free(p); });
  return cudaSuccess;
}
// Like CUDA's, these order nothing against non-blocking streams.
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) {
  std::memmove(d, s, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind,
                            cudaStream_t st) {
  mock_enqueue(st, [d, s, n] { std::memmove(d, s, n); });
  return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int v, size_t n) {
  std::memset(p, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
  mock_enqueue(s, [p, v, n] { std::memset(p, v, n); });
  return cudaSuccess;
}

} // namespace mtrt::cudaemu
