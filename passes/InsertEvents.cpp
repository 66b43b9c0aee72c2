//===- InsertEvents.cpp - records and waits wherever streams conflict -----===//
#include "passes/Passes.h"

#include "ir/MtOps.h"
#include "mlir/IR/Builders.h"
#include "passes/Accesses.h"
#include "passes/HappensBefore.h"

#include "mlir/IR/SymbolTable.h"

namespace mt {
#define GEN_PASS_DEF_INSERTEVENTS
#include "passes/Passes.h.inc"
} // namespace mt

using namespace mlir;
using namespace mt;

namespace {

// The event kind announcing that a buffer of `kind` was written.
StringRef readyKind(StringRef kind) {
  if (kind == "grads" || kind == "loss")
    return "compute_done";
  if (kind == "grad_staging" || kind == "loss_host")
    return "grad_landed";
  return "param_ready";
}

struct InsertEventsPass : public mt::impl::InsertEventsBase<InsertEventsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto schedules = llvm::to_vector(module.getOps<ScheduleOp>());
    if (schedules.size() != 1) {
      module.emitError("mt-insert-events needs one mt.schedule");
      return signalPassFailure();
    }
    Block &body = schedules[0].getBody().front();
    SymbolTable symbols(module);
    OpBuilder declare(schedules[0]);
    int64_t budget = 4 * static_cast<int64_t>(body.getOperations().size()) + 64;
    while (std::optional<Race> race = findRace(body)) {
      if (--budget < 0) {
        race->later->emitError("mt-insert-events: could not order this "
                               "command after ")
            << describeCommand(race->earlier);
        return signalPassFailure();
      }
      auto buffer = symbols.lookup<BufferOp>(race->buffer);
      if (!buffer) {
        race->later->emitError("touches undeclared buffer @") << race->buffer;
        return signalPassFailure();
      }
      // "ready" after a write the later command reads or overwrites after;
      // "free" after a read the later command overwrites.
      bool ready = race->earlierWrites && !race->laterWrites;
      std::string name =
          (race->buffer + (race->earlierWrites && !race->laterWrites ? ".ready"
                           : race->earlierWrites ? ".written"
                                                 : ".free"))
              .str();
      if (!symbols.lookup(name)) {
        auto ev = declare.create<EventOp>(
            schedules[0].getLoc(), name,
            ready ? readyKind(buffer.getKind()) : StringRef("buffer_free"));
        symbols.insert(ev);
      }
      auto ref = FlatSymbolRefAttr::get(module.getContext(), name);
      OpBuilder b(race->earlier->getContext());
      b.setInsertionPointAfter(race->earlier);
      b.create<RecordOp>(race->earlier->getLoc(), ref,
                         b.getStringAttr(streamName(streamOf(race->earlier))));
      b.setInsertionPoint(race->later);
      b.create<WaitOp>(race->later->getLoc(), ref,
                       b.getStringAttr(streamName(streamOf(race->later))));
    }
  }
};

} // namespace
