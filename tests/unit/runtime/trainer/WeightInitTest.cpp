//===- WeightInitTest.cpp - --init random: thread-count independence ------===//

#include "runtime/exec/HostStore.h"
#include "runtime/exec/Program.h"
#include "runtime/host/ThreadPool.h"
#include "runtime/trainer/WeightInit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

using namespace mtrt;

namespace {

enum { kBig, kOdd, kSmall, kBias, kNorm, kTied, kNumParams };

// One unit owning trainable params of the shapes init_random treats
// differently: a big matrix (16 blocks), one whose size is odd and not a
// whole number of blocks, a tiny one, rank-1 fills, and a tie.
class InitProgram {
public:
  InitProgram() {
    params_ = {
        {"big.weight", 2, {1024, 1024}, 1 << 20, -1, false, false, 0},
        {"odd.weight", 2, {3, 43691}, 3 * 43691, -1, false, false, 0},
        {"small.weight", 2, {3, 5}, 15, -1, false, false, 0},
        {"small.bias", 1, {5}, 5, -1, false, false, 0},
        {"norm.weight", 1, {5}, 5, -1, false, false, 0},
        {"head.weight", 2, {5, 3}, 15, kSmall, true, false, 0},
    };
    for (int q = 0; q < kNumParams; ++q) {
      held_.push_back(q);
      offsets_.push_back(unit_.elems);
      unit_.elems += params_[q].numel;
    }
    unit_.name = "u0";
    unit_.kind = "layer";
    unit_.num_params = kNumParams;
    unit_.params = held_.data();
    unit_.offsets = offsets_.data();
    unit_.num_owned = int(owned_.size());
    unit_.owned = owned_.data();
    program_.model_name = "init";
    program_.plan_hash = "init-plan";
    program_.num_params = kNumParams;
    program_.params = params_.data();
    program_.num_units = 1;
    program_.units = &unit_;
  }
  const Program &program() const { return program_; }

private:
  std::vector<ParamDesc> params_;
  std::vector<int> held_;
  std::vector<int64_t> offsets_;
  std::vector<int> owned_ = {kBig, kOdd, kSmall, kBias, kNorm};
  UnitDesc unit_{};
  Program program_{};
};

std::vector<float> values(const HostStore &store, int q) {
  const float *x = store.values(q);
  return std::vector<float>(x, x + store.program().params[q].numel);
}

bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every trainable param's values after init_random with this seed and pool.
std::vector<std::vector<float>> init(const Program &p, uint64_t seed,
                                     host::ThreadPool *pool) {
  HostStore store(p, StorageFormat::F32, {});
  init_random(store, seed, "/nonexistent/weights.safetensors", pool);
  std::vector<std::vector<float>> out;
  for (int q = 0; q < p.num_params; ++q)
    if (store.trainable(q))
      out.push_back(values(store, q));
  return out;
}

TEST(WeightInitTest, ValuesDoNotDependOnTheThreadCount) {
  InitProgram prog;
  host::ThreadPool one(1), three(3);
  auto serial = init(prog.program(), 7, nullptr);
  auto a = init(prog.program(), 7, &one);
  auto b = init(prog.program(), 7, &three);
  ASSERT_EQ(serial.size(), size_t(kNumParams - 1));
  for (size_t i = 0; i < serial.size(); ++i) {
    EXPECT_TRUE(same_bits(serial[i], a[i])) << "param " << i;
    EXPECT_TRUE(same_bits(serial[i], b[i])) << "param " << i;
  }
}

TEST(WeightInitTest, NormalHasMeanZeroAndStd002) {
  InitProgram prog;
  host::ThreadPool pool(3);
  const std::vector<float> x = init(prog.program(), 1, &pool)[kBig];
  const double n = double(x.size());
  double sum = 0, sq = 0;
  for (float v : x)
    sum += v;
  const double mean = sum / n;
  for (float v : x)
    sq += (v - mean) * (v - mean);
  const double sd = std::sqrt(sq / (n - 1));
  // Six standard errors: sigma / sqrt(n) for the mean, about
  // sigma / sqrt(2n) for the std of a normal sample.
  EXPECT_NEAR(mean, 0.0, 6 * 0.02 / std::sqrt(n));
  EXPECT_NEAR(sd, 0.02, 6 * 0.02 / std::sqrt(2 * n));
}

TEST(WeightInitTest, ParamsSeedsAndBlocksDiffer) {
  InitProgram prog;
  host::ThreadPool pool(2);
  auto s1 = init(prog.program(), 1, &pool);
  auto s2 = init(prog.program(), 2, &pool);
  EXPECT_FALSE(same_bits(s1[kBig], s2[kBig]));
  EXPECT_FALSE(same_bits(s1[kSmall], s2[kSmall]));
  // Params of one seed do not share a stream.
  std::vector<float> head(s1[kBig].begin(), s1[kBig].begin() + 15);
  EXPECT_FALSE(same_bits(head, s1[kSmall]));
  // Neither do the blocks of one param (blocks are 1 << 16 elements).
  const auto &big = s1[kBig];
  EXPECT_NE(std::memcmp(big.data(), big.data() + (1 << 16),
                        (1 << 16) * sizeof(float)),
            0);
}

TEST(WeightInitTest, RankOneParamsAreFilled) {
  InitProgram prog;
  host::ThreadPool pool(2);
  auto s = init(prog.program(), 3, &pool);
  EXPECT_TRUE(same_bits(s[kBias], std::vector<float>(5, 0.0f)));
  EXPECT_TRUE(same_bits(s[kNorm], std::vector<float>(5, 1.0f)));
}

} // namespace
