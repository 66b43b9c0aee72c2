//===- Compile.cpp - megatrain compile ------------------------------------===//
#include "tools/megatrain/Commands.h"
#include "tools/megatrain/Flags.h"

#include "frontend/Error.h"
#include "frontend/Importer.h"
#include "ir/MtDialect.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>

namespace mt::driver {
namespace {

const char *kCompileUsage = R"(usage: megatrain compile MODEL.onnx [flags]

  --batch B            sequences per micro-batch (binds the batch dim)
  --seq-len S          tokens per sequence (binds the sequence dim)
  --bind NAME=HOW      bind an extra graph input: ones, zeros or arange
                       (attention_mask, position_ids, token_type_ids are
                       bound by default)
  --emit=KIND          ir: the model-level IR (templates and applications);
                       graph: the fused primitives as one template, without
                       block discovery
  --no-tie-detect      do not tie initializers that hold the same data
  --help               this text
)";

} // namespace

int runCompile(const std::vector<std::string> &args) {
  Flags flags(args, {"--batch", "--seq-len", "--bind", "--emit"},
              {"--no-tie-detect", "--help"});
  if (flags.has("--help")) {
    std::fputs(kCompileUsage, stdout);
    return 0;
  }
  if (flags.positional().size() != 1)
    throw UsageError("compile takes one model file (see compile --help)");
  std::string emit = flags.get("--emit").value_or("ir");
  if (emit != "ir" && emit != "graph")
    throw UsageError("--emit: '" + emit + "' is not one of ir, graph");

  onnx_import::ImportOptions options;
  options.bindings.batch = flags.positiveInt("--batch");
  options.bindings.seqLen = flags.positiveInt("--seq-len");
  for (const std::string &b : flags.all("--bind")) {
    auto eq = b.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UsageError("--bind: '" + b + "' is not NAME=ones|zeros|arange");
    options.bindings.inputs[b.substr(0, eq)] = b.substr(eq + 1);
  }
  options.discoverBlocks = emit != "graph";
  options.detectTies = !flags.has("--no-tie-detect");

  mlir::MLIRContext ctx;
  ctx.loadDialect<MtDialect>();
  onnx_import::ImportedModel model =
      onnx_import::importOnnx(ctx, flags.positional()[0], options);
  model.module->print(llvm::outs());
  llvm::outs().flush();
  return 0;
}

int runInspect(const std::vector<std::string> &) {
  throw UsageError("inspect needs a compiled plan; compile with -o DIR first");
}

} // namespace mt::driver
