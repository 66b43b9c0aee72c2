//===- Compile.cpp - megatrain compile ------------------------------------===//
#include "tools/megatrain/Commands.h"
#include "tools/megatrain/Flags.h"
#include "tools/megatrain/OutputDir.h"
#include "tools/megatrain/RuntimeConfig.h"

#include "codegen/PlanJson.h"
#include "codegen/TrainerCodegen.h"
#include "codegen/TrainerProject.h"
#include "codegen/WeightsWriter.h"
#include "frontend/Error.h"
#include "frontend/Importer.h"
#include "ir/MtDialect.h"
#include "ir/MtOps.h"
#include "passes/ModelInfo.h"
#include "passes/Passes.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <fstream>

namespace mt::driver {
namespace {

const char *kCompileUsage = R"(usage: megatrain compile MODEL.onnx [flags]

Imports an exported decoder, compiles it to a static training plan and, with
-o, writes the plan and builds its trainer:  DIR/trainer --data FILE ...

model:
  --batch B              sequences per micro-batch (binds the batch dim)
  --seq-len S            tokens per sequence (binds the sequence dim)
  --bind NAME=HOW        bind an extra graph input: ones, zeros or arange
                         (attention_mask, position_ids and token_type_ids
                         are bound by default)
  --no-tie-detect        do not tie initializers holding the same data
  --buffers NAME,...     float initializers never to train: buffers the
                         model reaches through values computed at compile
                         time (compile names any it cannot tell from a
                         parameter), or weights to freeze (repeatable)
plan:
  --micro-batches M      micro-batches through each resident unit (default 1)
  --slots N              device weight slots, 2 = double buffering (default 2)
  --gpu-mem-limit SIZE   device memory budget, e.g. 24GiB (default: none);
                         checkpoints that do not fit go to host memory
  --host-checkpoints N   offload the first N layers' checkpoints to host
                         (default auto: by --gpu-mem-limit)
  --min-unit-bytes SIZE  merge consecutive layers smaller than this
  --staging-elems N      elements per pinned host staging slab (default
                         8388608): units move in chunks of this size
  --vocab-pieces K       cut the LM head and embedding into K units of
                         vocabulary rows (default: with --gpu-mem-limit,
                         when they outweigh a decoder layer, into pieces no
                         larger than one; 1: never)
  --loss-chunk-tokens T  run the head (LM head and loss) over T tokens of a
                         micro-batch at a time, T dividing batch x seq-len
                         (default: chunks only when the logits would pass
                         2^27 elements)
  --mlp-chunk-tokens T   run each layer's MLP (and its gradients) over T
                         tokens of a micro-batch at a time, T dividing
                         batch x seq-len (default: chunks only when its
                         activations would pass 2^27 elements)
  --master-weights P     host precision of master weights and gradient
                         accumulators: fp32 (default, 16 B/param of state)
                         or bf16 (12 B/param; AdamW rounds the new weights
                         stochastically)
prediction (mt-simulate; see docs/schedule.md):
  --preset NAME          machine to predict the step on: h200-pcie5 (default),
                         gh200, a100-pcie4 or rtx3090-pcie4
  --attention-efficiency F
                         fraction of the dense peak fused attention runs at
                         (default 0.06: our tensor-core kernels as measured
                         on an H200; cuDNN's, MEGATRAIN_CUDA_ATTENTION=cudnn,
                         about 0.5 if it runs at torch SDPA's rate)
  --sim-trace FILE       write the predicted per-stream timeline as Chrome
                         trace JSON (opens in Perfetto)
output:
  -o DIR                 write trainer.cpp, model.mlir, plan.json, weights and
                         build DIR/trainer (replaces an earlier output there)
  --no-build             with -o: write the sources but do not build
  --emit=KIND            print instead: ir (model level, the default),
                         graph (fused primitives, no block discovery) or
                         schedule (the final schedule-level IR)
  --dump-ir-after=PASS   print the IR after PASS (a pass name such as
                         mt-schedule, or all)
  --help                 this text
)";

const char *const kPipelinePasses[] = {"mt-fold-attention-layout",
                                       "mt-derive-backward",
                                       "mt-chunk-loss",
                                       "mt-shorten-lifetimes",
                                       "mt-chunk-mlp",
                                       "mt-split-vocab",
                                       "mt-partition",
                                       "mt-pack-weights",
                                       "mt-schedule",
                                       "mt-place-checkpoints",
                                       "mt-insert-transfers",
                                       "mt-insert-events",
                                       "mt-plan-memory",
                                       "mt-verify-schedule",
                                       "mt-simulate"};

void writeFile(const std::string &path, const std::string &text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out.flush())
    onnx_import::fail("cannot write '{}'", path);
}

std::string modelNameOf(const std::string &path) {
  return llvm::sys::path::stem(path).str();
}

// The initial weights: every param with data, tied ones under their primary.
// A structure-only model has data only for its frozen tables; its trainer
// then needs --init random.
void writeInitialWeights(mlir::ModuleOp module,
                         const onnx_import::ImportedModel &model,
                         const std::string &path) {
  std::vector<WeightsEntry> entries;
  for (ParamOp p : module.getOps<ParamOp>()) {
    if (p.getTie())
      continue;
    auto it = model.paramData.find(p.getSymName().str());
    if (it == model.paramData.end())
      continue;
    onnx_import::ConstPtr data = it->second;
    auto shape = p.getTensorType().getShape();
    entries.push_back({p.getSymName().str(), {shape.begin(), shape.end()},
                       [data](int64_t begin, int64_t n, float *out) {
                         for (int64_t i = 0; i < n; ++i)
                           out[i] = static_cast<float>(data->at(begin + i));
                       }});
  }
  std::string err = writeWeights(path, entries);
  if (!err.empty())
    onnx_import::fail("{}", err);
}

} // namespace

int runCompile(const std::vector<std::string> &args) {
  Flags flags(args,
              {"--batch",
               "--seq-len",
               "--bind",
               "--buffers",
               "--emit",
               "--micro-batches",
               "--slots",
               "--gpu-mem-limit",
               "--min-unit-bytes",
               "--staging-elems",
               "--host-checkpoints",
               "--loss-chunk-tokens",
               "--mlp-chunk-tokens",
               "--vocab-pieces",
               "--master-weights",
               "--dump-ir-after",
               "--preset",
               "--attention-efficiency",
               "--sim-trace",
               "-o"},
              {"--no-tie-detect", "--no-build", "--help"});
  if (flags.has("--help")) {
    std::fputs(kCompileUsage, stdout);
    return 0;
  }
  if (flags.positional().size() != 1)
    throw UsageError("compile takes one model file (see compile --help)");
  std::optional<std::string> outDir = flags.get("-o");
  std::string emit = flags.get("--emit").value_or(outDir ? "" : "ir");
  if (emit != "" && emit != "ir" && emit != "graph" && emit != "schedule")
    throw UsageError("--emit: '" + emit + "' is not one of ir, graph, schedule");
  if (outDir && !emit.empty())
    throw UsageError("--emit and -o exclude each other");
  std::string dumpAfter = flags.get("--dump-ir-after").value_or("");
  if (!dumpAfter.empty() && dumpAfter != "all" &&
      !llvm::is_contained(kPipelinePasses, dumpAfter))
    throw UsageError("--dump-ir-after: '" + dumpAfter +
                     "' is not a pass of the pipeline (" +
                     llvm::join(std::begin(kPipelinePasses),
                                std::end(kPipelinePasses), ", ") +
                     ") or all");

  onnx_import::ImportOptions options;
  options.bindings.batch = flags.positiveInt("--batch");
  options.bindings.seqLen = flags.positiveInt("--seq-len");
  for (const std::string &b : flags.all("--bind")) {
    auto eq = b.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UsageError("--bind: '" + b + "' is not NAME=ones|zeros|arange");
    options.bindings.inputs[b.substr(0, eq)] = b.substr(eq + 1);
  }
  for (const std::string &spec : flags.all("--buffers"))
    for (llvm::StringRef name : llvm::split(spec, ','))
      if (!name.empty())
        options.buffers.push_back(name.str());
  options.discoverBlocks = emit != "graph";
  options.detectTies = !flags.has("--no-tie-detect");

  PipelineOptions pipeline;
  pipeline.microBatches = flags.positiveInt("--micro-batches").value_or(1);
  pipeline.slots = flags.positiveInt("--slots").value_or(2);
  if (pipeline.slots < 2)
    throw UsageError("--slots: at least 2 (one slot computes while one fills)");
  pipeline.gpuMemLimit = flags.bytes("--gpu-mem-limit").value_or(0);
  pipeline.minUnitBytes = flags.bytes("--min-unit-bytes").value_or(0);
  if (auto staging = flags.positiveInt("--staging-elems"))
    pipeline.stagingElems = *staging;
  if (auto host = flags.get("--host-checkpoints")) {
    if (*host == "auto")
      pipeline.hostCheckpoints = -1;
    else if (*host == "0")
      pipeline.hostCheckpoints = 0;
    else
      pipeline.hostCheckpoints = *flags.positiveInt("--host-checkpoints");
  }
  pipeline.lossChunkTokens =
      flags.positiveInt("--loss-chunk-tokens").value_or(0);
  pipeline.mlpChunkTokens =
      flags.positiveInt("--mlp-chunk-tokens").value_or(0);
  pipeline.vocabPieces = flags.positiveInt("--vocab-pieces").value_or(0);
  pipeline.preset = flags.get("--preset").value_or(pipeline.preset);
  pipeline.attentionEfficiency =
      flags.fraction("--attention-efficiency").value_or(0);
  const std::string master = flags.get("--master-weights").value_or("fp32");
  if (master != "fp32" && master != "bf16")
    throw UsageError("--master-weights: '" + master +
                     "' is not one of fp32, bf16");
  pipeline.tracePath = flags.get("--sim-trace").value_or("");

  mlir::MLIRContext ctx;
  ctx.loadDialect<MtDialect>();
  std::string modelPath = flags.positional()[0];
  onnx_import::ImportedModel model =
      onnx_import::importOnnx(ctx, modelPath, options);
  mlir::ModuleOp module = *model.module;
  if (master == "bf16") // fp32 stays implicit: the plan hash is unchanged
    module->setAttr(kMasterWeightsAttr, mlir::StringAttr::get(&ctx, master));
  if (emit == "ir" || emit == "graph") {
    if (dumpAfter.empty()) {
      module.print(llvm::outs());
      return 0;
    }
  }

  // Diagnostics of the passes become `error:` lines (after the pipeline
  // stops) and `warning:` lines (as they come).
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &d) {
    if (d.getSeverity() == mlir::DiagnosticSeverity::Error)
      diagnostics += (diagnostics.empty() ? "" : "\n") + d.str();
    else if (d.getSeverity() == mlir::DiagnosticSeverity::Warning)
      llvm::errs() << "warning: " << d.str() << "\n";
    return mlir::success();
  });
  mlir::PassManager pm(&ctx);
  if (!dumpAfter.empty()) {
    ctx.disableMultithreading(); // IR printing needs one thread
    pm.enableIRPrinting(
        [](mlir::Pass *, mlir::Operation *) { return false; },
        [dumpAfter](mlir::Pass *p, mlir::Operation *) {
          return dumpAfter == "all" || p->getArgument() == dumpAfter;
        },
        /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false,
        /*printAfterOnlyOnFailure=*/false, llvm::outs());
  }
  buildTrainingPipeline(pm, pipeline);
  if (mlir::failed(pm.run(module)))
    onnx_import::fail("{}", diagnostics.empty() ? "the pass pipeline failed"
                                                : diagnostics);
  if (emit == "schedule") {
    if (dumpAfter.empty())
      module.print(llvm::outs());
    return 0;
  }
  if (!outDir)
    return 0;

  std::string name = modelNameOf(modelPath);
  mlir::FailureOr<std::string> source = emitTrainerSource(module, name);
  if (mlir::failed(source))
    onnx_import::fail("{}", diagnostics.empty() ? "code generation failed"
                                                : diagnostics);
  OutputDir out(*outDir);
  writeFile(out.file("trainer.cpp"), *source);
  {
    std::string text;
    llvm::raw_string_ostream os(text);
    module.print(os);
    writeFile(out.file("model.mlir"), text);
  }
  {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << llvm::formatv(
        "{0:2}", llvm::json::Value(planJson(
                     module, name, model.constantInitializers, model.buffers)));
    writeFile(out.file("plan.json"), text + "\n");
  }
  writeInitialWeights(module, model, out.file("weights.safetensors"));
  writeFile(out.file("CMakeLists.txt"),
            trainerCMakeLists(kMegaTrainSourceDir, kMegaTrainBuildDir));
  if (!flags.has("--no-build")) {
    std::fprintf(stderr, "megatrain: building %s/trainer ...\n",
                 outDir->c_str());
    std::string err = buildTrainer(out.staging());
    if (!err.empty())
      onnx_import::fail("{}", err);
    llvm::sys::fs::remove_directories(out.file("build"));
  }
  out.commit();
  std::fprintf(stderr, "megatrain: wrote %s (trainer, plan.json, model.mlir)\n",
               outDir->c_str());
  return 0;
}

} // namespace mt::driver
