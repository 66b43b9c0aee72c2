//===- VerifySchedule.cpp - the schedule is race-free ---------------------===//
#include "passes/Passes.h"

#include "ir/MtOps.h"
#include "mlir/IR/Builders.h"
#include "passes/Accesses.h"
#include "passes/HappensBefore.h"

namespace mt {
#define GEN_PASS_DEF_VERIFYSCHEDULE
#include "passes/Passes.h.inc"
} // namespace mt

using namespace mlir;
using namespace mt;

namespace {

struct VerifySchedulePass
    : public mt::impl::VerifyScheduleBase<VerifySchedulePass> {
  void runOnOperation() override {
    for (ScheduleOp step : getOperation().getOps<ScheduleOp>()) {
      std::optional<Race> race = findRace(step.getBody().front());
      if (!race)
        continue;
      StringRef from = streamName(streamOf(race->earlier));
      StringRef to = streamName(streamOf(race->later));
      auto diag = race->later->emitError()
                  << "race on @" << race->buffer << ": this command ("
                  << to << (race->laterWrites ? ", writes" : ", reads")
                  << ") may run before "
                  << (race->stepsApart ? "the previous step's " : "")
                  << describeCommand(race->earlier) << " (" << from
                  << (race->earlierWrites ? ", writes" : ", reads")
                  << ") has finished; missing edge: a record on " << from
                  << " after that command, waited on by " << to
                  << " before this one";
      diag.attachNote(race->earlier->getLoc()) << "the earlier command";
      return signalPassFailure();
    }
  }
};

} // namespace
