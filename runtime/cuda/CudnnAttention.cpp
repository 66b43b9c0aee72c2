//===- CudnnAttention.cpp - the attention forward on cuDNN's kernels ------===//
//
// The graph (cuDNN's backend API; cuDNN recognizes this pattern as its
// fused flash-attention forward, and runs no part of it alone):
//
//   S0 = Q·Kᵀ            matmul, f32         Q (B,H,S,D), Kᵀ (B,Hkv,D,S)
//   S1 = S0 · scale      scale by value
//   S2 = row ≥ col ? S1 : lowest             GEN_INDEX ×2 (int32), CMP_GE,
//                                            select
//   M = max_j S2, E = exp(S2 − M), Z = Σ_j E
//   stats = M + log Z    (B,H,S,1) f32, each row's log-sum-exp
//   P = E / Z            bf16, virtual
//   Y = P·V              matmul              V (B,Hkv,S,D), Y (B,H,S,D)
//
// Every intermediate is virtual: cuDNN keeps it on chip. Kᵀ is K read with
// its last two strides swapped; key/value heads fewer than query heads
// broadcast over each group.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudnnAttention.h"
#include "runtime/exec/Error.h"

#if __has_include(<cudnn_graph.h>)
#define MT_HAVE_CUDNN 1
#include <cudnn_graph.h>
#include <dlfcn.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
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

/// Loads cuDNN once: $MEGATRAIN_CUDNN, then the loader's search path. The
/// major version must be the headers' (the backend API's ABI).
const CudnnApi *load(std::string *why) {
  static CudnnApi api;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> names;
    if (const char *env = std::getenv("MEGATRAIN_CUDNN"); env && *env)
      names.push_back(env);
    names.push_back("libcudnn.so." MT_STR(CUDNN_MAJOR));
    names.push_back("libcudnn.so");
    void *lib = nullptr;
    for (const std::string &n : names)
      if ((lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)))
        break;
    if (!lib) {
      const char *e = dlerror();
      error = std::string("cannot load cuDNN (libcudnn.so.") +
              MT_STR(CUDNN_MAJOR) + "): " + (e ? e : "not found") +
              "; set MEGATRAIN_CUDNN to its path";
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

/// The unique ids of the tensors a call binds.
enum Uid : int64_t { kQ = 1, kK, kV, kY, kStats, kScale, kLowest };

/// The forward's tensors and operations (the file comment), built without
/// a device.
struct ForwardGraph {
  std::deque<Desc> tensors; // a deque: ops refer to tensors as they grow
  std::vector<Desc> ops;
  int64_t next_virtual = 100;

  Desc &tensor(int64_t uid, Dims dims, Dims strides, cudnnDataType_t type,
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
  Desc &virtual_like(Dims dims, Dims strides,
                     cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    return tensor(next_virtual++, dims, strides, type, true);
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
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y)
        .finalize("finalizing a pointwise operation");
    ops.push_back(std::move(op));
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

  explicit ForwardGraph(const AttentionDims &d) {
    const int64_t B = d.B, H = d.H, G = d.Hkv, S = d.S, D = d.D;
    // cuDNN divides by these unchecked (a zero is a SIGFPE).
    if (B <= 0 || H <= 0 || G <= 0 || S <= 0 || D <= 0 || H % G != 0)
      fail("cuda: no attention of B=", B, " H=", H, " Hkv=", G, " S=", S,
           " D=", D, " for cuDNN: every dim positive, Hkv dividing H");
    const Desc &q = tensor(kQ, {B, H, S, D}, {H * S * D, S * D, D, 1},
                           CUDNN_DATA_BFLOAT16, false);
    const Desc &kt = tensor(kK, {B, G, D, S}, {G * S * D, S * D, 1, D},
                            CUDNN_DATA_BFLOAT16, false);
    const Desc &v = tensor(kV, {B, G, S, D}, {G * S * D, S * D, D, 1},
                           CUDNN_DATA_BFLOAT16, false);
    const Desc &y = tensor(kY, {B, H, S, D}, {H * S * D, S * D, D, 1},
                           CUDNN_DATA_BFLOAT16, false);
    const Dims rowDims{B, H, S, 1}, rowStrides{H * S, S, 1, 1};
    const Desc &stats =
        tensor(kStats, rowDims, rowStrides, CUDNN_DATA_FLOAT, false);
    const Dims one{1, 1, 1, 1};
    const Desc &scale =
        tensor(kScale, one, one, CUDNN_DATA_FLOAT, false, /*by_value=*/true);
    const Desc &lowest =
        tensor(kLowest, one, one, CUDNN_DATA_FLOAT, false, /*by_value=*/true);

    const Dims sDims{B, H, S, S}, sStrides{H * S * S, S * S, S, 1};
    const Desc &s0 = virtual_like(sDims, sStrides);
    matmul(q, kt, s0);
    const Desc &s1 = virtual_like(sDims, sStrides);
    pointwise(CUDNN_POINTWISE_MUL, s0, &scale, nullptr, s1);
    // The causal mask as cuDNN 9's own frontend spells it: int32 indices.
    const Desc &row = virtual_like(sDims, sStrides, CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, s1, nullptr, nullptr, row,
              CUDNN_DATA_FLOAT, 2);
    const Desc &col = virtual_like(sDims, sStrides, CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, s1, nullptr, nullptr, col,
              CUDNN_DATA_FLOAT, 3);
    const Desc &seen = virtual_like(sDims, sStrides, CUDNN_DATA_BOOLEAN);
    pointwise(CUDNN_POINTWISE_CMP_GE, row, &col, nullptr, seen,
              CUDNN_DATA_BOOLEAN);
    const Desc &s2 = virtual_like(sDims, sStrides);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, s1, &lowest, &seen, s2);

    const Desc &m = virtual_like(rowDims, rowStrides);
    reduce(CUDNN_REDUCE_TENSOR_MAX, s2, m);
    const Desc &shifted = virtual_like(sDims, sStrides);
    pointwise(CUDNN_POINTWISE_SUB, s2, &m, nullptr, shifted);
    const Desc &e = virtual_like(sDims, sStrides);
    pointwise(CUDNN_POINTWISE_EXP, shifted, nullptr, nullptr, e);
    const Desc &z = virtual_like(rowDims, rowStrides);
    reduce(CUDNN_REDUCE_TENSOR_ADD, e, z);
    const Desc &logz = virtual_like(rowDims, rowStrides);
    pointwise(CUDNN_POINTWISE_LOG, z, nullptr, nullptr, logz);
    pointwise(CUDNN_POINTWISE_ADD, m, &logz, nullptr, stats);
    // P·V takes P in the inputs' type.
    const Desc &p = virtual_like(sDims, sStrides, CUDNN_DATA_BFLOAT16);
    pointwise(CUDNN_POINTWISE_DIV, e, &z, nullptr, p);
    matmul(p, v, y);
  }
};

/// A shape's graph and the plan cuDNN made of it.
struct Plan {
  ForwardGraph graph;
  Desc ops{CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR};
  Desc plan{CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR};
  int64_t workspace = 0;
  float scale = 1.f, lowest = std::numeric_limits<float>::lowest();

  Plan(const AttentionDims &d, float s, cudnnHandle_t handle)
      : graph(d), scale(s) {
    std::vector<cudnnBackendDescriptor_t> raw;
    for (const Desc &op : graph.ops)
      raw.push_back(op.get());
    ops.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
            int64_t(raw.size()), raw.data())
        .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
        .finalize("finalizing the attention graph");
    std::string tried;
    for (cudnnBackendHeurMode_t mode :
         {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK})
      if (choose(mode, handle, &tried))
        return;
    fail("cuda: cuDNN has no engine for the attention forward of B=", d.B,
         " H=", d.H, " Hkv=", d.Hkv, " S=", d.S, " D=", d.D, tried,
         " (unset MEGATRAIN_CUDA_ATTENTION to run the tensor-core kernels)");
  }

  /// Takes the first engine configuration the heuristic of `mode` offers
  /// that makes a plan; false if none does, with cuDNN's last word in
  /// `tried`.
  bool choose(cudnnBackendHeurMode_t mode, cudnnHandle_t handle,
              std::string *tried) {
    Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, ops)
        .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
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
      candidate
          .set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
          .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[size_t(i)]);
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
      return true;
    }
    return false;
  }
};

using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, uint32_t>;

Key key_of(const AttentionDims &d, float scale) {
  uint32_t bits;
  std::memcpy(&bits, &scale, sizeof bits);
  return {d.B, d.H, d.Hkv, d.S, d.D, bits};
}

int64_t stats_bytes(const AttentionDims &d) {
  // Rounded up to 256 bytes so that the workspace after it is aligned.
  return (d.B * d.H * d.S * int64_t(sizeof(float)) + 255) / 256 * 256;
}

} // namespace

bool cudnn_loadable(std::string *why) { return load(why) != nullptr; }

struct CudnnAttention::Impl {
  cudnnHandle_t handle = nullptr;
  std::map<Key, std::unique_ptr<Plan>> plans;

  Plan &plan(const AttentionDims &d, float scale) {
    auto [it, fresh] = plans.try_emplace(key_of(d, scale));
    if (fresh) {
      try {
        it->second = std::make_unique<Plan>(d, scale, handle);
      } catch (...) {
        plans.erase(it);
        throw;
      }
    }
    return *it->second;
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

int64_t CudnnAttention::scratch_bytes(const AttentionDims &d, float scale) {
  return stats_bytes(d) + impl_->plan(d, scale).workspace;
}

void CudnnAttention::forward(void *y, const void *q, const void *k,
                             const void *v, const AttentionDims &d, float scale,
                             void *scratch, void *stream) {
  Plan &p = impl_->plan(d, scale);
  char *stats = static_cast<char *>(scratch);
  void *workspace = p.workspace > 0 ? stats + stats_bytes(d) : nullptr;
  const int64_t uids[] = {kQ, kK, kV, kY, kStats, kScale, kLowest};
  void *pointers[] = {const_cast<void *>(q),
                      const_cast<void *>(k),
                      const_cast<void *>(v),
                      y,
                      stats,
                      &p.scale,
                      &p.lowest};
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 7, uids)
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 7,
           pointers)
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
           &workspace)
      .finalize("finalizing the attention's arguments");
  check(api().cudnnSetStream(impl_->handle, static_cast<cudaStream_t>(stream)),
        "setting the stream");
  check(api().cudnnBackendExecute(impl_->handle, p.plan.get(), pack.get()),
        "running the attention forward");
}

void CudnnAttention::check_descriptors(const AttentionDims &d) {
  ForwardGraph graph(d);
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

struct CudnnAttention::Impl {};

CudnnAttention::CudnnAttention() { fail("cuda: ", kLeftOut); }
CudnnAttention::~CudnnAttention() = default;
int64_t CudnnAttention::scratch_bytes(const AttentionDims &, float) {
  fail("cuda: ", kLeftOut);
}
void CudnnAttention::forward(void *, const void *, const void *, const void *,
                             const AttentionDims &, float, void *, void *) {
  fail("cuda: ", kLeftOut);
}
void CudnnAttention::check_descriptors(const AttentionDims &) {
  fail("cuda: ", kLeftOut);
}

#endif

} // namespace mtrt::cuda
