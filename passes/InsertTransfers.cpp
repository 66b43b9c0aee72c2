//===- InsertTransfers.cpp - copies and host tasks around the launches ----===//
//
// Issue order of one step, with N weight slots and visits v0, v1, ... (a
// visit is a unit's run of launches in one direction):
//
//   load_batch; h2d batch -> tokens
//   prefetch visits 0 .. N-2: [adamw u] pack u -> stage; h2d stage -> slot
//   for each visit i:
//     [adamw u'] pack u' (visit i+N-1); accumulate visit i-1's gradients;
//     h2d stage -> slot (visit i+N-1)
//     launches of visit i
//     d2h gradient slot -> landing slab (backward visits); d2h loss (head)
//   accumulate the last visit; grad_norm
//
// so the host packs ahead of the h2d stream, which copies ahead of compute,
// and gradients drain behind it. A unit's deferred optimizer update
// (mt.adamw, applying the previous step's gradients) comes right before its
// forward pack.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "passes/ModelInfo.h"
#include "mlir/IR/Builders.h"

namespace mt {
#define GEN_PASS_DEF_INSERTTRANSFERS
#include "passes/Passes.h.inc"
} // namespace mt

using namespace mlir;
using namespace mt;

namespace {

struct Visit {
  StringRef unit;
  bool backward;
  SmallVector<LaunchOp> launches;
  int gradSlot = -1; // gradient slot of a backward visit
};

std::string indexed(StringRef base, int64_t i) {
  return (base + "." + std::to_string(i)).str();
}

struct InsertTransfersPass
    : public mt::impl::InsertTransfersBase<InsertTransfersPass> {
  using InsertTransfersBase::InsertTransfersBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto schedules = llvm::to_vector(module.getOps<ScheduleOp>());
    if (schedules.size() != 1) {
      module.emitError("mt-insert-transfers needs one mt.schedule: run "
                       "mt-schedule first");
      return signalPassFailure();
    }
    ScheduleOp step = schedules[0];
    if (!step.getBody().front().getOps<H2DOp>().empty())
      return; // already done
    if (slots < 2) {
      module.emitError("slots must be at least 2 (one to compute from, one "
                       "to fill)");
      return signalPassFailure();
    }
    SymbolTable symbols(module);

    SmallVector<Visit> visits;
    for (LaunchOp l : step.getBody().front().getOps<LaunchOp>()) {
      bool bwd = l.getDirection() == "bwd";
      if (visits.empty() || visits.back().unit != l.getUnit() ||
          visits.back().backward != bwd)
        visits.push_back({l.getUnit(), bwd, {}});
      visits.back().launches.push_back(l);
    }
    int64_t maxElems = 0;
    for (UnitOp u : module.getOps<UnitOp>()) {
      if (!u.getElems()) {
        module.emitError("mt-insert-transfers needs packed units: run "
                         "mt-pack-weights first");
        return signalPassFailure();
      }
      maxElems = std::max<int64_t>(maxElems, *u.getElems());
    }
    int numGrad = 0;
    for (Visit &v : visits)
      if (v.backward)
        v.gradSlot = numGrad++ % 2;

    // Buffers: N weight slots and staging slabs, two gradient slots and
    // landing slabs, the batch and the landed losses.
    Location loc = step.getLoc();
    OpBuilder b(step);
    auto tokens = symbols.lookup<BufferOp>("tokens");
    auto loss = symbols.lookup<BufferOp>("loss");
    for (int64_t k = 0; k < slots; ++k) {
      declareBuffer(b, loc, indexed("wslot", k), "device", "weights", maxElems,
                    "storage");
      declareBuffer(b, loc, indexed("stage", k), "host", "staging", maxElems,
                    "storage");
    }
    for (int k = 0; k < std::min(numGrad, 2); ++k) {
      declareBuffer(b, loc, indexed("gslot", k), "device", "grads", maxElems,
                    "f32");
      declareBuffer(b, loc, indexed("gstage", k), "host", "grad_staging",
                    maxElems, "f32");
    }
    declareBuffer(b, loc, "batch", "host", "batch", tokens.getElems(), "i32");
    declareBuffer(b, loc, "loss.host", "host", "loss_host", loss.getElems(),
                  "f32");

    // Rebuild the body in the new issue order.
    Block &body = step.getBody().front();
    b.setInsertionPointToEnd(&body);
    auto sym = [&](StringRef s) { return FlatSymbolRefAttr::get(b.getContext(), s); };
    b.create<LoadBatchOp>(loc, sym("batch"), b.getStringAttr("host"));
    b.create<H2DOp>(loc, sym("batch"), sym("tokens"), b.getStringAttr("h2d"));
    auto fetch = [&](int64_t i) {
      if (i >= static_cast<int64_t>(visits.size()))
        return;
      Visit &v = visits[i];
      // The deferred update of last step's gradients precedes the first
      // (forward) pack of the unit in this step.
      if (isFirstVisit(visits, i))
        b.create<AdamWOp>(loc, sym(v.unit), b.getStringAttr("host"));
      std::string stage = indexed("stage", i % slots);
      b.create<PackOp>(loc, sym(v.unit), sym(stage), b.getStringAttr("host"));
    };
    auto copy = [&](int64_t i) {
      if (i >= static_cast<int64_t>(visits.size()))
        return;
      b.create<H2DOp>(loc, sym(indexed("stage", i % slots)),
                      sym(indexed("wslot", i % slots)), b.getStringAttr("h2d"));
    };
    auto drain = [&](int64_t i) { // host side of a backward visit's gradients
      if (i >= 0 && visits[i].backward)
        b.create<AccumulateOp>(loc, sym(indexed("gstage", visits[i].gradSlot)),
                               sym(visits[i].unit), b.getStringAttr("host"));
    };
    for (int64_t i = 0; i + 1 < slots; ++i) {
      fetch(i);
      copy(i);
    }
    for (int64_t i = 0; i < static_cast<int64_t>(visits.size()); ++i) {
      Visit &v = visits[i];
      fetch(i + slots - 1);
      drain(i - 1);
      copy(i + slots - 1);
      for (auto [k, l] : llvm::enumerate(v.launches)) {
        l->moveBefore(&body, body.end());
        l.setWeightsAttr(sym(indexed("wslot", i % slots)));
        if (v.backward) {
          l.setGradsAttr(sym(indexed("gslot", v.gradSlot)));
          l.setFresh(k == 0);
        }
      }
      b.setInsertionPointToEnd(&body);
      if (v.backward)
        b.create<D2HOp>(loc, sym(indexed("gslot", v.gradSlot)),
                        sym(indexed("gstage", v.gradSlot)), b.getStringAttr("d2h"));
      if (llvm::any_of(v.launches, [](LaunchOp l) {
            return llvm::any_of(l.getOutputs(), [](Attribute o) {
              return cast<FlatSymbolRefAttr>(o).getValue() == "loss";
            });
          }))
        b.create<D2HOp>(loc, sym("loss"), sym("loss.host"), b.getStringAttr("d2h"));
    }
    drain(visits.size() - 1);
    b.create<GradNormOp>(loc, b.getStringAttr("host"));
  }

  // The first visit of a unit in the step (its forward visit, or the head's
  // only one).
  static bool isFirstVisit(ArrayRef<Visit> visits, int64_t i) {
    for (int64_t j = 0; j < i; ++j)
      if (visits[j].unit == visits[i].unit)
        return false;
    return true;
  }
};

} // namespace
