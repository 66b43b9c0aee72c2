//===- Passes.cpp - registration and the training pipeline ----------------===//
#include "passes/Passes.h"

namespace mt {
namespace {
#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"
} // namespace

void registerPasses() { registerMtPassesPasses(); }

void buildTrainingPipeline(mlir::OpPassManager &pm,
                           const PipelineOptions &options) {
  // Attention on the projections' layout, before its backward is derived.
  pm.addPass(createFoldAttentionLayout());
  // Backward templates first: partitioning and memory planning look at both
  // directions of every template.
  pm.addPass(createDeriveBackward());
  // The head over token rows in chunks, so that logits stay small.
  pm.addPass(createChunkLoss({options.lossChunkTokens}));
  // Each layer's values held as briefly as its order allows.
  pm.addPass(createShortenLifetimes());
  // And each layer's MLP, so that long sequences keep its activations small.
  pm.addPass(createChunkMlp({options.mlpChunkTokens}));
  // An LM head and embedding larger than a layer in vocabulary pieces.
  pm.addPass(createSplitVocab({options.vocabPieces, options.gpuMemLimit}));
  // Units: what moves to the device as one DMA.
  pm.addPass(createPartition({options.minUnitBytes, options.gpuMemLimit}));
  // Offsets inside each unit's packed region.
  pm.addPass(createPackWeights());
  // The compute stream's order and the activation buffers.
  pm.addPass(createSchedule({options.microBatches}));
  // Checkpoints the budget cannot keep on the device go to host.
  pm.addPass(createPlaceCheckpoints(
      {options.gpuMemLimit, options.slots, options.hostCheckpoints}));
  // Copies on the h2d/d2h streams and host tasks, with slot rotation.
  pm.addPass(createInsertTransfers({options.slots, options.stagingElems}));
  // Events wherever two streams touch one buffer.
  pm.addPass(createInsertEvents());
  // Static device offsets and the budget check.
  pm.addPass(createPlanMemory({options.gpuMemLimit}));
  // An independent proof that the events order every conflict.
  pm.addPass(createVerifySchedule());
  // The predicted step time and link-bound fraction that inspect reports.
  SimulateOptions simulate;
  simulate.preset = options.preset;
  simulate.attentionEff = options.attentionEfficiency;
  simulate.tracePath = options.tracePath;
  pm.addPass(createSimulate(simulate));
}

} // namespace mt
