//===- ThreadPool.cpp - Fixed worker threads for host tasks ---------------===//

#include "runtime/host/ThreadPool.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace mtrt::host {

// Set while a thread runs a part, so that a nested parallel_for runs inline.
static thread_local bool tls_in_part = false;

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads < 1)
    throw std::invalid_argument("error: thread pool needs at least 1 thread "
                                "(got " +
                                std::to_string(num_threads) + ")");
  workers_.reserve(num_threads - 1);
  for (int i = 1; i < num_threads; ++i)
    workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  start_cv_.notify_all();
  for (std::thread &t : workers_)
    t.join();
}

void ThreadPool::part_range(int64_t n, int64_t grain, int parts, int part,
                            int64_t &lo, int64_t &hi) {
  // Whole grains are dealt out evenly; the remainder below one grain goes to
  // the last part.
  int64_t grains = n / grain;
  lo = grains * part / parts * grain;
  hi = part + 1 == parts ? n : grains * (part + 1) / parts * grain;
}

int ThreadPool::parts_for(int64_t n, int64_t grain) const {
  int64_t grains = n / std::max<int64_t>(grain, 1);
  return static_cast<int>(
      std::clamp<int64_t>(grains, 1, static_cast<int64_t>(num_threads())));
}

void ThreadPool::run(int64_t n, int64_t grain, RangeFn fn, void *ctx) {
  if (n <= 0)
    return;
  grain = std::max<int64_t>(grain, 1);
  int parts = parts_for(n, grain);
  if (parts == 1 || tls_in_part) {
    bool outer = tls_in_part;
    tls_in_part = true;
    fn(ctx, 0, n);
    tls_in_part = outer;
    return;
  }

  std::lock_guard<std::mutex> submit(submit_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = fn;
    ctx_ = ctx;
    n_ = n;
    grain_ = grain;
    parts_ = parts;
    pending_ = parts - 1;
    ++generation_;
  }
  start_cv_.notify_all();

  int64_t lo, hi;
  part_range(n, grain, parts, 0, lo, hi);
  tls_in_part = true;
  fn(ctx, lo, hi);
  tls_in_part = false;

  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    RangeFn fn;
    void *ctx;
    int64_t lo, hi;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_)
        return;
      seen = generation_;
      if (index >= parts_)
        continue;
      fn = fn_;
      ctx = ctx_;
      part_range(n_, grain_, parts_, index, lo, hi);
    }
    tls_in_part = true;
    fn(ctx, lo, hi);
    tls_in_part = false;
    bool last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last = --pending_ == 0;
    }
    if (last)
      done_cv_.notify_one();
  }
}

} // namespace mtrt::host
