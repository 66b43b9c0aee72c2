//===- ExecutorTest.cpp - one step of the toy program vs its reference ----===//

#include "ToyProgram.h"
#include "ToyRun.h"

#include "runtime/exec/CpuBackend.h"
#include "runtime/exec/Error.h"
#include "runtime/exec/Executor.h"
#include "runtime/exec/HostStore.h"
#include "runtime/exec/ProgramCheck.h"
#include "runtime/exec/Trace.h"
#include "runtime/host/ThreadPool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

using namespace mtrt;
using namespace mtrt::toy;

namespace {

void expect_close(const float *got, const std::vector<double> &want,
                  const char *what) {
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-6 + 1e-4 * std::fabs(want[i]))
        << what << "[" << i << "]";
}

// Runs micro-steps 0..A-1 of step 0 and checks losses, the accumulated
// gradients (the mean over all A*M micro-batches) and the norm.
void check_step_against_reference(int64_t M, int A) {
  ToyProgram toy(M);
  const Program &p = toy.program();
  CpuBackend backend{BackendOptions{}};
  HostStore store(p, backend.storage_format(), OptimizerConfig{});
  load_toy_weights(store, 7);
  ToyBatches batches(M);
  host::ThreadPool pool(2);
  ExecutorOptions eo;
  eo.grad_accum = A;
  Executor exec(p, backend, store, batches, &pool, eo);
  EXPECT_FLOAT_EQ(exec.dloss(), float(1.0 / double(A * M * N)));

  ToyWeights w = toy_initial_weights(7), g(kNumParams);
  for (int a = 0; a < A; ++a) {
    exec.run(0, a);
    std::vector<float> losses = exec.losses();
    ASSERT_EQ(losses.size(), size_t(M));
    for (int64_t mb = 0; mb < M; ++mb) {
      std::vector<int32_t> ids, targets;
      batches.tokens(0, a, mb, ids, targets);
      double want = toy_loss_and_grads(w, ids, targets,
                                       1.0 / double(A * M * N), &g);
      EXPECT_NEAR(losses[mb], want, 1e-5) << "micro-step " << a << " mb " << mb;
    }
  }
  double sq = 0;
  for (int q : {kEmbed, kW0, kB0, kW1, kB1, kHeadB, kGain}) {
    ASSERT_TRUE(store.trainable(q));
    expect_close(store.grad(q), g[q], p.params[q].name);
    for (double x : g[q])
      sq += x * x;
  }
  EXPECT_FALSE(store.trainable(kHeadW)); // tied: folded into the embedding
  EXPECT_FALSE(store.trainable(kScale)); // frozen
  EXPECT_NEAR(store.grad_norm(), std::sqrt(sq), 1e-5 * std::sqrt(sq));
}

TEST(ExecutorTest, AStepMatchesTheDoubleReference) {
  check_step_against_reference(2, 1);
}

TEST(ExecutorTest, OneMicroBatchPerFetch) { check_step_against_reference(1, 1); }

TEST(ExecutorTest, GradAccumulationAveragesOverMicroSteps) {
  check_step_against_reference(2, 3);
}

TEST(ExecutorTest, TrainingLowersTheLoss) {
  ToyProgram toy(2);
  ToyRunOptions o;
  o.steps = 12;
  o.lr = 3e-2;
  ToyRunResult r = run_toy(toy.program(), o);
  ASSERT_TRUE(r.finite());
  // The toy batches change every step, so compare the average of the first
  // and last few steps' micro-batch losses.
  double first = 0, last = 0;
  for (int i = 0; i < 6; ++i) {
    first += r.losses[size_t(i)];
    last += r.losses[r.losses.size() - 1 - size_t(i)];
  }
  EXPECT_LT(last, first);
}

TEST(ExecutorTest, RunsAreBitwiseReproducible) {
  ToyProgram toy(2);
  ToyRunOptions o;
  ToyRunResult a = run_toy(toy.program(), o), b = run_toy(toy.program(), o);
  EXPECT_TRUE(a.same_bits(b));
}

TEST(ExecutorTest, Bf16PrecisionRoundsButStaysClose) {
  ToyProgram toy(2);
  ToyRunOptions o;
  ToyRunResult f32 = run_toy(toy.program(), o);
  o.bf16 = true;
  ToyRunResult bf = run_toy(toy.program(), o);
  ASSERT_TRUE(bf.finite());
  EXPECT_FALSE(bf.same_bits(f32));
  for (size_t i = 0; i < f32.losses.size(); ++i)
    EXPECT_NEAR(bf.losses[i], f32.losses[i], 3e-2);
}

TEST(ExecutorTest, TraceHasOneEventPerCommand) {
  ToyProgram toy(2);
  Trace trace;
  ToyRunOptions o;
  o.steps = 2;
  o.trace = &trace;
  run_toy(toy.program(), o);
  // GradNorm runs in every step here (A = 1); each of the four units owning
  // a trained param sums its gradients' squares; each unit's AdamW, right
  // before its first Pack, is left to the packs.
  const Program &p = toy.program();
  const auto adamws =
      std::count_if(p.commands, p.commands + p.num_commands,
                    [](const Command &c) { return c.op == Op::AdamW; });
  EXPECT_EQ(adamws, 4);
  EXPECT_EQ(trace.size(), size_t(2 * (p.num_commands + 4 - adamws)));
  std::string path = ::testing::TempDir() + "/exec_trace.json";
  trace.write(path);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string json = ss.str();
  EXPECT_EQ(json.rfind("{\"displayTimeUnit\"", 0), 0u);
  EXPECT_NE(json.find("\"name\":\"head bwd u3 mb1\""), std::string::npos);
  for (const char *unit : {"u0", "u1", "u2", "u3"}) {
    EXPECT_NE(json.find(std::string("\"name\":\"sum_squares ") + unit + "\""),
              std::string::npos)
        << unit;
    EXPECT_NE(json.find(std::string("\"name\":\"adamw+pack ") + unit + "\""),
              std::string::npos)
        << unit;
  }
  EXPECT_EQ(json.find("\"name\":\"adamw "), std::string::npos);
  EXPECT_NE(json.find("\"thread_name\""), std::string::npos);
  std::remove(path.c_str());
}

TEST(ExecutorTest, ProgramCheckRejectsBadTables) {
  {
    ToyProgram toy(2);
    toy.commands()[3].b = 9999; // the H2D of the batch into a bad buffer
    toy.commit();
    try {
      check_program(toy.program());
      FAIL();
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find("command 3 (h2d)"),
                std::string::npos)
          << e.what();
    }
  }
  {
    // Pack(u0) before AdamW(u0): the deferred update would come too late.
    ToyProgram toy(2);
    auto &c = toy.commands();
    for (size_t i = 0; i + 1 < c.size(); ++i)
      if (c[i].op == Op::AdamW && c[i + 1].op == Op::Pack) {
        std::swap(c[i], c[i + 1]);
        break;
      }
    toy.commit();
    EXPECT_THROW(check_program(toy.program()), Error);
  }
  {
    ToyProgram toy(2);
    toy.commands()[0].stream = Stream::Compute; // LoadBatch off the host
    toy.commit();
    EXPECT_THROW(check_program(toy.program()), Error);
  }
  {
    // A layer's backward writing its dx over its dy: layers build their
    // output in place, so the check refuses it.
    ToyProgram toy(2);
    toy.commit();
    const Program &p = toy.program();
    for (int l = 0; l < p.num_launches; ++l) {
      const LaunchDesc &d = p.launches[l];
      if (d.backward && std::string(p.units[d.unit].kind) == "layer") {
        const_cast<int *>(d.outputs)[0] = d.inputs[1];
        break;
      }
    }
    try {
      check_program(p);
      FAIL();
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find("is also one of its inputs"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(ExecutorTest, ReportsHostAndDeviceBytes) {
  ToyProgram toy(2);
  CpuBackend backend{BackendOptions{}};
  HostStore store(toy.program(), backend.storage_format(), OptimizerConfig{});
  ToyBatches batches(2);
  Executor exec(toy.program(), backend, store, batches, nullptr, {});
  // stage0/1 (128 f32 each), gstage0/1 (128 f32 each), batch (2*2*10 i32),
  // loss_host (2 f32).
  EXPECT_EQ(exec.host_bytes(), 4 * (4 * 128 + 40 + 2));
  EXPECT_GT(exec.device_bytes(), 0);
  const double per_param =
      double(store.bytes() + exec.host_bytes()) / double(store.trainable_params());
  std::printf("toy: %lld trainable params, store %lld B, staging %lld B: "
              "%.2f host B/param\n",
              (long long)store.trainable_params(), (long long)store.bytes(),
              (long long)exec.host_bytes(), per_param);
  EXPECT_EQ(store.bytes(), 16 * store.trainable_params() + 4 * D);
}

} // namespace
