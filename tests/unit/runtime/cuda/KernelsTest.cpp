//===- KernelsTest.cpp - CUDA kernels against the CPU reference kernels ---===//
//
// Every DeviceKernels method on random inputs, against CpuKernels in bf16
// mode (the reference kernels of runtime/kernels on the same bf16-rounded
// inputs, each storage output rounded to bf16). Outputs the device writes
// start as NaN (0xFFFF), so an unwritten element fails; gradients start
// random, so a kernel that overwrites instead of accumulating fails.
//
// Tolerances, for bf16 storage with f32 accumulation on both sides: the two
// differ by the order of f32 sums and by the math library (a few f32 ulps),
// which can move a result across a bf16 rounding boundary: one bf16 ulp,
// 2^-8 relative (1/128 covers it with margin for values near a binade edge).
// Results that sum many terms with cancellation (GEMMs, norms' backward,
// attention) also get an absolute allowance relative to the largest
// magnitude, 1e-3 (2e-3 for attention, whose gradients go through a
// recomputed softmax); f32 gradient slots compare at 1e-4. A wrong index,
// term or sign is off by far more.
//
// Built twice (TestDevice.h): on the GPU, skipped without one, and on the
// emulated kernels, which runs everywhere.
//
//===----------------------------------------------------------------------===//

#include "TestDevice.h"

#include "runtime/cuda/AttentionTileVariants.h"

#include "runtime/exec/CpuKernels.h"
#include "runtime/exec/Error.h"
#include "runtime/kernels/Kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <ostream>
#include <random>
#include <tuple>
#include <vector>

using namespace mtrt;

namespace {

uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((u | 0x00400000u) >> 16);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float bf16_value(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// A tensor on the device and its host mirror (the CPU reference's input
/// and output). Storage tensors hold bf16 on the device and bf16-rounded
/// f32 on the host.
class Tensor {
public:
  enum Kind { Storage, F32, I32 };

  static Tensor random(int64_t n, uint32_t seed, float lo = -1.f,
                       float hi = 1.f) {
    Tensor t(Storage, n);
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    for (float &x : t.h)
      x = bf16_value(bf16_bits(dist(gen)));
    t.upload();
    return t;
  }
  /// Storage holding these values, rounded to bf16.
  static Tensor of(const std::vector<float> &v) {
    Tensor t(Storage, int64_t(v.size()));
    for (size_t k = 0; k < v.size(); ++k)
      t.h[k] = bf16_value(bf16_bits(v[k]));
    t.upload();
    return t;
  }
  /// A storage gradient, likewise.
  static Tensor grad(int64_t n, uint32_t seed) {
    return random(n, seed, -1.f / 64, 1.f / 64);
  }
  /// A storage output: NaN until the kernel writes it.
  static Tensor output(int64_t n) {
    Tensor t(Storage, n);
    for (float &x : t.h)
      x = std::nanf("");
    t.upload();
    return t;
  }
  static Tensor zeros(int64_t n) {
    Tensor t(Storage, n);
    t.upload();
    return t;
  }
  /// An f32 gradient slot, small and random: it must be added to, and
  /// small enough that what is added decides the comparison.
  static Tensor f32(int64_t n, uint32_t seed) {
    Tensor t(F32, n);
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-1.f / 64, 1.f / 64);
    for (float &x : t.h)
      x = dist(gen);
    t.upload();
    return t;
  }
  static Tensor ids(const std::vector<int32_t> &v) {
    Tensor t(I32, int64_t(v.size()));
    t.i = v;
    t.upload();
    return t;
  }

  Tensor(Tensor &&o) noexcept
      : kind(o.kind), n(o.n), h(std::move(o.h)), i(std::move(o.i)), d(o.d) {
    o.d = nullptr;
  }
  ~Tensor() {
    if (d)
      testdev::release(d);
  }

  void *dev() { return d; }
  float *host() { return h.data(); }
  const int32_t *dev_ids() const { return static_cast<const int32_t *>(d); }
  float *dev_f32() { return static_cast<float *>(d); }

  /// What the device holds now, as floats.
  std::vector<float> fetch() const {
    std::vector<float> out(static_cast<size_t>(n));
    if (kind == Storage) {
      std::vector<uint16_t> b(static_cast<size_t>(n));
      testdev::download(b.data(), d, size_t(n) * 2);
      for (int64_t k = 0; k < n; ++k)
        out[k] = bf16_value(b[k]);
    } else {
      testdev::download(out.data(), d, size_t(n) * 4);
    }
    return out;
  }

  Kind kind;
  int64_t n;
  std::vector<float> h;
  std::vector<int32_t> i;

private:
  Tensor(Kind k, int64_t count) : kind(k), n(count), h(size_t(count), 0.f) {
    d = testdev::alloc(size_t(count) * (k == Storage ? 2 : 4));
  }
  void upload() {
    if (kind == Storage) {
      std::vector<uint16_t> b(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k)
        b[k] = bf16_bits(h[k]);
      testdev::upload(d, b.data(), size_t(n) * 2);
    } else if (kind == F32) {
      testdev::upload(d, h.data(), size_t(n) * 4);
    } else {
      testdev::upload(d, i.data(), size_t(n) * 4);
    }
  }
  void *d = nullptr;
};

/// max |x| over the finite x.
double max_abs(const std::vector<float> &xs) {
  double m = 0.0;
  for (float x : xs)
    if (std::isfinite(x))
      m = std::max(m, double(std::fabs(x)));
  return m;
}

/// |got - want| <= rtol·|want| + atol·max(max|want|, scale) everywhere;
/// NaN where and only where the reference has NaN. `scale`: the size of
/// the terms a result sums, where they may cancel to about 0.
::testing::AssertionResult near(const std::vector<float> &got,
                                const std::vector<float> &want, double rtol,
                                double atol, double scale = 0.0) {
  scale = std::max(scale, max_abs(want));
  for (size_t k = 0; k < want.size(); ++k) {
    if (std::isnan(want[k]) != std::isnan(got[k]))
      return ::testing::AssertionFailure()
             << "element " << k << ": got " << got[k] << ", want " << want[k];
    if (std::isnan(want[k]))
      continue;
    const double err = std::fabs(double(got[k]) - double(want[k]));
    const double tol = rtol * std::fabs(double(want[k])) + atol * scale;
    if (!(err <= tol))
      return ::testing::AssertionFailure()
             << "element " << k << " of " << want.size() << ": got " << got[k]
             << ", want " << want[k] << " (error " << err << " > " << tol
             << ", max |want| " << scale << ")";
  }
  return ::testing::AssertionSuccess();
}

constexpr double kUlp = 1.0 / 128; // one bf16 ulp, with margin
constexpr double kPointwise = 1e-6, kSums = 1e-3;
// The tensor-core attention multiplies the probabilities and their
// gradients as bf16 (half an ulp, 2^-9, off each term), where the reference
// keeps them in f32: about one bf16 ulp (2^-8) of the largest element.
constexpr double kAttention = 4e-3;

class CudaKernelsTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    if (!testdev::ready(&why))
      GTEST_SKIP() << "no CUDA device here: " << why;
    k_ = std::make_unique<testdev::Kernels>();
    stream_ = testdev::make_stream();
    k_->set_stream(stream_);
  }
  void sync() { testdev::sync(stream_); }

  std::unique_ptr<testdev::Kernels> k_;
  void *stream_ = nullptr;
  CpuKernels cpu_{true};
};

#ifndef MEGATRAIN_CUDA_EMULATION
// cuBLASLt is loaded at run time, not linked: check that it loads and has
// every entry point, which needs no GPU.
TEST(CuBlasLt, Loads) {
  std::string why;
  EXPECT_TRUE(mtrt::cuda::load_cublaslt(&why)) << why;
}
#endif

TEST_F(CudaKernelsTest, ZeroCopyAccumulate) {
  Tensor x = Tensor::random(1000, 1);
  Tensor y = Tensor::output(1000);
  Tensor z = Tensor::output(1000);
  Tensor g = Tensor::f32(1000, 2);
  k_->copy(y.dev(), x.dev(), 1000);
  k_->zero(z.dev(), 1000);
  k_->accumulate_f32(g.dev_f32(), x.dev(), 1000);
  sync();
  cpu_.accumulate_f32(g.host(), x.host(), 1000);
  EXPECT_TRUE(near(y.fetch(), x.h, 0, 0));
  EXPECT_TRUE(near(z.fetch(), std::vector<float>(1000, 0.f), 0, 0));
  EXPECT_TRUE(near(g.fetch(), g.h, 1e-6, 0));
  Tensor f = Tensor::f32(77, 3);
  k_->zero_f32(f.dev_f32(), 77);
  sync();
  EXPECT_TRUE(near(f.fetch(), std::vector<float>(77, 0.f), 0, 0));
}

class LinearTest
    : public CudaKernelsTest,
      public ::testing::WithParamInterface<std::tuple<bool, bool>> {};

TEST_P(LinearTest, ForwardAndBackward) {
  const bool in_out = std::get<0>(GetParam()), bias = std::get<1>(GetParam());
  const int64_t M = 37, K = 70, N = 45;
  Tensor x = Tensor::random(M * K, 10), w = Tensor::random(K * N, 11);
  Tensor b = bias ? Tensor::random(N, 12) : Tensor::zeros(0);
  Tensor y = Tensor::output(M * N), ya = Tensor::grad(M * N, 17);
  for (bool accumulate : {false, true}) { // written over NaN, or added into
    Tensor &t = accumulate ? ya : y;
    k_->linear_forward(t.dev(), x.dev(), w.dev(), bias ? b.dev() : nullptr, M,
                       K, N, in_out, accumulate);
    cpu_.linear_forward(t.host(), x.host(), w.host(), bias ? b.host() : nullptr,
                        M, K, N, in_out, accumulate);
  }
  sync();
  EXPECT_TRUE(near(y.fetch(), y.h, kUlp, kSums)) << "forward";
  EXPECT_TRUE(near(ya.fetch(), ya.h, kUlp, kSums)) << "forward, added";

  Tensor dy = Tensor::random(M * N, 13);
  Tensor dx = Tensor::grad(M * K, 14);
  Tensor dw = Tensor::f32(K * N, 15), db = Tensor::f32(N, 16);
  k_->linear_backward(dx.dev(), dw.dev_f32(), bias ? db.dev_f32() : nullptr,
                      dy.dev(), x.dev(), w.dev(), M, K, N, in_out, true);
  cpu_.linear_backward(dx.host(), dw.host(), bias ? db.host() : nullptr,
                       dy.host(), x.host(), w.host(), M, K, N, in_out, true);
  sync();
  EXPECT_TRUE(near(dx.fetch(), dx.h, kUlp, kSums)) << "dx";
  EXPECT_TRUE(near(dw.fetch(), dw.h, 1e-4, 1e-5)) << "dw";
  EXPECT_TRUE(near(db.fetch(), db.h, 1e-4, 1e-5)) << "db";

  // Written, not added: over NaN.
  Tensor written = Tensor::output(M * K);
  k_->linear_backward(written.dev(), nullptr, nullptr, dy.dev(), x.dev(),
                      w.dev(), M, K, N, in_out, false);
  cpu_.linear_backward(written.host(), nullptr, nullptr, dy.host(), x.host(),
                       w.host(), M, K, N, in_out, false);
  sync();
  EXPECT_TRUE(near(written.fetch(), written.h, kUlp, kSums)) << "dx written";
}

INSTANTIATE_TEST_SUITE_P(Layouts, LinearTest,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Bool()));

TEST_F(CudaKernelsTest, LinearWithoutDxOrDw) {
  const int64_t M = 8, K = 16, N = 24;
  Tensor x = Tensor::random(M * K, 20), w = Tensor::random(N * K, 21);
  Tensor dy = Tensor::random(M * N, 22), dw = Tensor::f32(N * K, 23);
  k_->linear_backward(nullptr, dw.dev_f32(), nullptr, dy.dev(), x.dev(),
                      w.dev(), M, K, N, false, false);
  cpu_.linear_backward(nullptr, dw.host(), nullptr, dy.host(), x.host(),
                       w.host(), M, K, N, false, false);
  sync();
  EXPECT_TRUE(near(dw.fetch(), dw.h, 1e-4, 1e-5));
}

// A batched GEMM (the attention backward's dQ): alpha, B transposed, beta
// 1 into bf16, each matrix padded past its leading dimension and its
// batch stride, against a loop in double.
TEST_F(CudaKernelsTest, BatchedGemmWithAlphaMatchesALoop) {
  const int64_t batch = 3, m = 5, n = 7, k = 9, lda = 6, ldb = 7, ldc = 5;
  const int64_t sa = lda * k + 4, sb = ldb * k + 3, sc = ldc * n + 2;
  Tensor a = Tensor::random(batch * sa, 40), b = Tensor::random(batch * sb, 41);
  Tensor c = Tensor::random(batch * sc, 42);
  mtrt::MT_KNS::GemmSpec g{false,   true,  m,       n,      k,
                           a.dev(), lda,   b.dev(), ldb,    c.dev(),
                           ldc,     false, 1.f,     nullptr};
  g.alpha = 0.5f;
  g.batch = batch;
  g.stride_a = sa;
  g.stride_b = sb;
  g.stride_c = sc;
  k_->gemm(g);
  std::vector<float> want = c.h; // padding stays as it was
  for (int64_t t = 0; t < batch; ++t)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p)
          acc += double(a.h[t * sa + i + p * lda]) *
                 double(b.h[t * sb + j + p * ldb]);
        float &out = want[t * sc + i + j * ldc];
        out = bf16_value(bf16_bits(float(0.5 * acc + out)));
      }
  sync();
  EXPECT_TRUE(near(c.fetch(), want, kUlp, 1e-6));
}

class NormTest : public CudaKernelsTest,
                 public ::testing::WithParamInterface<bool> {};

TEST_P(NormTest, RmsNorm) {
  const bool with_w = GetParam();
  const int64_t M = 17, D = 300;
  Tensor x = Tensor::random(M * D, 30, -2.f, 2.f);
  Tensor w = with_w ? Tensor::random(D, 31, 0.5f, 1.5f) : Tensor::zeros(0);
  const void *wd = with_w ? w.dev() : nullptr;
  const float *wh = with_w ? w.host() : nullptr;
  Tensor y = Tensor::output(M * D);
  k_->rms_norm_forward(y.dev(), x.dev(), wd, M, D, 1e-5f);
  cpu_.rms_norm_forward(y.host(), x.host(), wh, M, D, 1e-5f);
  Tensor dy = Tensor::random(M * D, 32), dx = Tensor::grad(M * D, 33);
  Tensor dw = Tensor::f32(D, 34), wx = Tensor::output(M * D);
  k_->rms_norm_backward(dx.dev(), with_w ? dw.dev_f32() : nullptr, dy.dev(),
                        x.dev(), wd, M, D, 1e-5f, true);
  cpu_.rms_norm_backward(dx.host(), with_w ? dw.host() : nullptr, dy.host(),
                         x.host(), wh, M, D, 1e-5f, true);
  k_->rms_norm_backward(wx.dev(), nullptr, dy.dev(), x.dev(), wd, M, D, 1e-5f,
                        false);
  cpu_.rms_norm_backward(wx.host(), nullptr, dy.host(), x.host(), wh, M, D,
                         1e-5f, false);
  sync();
  EXPECT_TRUE(near(y.fetch(), y.h, kUlp, kPointwise)) << "y";
  EXPECT_TRUE(near(dx.fetch(), dx.h, kUlp, kSums)) << "dx";
  EXPECT_TRUE(near(wx.fetch(), wx.h, kUlp, kSums)) << "dx written";
  EXPECT_TRUE(near(dw.fetch(), dw.h, 1e-4, 1e-5)) << "dw";
}

TEST_P(NormTest, LayerNorm) {
  const bool with_wb = GetParam();
  const int64_t M = 19, D = 130;
  Tensor x = Tensor::random(M * D, 40, -1.f, 3.f);
  Tensor w = with_wb ? Tensor::random(D, 41, 0.5f, 1.5f) : Tensor::zeros(0);
  Tensor b = with_wb ? Tensor::random(D, 42) : Tensor::zeros(0);
  Tensor y = Tensor::output(M * D);
  k_->layer_norm_forward(y.dev(), x.dev(), with_wb ? w.dev() : nullptr,
                         with_wb ? b.dev() : nullptr, M, D, 1e-5f);
  cpu_.layer_norm_forward(y.host(), x.host(), with_wb ? w.host() : nullptr,
                          with_wb ? b.host() : nullptr, M, D, 1e-5f);
  Tensor dy = Tensor::random(M * D, 43), dx = Tensor::grad(M * D, 44);
  Tensor dw = Tensor::f32(D, 45), db = Tensor::f32(D, 46);
  Tensor wx = Tensor::output(M * D);
  k_->layer_norm_backward(dx.dev(), with_wb ? dw.dev_f32() : nullptr,
                          with_wb ? db.dev_f32() : nullptr, dy.dev(), x.dev(),
                          with_wb ? w.dev() : nullptr, M, D, 1e-5f, true);
  cpu_.layer_norm_backward(dx.host(), with_wb ? dw.host() : nullptr,
                           with_wb ? db.host() : nullptr, dy.host(), x.host(),
                           with_wb ? w.host() : nullptr, M, D, 1e-5f, true);
  k_->layer_norm_backward(wx.dev(), nullptr, nullptr, dy.dev(), x.dev(),
                          with_wb ? w.dev() : nullptr, M, D, 1e-5f, false);
  cpu_.layer_norm_backward(wx.host(), nullptr, nullptr, dy.host(), x.host(),
                           with_wb ? w.host() : nullptr, M, D, 1e-5f, false);
  sync();
  EXPECT_TRUE(near(y.fetch(), y.h, kUlp, kPointwise)) << "y";
  EXPECT_TRUE(near(dx.fetch(), dx.h, kUlp, kSums)) << "dx";
  EXPECT_TRUE(near(wx.fetch(), wx.h, kUlp, kSums)) << "dx written";
  EXPECT_TRUE(near(dw.fetch(), dw.h, 1e-4, 1e-5)) << "dw";
  EXPECT_TRUE(near(db.fetch(), db.h, 1e-4, 1e-5)) << "db";
}

INSTANTIATE_TEST_SUITE_P(Weights, NormTest, ::testing::Bool());

class RopeTest
    : public CudaKernelsTest,
      public ::testing::WithParamInterface<std::tuple<int, int, bool>> {};

TEST_P(RopeTest, ForwardAndBackward) {
  const int seq_axis = std::get<0>(GetParam());
  const int64_t R = std::get<1>(GetParam());
  const bool interleaved = std::get<2>(GetParam());
  // R = 16 leaves dims past R; 32 rotates all; 8 dims at a time wherever R
  // (and, not interleaved, R/2) is a multiple of 8.
  const int64_t B = 2, H = 3, S = 5,
                D = R == 16 ? 32 : std::max<int64_t>(R, 16), n = B * H * S * D;
  Tensor x = Tensor::random(n, 50);
  Tensor cos = Tensor::random(S * R, 51), sin = Tensor::random(S * R, 52);
  Tensor y = Tensor::output(n);
  k_->rope_forward(y.dev(), x.dev(), cos.dev(), sin.dev(), B, H, S, D, R,
                   seq_axis, interleaved);
  cpu_.rope_forward(y.host(), x.host(), cos.host(), sin.host(), B, H, S, D, R,
                    seq_axis, interleaved);
  Tensor dx = Tensor::grad(n, 53), wx = Tensor::output(n);
  for (bool accumulate : {true, false}) { // added into, or written over NaN
    Tensor &t = accumulate ? dx : wx;
    k_->rope_backward(t.dev(), x.dev(), cos.dev(), sin.dev(), B, H, S, D, R,
                      seq_axis, interleaved, accumulate);
    cpu_.rope_backward(t.host(), x.host(), cos.host(), sin.host(), B, H, S, D,
                       R, seq_axis, interleaved, accumulate);
  }
  sync();
  EXPECT_TRUE(near(y.fetch(), y.h, kUlp, kPointwise));
  EXPECT_TRUE(near(dx.fetch(), dx.h, kUlp, kPointwise)) << "dx";
  EXPECT_TRUE(near(wx.fetch(), wx.h, kUlp, kPointwise)) << "dx written";
}

INSTANTIATE_TEST_SUITE_P(Layouts, RopeTest,
                         ::testing::Combine(::testing::Values(1, 2),
                                            ::testing::Values(16, 8, 32),
                                            ::testing::Bool()));

struct AttentionShape {
  int64_t B, H, Hkv, S, D;
  bool alibi = false;
  int64_t window = 0;
  float softcap = 0.f;
  bool sinks = false;
  int64_t chunk = 0;
};
void PrintTo(const AttentionShape &s, std::ostream *os) {
  *os << "B" << s.B << " H" << s.H << " Hkv" << s.Hkv << " S" << s.S << " D"
      << s.D << (s.alibi ? " ALiBi" : "") << " window" << s.window << " softcap"
      << s.softcap << (s.sinks ? " sinks" : "") << " chunk" << s.chunk;
}

/// How the tensor-core backward finds dQ: a GEMM over the dK/dV pass's dSᵀ
/// where the scratch room holds it (as the runtime prefers), else a pass of
/// its own (no room).
enum class DqBy { Gemm, Pass };
void PrintTo(DqBy d, std::ostream *os) {
  *os << (d == DqBy::Gemm ? "dQ by GEMM" : "dQ pass");
}

/// Row (b, h, i) of a tensor of `heads` heads of D, moved from `from`'s
/// layout to `to`'s.
std::vector<float> relaid(const std::vector<float> &x, int64_t B, int64_t heads,
                          int64_t S, int64_t D, mtrt::HeadLayout from,
                          mtrt::HeadLayout to) {
  std::vector<float> out(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < S; ++i)
        std::memcpy(&out[size_t(to.row_offset(b, h, i, heads, S, D))],
                    &x[size_t(from.row_offset(b, h, i, heads, S, D))],
                    size_t(D) * sizeof(float));
  return out;
}

} // namespace

// Beside the struct, where gtest's printer finds it.
namespace mtrt {
void PrintTo(HeadLayout l, std::ostream *os) {
  *os << (l.seq_major ? "sequence-major" : "heads-major");
}
} // namespace mtrt

// Beside the enum, where gtest's printer finds it.
namespace mtrt::MT_KNS {
void PrintTo(AttentionKernels k, std::ostream *os) {
  *os << (k == AttentionKernels::TensorCores ? "tensor cores"
          : k == AttentionKernels::CudaCores ? "CUDA cores"
          : k == AttentionKernels::Cudnn     ? "cuDNN"
                                             : "cuDNN nondeterministic");
}
void PrintTo(MoeKernels k, std::ostream *os) {
  *os << (k == MoeKernels::TensorCores ? "tensor cores" : "CUDA cores");
}
} // namespace mtrt::MT_KNS

namespace {

using mtrt::MT_KNS::AttentionKernels;
using mtrt::MT_KNS::MoeKernels;

class AttentionTest
    : public CudaKernelsTest,
      public ::testing::WithParamInterface<std::tuple<
          AttentionShape, AttentionKernels, mtrt::HeadLayout, DqBy>> {};

TEST_P(AttentionTest, ForwardAndBackward) {
  const AttentionShape s = std::get<0>(GetParam());
  const AttentionKernels family = std::get<1>(GetParam());
  const mtrt::HeadLayout layout = std::get<2>(GetParam());
  if (std::get<3>(GetParam()) == DqBy::Pass)
    k_->set_scratch_room(0);
#ifdef MEGATRAIN_CUDA_EMULATION
  if (mtrt::MT_KNS::on_cudnn(family))
    GTEST_SKIP() << "cuDNN runs on a GPU only";
#else
  if (std::string why;
      mtrt::MT_KNS::on_cudnn(family) && !mtrt::cuda::cudnn_loadable(&why))
    GTEST_SKIP() << why;
  // A form cuDNN takes is cuDNN's to run: a shape it had no engine for
  // would pass here on the tensor cores. The runtime withholds some
  // backwards from some versions, as cuDNN's frontend does.
  if (mtrt::MT_KNS::on_cudnn(family) &&
      mtrt::cuda::CudnnAttention::takes(s.D)) {
    // The backward's graph has no sinks (they are in the forward's lse).
    mtrt::cuda::AttentionDims d{
        s.B,
        s.H,
        s.Hkv,
        s.S,
        s.D,
        mtrt::cuda::CudnnAttention::window_of({s.window, s.chunk}, s.S),
        s.softcap,
        s.sinks,
        s.alibi,
        mtrt::cuda::CudnnAttention::chunk_of({s.window, s.chunk}, s.S),
        layout};
    if (mtrt::cuda::cudnn_withholds(d, false).empty())
      EXPECT_TRUE(k_->cudnn_has_forward(d)) << "no engine for the forward";
    d.sinks = false;
    const bool given = mtrt::cuda::cudnn_withholds(d, true).empty();
    if (given && family == AttentionKernels::CudnnNondeterministic)
      EXPECT_TRUE(k_->cudnn_has_backward(
          d, mtrt::cuda::CudnnBackward::Nondeterministic))
          << "no engine for the nondeterministic backward";
    else if (given && family == AttentionKernels::Cudnn &&
             mtrt::cuda::CudnnAttention::deterministic_backward_fits(
                 d, k_->scratch_room()))
      EXPECT_TRUE(
          k_->cudnn_has_backward(d, mtrt::cuda::CudnnBackward::Deterministic))
          << "no engine for the deterministic backward";
  }
#endif
  k_->set_attention_kernels(family);
  const int64_t nq = s.B * s.H * s.S * s.D, nk = s.B * s.Hkv * s.S * s.D;
  const float scale = 1.f / std::sqrt(float(s.D));
  const mtrt::KeyRange range{s.window, s.chunk};
  Tensor q = Tensor::random(nq, 60, -2.f, 2.f),
         k = Tensor::random(nk, 61, -2.f, 2.f);
  Tensor v = Tensor::random(nk, 62);
  // BLOOM's slopes 2^(-8(h+1)/H).
  std::vector<float> slopes(s.H);
  for (int64_t h = 0; h < s.H; ++h)
    slopes[h] = std::exp2(-8.f * float(h + 1) / float(s.H));
  const float *alibi = s.alibi ? slopes.data() : nullptr;
  // Sinks about as large as the scores, so that they matter.
  Tensor sinks = Tensor::random(s.H, 68, -1.f, 2.f),
         dsinks = Tensor::f32(s.H, 69);
  void *sinks_dev = s.sinks ? sinks.dev() : nullptr;
  float *sinks_host = s.sinks ? sinks.host() : nullptr;
  const int64_t rows = nq / s.D;
  Tensor y = Tensor::output(nq), lse = Tensor::f32(rows, 59);
  k_->attention_forward(y.dev(), lse.dev_f32(), q.dev(), k.dev(), v.dev(), s.B,
                        s.H, s.Hkv, s.S, s.D, scale, range, s.softcap, alibi,
                        sinks_dev, layout);
  cpu_.attention_forward(y.host(), lse.host(), q.host(), k.host(), v.host(),
                         s.B, s.H, s.Hkv, s.S, s.D, scale, range, s.softcap,
                         alibi, sinks_host, layout);
  Tensor dy = Tensor::random(nq, 63);
  Tensor dq = Tensor::grad(nq, 64), dk = Tensor::grad(nk, 65),
         dv = Tensor::grad(nk, 66);
  // Each side's δ and backward read its own forward's y and log-sum-exp,
  // as in a step.
  Tensor delta = Tensor::f32(rows, 67);
  k_->attention_delta(delta.dev_f32(), dy.dev(), y.dev(), s.B, s.H, s.S, s.D,
                      layout);
  cpu_.attention_delta(delta.host(), dy.host(), y.host(), s.B, s.H, s.S, s.D,
                       layout);
  k_->attention_backward(dq.dev(), dk.dev(), dv.dev(), dy.dev(), q.dev(),
                         k.dev(), v.dev(), y.dev(), delta.dev_f32(),
                         lse.dev_f32(), s.B, s.H, s.Hkv, s.S, s.D, scale, range,
                         s.softcap, alibi, sinks_dev,
                         s.sinks ? dsinks.dev_f32() : nullptr, true, layout);
  cpu_.attention_backward(dq.host(), dk.host(), dv.host(), dy.host(), q.host(),
                          k.host(), v.host(), y.host(), delta.host(),
                          lse.host(), s.B, s.H, s.Hkv, s.S, s.D, scale, range,
                          s.softcap, alibi, sinks_host,
                          s.sinks ? dsinks.host() : nullptr, true, layout);
  // As a step runs it: the gradients written over what the buffers held.
  Tensor wq = Tensor::output(nq), wk = Tensor::output(nk),
         wv = Tensor::output(nk);
  k_->attention_backward(wq.dev(), wk.dev(), wv.dev(), dy.dev(), q.dev(),
                         k.dev(), v.dev(), y.dev(), delta.dev_f32(),
                         lse.dev_f32(), s.B, s.H, s.Hkv, s.S, s.D, scale, range,
                         s.softcap, alibi, sinks_dev, nullptr, false, layout);
  cpu_.attention_backward(wq.host(), wk.host(), wv.host(), dy.host(), q.host(),
                          k.host(), v.host(), y.host(), delta.host(),
                          lse.host(), s.B, s.H, s.Hkv, s.S, s.D, scale, range,
                          s.softcap, alibi, sinks_host, nullptr, false, layout);
  sync();
  EXPECT_TRUE(near(y.fetch(), y.h, kUlp, kAttention)) << "y";
  EXPECT_TRUE(near(lse.fetch(), lse.h, kUlp, kAttention)) << "lse";
  EXPECT_TRUE(near(delta.fetch(), delta.h, kUlp, kAttention)) << "delta";
  EXPECT_TRUE(near(dq.fetch(), dq.h, kUlp, kAttention)) << "dq";
  EXPECT_TRUE(near(dk.fetch(), dk.h, kUlp, kAttention)) << "dk";
  EXPECT_TRUE(near(dv.fetch(), dv.h, kUlp, kAttention)) << "dv";
  EXPECT_TRUE(near(dsinks.fetch(), dsinks.h, kUlp, kAttention)) << "dsinks";
  // Written, they are held to the tolerance of the adds above: one token,
  // or a window of one key, gives dq and dk of exactly 0 on the CPU, and
  // the rounding of the terms that cancel here.
  EXPECT_TRUE(near(wq.fetch(), wq.h, kUlp, kAttention, max_abs(dq.h)))
      << "dq written";
  EXPECT_TRUE(near(wk.fetch(), wk.h, kUlp, kAttention, max_abs(dk.h)))
      << "dk written";
  EXPECT_TRUE(near(wv.fetch(), wv.h, kUlp, kAttention, max_abs(dv.h)))
      << "dv written";
}

const AttentionShape kAttentionShapes[] = {
    AttentionShape{2, 4, 2, 37, 16},   // GQA, tiles cut
    AttentionShape{1, 2, 1, 70, 64},   // MQA, two tiles
    AttentionShape{1, 2, 2, 33, 80},   // 128 layout, D < 128
    AttentionShape{1, 4, 2, 130, 128}, // 3 tiles, D = 128
    AttentionShape{1, 1, 1, 40, 160},  // 256 layout
    AttentionShape{1, 4, 2, 100, 256}, // D = 256, dK/dV in 4 blocks
    AttentionShape{1, 4, 2, 70, 256, true, 9, 2.f},
    AttentionShape{1, 3, 3, 1, 32},  // one token
    AttentionShape{1, 2, 1, 70, 20}, // rows not 16-byte pieces: staged by
                                     // element
    AttentionShape{2, 4, 2, 37, 16, true},
    AttentionShape{1, 2, 1, 70, 64, true},
    AttentionShape{1, 2, 2, 33, 80, true},
    // Sliding windows: inside a tile, across tiles (rows
    // of one block starting in different tiles), one key.
    AttentionShape{2, 4, 2, 37, 16, false, 5},
    AttentionShape{1, 2, 1, 150, 64, true, 40},
    AttentionShape{1, 2, 2, 70, 80, false, 1},
    AttentionShape{1, 4, 2, 130, 128, true, 50},
    // Soft-capped scores (|s| up to ~5 against a cap of
    // 2), with ALiBi and a window.
    AttentionShape{2, 4, 2, 37, 16, false, 0, 2.f},
    AttentionShape{1, 2, 1, 70, 64, true, 0, 2.f},
    AttentionShape{1, 2, 2, 70, 80, false, 9, 2.f},
    // Sinks (gpt-oss): alone, in a window, at D = 256, soft-capped.
    AttentionShape{2, 4, 2, 37, 16, false, 0, 0.f, true},
    AttentionShape{1, 4, 2, 130, 64, false, 40, 0.f, true},
    AttentionShape{1, 4, 2, 70, 256, false, 9, 0.f, true},
    AttentionShape{1, 2, 2, 70, 80, false, 0, 2.f, true},
    // Chunks (Llama 4): inside a tile, a tile's width, across tiles with
    // ALiBi, under a shorter window, with sinks, at D = 128 and 256.
    AttentionShape{2, 4, 2, 37, 16, false, 0, 0.f, false, 5},
    AttentionShape{1, 2, 1, 150, 64, false, 0, 0.f, false, 64},
    AttentionShape{1, 2, 1, 150, 64, true, 0, 0.f, false, 100},
    AttentionShape{1, 4, 2, 130, 128, false, 9, 0.f, false, 50},
    AttentionShape{1, 4, 2, 130, 64, false, 0, 0.f, true, 40},
    AttentionShape{1, 4, 2, 100, 256, false, 0, 2.f, false, 33},
    // The 512 layout (Gemma 4's full-attention layers; on tensor cores two
    // warps share a query row, four a key row): D < 512, and D = 512 in
    // several tiles of every kernel, soft-capped with sinks in a window,
    // with ALiBi in chunks, over two sequences of an MQA head.
    AttentionShape{1, 2, 1, 21, 384}, AttentionShape{1, 4, 2, 40, 512},
    AttentionShape{1, 2, 2, 37, 512, false, 9, 2.f, true},
    AttentionShape{1, 4, 2, 70, 512, true, 0, 0.f, false, 33},
    AttentionShape{2, 2, 1, 50, 448}};

const mtrt::HeadLayout kLayouts[] = {mtrt::HeadLayout{false},
                                     mtrt::HeadLayout{true}};

// One suite per kernel family, so that a failure names its family; every
// shape in both layouts, and on tensor cores both ways to dQ.
INSTANTIATE_TEST_SUITE_P(
    TensorCores, AttentionTest,
    ::testing::Combine(::testing::ValuesIn(kAttentionShapes),
                       ::testing::Values(AttentionKernels::TensorCores),
                       ::testing::ValuesIn(kLayouts),
                       ::testing::Values(DqBy::Gemm, DqBy::Pass)));
INSTANTIATE_TEST_SUITE_P(
    CudaCores, AttentionTest,
    ::testing::Combine(::testing::ValuesIn(kAttentionShapes),
                       ::testing::Values(AttentionKernels::CudaCores),
                       ::testing::ValuesIn(kLayouts),
                       ::testing::Values(DqBy::Gemm)));

/// The shapes whose attention cuDNN is given (GQA, MQA, D from 16 to 256,
/// one token, sliding windows and chunks shorter than the sequence and as
/// long, soft caps, sinks, ALiBi, whole tiles of 128 keys, which every cuDNN
/// takes backwards too), and one it is not (D = 384), which stays on the
/// tensor cores. The backward adds into random gradients, as a step's does.
std::vector<AttentionShape> cudnn_shapes() {
  std::vector<AttentionShape> out;
  for (const AttentionShape &s : kAttentionShapes)
    if (mtrt::cuda::CudnnAttention::takes(s.D))
      out.push_back(s);
  out.push_back(AttentionShape{1, 2, 1, 150, 64, false, 40});
  out.push_back(AttentionShape{1, 2, 1, 21, 384});
  // Taken: a window as long as the sequence.
  out.push_back(AttentionShape{1, 4, 2, 100, 64, false, 100});
  out.push_back(AttentionShape{2, 4, 2, 256, 64});
  out.push_back(AttentionShape{1, 2, 1, 128, 128});
  return out;
}
INSTANTIATE_TEST_SUITE_P(
    Cudnn, AttentionTest,
    ::testing::Combine(
        ::testing::ValuesIn(cudnn_shapes()),
        ::testing::Values(AttentionKernels::Cudnn,
                          AttentionKernels::CudnnNondeterministic),
        ::testing::ValuesIn(kLayouts), ::testing::Values(DqBy::Gemm)));

class AttentionTilesTest
    : public CudaKernelsTest,
      public ::testing::WithParamInterface<
          std::tuple<AttentionShape, int, mtrt::HeadLayout>> {};

/// The tensor-core kernels on every other choice of tiles that the tile
/// benchmark weighs (AttentionTileVariants.h), against the CPU reference:
/// whichever it finds faster must also be right. δ comes from the runtime's
/// kernel, the log-sum-exp from the choice's forward; the backward adds
/// into random gradients, as a step's does.
TEST_P(AttentionTilesTest, ForwardAndBackward) {
  const AttentionShape s = std::get<0>(GetParam());
  const mtrt::MT_KNS::AttentionTiles tiles =
      mtrt::MT_KNS::attention_tile_variants(s.D).at(std::get<1>(GetParam()));
  const mtrt::HeadLayout layout = std::get<2>(GetParam());
  SCOPED_TRACE(tiles.name);
  const int64_t nq = s.B * s.H * s.S * s.D, nk = s.B * s.Hkv * s.S * s.D;
  const int64_t rows = nq / s.D;
  const float scale = 1.f / std::sqrt(float(s.D));
  const mtrt::KeyRange range{s.window, s.chunk};
  Tensor q = Tensor::random(nq, 70, -2.f, 2.f),
         k = Tensor::random(nk, 71, -2.f, 2.f), v = Tensor::random(nk, 72);
  std::vector<float> slopes(s.H);
  for (int64_t h = 0; h < s.H; ++h)
    slopes[h] = std::exp2(-8.f * float(h + 1) / float(s.H));
  const float *alibi = s.alibi ? slopes.data() : nullptr;
  Tensor sinks = Tensor::random(s.H, 73, -1.f, 2.f);
  Tensor y = Tensor::output(nq), dy = Tensor::random(nq, 74);
  Tensor dq = Tensor::grad(nq, 75), dk = Tensor::grad(nk, 76),
         dv = Tensor::grad(nk, 77);
  Tensor delta = Tensor::f32(rows, 78), lse = Tensor::f32(rows, 79);
  const mtrt::MT_KNS::AttentionCall call{
      y.dev(),         dq.dev(),      dk.dev(), dv.dev(),
      q.dev(),         k.dev(),       v.dev(),  dy.dev(),
      delta.dev_f32(), lse.dev_f32(), s.B,      s.H,
      s.Hkv,           s.S,           s.D,      scale,
      range,           s.softcap,     alibi,    s.sinks ? sinks.dev() : nullptr,
      stream_,         layout};
  tiles.forward(call);
  k_->attention_delta(delta.dev_f32(), dy.dev(), y.dev(), s.B, s.H, s.S, s.D,
                      layout);
  tiles.dq(call);
  tiles.dkdv(call);
  float *sinks_host = s.sinks ? sinks.host() : nullptr;
  cpu_.attention_forward(y.host(), lse.host(), q.host(), k.host(), v.host(),
                         s.B, s.H, s.Hkv, s.S, s.D, scale, range, s.softcap,
                         alibi, sinks_host, layout);
  cpu_.attention_delta(delta.host(), dy.host(), y.host(), s.B, s.H, s.S, s.D,
                       layout);
  cpu_.attention_backward(dq.host(), dk.host(), dv.host(), dy.host(), q.host(),
                          k.host(), v.host(), y.host(), delta.host(),
                          lse.host(), s.B, s.H, s.Hkv, s.S, s.D, scale, range,
                          s.softcap, alibi, sinks_host, nullptr, true, layout);
  sync();
  EXPECT_TRUE(near(y.fetch(), y.h, kUlp, kAttention)) << "y";
  EXPECT_TRUE(near(lse.fetch(), lse.h, kUlp, kAttention)) << "lse";
  EXPECT_TRUE(near(dq.fetch(), dq.h, kUlp, kAttention)) << "dq";
  EXPECT_TRUE(near(dk.fetch(), dk.h, kUlp, kAttention)) << "dk";
  EXPECT_TRUE(near(dv.fetch(), dv.h, kUlp, kAttention)) << "dv";
}

/// Shapes that cut tiles of every size tried (16 to 128 rows) at head dims
/// 16, 64 and 128: GQA, MQA, a window with ALiBi, a soft cap in a window,
/// chunks, sinks; each with every choice of tiles for its head dim, in both
/// layouts.
std::vector<std::tuple<AttentionShape, int, mtrt::HeadLayout>> tile_cases() {
  const AttentionShape shapes[] = {
      AttentionShape{2, 4, 2, 37, 16},
      AttentionShape{1, 2, 1, 150, 64},
      AttentionShape{1, 2, 1, 150, 128},
      AttentionShape{1, 2, 1, 150, 64, true, 40},
      AttentionShape{1, 2, 2, 150, 128, false, 9, 2.f},
      AttentionShape{1, 2, 1, 150, 64, false, 0, 0.f, false, 64},
      AttentionShape{1, 4, 2, 70, 64, false, 0, 0.f, true}};
  std::vector<std::tuple<AttentionShape, int, mtrt::HeadLayout>> out;
  for (const AttentionShape &s : shapes)
    for (size_t i = 0; i < mtrt::MT_KNS::attention_tile_variants(s.D).size();
         ++i)
      for (const mtrt::HeadLayout layout : kLayouts)
        out.emplace_back(s, int(i), layout);
  return out;
}
INSTANTIATE_TEST_SUITE_P(TensorCores, AttentionTilesTest,
                         ::testing::ValuesIn(tile_cases()));

// The deterministic backward holds dS whole (S padded to 64, 2 bytes a
// score) and takes shapes up to 2 GiB of it, and up to the room the plan's
// budget leaves; past that the tensor cores do.
TEST(CudnnAttention, DeterministicBackwardFitsUpTo2GiBOfScoresAndTheRoomLeft) {
  using mtrt::cuda::AttentionDims;
  using mtrt::cuda::CudnnAttention;
  const int64_t any = std::numeric_limits<int64_t>::max(), gib = 1 << 30,
                mib = 1 << 20;
  EXPECT_EQ(CudnnAttention::deterministic_scores_bytes({1, 1, 1, 65, 64}),
            128 * 128 * 2);
  EXPECT_EQ(CudnnAttention::deterministic_scores_bytes({4, 32, 8, 2048, 64}),
            gib);
  // dS, dQ in f32 (4 × 32 × 2048 × 64 × 4 bytes) and 1 MiB.
  EXPECT_EQ(CudnnAttention::deterministic_workspace_bytes({4, 32, 8, 2048, 64}),
            gib + 64 * mib + mib);
  EXPECT_TRUE(
      CudnnAttention::deterministic_backward_fits({4, 32, 8, 2048, 64}, any));
  EXPECT_TRUE(
      CudnnAttention::deterministic_backward_fits({8, 32, 8, 2048, 128}, any));
  EXPECT_FALSE(
      CudnnAttention::deterministic_backward_fits({8, 32, 8, 2049, 128}, any));
  EXPECT_FALSE(
      CudnnAttention::deterministic_backward_fits({1, 32, 8, 32768, 128}, any));
  EXPECT_TRUE(CudnnAttention::deterministic_backward_fits({4, 32, 8, 2048, 64},
                                                          gib + 65 * mib));
  EXPECT_FALSE(CudnnAttention::deterministic_backward_fits({4, 32, 8, 2048, 64},
                                                           gib + 65 * mib - 1));
  EXPECT_FALSE(
      CudnnAttention::deterministic_backward_fits({1, 1, 1, 64, 64}, 0));
}

TEST(CudnnAttention, TakesHeadDimsUpTo256AndWindowsAndChunksShorterThanS) {
  using mtrt::cuda::CudnnAttention;
  EXPECT_TRUE(CudnnAttention::takes(128));
  EXPECT_TRUE(CudnnAttention::takes(16));
  EXPECT_TRUE(CudnnAttention::takes(256));
  EXPECT_FALSE(CudnnAttention::takes(264));
  EXPECT_FALSE(CudnnAttention::takes(20));
  EXPECT_FALSE(CudnnAttention::takes(0));
  // A window or chunk as long as the sequence is none.
  EXPECT_EQ(CudnnAttention::window_of({63, 0}, 64), 63);
  EXPECT_EQ(CudnnAttention::window_of({64, 0}, 64), 0);
  EXPECT_EQ(CudnnAttention::window_of({4096, 8192}, 2048), 0);
  EXPECT_EQ(CudnnAttention::chunk_of({0, 63}, 64), 63);
  EXPECT_EQ(CudnnAttention::chunk_of({0, 64}, 64), 0);
  EXPECT_EQ(CudnnAttention::chunk_of({40, 0}, 64), 0);
}

#ifndef MEGATRAIN_CUDA_EMULATION
// What of cuDNN's graphs needs no GPU: every tensor and operation descriptor
// of the forward and the backward finalizes in the library found here, or
// this names the one it refuses (a matmul's dims wrong anywhere are refused
// when it is finalized). The graphs as a whole and cuDNN's engines for them
// need a GPU: the Cudnn suite above.
TEST(CudnnAttention, DescriptorsFinalize) {
  if (std::string why; !mtrt::cuda::cudnn_loadable(&why))
    GTEST_SKIP() << why;
  using mtrt::cuda::AttentionDims;
  for (const AttentionDims &d :
       {AttentionDims{2, 4, 2, 37, 16}, AttentionDims{1, 32, 8, 4096, 128},
        AttentionDims{1, 2, 1, 1, 64}, AttentionDims{3, 6, 6, 70, 80},
        AttentionDims{1, 4, 2, 130, 64, 40},
        AttentionDims{2, 4, 2, 37, 16, 0, 0.f, false, false, 0, {true}}}) {
    SCOPED_TRACE(::testing::Message()
                 << "B" << d.B << " H" << d.H << " Hkv" << d.Hkv << " S" << d.S
                 << " D" << d.D << " window" << d.window
                 << (d.layout.seq_major ? " sequence-major" : ""));
    try {
      mtrt::cuda::CudnnAttention::check_descriptors(d);
    } catch (const mtrt::Error &e) {
      ADD_FAILURE() << e.what();
    }
  }
}

TEST(CudnnAttention, RefusesShapesItCannotTake) {
  if (std::string why; !mtrt::cuda::cudnn_loadable(&why))
    GTEST_SKIP() << why;
  using mtrt::cuda::AttentionDims;
  for (const AttentionDims &d :
       {AttentionDims{1, 2, 1, 0, 64}, AttentionDims{1, 3, 2, 5, 64}}) {
    try {
      mtrt::cuda::CudnnAttention::check_descriptors(d);
      ADD_FAILURE() << "no error for S=" << d.S << " H=" << d.H
                    << " Hkv=" << d.Hkv;
    } catch (const mtrt::Error &e) {
      EXPECT_NE(std::string(e.what()).find("for cuDNN"), std::string::npos)
          << e.what();
    }
  }
}
#endif

TEST(AttentionKernelsFromEnv, NamesTheFamilyOrRefuses) {
  unsetenv("MEGATRAIN_CUDA_ATTENTION");
  EXPECT_EQ(mtrt::MT_KNS::attention_kernels_from_env(),
            AttentionKernels::TensorCores);
  setenv("MEGATRAIN_CUDA_ATTENTION", "cuda-cores", 1);
  EXPECT_EQ(mtrt::MT_KNS::attention_kernels_from_env(),
            AttentionKernels::CudaCores);
  setenv("MEGATRAIN_CUDA_ATTENTION", "tensor-cores", 1);
  EXPECT_EQ(mtrt::MT_KNS::attention_kernels_from_env(),
            AttentionKernels::TensorCores);
  setenv("MEGATRAIN_CUDA_ATTENTION", "cudnn", 1);
  EXPECT_EQ(mtrt::MT_KNS::attention_kernels_from_env(),
            AttentionKernels::Cudnn);
  setenv("MEGATRAIN_CUDA_ATTENTION", "cudnn-nondeterministic", 1);
  EXPECT_EQ(mtrt::MT_KNS::attention_kernels_from_env(),
            AttentionKernels::CudnnNondeterministic);
  setenv("MEGATRAIN_CUDA_ATTENTION", "wmma", 1);
  try {
    mtrt::MT_KNS::attention_kernels_from_env();
    ADD_FAILURE() << "no error for MEGATRAIN_CUDA_ATTENTION=wmma";
  } catch (const mtrt::Error &e) {
    EXPECT_NE(std::string(e.what()).find("MEGATRAIN_CUDA_ATTENTION=wmma"),
              std::string::npos)
        << e.what();
  }
  unsetenv("MEGATRAIN_CUDA_ATTENTION");
}

TEST_F(CudaKernelsTest, AttentionBackwardSkipsNullGradients) {
  const int64_t B = 1, H = 2, Hkv = 1, S = 20, D = 16;
  Tensor q = Tensor::random(B * H * S * D, 70),
         k = Tensor::random(B * Hkv * S * D, 71);
  Tensor v = Tensor::random(B * Hkv * S * D, 72),
         dy = Tensor::random(B * H * S * D, 73);
  Tensor dk = Tensor::grad(B * Hkv * S * D, 74),
         y = Tensor::output(B * H * S * D);
  Tensor delta = Tensor::f32(B * H * S, 75), lse = Tensor::f32(B * H * S, 76);
  k_->attention_forward(y.dev(), lse.dev_f32(), q.dev(), k.dev(), v.dev(), B, H,
                        Hkv, S, D, 0.25f, {}, 0.f, nullptr, nullptr, {});
  cpu_.attention_forward(y.host(), lse.host(), q.host(), k.host(), v.host(), B,
                         H, Hkv, S, D, 0.25f, {}, 0.f, nullptr, nullptr, {});
  k_->attention_delta(delta.dev_f32(), dy.dev(), y.dev(), B, H, S, D, {});
  cpu_.attention_delta(delta.host(), dy.host(), y.host(), B, H, S, D, {});
  k_->attention_backward(nullptr, dk.dev(), nullptr, dy.dev(), q.dev(), k.dev(),
                         v.dev(), y.dev(), delta.dev_f32(), lse.dev_f32(), B, H,
                         Hkv, S, D, 0.25f, {}, 0.f, nullptr, nullptr, nullptr,
                         true, {});
  cpu_.attention_backward(nullptr, dk.host(), nullptr, dy.host(), q.host(),
                          k.host(), v.host(), y.host(), delta.host(),
                          lse.host(), B, H, Hkv, S, D, 0.25f, {}, 0.f, nullptr,
                          nullptr, nullptr, true, {});
  sync();
  EXPECT_TRUE(near(dk.fetch(), dk.h, kUlp, kAttention));
}

// The tensor-core backward's two ways to dQ, each against the CPU: a GEMM
// over the dK/dV pass's dSᵀ where the kernels' scratch room holds it
// (B·H·S² bf16), else a pass of its own, which asks for no scratch. In both
// layouts (sequence-major, the GEMMs are batched over the KV heads, or, where
// there are more, over the sequences), on a shape of whole 16-byte rows and
// one of odd lengths with rows of 40 (the query heads' columns of dSᵀ not
// 4-byte aligned).
class AttentionDqTest : public CudaKernelsTest,
                        public ::testing::WithParamInterface<
                            std::tuple<AttentionShape, mtrt::HeadLayout>> {};

TEST_P(AttentionDqTest, AttentionDqByGemmWhereScoresFitElseByItsOwnPass) {
  const AttentionShape sh = std::get<0>(GetParam());
  const mtrt::HeadLayout layout = std::get<1>(GetParam());
  const int64_t B = sh.B, H = sh.H, Hkv = sh.Hkv, S = sh.S, D = sh.D;
  const int64_t nq = B * H * S * D, nk = B * Hkv * S * D, rows = B * H * S;
  const int64_t scores = B * H * S * S * 2;
  const float scale = 0.125f;
  Tensor q = Tensor::random(nq, 80, -2.f, 2.f),
         k = Tensor::random(nk, 81, -2.f, 2.f);
  Tensor v = Tensor::random(nk, 82), dy = Tensor::random(nq, 83);
  Tensor y = Tensor::output(nq), lse = Tensor::f32(rows, 84),
         delta = Tensor::f32(rows, 85);
  k_->attention_forward(y.dev(), lse.dev_f32(), q.dev(), k.dev(), v.dev(), B, H,
                        Hkv, S, D, scale, {}, 0.f, nullptr, nullptr, layout);
  cpu_.attention_forward(y.host(), lse.host(), q.host(), k.host(), v.host(), B,
                         H, Hkv, S, D, scale, {}, 0.f, nullptr, nullptr,
                         layout);
  k_->attention_delta(delta.dev_f32(), dy.dev(), y.dev(), B, H, S, D, layout);
  cpu_.attention_delta(delta.host(), dy.host(), y.host(), B, H, S, D, layout);
  // Added into random gradients, or written over NaN.
  for (const int64_t room : {scores - 1, scores}) {
    k_->set_scratch_room(room);
    for (const bool accumulate : {true, false}) {
      SCOPED_TRACE(::testing::Message()
                   << "room " << room << ", accumulate " << accumulate);
      const auto grad = [&](int64_t n, uint32_t seed) {
        return accumulate ? Tensor::grad(n, seed) : Tensor::output(n);
      };
      Tensor dq = grad(nq, 86), dk = grad(nk, 87), dv = grad(nk, 88);
      cpu_.attention_backward(
          dq.host(), dk.host(), dv.host(), dy.host(), q.host(), k.host(),
          v.host(), y.host(), delta.host(), lse.host(), B, H, Hkv, S, D, scale,
          {}, 0.f, nullptr, nullptr, nullptr, accumulate, layout);
      Tensor gq = grad(nq, 86), gk = grad(nk, 87), gv = grad(nk, 88);
      k_->attention_backward(gq.dev(), gk.dev(), gv.dev(), dy.dev(), q.dev(),
                             k.dev(), v.dev(), y.dev(), delta.dev_f32(),
                             lse.dev_f32(), B, H, Hkv, S, D, scale, {}, 0.f,
                             nullptr, nullptr, nullptr, accumulate, layout);
      sync();
      EXPECT_EQ(k_->scratch_peak() >= scores, room >= scores);
      EXPECT_TRUE(near(gq.fetch(), dq.h, kUlp, kAttention)) << "dq";
      EXPECT_TRUE(near(gk.fetch(), dk.h, kUlp, kAttention)) << "dk";
      EXPECT_TRUE(near(gv.fetch(), dv.h, kUlp, kAttention)) << "dv";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    TensorCores, AttentionDqTest,
    ::testing::Combine(::testing::Values(AttentionShape{2, 4, 2, 70, 64},
                                         AttentionShape{3, 2, 1, 45, 40}),
                       ::testing::ValuesIn(kLayouts)));

// Sequence-major attention is heads-major attention of the same rows: the
// results on (B, S, H, D) tensors, moved to (B, H, S, D), are the bits the
// same kernels give for the inputs moved there (the same products in the
// same order, only read and written elsewhere), whichever the family: an
// oracle apart from the CPU reference. The one exception: cuBLASLt may run
// the sequence-major dQ GEMMs (other strides, one query head each) by
// another algorithm, so on a GPU the GEMM's dQ is held to the adds'
// tolerance. Forms and lengths that take every path of the kernels' loads:
// tiles cut, ALiBi, a window, a soft cap and sinks, chunks, rows of 40 and
// 20 (not 16-byte pieces), wide heads, more sequences than KV heads.
class AttentionLayoutTest
    : public CudaKernelsTest,
      public ::testing::WithParamInterface<
          std::tuple<AttentionShape, AttentionKernels, DqBy>> {};

TEST_P(AttentionLayoutTest, SequenceMajorIsHeadsMajorMoved) {
  const AttentionShape s = std::get<0>(GetParam());
  const AttentionKernels family = std::get<1>(GetParam());
  const DqBy dq_by = std::get<2>(GetParam());
  k_->set_attention_kernels(family);
  if (dq_by == DqBy::Pass)
    k_->set_scratch_room(0);
  const mtrt::HeadLayout heads{false}, seq{true};
  const int64_t nq = s.B * s.H * s.S * s.D, nk = s.B * s.Hkv * s.S * s.D;
  const int64_t rows = s.B * s.H * s.S;
  const float scale = 1.f / std::sqrt(float(s.D));
  const mtrt::KeyRange range{s.window, s.chunk};
  std::vector<float> slopes(s.H);
  for (int64_t h = 0; h < s.H; ++h)
    slopes[h] = std::exp2(-8.f * float(h + 1) / float(s.H));
  const float *alibi = s.alibi ? slopes.data() : nullptr;
  Tensor sinks = Tensor::random(s.H, 89, -1.f, 2.f);
  // Inputs and the gradients' priors heads-major.
  const std::vector<float> q = Tensor::random(nq, 90, -2.f, 2.f).h,
                           k = Tensor::random(nk, 91, -2.f, 2.f).h,
                           v = Tensor::random(nk, 92).h,
                           dy = Tensor::random(nq, 93).h,
                           dq0 = Tensor::grad(nq, 94).h,
                           dk0 = Tensor::grad(nk, 95).h,
                           dv0 = Tensor::grad(nk, 96).h;
  // Every result of one layout, heads-major: y, lse, δ, the gradients
  // added into the priors, then written, and the sinks'.
  const auto results = [&](mtrt::HeadLayout layout) {
    const auto in = [&](const std::vector<float> &x, int64_t n_heads) {
      return Tensor::of(relaid(x, s.B, n_heads, s.S, s.D, heads, layout));
    };
    const auto out = [&](const Tensor &t, int64_t n_heads) {
      return relaid(t.fetch(), s.B, n_heads, s.S, s.D, layout, heads);
    };
    Tensor tq = in(q, s.H), tk = in(k, s.Hkv), tv = in(v, s.Hkv),
           tdy = in(dy, s.H);
    Tensor y = Tensor::output(nq), lse = Tensor::f32(rows, 97),
           delta = Tensor::f32(rows, 98), dsinks = Tensor::f32(s.H, 99);
    Tensor dq = in(dq0, s.H), dk = in(dk0, s.Hkv), dv = in(dv0, s.Hkv);
    Tensor wq = Tensor::output(nq), wk = Tensor::output(nk),
           wv = Tensor::output(nk);
    void *sinks_dev = s.sinks ? sinks.dev() : nullptr;
    k_->attention_forward(y.dev(), lse.dev_f32(), tq.dev(), tk.dev(), tv.dev(),
                          s.B, s.H, s.Hkv, s.S, s.D, scale, range, s.softcap,
                          alibi, sinks_dev, layout);
    k_->attention_delta(delta.dev_f32(), tdy.dev(), y.dev(), s.B, s.H, s.S, s.D,
                        layout);
    k_->attention_backward(dq.dev(), dk.dev(), dv.dev(), tdy.dev(), tq.dev(),
                           tk.dev(), tv.dev(), y.dev(), delta.dev_f32(),
                           lse.dev_f32(), s.B, s.H, s.Hkv, s.S, s.D, scale,
                           range, s.softcap, alibi, sinks_dev,
                           s.sinks ? dsinks.dev_f32() : nullptr, true, layout);
    k_->attention_backward(
        wq.dev(), wk.dev(), wv.dev(), tdy.dev(), tq.dev(), tk.dev(), tv.dev(),
        y.dev(), delta.dev_f32(), lse.dev_f32(), s.B, s.H, s.Hkv, s.S, s.D,
        scale, range, s.softcap, alibi, sinks_dev, nullptr, false, layout);
    sync();
    return std::vector<std::vector<float>>{
        out(y, s.H),    lse.fetch(),    delta.fetch(), out(dq, s.H),
        out(dk, s.Hkv), out(dv, s.Hkv), out(wq, s.H),  out(wk, s.Hkv),
        out(wv, s.Hkv), dsinks.fetch()};
  };
  const std::vector<std::vector<float>> want = results(heads),
                                        got = results(seq);
  const char *names[] = {"y",          "lse",   "delta",      "dq",
                         "dk",         "dv",    "dq written", "dk written",
                         "dv written", "dsinks"};
  for (size_t r = 0; r < want.size(); ++r) {
    double atol = 0.0;
#ifndef MEGATRAIN_CUDA_EMULATION
    const bool gemm_dq = family == AttentionKernels::TensorCores &&
                         dq_by == DqBy::Gemm && (r == 3 || r == 6);
    if (gemm_dq)
      atol = kAttention;
#endif
    EXPECT_TRUE(near(got[r], want[r], atol > 0 ? kUlp : 0.0, atol)) << names[r];
  }
}

const AttentionShape kLayoutShapes[] = {
    AttentionShape{2, 4, 2, 37, 16},
    AttentionShape{1, 4, 2, 70, 64, true, 9, 2.f, true},
    AttentionShape{3, 2, 1, 45, 40, false, 0, 0.f, false, 20},
    AttentionShape{1, 2, 1, 33, 20},
    AttentionShape{1, 4, 2, 40, 256, false, 0, 2.f, true},
    AttentionShape{2, 2, 1, 21, 512, true}};
INSTANTIATE_TEST_SUITE_P(
    TensorCores, AttentionLayoutTest,
    ::testing::Combine(::testing::ValuesIn(kLayoutShapes),
                       ::testing::Values(AttentionKernels::TensorCores),
                       ::testing::Values(DqBy::Gemm, DqBy::Pass)));
INSTANTIATE_TEST_SUITE_P(
    CudaCores, AttentionLayoutTest,
    ::testing::Combine(::testing::ValuesIn(kLayoutShapes),
                       ::testing::Values(AttentionKernels::CudaCores),
                       ::testing::Values(DqBy::Gemm)));

// The mixture of experts' kernels against the CPU's, with and without
// renormalized routing weights, a grid-stride loop longer than one block of
// tokens, a selection bias, and in ragged chunks of 7 tokens, whose weight
// gradients add chunk by chunk. The larger cases give the grouped GEMMs
// several row tiles an expert, two column tiles, K steps with a ragged last
// one, and rows whose 16-byte loads do not line up (H = 136 is, I = 36 is
// not, a multiple of 8). gpt-oss's experts (stored x · W, g and u
// interleaved, biases on the router and both products): clamped at a limit
// the values cross, and in ragged chunks of the larger shape unclamped (the
// tensor-core path clamps g and u rounded to bf16, so a value within an
// ulp of the limit may be clamped on one side and not on the other: a
// difference in its gradient no tolerance can bound). Llama 4's routing
// (the weights on the experts' inputs): the sigmoid of one chosen logit,
// and two renormalized weights in ragged chunks of the larger shape.
//
// The tensor-core path keeps the experts' intermediates (g; u), a, their
// gradients and w·dy in bf16 where the CPU keeps f32: half a bf16 ulp off
// each term, about one ulp of the largest element in every result, as for
// the tensor-core attention.
class MoeTest : public CudaKernelsTest,
                public ::testing::WithParamInterface<MoeKernels> {};

TEST_P(MoeTest, ForwardAndBackward) {
  k_->set_moe_kernels(GetParam());
  const bool tc = GetParam() == MoeKernels::TensorCores;
  const double sums = tc ? kAttention : kSums, rtol = tc ? kUlp : 1e-4,
               atol = tc ? kAttention : 1e-5;
  struct Case {
    int64_t T, H, E, I, k;
    bool normalize, bias;
    const char *chunk; // MEGATRAIN_CUDA_MOE_CHUNK_TOKENS, or none
    bool sigmoid = false;
    int64_t groups = 1, top_groups = 1;
    float scale = 1.f;
    bool oss = false;
    float limit = 0.8f;
    bool weigh_inputs = false;
    // Gemma 4: GeGLU experts with trained scales, the router on its own
    // input.
    bool gemma4 = false;
  };
  for (const Case c :
       {Case{9, 40, 4, 24, 2, true, false, nullptr},
        Case{300, 16, 5, 8, 3, false, false, nullptr},
        Case{9, 40, 4, 24, 2, true, true, "7"},
        Case{300, 16, 5, 8, 3, false, false, "7"},
        Case{150, 136, 3, 36, 2, true, false, nullptr},
        Case{150, 136, 3, 36, 2, false, true, "61"},
        // Sigmoid scores in the best 2 of 4 groups, scaled (DeepSeek V3,
        // GLM-4.5); softmax in groups, unnormalized and scaled.
        Case{40, 24, 8, 16, 3, true, true, nullptr, true, 4, 2, 2.5f},
        Case{40, 24, 6, 16, 2, false, false, "9", false, 3, 1, 1.5f},
        Case{40, 40, 4, 24, 2, true, false, nullptr, false, 1, 1, 1.f, true},
        Case{150, 136, 3, 36, 2, true, false, "61", false, 1, 1, 1.f, true,
             0.f},
        Case{40, 40, 4, 24, 1, false, false, nullptr, true, 1, 1, 1.f, false,
             0.f, true},
        Case{150, 136, 3, 36, 2, true, false, "61", false, 1, 1, 1.f, false,
             0.f, true},
        Case{40, 40, 6, 24, 2, true, false, nullptr, false, 1, 1, 1.f, false,
             0.f, false, true},
        Case{150, 136, 4, 36, 2, true, false, "61", false, 1, 1, 1.f, false,
             0.f, false, true}}) {
    if (c.chunk)
      setenv("MEGATRAIN_CUDA_MOE_CHUNK_TOKENS", c.chunk, 1);
    const int64_t T = c.T, H = c.H, E = c.E, I = c.I, k = c.k;
    Tensor x = Tensor::random(T * H, 93), router = Tensor::random(E * H, 94);
    Tensor gu = Tensor::random(E * 2 * I * H, 95, -0.5f, 0.5f),
           down = Tensor::random(E * H * I, 96, -0.5f, 0.5f);
    Tensor y = Tensor::output(T * H), dy = Tensor::random(T * H, 97),
           dx = Tensor::grad(T * H, 98);
    Tensor dr = Tensor::f32(E * H, 99), dgu = Tensor::f32(E * 2 * I * H, 100),
           dd = Tensor::f32(E * H * I, 101);
    Tensor bias = Tensor::random(E, 102, -0.2f, 0.2f);
    // gpt-oss's trained biases and their gradients.
    Tensor rb = Tensor::random(E, 103, -0.3f, 0.3f),
           gub = Tensor::random(E * 2 * I, 104, -0.3f, 0.3f),
           db = Tensor::random(E * H, 105, -0.3f, 0.3f);
    Tensor drb = Tensor::f32(E, 106), dgub = Tensor::f32(E * 2 * I, 107),
           ddb = Tensor::f32(E * H, 108);
    // Gemma 4's router input, expert scales and their gradients.
    Tensor rx = Tensor::random(T * H, 109),
           es = Tensor::random(E, 110, 0.5f, 1.5f);
    Tensor drx = Tensor::grad(T * H, 111), des = Tensor::f32(E, 112);
    auto dev = [&](bool on, Tensor &t) -> void * {
      return on ? t.dev() : nullptr;
    };
    auto host = [&](bool on, Tensor &t) -> float * {
      return on ? t.host() : nullptr;
    };
    MoeRouting r;
    r.sigmoid = c.sigmoid, r.normalize = c.normalize, r.groups = c.groups;
    r.top_groups = c.top_groups, r.scale = c.scale;
    r.weigh_inputs = c.weigh_inputs;
    MoeExperts f;
    if (c.oss)
      f = {true, true, 1.702f, c.limit, 1.f};
    f.gelu = c.gemma4;
    const bool o = c.oss, g4 = c.gemma4;
    const mtrt::MoeParams wd{router.dev(),      gu.dev(),   down.dev(),
                             dev(c.bias, bias), dev(o, rb), dev(o, gub),
                             dev(o, db),        dev(g4, es)};
    const mtrt::MoeParams wh{router.host(),      gu.host(),   down.host(),
                             host(c.bias, bias), host(o, rb), host(o, gub),
                             host(o, db),        host(g4, es)};
    k_->moe_forward(y.dev(), x.dev(), dev(g4, rx), wd, T, H, E, I, k, r, f);
    cpu_.moe_forward(y.host(), x.host(), host(g4, rx), wh, T, H, E, I, k, r, f);
    auto f32 = [&](bool on, Tensor &t) { return on ? t.dev_f32() : nullptr; };
    k_->moe_backward(dx.dev(), dev(g4, drx),
                     {dr.dev_f32(), dgu.dev_f32(), dd.dev_f32(), f32(o, drb),
                      f32(o, dgub), f32(o, ddb), f32(g4, des)},
                     dy.dev(), x.dev(), dev(g4, rx), wd, T, H, E, I, k, r, f);
    cpu_.moe_backward(dx.host(), host(g4, drx),
                      {dr.host(), dgu.host(), dd.host(), host(o, drb),
                       host(o, dgub), host(o, ddb), host(g4, des)},
                      dy.host(), x.host(), host(g4, rx), wh, T, H, E, I, k, r,
                      f);
    sync();
    unsetenv("MEGATRAIN_CUDA_MOE_CHUNK_TOKENS");
    const std::string at =
        "T=" + std::to_string(T) +
        (c.chunk ? std::string(" chunk ") + c.chunk : "") +
        (c.bias ? " bias" : "") + (c.sigmoid ? " sigmoid" : "") + " groups " +
        std::to_string(c.groups) + (c.oss ? " gpt-oss" : "") +
        (c.weigh_inputs ? " weigh inputs" : "") + (c.gemma4 ? " gemma4" : "");
    EXPECT_TRUE(near(y.fetch(), y.h, kUlp, sums)) << "y, " << at;
    EXPECT_TRUE(near(dx.fetch(), dx.h, kUlp, sums)) << "dx, " << at;
    EXPECT_TRUE(near(dr.fetch(), dr.h, rtol, atol)) << "drouter, " << at;
    EXPECT_TRUE(near(dgu.fetch(), dgu.h, rtol, atol)) << "dgate_up, " << at;
    EXPECT_TRUE(near(dd.fetch(), dd.h, rtol, atol)) << "ddown, " << at;
    EXPECT_TRUE(near(drb.fetch(), drb.h, rtol, atol)) << "drouter_bias, " << at;
    EXPECT_TRUE(near(dgub.fetch(), dgub.h, rtol, atol))
        << "dgate_up_bias, " << at;
    EXPECT_TRUE(near(ddb.fetch(), ddb.h, rtol, atol)) << "ddown_bias, " << at;
    EXPECT_TRUE(near(drx.fetch(), drx.h, kUlp, sums)) << "drouter_x, " << at;
    EXPECT_TRUE(near(des.fetch(), des.h, rtol, atol))
        << "dexpert_scale, " << at;
  }
}

INSTANTIATE_TEST_SUITE_P(TensorCores, MoeTest,
                         ::testing::Values(MoeKernels::TensorCores));
INSTANTIATE_TEST_SUITE_P(CudaCores, MoeTest,
                         ::testing::Values(MoeKernels::CudaCores));

TEST(MoeKernelsFromEnv, NamesTheFamilyOrRefuses) {
  unsetenv("MEGATRAIN_CUDA_MOE");
  EXPECT_EQ(mtrt::MT_KNS::moe_kernels_from_env(), MoeKernels::TensorCores);
  setenv("MEGATRAIN_CUDA_MOE", "cuda-cores", 1);
  EXPECT_EQ(mtrt::MT_KNS::moe_kernels_from_env(), MoeKernels::CudaCores);
  setenv("MEGATRAIN_CUDA_MOE", "grouped", 1);
  try {
    mtrt::MT_KNS::moe_kernels_from_env();
    ADD_FAILURE() << "no error for MEGATRAIN_CUDA_MOE=grouped";
  } catch (const mtrt::Error &e) {
    EXPECT_NE(std::string(e.what()).find("MEGATRAIN_CUDA_MOE=grouped"),
              std::string::npos)
        << e.what();
  }
  unsetenv("MEGATRAIN_CUDA_MOE");
}

// The causal convolution: taps that reach before position 0, one tap, and
// several (batch, channel) rows whose dw and db sums run over more than a
// block; with a bias and without.
TEST_F(CudaKernelsTest, CausalConv) {
  struct Case {
    int64_t B, C, S, K;
  };
  for (const bool biased : {true, false})
  for (const Case c :
       {Case{2, 5, 37, 3}, Case{1, 3, 4, 1}, Case{3, 2, 300, 4}}) {
    const int64_t n = c.B * c.C * c.S;
    Tensor x = Tensor::random(n, 110), w = Tensor::random(c.C * c.K, 111),
           bias = Tensor::random(c.C, 115);
    Tensor y = Tensor::output(n), dy = Tensor::random(n, 112),
           dx = Tensor::grad(n, 113);
    Tensor dw = Tensor::f32(c.C * c.K, 114), db = Tensor::f32(c.C, 116);
    k_->causal_conv_forward(y.dev(), x.dev(), w.dev(),
                            biased ? bias.dev() : nullptr, c.B, c.C, c.S, c.K);
    cpu_.causal_conv_forward(y.host(), x.host(), w.host(),
                             biased ? bias.host() : nullptr, c.B, c.C, c.S,
                             c.K);
    k_->causal_conv_backward(dx.dev(), dw.dev_f32(),
                             biased ? db.dev_f32() : nullptr, dy.dev(), x.dev(),
                             w.dev(), c.B, c.C, c.S, c.K);
    cpu_.causal_conv_backward(dx.host(), dw.host(),
                              biased ? db.host() : nullptr, dy.host(), x.host(),
                              w.host(), c.B, c.C, c.S, c.K);
    sync();
    const std::string at = std::string(biased ? "bias" : "no bias") +
                           " S=" + std::to_string(c.S) +
                           " K=" + std::to_string(c.K);
    EXPECT_TRUE(near(y.fetch(), y.h, kUlp, kSums)) << "y, " << at;
    EXPECT_TRUE(near(dx.fetch(), dx.h, kUlp, kSums)) << "dx, " << at;
    EXPECT_TRUE(near(dw.fetch(), dw.h, 1e-4, 1e-5)) << "dw, " << at;
    EXPECT_TRUE(near(db.fetch(), db.h, 1e-4, 1e-5)) << "db, " << at;
  }
}

// Two value heads per key head; T = 150 spans three of the backward's
// 64-position chunks and T = 300 two of its 256-position segments (dS carried
// between them), with a ragged second tile of columns; Dk = Dv = 128 is
// Qwen3.5's head and Dk = 256 the widest the kernels take. Heads narrower
// than a tile share one: 37 heads of one column (Mamba-1's) fill a block and
// a ragged second; six heads of 3 columns a key head, two to a block; 32
// heads of one column each of two key heads, a block each. |k|² stays below
// 1 so that the state stays bounded. Three rules: with the delta rule's
// correction (Qwen3.5), without (Mamba-2), and with it and a decay per key
// channel (Kimi Delta Attention).
TEST_F(CudaKernelsTest, GatedScan) {
  struct Case {
    int64_t B, T, Hk, Hv, Dk, Dv;
  };
  struct Rule {
    bool delta, key_decay;
  };
  for (const Rule rule :
       {Rule{true, false}, Rule{false, false}, Rule{true, true}})
    for (const Case c : {Case{2, 150, 1, 2, 8, 6}, Case{1, 300, 2, 4, 20, 40},
                         Case{1, 5, 1, 2, 128, 128}, Case{1, 4, 1, 1, 256, 40},
                         Case{2, 70, 1, 37, 16, 1}, Case{1, 70, 2, 12, 8, 3},
                         Case{1, 300, 2, 64, 16, 1}}) {
      const bool delta = rule.delta, key_decay = rule.key_decay;
      const int64_t nqk = c.B * c.T * c.Hk * c.Dk,
                    nvo = c.B * c.T * c.Hv * c.Dv, ngb = c.B * c.T * c.Hv,
                    ng = ngb * (key_decay ? c.Dk : 1);
      const float kr = 1.5f / std::sqrt(float(c.Dk));
      Tensor q = Tensor::random(nqk, 120),
             k = Tensor::random(nqk, 121, -kr, kr),
             v = Tensor::random(nvo, 122),
             g = Tensor::random(ng, 123, -2.f, 0.f),
             beta = Tensor::random(ngb, 124, 0.01f, 1.f);
      Tensor o = Tensor::output(nvo), dout = Tensor::random(nvo, 125);
      Tensor dq = Tensor::grad(nqk, 126), dk = Tensor::grad(nqk, 127),
             dv = Tensor::grad(nvo, 128), dg = Tensor::grad(ng, 129),
             dbeta = Tensor::grad(ngb, 130);
      k_->gated_scan_forward(o.dev(), q.dev(), k.dev(), v.dev(), g.dev(),
                             beta.dev(), c.B, c.T, c.Hk, c.Hv, c.Dk, c.Dv,
                             delta, key_decay);
      cpu_.gated_scan_forward(o.host(), q.host(), k.host(), v.host(), g.host(),
                              beta.host(), c.B, c.T, c.Hk, c.Hv, c.Dk, c.Dv,
                              delta, key_decay);
      k_->gated_scan_backward(dq.dev(), dk.dev(), dv.dev(), dg.dev(),
                              dbeta.dev(), dout.dev(), q.dev(), k.dev(),
                              v.dev(), g.dev(), beta.dev(), c.B, c.T, c.Hk,
                              c.Hv, c.Dk, c.Dv, delta, key_decay);
      cpu_.gated_scan_backward(dq.host(), dk.host(), dv.host(), dg.host(),
                               dbeta.host(), dout.host(), q.host(), k.host(),
                               v.host(), g.host(), beta.host(), c.B, c.T, c.Hk,
                               c.Hv, c.Dk, c.Dv, delta, key_decay);
      sync();
      const std::string at =
          std::string(key_decay ? "key decay"
                      : delta   ? "delta"
                                : "linear") +
          " T=" + std::to_string(c.T) + " Dk=" + std::to_string(c.Dk) +
          " Hv=" + std::to_string(c.Hv) + " Dv=" + std::to_string(c.Dv);
      EXPECT_TRUE(near(o.fetch(), o.h, kUlp, kSums)) << "o, " << at;
      EXPECT_TRUE(near(dq.fetch(), dq.h, kUlp, kSums)) << "dq, " << at;
      EXPECT_TRUE(near(dk.fetch(), dk.h, kUlp, kSums)) << "dk, " << at;
      EXPECT_TRUE(near(dv.fetch(), dv.h, kUlp, kSums)) << "dv, " << at;
      EXPECT_TRUE(near(dg.fetch(), dg.h, kUlp, kSums)) << "dg, " << at;
      EXPECT_TRUE(near(dbeta.fetch(), dbeta.h, kUlp, kSums)) << "dbeta, " << at;
    }
}

// Only some gradients: the others are null and must not be touched.
TEST_F(CudaKernelsTest, GatedScanSomeGradients) {
  const int64_t B = 1, T = 70, Hk = 1, Hv = 2, Dk = 8, Dv = 6;
  const int64_t nqk = B * T * Hk * Dk, nvo = B * T * Hv * Dv, ngb = B * T * Hv;
  Tensor q = Tensor::random(nqk, 140), k = Tensor::random(nqk, 141, -.5f, .5f),
         v = Tensor::random(nvo, 142), g = Tensor::random(ngb, 143, -2.f, 0.f),
         beta = Tensor::random(ngb, 144, 0.01f, 1.f),
         dout = Tensor::random(nvo, 145);
  Tensor dk = Tensor::grad(nqk, 146), dg = Tensor::grad(ngb, 147);
  k_->gated_scan_backward(nullptr, dk.dev(), nullptr, dg.dev(), nullptr,
                          dout.dev(), q.dev(), k.dev(), v.dev(), g.dev(),
                          beta.dev(), B, T, Hk, Hv, Dk, Dv, true, false);
  cpu_.gated_scan_backward(nullptr, dk.host(), nullptr, dg.host(), nullptr,
                           dout.host(), q.host(), k.host(), v.host(), g.host(),
                           beta.host(), B, T, Hk, Hv, Dk, Dv, true, false);
  sync();
  EXPECT_TRUE(near(dk.fetch(), dk.h, kUlp, kSums)) << "dk";
  EXPECT_TRUE(near(dg.fetch(), dg.h, kUlp, kSums)) << "dg";
}

// xIELU over a ragged last row of the param gradients' [n / 1024, 1024]
// view; values reach both branches and the band between eps and 0. The
// alphas as params, or through transformers' softplus.
TEST_F(CudaKernelsTest, Xielu) {
  const int64_t n = 5000;
  Tensor x = Tensor::random(n, 86, -6.f, 4.f), dy = Tensor::random(n, 87);
  Tensor ap = Tensor::random(1, 88, 0.5f, 1.f),
         an = Tensor::random(1, 89, -1.f, 0.5f);
  for (bool softplus : {false, true}) {
    Tensor y = Tensor::output(n), dx = Tensor::grad(n, 90);
    Tensor dap = Tensor::f32(1, 91), dan = Tensor::f32(1, 92);
    k_->xielu_forward(y.dev(), x.dev(), ap.dev(), an.dev(), n, 0.5f, -1e-6f,
                      softplus);
    cpu_.xielu_forward(y.host(), x.host(), ap.host(), an.host(), n, 0.5f,
                       -1e-6f, softplus);
    k_->xielu_backward(dx.dev(), dap.dev_f32(), dan.dev_f32(), dy.dev(),
                       x.dev(), ap.dev(), an.dev(), n, 0.5f, -1e-6f, softplus);
    cpu_.xielu_backward(dx.host(), dap.host(), dan.host(), dy.host(), x.host(),
                        ap.host(), an.host(), n, 0.5f, -1e-6f, softplus);
    sync();
    const std::string at = softplus ? "softplus" : "alphas";
    EXPECT_TRUE(near(y.fetch(), y.h, kUlp, kPointwise)) << "y, " << at;
    EXPECT_TRUE(near(dx.fetch(), dx.h, kUlp, kPointwise)) << "dx, " << at;
    EXPECT_TRUE(near(dap.fetch(), dap.h, 1e-4, 1e-5)) << "dalpha_p, " << at;
    EXPECT_TRUE(near(dan.fetch(), dan.h, 1e-4, 1e-5)) << "dalpha_n, " << at;
  }
}

TEST_F(CudaKernelsTest, Activations) {
  const int64_t n = 3000;
  Tensor x = Tensor::random(n, 80, -6.f, 6.f), u = Tensor::random(n, 81);
  Tensor dy = Tensor::random(n, 82);
  for (int op = 0; op < 7; ++op) {
    Tensor y = Tensor::output(n), dx = Tensor::grad(n, 83);
    if (op == 6) {
      k_->softplus_forward(y.dev(), x.dev(), n);
      k_->softplus_backward(dx.dev(), dy.dev(), x.dev(), n);
      cpu_.softplus_forward(y.host(), x.host(), n);
      cpu_.softplus_backward(dx.host(), dy.host(), x.host(), n);
    } else if (op == 5) {
      k_->sigmoid_forward(y.dev(), x.dev(), n);
      k_->sigmoid_backward(dx.dev(), dy.dev(), x.dev(), n);
      cpu_.sigmoid_forward(y.host(), x.host(), n);
      cpu_.sigmoid_backward(dx.host(), dy.host(), x.host(), n);
    } else if (op == 4) {
      k_->softcap_forward(y.dev(), x.dev(), n, 2.5f);
      k_->softcap_backward(dx.dev(), dy.dev(), x.dev(), n, 2.5f);
      cpu_.softcap_forward(y.host(), x.host(), n, 2.5f);
      cpu_.softcap_backward(dx.host(), dy.host(), x.host(), n, 2.5f);
    } else if (op == 3) {
      k_->relu_forward(y.dev(), x.dev(), n);
      k_->relu_backward(dx.dev(), dy.dev(), x.dev(), n);
      cpu_.relu_forward(y.host(), x.host(), n);
      cpu_.relu_backward(dx.host(), dy.host(), x.host(), n);
    } else if (op == 0) {
      k_->silu_forward(y.dev(), x.dev(), n);
      k_->silu_backward(dx.dev(), dy.dev(), x.dev(), n);
      cpu_.silu_forward(y.host(), x.host(), n);
      cpu_.silu_backward(dx.host(), dy.host(), x.host(), n);
    } else {
      const bool tanh_form = op == 2;
      k_->gelu_forward(y.dev(), x.dev(), n, tanh_form);
      k_->gelu_backward(dx.dev(), dy.dev(), x.dev(), n, tanh_form);
      cpu_.gelu_forward(y.host(), x.host(), n, tanh_form);
      cpu_.gelu_backward(dx.host(), dy.host(), x.host(), n, tanh_form);
    }
    sync();
    EXPECT_TRUE(near(y.fetch(), y.h, kUlp, kPointwise)) << "op " << op;
    EXPECT_TRUE(near(dx.fetch(), dx.h, kUlp, kPointwise)) << "op " << op;
  }
  Tensor y = Tensor::output(n), dg = Tensor::grad(n, 84),
         du = Tensor::grad(n, 85);
  k_->swiglu_forward(y.dev(), x.dev(), u.dev(), n);
  k_->swiglu_backward(dg.dev(), du.dev(), dy.dev(), x.dev(), u.dev(), n, true);
  cpu_.swiglu_forward(y.host(), x.host(), u.host(), n);
  cpu_.swiglu_backward(dg.host(), du.host(), dy.host(), x.host(), u.host(), n,
                       true);
  Tensor wg = Tensor::output(n), wu = Tensor::output(n); // written over NaN
  k_->swiglu_backward(wg.dev(), wu.dev(), dy.dev(), x.dev(), u.dev(), n, false);
  cpu_.swiglu_backward(wg.host(), wu.host(), dy.host(), x.host(), u.host(), n,
                       false);
  Tensor e = Tensor::output(n);
  k_->exp_forward(e.dev(), x.dev(), n);
  cpu_.exp_forward(e.host(), x.host(), n);
  Tensor s = Tensor::output(n);
  k_->scale_forward(s.dev(), x.dev(), n, 0.125f);
  cpu_.scale_forward(s.host(), x.host(), n, 0.125f);
  sync();
  EXPECT_TRUE(near(y.fetch(), y.h, kUlp, kPointwise)) << "swiglu";
  EXPECT_TRUE(near(dg.fetch(), dg.h, kUlp, kPointwise)) << "dgate";
  EXPECT_TRUE(near(du.fetch(), du.h, kUlp, kPointwise)) << "dup";
  EXPECT_TRUE(near(wg.fetch(), wg.h, kUlp, kPointwise)) << "dgate written";
  EXPECT_TRUE(near(wu.fetch(), wu.h, kUlp, kPointwise)) << "dup written";
  EXPECT_TRUE(near(e.fetch(), e.h, kUlp, kPointwise)) << "exp";
  EXPECT_TRUE(near(s.fetch(), s.h, 0, 0)) << "scale";
}

struct BroadcastCase {
  std::vector<int64_t> lhs, rhs;
};
void PrintTo(const BroadcastCase &c, std::ostream *os) {
  auto shape = [&](const std::vector<int64_t> &v) {
    *os << "(";
    for (size_t i = 0; i < v.size(); ++i)
      *os << (i ? "," : "") << v[i];
    *os << ")";
  };
  shape(c.lhs);
  *os << " with ";
  shape(c.rhs);
}

class BroadcastTest : public CudaKernelsTest,
                      public ::testing::WithParamInterface<BroadcastCase> {};

TEST_P(BroadcastTest, AddAndMul) {
  const BroadcastCase c = GetParam();
  Broadcast bc{};
  ASSERT_TRUE(cpu::make_broadcast(bc, c.lhs.data(), int(c.lhs.size()),
                                  c.rhs.data(), int(c.rhs.size())));
  int64_t n = 1, na = 1, nb = 1;
  for (int d = 0; d < bc.rank; ++d)
    n *= bc.shape[d];
  for (int64_t x : c.lhs)
    na *= x;
  for (int64_t x : c.rhs)
    nb *= x;
  Tensor a = Tensor::random(na, 90), b = Tensor::random(nb, 91);
  Tensor dy = Tensor::random(n, 92);
  for (int mul = 0; mul < 2; ++mul) {
    Tensor y = Tensor::output(n);
    Tensor da = Tensor::grad(na, 93), db = Tensor::grad(nb, 94);
    if (mul) {
      k_->mul_forward(y.dev(), a.dev(), b.dev(), bc);
      k_->mul_backward(da.dev(), db.dev(), dy.dev(), a.dev(), b.dev(), bc);
      cpu_.mul_forward(y.host(), a.host(), b.host(), bc);
      cpu_.mul_backward(da.host(), db.host(), dy.host(), a.host(), b.host(),
                        bc);
    } else {
      k_->add_forward(y.dev(), a.dev(), b.dev(), bc);
      k_->add_backward(da.dev(), db.dev(), dy.dev(), bc);
      cpu_.add_forward(y.host(), a.host(), b.host(), bc);
      cpu_.add_backward(da.host(), db.host(), dy.host(), bc);
    }
    sync();
    EXPECT_TRUE(near(y.fetch(), y.h, kUlp, kPointwise)) << "mul " << mul;
    EXPECT_TRUE(near(da.fetch(), da.h, kUlp, kSums)) << "da, mul " << mul;
    EXPECT_TRUE(near(db.fetch(), db.h, kUlp, kSums)) << "db, mul " << mul;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BroadcastTest,
    ::testing::Values(BroadcastCase{{4, 5, 7}, {4, 5, 7}}, // same shape
                      BroadcastCase{{6, 33}, {33}},        // rows + vector
                      BroadcastCase{{3, 1, 7}, {1, 5, 1}}, // both broadcast
                      BroadcastCase{{1}, {2, 3, 4}},       // scalar
                      BroadcastCase{{700, 3}, {700, 1}})); // long reduction

TEST_F(CudaKernelsTest, Embeddings) {
  const int64_t N = 300, V = 50, D = 40;
  std::vector<int32_t> ids(N);
  std::mt19937 gen(100);
  for (int32_t &id : ids)
    id = int32_t(gen() % 7 == 0 ? 3 : gen() % V); // id 3 repeats often
  Tensor t = Tensor::ids(ids), table = Tensor::random(V * D, 101);
  Tensor y = Tensor::output(N * D);
  k_->embed_forward(y.dev(), t.dev_ids(), table.dev(), N, V, D);
  cpu_.embed_forward(y.host(), ids.data(), table.host(), N, V, D);
  Tensor dy = Tensor::random(N * D, 102), dtable = Tensor::f32(V * D, 103);
  k_->embed_backward(dtable.dev_f32(), dy.dev(), t.dev_ids(), N, V, D);
  cpu_.embed_backward(dtable.host(), dy.host(), ids.data(), N, V, D);
  const int64_t S = 7, P = 20;
  Tensor pos = Tensor::random(P * D, 104), py = Tensor::output(S * D);
  Tensor pdy = Tensor::random(S * D, 105), dpos = Tensor::f32(P * D, 106);
  k_->position_embed_forward(py.dev(), pos.dev(), S, D, 5);
  k_->position_embed_backward(dpos.dev_f32(), pdy.dev(), S, D, 5);
  cpu_.position_embed_forward(py.host(), pos.host(), S, D, 5);
  cpu_.position_embed_backward(dpos.host(), pdy.host(), S, D, 5);
  sync();
  EXPECT_TRUE(near(y.fetch(), y.h, 0, 0)) << "embed";
  EXPECT_TRUE(near(dtable.fetch(), dtable.h, 1e-5, 1e-6)) << "dtable";
  EXPECT_TRUE(near(py.fetch(), py.h, 0, 0)) << "position";
  EXPECT_TRUE(near(dpos.fetch(), dpos.h, 1e-6, 0)) << "dposition";
}

TEST_F(CudaKernelsTest, EmbeddingOfPoisonedIdsIsNaN) {
  const int64_t N = 4, V = 10, D = 8;
  std::vector<int32_t> ids = {1, -1, 9, 10};
  Tensor t = Tensor::ids(ids), table = Tensor::random(V * D, 110);
  Tensor y = Tensor::output(N * D);
  k_->embed_forward(y.dev(), t.dev_ids(), table.dev(), N, V, D);
  Tensor dy = Tensor::random(N * D, 111), dtable = Tensor::f32(V * D, 112);
  k_->embed_backward(dtable.dev_f32(), dy.dev(), t.dev_ids(), N, V, D);
  cpu_.embed_forward(y.host(), ids.data(), table.host(), N, V, D);
  cpu_.embed_backward(dtable.host(), dy.host(), ids.data(), N, V, D);
  sync();
  EXPECT_TRUE(near(y.fetch(), y.h, 0, 0));
  EXPECT_TRUE(near(dtable.fetch(), dtable.h, 1e-6, 0));
}

TEST_F(CudaKernelsTest, CrossEntropy) {
  const int64_t N = 19, V = 300;
  std::vector<int32_t> targets(N);
  for (int64_t n = 0; n < N; ++n)
    targets[n] = int32_t((n * 37) % V);
  Tensor t = Tensor::ids(targets),
         logits = Tensor::random(N * V, 120, -8.f, 8.f);
  Tensor loss = Tensor::f32(1, 121);
  k_->cross_entropy_forward(loss.dev_f32(), logits.dev(), t.dev_ids(), N, V, N,
                            false);
  cpu_.cross_entropy_forward(loss.host(), logits.host(), targets.data(), N, V,
                             N, false);
  // The same mean from row chunks (11 + 8 rows), added up on the device.
  const int64_t first = 11;
  Tensor chunked = Tensor::f32(1, 126);
  k_->cross_entropy_forward(chunked.dev_f32(), logits.dev(), t.dev_ids(), first,
                            V, N, false);
  k_->cross_entropy_forward(chunked.dev_f32(), k_->at(logits.dev(), first * V),
                            t.dev_ids() + first, N - first, V, N, true);
  // Added into random gradients, or written over NaN.
  Tensor dl = Tensor::grad(N * V, 122), wl = Tensor::output(N * V);
  const float dloss = 1.f / float(N);
  for (const bool accumulate : {true, false}) {
    Tensor &d = accumulate ? dl : wl;
    k_->cross_entropy_backward(d.dev(), logits.dev(), t.dev_ids(), N, V, dloss,
                               accumulate);
    cpu_.cross_entropy_backward(d.host(), logits.host(), targets.data(), N, V,
                                dloss, accumulate);
  }
  sync();
  EXPECT_TRUE(near(loss.fetch(), loss.h, 1e-5, 0)) << "loss";
  EXPECT_TRUE(near(chunked.fetch(), loss.h, 1e-5, 0)) << "loss from chunks";
  EXPECT_TRUE(near(dl.fetch(), dl.h, kUlp, kPointwise)) << "dlogits";
  EXPECT_TRUE(near(wl.fetch(), wl.h, kUlp, kPointwise)) << "dlogits written";

  std::vector<int32_t> bad = {0, -1, 5};
  Tensor tb = Tensor::ids(bad), lb = Tensor::random(3 * V, 123);
  Tensor lossb = Tensor::f32(1, 124), dlb = Tensor::grad(3 * V, 125);
  k_->cross_entropy_forward(lossb.dev_f32(), lb.dev(), tb.dev_ids(), 3, V, 3,
                            false);
  k_->cross_entropy_backward(dlb.dev(), lb.dev(), tb.dev_ids(), 3, V, 0.5f,
                             true);
  sync();
  EXPECT_TRUE(std::isnan(lossb.fetch()[0]));
  const std::vector<float> g = dlb.fetch();
  EXPECT_TRUE(std::isnan(g[V + 7]));
  EXPECT_FALSE(std::isnan(g[7]));
}

// The head's vocabulary in three uneven pieces (an online log-sum-exp over
// them), after an empty one that leaves the max at -inf (merging -inf with
// -inf must not make NaN); the stats compare like the loss: m and t are
// copies, s an f32 sum.
TEST_F(CudaKernelsTest, CrossEntropyPieces) {
  const int64_t N = 19, V = 300, P = 4;
  const int64_t v0[] = {0, 0, 97, 247}, Vp[] = {0, 97, 150, 53};
  std::vector<int32_t> targets(N);
  for (int64_t n = 0; n < N; ++n)
    targets[n] = int32_t((n * 37) % V);
  Tensor t = Tensor::ids(targets);
  std::vector<Tensor> logits;
  std::vector<float> whole(N * V);
  for (int p = 0; p < P; ++p) {
    // Piece p's logits lie in [-8 + 4p, 8 + 4p]: the running max moves.
    logits.push_back(
        Tensor::random(N * Vp[p], 150 + p, -8.f + 4 * p, 8.f + 4 * p));
    for (int64_t n = 0; n < N; ++n)
      std::copy(logits[p].h.begin() + n * Vp[p],
                logits[p].h.begin() + (n + 1) * Vp[p],
                whole.begin() + n * V + v0[p]);
  }
  Tensor stats = Tensor::f32(3 * N, 153); // garbage: `first` resets it
  for (int p = 0; p < P; ++p) {
    k_->cross_entropy_stats(stats.dev_f32(), logits[p].dev(), t.dev_ids(), N,
                            Vp[p], v0[p], V, p == 0);
    cpu_.cross_entropy_stats(stats.host(), logits[p].host(), targets.data(), N,
                             Vp[p], v0[p], V, p == 0);
  }
  Tensor loss = Tensor::f32(1, 154), chunked = Tensor::f32(1, 155);
  k_->cross_entropy_stats_loss(loss.dev_f32(), stats.dev_f32(), N, N, false);
  cpu_.cross_entropy_stats_loss(loss.host(), stats.host(), N, N, false);
  const int64_t first = 11; // rows in chunks, added up on the device
  k_->cross_entropy_stats_loss(chunked.dev_f32(), stats.dev_f32(), first, N,
                               false);
  k_->cross_entropy_stats_loss(chunked.dev_f32(), stats.dev_f32() + 3 * first,
                               N - first, N, true);
  Tensor all = Tensor::of(whole), loss_whole = Tensor::f32(1, 156);
  k_->cross_entropy_forward(loss_whole.dev_f32(), all.dev(), t.dev_ids(), N, V,
                            N, false);
  std::vector<Tensor> dl;
  const float dloss = 1.f / float(N);
  for (int p = 0; p < P; ++p) {
    // The first piece added into random gradients, the others written over
    // NaN.
    const bool accumulate = p == 0;
    dl.push_back(accumulate ? Tensor::grad(N * Vp[p], 157 + p)
                            : Tensor::output(N * Vp[p]));
    k_->cross_entropy_backward_piece(dl[p].dev(), logits[p].dev(), t.dev_ids(),
                                     stats.dev_f32(), N, Vp[p], v0[p], dloss,
                                     accumulate);
    cpu_.cross_entropy_backward_piece(dl[p].host(), logits[p].host(),
                                      targets.data(), stats.host(), N, Vp[p],
                                      v0[p], dloss, accumulate);
  }
  sync();
  EXPECT_TRUE(near(stats.fetch(), stats.h, 1e-5, 0)) << "stats";
  EXPECT_TRUE(near(loss.fetch(), loss.h, 1e-5, 0)) << "loss";
  EXPECT_TRUE(near(chunked.fetch(), loss.h, 1e-5, 0)) << "loss from chunks";
  EXPECT_TRUE(near(loss_whole.fetch(), loss.h, 1e-5, 0)) << "whole vocabulary";
  for (int p = 0; p < P; ++p)
    EXPECT_TRUE(near(dl[p].fetch(), dl[p].h, kUlp, kPointwise))
        << "dlogits of piece " << p;
}

TEST_F(CudaKernelsTest, CrossEntropyPiecesOfPoisonedTargetsAreNaN) {
  const int64_t N = 3, V = 300;
  const int64_t v0[] = {0, 120}, Vp[] = {120, 180};
  std::vector<int32_t> targets = {200, -1, int32_t(V)};
  Tensor t = Tensor::ids(targets), stats = Tensor::f32(3 * N, 160);
  std::vector<Tensor> logits;
  for (int p = 0; p < 2; ++p) {
    logits.push_back(Tensor::random(N * Vp[p], 161 + p));
    k_->cross_entropy_stats(stats.dev_f32(), logits[p].dev(), t.dev_ids(), N,
                            Vp[p], v0[p], V, p == 0);
    cpu_.cross_entropy_stats(stats.host(), logits[p].host(), targets.data(), N,
                             Vp[p], v0[p], V, p == 0);
  }
  Tensor loss = Tensor::f32(1, 163), dl = Tensor::grad(N * Vp[1], 164);
  k_->cross_entropy_stats_loss(loss.dev_f32(), stats.dev_f32(), N, N, false);
  k_->cross_entropy_backward_piece(dl.dev(), logits[1].dev(), t.dev_ids(),
                                   stats.dev_f32(), N, Vp[1], v0[1], 0.5f,
                                   true);
  cpu_.cross_entropy_stats_loss(loss.host(), stats.host(), N, N, false);
  cpu_.cross_entropy_backward_piece(dl.host(), logits[1].host(), targets.data(),
                                    stats.host(), N, Vp[1], v0[1], 0.5f, true);
  sync();
  EXPECT_TRUE(std::isnan(loss.fetch()[0]));
  EXPECT_TRUE(std::isnan(loss.h[0]));
  EXPECT_TRUE(near(stats.fetch(), stats.h, 1e-5, 0)) << "stats";
  EXPECT_TRUE(near(dl.fetch(), dl.h, kUlp, kPointwise)) << "dlogits";
  EXPECT_FALSE(std::isnan(dl.h[7]));
  EXPECT_TRUE(std::isnan(dl.h[Vp[1] + 7]) && std::isnan(dl.h[2 * Vp[1] + 7]));
}

// The table in pieces: every id's row comes from the piece that holds it,
// the rows of other pieces' ids stay as they are (checked after the first
// piece), and a poisoned id's row is NaN. The last piece scales its rows
// and gradients (a scaled embedding's pieces all do; here the scale 1 and
// another are both seen).
TEST_F(CudaKernelsTest, EmbeddingPieces) {
  const int64_t N = 300, V = 50, D = 40;
  const int64_t v0[] = {0, 17, 37}, Vp[] = {17, 20, 13};
  std::vector<int32_t> ids(N);
  std::mt19937 gen(170);
  for (int32_t &id : ids)
    id = int32_t(gen() % 7 == 0 ? 20 : gen() % V); // id 20 repeats often
  ids[5] = -1;
  ids[77] = int32_t(V);
  Tensor t = Tensor::ids(ids), table = Tensor::random(V * D, 171);
  Tensor y = Tensor::random(N * D, 172);
  Tensor dy = Tensor::random(N * D, 173), dtable = Tensor::f32(V * D, 174);
  for (int p = 0; p < 3; ++p) {
    const float scale = p == 2 ? 2.5f : 1.f;
    k_->embed_forward_piece(y.dev(), t.dev_ids(),
                            k_->at(table.dev(), v0[p] * D), N, Vp[p], D, v0[p],
                            V, p == 0, scale);
    cpu_.embed_forward_piece(y.host(), ids.data(), table.host() + v0[p] * D, N,
                             Vp[p], D, v0[p], V, p == 0, scale);
    if (p == 0) {
      sync();
      EXPECT_TRUE(near(y.fetch(), y.h, 0, 0)) << "after the first piece";
    }
    k_->embed_backward_piece(dtable.dev_f32() + v0[p] * D, dy.dev(),
                             t.dev_ids(), N, Vp[p], D, v0[p], scale);
    cpu_.embed_backward_piece(dtable.host() + v0[p] * D, dy.host(), ids.data(),
                              N, Vp[p], D, v0[p], scale);
  }
  sync();
  EXPECT_TRUE(near(y.fetch(), y.h, 0, 0)) << "embed";
  EXPECT_TRUE(std::isnan(y.h[5 * D]) && std::isnan(y.h[77 * D]));
  EXPECT_TRUE(near(dtable.fetch(), dtable.h, 1e-5, 1e-6)) << "dtable";
}

TEST_F(CudaKernelsTest, TransposeAndSlice) {
  struct Case {
    std::vector<int64_t> shape, perm;
  };
  // The last two keep their last dim (a multiple of 8): rows of 8 at a
  // time, a head's values when heads and positions swap.
  for (const Case &c :
       {Case{{2, 5, 3, 4}, {0, 2, 1, 3}}, Case{{3, 4, 5}, {2, 0, 1}},
        Case{{6, 7}, {1, 0}}, Case{{2, 3, 1, 4, 2, 3}, {5, 3, 1, 0, 4, 2}},
        Case{{2, 5, 3, 16}, {0, 2, 1, 3}}, Case{{3, 7, 24}, {1, 0, 2}}}) {
    int64_t n = 1;
    for (int64_t x : c.shape)
      n *= x;
    const int rank = int(c.shape.size());
    Tensor x = Tensor::random(n, 130), y = Tensor::output(n);
    Tensor dx = Tensor::grad(n, 131);
    k_->transpose_forward(y.dev(), x.dev(), c.shape.data(), c.perm.data(),
                          rank);
    k_->transpose_backward(dx.dev(), x.dev(), c.shape.data(), c.perm.data(),
                           rank);
    cpu_.transpose_forward(y.host(), x.host(), c.shape.data(), c.perm.data(),
                           rank);
    cpu_.transpose_backward(dx.host(), x.host(), c.shape.data(), c.perm.data(),
                            rank);
    sync();
    EXPECT_TRUE(near(y.fetch(), y.h, 0, 0)) << "rank " << rank;
    EXPECT_TRUE(near(dx.fetch(), dx.h, kUlp, kPointwise)) << "rank " << rank;
  }
  const int64_t outer = 3, dim = 10, inner = 4, start = 2, cnt = 5;
  Tensor x = Tensor::random(outer * dim * inner, 132);
  Tensor y = Tensor::output(outer * cnt * inner);
  Tensor dx = Tensor::grad(outer * dim * inner, 133);
  Tensor dy = Tensor::random(outer * cnt * inner, 134);
  k_->slice_forward(y.dev(), x.dev(), outer, dim, inner, start, cnt);
  k_->slice_backward(dx.dev(), dy.dev(), outer, dim, inner, start, cnt);
  cpu_.slice_forward(y.host(), x.host(), outer, dim, inner, start, cnt);
  cpu_.slice_backward(dx.host(), dy.host(), outer, dim, inner, start, cnt);
  sync();
  EXPECT_TRUE(near(y.fetch(), y.h, 0, 0));
  EXPECT_TRUE(near(dx.fetch(), dx.h, kUlp, kPointwise));
}

// cuDNN's deterministic backward gives the same bits twice; its other need
// not (no test asks it to).
TEST_F(CudaKernelsTest, CudnnBackwardIsDeterministic) {
#ifdef MEGATRAIN_CUDA_EMULATION
  GTEST_SKIP() << "cuDNN runs on a GPU only";
#else
  if (std::string why; !mtrt::cuda::cudnn_loadable(&why))
    GTEST_SKIP() << why;
  k_->set_attention_kernels(AttentionKernels::Cudnn);
  // S whole tiles of 128: every cuDNN is given its backward.
  const int64_t B = 2, H = 4, Hkv = 2, S = 256, D = 64;
  // Else the tensor-core backward runs, deterministic too.
  ASSERT_TRUE(k_->cudnn_has_backward({B, H, Hkv, S, D},
                                     mtrt::cuda::CudnnBackward::Deterministic));
  Tensor q = Tensor::random(B * H * S * D, 150),
         k = Tensor::random(B * Hkv * S * D, 151);
  Tensor v = Tensor::random(B * Hkv * S * D, 152),
         dy = Tensor::random(B * H * S * D, 153),
         y = Tensor::output(B * H * S * D);
  Tensor delta = Tensor::f32(B * H * S, 154), lse = Tensor::f32(B * H * S, 155);
  k_->attention_forward(y.dev(), lse.dev_f32(), q.dev(), k.dev(), v.dev(), B, H,
                        Hkv, S, D, 0.125f, {}, 0.f, nullptr, nullptr, {});
  k_->attention_delta(delta.dev_f32(), dy.dev(), y.dev(), B, H, S, D, {});
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; ++run) {
    Tensor dq = Tensor::zeros(B * H * S * D),
           dk = Tensor::zeros(B * Hkv * S * D),
           dv = Tensor::zeros(B * Hkv * S * D);
    k_->attention_backward(dq.dev(), dk.dev(), dv.dev(), dy.dev(), q.dev(),
                           k.dev(), v.dev(), y.dev(), delta.dev_f32(),
                           lse.dev_f32(), B, H, Hkv, S, D, 0.125f, {}, 0.f,
                           nullptr, nullptr, nullptr, false, {});
    sync();
    std::vector<float> all = dq.fetch();
    for (const Tensor *x : {&dk, &dv}) {
      std::vector<float> f = x->fetch();
      all.insert(all.end(), f.begin(), f.end());
    }
    runs.push_back(all);
  }
  EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[1].data(),
                           runs[0].size() * sizeof(float)));
#endif
}

// Two runs of the reductions give the same bits (no atomics anywhere).
TEST_F(CudaKernelsTest, BackwardIsDeterministic) {
  const int64_t B = 1, H = 4, Hkv = 2, S = 50, D = 32, N = 200, V = 30;
  Tensor q = Tensor::random(B * H * S * D, 140),
         k = Tensor::random(B * Hkv * S * D, 141);
  Tensor v = Tensor::random(B * Hkv * S * D, 142),
         dy = Tensor::random(B * H * S * D, 143),
         y = Tensor::output(B * H * S * D);
  Tensor delta = Tensor::f32(B * H * S, 147),
         sinks = Tensor::random(H, 148, -1.f, 2.f),
         lse = Tensor::f32(B * H * S, 146);
  k_->attention_forward(y.dev(), lse.dev_f32(), q.dev(), k.dev(), v.dev(), B, H,
                        Hkv, S, D, 0.2f, {}, 0.f, nullptr, sinks.dev(), {});
  std::vector<int32_t> ids(N);
  for (int64_t n = 0; n < N; ++n)
    ids[n] = int32_t(n % 3);
  Tensor t = Tensor::ids(ids), edy = Tensor::random(N * D, 144);
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; ++run) {
    Tensor dq = Tensor::zeros(B * H * S * D),
           dk = Tensor::zeros(B * Hkv * S * D);
    Tensor dv = Tensor::zeros(B * Hkv * S * D), dt = Tensor::f32(V * D, 145),
           dsinks = Tensor::f32(H, 149);
    k_->attention_delta(delta.dev_f32(), dy.dev(), y.dev(), B, H, S, D, {});
    k_->attention_backward(dq.dev(), dk.dev(), dv.dev(), dy.dev(), q.dev(),
                           k.dev(), v.dev(), y.dev(), delta.dev_f32(),
                           lse.dev_f32(), B, H, Hkv, S, D, 0.2f, {}, 0.f,
                           nullptr, sinks.dev(), dsinks.dev_f32(), false, {});
    k_->embed_backward(dt.dev_f32(), edy.dev(), t.dev_ids(), N, V, D);
    sync();
    std::vector<float> all = dq.fetch();
    for (const Tensor *x : {&delta, &dk, &dv, &dt, &dsinks}) {
      std::vector<float> f = x->fetch();
      all.insert(all.end(), f.begin(), f.end());
    }
    runs.push_back(all);
  }
  EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[1].data(),
                           runs[0].size() * sizeof(float)));
}

} // namespace
