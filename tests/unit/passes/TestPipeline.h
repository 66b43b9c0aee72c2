//===- TestPipeline.h - small models through the real pipeline --*- C++ -*-===//
#ifndef MT_TESTS_UNIT_PASSES_TESTPIPELINE_H
#define MT_TESTS_UNIT_PASSES_TESTPIPELINE_H

#include "ir/MtDialect.h"
#include "ir/MtOps.h"
#include "passes/Passes.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <string>

namespace mt::test {

/// A model-level module: embedding, `layers` decoder layers (rms_norm,
/// linear, residual add) and a head tied to the embedding, on [2, 16]
/// tokens with width 64 and vocabulary 256.
inline std::string smallModel(int layers) {
  std::string s = R"mlir(
module {
  mt.param @wte : tensor<256x64xf32>
  mt.param @head.w tied to @wte {transposed} : tensor<64x256xf32>
  mt.param @norm : tensor<64xf32>
)mlir";
  for (int i = 0; i < layers; ++i)
    s += "  mt.param @l" + std::to_string(i) + ".ln : tensor<64xf32>\n" +
         "  mt.param @l" + std::to_string(i) + ".wq : tensor<64x64xf32>\n";
  s += R"mlir(
  mt.template @embedding kind "embedding" (%ids: tensor<2x16xi32>) params (%t: tensor<256x64xf32>) -> (tensor<2x16x64xf32>) {
    %h = mt.embed %ids, %t : (tensor<2x16xi32>, tensor<256x64xf32>) -> tensor<2x16x64xf32>
    mt.yield %h : tensor<2x16x64xf32>
  }
  mt.template @layer kind "layer" (%x: tensor<2x16x64xf32>) params (%ln: tensor<64xf32>, %wq: tensor<64x64xf32>) -> (tensor<2x16x64xf32>) {
    %n = mt.rms_norm %x, %ln {eps = 1.0e-5 : f64} : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
    %q = mt.linear %n, %wq : (tensor<2x16x64xf32>, tensor<64x64xf32>) -> tensor<2x16x64xf32>
    %y = mt.add %x, %q : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    mt.yield %y : tensor<2x16x64xf32>
  }
  mt.template @head kind "head" (%x: tensor<2x16x64xf32>) params (%g: tensor<64xf32>, %w: tensor<64x256xf32>) -> (tensor<2x16x256xf32>) {
    %n = mt.rms_norm %x, %g {eps = 1.0e-5 : f64} : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
    %l = mt.linear %n, %w {w_layout = "in_out"} : (tensor<2x16x64xf32>, tensor<64x256xf32>) -> tensor<2x16x256xf32>
    mt.yield %l : tensor<2x16x256xf32>
  }
  mt.model @main(%tokens: tensor<2x16xi32>, %targets: tensor<2x16xi32>) -> (tensor<f32>) {
    %h0 = mt.apply @embedding(%tokens) params(@wte) : (tensor<2x16xi32>) -> tensor<2x16x64xf32>
)mlir";
  for (int i = 0; i < layers; ++i) {
    std::string l = std::to_string(i);
    s += "    %h" + std::to_string(i + 1) + " = mt.apply @layer(%h" + l +
         ") layer(" + l + ") params(@l" + l + ".ln, @l" + l +
         ".wq) : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>\n";
  }
  s +=
      "    %lg = mt.apply @head(%h" + std::to_string(layers) +
      R"mlir() params(@norm, @head.w) : (tensor<2x16x64xf32>) -> tensor<2x16x256xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<2x16x256xf32>, tensor<2x16xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}
)mlir";
  return s;
}

/// Collects error diagnostics instead of printing them.
class Diagnostics {
public:
  explicit Diagnostics(mlir::MLIRContext &ctx)
      : handler(&ctx, [this](mlir::Diagnostic &d) {
          if (d.getSeverity() == mlir::DiagnosticSeverity::Error)
            text += d.str() + "\n";
          return mlir::success();
        }) {}
  std::string text;

private:
  mlir::ScopedDiagnosticHandler handler;
};

/// Parses `text` and runs the training pipeline; null (with `error` set)
/// when either fails.
inline mlir::OwningOpRef<mlir::ModuleOp> compile(mlir::MLIRContext &ctx,
                                                 const std::string &text,
                                                 const PipelineOptions &options,
                                                 std::string *error = nullptr) {
  ctx.loadDialect<MtDialect>();
  Diagnostics diags(ctx);
  mlir::OwningOpRef<mlir::ModuleOp> m =
      mlir::parseSourceString<mlir::ModuleOp>(text, &ctx);
  if (m) {
    mlir::PassManager pm(&ctx);
    buildTrainingPipeline(pm, options);
    if (mlir::failed(pm.run(*m)))
      m = nullptr;
  }
  if (error)
    *error = diags.text;
  return m;
}

/// Runs one pass on `module`; returns its error text, empty on success.
inline std::string runPass(mlir::ModuleOp module,
                           std::unique_ptr<mlir::Pass> pass) {
  Diagnostics diags(*module.getContext());
  mlir::PassManager pm(module.getContext());
  pm.addPass(std::move(pass));
  if (mlir::succeeded(pm.run(module)))
    return "";
  return diags.text.empty() ? "failed without a diagnostic" : diags.text;
}

inline ScheduleOp scheduleOf(mlir::ModuleOp module) {
  auto s = module.getOps<ScheduleOp>();
  return s.empty() ? ScheduleOp() : *s.begin();
}

} // namespace mt::test

#endif // MT_TESTS_UNIT_PASSES_TESTPIPELINE_H
