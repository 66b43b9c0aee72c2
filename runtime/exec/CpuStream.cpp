//===- CpuStream.cpp - an in-order command queue on a worker thread -------===//

#include "runtime/exec/CpuStream.h"

#include "runtime/exec/Trace.h"

#include <chrono>

namespace mtrt {

void CpuFences::complete_one(int stream) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++done_[stream];
  }
  cv_.notify_all();
}

void CpuFences::wait(int stream, uint64_t count) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_[stream] >= count; });
}

uint64_t CpuFences::completed(int stream) const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_[stream];
}

void CpuFences::set_error(std::exception_ptr e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_)
    error_ = e;
  failed_.store(true, std::memory_order_release);
}

std::exception_ptr CpuFences::take_error() {
  std::lock_guard<std::mutex> lock(mu_);
  std::exception_ptr e = error_;
  error_ = nullptr;
  failed_.store(false, std::memory_order_release);
  return e;
}

namespace {
uint64_t splitmix64(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
} // namespace

CpuStream::CpuStream(const Options &opts, CpuFences &fences)
    : opts_(opts), fences_(fences),
      rng_(opts.stress_seed * 0x2545f4914f6cdd1dull + uint64_t(opts.index)) {
  if (opts_.queue_depth < 1)
    opts_.queue_depth = 1;
  worker_ = std::thread([this] { loop(); });
}

CpuStream::~CpuStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  not_empty_.notify_all();
  worker_.join();
}

uint64_t CpuStream::push(const char *label, std::function<void()> fn) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    not_full_.wait(lock, [&] {
      return queue_.size() < static_cast<size_t>(opts_.queue_depth);
    });
    queue_.push_back({label, std::move(fn)});
  }
  not_empty_.notify_one();
  return ++issued_;
}

void CpuStream::stress_delay() {
  // Bursts: every 16 commands the stream turns slow (sleeps before 15/16 of
  // its commands) or quick (1/16), at random. A race needs one stream to lag
  // another by several commands, which independent coin flips rarely give.
  if (stress_count_++ % 16 == 0)
    stress_slow_ = splitmix64(rng_) & 1;
  uint64_t r = splitmix64(rng_);
  if ((r & 15) == 0 ? stress_slow_ : !stress_slow_)
    return;
  auto us = static_cast<int64_t>((r >> 4) % 2001); // 0-2 ms
  std::this_thread::sleep_for(std::chrono::microseconds(us));
}

void CpuStream::loop() {
  for (;;) {
    Command cmd;
    {
      std::unique_lock<std::mutex> lock(mu_);
      not_empty_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty())
        return; // stopping, and everything ran
      cmd = std::move(queue_.front());
      queue_.pop_front();
    }
    not_full_.notify_one();
    if (opts_.stress)
      stress_delay();
    // After an error the rest of the step is skipped, but still counted, so
    // that waits on it and synchronize() return.
    if (!fences_.failed()) {
      double start = opts_.trace ? opts_.trace->now_us() : 0.0;
      try {
        cmd.fn();
      } catch (...) {
        fences_.set_error(std::current_exception());
      }
      if (opts_.trace)
        opts_.trace->add(opts_.index, cmd.label, start, opts_.trace->now_us());
    }
    cmd.fn = nullptr; // release captures before announcing completion
    fences_.complete_one(opts_.index);
  }
}

} // namespace mtrt
