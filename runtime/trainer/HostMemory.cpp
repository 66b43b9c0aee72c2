//===- HostMemory.cpp - will the host store fit ---------------------------===//

#include "runtime/trainer/HostMemory.h"

#include "runtime/exec/Error.h"

#include <cstring>
#include <string>

namespace mtrt {

namespace {

std::string gib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", double(bytes) / double(1 << 30));
  return text;
}

} // namespace

HostMemoryInfo host_memory_info() {
  HostMemoryInfo info;
  std::FILE *f = std::fopen("/proc/meminfo", "r");
  if (!f)
    return info;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    long long kib = 0;
    if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1)
      info.available = int64_t(kib) * 1024;
    else if (std::sscanf(line, "SwapFree: %lld kB", &kib) == 1)
      info.swap_free = int64_t(kib) * 1024;
  }
  std::fclose(f);
  return info;
}

void check_host_store_fits(int64_t store_bytes, bool bf16_master,
                           const HostMemoryInfo &info, std::FILE *warn) {
  if (info.available < 0 || store_bytes <= info.available)
    return;
  const std::string need = "the host store needs " + gib(store_bytes) +
                           " (" + (bf16_master ? "12" : "16") +
                           " B per trained param)";
  if (store_bytes <= info.available + info.swap_free) {
    if (warn)
      std::fprintf(warn,
                   "warning: %s, more than the %s of memory available: it "
                   "will swap\n",
                   need.c_str(), gib(info.available).c_str());
    return;
  }
  fail(need, ", but this machine has ", gib(info.available),
       " of memory available and ", gib(info.swap_free), " of swap",
       bf16_master ? "" : "; compile with --master-weights bf16 for 12 B per "
                          "param");
}

} // namespace mtrt
