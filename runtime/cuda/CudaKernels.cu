//===- CudaKernels.cu - the kernel object: GEMMs, scratch, launch checks --===//
//
// linear maps to cuBLASLt GEMMs (bf16 A and B, f32 compute; the forward and
// dx write bf16, or add into it with beta = 1 where asked; dW accumulates
// into f32 with beta = 1; bias as the BIAS epilogue). A plan (descriptors and
// the heuristic's algorithm) is cached per shape, layout and pointer alignment,
// so every call of a shape runs the same algorithm and gives the same bits.
//
// cuBLASLt is loaded with dlopen when the first CudaKernels is made, not
// linked: every binary of a CUDA build links mtrt_exec, and a CPU run
// should neither pay for loading a 500 MB library nor need it installed.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/KernelCommon.cuh"
#include "runtime/exec/Error.h"

#include <cstdlib>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#ifndef MEGATRAIN_CUDA_EMULATION
#include <cublasLt.h>
#include <dlfcn.h>
#include <mutex>
#endif

namespace mtrt::MT_KNS {

// Row-major linear products as column-major GEMMs: a row-major (R, C)
// matrix is a column-major (C, R) one with the same leading dimension C.

GemmSpec linear_forward_gemm(void *y, const void *x, const void *w,
                             const void *b, int64_t M, int64_t K, int64_t N,
                             bool w_in_out, bool accumulate) {
  // yᵀ (N, M) (+)= op(w) (N, K) · xᵀ (K, M).
  return {!w_in_out,
          false,
          N,
          M,
          K,
          w,
          w_in_out ? N : K,
          x,
          K,
          y,
          N,
          false,
          accumulate ? 1.f : 0.f,
          b};
}

GemmSpec linear_dx_gemm(void *dx, const void *dy, const void *w, int64_t M,
                        int64_t K, int64_t N, bool w_in_out, bool accumulate) {
  // dxᵀ (K, M) (+)= Wₖₙ (K, N) · dyᵀ (N, M).
  GemmSpec g{w_in_out, false, K,  M, N,     w,   w_in_out ? N : K,
             dy,       N,     dx, K, false, 1.f, nullptr};
  g.beta = accumulate ? 1.f : 0.f;
  return g;
}

GemmSpec linear_dw_gemm(float *dw, const void *dy, const void *x, int64_t M,
                        int64_t K, int64_t N, bool w_in_out) {
  if (w_in_out) // dW (K, N) row-major: dWᵀ (N, K) += dyᵀ (N, M) · x (M, K).
    return {false, true, N, K, M, dy, N, x, K, dw, N, true, 1.f, nullptr};
  // dW (N, K) row-major: dWᵀ (K, N) += xᵀ (K, M) · dy (M, N).
  return {false, true, K, N, M, x, K, dy, N, dw, K, true, 1.f, nullptr};
}

std::vector<GemmSpec> attention_dq_gemms(void *dq, const void *ds_t,
                                         const void *k, int64_t Bn, int64_t H,
                                         int64_t Hkv, int64_t S, int64_t D,
                                         float scale, bool accumulate,
                                         HeadLayout layout) {
  // Per KV head (b, g): dQᵀ (D, group·S) (+)= scale · Kᵀ (D, S) · dSᵀ (S,
  // group·S), dSᵀ a column-major (group·S, S) read transposed.
  const int64_t group = H / Hkv, rows = group * S;
  const auto *ds = static_cast<const bf16 *>(ds_t);
  const auto *kb = static_cast<const bf16 *>(k);
  auto *dqb = static_cast<bf16 *>(dq);
  GemmSpec g{false,
             true,
             D,
             rows,
             S,
             k,
             D,
             ds_t,
             rows,
             dq,
             D,
             false,
             accumulate ? 1.f : 0.f,
             nullptr};
  g.alpha = scale;
  if (!layout.seq_major) { // the group's query rows follow one another
    g.batch = Bn * Hkv;
    g.stride_a = S * D;
    g.stride_b = S * rows;
    g.stride_c = rows * D;
    return {g};
  }
  // Sequence-major, a head's rows are H·D apart and the group's heads D
  // apart: no one stride walks the group's rows. So one GEMM per query
  // head of a group (its S columns of dSᵀ), batched over the KV heads or
  // the sequences, whichever are more (their strides are uniform), and
  // looped over the other.
  g.n = S;
  g.lda = layout.row_stride(Hkv, D);
  g.ldc = layout.row_stride(H, D);
  const bool over_heads = Hkv >= Bn;
  if (over_heads) { // the next KV head: D on in k, group·D in dq
    g.batch = Hkv;
    g.stride_a = D;
    g.stride_b = S * rows;
    g.stride_c = group * D;
  } else { // the next sequence
    g.batch = Bn;
    g.stride_a = S * Hkv * D;
    g.stride_b = Hkv * S * rows;
    g.stride_c = S * H * D;
  }
  std::vector<GemmSpec> out;
  for (int64_t outer = 0; outer < (over_heads ? Bn : Hkv); ++outer) {
    const int64_t b = over_heads ? outer : 0, grp = over_heads ? 0 : outer;
    for (int64_t j = 0; j < group; ++j) {
      g.a = kb + layout.head_offset(b, grp, Hkv, S, D);
      g.b = ds + (b * Hkv + grp) * S * rows + j * S;
      g.c = dqb + layout.head_offset(b, grp * group + j, H, S, D);
      out.push_back(g);
    }
  }
  return out;
}

void CudaKernels::linear_forward(void *y, const void *x, const void *w,
                                 const void *b, int64_t M, int64_t K, int64_t N,
                                 bool w_in_out, bool accumulate) {
  gemm(linear_forward_gemm(y, x, w, b, M, K, N, w_in_out, accumulate));
}

void CudaKernels::linear_backward(void *dx, float *dw, float *db,
                                  const void *dy, const void *x, const void *w,
                                  int64_t M, int64_t K, int64_t N,
                                  bool w_in_out, bool accumulate_dx) {
  if (dx)
    gemm(linear_dx_gemm(dx, dy, w, M, K, N, w_in_out, accumulate_dx));
  if (dw)
    gemm(linear_dw_gemm(dw, dy, x, M, K, N, w_in_out));
  if (db && M > 0 && N > 0) {
    float *partials = static_cast<float *>(
        scratch(column_chunks(M) * N * int64_t(sizeof(float))));
    linear_bias_grad(db, partials, dy, M, N, stream_);
  }
}

void *CudaKernels::scratch(int64_t bytes) {
  if (bytes <= scratch_bytes_)
    return scratch_;
  // Grow by half again, in whole MiB: a few shapes settle it in one step.
  int64_t size = std::max(bytes, scratch_bytes_ + scratch_bytes_ / 2);
  size = (size + (1 << 20) - 1) & ~int64_t((1 << 20) - 1);
  const cudaStream_t s = cudaStream_t(stream_);
  if (scratch_)
    cudaFreeAsync(scratch_, s); // ordered after every kernel that used it
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  if (cudaMallocAsync(&scratch_, size_t(size), s) != cudaSuccess)
    fail("cuda: cannot allocate ", size,
         " bytes of kernel scratch on the device (out of memory; a smaller "
         "--gpu-mem-limit at compile time leaves more room)");
  scratch_bytes_ = size;
  return scratch_;
}

#ifdef MEGATRAIN_CUDA_EMULATION

struct CudaKernels::Lt {};

CudaKernels::CudaKernels() = default;
CudaKernels::~CudaKernels() {
  if (scratch_)
    cudaFreeAsync(scratch_, nullptr);
}

void CudaKernels::gemm(const GemmSpec &spec) {
  // A plain loop, in order on the stream like cuBLASLt's kernels.
  mock_enqueue(cudaStream_t(stream_), [g = spec] {
    const bf16 *bias = static_cast<const bf16 *>(g.bias);
    for (int64_t at = 0; at < g.batch; ++at) {
      const bf16 *A = static_cast<const bf16 *>(g.a) + at * g.stride_a;
      const bf16 *Bm = static_cast<const bf16 *>(g.b) + at * g.stride_b;
      for (int64_t j = 0; j < g.n; ++j)
        for (int64_t i = 0; i < g.m; ++i) {
          float acc = 0.f;
          for (int64_t p = 0; p < g.k; ++p) {
            const float a =
                bf2f(g.trans_a ? A[p + i * g.lda] : A[i + p * g.lda]);
            const float b =
                bf2f(g.trans_b ? Bm[j + p * g.ldb] : Bm[p + j * g.ldb]);
            acc += a * b;
          }
          acc *= g.alpha;
          const int64_t c = at * g.stride_c + i + j * g.ldc;
          const float extra = bias ? bf2f(bias[i]) : 0.f;
          if (g.c_f32) {
            float *C = static_cast<float *>(g.c);
            C[c] = acc + (g.beta != 0.f ? g.beta * C[c] : 0.f) + extra;
          } else {
            bf16 *C = static_cast<bf16 *>(g.c);
            const float old = g.beta != 0.f ? g.beta * bf2f(C[c]) : 0.f;
            C[c] = f2bf(acc + old + extra);
          }
        }
    }
  });
}

#else // cuBLASLt

void check_launch(const char *kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    fail("cuda: launching ", kernel, " failed: ", cudaGetErrorString(e));
}

namespace {

/// The cuBLASLt entry points this file uses, from the shared library.
struct LtApi {
// clang-format off
#define MT_LT_FUNCTIONS(X)                                                     \
  X(cublasLtCreate)                                                            \
  X(cublasLtDestroy)                                                           \
  X(cublasLtMatmulDescCreate)                                                  \
  X(cublasLtMatmulDescDestroy)                                                 \
  X(cublasLtMatmulDescSetAttribute)                                            \
  X(cublasLtMatrixLayoutCreate)                                                \
  X(cublasLtMatrixLayoutDestroy)                                               \
  X(cublasLtMatrixLayoutSetAttribute)                                          \
  X(cublasLtMatmulPreferenceCreate)                                            \
  X(cublasLtMatmulPreferenceDestroy)                                           \
  X(cublasLtMatmulPreferenceSetAttribute)                                      \
  X(cublasLtMatmulAlgoGetHeuristic)                                            \
  X(cublasLtMatmul)
// clang-format on
#define MT_LT_MEMBER(f) decltype(&::f) f = nullptr;
  MT_LT_FUNCTIONS(MT_LT_MEMBER)
#undef MT_LT_MEMBER
};

#define MT_STR2(x) #x
#define MT_STR(x) MT_STR2(x)

/// Loads cuBLASLt once: $MEGATRAIN_CUBLASLT, the library this build was
/// configured with, then the loader's search path.
const LtApi &lt_api() {
  static LtApi api;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> names;
    if (const char *env = std::getenv("MEGATRAIN_CUBLASLT"))
      names.push_back(env);
#ifdef MEGATRAIN_CUBLASLT_PATH
    names.push_back(MEGATRAIN_CUBLASLT_PATH);
#endif
    names.push_back("libcublasLt.so." MT_STR(CUBLAS_VER_MAJOR));
    names.push_back("libcublasLt.so");
    void *lib = nullptr;
    for (const std::string &n : names)
      if ((lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)))
        break;
    if (!lib) {
      const char *why = dlerror();
      error = std::string("cannot load cuBLASLt (libcublasLt.so.") +
              MT_STR(CUBLAS_VER_MAJOR) + "): " + (why ? why : "not found") +
              "; set MEGATRAIN_CUBLASLT to its path";
      return;
    }
#define MT_LT_LOAD(f)                                                          \
  api.f = reinterpret_cast<decltype(&::f)>(dlsym(lib, #f));                    \
  if (!api.f && error.empty())                                                 \
    error = "cuBLASLt has no " #f;
    MT_LT_FUNCTIONS(MT_LT_LOAD)
#undef MT_LT_LOAD
  });
  if (!error.empty())
    fail("cuda: ", error);
  return api;
}

void check_lt(cublasStatus_t s, const char *what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    fail("cuda: cuBLASLt ", what, " failed (status ", int(s), ")");
}

/// The largest power of 2 up to 256 that divides the address p and, in a
/// batched GEMM, its stride to the next matrix (bytes).
uint32_t alignment(const void *p, int64_t stride_bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) | uintptr_t(stride_bytes);
  uint32_t al = 256;
  while (al > 1 && a % al != 0)
    al /= 2;
  return al;
}

__global__ void bias_rows_kernel(bf16 *y, const bf16 *b, int64_t m,
                                 int64_t total) {
  for (int64_t i = global_index(); i < total; i += global_stride())
    y[i] = f2bf(bf2f(y[i]) + bf2f(b[i % m]));
}

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

} // namespace

struct CudaKernels::Lt {
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, bool, bool, bool, uint32_t, uint32_t,
                         uint32_t, int64_t, int64_t, int64_t, int64_t>;
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo;
    bool bias_epilogue = false; // else the bias is a separate kernel
  };
  cublasLtHandle_t handle = nullptr;
  void *workspace = nullptr;
  std::map<Key, Plan> plans;

  ~Lt() {
    for (auto &kv : plans) {
      lt_api().cublasLtMatrixLayoutDestroy(kv.second.a);
      lt_api().cublasLtMatrixLayoutDestroy(kv.second.b);
      lt_api().cublasLtMatrixLayoutDestroy(kv.second.c);
      lt_api().cublasLtMatmulDescDestroy(kv.second.op);
    }
    if (workspace)
      cudaFree(workspace);
    if (handle)
      lt_api().cublasLtDestroy(handle);
  }

  /// Descriptors and the heuristic's first algorithm; false when cuBLASLt
  /// has none for this combination.
  bool make(const GemmSpec &g, bool bias, uint32_t al_a, uint32_t al_b,
            uint32_t al_c, Plan &p) {
    check_lt(lt_api().cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F,
                                               CUDA_R_32F),
             "MatmulDescCreate");
    const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    check_lt(lt_api().cublasLtMatmulDescSetAttribute(
                 p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
             "set TRANSA");
    check_lt(lt_api().cublasLtMatmulDescSetAttribute(
                 p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
             "set TRANSB");
    if (bias) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      const cudaDataType_t bt = CUDA_R_16BF;
      check_lt(lt_api().cublasLtMatmulDescSetAttribute(
                   p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
               "set EPILOGUE");
      check_lt(lt_api().cublasLtMatmulDescSetAttribute(
                   p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt),
               "set BIAS_DATA_TYPE");
      p.bias_epilogue = true;
    }
    check_lt(lt_api().cublasLtMatrixLayoutCreate(
                 &p.a, CUDA_R_16BF, uint64_t(g.trans_a ? g.k : g.m),
                 uint64_t(g.trans_a ? g.m : g.k), g.lda),
             "layout A");
    check_lt(lt_api().cublasLtMatrixLayoutCreate(
                 &p.b, CUDA_R_16BF, uint64_t(g.trans_b ? g.n : g.k),
                 uint64_t(g.trans_b ? g.k : g.n), g.ldb),
             "layout B");
    check_lt(lt_api().cublasLtMatrixLayoutCreate(
                 &p.c, g.c_f32 ? CUDA_R_32F : CUDA_R_16BF, uint64_t(g.m),
                 uint64_t(g.n), g.ldc),
             "layout C");
    if (g.batch > 1) {
      const int32_t count = int32_t(g.batch);
      const std::pair<cublasLtMatrixLayout_t, int64_t> strided[] = {
          {p.a, g.stride_a}, {p.b, g.stride_b}, {p.c, g.stride_c}};
      for (const auto &[layout, stride] : strided) {
        check_lt(lt_api().cublasLtMatrixLayoutSetAttribute(
                     layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                     sizeof count),
                 "set BATCH_COUNT");
        check_lt(lt_api().cublasLtMatrixLayoutSetAttribute(
                     layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                     &stride, sizeof stride),
                 "set STRIDED_BATCH_OFFSET");
      }
    }
    cublasLtMatmulPreference_t pref;
    check_lt(lt_api().cublasLtMatmulPreferenceCreate(&pref),
             "PreferenceCreate");
    const uint64_t ws = kWorkspaceBytes;
    lt_api().cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    lt_api().cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a);
    lt_api().cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b);
    lt_api().cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c);
    lt_api().cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c);
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    const cublasStatus_t st = lt_api().cublasLtMatmulAlgoGetHeuristic(
        handle, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
    lt_api().cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
      lt_api().cublasLtMatrixLayoutDestroy(p.a);
      lt_api().cublasLtMatrixLayoutDestroy(p.b);
      lt_api().cublasLtMatrixLayoutDestroy(p.c);
      lt_api().cublasLtMatmulDescDestroy(p.op);
      p = Plan();
      return false;
    }
    p.algo = result.algo;
    return true;
  }
};

bool load_cublaslt(std::string *why) {
  try {
    lt_api();
    return true;
  } catch (const Error &e) {
    if (why)
      *why = e.what();
    return false;
  }
}

CudaKernels::CudaKernels() : lt_(std::make_unique<Lt>()) {
  int device = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device);
  check_lt(lt_api().cublasLtCreate(&lt_->handle), "Create");
  if (cudaMalloc(&lt_->workspace, kWorkspaceBytes) != cudaSuccess)
    fail("cuda: cannot allocate the ", kWorkspaceBytes >> 20,
         " MiB cuBLASLt workspace on the device");
}

CudaKernels::~CudaKernels() {
  if (scratch_)
    cudaFree(scratch_);
}

void CudaKernels::gemm(const GemmSpec &g) {
  if (g.m <= 0 || g.n <= 0)
    return;
  const cudaStream_t s = cudaStream_t(stream_);
  if (g.k <= 0) { // an empty sum: D = beta·C (+ bias)
    if (g.batch != 1)
      fail("cuda: a batched GEMM of an empty sum");
    if (g.beta == 0.f &&
        cudaMemsetAsync(g.c, 0, size_t(g.m * g.n) * (g.c_f32 ? 4 : 2), s) !=
            cudaSuccess)
      fail("cuda: cudaMemsetAsync failed in an empty GEMM");
    if (g.bias && !g.c_f32)
      MT_LAUNCH(bias_rows_kernel, blocks_for(g.m * g.n), dim3(kThreads), s,
                B(g.c), B(g.bias), g.m, g.m * g.n);
    return;
  }
  const uint32_t al_a = alignment(g.a, 2 * g.stride_a),
                 al_b = alignment(g.b, 2 * g.stride_b),
                 al_c = alignment(g.c, (g.c_f32 ? 4 : 2) * g.stride_c);
  const Lt::Key key{
      g.trans_a,     g.trans_b,  g.m,       g.n,     g.k,
      g.lda,         g.ldb,      g.ldc,     g.c_f32, g.bias != nullptr,
      g.beta != 0.f, al_a,       al_b,      al_c,    g.batch,
      g.stride_a,    g.stride_b, g.stride_c};
  auto it = lt_->plans.find(key);
  if (it == lt_->plans.end()) {
    Lt::Plan p;
    if (!lt_->make(g, g.bias != nullptr, al_a, al_b, al_c, p) &&
        !(g.bias && lt_->make(g, false, al_a, al_b, al_c, p)))
      fail("cuda: cuBLASLt has no algorithm for a ", g.m, "x", g.n, "x", g.k,
           " bf16 GEMM (", g.trans_a ? "T" : "N", g.trans_b ? "T" : "N", ", ",
           g.c_f32 ? "f32" : "bf16", " output)");
    it = lt_->plans.emplace(key, p).first;
  }
  Lt::Plan &p = it->second;
  if (p.bias_epilogue)
    check_lt(
        lt_api().cublasLtMatmulDescSetAttribute(
            p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias),
        "set BIAS_POINTER");
  const float alpha = g.alpha, beta = g.beta;
  check_lt(lt_api().cublasLtMatmul(lt_->handle, p.op, &alpha, g.a, p.a, g.b,
                                   p.b, &beta, g.c, p.c, g.c, p.c, &p.algo,
                                   lt_->workspace, kWorkspaceBytes, s),
           "Matmul");
  if (g.bias && !p.bias_epilogue)
    MT_LAUNCH(bias_rows_kernel, blocks_for(g.m * g.n), dim3(kThreads), s,
              B(g.c), B(g.bias), g.m, g.m * g.n);
}

#endif

} // namespace mtrt::MT_KNS
