//===- HappensBefore.cpp - races between streams of a schedule ------------===//
#include "passes/HappensBefore.h"

#include "ir/MtOps.h"

using namespace mlir;

namespace mt {

void HappensBefore::issue(Operation *op, int step) {
  int s = static_cast<int>(streamOf(op));
  Clock &c = clock_[s];
  current_ = {op, s, ++c[s], step};
  if (auto rec = dyn_cast<RecordOp>(op)) {
    events_[rec.getEvent()] = c;
  } else if (auto wait = dyn_cast<WaitOp>(op)) {
    auto it = events_.find(wait.getEvent());
    if (it != events_.end())
      for (int k = 0; k < kNumStreams; ++k)
        c[k] = std::max(c[k], it->second[k]);
  }
  after_[op] = c;
}

bool HappensBefore::ordered(const Stamp &prior) const {
  return prior.stream == current_.stream ||
         clock_[current_.stream][prior.stream] >= prior.tick;
}

std::optional<Race> HappensBefore::race() const {
  for (const Access &a : accessesOf(current_.op)) {
    auto it = buffers_.find(a.buffer);
    if (it == buffers_.end())
      continue;
    const BufferState &st = it->second;
    auto race = [&](const Stamp &prior, bool priorWrites) {
      return Race{prior.op, current_.op, a.buffer, priorWrites, a.write,
                  current_.step - prior.step};
    };
    if (st.lastWrite && !ordered(*st.lastWrite))
      return race(*st.lastWrite, true);
    if (a.write)
      for (const auto &read : st.readsSinceWrite)
        if (read && !ordered(*read))
          return race(*read, false);
  }
  return std::nullopt;
}

void HappensBefore::orderAfter(Operation *earlier) {
  Clock &c = clock_[current_.stream];
  const Clock &e = after_.find(earlier)->second;
  for (int k = 0; k < kNumStreams; ++k)
    c[k] = std::max(c[k], e[k]);
  after_[current_.op] = c;
}

void HappensBefore::commit() {
  for (const Access &a : accessesOf(current_.op)) {
    BufferState &st = buffers_[a.buffer];
    if (a.write) {
      st.lastWrite = current_;
      st.readsSinceWrite = {};
    } else {
      st.readsSinceWrite[current_.stream] = current_;
    }
  }
}

std::optional<Race> findRace(Block &body) {
  HappensBefore hb;
  for (int step = 0; step < 2; ++step)
    for (Operation &op : body) {
      hb.issue(&op, step);
      if (std::optional<Race> race = hb.race())
        return race;
      hb.commit();
    }
  return std::nullopt;
}

} // namespace mt
