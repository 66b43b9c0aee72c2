//===- InsertTransfers.cpp - copies and host tasks around the launches ----===//
//
// Issue order of one step, with N weight slots and visits v0, v1, ... (a
// visit is a unit's run of launches in one direction):
//
//   load_batch; h2d batch -> tokens
//   prefetch visits 0 .. N-2
//   for each visit i:
//     prefetch visit i+N-1: [adamw u] then, chunk by chunk,
//                           pack u -> staging slab; h2d slab -> weight slot
//     drain visit i-1:      chunk by chunk, d2h gradient slot -> landing
//                           slab; accumulate slab into u's gradients
//     launches of visit i   (then d2h of the losses, for the head)
//   drain the last visit; grad_norm
//
// so the host packs ahead of the h2d stream, which copies ahead of compute,
// and gradients drain behind it. Units move in chunks of at most
// `staging-elems` elements through rings of two staging and two landing
// slabs: pinned host memory stays bounded however large a unit is. A unit's
// deferred optimizer update (mt.adamw, applying the previous step's
// gradients) comes right before its forward pack.
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

    // Buffers: N weight slots, two gradient slots, rings of two staging
    // and two landing slabs of one chunk each, the batch and the losses.
    Location loc = step.getLoc();
    OpBuilder b(step);
    auto tokens = symbols.lookup<BufferOp>("tokens");
    auto loss = symbols.lookup<BufferOp>("loss");
    int64_t chunk = std::min<int64_t>(maxElems, stagingElems);
    chunk = (chunk + 2047) / 2048 * 2048;
    for (int64_t k = 0; k < slots; ++k)
      declareBuffer(b, loc, indexed("wslot", k), "device", "weights", maxElems,
                    "storage");
    for (int k = 0; k < 2; ++k)
      declareBuffer(b, loc, indexed("stage", k), "host", "staging", chunk,
                    "storage");
    for (int k = 0; k < std::min(numGrad, 2); ++k) {
      declareBuffer(b, loc, indexed("gslot", k), "device", "grads", maxElems,
                    "f32");
      declareBuffer(b, loc, indexed("gstage", k), "host", "grad_staging",
                    chunk, "f32");
    }
    declareBuffer(b, loc, "batch", "host", "batch", tokens.getElems(), "i32");
    declareBuffer(b, loc, "loss.host", "host", "loss_host", loss.getElems(),
                  "f32");
    // Offloaded checkpoints pass through device rings: `fact` between a
    // forward that writes one and the next forward that reads it (and the
    // d2h that saves it), `bact` for the copy back ahead of the backward.
    int64_t offloadElems = 0;
    for (BufferOp buf : module.getOps<BufferOp>())
      if (buf.getKind() == "checkpoint" && buf.getSpace() == "host")
        offloadElems = std::max<int64_t>(offloadElems, buf.getElems());
    int64_t M = step->getAttrOfType<IntegerAttr>("micro_batches").getInt();
    if (offloadElems > 0)
      for (int64_t mb = 0; mb < M; ++mb) {
        for (int k = 0; k < 2; ++k)
          declareBuffer(b, loc, ringName("fact", k, mb), "device", "checkpoint",
                        offloadElems, "storage");
        for (int64_t k = 0; k < slots; ++k)
          declareBuffer(b, loc, ringName("bact", k, mb), "device", "checkpoint",
                        offloadElems, "storage");
      }
    auto onHost = [&](Attribute ref) {
      auto buf = symbols.lookup<BufferOp>(cast<FlatSymbolRefAttr>(ref).getValue());
      return buf && buf.getKind() == "checkpoint" && buf.getSpace() == "host";
    };

    // An offloaded checkpoint is saved once its last writer is done (the
    // pieces of an embedding in vocabulary pieces each write some rows).
    llvm::DenseMap<Attribute, Operation *> lastWriter;
    for (Visit &v : visits)
      if (!v.backward)
        for (LaunchOp l : v.launches)
          for (Attribute o : l.getOutputs())
            lastWriter[o] = l;

    // Rebuild the body in the new issue order.
    Block &body = step.getBody().front();
    b.setInsertionPointToEnd(&body);
    auto sym = [&](StringRef s) { return FlatSymbolRefAttr::get(b.getContext(), s); };
    auto str = [&](StringRef s) { return b.getStringAttr(s); };
    auto elemsOf = [&](StringRef unit) {
      return static_cast<int64_t>(*symbols.lookup<UnitOp>(unit).getElems());
    };
    int64_t stagingUses = 0, landingUses = 0; // the rings' positions
    b.create<LoadBatchOp>(loc, sym("batch"), str("host"));
    b.create<H2DOp>(loc, sym("batch"), sym("tokens"), str("h2d"),
                    DenseI64ArrayAttr());
    auto prefetch = [&](int64_t i) {
      if (i >= static_cast<int64_t>(visits.size()))
        return;
      Visit &v = visits[i];
      // The deferred update of last step's gradients precedes the first
      // (forward) pack of the unit in this step.
      if (isFirstVisit(visits, i))
        b.create<AdamWOp>(loc, sym(v.unit), str("host"));
      // Offloaded checkpoints the backward reads come back first.
      for (LaunchOp l : v.launches) {
        if (!v.backward || l.getInputs().empty() || !onHost(l.getInputs()[0]))
          continue;
        std::string ring = ringName("bact", i % slots, l.getMb());
        b.create<H2DOp>(loc, cast<FlatSymbolRefAttr>(l.getInputs()[0]),
                        sym(ring), str("h2d"), DenseI64ArrayAttr());
        SmallVector<Attribute> ins(l.getInputs().begin(), l.getInputs().end());
        ins[0] = sym(ring);
        l.setInputsAttr(b.getArrayAttr(ins));
      }
      std::string slot = indexed("wslot", i % slots);
      for (int64_t at = 0, n = elemsOf(v.unit); at < n; at += chunk) {
        auto range = b.getDenseI64ArrayAttr({at, std::min(chunk, n - at)});
        std::string stage = indexed("stage", stagingUses++ % 2);
        b.create<PackOp>(loc, sym(v.unit), sym(stage), str("host"), range);
        b.create<H2DOp>(loc, sym(stage), sym(slot), str("h2d"), range);
      }
    };
    auto drain = [&](int64_t i) {
      if (i < 0 || !visits[i].backward)
        return;
      Visit &v = visits[i];
      std::string gslot = indexed("gslot", v.gradSlot);
      for (int64_t at = 0, n = elemsOf(v.unit); at < n; at += chunk) {
        auto range = b.getDenseI64ArrayAttr({at, std::min(chunk, n - at)});
        std::string landing = indexed("gstage", landingUses++ % 2);
        b.create<D2HOp>(loc, sym(gslot), sym(landing), str("d2h"), range);
        b.create<AccumulateOp>(loc, sym(landing), sym(v.unit), str("host"),
                               range);
      }
    };
    for (int64_t i = 0; i + 1 < slots; ++i)
      prefetch(i);
    for (int64_t i = 0; i < static_cast<int64_t>(visits.size()); ++i) {
      Visit &v = visits[i];
      prefetch(i + slots - 1);
      drain(i - 1);
      for (auto [k, l] : llvm::enumerate(v.launches)) {
        l->moveBefore(&body, body.end());
        l.setWeightsAttr(sym(indexed("wslot", i % slots)));
        if (v.backward) {
          l.setGradsAttr(sym(indexed("gslot", v.gradSlot)));
          l.setFresh(k == 0);
        }
      }
      b.setInsertionPointToEnd(&body);
      // A forward writing an offloaded checkpoint writes it to the `fact`
      // ring (where the next forward reads it) and saves it to host.
      for (LaunchOp l : v.launches) {
        if (v.backward)
          continue;
        auto retarget = [&](ArrayAttr refs, bool save) {
          SmallVector<Attribute> out(refs.begin(), refs.end());
          for (Attribute &ref : out) {
            if (!onHost(ref))
              continue;
            StringRef name = cast<FlatSymbolRefAttr>(ref).getValue();
            std::string ring = ringName("fact", applyOf(name) % 2, l.getMb());
            if (save && lastWriter.lookup(ref) == l.getOperation())
              b.create<D2HOp>(loc, sym(ring), cast<FlatSymbolRefAttr>(ref),
                              str("d2h"), DenseI64ArrayAttr());
            ref = sym(ring);
          }
          return b.getArrayAttr(out);
        };
        l.setInputsAttr(retarget(l.getInputs(), false));
        l.setOutputsAttr(retarget(l.getOutputs(), true));
      }
      if (llvm::any_of(v.launches, [](LaunchOp l) {
            return llvm::any_of(l.getOutputs(), [](Attribute o) {
              return cast<FlatSymbolRefAttr>(o).getValue() == "loss";
            });
          }))
        b.create<D2HOp>(loc, sym("loss"), sym("loss.host"), str("d2h"),
                        DenseI64ArrayAttr());
    }
    drain(visits.size() - 1);
    b.create<GradNormOp>(loc, str("host"));
  }

  static std::string ringName(StringRef base, int64_t k, int64_t mb) {
    return (base + "." + std::to_string(k) + "." + std::to_string(mb)).str();
  }

  // The application whose input the checkpoint ckpt.A.MB is.
  static int64_t applyOf(StringRef ckpt) {
    int64_t a = 0;
    ckpt.split('.').second.split('.').first.getAsInteger(10, a);
    return a;
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
