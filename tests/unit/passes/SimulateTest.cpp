//===- SimulateTest.cpp - mt-simulate against closed forms ----------------===//
//
// Each test compiles a small model through the real pipeline, reruns
// mt-simulate on a machine where all but one resource is (nearly) free, and
// checks the predicted step against what that resource alone costs.
//
//===----------------------------------------------------------------------===//
#include "tests/unit/passes/TestPipeline.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

using namespace mlir;
using namespace mt;

namespace {

// "Free": a resource a billion times faster than the one under test.
constexpr double kFree = 1e12;

struct Prediction {
  double stepS = 0, tokensPerS = 0, modelTflops = 0, compute = 0, h2d = 0,
         d2h = 0, host = 0, link = 0, gemmS = 0, attentionS = 0, otherS = 0;
  int64_t suggested = -1;
  std::string preset;
};

Prediction predictionOf(ModuleOp module) {
  Prediction p;
  auto dict =
      test::scheduleOf(module)->getAttrOfType<DictionaryAttr>("prediction");
  EXPECT_TRUE(dict);
  if (!dict)
    return p;
  auto num = [&](StringRef key) {
    auto f = dict.getAs<FloatAttr>(key);
    EXPECT_TRUE(f) << key.str();
    return f ? f.getValueAsDouble() : NAN;
  };
  p.stepS = num("step_s");
  p.tokensPerS = num("tokens_per_s");
  p.modelTflops = num("model_tflops");
  p.compute = num("compute_busy_fraction");
  p.h2d = num("h2d_busy_fraction");
  p.d2h = num("d2h_busy_fraction");
  p.host = num("host_busy_fraction");
  p.link = num("link_bound_fraction");
  p.gemmS = num("gemm_s");
  p.attentionS = num("attention_s");
  p.otherS = num("other_kernels_s");
  if (auto i = dict.getAs<IntegerAttr>("suggested_micro_batches"))
    p.suggested = i.getInt();
  if (auto s = dict.getAs<StringAttr>("preset"))
    p.preset = s.str();
  return p;
}

class SimulateTest : public ::testing::Test {
protected:
  // Compiles smallModel(layers) at M micro-batches, moving units through
  // staging slabs of `staging` elements.
  void compile(int layers, int64_t M, int64_t staging = int64_t(1) << 23) {
    compileText(test::smallModel(layers), M, staging);
  }

  void compileText(const std::string &text, int64_t M,
                   int64_t staging = int64_t(1) << 23) {
    PipelineOptions options;
    options.microBatches = M;
    options.stagingElems = staging;
    std::string error;
    module = test::compile(ctx, text, options, &error);
    ASSERT_TRUE(module) << error;
  }

  // Reruns mt-simulate with `options`; returns its error text.
  std::string simulate(const SimulateOptions &options) {
    return test::runPass(*module, createSimulate(options));
  }

  // Every resource free: each test slows down the one it measures.
  static SimulateOptions freeMachine() {
    SimulateOptions o;
    o.h2dGBps = o.d2hGBps = o.hbmGBps = o.hostGBps = kFree;
    o.deviceTflops = kFree;
    o.launchUs = 0;
    o.copyLatencyUs = 0;
    return o;
  }

  // Bytes the h2d stream moves per step: every unit's bf16 region once per
  // visit (forward and backward; the head's one fused visit), plus the
  // batch's token ids and targets (i32).
  double h2dBytesPerStep() {
    double bytes = 0;
    for (UnitOp u : module->getOps<UnitOp>())
      bytes += 2.0 * *u.getElems() * (u.getKind() == "head" ? 1 : 2);
    auto batch = SymbolTable::lookupNearestSymbolFrom<BufferOp>(
        *module, StringAttr::get(&ctx, "batch"));
    return bytes + 4.0 * batch.getElems();
  }

  // The template of each launch in the schedule, in order.
  std::vector<TemplateOp> launchedTemplates() {
    std::vector<TemplateOp> out;
    for (LaunchOp l :
         test::scheduleOf(*module).getBody().front().getOps<LaunchOp>())
      out.push_back(SymbolTable::lookupNearestSymbolFrom<TemplateOp>(
          *module, l.getCalleeAttr()));
    return out;
  }

  int countOf(StringRef opName) {
    int n = 0;
    for (Operation &op : test::scheduleOf(*module).getBody().front())
      n += op.getName().getStringRef() == opName;
    return n;
  }

  MLIRContext ctx;
  OwningOpRef<ModuleOp> module;
};

TEST_F(SimulateTest, PipelineAttachesPrediction) {
  compile(2, 2);
  Prediction p = predictionOf(*module);
  EXPECT_EQ(p.preset, "h200-pcie5");
  EXPECT_GT(p.stepS, 0);
  for (double f : {p.compute, p.h2d, p.d2h, p.host, p.link}) {
    EXPECT_GE(f, 0);
    EXPECT_LE(f, 1);
  }
  // Tokens: M · B · S = 2 · 2 · 16 per step.
  EXPECT_NEAR(p.tokensPerS * p.stepS, 64, 1e-9);
  // 6 · trained params · tokens: the tied head weight counts once.
  double trained = 256 * 64 + 64 + 2 * (64 + 64 * 64);
  EXPECT_NEAR(p.modelTflops * 1e12 * p.stepS, 6 * trained * 64, 1e-3);
}

// Only the h2d link costs anything: the step is the bytes it moves over its
// bandwidth. The other streams' residual work (a 1e-12 fraction) is far
// below the 1e-9 relative tolerance.
TEST_F(SimulateTest, LinkBoundStepIsH2DBytesOverBandwidth) {
  compile(3, 2);
  SimulateOptions o = freeMachine();
  o.h2dGBps = 10;
  ASSERT_EQ(simulate(o), "");
  Prediction p = predictionOf(*module);
  double expected = h2dBytesPerStep() / 10e9;
  EXPECT_NEAR(p.stepS, expected, 1e-9 * expected);
  EXPECT_NEAR(p.h2d, 1.0, 1e-6);
  // The GPU waits for weights nearly the whole step.
  EXPECT_GT(p.link, 0.9);
  EXPECT_LT(p.compute, 1e-6);
}

// With the fixed copy latency back, each h2d adds exactly that latency. The
// d2h copies now take 10 µs each too, and the step boundary waits for the
// last gradient drain (the next step's batch load follows the last
// accumulate), so the h2d stream may idle up to the d2h stream's whole
// work: at least the h2d work, at most that plus every d2h's latency.
TEST_F(SimulateTest, LinkBoundStepCountsCopyLatency) {
  compile(3, 2);
  SimulateOptions o = freeMachine();
  o.h2dGBps = 10;
  o.copyLatencyUs = 10;
  ASSERT_EQ(simulate(o), "");
  double h2dWork = h2dBytesPerStep() / 10e9 + countOf("mt.h2d") * 10e-6;
  double stepS = predictionOf(*module).stepS;
  EXPECT_GE(stepS, h2dWork * (1 - 1e-9));
  EXPECT_LE(stepS, h2dWork + countOf("mt.d2h") * 10e-6);
}

// Only kernel launches cost anything (1 µs per primitive): the step is the
// sum over launches of the primitives in the launched template.
TEST_F(SimulateTest, ComputeBoundStepIsSumOfLaunches) {
  compile(3, 2);
  SimulateOptions o = freeMachine();
  o.launchUs = 1;
  ASSERT_EQ(simulate(o), "");
  int64_t primitives = 0;
  for (TemplateOp t : launchedTemplates())
    primitives += llvm::range_size(t.getBlock().getOperations()) - 1; // yield
  Prediction p = predictionOf(*module);
  EXPECT_NEAR(p.stepS, primitives * 1e-6, 1e-9 * primitives * 1e-6);
  EXPECT_NEAR(p.compute, 1.0, 1e-6);
  EXPECT_LT(p.link, 1e-6);
  EXPECT_EQ(p.suggested, 0);
}

// Only FLOPs cost anything: the step is the GEMMs' FLOPs at the documented
// efficiency eff = 0.75 · (1 − exp(−min(M, N, K) / 512)). Per micro-batch
// (32 tokens): each layer runs its linear (2·32·64·64) forward and
// linear_grad (4·32·64·64) backward (the backward's recompute drops the
// linear: no gradient needs its output); the head's fused visit runs its
// linear (2·32·64·256), needed by the loss, and linear_grad (4·32·64·256).
TEST_F(SimulateTest, FlopBoundStepIsGemmFlopsAtCurveEfficiency) {
  const int layers = 3, M = 2;
  compile(layers, M);
  SimulateOptions o = freeMachine();
  o.deviceTflops = 1;
  ASSERT_EQ(simulate(o), "");
  double eff = 0.75 * (1 - std::exp(-32.0 / 512));
  double perMb = layers * (2 + 4) * 32.0 * 64 * 64 + 6 * 32.0 * 64 * 256;
  double expected = M * perMb / (1e12 * eff);
  EXPECT_NEAR(predictionOf(*module).stepS, expected, 1e-6 * expected);
}

// smallModel(1) with causal attention over 4 heads of 16 in its layer
// (window 0: none).
std::string attentionModel(int window) {
  std::string s = test::smallModel(1);
  const std::string sum =
      "    %y = mt.add %x, %q : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> "
      "tensor<2x16x64xf32>";
  std::string attrs = "scale = 2.500000e-01 : f64";
  if (window)
    attrs += ", window = " + std::to_string(window) + " : i64";
  const std::string withAttention =
      "    %h = mt.reshape %q : (tensor<2x16x64xf32>) -> tensor<2x16x4x16xf32>\n"
      "    %t = mt.transpose %h {perm = array<i64: 0, 2, 1, 3>} : "
      "(tensor<2x16x4x16xf32>) -> tensor<2x4x16x16xf32>\n"
      "    %a = mt.attention %t, %t, %t {" + attrs + "} : (tensor<2x4x16x16xf32>, "
      "tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>\n"
      "    %b = mt.transpose %a {perm = array<i64: 0, 2, 1, 3>} : "
      "(tensor<2x4x16x16xf32>) -> tensor<2x16x4x16xf32>\n"
      "    %c = mt.reshape %b : (tensor<2x16x4x16xf32>) -> tensor<2x16x64xf32>\n"
      "    %y = mt.add %x, %c : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> "
      "tensor<2x16x64xf32>";
  size_t at = s.find(sum);
  EXPECT_NE(at, std::string::npos);
  return s.replace(at, sum.size(), withAttention);
}

// Only FLOPs cost anything: a sliding window of W keys saves 4·B·H·D FLOPs
// per (query, key) pair it hides, S(S+1)/2 − (S·W − W(W−1)/2) pairs, in
// every attention (forward) and twice that in every attention_grad (its
// dK/dV pass; its dQ GEMM over dSᵀ is dense, window or not), at the
// attention's efficiency (0.06 of peak, the GEMMs' knee at S). The saving
// shows in the step and in its attention time; the GEMMs' stays.
TEST_F(SimulateTest, SlidingWindowCountsVisiblePairs) {
  const int64_t M = 2, S = 16, W = 4;
  // The predicted step, and the attentions launched (a gradient counts 2).
  auto stepWith = [&](int window) {
    compileText(attentionModel(window), M);
    SimulateOptions o = freeMachine();
    o.deviceTflops = 1;
    EXPECT_EQ(simulate(o), "");
    double units = 0;
    for (TemplateOp t : launchedTemplates())
      t.walk([&](Operation *op) {
        units += isa<AttentionOp>(op)       ? 1.0
                 : isa<AttentionGradOp>(op) ? 2.0
                                            : 0;
      });
    return std::make_pair(predictionOf(*module), units);
  };
  auto [full, units] = stepWith(0);
  auto [windowed, unitsW] = stepWith(int(W));
  ASSERT_EQ(units, unitsW);
  ASSERT_GT(units, 0);
  double hidden = S * (S + 1) / 2.0 - (S * W - W * (W - 1) / 2.0);
  double eff = 0.06 * (1 - std::exp(-double(S) / 512));
  double expected = units * 4.0 * (2 * 4) * 16 * hidden / (1e12 * eff);
  EXPECT_NEAR(full.stepS - windowed.stepS, expected, 1e-6 * expected);
  EXPECT_NEAR(full.attentionS - windowed.attentionS, expected,
              1e-6 * expected);
  EXPECT_GT(full.gemmS, 0);
  EXPECT_EQ(full.gemmS, windowed.gemmS);
  EXPECT_EQ(full.otherS, windowed.otherS);
}

// Only FLOPs cost anything: attention-efficiency replaces the attention's
// 0.06 of peak, so its fused products' time scales by 0.06 / F and nothing
// else moves; each attention_grad's dQ GEMM (2·B·H·S²·D FLOPs over the
// whole dSᵀ, at the GEMMs' 75%) stays. The prediction names the
// efficiency it took. A value outside (0, 1] is an error.
TEST_F(SimulateTest, AttentionEfficiencyScalesAttentionTimeAlone) {
  compileText(attentionModel(0), 2);
  double grads = 0;
  for (TemplateOp t : launchedTemplates())
    t.walk([&](AttentionGradOp) { ++grads; });
  ASSERT_GT(grads, 0);
  const double dqGemm = grads * 2 * (2 * 4) * 16 * 16 * 16 / (1e12 * 0.75);
  auto predict = [&](double efficiency) {
    SimulateOptions o = freeMachine();
    o.deviceTflops = 1;
    o.attentionEff = efficiency;
    EXPECT_EQ(simulate(o), "");
    auto dict =
        test::scheduleOf(*module)->getAttrOfType<DictionaryAttr>("prediction");
    auto taken = dict ? dict.getAs<FloatAttr>("attention_efficiency") : nullptr;
    EXPECT_TRUE(taken);
    EXPECT_EQ(taken ? taken.getValueAsDouble() : 0,
              efficiency == 0 ? 0.06 : efficiency);
    return predictionOf(*module);
  };
  Prediction ours = predict(0), cudnn = predict(0.5);
  ASSERT_GT(ours.attentionS, dqGemm);
  EXPECT_NEAR(cudnn.attentionS - dqGemm,
              (ours.attentionS - dqGemm) * 0.06 / 0.5, 1e-9 * ours.attentionS);
  EXPECT_EQ(cudnn.gemmS, ours.gemmS);
  EXPECT_EQ(cudnn.otherS, ours.otherS);
  EXPECT_NEAR(ours.stepS - cudnn.stepS, ours.attentionS - cudnn.attentionS,
              1e-6 * ours.stepS);
  for (double bad : {-0.1, 1.5}) {
    SimulateOptions o;
    o.attentionEff = bad;
    std::string diag = simulate(o);
    EXPECT_NE(diag.find("is not a fraction of the peak in (0, 1]"),
              std::string::npos)
        << diag;
  }
}

// Only host memory bandwidth costs anything: the host stream's bytes are
// pack 6 B per packed element (twice per unit but the head's once),
// accumulate 12 B per element per backward visit, AdamW 28 B and the norm
// 4 B per trained param, load_batch the batch's bytes.
TEST_F(SimulateTest, HostBoundStepIsOptimizerTraffic) {
  compile(2, 2);
  SimulateOptions o = freeMachine();
  o.hostGBps = 1;
  ASSERT_EQ(simulate(o), "");
  // A unit's first pack follows its adamw and reads the updated masters
  // from cache (2 B/elem); every other pack reads them again (6 B/elem).
  std::set<std::string> updated;
  for (ScheduleOp step : module->getOps<ScheduleOp>())
    step.walk([&](AdamWOp a) { updated.insert(a.getUnit().str()); });
  double bytes = 0;
  for (UnitOp u : module->getOps<UnitOp>()) {
    const double packs = u.getKind() == "head" ? 1 : 2;
    const double first = updated.count(u.getSymName().str()) ? 2 : 6;
    bytes += (first + 6.0 * (packs - 1) + 12) * *u.getElems();
  }
  EXPECT_FALSE(updated.empty());
  double trained = 256 * 64 + 64 + 2 * (64 + 64 * 64);
  bytes += (28 + 4) * trained;
  bytes += 4 * 2 * 2 * 32; // the batch: ids and targets of 2 micro-batches
  EXPECT_NEAR(predictionOf(*module).stepS, bytes / 1e9, 1e-9 * bytes / 1e9);
}

// Link-bound with compute to hide behind: the suggestion is the smallest M
// whose compute per layer visit covers a layer's fetch.
TEST_F(SimulateTest, SuggestsMicroBatchesThatHideTheLink) {
  compile(3, 1);
  auto layerUnit = *llvm::find_if(module->getOps<UnitOp>(), [](UnitOp u) {
    return u.getKind() == "layer";
  });
  // Forward launch of a layer: 3 primitives at 1 µs; fetch 4.5x that.
  double fetchS = 4.5 * 3e-6;
  SimulateOptions o = freeMachine();
  o.launchUs = 1;
  o.h2dGBps = 2.0 * *layerUnit.getElems() / fetchS / 1e9;
  ASSERT_EQ(simulate(o), "");
  Prediction p = predictionOf(*module);
  EXPECT_GT(p.link, 0.05);
  EXPECT_EQ(p.suggested, 5);

  compile(3, 5);
  ASSERT_EQ(simulate(o), "");
  Prediction hidden = predictionOf(*module);
  EXPECT_EQ(hidden.suggested, 0);
  EXPECT_GT(hidden.compute, p.compute);
  EXPECT_GT(hidden.tokensPerS, p.tokensPerS);
}

// The same with each layer moving in several staging chunks: a visit's
// fetch is all its chunks, so the suggestion does not change.
TEST_F(SimulateTest, SuggestionCountsEveryStagingChunkOfAVisit) {
  compile(3, 1, /*staging=*/1024);
  auto layerUnit = *llvm::find_if(module->getOps<UnitOp>(), [](UnitOp u) {
    return u.getKind() == "layer";
  });
  ASSERT_GE(*layerUnit.getElems(), 4 * 1024); // moves in 5 chunks
  double fetchS = 4.5 * 3e-6;
  SimulateOptions o = freeMachine();
  o.launchUs = 1;
  o.h2dGBps = 2.0 * *layerUnit.getElems() / fetchS / 1e9;
  ASSERT_EQ(simulate(o), "");
  EXPECT_EQ(predictionOf(*module).suggested, 5);
}

TEST_F(SimulateTest, EveryPresetPredicts) {
  compile(2, 2);
  for (const char *name :
       {"h200-pcie5", "gh200", "a100-pcie4", "rtx3090-pcie4"}) {
    SimulateOptions o;
    o.preset = name;
    ASSERT_EQ(simulate(o), "") << name;
    Prediction p = predictionOf(*module);
    EXPECT_EQ(p.preset, name);
    EXPECT_GT(p.stepS, 0) << name;
  }
}

TEST_F(SimulateTest, OverridesReplacePresetNumbers) {
  compile(2, 2);
  SimulateOptions slow;
  slow.h2dGBps = 0.01;
  ASSERT_EQ(simulate(slow), "");
  double slowStep = predictionOf(*module).stepS;
  ASSERT_EQ(simulate(SimulateOptions()), "");
  EXPECT_GT(slowStep, 10 * predictionOf(*module).stepS);
}

TEST_F(SimulateTest, UnknownPresetNamesItAndListsPresets) {
  compile(1, 1);
  SimulateOptions o;
  o.preset = "tpu-v9";
  std::string diag = simulate(o);
  EXPECT_NE(diag.find("unknown preset 'tpu-v9'"), std::string::npos) << diag;
  for (const char *name :
       {"h200-pcie5", "gh200", "a100-pcie4", "rtx3090-pcie4"})
    EXPECT_NE(diag.find(name), std::string::npos) << diag;
}

TEST_F(SimulateTest, NeedsASchedule) {
  ctx.loadDialect<MtDialect>();
  module = parseSourceString<ModuleOp>(test::smallModel(1), &ctx);
  ASSERT_TRUE(module);
  EXPECT_NE(simulate(SimulateOptions()).find("needs one mt.schedule"),
            std::string::npos);
}

// The trace is Chrome trace JSON: a thread_name per stream, then complete
// ("X") events in µs on those threads; the four steps end where the replay
// ends.
TEST_F(SimulateTest, WritesChromeTrace) {
  compile(2, 2);
  llvm::SmallString<128> path;
  ASSERT_FALSE(llvm::sys::fs::createTemporaryFile("mt-sim", "json", path));
  SimulateOptions o;
  o.tracePath = path.str().str();
  ASSERT_EQ(simulate(o), "");
  auto buffer = llvm::MemoryBuffer::getFile(path);
  ASSERT_TRUE(buffer);
  llvm::Expected<llvm::json::Value> json =
      llvm::json::parse((*buffer)->getBuffer());
  llvm::sys::fs::remove(path);
  ASSERT_TRUE(bool(json)) << llvm::toString(json.takeError());
  const llvm::json::Array *events =
      json->getAsObject()->getArray("traceEvents");
  ASSERT_TRUE(events);
  std::set<std::string> threads;
  std::set<int64_t> tids;
  int complete = 0;
  double end = 0;
  for (const llvm::json::Value &v : *events) {
    const llvm::json::Object *e = v.getAsObject();
    ASSERT_TRUE(e);
    EXPECT_EQ(e->getInteger("pid"), 0);
    if (e->getString("ph") == "M") {
      threads.insert(e->getObject("args")->getString("name")->str());
      continue;
    }
    ASSERT_EQ(e->getString("ph"), "X");
    ASSERT_TRUE(e->getNumber("ts") && e->getNumber("dur"));
    EXPECT_GE(*e->getNumber("dur"), 0);
    EXPECT_FALSE(e->getString("name")->empty());
    tids.insert(*e->getInteger("tid"));
    end = std::max(end, *e->getNumber("ts") + *e->getNumber("dur"));
    ++complete;
  }
  EXPECT_EQ(threads, (std::set<std::string>{"h2d", "compute", "d2h", "host"}));
  EXPECT_EQ(tids.size(), 4u);
  EXPECT_GT(complete, 4 * countOf("mt.launch"));
  // Four steps of at least the steady-state step each.
  EXPECT_GE(end * 1e-6, 4 * predictionOf(*module).stepS * 0.99);
}

} // namespace
