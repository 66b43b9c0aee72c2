//===- CpuBackendTest.cpp - streams, events and arenas of the CPU backend -===//

#include "runtime/exec/CpuBackend.h"
#include "runtime/exec/Error.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <chrono>
#include <thread>

using namespace mtrt;

namespace {

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

TEST(CpuBackendTest, WaitBindsToTheLatestRecordIssuedBeforeIt) {
  CpuBackend be{BackendOptions{}};
  std::atomic<bool> first{false}, second{false};
  bool seen_second = false;
  be.host_task(Stream::H2D, "first", [&] { sleep_ms(10); first = true; });
  be.record(Stream::H2D, "record", 0);
  be.host_task(Stream::H2D, "second", [&] { sleep_ms(30); second = true; });
  be.record(Stream::H2D, "record", 0); // the latest before the wait
  be.wait(Stream::Compute, "wait", 0);
  be.host_task(Stream::Compute, "check", [&] { seen_second = second; });
  be.synchronize();
  EXPECT_TRUE(seen_second);
}

TEST(CpuBackendTest, WaitIgnoresRecordsIssuedAfterIt) {
  CpuBackend be{BackendOptions{}};
  std::atomic<bool> first{false}, late{false};
  bool seen_first = false, seen_late = true;
  be.host_task(Stream::H2D, "first", [&] { sleep_ms(5); first = true; });
  be.record(Stream::H2D, "record", 3);
  be.wait(Stream::D2H, "wait", 3);
  be.host_task(Stream::D2H, "check", [&] {
    seen_first = first;
    seen_late = late;
  });
  // Re-recorded after the wait was issued: the wait must not see it.
  be.host_task(Stream::H2D, "late", [&] { sleep_ms(200); late = true; });
  be.record(Stream::H2D, "record", 3);
  be.synchronize();
  EXPECT_TRUE(seen_first);
  EXPECT_FALSE(seen_late);
}

TEST(CpuBackendTest, WaitOnANeverRecordedEventCompletesAtOnce) {
  CpuBackend be{BackendOptions{}};
  bool ran = false;
  be.wait(Stream::Compute, "wait", 42);
  be.host_task(Stream::Compute, "after", [&] { ran = true; });
  be.synchronize();
  EXPECT_TRUE(ran);
}

TEST(CpuBackendTest, EventsAreReusedAcrossSteps) {
  CpuBackend be{BackendOptions{}};
  int value = 0, seen = -1;
  for (int step = 0; step < 3; ++step) {
    be.host_task(Stream::Host, "produce", [&, step] { sleep_ms(2); value = step; });
    be.record(Stream::Host, "ready", 1);
    be.wait(Stream::Compute, "wait", 1);
    be.host_task(Stream::Compute, "consume", [&] { seen = value; });
    be.synchronize();
    EXPECT_EQ(seen, step);
  }
}

TEST(CpuBackendTest, StreamsRunConcurrently) {
  CpuBackend be{BackendOptions{}};
  std::atomic<bool> a{false}, b{false};
  bool ok_a = false, ok_b = false;
  auto meet = [](std::atomic<bool> &mine, std::atomic<bool> &other,
                 bool &ok) {
    mine = true;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!other && std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
    ok = other;
  };
  be.host_task(Stream::H2D, "a", [&] { meet(a, b, ok_a); });
  be.host_task(Stream::D2H, "b", [&] { meet(b, a, ok_b); });
  be.synchronize();
  EXPECT_TRUE(ok_a);
  EXPECT_TRUE(ok_b);
}

TEST(CpuBackendTest, ACommandErrorSurfacesAtSynchronizeAndSkipsTheRest) {
  CpuBackend be{BackendOptions{}};
  bool ran_after = false;
  be.host_task(Stream::Host, "bad", [] { fail("boom (test)"); });
  be.host_task(Stream::Host, "after", [&] { ran_after = true; });
  try {
    be.synchronize();
    FAIL() << "no error";
  } catch (const Error &e) {
    EXPECT_STREQ(e.what(), "error: boom (test)");
  }
  EXPECT_FALSE(ran_after);
  be.host_task(Stream::Host, "next", [&] { ran_after = true; });
  be.synchronize(); // the backend is usable again
  EXPECT_TRUE(ran_after);
}

TEST(CpuBackendTest, BoundedQueueStillRunsEverything) {
  BackendOptions o;
  o.queue_depth = 2;
  CpuBackend be{o};
  std::atomic<int> count{0};
  for (int i = 0; i < 100; ++i)
    be.host_task(Stream::Compute, "inc", [&] { ++count; });
  be.synchronize();
  EXPECT_EQ(count.load(), 100);
}

TEST(CpuBackendTest, ArenaAllocationFailureIsAnError) {
  CpuBackend be{BackendOptions{}};
  int64_t elems[kNumDTypes] = {int64_t(1) << 58, 0, 0};
  try {
    be.allocate_arenas(elems);
    FAIL() << "allocated 2^60 bytes";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("error: the cpu backend cannot "
                                         "allocate"),
              std::string::npos)
        << e.what();
  }
  int64_t small[kNumDTypes] = {16, 8, 4};
  be.allocate_arenas(small);
  ASSERT_NE(be.arena(DType::Storage), nullptr);
  EXPECT_EQ(static_cast<float *>(be.arena(DType::F32))[7], 0.0f);
}

TEST(CpuBackendTest, CopiesAndFillsRunInStreamOrder) {
  CpuBackend be{BackendOptions{}};
  std::vector<float> src(64, 2.5f), dst(64, 0.0f);
  be.copy(Stream::H2D, "copy", dst.data(), src.data(), 64 * 4);
  be.fill_device(Stream::H2D, dst.data() + 32, 0xFF, 32 * 4);
  be.synchronize();
  EXPECT_EQ(dst[0], 2.5f);
  EXPECT_TRUE(std::isnan(dst[40]));
}

} // namespace
