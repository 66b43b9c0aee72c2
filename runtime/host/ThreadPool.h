//===- ThreadPool.h - Fixed worker threads for host tasks ----*- C++ -*-===//
//
// A fixed set of threads that split index ranges between them. Partitioning
// is static: which thread gets which indices depends only on the range, the
// grain and the thread count, never on timing, so a task that reduces per
// part gets the same bits on every run.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_HOST_THREADPOOL_H
#define MEGATRAIN_RUNTIME_HOST_THREADPOOL_H

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace mtrt::host {

class ThreadPool {
public:
  // num_threads counts the thread that calls parallel_for, which runs part 0;
  // num_threads - 1 workers are started. ThreadPool(1) runs everything inline.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(lo, hi) on disjoint contiguous ranges covering [0, n) and returns
  // when all are done. The range is cut into min(num_threads(), n / grain)
  // parts (at least one) whose bounds are multiples of grain, except the last
  // one, n; part i runs on thread i. fn must not throw.
  //
  // Callers on several threads are served one at a time. A call made from
  // inside a running part (any pool) runs serially as fn(0, n) on the calling
  // thread instead of deadlocking.
  template <class Fn> void parallel_for(int64_t n, int64_t grain, Fn &&fn) {
    using F = std::remove_reference_t<Fn>;
    run(
        n, grain,
        [](void *ctx, int64_t lo, int64_t hi) {
          (*static_cast<F *>(ctx))(lo, hi);
        },
        const_cast<void *>(static_cast<const void *>(&fn)));
  }

  // Bounds [lo, hi) of part `part` out of `parts` as parallel_for cuts them.
  static void part_range(int64_t n, int64_t grain, int parts, int part,
                         int64_t &lo, int64_t &hi);
  // How many parts parallel_for makes of n with this grain on this pool.
  int parts_for(int64_t n, int64_t grain) const;

private:
  using RangeFn = void (*)(void *ctx, int64_t lo, int64_t hi);
  void run(int64_t n, int64_t grain, RangeFn fn, void *ctx);
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex submit_; // one parallel_for at a time

  std::mutex mu_; // guards everything below
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;
  bool stopping_ = false;
  RangeFn fn_ = nullptr;
  void *ctx_ = nullptr;
  int64_t n_ = 0;
  int64_t grain_ = 1;
  int parts_ = 0;
  int pending_ = 0; // worker parts of the current job not yet finished
};

} // namespace mtrt::host

#endif // MEGATRAIN_RUNTIME_HOST_THREADPOOL_H
