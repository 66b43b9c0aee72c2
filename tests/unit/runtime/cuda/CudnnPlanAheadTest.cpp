//===- CudnnPlanAheadTest.cpp - cuDNN's engines for our graphs, no GPU ---===//
//
// The cuDNN found here (the toolkit's, or $MEGATRAIN_CUDNN) plans the
// attention graphs of runtime/cuda/CudnnAttention.cpp ahead of time for an
// H200 described by its properties, compiling its kernels with NVRTC as it
// would on the GPU, against a fake driver that keeps what it is handed
// (FakeDriver.cpp, first on the loader's path: see CMakeLists). So a graph
// cuDNN would refuse on the GPU machine fails here, on any machine with
// cuDNN 9.8 or later and NVRTC, and what cuDNN would run is named: its
// fused flash-attention kernels for sm_90.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudnnAttention.h"
#include "runtime/exec/Error.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <string>
#include <utility>
#include <vector>

namespace {

using mtrt::cuda::AttentionDims;
using mtrt::cuda::CudnnAttention;
using mtrt::cuda::CudnnBackward;

/// An H200 as cuDNN's device properties put it (CUDNN_ATTR_DEVICEPROP_JSON_
/// REPRESENTATION, every key cuDNN 9.19 asks for), written from its data
/// sheet: sm_90, 132 SMs, 227 KiB of shared memory a block at most, 50 MiB
/// of L2, 143,771 MiB of memory as nvidia-smi gave it on the GPU machine, a
/// CUDA 13.0 driver. The device check writes cuDNN's own description of
/// the GPU it runs on (cudnn-device.json in its logs) to take its place.
const std::string kH200 = R"({"maxGridSize": [2147483647, 65535, 65535],
 "maxBlockSize": [1024, 1024, 64], "regsPerBlock": 65536,
 "multiProcessorCount": 132, "warpSize": 32, "maxSharedMemoryPerBlock": 49152,
 "maxSharedMemoryPerBlockOptin": 232448, "reservedSharedMemoryPerBlock": 1024,
 "maxRegistersPerSM": 65536, "maxCtasPerSM": 32, "maxThreadsPerBlock": 1024,
 "maxThreadsPerSM": 2048, "pciDeviceId": 9013, "isTccDriver": 0,
 "supportCoopLaunch": 1, "smClockRateKHz": 1980000, "memClockRateKHz": 3201000,
 "l2CacheSize": 52428800, "deviceName": "NVIDIA H200", "deviceVer": 900,
 "driverVer": 13000, "totalGlobalMem": 150754820096, "cudaDeviceId": 0})";

/// What the fake driver kept, from the libcuda.so.1 cuDNN loaded.
struct Driver {
  int (*cubins)() = nullptr;
  int (*cubin_sm)(int) = nullptr;
  int (*kernels)() = nullptr;
  const char *(*kernel)(int) = nullptr;

  Driver() {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!lib)
      return;
    cubins = reinterpret_cast<int (*)()>(dlsym(lib, "fake_driver_cubins"));
    cubin_sm =
        reinterpret_cast<int (*)(int)>(dlsym(lib, "fake_driver_cubin_sm"));
    kernels = reinterpret_cast<int (*)()>(dlsym(lib, "fake_driver_kernels"));
    kernel = reinterpret_cast<const char *(*)(int)>(
        dlsym(lib, "fake_driver_kernel"));
  }
  bool fake() const { return cubins && cubin_sm && kernels && kernel; }
};

/// A pass planned ahead: cuDNN's refusal ("" for none), its workspace, and
/// the kernels and SMs of the cubins it built for it.
struct Planned {
  std::string refused;
  int64_t workspace = -1;
  std::vector<std::string> kernels;
  std::vector<int> sms;
};

class CudnnPlanAhead : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    if (!mtrt::cuda::cudnn_loadable(&why))
      GTEST_SKIP() << why;
    try { // and, where cuDNN can, loads the driver
      CudnnAttention::plan_ahead({1, 1, 1, 128, 64}, false,
                                 CudnnBackward::Deterministic, kH200);
    } catch (const mtrt::Error &e) {
      if (std::string(e.what()).find("without a device") != std::string::npos)
        GTEST_SKIP() << e.what();
      throw;
    }
    const Driver driver;
    if (driver.fake()) {
      seen_cubins_ = driver.cubins();
      seen_kernels_ = driver.kernels();
    }
  }

  Planned plan(const AttentionDims &d, bool backward, CudnnBackward how) {
    Planned p;
    p.refused =
        CudnnAttention::plan_ahead(d, backward, how, kH200, &p.workspace);
    const Driver driver;
    if (!driver.fake())
      ADD_FAILURE() << "cuDNN loaded no fake libcuda.so.1: the loader's path "
                       "must name the fake driver's folder first";
    else {
      for (int i = seen_cubins_; i < driver.cubins(); ++i)
        p.sms.push_back(driver.cubin_sm(i));
      for (int i = seen_kernels_; i < driver.kernels(); ++i)
        p.kernels.emplace_back(driver.kernel(i));
      seen_cubins_ = driver.cubins();
      seen_kernels_ = driver.kernels();
    }
    return p;
  }

  /// Checks that cuDNN planned one of its sm_90 flash-attention kernels
  /// (`which`: fprop or bprop) for `d`, and nothing for another SM;
  /// `label` names the pass in the report.
  void expect_flash(const Planned &p, const char *which, const AttentionDims &d,
                    const char *label) {
    const std::string shape =
        "B=" + std::to_string(d.B) + " H=" + std::to_string(d.H) +
        " Hkv=" + std::to_string(d.Hkv) + " S=" + std::to_string(d.S) +
        " D=" + std::to_string(d.D) +
        (d.window ? " window=" + std::to_string(d.window) : "") +
        (d.softcap > 0 ? " softcap=" + std::to_string(d.softcap) : "") +
        (d.sinks ? " sinks" : "") + (d.alibi ? " ALiBi" : "") +
        (d.chunk ? " chunk=" + std::to_string(d.chunk) : "") +
        (d.layout.seq_major ? " sequence-major" : "");
    EXPECT_EQ(p.refused, "") << which << " of " << shape;
    bool flash = false;
    for (const std::string &k : p.kernels)
      flash |= k.find("sm90") != std::string::npos &&
               k.find(std::string("flash_") + which) != std::string::npos;
    std::string names;
    for (const std::string &k : p.kernels)
      names += " " + k;
    EXPECT_TRUE(flash) << which << " of " << shape << ": kernels" << names;
    // In the XML report (--gtest_output=xml): what cuDNN would run.
    RecordProperty(std::string(label) + " " + shape,
                   "workspace " + std::to_string(p.workspace) + ";" + names);
    for (int sm : p.sms)
      EXPECT_EQ(sm, 90) << which << " of " << shape;
  }

  /// Plans the forward over `d` and each backward cuDNN is given, and
  /// checks each as above: a backward the runtime withholds is refused, the
  /// deterministic one is asked where its dS fits and its workspace is
  /// within the room the runtime sets aside for it.
  void expect_every_pass(AttentionDims d) {
    expect_flash(plan(d, false, CudnnBackward::Deterministic), "fprop", d,
                 "forward");
    d.sinks = false; // the backward's graph has none (they are in its lse)
    const Planned nondet = plan(d, true, CudnnBackward::Nondeterministic);
    if (!mtrt::cuda::cudnn_withholds(d, true).empty()) {
      EXPECT_NE(nondet.refused, ""); // withheld, not planned
      return;
    }
    expect_flash(nondet, "bprop", d, "nondeterministic backward");
    if (!CudnnAttention::deterministic_backward_fits(d, int64_t(1) << 62))
      return;
    const Planned det = plan(d, true, CudnnBackward::Deterministic);
    expect_flash(det, "bprop", d, "deterministic backward");
    EXPECT_LE(det.workspace, CudnnAttention::deterministic_workspace_bytes(d));
  }

  int seen_cubins_ = 0, seen_kernels_ = 0;
};

// The shapes of the device check's plans (bench/device/make_plans.sh): the
// 1B's GQA at head dim 64, the 3B's at 128, the 7B's MHA (no group sum), and
// one 32K-token sequence, whose dS passes the deterministic backward's bound.
TEST_F(CudnnPlanAhead, AnH200HasFlashKernelsForTheBenchmarksShapes) {
  for (const AttentionDims &d :
       {AttentionDims{4, 32, 4, 2048, 64}, AttentionDims{4, 24, 8, 2048, 128},
        AttentionDims{4, 32, 32, 2048, 128},
        AttentionDims{1, 32, 4, 32768, 64}})
    expect_every_pass(d);
}

// Shapes the kernel tests give cuDNN: sequences not a multiple of 128 and
// one of 128, narrow heads and wide ones (160, 256: Gemma's), MQA, sliding
// windows (of one key, and across tiles).
TEST_F(CudnnPlanAhead, AnH200HasFlashKernelsForTheKernelTestsShapes) {
  for (const AttentionDims &d :
       {AttentionDims{2, 4, 2, 37, 16}, AttentionDims{1, 2, 1, 70, 64},
        AttentionDims{2, 4, 2, 256, 64}, AttentionDims{1, 1, 1, 40, 160},
        AttentionDims{1, 4, 2, 100, 256}, AttentionDims{1, 2, 2, 70, 80, 1},
        AttentionDims{1, 2, 1, 150, 64, 40}})
    expect_every_pass(d);
}

// Gemma 2's soft caps (50 on the scores; with and without its sliding
// window of 4096, at its head dim of 256), and on the kernel tests' shapes.
TEST_F(CudnnPlanAhead, AnH200HasFlashKernelsForSoftCaps) {
  for (const AttentionDims &d : {AttentionDims{1, 8, 4, 8192, 256, 0, 50.f},
                                 AttentionDims{1, 8, 4, 8192, 256, 4096, 50.f},
                                 AttentionDims{4, 32, 4, 2048, 64, 0, 50.f},
                                 AttentionDims{1, 2, 1, 150, 64, 40, 30.f}})
    expect_every_pass(d);
}

// Sinks: gpt-oss's (64 query heads over 8 at head dim 64, its sliding
// window of 128 and full causal layers), and on a kernel test's shape.
TEST_F(CudnnPlanAhead, AnH200HasFlashKernelsForSinks) {
  for (const AttentionDims &d :
       {AttentionDims{1, 64, 8, 4096, 64, 128, 0.f, true},
        AttentionDims{1, 64, 8, 4096, 64, 0, 0.f, true},
        AttentionDims{1, 2, 1, 150, 64, 40, 0.f, true}})
    expect_every_pass(d);
}

// ALiBi: BLOOM 7B's heads (32 of 128) at 2048 tokens, and on the kernel
// tests' shapes (one in a window, soft-capped).
TEST_F(CudnnPlanAhead, AnH200HasFlashKernelsForAlibi) {
  for (AttentionDims d : {AttentionDims{4, 32, 32, 2048, 128},
                          AttentionDims{2, 4, 2, 256, 64, 9, 2.f},
                          AttentionDims{1, 2, 1, 70, 64}}) {
    d.alibi = true;
    expect_every_pass(d);
  }
}

// Chunks: Llama 4 Scout's (40 query heads over 8 at D = 128, chunks of
// 8192 in 16K tokens), and on the kernel tests' shapes (under a shorter
// window, with sinks, soft-capped at D = 256).
TEST_F(CudnnPlanAhead, AnH200HasFlashKernelsForChunks) {
  const std::pair<AttentionDims, int64_t> chunked[] = {
      {{1, 40, 8, 16384, 128}, 8192},
      {{1, 4, 2, 130, 128, 9}, 50},
      {{1, 4, 2, 130, 64, 0, 0.f, true}, 40},
      {{1, 4, 2, 100, 256, 0, 2.f}, 33}};
  for (auto [d, chunk] : chunked) {
    d.chunk = chunk;
    expect_every_pass(d);
  }
}

// Sequence-major tensors (B, S, H, D; HeadLayout.h), as attention that
// spares a projection's transposes reads them: the benchmarks' shapes and
// kernel tests' forms (a window, a soft cap, sinks, ALiBi, chunks).
TEST_F(CudnnPlanAhead, AnH200HasFlashKernelsForSequenceMajorTensors) {
  AttentionDims alibi{2, 4, 2, 256, 64, 9, 2.f}, chunks{1, 4, 2, 130, 128, 9};
  alibi.alibi = true;
  chunks.chunk = 50;
  for (AttentionDims d :
       {AttentionDims{4, 32, 4, 2048, 64}, AttentionDims{4, 24, 8, 2048, 128},
        AttentionDims{4, 32, 32, 2048, 128}, AttentionDims{2, 4, 2, 37, 16},
        AttentionDims{1, 2, 1, 150, 64, 40, 30.f, true}, alibi, chunks}) {
    d.layout.seq_major = true;
    expect_every_pass(d);
  }
}

} // namespace
