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

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace {

using mtrt::cuda::AttentionDims;
using mtrt::cuda::CudnnAttention;
using mtrt::cuda::CudnnBackward;
using mtrt::cuda::HeadTerms;

/// The fake's controls, from the library the runtime loaded.
struct Fake {
  void (*answer)(char) = nullptr;
  int (*graphs)() = nullptr;
  int64_t (*workspace)() = nullptr;
  void (*version)(size_t) = nullptr;
  int (*scalars)(float *, int) = nullptr;
  int (*strides)(int64_t, int64_t *, int) = nullptr;

  Fake() {
    const char *path = std::getenv("MEGATRAIN_CUDNN");
    void *lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
    if (!lib)
      return;
    answer = reinterpret_cast<void (*)(char)>(dlsym(lib, "fake_cudnn_answer"));
    graphs = reinterpret_cast<int (*)()>(dlsym(lib, "fake_cudnn_graphs"));
    workspace =
        reinterpret_cast<int64_t (*)()>(dlsym(lib, "fake_cudnn_workspace"));
    version =
        reinterpret_cast<void (*)(size_t)>(dlsym(lib, "fake_cudnn_version"));
    scalars = reinterpret_cast<int (*)(float *, int)>(
        dlsym(lib, "fake_cudnn_scalars"));
    strides = reinterpret_cast<int (*)(int64_t, int64_t *, int)>(
        dlsym(lib, "fake_cudnn_strides"));
  }

  /// The strides of the last tensor of unique id `uid` the runtime gave.
  std::vector<int64_t> strides_of(int64_t uid) const {
    std::vector<int64_t> v(4);
    v.resize(size_t(strides(uid, v.data(), int(v.size()))));
    return v;
  }

  /// The floats the last execution was passed by value.
  std::vector<float> last_scalars() const {
    std::vector<float> v(8);
    v.resize(size_t(scalars(v.data(), int(v.size()))));
    return v;
  }
};

class CudnnFallback : public ::testing::Test {
protected:
  void SetUp() override {
    if (!fake.answer || !fake.graphs || !fake.workspace || !fake.version ||
        !fake.scalars || !fake.strides)
      GTEST_FAIL() << "MEGATRAIN_CUDNN does not name the fake cuDNN";
  }
  void TearDown() override {
    if (fake.version)
      fake.version(0); // the headers' again
  }
  Fake fake;
};

constexpr AttentionDims kShape{1, 2, 1, 96, 64};

/// Runs the forward of `d` (nothing runs: the fake says so) and returns
/// the error's text.
std::string run_forward(CudnnAttention &cudnn, const AttentionDims &d = kShape,
                        const HeadTerms &heads = {}) {
  std::vector<char> scratch(size_t(cudnn.forward_scratch_bytes(d)));
  try {
    cudnn.forward(nullptr, nullptr, nullptr, nullptr, nullptr, heads, d, 0.125f,
                  scratch.data(), nullptr);
  } catch (const mtrt::Error &e) {
    return e.what();
  }
  return "";
}

/// The same for the deterministic backward (the other clears a sum on the
/// device first, which needs a GPU): its gradients added (through scratch)
/// or written.
std::string run_backward(CudnnAttention &cudnn, const AttentionDims &d,
                         const HeadTerms &heads = {}, bool adds = true) {
  std::vector<char> scratch(size_t(
      cudnn.backward_scratch_bytes(d, CudnnBackward::Deterministic, adds)));
  CudnnAttention::AddInto add;
  if (adds)
    add = [](void *, const void *, int64_t) {};
  try {
    cudnn.backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                   nullptr, nullptr, nullptr, heads, d, 0.125f,
                   CudnnBackward::Deterministic, scratch.data(), nullptr, add);
  } catch (const mtrt::Error &e) {
    return e.what();
  }
  return "";
}

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
  EXPECT_GT(cudnn.backward_scratch_bytes(kShape,
                                         CudnnBackward::Nondeterministic,
                                         /*adds=*/true),
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

namespace {

TEST_F(CudnnFallback, AnEngineConfigurationLivesAsLongAsItsPlan) {
  CudnnAttention cudnn;
  ASSERT_TRUE(cudnn.has_forward(kShape));
  // Only the fake's own refusal to run, not a plan whose engine is gone.
  const std::string e = run_forward(cudnn);
  EXPECT_NE(e.find("runs nothing"), std::string::npos) << e;
}

TEST_F(CudnnFallback, MaskedScoresAreMinusInfinityFromCudnn9_10) {
  CudnnAttention cudnn;
  ASSERT_TRUE(cudnn.has_forward(kShape));
  fake.version(91900);
  run_forward(cudnn);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fake.last_scalars(), (std::vector<float>{0.125f, -inf}));
  fake.version(90900);
  run_forward(cudnn);
  EXPECT_EQ(fake.last_scalars(),
            (std::vector<float>{0.125f, std::numeric_limits<float>::lowest()}));
}

TEST_F(CudnnFallback, ASlidingWindowIsPassedByValue) {
  CudnnAttention cudnn;
  const AttentionDims windowed{1, 2, 1, 96, 64, 40};
  ASSERT_TRUE(cudnn.has_forward(windowed));
  run_forward(cudnn, windowed);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fake.last_scalars(), (std::vector<float>{0.125f, -inf, 40.f}));
  // Its plan is not the causal one's.
  const int before = fake.graphs();
  ASSERT_TRUE(cudnn.has_forward(kShape));
  EXPECT_EQ(fake.graphs(), before + 1);
}

// The fake refuses a call that binds other tensors than its graph's (not
// virtual), as cuDNN does: each form's forward and backward bind theirs.
TEST_F(CudnnFallback, EachFormBindsItsGraphsTensors) {
  CudnnAttention cudnn;
  const float sinks[2] = {0.5f, -1.f}, slopes[2] = {0.25f, 0.0625f};
  AttentionDims alibi = kShape, chunks = kShape,
                all{1, 2, 1, 96, 64, 40, 30.f, true};
  alibi.alibi = all.alibi = true;
  chunks.chunk = all.chunk = 32;
  const AttentionDims forms[] = {kShape,
                                 {1, 2, 1, 96, 64, 40},
                                 {1, 2, 1, 96, 64, 0, 30.f},
                                 {1, 2, 1, 96, 64, 0, 0.f, true},
                                 alibi,
                                 chunks,
                                 all};
  for (const AttentionDims &d : forms) {
    const HeadTerms heads{d.sinks ? sinks : nullptr,
                          d.alibi ? slopes : nullptr};
    ASSERT_TRUE(cudnn.has_forward(d));
    std::string e = run_forward(cudnn, d, heads);
    EXPECT_NE(e.find("runs nothing"), std::string::npos) << e;
    AttentionDims backward = d;
    backward.sinks = false; // its graph has none
    ASSERT_TRUE(cudnn.has_backward(backward, CudnnBackward::Deterministic));
    for (const bool adds : {true, false}) { // the same tensors either way
      e = run_backward(cudnn, backward, heads, adds);
      EXPECT_NE(e.find("runs nothing"), std::string::npos) << e;
    }
  }
  // A form's arrays missing, or given to a form without them, are refused
  // before cuDNN sees them.
  EXPECT_NE(run_forward(cudnn, forms[3]).find("without its sinks"),
            std::string::npos);
  EXPECT_NE(run_forward(cudnn, kShape, {sinks, nullptr}).find("no place for"),
            std::string::npos);
  EXPECT_NE(run_backward(cudnn, alibi).find("without its ALiBi slopes"),
            std::string::npos);
  EXPECT_NE(run_backward(cudnn, kShape, {nullptr, slopes}).find("no place for"),
            std::string::npos);
}

// The graphs read and write q, k, v, y and their gradients through strides
// (dims (B, heads, S, D), Kᵀ and Vᵀ with the last two swapped): contiguous
// heads-major, or sequence-major (B, S, heads, D) where the layout says,
// each layout a plan of its own; the row statistics are (B, H, S) in both.
TEST_F(CudnnFallback, EachLayoutHasItsStridesAndItsPlan) {
  // CudnnAttention.cpp's unique ids.
  enum : int64_t { kQ = 1, kK, kV, kY, kStats, kDy = 8, kDq, kDk, kDv };
  const int64_t H = 4, G = 2, S = 96, D = 64;
  AttentionDims heads{2, H, G, S, D}, seq = heads;
  seq.layout.seq_major = true;
  using Strides = std::vector<int64_t>;
  const Strides q_heads{H * S * D, S * D, D, 1},
      kv_heads{G * S * D, S * D, D, 1}, q_seq{S * H * D, D, H * D, 1},
      kv_seq{S * G * D, D, G * D, 1}, stats{H * S, S, 1, 1};
  const auto transposed = [](Strides s) {
    std::swap(s[2], s[3]);
    return s;
  };
  CudnnAttention cudnn;
  for (const auto &[d, q, kv] :
       {std::tuple{heads, q_heads, kv_heads}, std::tuple{seq, q_seq, kv_seq}}) {
    SCOPED_TRACE(d.layout.seq_major ? "sequence-major" : "heads-major");
    const int before = fake.graphs();
    ASSERT_TRUE(cudnn.has_forward(d));
    EXPECT_EQ(fake.strides_of(kQ), q);
    EXPECT_EQ(fake.strides_of(kK), transposed(kv));
    EXPECT_EQ(fake.strides_of(kV), kv);
    EXPECT_EQ(fake.strides_of(kY), q);
    EXPECT_EQ(fake.strides_of(kStats), stats);
    ASSERT_TRUE(cudnn.has_backward(d, CudnnBackward::Deterministic));
    for (const int64_t uid : {kQ, kY, kDy, kDq})
      EXPECT_EQ(fake.strides_of(uid), q) << "tensor " << uid;
    EXPECT_EQ(fake.strides_of(kK), transposed(kv));
    EXPECT_EQ(fake.strides_of(kV), transposed(kv));
    EXPECT_EQ(fake.strides_of(kDk), kv);
    EXPECT_EQ(fake.strides_of(kDv), kv);
    EXPECT_EQ(fake.strides_of(kStats), stats);
    EXPECT_EQ(fake.graphs(), before + 2); // not the other layout's plans
    const std::string e = run_backward(cudnn, d);
    EXPECT_NE(e.find("runs nothing"), std::string::npos) << e;
  }
  // A refusal names the layout.
  seq.S = 128;
  fake.answer('g');
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cudnn.has_forward(seq));
  EXPECT_NE(::testing::internal::GetCapturedStderr().find(
                "S=128 D=64 sequence-major (cuDNN"),
            std::string::npos);
}

TEST_F(CudnnFallback, ASoftCapIsPassedByValue) {
  CudnnAttention cudnn;
  const AttentionDims capped{1, 2, 1, 96, 64, 40, 30.f};
  ASSERT_TRUE(cudnn.has_forward(capped));
  run_forward(cudnn, capped);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fake.last_scalars(),
            (std::vector<float>{0.125f, -inf, 40.f, 30.f}));
  // Its plans are not the uncapped ones'.
  const int before = fake.graphs();
  ASSERT_TRUE(cudnn.has_forward({1, 2, 1, 96, 64, 40}));
  ASSERT_TRUE(cudnn.has_forward({1, 2, 1, 96, 64, 40, 20.f}));
  EXPECT_EQ(fake.graphs(), before + 2);
}

TEST_F(CudnnFallback, SoftCapsFromCudnn9_4AndSinksFrom9_13) {
  fake.version(91200);
  CudnnAttention cudnn;
  const AttentionDims sinks{1, 2, 1, 96, 64, 0, 0.f, true};
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cudnn.has_forward(sinks));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "warning: cuDNN has no engine for the attention forward of B=1 "
            "H=2 Hkv=1 S=96 D=64 sinks (cuDNN 9.12.0 takes no sinks (9.13 and "
            "later do)); the tensor-core kernels run it\n");
  EXPECT_TRUE(cudnn.has_forward({1, 2, 1, 96, 64, 0, 30.f}));
  fake.version(90300);
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cudnn.has_backward({1, 2, 1, 128, 64, 0, 20.f},
                                  CudnnBackward::Deterministic));
  EXPECT_NE(::testing::internal::GetCapturedStderr().find(
                "takes no soft cap (9.4 and later do)"),
            std::string::npos);
  fake.version(91300);
  EXPECT_TRUE(cudnn.has_forward({1, 2, 1, 128, 64, 0, 0.f, true}));
}

TEST_F(CudnnFallback, BackwardsCudnnsFrontendWouldPadAreNotGiven) {
  fake.version(91500);
  CudnnAttention cudnn;
  const int before = fake.graphs();
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(cudnn.has_forward(kShape));
  EXPECT_FALSE(cudnn.has_backward(kShape, CudnnBackward::Deterministic));
  EXPECT_TRUE(
      cudnn.has_backward({1, 2, 1, 256, 64}, CudnnBackward::Deterministic));
  EXPECT_FALSE(
      cudnn.has_backward({1, 2, 1, 1, 64}, CudnnBackward::Nondeterministic));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "warning: cuDNN has no engine for the deterministic attention "
            "backward of B=1 H=2 Hkv=1 S=96 D=64 (cuDNN 9.15.0's backward "
            "needs a padding mask where S is not a multiple of 128, which "
            "this runtime does not build); the tensor-core kernels run it\n"
            "warning: cuDNN has no engine for the nondeterministic attention "
            "backward of B=1 H=2 Hkv=1 S=1 D=64 (cuDNN's backward takes no "
            "sequence of one position); the tensor-core kernels run it\n");
  // The two refused were never built.
  EXPECT_EQ(fake.graphs(), before + 2);
  // From 9.16 cuDNN pads the last tile itself.
  fake.version(91600);
  EXPECT_TRUE(cudnn.has_backward(kShape, CudnnBackward::Nondeterministic));
}

TEST_F(CudnnFallback, CudnnsWithKnownFaultsAreNotGiven) {
  fake.version(91001);
  CudnnAttention cudnn;
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cudnn.has_forward(kShape));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "warning: cuDNN has no engine for the attention forward of B=1 "
            "H=2 Hkv=1 S=96 D=64 (cuDNN 9.10.1 has known faults in its fused "
            "attention); the tensor-core kernels run it\n");
}

} // namespace
