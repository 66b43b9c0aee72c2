//===- DataLoader.h - token windows from a memory-mapped file ----*- C++ -*-===//
//
// The token file is raw little-endian uint32 ids, mapped read-only and
// validated once at startup (size a multiple of 4, at least S+1 tokens,
// every id below the vocabulary). Window j is tokens[j*S : j*S+S+1]: inputs
// its first S, targets its last S. Row r of micro-batch mb of micro-step a
// of step t reads window ((t*A + a)*M*B + mb*B + r) mod ((len-1) / S): an
// optimizer step consumes A*M*B consecutive windows, as the oracle's batch
// of A micro-steps of M*B rows. A prefetch thread gathers the next
// micro-step's windows while the current one trains.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_TRAINER_DATALOADER_H
#define MEGATRAIN_RUNTIME_TRAINER_DATALOADER_H

#include "runtime/exec/Executor.h"

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace mtrt {

struct BatchShape {
  int64_t batch = 1;         // B: rows per micro-batch
  int64_t seq_len = 1;       // S
  int64_t micro_batches = 1; // M: micro-batches per weight fetch
  int64_t grad_accum = 1;    // A: micro-steps per optimizer step
  int64_t vocab = 1;
};

/// A read-only mapping of a token file, validated.
class TokenFile {
public:
  /// Throws Error naming the file (and the byte offset of a bad id).
  TokenFile(const std::string &path, int64_t seq_len, int64_t vocab);
  ~TokenFile();
  TokenFile(const TokenFile &) = delete;
  TokenFile &operator=(const TokenFile &) = delete;

  const std::string &path() const { return path_; }
  int64_t size() const { return count_; } // tokens
  uint32_t operator[](int64_t i) const { return tokens_[i]; }
  const uint32_t *data() const { return tokens_; }

private:
  std::string path_;
  void *map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint32_t *tokens_ = nullptr;
  int64_t count_ = 0;
};

class DataLoader final : public BatchSource {
public:
  DataLoader(const std::string &path, const BatchShape &shape,
             bool prefetch = true);
  ~DataLoader() override;

  /// [M][B*S ids][B*S targets] of micro-step `micro` of step `step`.
  void fill(int64_t step, int micro, int32_t *batch) override;

  int64_t windows() const { return windows_; }
  /// Window read by row r of micro-batch mb of micro-step a of step t.
  int64_t window(int64_t t, int64_t a, int64_t mb, int64_t r) const;
  /// The first window of step t: where the data stands after t steps.
  int64_t position(int64_t t) const { return window(t, 0, 0, 0); }
  int64_t batch_elems() const { return 2 * shape_.micro_batches * shape_.batch * shape_.seq_len; }

private:
  void gather(int64_t step, int micro, int32_t *batch) const;
  void prefetch_loop();

  TokenFile tokens_;
  BatchShape shape_;
  int64_t windows_;

  // Prefetch: the worker gathers (next_step_, next_micro_) into ahead_.
  bool prefetch_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, wanted_ = false, ready_ = false;
  int64_t ahead_step_ = -1;
  int ahead_micro_ = -1;
  std::vector<int32_t> ahead_;
  std::thread worker_;
};

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_TRAINER_DATALOADER_H
