//===- HostMemory.h - will the host store fit ------------------*- C++ -*-===//
//
// The host store is allocated, and touched, before the first step: a store
// larger than the machine's memory would end in the kernel's OOM killer, with
// no message, minutes into loading. The trainer compares it with what the
// kernel says it can give first.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_TRAINER_HOSTMEMORY_H
#define MEGATRAIN_RUNTIME_TRAINER_HOSTMEMORY_H

#include <cstdint>
#include <cstdio>

namespace mtrt {

/// Bytes the kernel reports (/proc/meminfo): memory available without
/// swapping, and free swap. available < 0 when unknown.
struct HostMemoryInfo {
  int64_t available = -1;
  int64_t swap_free = 0;
};

HostMemoryInfo host_memory_info();

/// Throws Error when `store_bytes` exceed available memory and swap
/// together, naming both and what would make the store smaller; warns on
/// `warn` when the store fits only by swapping. Unknown memory: no check.
void check_host_store_fits(int64_t store_bytes, bool bf16_master,
                           const HostMemoryInfo &info, std::FILE *warn);

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_TRAINER_HOSTMEMORY_H
