//===- CudaBackend.h - the device interface on one CUDA GPU -------*- C++
//-*-===//
//
// Three cudaStream_t (h2d, compute, d2h; non-blocking) and the host stream,
// which stays a CPU worker thread running host tasks (pack, accumulate,
// AdamW, batches) as on the CPU backend.
//
// Every stream, device ones included, has an issue thread (CpuStream): the
// executor's thread only queues commands, and a device stream's thread
// turns each into CUDA calls in order. Completion counts (CpuFences) then
// mean "issued to CUDA" for a device stream and "done" for the host stream,
// which is what makes every cross-stream wait correct without a
// device-wide synchronization:
//
//   record on a device stream  cudaEventRecord of a fresh pooled event,
//                              remembered with the stream's issue count
//   device waits on device     its thread waits until the record is issued,
//                              then cudaStreamWaitEvent on that event
//   device waits on host       its thread waits until the host stream has
//                              completed the record; later device work is
//                              issued only then (other streams go on)
//   host waits on device       the host worker waits until the record is
//                              issued, then cudaEventSynchronize on it
//
// A record takes a new event from a pool (returned when nothing refers to
// it any more), so a wait always binds to the record issued before it in
// program order, even after the event is recorded again: CUDA's "latest
// record" semantics. Everything a wait depends on was issued before it, so
// no wait can deadlock (the argument of the CPU backend).
//
// Memory: one device arena per DType, allocated once (refused up front,
// naming required vs free bytes); host buffers (staging, gradient staging,
// batches, losses: all the executor asks for) are pinned, and their total
// is bounded (MEGATRAIN_PINNED_LIMIT, default half the host RAM).
//
// Stress mode: the issue threads sleep at random as on the CPU backend, and
// device streams also get random device-side delays (a sleeping kernel), so
// that a missing wait shows up as poison (0xFF bytes, NaN) or a mismatch.
// --trace: each device command is bracketed by timing events and lands in
// the trace at the next synchronize(), on the streams' clock.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_CUDA_CUDABACKEND_H
#define MEGATRAIN_RUNTIME_CUDA_CUDABACKEND_H

#include "runtime/exec/Backend.h"
#include "runtime/exec/BackendRegistry.h"

#include <string>

namespace mtrt {

/// Whether a CUDA device this build can run on is present; sets *why when
/// not (no driver, no device, too old a device).
bool cuda_available(std::string *why);

/// A CUDA backend on device 0; throws Error when none is usable.
std::unique_ptr<Backend> create_cuda_backend(const BackendOptions &opts);

/// The registry's entry: "cuda", bf16 by default.
BackendEntry cuda_backend_entry();

/// The same backend on the emulated kernels and runtime calls (CudaCompat.h),
/// as "cudaemu": for tests of the backend's ordering on machines without a
/// GPU. Only in the emulated build (tests/unit/runtime/cuda).
BackendEntry cuda_emulated_backend_entry();

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_CUDA_CUDABACKEND_H
