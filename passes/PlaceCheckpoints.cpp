//===- PlaceCheckpoints.cpp - block-input checkpoints: device or host -----===//
//
// The device holds, besides checkpoints, what does not shrink: the weight
// and gradient slots, the template scratch, the activation gradients, the
// tokens and, once anything is offloaded, the rings that stage offloaded
// checkpoints on their way out and back in. What the budget leaves after
// that holds checkpoints; the rest go to host, earliest layers first.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "passes/ModelInfo.h"
#include "passes/TemplateMemory.h"

#include "mlir/IR/Builders.h"

namespace mt {
#define GEN_PASS_DEF_PLACECHECKPOINTS
#include "passes/Passes.h.inc"
} // namespace mt

using namespace mlir;
using namespace mt;

namespace {

struct PlaceCheckpointsPass
    : public mt::impl::PlaceCheckpointsBase<PlaceCheckpointsPass> {
  using PlaceCheckpointsBase::PlaceCheckpointsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // Checkpoints by application, in application order; the head's input
    // is consumed as soon as it is made and stays on the device.
    std::map<int64_t, SmallVector<BufferOp>> byApply;
    for (BufferOp b : module.getOps<BufferOp>()) {
      if (b.getKind() != "checkpoint" || !b.getSymName().starts_with("ckpt."))
        continue;
      // ckpt.APPLY.MB
      int64_t apply = 0;
      if (b.getSymName().split('.').second.split('.').first.getAsInteger(10,
                                                                        apply))
        continue;
      byApply[apply].push_back(b);
    }
    if (byApply.empty())
      return;
    byApply.erase(std::prev(byApply.end()));
    int64_t offload = hostCheckpoints >= 0
                          ? std::min<int64_t>(hostCheckpoints, byApply.size())
                          : byBudget(module, byApply);
    if (offload < 0)
      return signalPassFailure();
    Builder b(module.getContext());
    for (auto &[apply, buffers] : byApply) {
      if (offload-- <= 0)
        break;
      for (BufferOp buf : buffers)
        buf.setSpace("host");
    }
  }

  // How many layers' checkpoints the budget cannot keep on the device.
  int64_t byBudget(ModuleOp module,
                   const std::map<int64_t, SmallVector<BufferOp>> &byApply) {
    if (gpuMemLimit <= 0)
      return 0;
    int64_t maxUnit = 0, workspace = 0, fixed = 0, perLayer = 0, perMb = 0;
    for (UnitOp u : module.getOps<UnitOp>())
      maxUnit = std::max<int64_t>(maxUnit, u.getElems() ? *u.getElems() : 0);
    workspace = launchScratchElems(module);
    for (BufferOp buf : module.getOps<BufferOp>())
      if (buf.getKind() != "checkpoint")
        fixed += buf.getElems() * (buf.getDtype() == "storage" ? 2 : 4);
    for (BufferOp buf : byApply.begin()->second)
      perMb = std::max<int64_t>(perMb, 2 * buf.getElems());
    perLayer = perMb * byApply.begin()->second.size();
    // Slots (bf16 weights, f32 gradients), scratch, and the head's input.
    fixed += slots * 2 * maxUnit + 2 * 4 * maxUnit + 2 * workspace + perLayer;
    int64_t layers = byApply.size();
    int64_t excess = fixed + layers * perLayer - gpuMemLimit;
    if (excess <= 0)
      return 0;
    // Offloading adds rings that stage checkpoints out (2) and in (slots):
    // k layers save k * perLayer - rings. When even all of them save
    // nothing, keep them (mt-plan-memory then says what else to change).
    int64_t rings = (2 + slots) * perLayer;
    if (layers * perLayer <= rings)
      return 0;
    int64_t k = (excess + rings + perLayer - 1) / perLayer;
    return std::min(k, layers);
  }
};

} // namespace
