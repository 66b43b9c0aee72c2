//===- WeightInit.cpp - the initial weights of a run ----------------------===//

#include "runtime/trainer/WeightInit.h"

#include "runtime/exec/Error.h"
#include "runtime/exec/HostStore.h"
#include "runtime/host/Bf16.h"
#include "runtime/host/ThreadPool.h"
#include "runtime/trainer/AtomicFile.h"
#include "runtime/trainer/Safetensors.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <memory>
#include <vector>

namespace mtrt {

namespace {

std::vector<int64_t> shape_of(const ParamDesc &d) {
  return std::vector<int64_t>(d.shape, d.shape + d.rank);
}

constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ull;

uint64_t splitmix64(uint64_t &state) {
  uint64_t z = (state += kGamma);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in (0, 1]: never 0, so the log below is finite.
double uniform(uint64_t &state) {
  return (double(splitmix64(state) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

// A normal param is filled in blocks of kBlock elements, each from its own
// stream, so the values do not depend on which thread fills which block.
// Even, so that a Box-Muller pair never straddles two blocks.
constexpr int64_t kBlock = int64_t(1) << 16;
static_assert(kBlock % 2 == 0, "Box-Muller pairs must stay inside a block");

uint64_t param_seed(uint64_t seed, int q) {
  return seed * kGamma + uint64_t(q) * 0xd1b54a32d192ed03ull;
}

// Block b starts from output b (counting from 0) of the param's splitmix64
// stream: distinct, well-mixed seeds, each computable without the others.
uint64_t block_seed(uint64_t param, int64_t block) {
  uint64_t state = param + uint64_t(block) * kGamma;
  return splitmix64(state);
}

// Box-Muller: portable, unlike std::normal_distribution, whose output
// differs between standard libraries.
void fill_normal(float *x, int64_t n, double stddev, uint64_t seed) {
  uint64_t state = seed;
  constexpr double kTwoPi = 6.283185307179586;
  for (int64_t i = 0; i < n; i += 2) {
    double r = std::sqrt(-2.0 * std::log(uniform(state)));
    double a = kTwoPi * uniform(state);
    x[i] = float(stddev * r * std::cos(a));
    if (i + 1 < n)
      x[i + 1] = float(stddev * r * std::sin(a));
  }
}

// The normal params of a run, cut into blocks numbered across all of them,
// so that one parallel_for balances many small params and a few big ones.
struct NormalBlocks {
  std::vector<int> params;
  std::vector<int64_t> first; // first[i]: the number of params[i]'s block 0
  int64_t total = 0;

  void add(int q, int64_t numel) {
    params.push_back(q);
    first.push_back(total);
    total += (numel + kBlock - 1) / kBlock;
  }
};

void fill_normal_blocks(HostStore &store, const NormalBlocks &blocks,
                        uint64_t seed, host::ThreadPool *pool) {
  auto fill = [&](int64_t lo, int64_t hi) {
    std::vector<float> block; // bf16 masters: a block drawn in float first
    // The param holding global block lo; later ones follow in order.
    size_t i = size_t(std::upper_bound(blocks.first.begin(),
                                       blocks.first.end(), lo) -
                      blocks.first.begin()) - 1;
    for (int64_t g = lo; g < hi; ++g) {
      while (i + 1 < blocks.params.size() && blocks.first[i + 1] <= g)
        ++i;
      const int q = blocks.params[i];
      const int64_t b = g - blocks.first[i];
      const int64_t begin = b * kBlock;
      const int64_t n =
          std::min(kBlock, store.program().params[q].numel - begin);
      const uint64_t s = block_seed(param_seed(seed, q), b);
      if (uint16_t *bf16 = store.values_bf16(q)) {
        block.resize(size_t(kBlock));
        fill_normal(block.data(), n, 0.02, s);
        for (int64_t k = 0; k < n; ++k)
          bf16[begin + k] = bf16_nearest(block[k]);
      } else {
        fill_normal(store.values(q) + begin, n, 0.02, s);
      }
    }
  };
  if (pool)
    pool->parallel_for(blocks.total, 1, fill);
  else
    fill(0, blocks.total);
}

void load_param(const SafetensorsReader &file, HostStore &store, int q) {
  const ParamDesc &d = store.program().params[q];
  if (!file.find(d.name))
    fail("the weights have no tensor '", d.name, "' (", file.path(),
         "); --init random starts from random weights instead");
  if (uint16_t *bf16 = store.values_bf16(q))
    file.read_bf16(d.name, shape_of(d), bf16);
  else
    file.read_f32(d.name, shape_of(d), store.values(q));
}

} // namespace

float default_fill(const char *name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  bool zero = n.find("bias") != std::string::npos ||
              n.find("beta") != std::string::npos ||
              (n.size() >= 2 && n.compare(n.size() - 2, 2, ".b") == 0);
  return zero ? 0.0f : 1.0f;
}

void init_from_file(HostStore &store, const std::string &path) {
  if (!file_exists(path))
    fail("no initial weights at ", path,
         " (--init onnx reads the weights codegen wrote from the ONNX "
         "initializers; pass --weights F, or --init random)");
  SafetensorsReader file(path);
  const Program &p = store.program();
  for (int q = 0; q < p.num_params; ++q)
    if (p.params[q].tie < 0)
      load_param(file, store, q);
}

void init_random(HostStore &store, uint64_t seed, const std::string &path,
                 host::ThreadPool *pool) {
  const Program &p = store.program();
  bool frozen = false;
  NormalBlocks normal;
  for (int q = 0; q < p.num_params; ++q) {
    const ParamDesc &d = p.params[q];
    if (d.tie >= 0)
      continue;
    if (d.frozen) {
      frozen = true;
      continue;
    }
    ParamInit how = d.init;
    if (how == ParamInit::Auto)
      how = d.rank >= 2 ? ParamInit::Normal
                        : (default_fill(d.name) == 0.0f ? ParamInit::Zeros
                                                        : ParamInit::Ones);
    if (how == ParamInit::Normal) {
      normal.add(q, d.numel);
    } else {
      const float value = how == ParamInit::Ones ? 1.0f : 0.0f;
      if (uint16_t *bf16 = store.values_bf16(q))
        std::fill(bf16, bf16 + d.numel, bf16_nearest(value));
      else
        std::fill(store.values(q), store.values(q) + d.numel, value);
    }
  }
  fill_normal_blocks(store, normal, seed, pool);
  if (frozen)
    init_frozen(store, path);
}

void init_frozen(HostStore &store, const std::string &path) {
  const Program &p = store.program();
  bool any = false;
  for (int q = 0; q < p.num_params; ++q)
    any |= p.params[q].tie < 0 && p.params[q].frozen;
  if (!any)
    return;
  if (!file_exists(path))
    fail("the frozen tables of this model (rope tables and the like) need ",
         path, " even with --init random or --resume (pass --weights F)");
  SafetensorsReader file(path);
  for (int q = 0; q < p.num_params; ++q)
    if (p.params[q].tie < 0 && p.params[q].frozen)
      load_param(file, store, q);
}

} // namespace mtrt
