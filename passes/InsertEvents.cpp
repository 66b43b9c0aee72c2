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

// The kind of event announcing a write, by the stream that wrote: compute
// results (gradients, losses, checkpoints) are compute_done; what the d2h
// stream lands on the host is grad_landed; what the host packed or the h2d
// stream filled for the device is param_ready.
StringRef readyKind(StreamId writer) {
  switch (writer) {
  case StreamId::Compute: return "compute_done";
  case StreamId::D2H: return "grad_landed";
  default: return "param_ready";
  }
}

// One pass over two consecutive steps: at each race, a record goes right
// after the earlier command and a wait right before the later one, and the
// analysis continues with that edge in place. The inserted ops of the first
// step are seen as they are in the second; mt-verify-schedule then checks
// the result from scratch.
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
    HappensBefore hb;
    for (int step = 0; step < 2; ++step) {
      // The body grows while we walk it: iterate to the current last op.
      for (Operation *op = &body.front(); op; op = op->getNextNode()) {
        hb.issue(op, step);
        while (std::optional<Race> race = hb.race()) {
          if (failed(order(*race, symbols, declare, schedules[0])))
            return signalPassFailure();
          hb.orderAfter(race->earlier);
        }
        hb.commit();
      }
    }
  }

  LogicalResult order(const Race &race, SymbolTable &symbols,
                      OpBuilder &declare, ScheduleOp step) {
    auto buffer = symbols.lookup<BufferOp>(race.buffer);
    if (!buffer)
      return race.later->emitError("touches undeclared buffer @")
             << race.buffer;
    // "ready" after a write the later command reads; "written" before it
    // overwrites; "free" after a read the later command overwrites.
    bool ready = race.earlierWrites && !race.laterWrites;
    std::string name = (race.buffer + (ready                ? ".ready"
                                       : race.earlierWrites ? ".written"
                                                            : ".free"))
                           .str();
    if (!symbols.lookup(name)) {
      auto ev = declare.create<EventOp>(
          step.getLoc(), name,
          ready ? readyKind(streamOf(race.earlier)) : StringRef("buffer_free"));
      symbols.insert(ev);
    }
    auto ref = FlatSymbolRefAttr::get(step.getContext(), name);
    OpBuilder b(race.earlier->getContext());
    // One record after the earlier command serves every wait on it.
    bool recorded = false;
    for (Operation *next = race.earlier->getNextNode();
         auto rec = dyn_cast_or_null<RecordOp>(next); next = next->getNextNode())
      recorded |= rec.getEvent() == name;
    if (!recorded) {
      b.setInsertionPointAfter(race.earlier);
      b.create<RecordOp>(race.earlier->getLoc(), ref,
                         b.getStringAttr(streamName(streamOf(race.earlier))));
    }
    b.setInsertionPoint(race.later);
    b.create<WaitOp>(race.later->getLoc(), ref,
                     b.getStringAttr(streamName(streamOf(race.later))));
    return success();
  }
};

} // namespace
