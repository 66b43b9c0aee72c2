//===- CheckpointTest.cpp - round trip, corruption, crash safety ----------===//

#include "TempDir.h"
#include "ToyProgram.h"
#include "ToyRun.h"

#include "runtime/exec/Error.h"
#include "runtime/exec/HostStore.h"
#include "runtime/host/Bf16.h"
#include "runtime/trainer/Checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

using namespace mtrt;
using namespace mtrt::toy;
using mtrt::testing::TempDir;

namespace {

std::string error_of(const std::function<void()> &fn) {
  try {
    fn();
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

// A store with distinct masters and moments.
void fill_state(HostStore &store, float base) {
  const Program &p = store.program();
  for (int q = 0; q < p.num_params; ++q)
    if (store.trainable(q))
      for (int64_t i = 0; i < p.params[q].numel; ++i) {
        store.values(q)[i] = base + float(q) + 0.001f * float(i);
        store.adam_m(q)[i] = -base * float(i);
        store.adam_v(q)[i] = base * 0.5f + float(i);
      }
}

bool same_state(HostStore &a, HostStore &b) {
  const Program &p = a.program();
  for (int q = 0; q < p.num_params; ++q)
    if (a.trainable(q)) {
      size_t n = size_t(p.params[q].numel) * 4;
      if (std::memcmp(a.values(q), b.values(q), n) ||
          std::memcmp(a.adam_m(q), b.adam_m(q), n) ||
          std::memcmp(a.adam_v(q), b.adam_v(q), n))
        return false;
    }
  return true;
}

CheckpointManifest manifest(int64_t step, const Program &p) {
  CheckpointManifest m;
  m.model = p.model_name;
  m.plan_hash = p.plan_hash;
  m.step = step;
  m.optimizer_steps = step;
  m.data_position = step * 4;
  m.seed = 11;
  m.flags = {{"lr", "0.0003"}, {"precision", "fp32"}};
  return m;
}

TEST(CheckpointTest, RoundTrip) {
  TempDir dir;
  ToyProgram toy(2);
  HostStore a(toy.program(), StorageFormat::F32, {});
  fill_state(a, 1.5f);
  std::string written =
      save_checkpoint(dir.path(), a, manifest(7, toy.program()));
  EXPECT_EQ(written, dir / "step-00000007");
  EXPECT_EQ(mtrt::testing::read_text(dir / "latest"), "step-00000007\n");

  HostStore b(toy.program(), StorageFormat::F32, {});
  b.grad(kW0)[0] = 5; // loading starts from clean accumulators
  CheckpointManifest m = load_checkpoint(dir.path(), b);
  EXPECT_TRUE(same_state(a, b));
  EXPECT_EQ(b.grad(kW0)[0], 0.0f);
  EXPECT_EQ(m.step, 7);
  EXPECT_EQ(m.optimizer_steps, 7);
  EXPECT_EQ(m.data_position, 28);
  EXPECT_EQ(m.seed, 11u);
  EXPECT_EQ(m.flags.at("lr"), "0.0003");
  // The checkpoint directory itself works as --resume too.
  HostStore c(toy.program(), StorageFormat::F32, {});
  load_checkpoint(written, c);
  EXPECT_TRUE(same_state(a, c));
}

TEST(CheckpointTest, ANewCheckpointReplacesThePreviousOne) {
  TempDir dir;
  ToyProgram toy(2);
  HostStore a(toy.program(), StorageFormat::F32, {});
  fill_state(a, 1.0f);
  save_checkpoint(dir.path(), a, manifest(2, toy.program()));
  fill_state(a, 2.0f);
  save_checkpoint(dir.path(), a, manifest(4, toy.program()));
  EXPECT_FALSE(mtrt::testing::exists(dir / "step-00000002/manifest.json"));
  HostStore b(toy.program(), StorageFormat::F32, {});
  EXPECT_EQ(load_checkpoint(dir.path(), b).step, 4);
  EXPECT_TRUE(same_state(a, b));
}

TEST(CheckpointTest, ACrashMidWriteLeavesThePreviousCheckpointLoadable) {
  for (const char *stage : {"before_rename", "before_latest"}) {
    TempDir dir;
    ToyProgram toy(2);
    HostStore old_state(toy.program(), StorageFormat::F32, {});
    fill_state(old_state, 1.0f);
    save_checkpoint(dir.path(), old_state, manifest(2, toy.program()));
    HostStore new_state(toy.program(), StorageFormat::F32, {});
    fill_state(new_state, 9.0f);
    struct Crash {};
    EXPECT_THROW(save_checkpoint(dir.path(), new_state,
                                 manifest(4, toy.program()),
                                 [&](const std::string &s) {
                                   if (s == stage)
                                     throw Crash{};
                                 }),
                 Crash);
    EXPECT_EQ(mtrt::testing::read_text(dir / "latest"), "step-00000002\n");
    HostStore b(toy.program(), StorageFormat::F32, {});
    EXPECT_EQ(load_checkpoint(dir.path(), b).step, 2) << stage;
    EXPECT_TRUE(same_state(old_state, b)) << stage;
    // The next save succeeds over the leftovers.
    save_checkpoint(dir.path(), new_state, manifest(4, toy.program()));
    EXPECT_EQ(load_checkpoint(dir.path(), b).step, 4);
    EXPECT_TRUE(same_state(new_state, b));
  }
}

TEST(CheckpointTest, AnotherPlanIsRejected) {
  TempDir dir;
  ToyProgram toy(2), other(2, "another-plan");
  HostStore a(toy.program(), StorageFormat::F32, {});
  save_checkpoint(dir.path(), a, manifest(1, toy.program()));
  HostStore b(other.program(), StorageFormat::F32, {});
  std::string e = error_of([&] { load_checkpoint(dir.path(), b); });
  EXPECT_EQ(e.rfind("error: checkpoint is from another plan (plan_hash "
                    "toy-plan-1, this trainer's is another-plan)",
                    0),
            0u)
      << e;
  EXPECT_NE(e.find("pass --resume-other-plan"), std::string::npos) << e;
  EXPECT_NE(e.find(dir / "step-00000001/manifest.json"), std::string::npos);
}

// Allowed, a plan with the same params (here: another micro-batch count)
// takes the state over as it is.
TEST(CheckpointTest, AnotherPlanWithTheSameParamsCarriesOverWhenAllowed) {
  TempDir dir;
  ToyProgram toy(2), other(3, "another-plan");
  HostStore a(toy.program(), StorageFormat::F32, {});
  fill_state(a, 1.25f);
  save_checkpoint(dir.path(), a, manifest(5, toy.program()));
  HostStore b(other.program(), StorageFormat::F32, {});
  EXPECT_EQ(load_checkpoint(dir.path(), b, /*other_plan=*/true).step, 5);
  EXPECT_TRUE(same_state(a, b));
}

// fp32 masters into a bf16-master plan round to nearest; bf16 masters into
// an fp32 plan widen exactly. The moments are fp32 in both.
TEST(CheckpointTest, MastersConvertBetweenFormats) {
  TempDir f32_dir, bf16_dir;
  ToyProgram toy(2);
  const Program &p = toy.program();
  Program p16 = p;
  p16.master = MasterFormat::Bf16;
  p16.plan_hash = "toy-plan-bf16";
  HostStore a(p, StorageFormat::F32, {});
  fill_state(a, 1.5f);
  save_checkpoint(f32_dir.path(), a, manifest(3, p));

  HostStore b(p16, StorageFormat::F32, {});
  EXPECT_NE(error_of([&] { load_checkpoint(f32_dir.path(), b); }), "");
  load_checkpoint(f32_dir.path(), b, /*other_plan=*/true);
  int trained = 0;
  for (int q = 0; q < p.num_params; ++q) {
    if (!a.trainable(q))
      continue;
    ++trained;
    const size_t n = size_t(p.params[q].numel);
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(b.values_bf16(q)[i], bf16_nearest(a.values(q)[i]))
          << p.params[q].name << "[" << i << "]";
    EXPECT_EQ(std::memcmp(a.adam_m(q), b.adam_m(q), n * 4), 0);
    EXPECT_EQ(std::memcmp(a.adam_v(q), b.adam_v(q), n * 4), 0);
  }
  EXPECT_GT(trained, 0);

  save_checkpoint(bf16_dir.path(), b, manifest(4, p16));
  HostStore c(p, StorageFormat::F32, {});
  EXPECT_EQ(load_checkpoint(bf16_dir.path(), c, /*other_plan=*/true).step, 4);
  for (int q = 0; q < p.num_params; ++q) {
    if (!a.trainable(q))
      continue;
    const size_t n = size_t(p.params[q].numel);
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(c.values(q)[i], bf16_widen(b.values_bf16(q)[i]));
    EXPECT_EQ(std::memcmp(c.adam_m(q), a.adam_m(q), n * 4), 0);
  }
}

// Allowed or not, the params must match: a trained param the plan does not
// have is an error naming it.
TEST(CheckpointTest, AnotherPlanWithOtherParamsIsAnError) {
  TempDir dir;
  ToyProgram toy(2);
  const Program &p = toy.program();
  HostStore a(p, StorageFormat::F32, {});
  save_checkpoint(dir.path(), a, manifest(1, p));
  std::vector<ParamDesc> renamed(p.params, p.params + p.num_params);
  const std::string old_name = renamed[kW0].name;
  renamed[kW0].name = "renamed.weight";
  Program px = p;
  px.params = renamed.data();
  px.plan_hash = "renamed-plan";
  HostStore b(px, StorageFormat::F32, {});
  std::string e = error_of([&] { load_checkpoint(dir.path(), b, true); });
  EXPECT_EQ(e.rfind("error: checkpoint has tensor '", 0), 0u) << e;
  EXPECT_NE(e.find(old_name), std::string::npos) << e;
  EXPECT_NE(e.find("which is no trainable param of this plan"),
            std::string::npos)
      << e;
}

TEST(CheckpointTest, MissingAndCorruptFilesAreErrorsNamingTheFile) {
  TempDir dir;
  ToyProgram toy(2);
  HostStore a(toy.program(), StorageFormat::F32, {});
  fill_state(a, 3.0f);
  HostStore b(toy.program(), StorageFormat::F32, {});
  auto load = [&] { return error_of([&] { load_checkpoint(dir.path(), b); }); };

  EXPECT_NE(
      load().find("no checkpoint there (" + dir / "latest" + " is missing)"),
      std::string::npos);
  EXPECT_NE(error_of([&] {
              load_checkpoint(dir / "nope", b);
            }).find("no such checkpoint directory"),
            std::string::npos);

  save_checkpoint(dir.path(), a, manifest(3, toy.program()));
  const std::string ckpt = dir / "step-00000003";
  const std::string state = ckpt + "/state.safetensors";
  const std::string good = mtrt::testing::read_text(state);

  // One flipped bit in the data: caught by the checksum.
  std::string flipped = good;
  flipped[flipped.size() - 3] ^= 0x10;
  mtrt::testing::write_bytes(state, flipped.data(), flipped.size());
  std::string e = load();
  EXPECT_NE(e.find("checkpoint state is corrupt: checksum"), std::string::npos)
      << e;
  EXPECT_NE(e.find(state), std::string::npos) << e;

  // Truncated.
  mtrt::testing::write_bytes(state, good.data(), good.size() - 100);
  e = load();
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find(state), std::string::npos) << e;

  // Missing.
  std::remove(state.c_str());
  e = load();
  EXPECT_EQ(e, "error: checkpoint state is missing (" + state + ")");

  // A corrupt manifest.
  mtrt::testing::write_bytes(state, good.data(), good.size());
  const std::string man = ckpt + "/manifest.json";
  mtrt::testing::write_bytes(man, "{\"format\": ", 11);
  e = load();
  EXPECT_NE(e.find("corrupt checkpoint manifest"), std::string::npos) << e;
  EXPECT_NE(e.find(man), std::string::npos) << e;

  // latest naming a checkpoint that is gone.
  mtrt::testing::write_bytes(dir / "latest", "step-00000009\n", 14);
  e = load();
  EXPECT_NE(e.find("step-00000009 named by " + dir / "latest" + " is missing"),
            std::string::npos)
      << e;
}

} // namespace
