//===- CudaEmulator.h - run kernel sources on the CPU, for tests --*- C++
//-*-===//
//
// Just enough of CUDA's execution model to check the kernels' indexing and
// math without a GPU: blocks run one after another; the threads of a block
// are coroutines (ucontext) switched at __syncthreads, __syncwarp and warp
// shuffles, so barriers and shuffles have their real meaning, and a barrier
// that some threads never reach is reported as a deadlock instead of hanging.
// Exited threads count as arrived. Not thread-safe: one grid at a time
// (run_grid takes a lock).
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_CUDA_CUDAEMULATOR_H
#define MEGATRAIN_RUNTIME_CUDA_CUDAEMULATOR_H

#include <cstddef>
#include <cstdint>
#include <functional>

namespace mtrt::emu {

struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1)
      : x(x_), y(y_), z(z_) {}
};
struct uint3 {
  unsigned x, y, z;
};

// The running thread's coordinates; the scheduler sets them at each switch.
extern uint3 threadIdx;
extern uint3 blockIdx;
extern dim3 blockDim;
extern dim3 gridDim;

/// Runs body as every thread of every block; `shared_bytes` of dynamic
/// shared memory (dynamic_shared()) for each block.
void run_grid(dim3 grid, dim3 block, const std::function<void()> &body,
              size_t shared_bytes = 0);
/// The running block's dynamic shared memory, 16-byte aligned.
unsigned char *dynamic_shared();

void sync_block();
void sync_warp();
float shfl_xor(float v, int mask);
double shfl_xor(double v, int mask);
/// The warp's ldmatrix .x4 (Trans: .trans) of 16-bit elements, each lane
/// passing one row's address, in the layout of Mma.cuh; all 32 lanes must
/// call it.
void ldmatrix_x4(uint32_t (&r)[4], const void *row, bool trans);
/// The warp's m16n8k16 bf16 multiply-add, d += a · b, from every lane's
/// fragments in the layout of Mma.cuh; all 32 lanes must call it.
void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4],
                       const uint32_t (&b)[2]);

/// The running thread's asynchronous copy of `bytes` (4, 8 or 16) to
/// shared memory (PTX cp.async): src is read now, dst written only when a
/// wait covers the copy, so that a read before the wait sees what was there
/// before, as it may on a GPU. A thread that returns with copies pending is
/// reported.
void copy_async(void *dst, const void *src, int bytes);
/// Closes the running thread's open group of copies (cp.async.commit_group).
void async_commit();
/// Lands every committed group but the newest `pending` ones
/// (cp.async.wait_group); copies not yet committed stay pending.
void async_wait(int pending);

} // namespace mtrt::emu

#endif // MEGATRAIN_RUNTIME_CUDA_CUDAEMULATOR_H
