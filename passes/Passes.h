//===- Passes.h - MegaTrain's passes ----------------------------*- C++ -*-===//
#ifndef MT_PASSES_PASSES_H
#define MT_PASSES_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include <cstdint>
#include <string>

namespace mt {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

/// Registers every mt pass with the global registry (for megatrain-opt).
void registerPasses();

/// What the training pipeline needs from the driver's flags.
struct PipelineOptions {
  int64_t microBatches = 1;
  int64_t slots = 2;
  int64_t stagingElems = int64_t(1) << 23; // per staging slab
  int64_t gpuMemLimit = 0;  // bytes; 0 = unlimited
  int64_t minUnitBytes = 0; // merge layers smaller than this
  int64_t hostCheckpoints = -1; // layers whose checkpoints go to host; -1: by budget
  int64_t lossChunkTokens = 0;  // token rows per chunk of the head; 0: by size
  int64_t mlpChunkTokens = 0;   // token rows per chunk of a layer's MLP; 0: by size
  int64_t vocabPieces = 0;      // LM head/embedding pieces; 0: by budget
  std::string preset = "h200-pcie5";
  double attentionEfficiency = 0; // fused attention's share of peak; 0: ours
  std::string tracePath;    // predicted timeline, Chrome trace JSON
};

/// Adds the passes from the model level to a verified, simulated schedule.
void buildTrainingPipeline(mlir::OpPassManager &pm,
                           const PipelineOptions &options);

} // namespace mt

#endif // MT_PASSES_PASSES_H
