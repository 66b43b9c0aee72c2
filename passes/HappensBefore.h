//===- HappensBefore.h - races between streams of a schedule ----*- C++ -*-===//
#ifndef MT_PASSES_HAPPENSBEFORE_H
#define MT_PASSES_HAPPENSBEFORE_H

#include "mlir/IR/Block.h"

#include <optional>

namespace mt {

/// Two commands on different streams touching one buffer, at least one
/// writing, with no happens-before edge from the earlier (in issue order)
/// to the later.
struct Race {
  mlir::Operation *earlier, *later;
  llvm::StringRef buffer;
  bool earlierWrites, laterWrites;
  /// 0 when both are in the same step; 1 when `later` is in the next step.
  int stepsApart;
};

/// Replays the schedule body for two consecutive steps with vector clocks
/// (a stream runs its commands in order; a wait joins the clock of the
/// latest record of its event issued before it) and returns the first race,
/// in issue order, or nothing.
std::optional<Race> findRace(mlir::Block &body);

} // namespace mt

#endif // MT_PASSES_HAPPENSBEFORE_H
