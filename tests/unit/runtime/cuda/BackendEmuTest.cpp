//===- BackendEmuTest.cpp - the CUDA backend on emulated devices ----------===//
//
// The CUDA backend's code (streams as issue threads, pooled events, waits,
// pinned buffers, poison, timing) compiled against CPU models of the CUDA
// runtime calls and the emulated kernels, registered as "cudaemu". This
// executable also holds the conformance suite (ConformanceTest.cpp), which
// then runs on "cudaemu" too: stress mode must give the same bits, and every
// missing wait of the toy schedule must be caught, without a GPU.
//
//===----------------------------------------------------------------------===//

#include "ToyProgram.h"
#include "ToyRun.h"

#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/CudaKernels.h"
#include "runtime/exec/BackendRegistry.h"
#include "runtime/exec/Trace.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

using namespace mtrt;
using namespace mtrt::toy;

namespace {

// Before main: the conformance suite lists the backends when gtest starts.
const bool kRegistered =
    (register_backend(cuda_emulated_backend_entry()), true);

TEST(CudaBackendEmu, TrainsTheToyLikeTheCpuBackendInBf16) {
  ASSERT_TRUE(kRegistered);
  ToyProgram toy(2);
  ToyRunOptions o;
  o.steps = 3;
  o.bf16 = true;
  o.backend = "cpu";
  const ToyRunResult cpu = run_toy(toy.program(), o);
  o.backend = "cudaemu";
  const ToyRunResult emu = run_toy(toy.program(), o);
  ASSERT_TRUE(emu.finite());
  ASSERT_EQ(emu.losses.size(), cpu.losses.size());
  // Different kernels, the same bf16 rounding points: close, not equal.
  for (size_t i = 0; i < cpu.losses.size(); ++i)
    EXPECT_NEAR(emu.losses[i], cpu.losses[i], 1e-2 * std::fabs(cpu.losses[i]))
        << "loss " << i;
  for (size_t i = 0; i < cpu.masters.size(); ++i)
    ASSERT_NEAR(emu.masters[i], cpu.masters[i], 2e-3) << "master " << i;
}

TEST(CudaBackendEmu, RefusesFp32) {
  BackendOptions bo;
  bo.bf16 = false;
  try {
    cuda_emulated_backend_entry().create(bo);
    FAIL() << "created an fp32 cuda backend";
  } catch (const std::exception &e) {
    EXPECT_EQ(std::string(e.what()).rfind("error: --precision fp32", 0), 0u)
        << e.what();
  }
}

// cuDNN's attention, asked for where it cannot run, is refused when the
// backend starts, not at the first attention of a step.
TEST(CudaBackendEmu, RefusesCudnnAttentionOffTheGpu) {
  BackendOptions bo;
  bo.bf16 = true;
  for (std::string family : {"cudnn", "cudnn-nondeterministic"}) {
    ::setenv("MEGATRAIN_CUDA_ATTENTION", family.c_str(), 1);
    std::string what;
    try {
      cuda_emulated_backend_entry().create(bo);
    } catch (const std::exception &e) {
      what = e.what();
    }
    ::unsetenv("MEGATRAIN_CUDA_ATTENTION");
    EXPECT_EQ(what.rfind("error: MEGATRAIN_CUDA_ATTENTION=" + family +
                             ": cuDNN runs on a GPU only",
                         0),
              0u)
        << what;
  }
}

// A plan whose attention the kernels cannot run is refused by name before
// anything is loaded, not at its first attention call.
TEST(CudaBackendEmu, RefusesAttentionPastTheKernelsLimits) {
  BackendOptions bo;
  bo.bf16 = true;
  std::unique_ptr<Backend> b = cuda_emulated_backend_entry().create(bo);
  ToyProgram toy(2);
  Program p = toy.program();
  p.max_head_dim = 512;
  p.max_alibi_heads = 64;
  b->check_supported(p); // at the limits: accepted
  auto refusal = [&](Program q) -> std::string {
    try {
      b->check_supported(q);
    } catch (const std::exception &e) {
      return e.what();
    }
    return "";
  };
  Program wide = p;
  wide.max_head_dim = 576;
  EXPECT_NE(refusal(wide).find("head dims up to 512; this plan's attention "
                               "has head dim 576"),
            std::string::npos)
      << refusal(wide);
  Program alibi = p;
  alibi.max_alibi_heads = 1000;
  EXPECT_NE(refusal(alibi).find("ALiBi over at most"), std::string::npos)
      << refusal(alibi);
}

// The plan's device budget (--gpu-mem-limit), or the device's free memory
// where that is less or there is no budget, less the arenas and the
// reserve for kernel scratch, is the room the kernels' optional scratch
// (dS held whole: cuDNN's deterministic backward, the tensor cores' dQ
// GEMM) keeps within.
TEST(CudaBackendEmu, KernelScratchRoomIsWhatTheBudgetLeaves) {
  auto room = [](int64_t budget) {
    BackendOptions bo;
    bo.bf16 = true;
    bo.device_budget = budget;
    std::unique_ptr<Backend> b = cuda_emulated_backend_entry().create(bo);
    const int64_t elems[kNumDTypes] = {1 << 20, 1 << 18, 1 << 10};
    b->allocate_arenas(elems);
    return dynamic_cast<MT_KNS::CudaKernels &>(b->kernels()).scratch_room();
  };
  const int64_t arenas = (2 << 20) + (4 << 18) + (4 << 10),
                reserve = int64_t(256) << 20,
                free = int64_t(1) << 33; // MockCuda's cudaMemGetInfo
  EXPECT_EQ(room(0), free - arenas - reserve);
  EXPECT_EQ(room(arenas + reserve + 12345), 12345);
  EXPECT_EQ(room(arenas), 0);
  EXPECT_EQ(room(2 * free), free - arenas - reserve);
}

TEST(CudaBackendEmu, TracesDeviceStreamsAndWritesStats) {
  const std::string stats = ::testing::TempDir() + "cudaemu-stats.json";
  ::setenv("MEGATRAIN_CUDA_STATS", stats.c_str(), 1);
  Trace trace;
  ToyProgram toy(2);
  ToyRunOptions o;
  o.backend = "cudaemu";
  o.steps = 2;
  o.trace = &trace;
  run_toy(toy.program(), o);
  ::unsetenv("MEGATRAIN_CUDA_STATS");
  EXPECT_GT(trace.size(), size_t(toy.program().num_commands));
  std::ifstream in(stats);
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  EXPECT_NE(s.find("\"traced\": true"), std::string::npos) << s;
  EXPECT_NE(s.find("\"h2d_bytes\""), std::string::npos) << s;
  // Two steps, each with bytes moved both ways.
  size_t steps = 0;
  for (size_t at = 0; (at = s.find("\"wall_s\"", at)) != std::string::npos;
       ++at)
    ++steps;
  EXPECT_EQ(steps, 2u) << s;
  EXPECT_EQ(s.find("\"h2d_bytes\": 0,"), std::string::npos) << s;
}

} // namespace
