//===- CudaEmulator.cpp - run kernel sources on the CPU, for tests --------===//

#include "runtime/cuda/CudaEmulator.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <ucontext.h>
#include <vector>

namespace mtrt::emu {

uint3 threadIdx;
uint3 blockIdx;
dim3 blockDim;
dim3 gridDim;

namespace {

enum class State { Ready, AtBlockBarrier, AtWarpBarrier, Done };

// A copy issued by copy_async, landed by async_wait: its bytes as read at
// issue, and its group (-1 until committed).
struct PendingCopy {
  void *dst;
  unsigned char bytes[16];
  int size;
  int group;
};

struct Fiber {
  ucontext_t ctx;
  std::vector<char> stack;
  State state = State::Ready;
  uint3 tid;
  std::vector<PendingCopy> pending;
  int committed = 0; // groups committed so far
};

constexpr size_t kStackBytes = 256 * 1024;

std::mutex grid_mutex;
ucontext_t scheduler;
std::vector<Fiber> fibers;
int current = -1;
const std::function<void()> *body_fn = nullptr;
double exchange[1024];                   // one slot per thread, for shuffles
uint32_t mma_a[1024][4], mma_b[1024][2]; // each thread's MMA fragments
const void *row_address[1024];           // each thread's ldmatrix row
struct alignas(16) Words16 {
  unsigned char bytes[16];
};
std::vector<Words16> dynamic; // the grid's dynamic shared memory

void entry() {
  (*body_fn)();
  if (!fibers[current].pending.empty()) {
    std::fprintf(stderr,
                 "cuda emulator: thread %u of block (%u,%u,%u) returned with "
                 "%zu asynchronous copies never waited for\n",
                 threadIdx.x, blockIdx.x, blockIdx.y, blockIdx.z,
                 fibers[current].pending.size());
    std::abort();
  }
  fibers[current].state = State::Done;
  swapcontext(&fibers[current].ctx, &scheduler);
}

void block_until(State s) {
  fibers[current].state = s;
  swapcontext(&fibers[current].ctx, &scheduler);
}

[[noreturn]] void deadlock(const char *what) {
  std::fprintf(stderr, "cuda emulator: deadlock in block (%u,%u,%u): %s\n",
               blockIdx.x, blockIdx.y, blockIdx.z, what);
  std::abort();
}

// Releases every barrier all of whose live threads have arrived; returns
// whether any thread became ready.
bool release_barriers() {
  const int n = int(fibers.size());
  bool released = false;
  for (int w = 0; w * 32 < n; ++w) {
    bool all = true, any = false;
    for (int t = w * 32; t < std::min(n, w * 32 + 32); ++t) {
      if (fibers[t].state == State::Done)
        continue;
      any |= fibers[t].state == State::AtWarpBarrier;
      all &= fibers[t].state == State::AtWarpBarrier;
    }
    if (any && all) {
      for (int t = w * 32; t < std::min(n, w * 32 + 32); ++t)
        if (fibers[t].state == State::AtWarpBarrier)
          fibers[t].state = State::Ready;
      released = true;
    }
  }
  if (released)
    return true;
  bool all = true, any = false;
  for (const Fiber &f : fibers) {
    if (f.state == State::Done)
      continue;
    any |= f.state == State::AtBlockBarrier;
    all &= f.state == State::AtBlockBarrier;
  }
  if (any && all) {
    for (Fiber &f : fibers)
      if (f.state == State::AtBlockBarrier)
        f.state = State::Ready;
    return true;
  }
  return false;
}

// Runs one block's threads until all have returned. (A function of its own:
// the loop variables of run_grid must not live across swapcontext.)
void run_block(uint3 block_index, unsigned n) {
  blockIdx = block_index;
  for (unsigned t = 0; t < n; ++t) {
    Fiber &f = fibers[t];
    f.state = State::Ready;
    f.pending.clear();
    f.committed = 0;
    f.tid = {t % blockDim.x, t / blockDim.x % blockDim.y,
             t / (blockDim.x * blockDim.y)};
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.data();
    f.ctx.uc_stack.ss_size = f.stack.size();
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, entry, 0);
  }
  for (;;) {
    bool ran = false, live = false;
    for (unsigned t = 0; t < n; ++t) {
      if (fibers[t].state != State::Done)
        live = true;
      if (fibers[t].state != State::Ready)
        continue;
      current = int(t);
      threadIdx = fibers[t].tid;
      swapcontext(&scheduler, &fibers[t].ctx);
      ran = true;
    }
    if (!live)
      return;
    if (!release_barriers() && !ran)
      deadlock("threads wait at different barriers");
  }
}

} // namespace

void run_grid(dim3 grid, dim3 block, const std::function<void()> &body,
              size_t shared_bytes) {
  std::lock_guard<std::mutex> lock(grid_mutex);
  dynamic.resize((shared_bytes + 15) / 16);
  const unsigned n = block.x * block.y * block.z;
  if (n == 0 || n > 1024) {
    std::fprintf(stderr, "cuda emulator: bad block size %u\n", n);
    std::abort();
  }
  gridDim = grid;
  blockDim = block;
  body_fn = &body;
  fibers.assign(n, Fiber());
  for (Fiber &f : fibers)
    f.stack.resize(kStackBytes);
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        // A block finds its shared memory as others left it: here all ones
        // bits, NaN as f32 or bf16, so that a read of a word no thread
        // wrote shows in the results.
        if (!dynamic.empty())
          std::memset(dynamic.data(), 0xff, dynamic.size() * sizeof(Words16));
        run_block({bx, by, bz}, n);
      }
  current = -1;
}

unsigned char *dynamic_shared() {
  return dynamic.empty() ? nullptr : dynamic.front().bytes;
}

void sync_block() { block_until(State::AtBlockBarrier); }
void sync_warp() { block_until(State::AtWarpBarrier); }

double shfl_xor(double v, int mask) {
  const int t = current;
  const int lane = t % 32, warp = t / 32;
  exchange[t] = v;
  sync_warp();
  const int from = warp * 32 + (lane ^ mask);
  if (from >= int(fibers.size()))
    deadlock("shuffle from a lane outside the block");
  const double r = exchange[from];
  sync_warp();
  return r;
}

float shfl_xor(float v, int mask) { return float(shfl_xor(double(v), mask)); }

namespace {
float bf16_bits(uint32_t word, int half) {
  const uint32_t u = (half ? word >> 16 : word & 0xffffu) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
} // namespace

void ldmatrix_x4(uint32_t (&r)[4], const void *row, bool trans) {
  const int t = current;
  const int lane = t % 32, warp0 = t / 32 * 32;
  if (warp0 + 32 > int(fibers.size()))
    deadlock("ldmatrix in a warp of fewer than 32 threads");
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0) {
    // The hardware requires it; a misaligned tile row would fault there.
    std::fprintf(stderr,
                 "cuda emulator: ldmatrix row address %p is not 16-byte "
                 "aligned (block (%u,%u,%u), thread %d)\n",
                 row, blockIdx.x, blockIdx.y, blockIdx.z, t);
    std::abort();
  }
  row_address[t] = row;
  sync_warp();
  // Element (row, col) of matrix i: row `row` comes from lane 8·i + row.
  auto element = [&](int i, int rw, int col) {
    uint16_t v;
    std::memcpy(&v,
                static_cast<const char *>(row_address[warp0 + 8 * i + rw]) +
                    2 * col,
                2);
    return uint32_t(v);
  };
  for (int i = 0; i < 4; ++i) {
    const int a = trans ? 2 * (lane % 4) : lane / 4;
    const int b = trans ? lane / 4 : 2 * (lane % 4);
    r[i] = trans ? element(i, a, b) | element(i, a + 1, b) << 16
                 : element(i, a, b) | element(i, a, b + 1) << 16;
  }
  sync_warp();
}

void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4],
                       const uint32_t (&b)[2]) {
  const int t = current;
  const int lane = t % 32, warp0 = t / 32 * 32;
  if (warp0 + 32 > int(fibers.size()))
    deadlock("mma in a warp of fewer than 32 threads");
  for (int r = 0; r < 4; ++r)
    mma_a[t][r] = a[r];
  mma_b[t][0] = b[0];
  mma_b[t][1] = b[1];
  sync_warp();
  // A[row][k] sits in lane (row % 8)·4 + (k % 8)/2, word row/8 + 2·(k/8);
  // B[k][n] in lane n·4 + (k % 8)/2, word k/8; odd k in the high half.
  auto A = [&](int row, int k) {
    return bf16_bits(
        mma_a[warp0 + row % 8 * 4 + k % 8 / 2][row / 8 + 2 * (k / 8)], k % 2);
  };
  auto B = [&](int k, int n) {
    return bf16_bits(mma_b[warp0 + n * 4 + k % 8 / 2][k / 8], k % 2);
  };
  const int g = lane / 4, c = lane % 4 * 2;
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e / 2), col = c + e % 2;
    float acc = d[e];
    for (int k = 0; k < 16; ++k)
      acc += A(row, k) * B(k, col);
    d[e] = acc;
  }
  sync_warp();
}

void copy_async(void *dst, const void *src, int bytes) {
  const auto misaligned = [bytes](const void *p) {
    return reinterpret_cast<uintptr_t>(p) % uintptr_t(bytes) != 0;
  };
  if ((bytes != 4 && bytes != 8 && bytes != 16) || misaligned(dst) ||
      misaligned(src)) {
    std::fprintf(stderr,
                 "cuda emulator: cp.async of %d bytes from %p to %p: sizes "
                 "are 4, 8 or 16, both addresses aligned to the size\n",
                 bytes, src, dst);
    std::abort();
  }
  PendingCopy c{dst, {}, bytes, -1};
  std::memcpy(c.bytes, src, size_t(bytes));
  fibers[current].pending.push_back(c);
}

void async_commit() {
  Fiber &f = fibers[current];
  for (PendingCopy &c : f.pending)
    if (c.group < 0)
      c.group = f.committed;
  ++f.committed;
}

void async_wait(int pending) {
  Fiber &f = fibers[current];
  std::vector<PendingCopy> still;
  for (const PendingCopy &c : f.pending) {
    if (c.group >= 0 && c.group < f.committed - pending)
      std::memcpy(c.dst, c.bytes, size_t(c.size));
    else
      still.push_back(c);
  }
  f.pending.swap(still);
}

} // namespace mtrt::emu
