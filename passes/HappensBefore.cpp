//===- HappensBefore.cpp - races between streams of a schedule ------------===//
#include "passes/HappensBefore.h"

#include "ir/MtOps.h"
#include "mlir/IR/Builders.h"
#include "passes/Accesses.h"

#include "llvm/ADT/StringMap.h"

#include <array>

using namespace mlir;

namespace mt {
namespace {

using Clock = std::array<int64_t, kNumStreams>;

struct Stamp {
  Operation *op = nullptr;
  int stream = 0;
  int64_t tick = 0; // the op's position on its stream
  int step = 0;
};

struct BufferState {
  std::optional<Stamp> lastWrite;
  std::array<std::optional<Stamp>, kNumStreams> readsSinceWrite;
};

} // namespace

std::optional<Race> findRace(Block &body) {
  std::array<Clock, kNumStreams> clock{};
  llvm::StringMap<Clock> events;
  llvm::StringMap<BufferState> buffers;
  for (int step = 0; step < 2; ++step) {
    for (Operation &op : body) {
      int s = static_cast<int>(streamOf(&op));
      Clock &c = clock[s];
      int64_t tick = ++c[s];
      if (auto rec = dyn_cast<RecordOp>(op)) {
        events[rec.getEvent()] = c;
        continue;
      }
      if (auto wait = dyn_cast<WaitOp>(op)) {
        auto it = events.find(wait.getEvent());
        if (it != events.end())
          for (int k = 0; k < kNumStreams; ++k)
            c[k] = std::max(c[k], it->second[k]);
        continue;
      }
      Stamp me{&op, s, tick, step};
      auto ordered = [&](const Stamp &prior) {
        return prior.stream == s || c[prior.stream] >= prior.tick;
      };
      for (const Access &a : accessesOf(&op)) {
        BufferState &st = buffers[a.buffer];
        auto race = [&](const Stamp &prior, bool priorWrites) {
          return Race{prior.op, &op, a.buffer, priorWrites, a.write,
                      step - prior.step};
        };
        if (st.lastWrite && !ordered(*st.lastWrite))
          return race(*st.lastWrite, true);
        if (a.write) {
          for (auto &read : st.readsSinceWrite)
            if (read && !ordered(*read))
              return race(*read, false);
          st.lastWrite = me;
          st.readsSinceWrite = {};
        } else {
          st.readsSinceWrite[s] = me;
        }
      }
    }
  }
  return std::nullopt;
}

} // namespace mt
