//===- HostMemoryTest.cpp - the host store against the machine's memory ---===//

#include "runtime/trainer/HostMemory.h"

#include "runtime/exec/Error.h"

#include <gtest/gtest.h>

#include <string>

using namespace mtrt;

namespace {

constexpr int64_t GiB = int64_t(1) << 30;

std::string error_of(int64_t store, bool bf16, HostMemoryInfo info) {
  try {
    check_host_store_fits(store, bf16, info, nullptr);
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

TEST(HostMemory, AStoreLargerThanMemoryAndSwapIsRefused) {
  const std::string fp32 = error_of(100 * GiB, false, {60 * GiB, 2 * GiB});
  EXPECT_NE(fp32.find("the host store needs 100.0 GiB (16 B per trained "
                      "param), but this machine has 60.0 GiB of memory "
                      "available and 2.0 GiB of swap; compile with "
                      "--master-weights bf16 for 12 B per param"),
            std::string::npos)
      << fp32;
  const std::string bf16 = error_of(75 * GiB, true, {60 * GiB, 0});
  EXPECT_NE(bf16.find("needs 75.0 GiB (12 B per trained param)"),
            std::string::npos)
      << bf16;
  EXPECT_EQ(bf16.find("--master-weights"), std::string::npos) << bf16;
}

TEST(HostMemory, FitsInMemoryOrSwapOrUnknown) {
  EXPECT_EQ(error_of(50 * GiB, false, {60 * GiB, 0}), "");
  EXPECT_EQ(error_of(61 * GiB, false, {60 * GiB, 2 * GiB}), ""); // swaps
  EXPECT_EQ(error_of(1000 * GiB, false, {-1, 0}), "");
}

TEST(HostMemory, ThisMachineReportsItsMemory) {
  HostMemoryInfo info = host_memory_info();
  EXPECT_GT(info.available, 0); // Linux: /proc/meminfo has MemAvailable
  EXPECT_GE(info.swap_free, 0);
}

} // namespace
