//===- ConformanceTest.cpp - schedule semantics on every backend ----------===//
//
// Written once, run on every backend compiled in and available here (CUDA
// cases skip on machines without a GPU). Stress mode must give the same bits
// as a normal run, and removing any single Wait from the toy schedule must
// be caught by stress mode: NaN from a poisoned buffer or a mismatch.
//
//===----------------------------------------------------------------------===//

#include "ToyProgram.h"
#include "ToyRun.h"

#include "runtime/exec/BackendRegistry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <future>

using namespace mtrt;
using namespace mtrt::toy;

namespace {

class Conformance : public ::testing::TestWithParam<std::string> {
protected:
  void SetUp() override {
    for (const BackendEntry &e : backends()) {
      std::string why;
      if (e.name == GetParam() && e.available && !e.available(&why))
        GTEST_SKIP() << GetParam() << " is not available: " << why;
    }
  }
  ToyRunOptions options() const {
    ToyRunOptions o;
    o.backend = GetParam();
    o.steps = 3;
    return o;
  }
};

TEST_P(Conformance, StressModeGivesTheSameBits) {
  ToyProgram toy(2);
  ToyRunOptions o = options();
  ToyRunResult normal = run_toy(toy.program(), o);
  ASSERT_TRUE(normal.finite());
  o.stress = true;
  for (uint64_t seed : {1u, 2u}) {
    o.seed = seed;
    ToyRunResult stressed = run_toy(toy.program(), o);
    EXPECT_TRUE(stressed.same_bits(normal)) << "stress seed " << seed;
  }
}

TEST_P(Conformance, StressModeWithGradAccumulationGivesTheSameBits) {
  ToyProgram toy(1);
  ToyRunOptions o = options();
  o.grad_accum = 2;
  o.steps = 2;
  ToyRunResult normal = run_toy(toy.program(), o);
  o.stress = true;
  o.seed = 5;
  EXPECT_TRUE(run_toy(toy.program(), o).same_bits(normal));
}

TEST_P(Conformance, EveryMissingWaitIsCaughtByStressMode) {
  if (GetParam() == "cudaemu")
    GTEST_SKIP() << "emulated kernels run a thousand times slower than the "
                    "host tasks, so the device's own backlog hides a missing "
                    "host-to-device wait; the real cuda backend runs this";
  ToyProgram reference_toy(2);
  const ToyRunOptions base = options();
  const ToyRunResult reference = run_toy(reference_toy.program(), base);
  const std::vector<int> waits = reference_toy.necessary_waits();
  ASSERT_GE(waits.size(), 10u);
  constexpr int kAttempts = 12;
  // Returns the stressed runs it took to catch the mutation, 0 if none did.
  auto runs_to_catch = [&](int w) {
    ToyProgram toy(2);
    toy.commands().erase(toy.commands().begin() + w);
    toy.commit();
    ToyRunOptions o = base;
    o.stress = true;
    o.stop_on_mismatch = &reference;
    for (int attempt = 0; attempt < kAttempts; ++attempt) {
      o.seed = uint64_t(1000 + 17 * w + attempt);
      ToyRunResult r = run_toy(toy.program(), o);
      if (!r.finite() || !r.same_bits(reference))
        return attempt + 1;
    }
    return 0;
  };
  // Stressed runs mostly sleep: several at once cost little CPU.
  constexpr size_t kParallel = 4;
  std::vector<int> runs(waits.size(), 0);
  for (size_t i = 0; i < waits.size(); i += kParallel) {
    std::vector<std::future<int>> jobs;
    for (size_t j = i; j < std::min(waits.size(), i + kParallel); ++j)
      jobs.push_back(std::async(std::launch::async, runs_to_catch, waits[j]));
    for (size_t j = 0; j < jobs.size(); ++j)
      runs[i + j] = jobs[j].get();
  }
  int total = 0;
  for (size_t i = 0; i < waits.size(); ++i) {
    EXPECT_GT(runs[i], 0) << "removing " << reference_toy.describe(waits[i])
                          << " went unnoticed in " << kAttempts
                          << " stressed runs";
    total += runs[i];
  }
  std::printf("%zu necessary waits of %zu, each caught; %.1f stressed runs "
              "per wait on average\n",
              waits.size(), reference_toy.waits().size(),
              double(total) / double(waits.size()));
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const BackendEntry &e : backends())
    names.push_back(e.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Backends, Conformance,
                         ::testing::ValuesIn(backend_names()),
                         [](const ::testing::TestParamInfo<std::string> &i) {
                           return i.param;
                         });

} // namespace
