//===- adamw_bench.cpp - Host AdamW against host memory bandwidth ---------===//
//
// Measures, in one run and with one thread count, over buffers far larger
// than the last-level cache: two bandwidth ceilings (a STREAM-like triad, and
// the optimizer's own read-4/write-3 pattern without arithmetic), the AdamW
// update counted at 28 B/param (reads p, m, v, g; writes p, m, v), and the
// global grad norm at 4 B/param; then the same two with bf16 master weights
// and gradients (22 B/param and 2 B/param); and the pack of fp32 weights to
// bf16 for the device (6 B/param: host/Bf16Convert.h) and the addition of
// fp32 gradients into bf16 accumulators (8 B/param), each on the chosen
// path beside the scalar loop. Prints params/s, to set beside
// bench/adamw_vs_torch.py's figure, and the bf16 / fp32 speedup.
//
//   adamw_bench [--params 256M] [--threads N] [--iters 5] [--path avx512]
//
//===----------------------------------------------------------------------===//

#include "runtime/host/AdamW.h"
#include "runtime/host/Bf16Convert.h"
#include "runtime/host/GradNorm.h"
#include "runtime/host/ThreadPool.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MT_X86 1
#endif

using namespace mtrt::host;

namespace {

[[noreturn]] void usage_error(const std::string &what) {
  std::fprintf(stderr,
               "error: %s\nusage: adamw_bench [--params N[K|M|G]] "
               "[--threads N] [--iters N] [--path scalar|avx2|avx512]\n",
               what.c_str());
  std::exit(2);
}

// "256M" = 256 * 2^20.
int64_t parse_count(const char *flag, const std::string &text) {
  char *end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  int64_t unit = 1;
  if (*end == 'K' || *end == 'k')
    unit = int64_t(1) << 10, ++end;
  else if (*end == 'M' || *end == 'm')
    unit = int64_t(1) << 20, ++end;
  else if (*end == 'G' || *end == 'g')
    unit = int64_t(1) << 30, ++end;
  if (end == text.c_str() || *end != '\0' || value <= 0)
    usage_error(std::string("bad value for ") + flag + " (" + text + ")");
  return static_cast<int64_t>(value * double(unit));
}

struct FreeDeleter {
  void operator()(void *p) const { std::free(p); }
};
template <class T> using HostBuffer = std::unique_ptr<T[], FreeDeleter>;

template <class T = float> HostBuffer<T> allocate(int64_t n) {
  // Page-aligned, as the host store's unit regions are.
  size_t bytes = (size_t(n) * sizeof(T) + 4095) / 4096 * 4096;
  auto *p = static_cast<T *>(std::aligned_alloc(4096, bytes));
  if (!p)
    usage_error("cannot allocate " + std::to_string(bytes >> 20) + " MiB");
  return HostBuffer<T>(p);
}

// Large enough per part that thread wake-up costs nothing.
constexpr int64_t kGrain = 1 << 16;

// Written from the pool, so pages land near the threads that use them.
void fill(ThreadPool &pool, float *x, int64_t n, float base, float spread) {
  pool.parallel_for(n, kGrain, [=](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      x[i] = base +
             spread * float(int64_t(uint64_t(i) * 2654435761u % 2001) - 1000) /
                 1000.0f;
  });
}

#ifdef MT_X86
// The optimizer's access pattern without its arithmetic: read p, m, v, g and
// write p, m, v back, at the kernels' vector width and prefetch distance, so
// that it is a ceiling for them. Adding zero * g leaves the state as it was.
__attribute__((target("avx512f"))) void in_place_avx512(float *p, float *m,
                                                        float *v,
                                                        const float *g,
                                                        int64_t n, float zero) {
  const __m512 z16 = _mm512_set1_ps(zero);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (const float *s :
         {(const float *)p, (const float *)m, (const float *)v, g})
      _mm_prefetch(reinterpret_cast<const char *>(s + i + 512), _MM_HINT_T0);
    __m512 z = _mm512_mul_ps(z16, _mm512_loadu_ps(g + i));
    _mm512_storeu_ps(p + i, _mm512_add_ps(_mm512_loadu_ps(p + i), z));
    _mm512_storeu_ps(m + i, _mm512_add_ps(_mm512_loadu_ps(m + i), z));
    _mm512_storeu_ps(v + i, _mm512_add_ps(_mm512_loadu_ps(v + i), z));
  }
  for (; i < n; ++i) {
    float z = zero * g[i];
    p[i] += z, m[i] += z, v[i] += z;
  }
}

__attribute__((target("avx2"))) void in_place_avx2(float *p, float *m, float *v,
                                                   const float *g, int64_t n,
                                                   float zero) {
  const __m256 z8 = _mm256_set1_ps(zero);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    if (i % 16 == 0)
      for (const float *s :
           {(const float *)p, (const float *)m, (const float *)v, g})
        _mm_prefetch(reinterpret_cast<const char *>(s + i + 512), _MM_HINT_T0);
    __m256 z = _mm256_mul_ps(z8, _mm256_loadu_ps(g + i));
    _mm256_storeu_ps(p + i, _mm256_add_ps(_mm256_loadu_ps(p + i), z));
    _mm256_storeu_ps(m + i, _mm256_add_ps(_mm256_loadu_ps(m + i), z));
    _mm256_storeu_ps(v + i, _mm256_add_ps(_mm256_loadu_ps(v + i), z));
  }
  for (; i < n; ++i) {
    float z = zero * g[i];
    p[i] += z, m[i] += z, v[i] += z;
  }
}

#endif

void in_place_plain(float *p, float *m, float *v, const float *g, int64_t n,
                    float zero) {
  for (int64_t i = 0; i < n; ++i) {
    float z = zero * g[i];
    p[i] += z, m[i] += z, v[i] += z;
  }
}

struct Timing {
  double best = 0, median = 0; // seconds
};

template <class Body> double seconds(Body &&body) {
  auto t0 = std::chrono::steady_clock::now();
  body();
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count();
}

Timing summarize(std::vector<double> secs) {
  std::sort(secs.begin(), secs.end());
  return {secs.front(), secs[secs.size() / 2]};
}

void report(const char *name, double bytes_per_elem, int64_t n, Timing t) {
  std::printf("%-10s %4.0f B/elem  best %7.2f GB/s  median %7.2f GB/s  "
              "(%.3f s best)\n",
              name, bytes_per_elem, bytes_per_elem * n / t.best * 1e-9,
              bytes_per_elem * n / t.median * 1e-9, t.best);
}

} // namespace

int main(int argc, char **argv) {
  int64_t n = int64_t(256) << 20;
  int threads = std::max(1u, std::thread::hardware_concurrency());
  int iters = 5;
  SimdPath path = active_simd_path();
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc)
      usage_error("missing value for " + flag);
    std::string value = argv[++i];
    if (flag == "--params")
      n = parse_count("--params", value);
    else if (flag == "--threads")
      threads = int(parse_count("--threads", value));
    else if (flag == "--iters")
      iters = int(parse_count("--iters", value));
    else if (flag == "--path") {
      if (value == "scalar")
        path = SimdPath::Scalar;
      else if (value == "avx2")
        path = SimdPath::Avx2;
      else if (value == "avx512")
        path = SimdPath::Avx512;
      else
        usage_error("unknown --path " + value);
      if (!simd_path_supported(path))
        usage_error("this CPU cannot run --path " + value);
    } else
      usage_error("unknown flag " + flag);
  }

  ThreadPool pool(threads);
  HostBuffer<float> p = allocate(n), m = allocate(n), v = allocate(n),
                    g = allocate(n);
  // bf16 masters and gradients; the moments are m and v above.
  HostBuffer<uint16_t> p16 = allocate<uint16_t>(n), g16 = allocate<uint16_t>(n);
  std::printf("%d threads, path %s, %lld params, %.2f GiB of p/m/v/g\n",
              threads, simd_path_name(path), (long long)n,
              4.0 * 4 * n / double(1 << 30));

  // Interleaved rounds, so that load from other processes on a shared machine
  // hits every measurement alike; the best round of each is reported.
  //
  // (a) Bandwidth ceilings. triad: a = b + s*c, 12 B/elem as STREAM counts it
  // (the write-allocate read of a is not counted), with a = p, b = m, c = g.
  // in_place: 28 B/elem, see in_place_avx512.
  // (b) AdamW, one step per round. (c) The global grad norm over g.
  float *pp = p.get(), *mp = m.get(), *vp = v.get();
  const float *gp = g.get();
  fill(pool, p.get(), n, 0.0f, 0.05f);
  fill(pool, m.get(), n, 0.0f, 0.0f);
  fill(pool, v.get(), n, 0.0f, 0.0f);
  fill(pool, g.get(), n, 0.0f, 1e-2f);
  uint16_t *p16p = p16.get(), *g16p = g16.get();
  pool.parallel_for(n, kGrain, [=](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) { // the fp32 values' top halves
      uint32_t pb, gb;
      std::memcpy(&pb, pp + i, 4);
      std::memcpy(&gb, gp + i, 4);
      p16p[i] = uint16_t(pb >> 16), g16p[i] = uint16_t(gb >> 16);
    }
  });
  volatile float zero_source = 0.0f;
  const float zero = zero_source;
  GradSpan span{gp, n};
  GradSpanBf16 span16{g16p, n};
  AdamWHyper hyper;
  double sink = 0;
  auto in_place_kernel = in_place_plain;
#ifdef MT_X86
  if (cpu_features().avx512f)
    in_place_kernel = in_place_avx512;
  else if (cpu_features().avx2)
    in_place_kernel = in_place_avx2;
#endif
  std::vector<double> triad_s, in_place_s, adamw_s, norm_s, adamw16_s, norm16_s,
      pack_s, pack_scalar_s, add_s, add_scalar_s;
  // The packs write into g16, which nothing reads afterwards.
  auto pack = [&](SimdPath on) {
    return seconds([&] {
      pool.parallel_for(n, kGrain, [=](int64_t lo, int64_t hi) {
        to_bf16_nearest(g16p + lo, pp + lo, hi - lo, on);
      });
    });
  };
  // The additions add g into g16 as well.
  auto add = [&](SimdPath on) {
    return seconds([&] {
      pool.parallel_for(n, kGrain, [=](int64_t lo, int64_t hi) {
        add_to_bf16(g16p + lo, gp + lo, hi - lo, on);
      });
    });
  };
  // Round 0 warms up (page faults, frequency) and is not counted.
  for (int round = 0; round <= iters; ++round) {
    double t_triad = seconds([&] {
      pool.parallel_for(n, kGrain, [=](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i)
          pp[i] = mp[i] + 0.5f * gp[i];
      });
    });
    double t_in_place = seconds([&] {
      pool.parallel_for(n, kGrain, [=](int64_t lo, int64_t hi) {
        in_place_kernel(pp + lo, mp + lo, vp + lo, gp + lo, hi - lo, zero);
      });
    });
    hyper.step = round + 1;
    double t_adamw = seconds(
        [&] { adamw_update(pp, mp, vp, gp, n, hyper, 1.0f, &pool, path); });
    double t_norm =
        seconds([&] { sink += grad_sum_squares(&span, 1, &pool, path); });
    double t_adamw16 = seconds([&] {
      adamw_update_bf16(p16p, mp, vp, g16p, n, hyper, 1.0f,
                        uint32_t(round), 0, &pool, path);
    });
    double t_norm16 =
        seconds([&] { sink += grad_sum_squares(&span16, 1, &pool, path); });
    double t_pack = pack(path), t_pack_scalar = pack(SimdPath::Scalar);
    double t_add = add(path), t_add_scalar = add(SimdPath::Scalar);
    if (round == 0)
      continue;
    add_s.push_back(t_add);
    add_scalar_s.push_back(t_add_scalar);
    pack_s.push_back(t_pack);
    pack_scalar_s.push_back(t_pack_scalar);
    adamw16_s.push_back(t_adamw16);
    norm16_s.push_back(t_norm16);
    triad_s.push_back(t_triad);
    in_place_s.push_back(t_in_place);
    adamw_s.push_back(t_adamw);
    norm_s.push_back(t_norm);
  }
  Timing triad = summarize(triad_s), in_place = summarize(in_place_s),
         adamw = summarize(adamw_s), norm = summarize(norm_s),
         adamw16 = summarize(adamw16_s), norm16 = summarize(norm16_s),
         packed = summarize(pack_s), packed_scalar = summarize(pack_scalar_s),
         added = summarize(add_s), added_scalar = summarize(add_scalar_s);

  report("triad", 12, n, triad);
  report("in_place", 28, n, in_place);
  report("adamw", 28, n, adamw);
  report("grad_norm", 4, n, norm);
  double adamw_gbs = 28.0 * n / adamw.best;
  std::printf("adamw / triad: %.0f%%, adamw / in_place: %.0f%% (best rounds)\n",
              100.0 * adamw_gbs / (12.0 * n / triad.best),
              100.0 * adamw_gbs / (28.0 * n / in_place.best));
  std::printf("adamw params/s: %.4g best, %.4g median\n", n / adamw.best,
              n / adamw.median);
  report("adamw_bf16", 22, n, adamw16);
  report("norm_bf16", 2, n, norm16);
  std::printf("adamw_bf16 params/s: %.4g best, %.4g median; bf16 / fp32: "
              "%.2fx best, %.2fx median\n",
              n / adamw16.best, n / adamw16.median, adamw.best / adamw16.best,
              adamw.median / adamw16.median);
  report("pack_bf16", 6, n, packed);
  report("pack_scalar", 6, n, packed_scalar);
  std::printf("pack %s / scalar: %.2fx best, %.2fx median\n",
              simd_path_name(path), packed_scalar.best / packed.best,
              packed_scalar.median / packed.median);
  report("add_bf16", 8, n, added);
  report("add_scalar", 8, n, added_scalar);
  std::printf("add %s / scalar: %.2fx best, %.2fx median\n",
              simd_path_name(path), added_scalar.best / added.best,
              added_scalar.median / added.median);
  return std::isfinite(sink) ? 0 : 1;
}
