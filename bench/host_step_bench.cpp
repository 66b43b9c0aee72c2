//===- host_step_bench.cpp - a layer's deferred AdamW and pack on the host ===//
//
// The host work in front of each forward fetch: the deferred AdamW of one
// Llama-shaped layer (q, k, v, o [H, H]; gate, up [I, H]; down [H, I]; two
// norms [H]) and its pack to bf16 in staging chunks, as the executor runs
// it. Times, in interleaved rounds over the same store:
//   adamw+packs  AdamW(u) over the whole unit, then the packs
//   fused        the packs alone, applying the pending update block by
//                block (HostStore::pack), as the executor runs them now
// and reports both and their ratio, with the step's other host work on the
// same unit beside them (accumulate of landed gradients, the sum of squares).
//
//   host_step_bench [--hidden 4096] [--intermediate 11008] [--threads N]
//                   [--iters 5] [--master f32|bf16] [--chunk 8388608]
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/HostStore.h"
#include "runtime/host/ThreadPool.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

using namespace mtrt;

namespace {

[[noreturn]] void usage_error(const std::string &what) {
  std::fprintf(stderr,
               "error: %s\nusage: host_step_bench [--hidden N] "
               "[--intermediate N] [--threads N] [--iters N] "
               "[--master f32|bf16] [--chunk N]\n",
               what.c_str());
  std::exit(2);
}

int64_t parse_positive(const std::string &flag, const std::string &text) {
  char *end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || v <= 0)
    usage_error(flag + " takes a positive integer (got '" + text + "')");
  return v;
}

// One unit holding a Llama layer's params, all owned and trained.
struct LayerProgram {
  std::vector<ParamDesc> params;
  std::vector<int> order;
  std::vector<int64_t> offsets;
  std::vector<UnitDesc> units;
  Program program{};

  LayerProgram(int64_t h, int64_t i, MasterFormat master) {
    const struct {
      const char *name;
      int64_t rows, cols;
    } shapes[] = {{"q", h, h},    {"k", h, h},     {"v", h, h},
                  {"o", h, h},    {"gate", i, h},  {"up", i, h},
                  {"down", h, i}, {"norm1", h, 0}, {"norm2", h, 0}};
    int64_t at = 0;
    for (const auto &s : shapes) {
      const int rank = s.cols ? 2 : 1;
      const int64_t numel = s.cols ? s.rows * s.cols : s.rows;
      params.push_back(
          {s.name, rank, {s.rows, s.cols, 0, 0}, numel, -1, false, false, 0});
      order.push_back(int(order.size()));
      offsets.push_back(at);
      at += numel;
    }
    units.push_back({"layer", "layer", at, int(order.size()), order.data(),
                     offsets.data(), int(order.size()), order.data()});
    program.model_name = "host-step-bench";
    program.plan_hash = "0";
    program.batch = program.seq_len = program.micro_batches = 1;
    program.vocab = 1;
    program.num_params = int(params.size());
    program.params = params.data();
    program.num_units = 1;
    program.units = units.data();
    program.master = master;
  }
};

template <class Fn> double seconds(Fn &&fn) {
  auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

struct Timing {
  double best, median;
};
Timing summarize(std::vector<double> s) {
  std::sort(s.begin(), s.end());
  return {s.front(), s[s.size() / 2]};
}

} // namespace

int main(int argc, char **argv) {
  int64_t hidden = 4096, intermediate = 11008, chunk = 8388608;
  int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  int iters = 5;
  MasterFormat master = MasterFormat::F32;
  for (int a = 1; a < argc; ++a) {
    const std::string flag = argv[a];
    if (a + 1 >= argc)
      usage_error("missing value for " + flag);
    const std::string value = argv[++a];
    if (flag == "--hidden")
      hidden = parse_positive(flag, value);
    else if (flag == "--intermediate")
      intermediate = parse_positive(flag, value);
    else if (flag == "--threads")
      threads = int(parse_positive(flag, value));
    else if (flag == "--iters")
      iters = int(parse_positive(flag, value));
    else if (flag == "--chunk")
      chunk = parse_positive(flag, value);
    else if (flag == "--master" && (value == "f32" || value == "bf16"))
      master = value == "bf16" ? MasterFormat::Bf16 : MasterFormat::F32;
    else
      usage_error("unknown flag or value: " + flag + " " + value);
  }

  LayerProgram layer(hidden, intermediate, master);
  const int64_t n = layer.units[0].elems;
  OptimizerConfig config;
  HostStore store(layer.program, StorageFormat::Bf16, config);
  host::ThreadPool pool(threads);
  std::vector<float> landed(static_cast<size_t>(n));
  pool.parallel_for(n, 1 << 15, [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k)
      landed[size_t(k)] = 1e-3f * float(std::sin(double(k)));
  });
  std::vector<uint16_t> staging[2] = {
      std::vector<uint16_t>(static_cast<size_t>(chunk)),
      std::vector<uint16_t>(static_cast<size_t>(chunk))};
  std::printf("%d threads, one layer of %lld params (hidden %lld, "
              "intermediate %lld), %s masters, chunks of %lld\n",
              threads, static_cast<long long>(n),
              static_cast<long long>(hidden),
              static_cast<long long>(intermediate),
              master == MasterFormat::Bf16 ? "bf16" : "fp32",
              static_cast<long long>(chunk));

  auto packs = [&] {
    for (int64_t begin = 0, k = 0; begin < n; begin += chunk, ++k)
      store.pack(0, staging[k % 2].data(), &pool, begin,
                 std::min(chunk, n - begin));
  };
  std::vector<double> plain_s, fused_s, accumulate_s, squares_s;
  int64_t step = 0;
  // Round 0 warms up (page faults, frequency) and is not counted.
  for (int round = 0; round <= iters; ++round) {
    for (int fused = 0; fused < 2; ++fused) {
      const double t_acc =
          seconds([&] { store.accumulate(0, landed.data(), &pool); });
      const double t_sq = seconds([&] { store.sum_unit_squares(0, &pool); });
      store.compute_grad_norm(&pool);
      store.schedule_update(++step, 1e-4);
      const double t = seconds([&] {
        if (!fused)
          store.adamw(0, &pool);
        packs();
      });
      if (store.any_pending()) {
        std::fprintf(stderr, "error: the packs left part of the update\n");
        return 1;
      }
      if (round == 0)
        continue;
      (fused ? fused_s : plain_s).push_back(t);
      accumulate_s.push_back(t_acc);
      squares_s.push_back(t_sq);
    }
  }
  const Timing plain = summarize(plain_s), fused = summarize(fused_s),
               acc = summarize(accumulate_s), sq = summarize(squares_s);
  auto row = [&](const char *name, Timing t) {
    std::printf("%-12s best %8.2f ms  median %8.2f ms  (%.3g params/s)\n", name,
                1e3 * t.best, 1e3 * t.median, double(n) / t.best);
  };
  row("adamw+packs", plain);
  row("fused", fused);
  row("accumulate", acc);
  row("sum_squares", sq);
  std::printf("adamw+packs / fused: %.2fx best, %.2fx median\n",
              plain.best / fused.best, plain.median / fused.median);
  return 0;
}
