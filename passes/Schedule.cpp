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

// What a head in vocabulary pieces hands from piece to piece.
std::string headState(StringRef what, int64_t mb) {
  return ("head." + what + "." + std::to_string(mb)).str();
}

// The template of piece j of a (mt-split-vocab's names).
std::string pieceName(Application &a, int64_t j, bool backward) {
  return (a.tmpl.getSymName() + ".vp" + std::to_string(j) +
          (backward ? ".bwd" : ""))
      .str();
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
    // A head in vocabulary pieces hands on, per micro-batch, its normed
    // input h, the log-sum-exp statistics and the gradient of h.
    for (Application &a : *apps)
      if (a.tmpl.getKind() == "head" && a.op.getVocabPieces()) {
        auto first = symbols.lookup<TemplateOp>(pieceName(a, 0, false));
        if (!first) {
          module.emitError("no template for the head's first vocabulary "
                           "piece: run mt-split-vocab first");
          return signalPassFailure();
        }
        int64_t h = elementsOf(first.getFunctionType().getResult(0));
        int64_t stats = elementsOf(first.getFunctionType().getResult(1));
        for (int64_t mb = 0; mb < M; ++mb) {
          declareBuffer(b, loc, headState("h", mb), "device", "loss_state", h,
                        "storage");
          declareBuffer(b, loc, headState("stats", mb), "device",
                        "loss_state", stats, "f32");
          declareBuffer(b, loc, headState("dh", mb), "device", "loss_state",
                        h, "storage");
        }
      }

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
    // A unit's piece of its application's vocabulary, or -1.
    auto pieceOf = [&](UnitOp unit, Application &a) -> int64_t {
      if (!unit.getVocabRows())
        return -1;
      return llvm::find(*a.op.getVocabPieces(), (*unit.getVocabRows())[0]) -
             a.op.getVocabPieces()->begin();
    };
    auto isLastPiece = [&](UnitOp unit, Application &a) {
      return unit.getVocabRows() &&
             (*unit.getVocabRows())[1] == a.op.getVocabPieces()->back();
    };
    auto launch = [&](UnitOp unit, Application &a, int64_t mb, bool backward) {
      StringRef kind = a.tmpl.getKind();
      std::string callee = a.tmpl.getSymName().str() + (backward ? ".bwd" : "");
      int64_t piece = pieceOf(unit, a);
      bool lastPiece = isLastPiece(unit, a);
      if (piece >= 0)
        callee = pieceName(a, piece, backward && !(kind == "head" && lastPiece));
      if (!symbols.lookup(callee)) {
        module.emitError("no template @") << callee << ": run mt-derive-backward first";
        return false;
      }
      std::vector<std::string> ins, outs;
      std::string h = headState("h", mb), stats = headState("stats", mb),
                  dh = headState("dh", mb);
      if (piece >= 0 && kind == "head") {
        if (lastPiece) { // the loss, and the backward begins
          ins = {h, "tokens", stats};
          outs = {"loss", dh, stats};
        } else if (!backward) {
          ins = piece == 0 ? std::vector<std::string>{ckpt(a.index, mb), "tokens"}
                           : std::vector<std::string>{h, "tokens", stats};
          outs = piece == 0 ? std::vector<std::string>{h, stats}
                            : std::vector<std::string>{stats};
        } else {
          ins = {piece == 0 ? ckpt(a.index, mb) : h, "tokens", stats, dh};
          outs = {piece == 0 ? dact(a.index, mb) : dh};
        }
      } else if (piece >= 0) { // the embedding: each piece its rows
        std::string y = ckpt(a.index + 1, mb);
        if (!backward) {
          ins = piece == 0 ? std::vector<std::string>{"tokens"}
                           : std::vector<std::string>{"tokens", y};
          outs = {y};
        } else {
          ins = {"tokens", dact(a.index + 1, mb)};
        }
      } else if (kind == "head") { // forward, loss and backward in one launch
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
    // The head's last (or only) piece likewise.
    auto lossVisit = [&](UnitOp unit, int64_t idx) {
      return idx == last &&
             (!unit.getVocabRows() || isLastPiece(unit, (*apps)[idx]));
    };
    for (UnitOp unit : units)
      for (int64_t idx : unit.getApplies())
        for (int64_t mb = 0; mb < M; ++mb)
          if (!launch(unit, (*apps)[idx], mb, lossVisit(unit, idx)))
            return signalPassFailure();
    // Backward: units in reverse, the head (or its last piece) excluded.
    for (UnitOp unit : llvm::reverse(units))
      for (int64_t idx : llvm::reverse(unit.getApplies()))
        if (!lossVisit(unit, idx))
          for (int64_t mb = 0; mb < M; ++mb)
            if (!launch(unit, (*apps)[idx], mb, true))
              return signalPassFailure();
  }
};

} // namespace
