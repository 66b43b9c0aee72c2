//===- Trace.h - a Chrome-trace timeline of the streams ----------*- C++ -*-===//
//
// `--trace FILE`: every command a stream runs becomes one complete event
// ("ph": "X") on that stream's row, with its label and start/end in µs, in
// the JSON that chrome://tracing and Perfetto open. Recording is a mutex and
// a push, cheap next to any command; the event count is capped so a long run
// cannot exhaust memory (the cap is noted in the file).
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_EXEC_TRACE_H
#define MEGATRAIN_RUNTIME_EXEC_TRACE_H

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace mtrt {

class Trace {
public:
  explicit Trace(size_t max_events = size_t(1) << 21);

  /// Microseconds since the trace was created.
  double now_us() const;
  /// One complete event on row `tid` (the name is copied). Thread-safe.
  void add(int tid, const char *name, double start_us, double end_us);
  void name_row(int tid, std::string name);
  size_t size() const;
  size_t dropped() const;

  /// Writes the JSON; throws Error naming the file.
  void write(const std::string &path) const;

private:
  struct Event {
    std::string name;
    int tid;
    double start_us, end_us;
  };
  std::chrono::steady_clock::time_point origin_;
  size_t max_events_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
  std::vector<std::pair<int, std::string>> rows_;
  size_t dropped_ = 0;
};

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_EXEC_TRACE_H
