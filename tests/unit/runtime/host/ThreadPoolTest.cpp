//===- ThreadPoolTest.cpp - Static partitioning of the host thread pool ---===//

#include "runtime/host/ThreadPool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <vector>

using mtrt::host::ThreadPool;

namespace {

struct Part {
  int64_t lo, hi;
  std::thread::id thread;
  bool operator<(const Part &o) const { return lo < o.lo; }
};

std::vector<Part> record_parts(ThreadPool &pool, int64_t n, int64_t grain) {
  std::mutex mu;
  std::vector<Part> parts;
  pool.parallel_for(n, grain, [&](int64_t lo, int64_t hi) {
    std::lock_guard<std::mutex> lock(mu);
    parts.push_back({lo, hi, std::this_thread::get_id()});
  });
  std::sort(parts.begin(), parts.end());
  return parts;
}

TEST(ThreadPool, RejectsZeroThreads) {
  EXPECT_THROW(ThreadPool(0), std::invalid_argument);
}

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 8})
    for (int64_t grain : {1, 7, 16384})
      for (int64_t n : {0, 1, 5, 16383, 16384, 100003}) {
        ThreadPool pool(threads);
        std::vector<std::atomic<int>> hits(n);
        pool.parallel_for(n, grain, [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i)
            hits[i].fetch_add(1, std::memory_order_relaxed);
        });
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[i].load(), 1) << "threads " << threads << " grain "
                                       << grain << " n " << n << " i " << i;
      }
}

// Part i covers the same indices on the same thread on every call, with
// bounds on multiples of the grain: what makes per-part reductions repeatable.
TEST(ThreadPool, PartitionIsStaticAndGrainAligned) {
  ThreadPool pool(4);
  const int64_t n = 10 * 1000 + 3, grain = 1000;
  std::vector<Part> first = record_parts(pool, n, grain);
  ASSERT_EQ(first.size(), 4u);
  ASSERT_EQ(pool.parts_for(n, grain), 4);
  for (int i = 0; i < 4; ++i) {
    int64_t lo, hi;
    ThreadPool::part_range(n, grain, 4, i, lo, hi);
    EXPECT_EQ(first[i].lo, lo);
    EXPECT_EQ(first[i].hi, hi);
    EXPECT_EQ(lo % grain, 0);
    EXPECT_TRUE(i == 3 ? hi == n : hi % grain == 0);
  }
  EXPECT_EQ(first[0].thread, std::this_thread::get_id());
  for (int run = 0; run < 20; ++run) {
    std::vector<Part> again = record_parts(pool, n, grain);
    ASSERT_EQ(again.size(), first.size());
    for (size_t i = 0; i < first.size(); ++i) {
      EXPECT_EQ(again[i].lo, first[i].lo);
      EXPECT_EQ(again[i].hi, first[i].hi);
      EXPECT_EQ(again[i].thread, first[i].thread);
    }
  }
}

TEST(ThreadPool, SmallRangesUseFewerParts) {
  ThreadPool pool(8);
  EXPECT_EQ(record_parts(pool, 100, 1000).size(), 1u);
  EXPECT_EQ(record_parts(pool, 3000, 1000).size(), 3u);
  EXPECT_EQ(record_parts(pool, 1 << 20, 1000).size(), 8u);
}

TEST(ThreadPool, NestedCallRunsInlineOnTheCallingThread) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  pool.parallel_for(3, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      std::thread::id outer = std::this_thread::get_id();
      pool.parallel_for(1000, 1, [&](int64_t a, int64_t b) {
        EXPECT_EQ(std::this_thread::get_id(), outer);
        EXPECT_EQ(a, 0);
        EXPECT_EQ(b, 1000);
        total += b - a;
      });
    }
  });
  EXPECT_EQ(total.load(), 3000);
}

TEST(ThreadPool, CallersOnSeveralThreadsAreServedOneAtATime) {
  ThreadPool pool(4);
  auto caller = [&pool](int64_t n, int64_t *out) {
    for (int rep = 0; rep < 200; ++rep) {
      std::atomic<int64_t> sum{0};
      pool.parallel_for(n, 16, [&](int64_t lo, int64_t hi) {
        int64_t s = 0;
        for (int64_t i = lo; i < hi; ++i)
          s += i;
        sum += s;
      });
      if (sum.load() != n * (n - 1) / 2)
        ++*out;
    }
  };
  int64_t bad_a = 0, bad_b = 0;
  std::thread a(caller, 1000, &bad_a), b(caller, 4099, &bad_b);
  a.join();
  b.join();
  EXPECT_EQ(bad_a, 0);
  EXPECT_EQ(bad_b, 0);
}

} // namespace
