//===- CpuStream.h - an in-order command queue on a worker thread -*- C++ -*-===//
//
// The CPU backend's stream: one thread running its commands in issue order.
// Streams share CpuFences, a completion counter per stream: an event is a
// (stream, count) pair captured at record time and a wait blocks its worker
// until that stream has completed `count` commands, which is exactly CUDA's
// "latest record issued before the wait".
//
// Stress mode sleeps a seeded random 0-2 ms before random commands, in
// bursts (a stream is slow or quick for 16 commands at a time), so that
// streams interleave in orders a normal run never shows.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_EXEC_CPUSTREAM_H
#define MEGATRAIN_RUNTIME_EXEC_CPUSTREAM_H

#include "runtime/exec/Program.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace mtrt {

class Trace;

/// Completed-command counts of every stream, and the first error any threw.
class CpuFences {
public:
  void complete_one(int stream);
  /// Blocks until `stream` has completed at least `count` commands.
  void wait(int stream, uint64_t count);
  uint64_t completed(int stream) const;

  void set_error(std::exception_ptr e);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  /// The first error, cleared; null when none.
  std::exception_ptr take_error();

private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t done_[kNumStreams] = {};
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
};

class CpuStream {
public:
  struct Options {
    int index = 0;
    int queue_depth = 1024;
    Trace *trace = nullptr;
    bool stress = false;
    uint64_t stress_seed = 0;
  };
  CpuStream(const Options &opts, CpuFences &fences);
  /// Runs what is queued, then joins the worker.
  ~CpuStream();
  CpuStream(const CpuStream &) = delete;
  CpuStream &operator=(const CpuStream &) = delete;

  /// Enqueues a command, blocking while the queue is full; returns its
  /// 1-based sequence number on this stream. Issue from one thread only.
  uint64_t push(const char *label, std::function<void()> fn);
  uint64_t issued() const { return issued_; }

private:
  struct Command {
    const char *label;
    std::function<void()> fn;
  };
  void loop();
  void stress_delay();

  Options opts_;
  CpuFences &fences_;
  uint64_t issued_ = 0; // issuing thread only
  uint64_t rng_;        // worker only
  uint64_t stress_count_ = 0;
  bool stress_slow_ = false;

  std::mutex mu_;
  std::condition_variable not_empty_, not_full_;
  std::deque<Command> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_EXEC_CPUSTREAM_H
