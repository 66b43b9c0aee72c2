//===- CudnnAttention.cpp - causal attention on cuDNN's kernels -----------===//
//
// Two graphs of cuDNN's backend API, each a pattern cuDNN recognizes as one
// of its fused flash-attention kernels (it runs no part of them alone),
// spelled as cuDNN 9's own frontend spells them. The forward:
//
//   S0 = Q·Kᵀ            matmul, f32         Q (B,H,S,D), Kᵀ (B,Hkv,D,S)
//                                            (strides: either layout)
//   S1 = S0 · scale      scale by value
//   S1 = c·tanh(S1 / c)  a soft cap c (by value): DIV, TANH_FWD, MUL
//   S1 += m_h·(col − row) ALiBi, slopes m (1,H,1,1) f32: GEN_INDEX ×2,
//                        SUB (int32), MUL, ADD
//   S2 = row ≥ col ? S1 : −∞                 GEN_INDEX ×2 (int32), CMP_GE,
//                                            select (before cuDNN 9.10 the
//                                            lowest float instead)
//   S2 = col + W > row ? S2 : −∞             a sliding window W shorter than
//                                            the sequence: GEN_INDEX ×2, ADD
//                                            W (f32), CMP_GT, select
//   S2 = col ≥ row − row mod C ? S2 : −∞     chunks of C shorter than the
//                                            sequence: GEN_INDEX ×2, MOD C
//                                            and SUB in int32, CMP_GE, select
//   M = max_j S2, E = exp(S2 − M), Z = Σ_j E
//                        with sinks (1,H,1,1) f32: M = max(M, sink),
//                        Z += exp(sink − M)
//   stats = M + log Z    (B,H,S,1) f32, each row's log-sum-exp
//   P = E / Z            bf16, virtual
//   Y = P·V              matmul              V (B,Hkv,S,D), Y (B,H,S,D)
//
// The backward, from the forward's Y and stats (the caller's y and lse):
//
//   δ = Σ_d dY ∘ Y       (B,H,S,1) f32, bound to memory
//   P = exp(mask(S1 − stats))  S1 as the forward's
//   dV = Pᵀ·dY           Pᵀ a reshape of P; summed over a KV head's group
//   dS = scale · P ∘ (dY·Vᵀ − δ)
//                        with a soft cap, P ∘ (dY·Vᵀ − δ) times
//                        1 − tanh²(S1 / c) first: MUL c, TANH_BWD, DIV c
//   dK = dSᵀ·Q           summed over the group, as dV
//   dQ = dS·K            written as it is (the deterministic backward:
//                        cuDNN holds dS in its workspace for it), or into
//                        an f32 sum bound to memory (zeroed first), then
//                        rounded into dQ (the other)
//
// The backward's graph is the same with sinks as without: they are in the
// stats it is given. Every other intermediate is virtual: cuDNN keeps it on
// chip. Kᵀ and Vᵀ
// are K and V read with their last two strides swapped; key/value heads
// fewer than query heads broadcast over each group.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudnnAttention.h"
#include "runtime/exec/Error.h"

#if __has_include(<cudnn_graph.h>)
#define MT_HAVE_CUDNN 1
#include <cudnn_graph.h>
#include <dlfcn.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>
#endif

namespace mtrt::cuda {

#ifdef MT_HAVE_CUDNN

namespace {

/// The cuDNN entry points this file uses, from the shared library.
struct CudnnApi {
// clang-format off
#define MT_CUDNN_FUNCTIONS(X)                                                  \
  X(cudnnGetVersion)                                                           \
  X(cudnnGetErrorString)                                                       \
  X(cudnnGetLastErrorString)                                                   \
  X(cudnnCreate)                                                               \
  X(cudnnDestroy)                                                              \
  X(cudnnSetStream)                                                            \
  X(cudnnBackendCreateDescriptor)                                              \
  X(cudnnBackendDestroyDescriptor)                                             \
  X(cudnnBackendSetAttribute)                                                  \
  X(cudnnBackendGetAttribute)                                                  \
  X(cudnnBackendFinalize)                                                      \
  X(cudnnBackendExecute)
// clang-format on
#define MT_CUDNN_MEMBER(f) decltype(&::f) f = nullptr;
  MT_CUDNN_FUNCTIONS(MT_CUDNN_MEMBER)
#undef MT_CUDNN_MEMBER
};

#define MT_STR2(x) #x
#define MT_STR(x) MT_STR2(x)

/// Loads cuDNN once: $MEGATRAIN_CUDNN where set (that one alone), else
/// from the loader's search path. The major version must be the headers'
/// (the backend API's ABI).
const CudnnApi *load(std::string *why) {
  static CudnnApi api;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> names;
    const char *env = std::getenv("MEGATRAIN_CUDNN");
    if (env && *env)
      names.push_back(env);
    else
      names = {"libcudnn.so." MT_STR(CUDNN_MAJOR), "libcudnn.so"};
    void *lib = nullptr;
    for (const std::string &n : names)
      if ((lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)))
        break;
    if (!lib) {
      const char *e = dlerror();
      error = std::string("cannot load cuDNN (") + names.front() +
              "): " + (e ? e : "not found") +
              (env && *env ? "; MEGATRAIN_CUDNN names it"
                           : "; set MEGATRAIN_CUDNN to its path");
      return;
    }
#define MT_CUDNN_LOAD(f)                                                       \
  api.f = reinterpret_cast<decltype(&::f)>(dlsym(lib, #f));                    \
  if (!api.f && error.empty())                                                 \
    error = "cuDNN has no " #f;
    MT_CUDNN_FUNCTIONS(MT_CUDNN_LOAD)
#undef MT_CUDNN_LOAD
    if (error.empty() && api.cudnnGetVersion() / 10000 != CUDNN_MAJOR)
      error = "the cuDNN loaded is version " +
              std::to_string(api.cudnnGetVersion()) +
              "; this build's headers are of major version " +
              MT_STR(CUDNN_MAJOR);
  });
  if (!error.empty()) {
    if (why)
      *why = error;
    return nullptr;
  }
  return &api;
}

const CudnnApi &api() {
  std::string why;
  const CudnnApi *a = load(&why);
  if (!a)
    fail("cuda: ", why);
  return *a;
}

/// cuDNN's message on its last failure, as " (cuDNN: ...)", or "".
std::string last_word() {
  char detail[1024] = {};
  api().cudnnGetLastErrorString(detail, sizeof detail);
  return *detail ? std::string(" (cuDNN: ") + detail + ")" : "";
}

void check(cudnnStatus_t s, const char *what) {
  if (s != CUDNN_STATUS_SUCCESS)
    fail("cuda: cuDNN ", what, " failed: ", api().cudnnGetErrorString(s),
         last_word());
}

/// One backend descriptor, destroyed with its owner.
class Desc {
public:
  explicit Desc(cudnnBackendDescriptorType_t type) {
    check(api().cudnnBackendCreateDescriptor(type, &d_),
          "creating a descriptor");
  }
  Desc(Desc &&o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Desc &operator=(Desc &&o) noexcept {
    std::swap(d_, o.d_);
    return *this;
  }
  Desc(const Desc &) = delete;
  Desc &operator=(const Desc &) = delete;
  ~Desc() {
    if (d_)
      api().cudnnBackendDestroyDescriptor(d_);
  }
  cudnnBackendDescriptor_t get() const { return d_; }

  Desc &set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
            int64_t count, const void *values) {
    check(api().cudnnBackendSetAttribute(d_, name, type, count, values),
          "setting a descriptor's attribute");
    return *this;
  }
  Desc &set(cudnnBackendAttributeName_t name, const Desc &d) {
    cudnnBackendDescriptor_t raw = d.get();
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
  }
  Desc &set(cudnnBackendAttributeName_t name, cudnnDataType_t t) {
    return set(name, CUDNN_TYPE_DATA_TYPE, 1, &t);
  }
  Desc &set(cudnnBackendAttributeName_t name, int64_t v) {
    return set(name, CUDNN_TYPE_INT64, 1, &v);
  }
  Desc &finalize(const char *what) {
    check(api().cudnnBackendFinalize(d_), what);
    return *this;
  }

private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

using Dims = std::array<int64_t, 4>;

Dims contiguous(Dims d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }
/// The strides of a (B, heads, S, D) tensor as `layout` lays it out:
/// contiguous, or sequence-major (B, S, heads, D).
Dims laid_out(Dims d, HeadLayout layout) {
  if (!layout.seq_major)
    return contiguous(d);
  return {d[2] * d[1] * d[3], d[3], d[1] * d[3], 1};
}
/// The strides of the transpose of the last two dims.
Dims swap_last(Dims strides) {
  std::swap(strides[2], strides[3]);
  return strides;
}

/// The unique ids of the tensors a call binds.
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kY,
  kStats,
  kScale,
  kLowest, // the forward's
  kDy,
  kDq,
  kDk,
  kDv,
  kOne,
  kRowDot,
  kDqSum,   // and the backward's
  kWindow,  // both's, with a sliding window
  kSoftcap, // both's, with a soft cap
  kSink,    // the forward's, with sinks
  kSlopes,  // both's, with ALiBi
  kChunk    // both's, with chunks
};

/// One graph's tensors and operations, built without a device.
struct Graph {
  std::deque<Desc> tensors; // a deque: ops refer to tensors as they grow
  std::vector<Desc> ops;
  int64_t next_virtual = 100;

  const Desc &tensor(int64_t uid, Dims dims, Dims strides, cudnnDataType_t type,
                     bool is_virtual, bool by_value = false) {
    Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, type)
        .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data())
        .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data())
        .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
        .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, int64_t(16));
    const bool yes = true;
    if (is_virtual)
      t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
    if (by_value)
      t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
    t.finalize("finalizing a tensor descriptor");
    tensors.push_back(std::move(t));
    return tensors.back();
  }
  /// A bound tensor of the inputs' type (bf16).
  const Desc &io(int64_t uid, Dims dims, Dims strides) {
    return tensor(uid, dims, strides, CUDNN_DATA_BFLOAT16, false);
  }
  /// A scalar passed by value (a float, unless `type` says otherwise).
  const Desc &scalar(int64_t uid, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    const Dims one{1, 1, 1, 1};
    return tensor(uid, one, one, type, false, /*by_value=*/true);
  }
  const Desc &virtual_like(Dims dims, Dims strides,
                           cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    return tensor(next_virtual++, dims, strides, type, true);
  }
  const Desc &virtual_like(Dims dims, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    return virtual_like(dims, contiguous(dims), type);
  }

  void matmul(const Desc &a, const Desc &b, const Desc &c) {
    Desc m(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    m.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT)
        .finalize("finalizing a matmul descriptor");
    Desc op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, a)
        .set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, b)
        .set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, c)
        .set(CUDNN_ATTR_OPERATION_MATMUL_DESC, m)
        .finalize("finalizing a matmul");
    ops.push_back(std::move(op));
  }

  /// y = mode(x[, b[, t]]); GEN_INDEX takes the axis it counts along.
  void pointwise(cudnnPointwiseMode_t mode, const Desc &x, const Desc *b,
                 const Desc *t, const Desc &y,
                 cudnnDataType_t precision = CUDNN_DATA_FLOAT,
                 int64_t axis = -1) {
    Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
        .set(CUDNN_ATTR_POINTWISE_MATH_PREC, precision);
    if (axis >= 0)
      pw.set(CUDNN_ATTR_POINTWISE_AXIS, axis);
    pw.finalize("finalizing a pointwise descriptor");
    Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b)
      op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
    if (t)
      op.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, *t);
    // The frontend sets both alphas, each 1 (cuDNN's default too).
    const float one = 1.f;
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one)
        .finalize("finalizing a pointwise operation");
    ops.push_back(std::move(op));
  }
  /// dx = mode(dy, x), a backward activation (TANH_BWD: dy · (1 − tanh²x)).
  void activation_backward(cudnnPointwiseMode_t mode, const Desc &dy,
                           const Desc &x, const Desc &dx) {
    Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
        .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_DATA_FLOAT)
        .finalize("finalizing a pointwise descriptor");
    const float one = 1.f;
    Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, dy)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, dx)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one)
        .finalize("finalizing a pointwise operation");
    ops.push_back(std::move(op));
  }
  /// A new virtual tensor shaped as `dims`: mode(x, b).
  const Desc &binary(cudnnPointwiseMode_t mode, const Desc &x, const Desc &b,
                     Dims dims) {
    const Desc &y = virtual_like(dims);
    pointwise(mode, x, &b, nullptr, y);
    return y;
  }

  void reduce(cudnnReduceTensorOp_t mode, const Desc &x, const Desc &y) {
    Desc r(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1,
          &mode)
        .set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT)
        .finalize("finalizing a reduction descriptor");
    Desc op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x)
        .set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y)
        .set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r)
        .finalize("finalizing a reduction");
    ops.push_back(std::move(op));
  }

  /// y: the same elements as x under other dims and strides.
  void reshape(const Desc &x, const Desc &y) {
    Desc op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x)
        .set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y)
        .finalize("finalizing a reshape");
    ops.push_back(std::move(op));
  }

  /// Each score's row (query) and column (key) index, int32: GEN_INDEX
  /// along axes 2 and 3. Each mask takes indices of its own, as cuDNN's
  /// frontend spells masks before cuDNN 9.21, which has an operation of its
  /// own for them.
  std::pair<const Desc *, const Desc *> indices(const Desc &scores, Dims dims) {
    const Desc &row = virtual_like(dims, CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, nullptr, nullptr, row,
              CUDNN_DATA_FLOAT, 2);
    const Desc &col = virtual_like(dims, CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, nullptr, nullptr, col,
              CUDNN_DATA_FLOAT, 3);
    return {&row, &col};
  }
  /// The scores where `keep`, else `lowest` (masked_score()).
  const Desc &select(const Desc &scores, Dims dims, const Desc &lowest,
                     const Desc &keep) {
    const Desc &masked = virtual_like(dims);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, scores, &lowest, &keep, masked);
    return masked;
  }

  /// Scores (B, H, S, S) with every key after its query masked: row ≥ col.
  const Desc &causal(const Desc &scores, Dims dims, const Desc &lowest) {
    const auto [row, col] = indices(scores, dims);
    const Desc &seen = virtual_like(dims, CUDNN_DATA_BOOLEAN);
    pointwise(CUDNN_POINTWISE_CMP_GE, *row, col, nullptr, seen,
              CUDNN_DATA_BOOLEAN);
    return select(scores, dims, lowest, seen);
  }

  /// Scores masked again to the keys of a sliding window, col + W > row (W
  /// a float by value, added along the keys' axis), as the frontend spells
  /// a left bound.
  const Desc &window(const Desc &scores, Dims dims, const Desc &lowest,
                     const Desc &w) {
    const auto [row, col] = indices(scores, dims);
    const Desc &shifted = virtual_like(dims);
    pointwise(CUDNN_POINTWISE_ADD, *col, &w, nullptr, shifted, CUDNN_DATA_FLOAT,
              3);
    const Desc &seen = virtual_like(dims, CUDNN_DATA_BOOLEAN);
    pointwise(CUDNN_POINTWISE_CMP_GT, shifted, row, nullptr, seen,
              CUDNN_DATA_BOOLEAN);
    return select(scores, dims, lowest, seen);
  }
  /// Gemma 2's soft cap on the scaled scores, cap · tanh(s / cap), as
  /// cuDNN's frontend spells its Softcap score modifier (cap a float by
  /// value); `*before_tanh` is s / cap, which the backward's TANH_BWD takes.
  const Desc &softcap(const Desc &scores, Dims dims, const Desc &cap,
                      const Desc **before_tanh) {
    const Desc &x = binary(CUDNN_POINTWISE_DIV, scores, cap, dims);
    const Desc &t = virtual_like(dims);
    pointwise(CUDNN_POINTWISE_TANH_FWD, x, nullptr, nullptr, t);
    *before_tanh = &x;
    return binary(CUDNN_POINTWISE_MUL, t, cap, dims);
  }
  /// The soft cap's backward, dS · (1 − tanh²(s / cap)), as the frontend
  /// spells it: (dS · cap) through TANH_BWD, then over cap.
  const Desc &softcap_backward(const Desc &ds, Dims dims, const Desc &cap,
                               const Desc &before_tanh) {
    const Desc &scaled = binary(CUDNN_POINTWISE_MUL, ds, cap, dims);
    const Desc &dx = virtual_like(dims);
    activation_backward(CUDNN_POINTWISE_TANH_BWD, scaled, before_tanh, dx);
    return binary(CUDNN_POINTWISE_DIV, dx, cap, dims);
  }

  /// ALiBi's bias added to the scores: slope_h · (col − row), the slopes
  /// (1, H, 1, 1) f32, as cuDNN's frontend spells its alibi mask.
  const Desc &alibi(const Desc &scores, Dims dims, const Desc &slopes) {
    const auto [row, col] = indices(scores, dims);
    const Desc &distance = virtual_like(dims, CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_SUB, *col, row, nullptr, distance,
              CUDNN_DATA_INT32);
    const Desc &bias = binary(CUDNN_POINTWISE_MUL, distance, slopes, dims);
    return binary(CUDNN_POINTWISE_ADD, scores, bias, dims);
  }
  /// The scaled scores as the form of `d` has them: soft-capped (its
  /// `*cap` and `*before_tanh` set for the backward), then ALiBi's bias.
  const Desc &score_form(const Desc &scaled, Dims dims, const AttentionDims &d,
                         const Desc **cap, const Desc **before_tanh) {
    const Desc *out = &scaled;
    if (d.softcap > 0) {
      *cap = &scalar(kSoftcap);
      out = &softcap(*out, dims, **cap, before_tanh);
    }
    if (d.alibi) {
      const Dims heads{1, dims[1], 1, 1};
      const Desc &slopes =
          tensor(kSlopes, heads, contiguous(heads), CUDNN_DATA_FLOAT, false);
      out = &alibi(*out, dims, slopes);
    }
    return *out;
  }

  /// The causal mask, and the window's where `d` has one.
  /// Scores masked again to the keys of their query's chunk of C: col ≥
  /// row − row mod C, in int32 (C by value; cuDNN has no MOD in f32 here).
  const Desc &chunks(const Desc &scores, Dims dims, const Desc &lowest,
                     const Desc &c) {
    const auto [row, col] = indices(scores, dims);
    const Desc &offset = virtual_like(dims, CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_MOD, *row, &c, nullptr, offset, CUDNN_DATA_INT32);
    const Desc &start = virtual_like(dims, CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_SUB, *row, &offset, nullptr, start,
              CUDNN_DATA_INT32);
    const Desc &seen = virtual_like(dims, CUDNN_DATA_BOOLEAN);
    pointwise(CUDNN_POINTWISE_CMP_GE, *col, &start, nullptr, seen,
              CUDNN_DATA_BOOLEAN);
    return select(scores, dims, lowest, seen);
  }
  /// The causal mask, and the window's and the chunks' where `d` has them.
  const Desc &masks(const Desc &scores, Dims dims, const Desc &lowest,
                    const AttentionDims &d) {
    const Desc *out = &causal(scores, dims, lowest);
    if (d.window > 0)
      out = &window(*out, dims, lowest, scalar(kWindow));
    if (d.chunk > 0)
      out = &chunks(*out, dims, lowest, scalar(kChunk, CUDNN_DATA_INT32));
    return *out;
  }
};

void check_dims(const AttentionDims &d) {
  // cuDNN divides by these unchecked (a zero is a SIGFPE).
  if (d.B <= 0 || d.H <= 0 || d.Hkv <= 0 || d.S <= 0 || d.D <= 0 ||
      d.H % d.Hkv != 0 || d.window < 0 || !(d.softcap >= 0) || d.chunk < 0 ||
      d.chunk > INT32_MAX)
    fail("cuda: no attention of B=", d.B, " H=", d.H, " Hkv=", d.Hkv,
         " S=", d.S, " D=", d.D, " window=", d.window, " softcap=", d.softcap,
         " chunk=", d.chunk,
         " for cuDNN: every dim positive, Hkv dividing H, no negative window, "
         "soft cap or chunk, chunks within int32");
}

/// The forward (the file comment).
Graph forward_graph(const AttentionDims &d) {
  check_dims(d);
  const int64_t B = d.B, H = d.H, G = d.Hkv, S = d.S, D = d.D;
  Graph g;
  const Dims qDims{B, H, S, D}, kvDims{B, G, S, D};
  const Dims qStrides = laid_out(qDims, d.layout),
             kvStrides = laid_out(kvDims, d.layout);
  const Desc &q = g.io(kQ, qDims, qStrides);
  const Desc &kt = g.io(kK, {B, G, D, S}, swap_last(kvStrides));
  const Desc &v = g.io(kV, kvDims, kvStrides);
  const Desc &y = g.io(kY, qDims, qStrides);
  const Dims rows{B, H, S, 1};
  const Desc &stats =
      g.tensor(kStats, rows, contiguous(rows), CUDNN_DATA_FLOAT, false);
  const Desc &scale = g.scalar(kScale), &lowest = g.scalar(kLowest);

  const Dims sDims{B, H, S, S};
  const Desc &s0 = g.virtual_like(sDims);
  g.matmul(q, kt, s0);
  const Desc *cap = nullptr, *before_tanh = nullptr;
  const Desc &s1 = g.score_form(g.binary(CUDNN_POINTWISE_MUL, s0, scale, sDims),
                                sDims, d, &cap, &before_tanh);
  const Desc &s2 = g.masks(s1, sDims, lowest, d);
  // A head's sink is one more logit in each row's softmax, weighing no
  // value: in the max and the sum, as the frontend's softmax takes it.
  const Desc *sink = nullptr;
  if (d.sinks)
    sink =
        &g.tensor(kSink, {1, H, 1, 1}, {H, 1, 1, 1}, CUDNN_DATA_FLOAT, false);
  const Desc *m = &g.virtual_like(rows);
  g.reduce(CUDNN_REDUCE_TENSOR_MAX, s2, *m);
  if (sink)
    m = &g.binary(CUDNN_POINTWISE_MAX, *m, *sink, rows);
  const Desc &shifted = g.binary(CUDNN_POINTWISE_SUB, s2, *m, sDims);
  const Desc &e = g.virtual_like(sDims);
  g.pointwise(CUDNN_POINTWISE_EXP, shifted, nullptr, nullptr, e);
  const Desc *z = &g.virtual_like(rows);
  g.reduce(CUDNN_REDUCE_TENSOR_ADD, e, *z);
  if (sink) {
    const Desc &sink_shifted = g.binary(CUDNN_POINTWISE_SUB, *sink, *m, rows);
    const Desc &sink_e = g.virtual_like(rows);
    g.pointwise(CUDNN_POINTWISE_EXP, sink_shifted, nullptr, nullptr, sink_e);
    z = &g.binary(CUDNN_POINTWISE_ADD, *z, sink_e, rows);
  }
  const Desc &logz = g.virtual_like(rows);
  g.pointwise(CUDNN_POINTWISE_LOG, *z, nullptr, nullptr, logz);
  g.pointwise(CUDNN_POINTWISE_ADD, *m, &logz, nullptr, stats);
  // P·V takes P in the inputs' type.
  const Desc &p = g.virtual_like(sDims, CUDNN_DATA_BFLOAT16);
  g.pointwise(CUDNN_POINTWISE_DIV, e, z, nullptr, p);
  g.matmul(p, v, y);
  return g;
}

/// The backward (the file comment): dQ, dK and dV (written, not added) of
/// the forward's output Y and log-sum-exp `stats`, dQ as `how` says (the
/// nondeterministic kernel adds it up in f32: kDqSum, zeroed before each
/// call). cuDNN takes each row's dY·Y (kRowDot) from memory.
Graph backward_graph(const AttentionDims &d, CudnnBackward how) {
  check_dims(d);
  const int64_t B = d.B, H = d.H, G = d.Hkv, S = d.S, D = d.D;
  Graph g;
  const Dims qDims{B, H, S, D}, kvDims{B, G, S, D}, rows{B, H, S, 1};
  const Dims sDims{B, H, S, S}, tDims{B, H, S, S}; // scores, transposed
  const Dims qStrides = laid_out(qDims, d.layout),
             kvStrides = laid_out(kvDims, d.layout);
  const Desc &q = g.io(kQ, qDims, qStrides);
  const Desc &kt = g.io(kK, {B, G, D, S}, swap_last(kvStrides));
  const Desc &vt = g.io(kV, {B, G, D, S}, swap_last(kvStrides));
  const Desc &y = g.io(kY, qDims, qStrides);
  const Desc &dy = g.io(kDy, qDims, qStrides);
  const Desc &dq = g.io(kDq, qDims, qStrides);
  const Desc &dk = g.io(kDk, kvDims, kvStrides);
  const Desc &dv = g.io(kDv, kvDims, kvStrides);
  const Desc &stats =
      g.tensor(kStats, rows, contiguous(rows), CUDNN_DATA_FLOAT, false);
  const Desc &rowDot =
      g.tensor(kRowDot, rows, contiguous(rows), CUDNN_DATA_FLOAT, false);
  const Desc &scale = g.scalar(kScale), &lowest = g.scalar(kLowest),
             &one = g.scalar(kOne);

  // δ = Σ_d dY·Y, a row at a time.
  const Desc &dyy =
      g.virtual_like(qDims, {H * S * D, S * D, H * D, 1}); // as cuDNN's own
  g.pointwise(CUDNN_POINTWISE_MUL, dy, &y, nullptr, dyy);
  const Desc &delta = g.virtual_like(rows);
  g.reduce(CUDNN_REDUCE_TENSOR_ADD, dyy, delta);
  g.pointwise(CUDNN_POINTWISE_MUL, delta, &one, nullptr, rowDot);

  // P = exp(mask(scale·Q·Kᵀ − stats)), and dV = Pᵀ·dY.
  const Desc &s0 = g.virtual_like(sDims);
  g.matmul(q, kt, s0);
  const Desc *cap = nullptr, *before_tanh = nullptr;
  const Desc &s1 = g.score_form(g.binary(CUDNN_POINTWISE_MUL, s0, scale, sDims),
                                sDims, d, &cap, &before_tanh);
  const Desc &s2 = g.binary(CUDNN_POINTWISE_SUB, s1, stats, sDims);
  const Desc &s3 = g.masks(s2, sDims, lowest, d);
  const Desc &p = g.virtual_like(sDims);
  g.pointwise(CUDNN_POINTWISE_EXP, s3, nullptr, nullptr, p);
  const Dims transposed{H * S * S, S * S, 1, S};
  const Desc &pt = g.virtual_like(tDims, transposed, CUDNN_DATA_BFLOAT16);
  g.reshape(p, pt);
  // Query heads sharing a key/value head add their parts up.
  auto per_kv_head = [&](const Desc &lhs, const Desc &rhs, const Desc &out) {
    if (H == G)
      return g.matmul(lhs, rhs, out);
    const Desc &full = g.virtual_like(qDims, CUDNN_DATA_BFLOAT16);
    g.matmul(lhs, rhs, full);
    g.reduce(CUDNN_REDUCE_TENSOR_ADD, full, out);
  };
  per_kv_head(pt, dy, dv);

  // dS = scale · P ∘ (dY·Vᵀ − δ); dK = dSᵀ·Q, dQ = dS·K.
  const Desc &dp = g.virtual_like(sDims);
  g.matmul(dy, vt, dp);
  const Desc &centered = g.binary(CUDNN_POINTWISE_SUB, dp, rowDot, sDims);
  const Desc *ds0 = &g.binary(CUDNN_POINTWISE_MUL, centered, p, sDims);
  if (cap)
    ds0 = &g.softcap_backward(*ds0, sDims, *cap, *before_tanh);
  const Desc &ds = g.binary(CUDNN_POINTWISE_MUL, *ds0, scale, sDims);
  const Desc &dst = g.virtual_like(tDims, transposed, CUDNN_DATA_BFLOAT16);
  g.reshape(ds, dst);
  per_kv_head(dst, q, dk);
  const Desc &k = g.virtual_like(kvDims); // Kᵀ read back as K
  g.reshape(kt, k);
  if (how == CudnnBackward::Deterministic) {
    g.matmul(ds, k, dq);
  } else {
    const Desc &dqSum =
        g.tensor(kDqSum, qDims, contiguous(qDims), CUDNN_DATA_FLOAT, false);
    g.matmul(ds, k, dqSum);
    g.pointwise(CUDNN_POINTWISE_IDENTITY, dqSum, nullptr, nullptr, dq);
  }
  return g;
}

/// A graph and the plan cuDNN made of it, or why it made none: `refused`
/// holds cuDNN's word when it has no engine for the graph, or ours when
/// the graph is not given to it (any other failure throws).
struct Plan {
  Graph graph;
  Desc ops{CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR};
  Desc engine{CUDNN_BACKEND_ENGINECFG_DESCRIPTOR}; // kept as long as the plan
  Desc plan{CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR};
  int64_t workspace = 0;
  std::string refused;

  explicit Plan(std::string why) : refused(std::move(why)) {}

  /// The plan for the device of `handle`, or (handle null) for the device
  /// `device` describes, ahead of time.
  Plan(Graph g, cudnnHandle_t handle, const Desc *device = nullptr)
      : graph(std::move(g)) {
    std::vector<cudnnBackendDescriptor_t> raw;
    for (const Desc &op : graph.ops)
      raw.push_back(op.get());
    ops.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
            int64_t(raw.size()), raw.data());
    if (handle)
      ops.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    std::string tried;
    if (api().cudnnBackendFinalize(ops.get()) != CUDNN_STATUS_SUCCESS)
      tried = last_word(); // the graph refused: no engine to look for
    else
      for (cudnnBackendHeurMode_t mode :
           {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK})
        if (choose(mode, handle, device, &tried))
          return;
    // No engine offered, and no word why: cuDNN's log has its reasons.
    refused = tried.empty() ? " (cuDNN offered no engine; "
                              "CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr "
                              "shows why)"
                            : tried;
  }

  /// Takes the first engine configuration the heuristic of `mode` offers
  /// that makes a plan; false if none does, with cuDNN's last word in
  /// `tried`.
  bool choose(cudnnBackendHeurMode_t mode, cudnnHandle_t handle,
              const Desc *device, std::string *tried) {
    Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, ops)
        .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (device)
      heur.set(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, *device);
    if (api().cudnnBackendFinalize(heur.get()) != CUDNN_STATUS_SUCCESS) {
      *tried = last_word();
      return false;
    }
    int64_t count = 0;
    check(api().cudnnBackendGetAttribute(
              heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
              CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
          "counting the heuristic's engines");
    std::vector<Desc> configs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      raw.push_back(configs.back().get());
    }
    if (count > 0)
      check(api().cudnnBackendGetAttribute(
                heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count, raw.data()),
            "reading the heuristic's engines");
    for (int64_t i = 0; i < count; ++i) {
      Desc candidate(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      if (handle)
        candidate.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
                      &handle);
      else
        candidate.set(CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, *device);
      candidate.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                    configs[size_t(i)]);
      if (api().cudnnBackendFinalize(candidate.get()) != CUDNN_STATUS_SUCCESS) {
        *tried = last_word();
        continue;
      }
      int64_t n = 0;
      check(api().cudnnBackendGetAttribute(
                candidate.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                CUDNN_TYPE_INT64, 1, &n, &workspace),
            "reading the plan's workspace size");
      plan = std::move(candidate);
      engine = std::move(configs[size_t(i)]);
      return true;
    }
    return false;
  }

  /// Runs the plan on `stream` with the tensors of `uids` at `pointers`.
  void run(cudnnHandle_t handle, void *stream, int64_t count,
           const int64_t *uids, void **pointers, void *ws,
           const char *what) const {
    Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, count, uids)
        .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, count,
             pointers)
        .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws)
        .finalize("finalizing the attention's arguments");
    check(api().cudnnSetStream(handle, static_cast<cudaStream_t>(stream)),
          "setting the stream");
    check(api().cudnnBackendExecute(handle, plan.get(), pack.get()), what);
  }
};

/// Which graph a plan is of.
enum class Pass { Forward, DeterministicBackward, NondeterministicBackward };

Pass backward_pass(CudnnBackward how) {
  return how == CudnnBackward::Deterministic ? Pass::DeterministicBackward
                                             : Pass::NondeterministicBackward;
}

using Key = std::tuple<Pass, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t, float, bool, bool, int64_t, bool>;

/// Bytes rounded up to 256, so that what follows them stays aligned.
int64_t aligned(int64_t bytes) { return (bytes + 255) / 256 * 256; }

/// Where the backward's scratch puts each of its arrays: cuDNN's results
/// there only where they are then added into the gradients (`adds`).
struct BackwardScratch {
  int64_t row_dot, dq_sum, dq, dk, dv, workspace, end;
  BackwardScratch(const AttentionDims &d, CudnnBackward how, int64_t ws,
                  bool adds) {
    const int64_t rows = d.B * d.H * d.S, q = rows * d.D,
                  kv = d.B * d.Hkv * d.S * d.D;
    const int64_t staged = adds ? 1 : 0;
    row_dot = 0;
    dq_sum = row_dot + aligned(4 * rows); // the nondeterministic's only
    dq = dq_sum + (how == CudnnBackward::Deterministic ? 0 : aligned(4 * q));
    dk = dq + staged * aligned(2 * q);
    dv = dk + staged * aligned(2 * kv);
    workspace = dv + staged * aligned(2 * kv);
    end = workspace + ws;
  }
};

/// What a pass is called in messages.
const char *pass_name(Pass pass) {
  switch (pass) {
  case Pass::Forward:
    return "the attention forward";
  case Pass::DeterministicBackward:
    return "the deterministic attention backward";
  case Pass::NondeterministicBackward:
    return "the nondeterministic attention backward";
  }
  return "?";
}

std::string shape_name(const AttentionDims &d) {
  return "B=" + std::to_string(d.B) + " H=" + std::to_string(d.H) +
         " Hkv=" + std::to_string(d.Hkv) + " S=" + std::to_string(d.S) +
         " D=" + std::to_string(d.D) +
         (d.window > 0 ? " window=" + std::to_string(d.window) : "") +
         (d.softcap > 0 ? " softcap=" + std::to_string(d.softcap) : "") +
         (d.sinks ? " sinks" : "") + (d.alibi ? " ALiBi" : "") +
         (d.chunk > 0 ? " chunk=" + std::to_string(d.chunk) : "") +
         (d.layout.seq_major ? " sequence-major" : "");
}

/// The graph of `pass` over `d`.
Graph graph_of(Pass pass, const AttentionDims &d) {
  switch (pass) {
  case Pass::Forward:
    return forward_graph(d);
  case Pass::DeterministicBackward:
    return backward_graph(d, CudnnBackward::Deterministic);
  case Pass::NondeterministicBackward:
    return backward_graph(d, CudnnBackward::Nondeterministic);
  }
  fail("cuda: no such cuDNN attention pass");
}

/// The by-value scalars of a form's graphs, which a call's bindings point
/// at (so they live as long as the call).
struct FormScalars {
  explicit FormScalars(const AttentionDims &d)
      : window(float(d.window)), cap(d.softcap), chunk(int32_t(d.chunk)) {}
  float window, cap;
  int32_t chunk;
};

/// Binds what only some graphs have: the window, the chunk and the soft
/// cap (by value), ALiBi's slopes.
void add_form(const AttentionDims &d, FormScalars &values,
              const HeadTerms &heads, std::vector<int64_t> &uids,
              std::vector<void *> &pointers) {
  if (d.alibi != (heads.slopes != nullptr))
    fail("cuda: cuDNN's attention of ", shape_name(d),
         d.alibi ? " without its ALiBi slopes"
                 : " given ALiBi slopes it has no place for");
  if (d.window > 0) {
    uids.push_back(kWindow);
    pointers.push_back(&values.window);
  }
  if (d.chunk > 0) {
    uids.push_back(kChunk);
    pointers.push_back(&values.chunk);
  }
  if (d.softcap > 0) {
    uids.push_back(kSoftcap);
    pointers.push_back(&values.cap);
  }
  if (d.alibi) {
    uids.push_back(kSlopes);
    pointers.push_back(const_cast<float *>(heads.slopes));
  }
}

/// The value a masked score takes: −∞ as cuDNN's frontend passes it from
/// cuDNN 9.10, the lowest float before.
float masked_score() {
  return api().cudnnGetVersion() >= 91000
             ? -std::numeric_limits<float>::infinity()
             : std::numeric_limits<float>::lowest();
}

} // namespace

// What cuDNN's frontend refuses or works around by version (cudnn-frontend
// 1.x, node/scaled_dot_product_flash_attention.h, sdpa_support_surface.h).
std::string cudnn_withholds(const AttentionDims &d, bool backward) {
  const size_t v = api().cudnnGetVersion();
  const std::string name = "cuDNN " + std::to_string(v / 10000) + "." +
                           std::to_string(v / 100 % 100) + "." +
                           std::to_string(v % 100);
  if (v == 91000 || v == 91001)
    return name + " has known faults in its fused attention";
  // The frontend's score modifiers (the soft cap's) from 9.4, its sinks
  // from 9.13 (its ALiBi from 8.9, before any cuDNN 9).
  if (d.softcap > 0 && v < 90400)
    return name + " takes no soft cap (9.4 and later do)";
  if (d.sinks && v < 91300)
    return name + " takes no sinks (9.13 and later do)";
  if (!backward)
    return "";
  if (d.S == 1)
    return "cuDNN's backward takes no sequence of one position";
  // Up to 9.15 the frontend masks the padding of the last tile itself.
  if (v <= 91500 && d.S % 128 != 0)
    return name +
           "'s backward needs a padding mask where S is not a multiple of "
           "128, which this runtime does not build";
  return "";
}

bool cudnn_loadable(std::string *why) { return load(why) != nullptr; }

struct CudnnAttention::Impl {
  cudnnHandle_t handle = nullptr;
  std::map<Key, std::unique_ptr<Plan>> plans;

  /// The plan for `pass` over `d`, built at the first ask, refused or not;
  /// a refusal is said on stderr then, once.
  Plan &plan(Pass pass, const AttentionDims &d) {
    auto [it, fresh] =
        plans.try_emplace(Key{pass, d.B, d.H, d.Hkv, d.S, d.D, d.window,
                              d.softcap, d.sinks && pass == Pass::Forward,
                              d.alibi, d.chunk, d.layout.seq_major});
    if (fresh) {
      try {
        const std::string why = cudnn_withholds(d, pass != Pass::Forward);
        it->second = why.empty()
                         ? std::make_unique<Plan>(graph_of(pass, d), handle)
                         : std::make_unique<Plan>(" (" + why + ")");
      } catch (...) {
        plans.erase(it);
        throw;
      }
      if (!it->second->refused.empty())
        std::fprintf(stderr,
                     "warning: cuDNN has no engine for %s of %s%s; the "
                     "tensor-core kernels run it\n",
                     pass_name(pass), shape_name(d).c_str(),
                     it->second->refused.c_str());
    }
    return *it->second;
  }

  /// The plan for a shape cuDNN has an engine for (the caller asked).
  Plan &runnable(Pass pass, const AttentionDims &d) {
    Plan &p = plan(pass, d);
    if (!p.refused.empty())
      fail("cuda: cuDNN has no engine for ", pass_name(pass), " of ",
           shape_name(d), p.refused);
    return p;
  }

  void forward(void *y, void *stats, void *ws, const void *q, const void *k,
               const void *v, const HeadTerms &heads, const AttentionDims &d,
               float scale, void *stream) {
    const float *sinks = heads.sinks;
    if (d.sinks != (sinks != nullptr))
      fail("cuda: cuDNN's attention forward of ", shape_name(d),
           d.sinks ? " without its sinks" : " given sinks it has no place for");
    float lowest = masked_score();
    FormScalars values(d);
    std::vector<int64_t> uids = {kQ, kK, kV, kY, kStats, kScale, kLowest};
    std::vector<void *> pointers = {const_cast<void *>(q),
                                    const_cast<void *>(k),
                                    const_cast<void *>(v),
                                    y,
                                    stats,
                                    &scale,
                                    &lowest};
    add_form(d, values, heads, uids, pointers);
    if (sinks) {
      uids.push_back(kSink);
      pointers.push_back(const_cast<float *>(sinks));
    }
    runnable(Pass::Forward, d)
        .run(handle, stream, int64_t(uids.size()), uids.data(), pointers.data(),
             ws, "running the attention forward");
  }
};

CudnnAttention::CudnnAttention() : impl_(std::make_unique<Impl>()) {
  check(api().cudnnCreate(&impl_->handle), "creating a handle");
}

CudnnAttention::~CudnnAttention() {
  impl_->plans.clear(); // before the handle they were made with
  if (impl_->handle)
    api().cudnnDestroy(impl_->handle);
}

bool CudnnAttention::has_forward(const AttentionDims &d) {
  return impl_->plan(Pass::Forward, d).refused.empty();
}

bool CudnnAttention::has_backward(const AttentionDims &d, CudnnBackward how) {
  return impl_->plan(backward_pass(how), d).refused.empty();
}

int64_t CudnnAttention::forward_scratch_bytes(const AttentionDims &d) {
  return aligned(4 * d.B * d.H * d.S) +
         impl_->runnable(Pass::Forward, d).workspace;
}

void CudnnAttention::forward(void *y, float *lse, const void *q, const void *k,
                             const void *v, const HeadTerms &heads,
                             const AttentionDims &d, float scale, void *scratch,
                             void *stream) {
  char *own = static_cast<char *>(scratch);
  impl_->forward(y, lse ? static_cast<void *>(lse) : own,
                 own + aligned(4 * d.B * d.H * d.S), q, k, v, heads, d, scale,
                 stream);
}

int64_t CudnnAttention::backward_scratch_bytes(const AttentionDims &d,
                                               CudnnBackward how, bool adds) {
  return BackwardScratch(d, how,
                         impl_->runnable(backward_pass(how), d).workspace, adds)
      .end;
}

void CudnnAttention::backward(void *dq, void *dk, void *dv, const void *dy,
                              const void *q, const void *k, const void *v,
                              const void *y, const float *lse,
                              const HeadTerms &heads, const AttentionDims &d,
                              float scale, CudnnBackward how, void *scratch,
                              void *stream, const AddInto &add) {
  Plan &bwd = impl_->runnable(backward_pass(how), d);
  const bool adds = bool(add);
  const BackwardScratch at(d, how, bwd.workspace, adds);
  char *base = static_cast<char *>(scratch);
  const int64_t q_elems = d.B * d.H * d.S * d.D,
                kv_elems = d.B * d.Hkv * d.S * d.D;
  const bool sums = how == CudnnBackward::Nondeterministic;
  if (sums && cudaMemsetAsync(base + at.dq_sum, 0, size_t(4 * q_elems),
                              static_cast<cudaStream_t>(stream)) != cudaSuccess)
    fail("cuda: clearing cuDNN's dQ sum failed");
  float lowest = masked_score(), one = 1.f;
  FormScalars values(d);
  std::vector<int64_t> uids = {kQ,  kK,  kV,     kY,   kDy,     kStats, kDq,
                               kDk, kDv, kScale, kOne, kLowest, kRowDot};
  std::vector<void *> pointers = {const_cast<void *>(q),
                                  const_cast<void *>(k),
                                  const_cast<void *>(v),
                                  const_cast<void *>(y),
                                  const_cast<void *>(dy),
                                  const_cast<float *>(lse),
                                  adds ? base + at.dq : dq,
                                  adds ? base + at.dk : dk,
                                  adds ? base + at.dv : dv,
                                  &scale,
                                  &one,
                                  &lowest,
                                  base + at.row_dot};
  // The tensors only some graphs have.
  if (sums) {
    uids.push_back(kDqSum);
    pointers.push_back(base + at.dq_sum);
  }
  add_form(d, values, heads, uids, pointers);
  bwd.run(impl_->handle, stream, int64_t(uids.size()), uids.data(),
          pointers.data(), base + at.workspace,
          "running the attention backward");
  if (adds) {
    add(dq, base + at.dq, q_elems);
    add(dk, base + at.dk, kv_elems);
    add(dv, base + at.dv, kv_elems);
  }
}

void CudnnAttention::check_descriptors(const AttentionDims &d) {
  forward_graph(d);
  backward_graph(d, CudnnBackward::Deterministic);
  backward_graph(d, CudnnBackward::Nondeterministic);
}

std::string CudnnAttention::device_properties(int device) {
  if (api().cudnnGetVersion() < 90800)
    fail("cuda: cuDNN ", api().cudnnGetVersion(),
         " cannot describe a device (9.8 and later can)");
  Desc props(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  const int32_t id = device;
  props.set(CUDNN_ATTR_DEVICEPROP_DEVICE_ID, CUDNN_TYPE_INT32, 1, &id)
      .finalize("describing the device");
  int64_t n = 0;
  check(api().cudnnBackendGetAttribute(
            props.get(), CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION,
            CUDNN_TYPE_CHAR, 0, &n, nullptr),
        "sizing the device's description");
  std::string json(size_t(n), '\0');
  check(api().cudnnBackendGetAttribute(
            props.get(), CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION,
            CUDNN_TYPE_CHAR, n, &n, json.data()),
        "reading the device's description");
  json.resize(std::strlen(json.c_str()));
  return json;
}

std::string CudnnAttention::plan_ahead(const AttentionDims &d, bool backward,
                                       CudnnBackward how,
                                       const std::string &device_json,
                                       int64_t *workspace) {
  if (api().cudnnGetVersion() < 90800)
    fail("cuda: cuDNN ", api().cudnnGetVersion(),
         " cannot plan without a device (9.8 and later can)");
  Desc device(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  device
      .set(CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
           int64_t(device_json.size()), device_json.data())
      .finalize("reading the device's properties");
  const Pass pass = backward ? backward_pass(how) : Pass::Forward;
  if (std::string why = cudnn_withholds(d, backward); !why.empty())
    return " (" + why + ")";
  Plan plan(graph_of(pass, d), nullptr, &device);
  if (workspace)
    *workspace = plan.workspace;
  return plan.refused;
}

#else // built without cuDNN's headers

namespace {
constexpr const char *kLeftOut =
    "this build has no cuDNN (its headers were not found; configure with "
    "-DMEGATRAIN_CUDNN_INCLUDE_DIR=...)";
} // namespace

bool cudnn_loadable(std::string *why) {
  if (why)
    *why = kLeftOut;
  return false;
}

std::string cudnn_withholds(const AttentionDims &, bool) {
  fail("cuda: ", kLeftOut);
}

struct CudnnAttention::Impl {};

CudnnAttention::CudnnAttention() { fail("cuda: ", kLeftOut); }
CudnnAttention::~CudnnAttention() = default;
bool CudnnAttention::has_forward(const AttentionDims &) {
  fail("cuda: ", kLeftOut);
}
bool CudnnAttention::has_backward(const AttentionDims &, CudnnBackward) {
  fail("cuda: ", kLeftOut);
}
int64_t CudnnAttention::forward_scratch_bytes(const AttentionDims &) {
  fail("cuda: ", kLeftOut);
}
void CudnnAttention::forward(void *, float *, const void *, const void *,
                             const void *, const HeadTerms &,
                             const AttentionDims &, float, void *, void *) {
  fail("cuda: ", kLeftOut);
}
int64_t CudnnAttention::backward_scratch_bytes(const AttentionDims &,
                                               CudnnBackward, bool) {
  fail("cuda: ", kLeftOut);
}
void CudnnAttention::backward(void *, void *, void *, const void *,
                              const void *, const void *, const void *,
                              const void *, const float *, const HeadTerms &,
                              const AttentionDims &, float, CudnnBackward,
                              void *, void *, const AddInto &) {
  fail("cuda: ", kLeftOut);
}
void CudnnAttention::check_descriptors(const AttentionDims &) {
  fail("cuda: ", kLeftOut);
}
std::string CudnnAttention::plan_ahead(const AttentionDims &, bool,
                                       CudnnBackward, const std::string &,
                                       int64_t *) {
  fail("cuda: ", kLeftOut);
}
std::string CudnnAttention::device_properties(int) { fail("cuda: ", kLeftOut); }

#endif

} // namespace mtrt::cuda
