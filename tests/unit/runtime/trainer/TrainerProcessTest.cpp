//===- TrainerProcessTest.cpp - the trainer as a process ------------------===//
//
// Runs the toy trainer binary as a child: weights.safetensors found next to
// the binary, exit codes and error lines, and checkpoints that survive a
// kill -9 at any moment.
//
//===----------------------------------------------------------------------===//

#include "TempDir.h"
#include "ToyProgram.h"

#include "runtime/trainer/Safetensors.h"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace mtrt;
using namespace mtrt::toy;
using mtrt::testing::TempDir;

namespace {

class TrainerProcessTest : public ::testing::Test {
protected:
  void SetUp() override {
    // The binary, copied next to its weights as codegen lays out out/.
    trainer_ = dir_ / "trainer";
    std::string cmd = std::string("cp '") + MEGATRAIN_TOY_TRAINER + "' '" +
                      trainer_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    std::vector<uint32_t> tokens(401);
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = uint32_t((i * 5 + i / 7) % V);
    data_ = dir_ / "tokens.u32";
    mtrt::testing::write_bytes(data_, tokens.data(), tokens.size() * 4);
    ToyWeights w = toy_initial_weights(7);
    ToyProgram toy(2);
    const Program &p = toy.program();
    std::vector<std::vector<float>> values(kNumParams);
    SafetensorsWriter writer;
    for (int q = 0; q < p.num_params; ++q)
      if (p.params[q].tie < 0) {
        values[q].assign(w[q].begin(), w[q].end());
        writer.add(p.params[q].name,
                   std::vector<int64_t>(p.params[q].shape,
                                        p.params[q].shape + p.params[q].rank),
                   values[q].data());
      }
    writer.write(dir_ / "weights.safetensors");
  }

  /// Starts the trainer with stdout and stderr into files; returns its pid.
  pid_t start(const std::vector<std::string> &args) {
    pid_t pid = ::fork();
    if (pid == 0) {
      std::vector<std::string> all = {trainer_, "--data", data_};
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char *> argv;
      for (std::string &a : all)
        argv.push_back(a.data());
      argv.push_back(nullptr);
      // Exercise the trainer's own OpenMP policy restart.
      ::unsetenv("OMP_WAIT_POLICY");
      if (!std::freopen((dir_ / "out.txt").c_str(), "w", stdout) ||
          !std::freopen((dir_ / "err.txt").c_str(), "w", stderr))
        ::_exit(99);
      ::execv(trainer_.c_str(), argv.data());
      ::_exit(98);
    }
    return pid;
  }
  int run(const std::vector<std::string> &args) {
    int status = 0;
    ::waitpid(start(args), &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string err() const { return mtrt::testing::read_text(dir_ / "err.txt"); }

  TempDir dir_;
  std::string trainer_, data_;
};

TEST_F(TrainerProcessTest, TrainsWithTheWeightsNextToTheBinary) {
  const std::string log = dir_ / "log.jsonl";
  ASSERT_EQ(run({"--steps", "3", "--log-jsonl", log}), 0) << err();
  std::string text = mtrt::testing::read_text(log);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3);
  EXPECT_EQ(err(), "");
  std::string out = mtrt::testing::read_text(dir_ / "out.txt");
  EXPECT_NE(out.find("step 3/3 loss"), std::string::npos) << out;
}

TEST_F(TrainerProcessTest, ErrorsExitNonZeroWithOneLine) {
  EXPECT_EQ(run({"--steps", "0"}), 1);
  EXPECT_EQ(err(), "error: --steps must be >= 1 (got 0)\n");
  EXPECT_EQ(run({"--init", "onnx", "--resume", dir_ / "nothing"}), 1);
  EXPECT_EQ(err(), "error: --resume " + dir_ / "nothing" +
                       ": no such checkpoint directory\n");
}

TEST_F(TrainerProcessTest, KillDuringCheckpointsLeavesALoadableOne) {
  const std::string ckpt = dir_ / "ckpt";
  for (int delay_ms : {40, 90, 150}) {
    pid_t pid = start({"--steps", "100000", "--checkpoint-dir", ckpt,
                       "--checkpoint-every", "1", "--lr", "1e-3"});
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "finished before the kill";
    if (!mtrt::testing::exists(ckpt + "/latest"))
      continue; // killed before the first checkpoint completed
    // Whatever moment the kill hit, the newest checkpoint resumes.
    EXPECT_EQ(run({"--steps", "100000", "--resume", ckpt, "--steps", "1"}), 0)
        << "after a kill at " << delay_ms << " ms: " << err();
  }
  EXPECT_TRUE(mtrt::testing::exists(ckpt + "/latest"));
}

} // namespace
