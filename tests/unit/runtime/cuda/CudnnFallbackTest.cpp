//===- CudnnFallbackTest.cpp - what the runtime does with cuDNN's answers -===//
//
// Runs against FakeCudnn.cpp ($MEGATRAIN_CUDNN names it: see CMakeLists),
// which answers each graph as the test queues: an engine, the graph
// refused, every plan refused, a failure. A shape cuDNN has no engine for
// is said once and left to the tensor-core kernels; anything else is an
// error.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudnnAttention.h"
#include "runtime/exec/Error.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdlib>
#include <string>

namespace {

using mtrt::cuda::AttentionDims;
using mtrt::cuda::CudnnAttention;
using mtrt::cuda::CudnnBackward;

/// The fake's controls, from the library the runtime loaded.
struct Fake {
  void (*answer)(char) = nullptr;
  int (*graphs)() = nullptr;
  int64_t (*workspace)() = nullptr;

  Fake() {
    const char *path = std::getenv("MEGATRAIN_CUDNN");
    void *lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
    if (!lib)
      return;
    answer = reinterpret_cast<void (*)(char)>(dlsym(lib, "fake_cudnn_answer"));
    graphs = reinterpret_cast<int (*)()>(dlsym(lib, "fake_cudnn_graphs"));
    workspace =
        reinterpret_cast<int64_t (*)()>(dlsym(lib, "fake_cudnn_workspace"));
  }
};

class CudnnFallback : public ::testing::Test {
protected:
  void SetUp() override {
    if (!fake.answer || !fake.graphs || !fake.workspace)
      GTEST_FAIL() << "MEGATRAIN_CUDNN does not name the fake cuDNN";
  }
  Fake fake;
};

constexpr AttentionDims kShape{1, 2, 1, 96, 64};

TEST_F(CudnnFallback, AnEngineMakesAPlanOnce) {
  CudnnAttention cudnn;
  const int before = fake.graphs();
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(cudnn.has_forward(kShape));
  EXPECT_TRUE(cudnn.has_forward(kShape));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(fake.graphs(), before + 1);
  // Each row's log-sum-exp (768 bytes, to 256) and the plan's workspace.
  EXPECT_EQ(cudnn.forward_scratch_bytes(kShape), 768 + fake.workspace());
}

TEST_F(CudnnFallback, AGraphWithoutAnEngineIsSaidOnceAndKept) {
  CudnnAttention cudnn;
  fake.answer('g');
  const int before = fake.graphs();
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cudnn.has_forward(kShape));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "warning: cuDNN has no engine for the attention forward of B=1 "
            "H=2 Hkv=1 S=96 D=64 (cuDNN: fake cuDNN: no engine for this "
            "graph); the tensor-core kernels run it\n");
  // Asked again (an engine queued now): the refusal stands, unsaid.
  fake.answer('e');
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cudnn.has_forward(kShape));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(fake.graphs(), before + 1);
  try {
    cudnn.forward_scratch_bytes(kShape);
    ADD_FAILURE() << "scratch for a refused shape";
  } catch (const mtrt::Error &e) {
    EXPECT_NE(std::string(e.what()).find("no engine for the attention forward"),
              std::string::npos)
        << e.what();
  }
  // Another shape is asked for itself (the engine queued above).
  EXPECT_TRUE(cudnn.has_forward({1, 2, 1, 128, 64}));
}

TEST_F(CudnnFallback, EachPassIsAskedApart) {
  CudnnAttention cudnn;
  fake.answer('e');
  fake.answer('p');
  fake.answer('e');
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(cudnn.has_forward(kShape));
  EXPECT_FALSE(cudnn.has_backward(kShape, CudnnBackward::Deterministic));
  EXPECT_TRUE(cudnn.has_backward(kShape, CudnnBackward::Nondeterministic));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "warning: cuDNN has no engine for the deterministic attention "
            "backward of B=1 H=2 Hkv=1 S=96 D=64 (cuDNN: fake cuDNN: this "
            "engine cannot run it); the tensor-core kernels run it\n");
  EXPECT_GT(
      cudnn.backward_scratch_bytes(kShape, CudnnBackward::Nondeterministic),
      fake.workspace());
}

TEST_F(CudnnFallback, OtherFailuresAreErrorsAndNotKept) {
  CudnnAttention cudnn;
  fake.answer('x');
  try {
    cudnn.has_forward(kShape);
    ADD_FAILURE() << "no error for a descriptor cuDNN would not make";
  } catch (const mtrt::Error &e) {
    EXPECT_NE(std::string(e.what()).find("out of descriptors"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(cudnn.has_forward(kShape)); // built afresh
}

} // namespace
