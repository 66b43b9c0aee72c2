//===- Schedule.cpp - the compute stream's order of one step --------------===//
#include "passes/Passes.h"

#include "passes/ModelInfo.h"
#include "mlir/IR/Builders.h"

namespace mt {
#define GEN_PASS_DEF_SCHEDULE
#include "passes/Passes.h.inc"
} // namespace mt

using namespace mlir;
using namespace mt;

namespace {

std::string ckpt(int64_t apply, int64_t mb) {
  return "ckpt." + std::to_string(apply) + "." + std::to_string(mb);
}

// Backward launches ping-pong between two activation-gradient buffers per
// micro-batch: application a writes dact.(a%2) and reads what a+1 wrote.
std::string dact(int64_t apply, int64_t mb) {
  return "dact." + std::to_string(apply % 2) + "." + std::to_string(mb);
}

struct SchedulePass : public mt::impl::ScheduleBase<SchedulePass> {
  using ScheduleBase::ScheduleBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (!module.getOps<ScheduleOp>().empty())
      return;
    auto apps = applicationsOf(module);
    if (failed(apps))
      return signalPassFailure();
    auto units = llvm::to_vector(module.getOps<UnitOp>());
    if (units.empty()) {
      module.emitError("mt-schedule needs units: run mt-partition first");
      return signalPassFailure();
    }
    if (microBatches < 1) {
      module.emitError("micro-batches must be at least 1");
      return signalPassFailure();
    }
    SymbolTable symbols(module);
    Location loc = module.getLoc();
    OpBuilder b(module.getBodyRegion());
    b.setInsertionPointToEnd(module.getBody());
    int64_t M = microBatches;

    // Buffers: tokens (ids and targets per micro-batch), losses, a block
    // input checkpoint per application and micro-batch, activation grads.
    Type tokens = (*apps)[0].op.getInputs()[0].getType();
    int64_t tokenElems = elementsOf(tokens);
    declareBuffer(b, loc, "tokens", "device", "tokens", 2 * tokenElems * M,
                  "i32");
    declareBuffer(b, loc, "loss", "device", "loss", M, "f32");
    int64_t gradElems = 0;
    for (Application &a : llvm::drop_begin(*apps)) {
      int64_t elems = elementsOf(a.op.getInputs()[0].getType());
      gradElems = std::max(gradElems, elems);
      for (int64_t mb = 0; mb < M; ++mb)
        declareBuffer(b, loc, ckpt(a.index, mb), "device", "checkpoint", elems,
                      "storage");
    }
    for (int parity = 0; parity < 2; ++parity)
      for (int64_t mb = 0; mb < M; ++mb)
        declareBuffer(b, loc, dact(parity, mb), "device", "activation_grad",
                      gradElems, "storage");

    auto step = b.create<ScheduleOp>(loc, "step");
    step->setAttr("micro_batches", b.getI64IntegerAttr(M));
    b.createBlock(&step.getBody());
    auto ref = [&](StringRef name) { return FlatSymbolRefAttr::get(b.getContext(), name); };
    auto refs = [&](ArrayRef<std::string> names) {
      SmallVector<Attribute> r;
      for (const std::string &n : names)
        r.push_back(ref(n));
      return b.getArrayAttr(r);
    };
    int64_t last = apps->size() - 1;
    auto launch = [&](UnitOp unit, Application &a, int64_t mb, bool backward) {
      StringRef kind = a.tmpl.getKind();
      std::string callee = a.tmpl.getSymName().str() + (backward ? ".bwd" : "");
      if (!symbols.lookup(callee)) {
        module.emitError("no template @") << callee << ": run mt-derive-backward first";
        return false;
      }
      std::vector<std::string> ins, outs;
      if (kind == "head") { // forward, loss and backward in one launch
        ins = {ckpt(a.index, mb), "tokens"};
        outs = {"loss", dact(a.index, mb)};
      } else if (!backward) {
        ins = {kind == "embedding" ? "tokens" : ckpt(a.index, mb)};
        outs = {ckpt(a.index + 1, mb)};
      } else {
        ins = {kind == "embedding" ? "tokens" : ckpt(a.index, mb),
               dact(a.index + 1, mb)};
        if (kind != "embedding")
          outs = {dact(a.index, mb)};
      }
      b.create<LaunchOp>(loc, callee, backward ? "bwd" : "fwd",
                         unit.getSymName(), a.index, mb, FlatSymbolRefAttr(),
                         refs(ins), refs(outs), FlatSymbolRefAttr(), false,
                         "compute");
      return true;
    };
    // Forward: each unit's applications for every micro-batch while it is
    // resident; the head (the last application) runs forward, loss and
    // backward in its one visit.
    for (UnitOp unit : units)
      for (int64_t idx : unit.getApplies())
        for (int64_t mb = 0; mb < M; ++mb)
          if (!launch(unit, (*apps)[idx], mb, idx == last))
            return signalPassFailure();
    // Backward: units in reverse, the head excluded.
    for (UnitOp unit : llvm::reverse(units))
      for (int64_t idx : llvm::reverse(unit.getApplies()))
        if (idx != last)
          for (int64_t mb = 0; mb < M; ++mb)
            if (!launch(unit, (*apps)[idx], mb, true))
              return signalPassFailure();
  }
};

} // namespace
