//===- HappensBefore.h - races between streams of a schedule ----*- C++ -*-===//
#ifndef MT_PASSES_HAPPENSBEFORE_H
#define MT_PASSES_HAPPENSBEFORE_H

#include "passes/Accesses.h"

#include "mlir/IR/Block.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

#include <array>
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

/// Vector clocks over the streams, fed commands in issue order: a stream
/// runs its commands in order, and a wait joins the clock of the latest
/// record of its event issued before it.
class HappensBefore {
public:
  using Clock = std::array<int64_t, kNumStreams>;

  /// Advances op's stream and applies op if it is a record or a wait.
  void issue(mlir::Operation *op, int step);
  /// The first access of the last issued op that races an earlier one.
  std::optional<Race> race() const;
  /// Orders the last issued op after `earlier`, as a record right after
  /// `earlier` and a wait right before the op would.
  void orderAfter(mlir::Operation *earlier);
  /// Records the last issued op's accesses.
  void commit();

private:
  struct Stamp {
    mlir::Operation *op = nullptr;
    int stream = 0;
    int64_t tick = 0;
    int step = 0;
  };
  struct BufferState {
    std::optional<Stamp> lastWrite;
    std::array<std::optional<Stamp>, kNumStreams> readsSinceWrite;
  };
  bool ordered(const Stamp &prior) const;

  std::array<Clock, kNumStreams> clock_{};
  llvm::StringMap<Clock> events_;
  llvm::StringMap<BufferState> buffers_;
  llvm::DenseMap<mlir::Operation *, Clock> after_; // clock right after each op
  Stamp current_;
};

/// Replays the schedule body for two consecutive steps and returns the
/// first race, in issue order, or nothing.
std::optional<Race> findRace(mlir::Block &body);

} // namespace mt

#endif // MT_PASSES_HAPPENSBEFORE_H
