//===- TrainerMainTest.cpp - the trainer binary's behaviour, end to end ---===//
//
// trainer_main on the toy program: logs, gradient dumps against the double
// reference, bitwise resume, stress mode, and the error lines.
//
//===----------------------------------------------------------------------===//

#include "TempDir.h"
#include "ToyProgram.h"

#include "runtime/exec/BackendRegistry.h"
#include "runtime/trainer/Json.h"
#include "runtime/trainer/LrSchedule.h"
#include "runtime/trainer/Safetensors.h"
#include "runtime/trainer/TrainerMain.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

using namespace mtrt;
using namespace mtrt::toy;
using mtrt::testing::TempDir;

namespace {

struct Outcome {
  int code;
  std::string out, err;
};

Outcome run_trainer(const Program &p, std::vector<std::string> args) {
  args.insert(args.begin(), "trainer");
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  int code = trainer_main(int(argv.size()), argv.data(), &p);
  Outcome o{code, ::testing::internal::GetCapturedStdout(),
            ::testing::internal::GetCapturedStderr()};
  return o;
}

class TrainerMainTest : public ::testing::Test {
protected:
  void SetUp() override {
    // In-process: trainer_main must not re-execute the test binary.
    ::setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
    tokens_.resize(301);
    for (size_t i = 0; i < tokens_.size(); ++i)
      tokens_[i] = uint32_t((i * 7 + i / 5) % V);
    data_ = dir_ / "tokens.u32";
    mtrt::testing::write_bytes(data_, tokens_.data(), tokens_.size() * 4);
    // weights.safetensors as codegen writes it: every untied param.
    ToyWeights w = toy_initial_weights(7);
    const Program &p = toy_.program();
    for (int q = 0; q < p.num_params; ++q)
      if (p.params[q].tie < 0)
        weights_[q].assign(w[q].begin(), w[q].end());
    SafetensorsWriter writer;
    for (int q = 0; q < p.num_params; ++q)
      if (p.params[q].tie < 0)
        writer.add(p.params[q].name,
                   std::vector<int64_t>(p.params[q].shape,
                                        p.params[q].shape + p.params[q].rank),
                   weights_[q].data());
    weights_path_ = dir_ / "weights.safetensors";
    writer.write(weights_path_);
  }

  Outcome train(std::vector<std::string> args) {
    args.insert(args.begin(), {"--data", data_, "--weights", weights_path_});
    return run_trainer(toy_.program(), args);
  }

  // Micro-batch mb of micro-step a of step t, from the token file.
  void window_tokens(int64_t t, int64_t a, int64_t A, int64_t mb,
                     std::vector<int32_t> &ids, std::vector<int32_t> &tg) {
    const int64_t n = (int64_t(tokens_.size()) - 1) / S, M = 2;
    ids.clear();
    tg.clear();
    for (int64_t r = 0; r < B; ++r) {
      int64_t w = ((t * A + a) * M * B + mb * B + r) % n;
      for (int64_t i = 0; i < S; ++i) {
        ids.push_back(int32_t(tokens_[size_t(w * S + i)]));
        tg.push_back(int32_t(tokens_[size_t(w * S + i + 1)]));
      }
    }
  }

  TempDir dir_;
  ToyProgram toy_{2};
  std::vector<uint32_t> tokens_;
  std::string data_, weights_path_;
  std::vector<float> weights_[kNumParams];
};

std::vector<JsonValue> read_jsonl(const std::string &path) {
  std::vector<JsonValue> out;
  std::string text = mtrt::testing::read_text(path), line;
  for (char c : text) {
    if (c == '\n') {
      out.push_back(parse_json(line));
      line.clear();
    } else {
      line += c;
    }
  }
  return out;
}

TEST_F(TrainerMainTest, TrainsAndLogsOneObjectPerStep) {
  const std::string log = dir_ / "log.jsonl";
  Outcome o = train(
      {"--steps", "3", "--lr", "1e-2", "--warmup", "1", "--log-jsonl", log});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("B/param"), std::string::npos) << o.out;
  std::vector<JsonValue> steps = read_jsonl(log);
  ASSERT_EQ(steps.size(), 3u);
  LrSchedule s;
  s.lr = 1e-2;
  s.warmup = 1;
  s.steps = 3;
  for (int t = 0; t < 3; ++t) {
    const JsonValue &r = steps[size_t(t)];
    EXPECT_EQ(r.find("step")->as_int(), t);
    EXPECT_TRUE(std::isfinite(r.find("loss")->as_double()));
    EXPECT_EQ(r.find("lr")->as_double(), s.at(t));
    EXPECT_GT(r.find("grad_norm")->as_double(), 0.0);
    EXPECT_GT(r.find("tokens_per_s")->as_double(), 0.0);
    EXPECT_EQ(r.find("tokens")->as_int(), 2 * B * S);
  }
  // Step 0's loss: the mean over both micro-batches, from the token file.
  ToyWeights w = toy_initial_weights(7);
  std::vector<int32_t> ids, tg;
  double want = 0;
  for (int mb = 0; mb < 2; ++mb) {
    window_tokens(0, 0, 1, mb, ids, tg);
    want += toy_loss_and_grads(w, ids, tg, 1.0, nullptr) / 2;
  }
  EXPECT_NEAR(steps[0].find("loss")->as_double(), want, 1e-5);
}

void check_dumped_grads(const std::string &path, const ToyWeights &want,
                        const Program &p) {
  SafetensorsReader r(path);
  std::vector<std::string> names;
  for (const TensorInfo &t : r.tensors())
    names.push_back(t.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{
                       "embed.gain", "embed.weight", "head.bias", "layer0.bias",
                       "layer0.weight", "layer1.bias", "layer1.weight"}));
  for (int q : {kEmbed, kW0, kB0, kW1, kB1, kHeadB, kGain}) {
    std::vector<float> g(size_t(p.params[q].numel));
    r.read_f32(p.params[q].name,
               std::vector<int64_t>(p.params[q].shape,
                                    p.params[q].shape + p.params[q].rank),
               g.data());
    for (size_t i = 0; i < g.size(); ++i)
      EXPECT_NEAR(g[i], want[q][i], 1e-6 + 1e-4 * std::fabs(want[q][i]))
          << p.params[q].name << "[" << i << "]";
  }
}

TEST_F(TrainerMainTest, DumpGradsWritesStepZerosAveragedGradients) {
  for (int A : {1, 2}) {
    const std::string dump =
        dir_ / ("grads" + std::to_string(A) + ".safetensors");
    Outcome o = train({"--steps", "2", "--grad-accum", std::to_string(A),
                       "--clip-grad", "1e-3", "--dump-grads", dump});
    ASSERT_EQ(o.code, 0) << o.err;
    ToyWeights w = toy_initial_weights(7), g(kNumParams);
    std::vector<int32_t> ids, tg;
    for (int a = 0; a < A; ++a)
      for (int mb = 0; mb < 2; ++mb) {
        window_tokens(0, a, A, mb, ids, tg);
        toy_loss_and_grads(w, ids, tg, 1.0 / double(A * 2 * N), &g);
      }
    check_dumped_grads(dump, g, toy_.program()); // unclipped
  }
}

TEST_F(TrainerMainTest, ResumeContinuesBitwise) {
  // The LR does not depend on --steps here, so a 2-step run is exactly the
  // first half of a 4-step one.
  const std::vector<std::string> math = {
      "--lr-schedule", "constant", "--warmup", "3", "--lr", "2e-2"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = math;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const std::string full = dir_ / "full.safetensors",
                    resumed = dir_ / "resumed.safetensors",
                    every = dir_ / "every.safetensors";
  const std::string log_full = dir_ / "full.jsonl",
                    log_resumed = dir_ / "resumed.jsonl";
  ASSERT_EQ(
      train(with({"--steps", "4", "--export", full, "--log-jsonl", log_full}))
          .code,
      0);
  Outcome first =
      train(with({"--steps", "2", "--checkpoint-dir", dir_ / "ckpt"}));
  ASSERT_EQ(first.code, 0) << first.err;
  Outcome second =
      train(with({"--steps", "4", "--resume", dir_ / "ckpt", "--export",
                  resumed, "--log-jsonl", log_resumed}));
  ASSERT_EQ(second.code, 0) << second.err;
  EXPECT_EQ(second.err, ""); // --steps does not matter to a constant LR
  EXPECT_EQ(mtrt::testing::read_text(full), mtrt::testing::read_text(resumed));
  std::vector<JsonValue> a = read_jsonl(log_full), b = read_jsonl(log_resumed);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(b[size_t(i)].find("step")->as_int(), i + 2);
    EXPECT_EQ(b[size_t(i)].find("loss")->text,
              a[size_t(i) + 2].find("loss")->text);
    EXPECT_EQ(b[size_t(i)].find("grad_norm")->text,
              a[size_t(i) + 2].find("grad_norm")->text);
  }
  // Other math is worth a warning (and no longer matches).
  Outcome other = train({"--steps", "3", "--resume", dir_ / "ckpt", "--lr",
                         "1e-3", "--lr-schedule", "constant"});
  ASSERT_EQ(other.code, 0) << other.err;
  EXPECT_NE(other.err.find("warning: --lr 0.001 differs from the "
                           "checkpoint's 0.02"),
            std::string::npos)
      << other.err;
  // Checkpoints along the way (flushing the deferred AdamW early) do not
  // change the math either.
  ASSERT_EQ(train(with({"--steps", "4", "--checkpoint-dir", dir_ / "ckpt2",
                        "--checkpoint-every", "1", "--export", every}))
                .code,
            0);
  EXPECT_EQ(mtrt::testing::read_text(full), mtrt::testing::read_text(every));
}

// With --resume-other-plan, a plan of the same params continues from another
// plan's checkpoint; the same program under another plan hash continues
// bitwise as its own would, with a warning.
TEST_F(TrainerMainTest, ResumeOtherPlanCarriesTheStateOver) {
  ToyProgram other(2, "other-plan");
  const std::vector<std::string> math = {"--lr-schedule", "constant", "--lr",
                                         "2e-2"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"--data", data_, "--weights", weights_path_};
    a.insert(a.end(), math.begin(), math.end());
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const std::string own = dir_ / "own.safetensors",
                    carried = dir_ / "carried.safetensors";
  ASSERT_EQ(
      run_trainer(toy_.program(),
                  with({"--steps", "1", "--checkpoint-dir", dir_ / "ckpt"}))
          .code,
      0);
  ASSERT_EQ(run_trainer(toy_.program(), with({"--steps", "3", "--resume",
                                              dir_ / "ckpt", "--export", own}))
                .code,
            0);
  Outcome o = run_trainer(other.program(),
                          with({"--steps", "3", "--resume", dir_ / "ckpt",
                                "--resume-other-plan", "--export", carried}));
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.err.find("warning: the checkpoint is from another plan "
                       "(plan_hash toy-plan-1): its weights and optimizer "
                       "state carry over, and training continues at step 1"),
            std::string::npos)
      << o.err;
  // The tensors' bytes after the safetensors header (which names the plan).
  auto tensors = [](const std::string &path) {
    std::string bytes = mtrt::testing::read_text(path);
    uint64_t header = 0;
    std::memcpy(&header, bytes.data(), 8);
    return bytes.substr(8 + header);
  };
  EXPECT_EQ(tensors(own), tensors(carried));
}

TEST_F(TrainerMainTest, StressModeMatchesANormalRunBitwise) {
  const std::string normal = dir_ / "normal.safetensors",
                    stressed = dir_ / "stressed.safetensors";
  ASSERT_EQ(train({"--steps", "2", "--export", normal}).code, 0);
  Outcome o =
      train({"--steps", "2", "--stress", "--seed", "3", "--export", stressed});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(mtrt::testing::read_text(normal),
            mtrt::testing::read_text(stressed));
}

TEST_F(TrainerMainTest, ExportHoldsEveryParamUnderItsName) {
  const std::string out = dir_ / "export.safetensors";
  ASSERT_EQ(train({"--steps", "1", "--export", out}).code, 0);
  SafetensorsReader r(out);
  // 7 trainable, the frozen table, and the tied head weight written out
  // from its primary, transposed: every initializer name has its tensor.
  EXPECT_EQ(r.tensors().size(), 9u);
  std::vector<float> embed(V * D), head(D * V);
  r.read_f32("embed.weight", {V, D}, embed.data());
  r.read_f32("head.weight", {D, V}, head.data());
  for (int64_t v = 0; v < V; ++v)
    for (int64_t d = 0; d < D; ++d)
      EXPECT_EQ(head[d * V + v], embed[v * D + d]) << v << "," << d;
  std::vector<float> scale(D);
  r.read_f32("mt.toy.scale", {D}, scale.data());
  EXPECT_EQ(scale, weights_[kScale]);
  // The export is a valid --weights file for a next run.
  Outcome o = run_trainer(toy_.program(), {"--data", data_, "--weights", out});
  EXPECT_EQ(o.code, 0) << o.err;
}

TEST_F(TrainerMainTest, TraceRandomInitAndBf16) {
  const std::string trace = dir_ / "trace.json";
  Outcome o =
      train({"--steps", "1", "--init", "random", "--seed", "4", "--precision",
             "bf16", "--trace", trace, "--threads", "2"});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("cpu bf16"), std::string::npos) << o.out;
  JsonValue t = parse_json(mtrt::testing::read_text(trace));
  ASSERT_NE(t.find("traceEvents"), nullptr);
  EXPECT_GT(t.find("traceEvents")->items.size(),
            size_t(toy_.program().num_commands));
}

TEST_F(TrainerMainTest, HelpListsTheFlags) {
  Outcome o = run_trainer(toy_.program(), {"--help"});
  EXPECT_EQ(o.code, 0);
  EXPECT_NE(o.out.find("--checkpoint-dir"), std::string::npos);
}

TEST_F(TrainerMainTest, ErrorsAreOneLineAndNonZero) {
  auto expect_error = [&](const Outcome &o, const std::string &prefix) {
    EXPECT_EQ(o.code, 1);
    EXPECT_EQ(o.err.rfind(prefix, 0), 0u) << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  };
  const Program &p = toy_.program();
  expect_error(run_trainer(p, {}), "error: --data is required");
  expect_error(train({"--lr", "abc"}), "error: --lr: 'abc' is not a number");
  expect_error(train({"--stepz", "3"}), "error: unknown flag '--stepz'");
  expect_error(train({"--steps"}), "error: --steps needs a value");
  expect_error(train({"--resume-other-plan"}),
               "error: --resume-other-plan needs --resume D");
  expect_error(
      train({"--lr-schedule", "linear"}),
      "error: --lr-schedule must be cosine or constant (got 'linear')");
  // Without a CUDA build the backend is unknown; with one, a machine without
  // a GPU refuses it.
  std::string why;
  bool cuda_built = false, cuda_here = false;
  for (const BackendEntry &e : backends())
    if (e.name == "cuda") {
      cuda_built = true;
      cuda_here = !e.available || e.available(&why);
    }
  if (!cuda_built)
    expect_error(train({"--backend", "cuda"}),
                 "error: --backend cuda: this trainer was built without CUDA");
  else if (!cuda_here)
    expect_error(train({"--backend", "cuda"}),
                 "error: --backend cuda: not available on this machine (");
  expect_error(run_trainer(p, {"--data", data_, "--weights", dir_ / "none.st"}),
               "error: no initial weights at " + dir_ / "none.st");
  expect_error(run_trainer(p, {"--data", dir_ / "missing.u32", "--weights",
                               weights_path_}),
               "error: cannot open token file " + dir_ / "missing.u32");
}

TEST_F(TrainerMainTest, BadCheckpointsFailWithoutWritingAnything) {
  ToyProgram other(2, "other-plan");
  ASSERT_EQ(train({"--steps", "1", "--checkpoint-dir", dir_ / "ckpt"}).code, 0);
  const std::string out = dir_ / "export.safetensors";
  const std::string log = dir_ / "log.jsonl";
  Outcome o =
      run_trainer(other.program(), {"--data", data_, "--weights", weights_path_,
                                    "--resume", dir_ / "ckpt", "--export", out,
                                    "--log-jsonl", log, "--steps", "3"});
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err.rfind("error: checkpoint is from another plan", 0), 0u)
      << o.err;
  EXPECT_FALSE(mtrt::testing::exists(out));
  EXPECT_FALSE(mtrt::testing::exists(log));
  EXPECT_FALSE(mtrt::testing::exists(log + ".tmp"));

  // Corrupt state: the error names the file; the checkpoint stays as it was.
  const std::string state = dir_ / "ckpt/step-00000001/state.safetensors";
  std::string bytes = mtrt::testing::read_text(state);
  bytes[bytes.size() - 1] ^= 1;
  mtrt::testing::write_bytes(state, bytes.data(), bytes.size());
  o = train({"--resume", dir_ / "ckpt", "--steps", "3", "--checkpoint-dir",
             dir_ / "ckpt", "--export", out});
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.err.find("corrupt"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find(state), std::string::npos) << o.err;
  EXPECT_EQ(mtrt::testing::read_text(state), bytes);
  EXPECT_EQ(mtrt::testing::read_text(dir_ / "ckpt/latest"), "step-00000001\n");
  EXPECT_FALSE(mtrt::testing::exists(out));
}

} // namespace
