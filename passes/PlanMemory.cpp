//===- PlanMemory.cpp - the static device arena ---------------------------===//
//
// Every device buffer lives for the whole step (slots rotate, checkpoints
// live from forward to backward), so the arena is their sum: the peak is
// exact, and it is known before anything runs. Offsets are in elements of
// each buffer's type, within one arena per type, so the runtime can lay the
// same plan out for bf16 (GPU) or f32 (CPU) storage; the budget is checked
// for bf16.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "passes/ModelInfo.h"
#include "mlir/IR/Builders.h"
#include "passes/TemplateMemory.h"

#include "llvm/Support/FormatVariadic.h"

#include <map>

namespace mt {
#define GEN_PASS_DEF_PLANMEMORY
#include "passes/Passes.h.inc"
} // namespace mt

using namespace mlir;
using namespace mt;

namespace {

constexpr int64_t kAlign = 256; // elements

int64_t bytesPer(StringRef dtype) { return dtype == "storage" ? 2 : 4; }

std::string gib(int64_t bytes) {
  return llvm::formatv("{0:F2} GiB", bytes / double(1 << 30)).str();
}

struct PlanMemoryPass : public mt::impl::PlanMemoryBase<PlanMemoryPass> {
  using PlanMemoryBase::PlanMemoryBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto schedules = llvm::to_vector(module.getOps<ScheduleOp>());
    if (schedules.size() != 1) {
      module.emitError("mt-plan-memory needs one mt.schedule");
      return signalPassFailure();
    }
    ScheduleOp step = schedules[0];
    SymbolTable symbols(module);

    // Template scratch: the largest any launched template needs.
    int64_t workspace = launchScratchElems(module);
    if (!symbols.lookup("workspace")) {
      OpBuilder b(step);
      declareBuffer(b, step.getLoc(), "workspace", "device", "workspace",
                    workspace, "storage");
    } else {
      symbols.lookup<BufferOp>("workspace").setElems(workspace);
    }

    std::map<std::string, int64_t> next;     // dtype -> next free element
    std::map<std::string, int64_t> byKind;   // kind -> bytes
    int64_t total = 0, perMicroBatch = 0;
    auto mbAttr = step->getAttrOfType<IntegerAttr>("micro_batches");
    if (!mbAttr) {
      step.emitOpError("needs a micro_batches attribute (set by mt-schedule)");
      return signalPassFailure();
    }
    int64_t M = mbAttr.getInt();
    for (BufferOp buf : module.getOps<BufferOp>()) {
      if (buf.getSpace() != "device")
        continue;
      int64_t &at = next[buf.getDtype().str()];
      buf.setOffset(at);
      int64_t elems = (buf.getElems() + kAlign - 1) / kAlign * kAlign;
      at += elems;
      int64_t bytes = elems * bytesPer(buf.getDtype());
      total += bytes;
      byKind[buf.getKind().str()] += bytes;
      if (buf.getKind() == "checkpoint" || buf.getKind() == "activation_grad" ||
          buf.getKind() == "loss_state")
        perMicroBatch += bytes / M;
    }
    Builder b(module.getContext());
    SmallVector<NamedAttribute> breakdown;
    for (auto &[kind, bytes] : byKind)
      breakdown.push_back(b.getNamedAttr(kind, b.getI64IntegerAttr(bytes)));
    step->setAttr("device_bytes", b.getI64IntegerAttr(total));
    step->setAttr("device_breakdown", b.getDictionaryAttr(breakdown));
    // The runtime keeps its optional scratch (cuDNN's) within the budget.
    if (gpuMemLimit > 0)
      step->setAttr("device_budget", b.getI64IntegerAttr(gpuMemLimit));

    if (gpuMemLimit <= 0 || total <= gpuMemLimit)
      return;
    std::string lines;
    for (auto &[kind, bytes] : byKind)
      lines += "\n  " + kind + ": " + gib(bytes);
    std::string hint;
    int64_t fixed = total - perMicroBatch * M;
    int64_t slots = byKind["weights"] + byKind["grads"];
    if (M > 1 && fixed + perMicroBatch <= gpuMemLimit) {
      int64_t fits = (gpuMemLimit - fixed) / perMicroBatch;
      hint = llvm::formatv("--micro-batches {0} fits ({1})", fits,
                           gib(fixed + fits * perMicroBatch))
                 .str();
    } else if (slots < gpuMemLimit) {
      // Everything but the weight and gradient slots scales with the
      // sequence length.
      double scale = double(gpuMemLimit - slots) / double(total - slots);
      hint = llvm::formatv("a sequence about {0:F0}% as long (--seq-len) "
                           "fits, at one micro-batch",
                           100 * scale * (M > 1 ? 1.0 / M : 1.0))
                 .str();
    } else {
      hint = "the weight and gradient slots alone exceed it: fewer --slots, "
             "or a larger budget";
    }
    // Slots sized by an LM head or embedding that outweighs every layer
    // shrink when it runs in vocabulary pieces.
    int64_t layerElems = 0, vocabElems = 0;
    for (UnitOp u : module.getOps<UnitOp>()) {
      int64_t e = u.getElems() ? *u.getElems() : 0;
      (u.getKind() == "layer" ? layerElems : vocabElems) =
          std::max(u.getKind() == "layer" ? layerElems : vocabElems, e);
    }
    if (layerElems > 0 && vocabElems > layerElems)
      hint += llvm::formatv("; or --vocab-pieces {0}: the weight and gradient "
                            "slots shrink by {1}",
                            (vocabElems + layerElems - 1) / layerElems,
                            gib(slots - slots * layerElems / vocabElems))
                  .str();
    module.emitError() << "the plan needs " << gib(total)
                       << " of device memory, over the budget of "
                       << gib(gpuMemLimit) << ":" << lines << "\nhint: " << hint;
    signalPassFailure();
  }
};

} // namespace
