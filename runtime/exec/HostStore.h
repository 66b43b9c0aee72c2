//===- HostStore.h - model state in host RAM ---------------------*- C++
//-*-===//
//
// Per trainable param (untied, not frozen: a "primary"): the master weights,
// Adam's m and v (fp32) and a gradient accumulator, each laid out
// contiguously per owner unit, so a unit's optimizer step is a few long
// sweeps. The program's MasterFormat decides the master weights' and the
// accumulator's precision: fp32 (16 B/param) or bf16 (12 B/param; AdamW
// rounds the new weights stochastically, the accumulator rounds to nearest).
// Frozen params (tables) keep their constant data here; tied params have
// nothing of their own and read and write their primary.
//
// The optimizer step is deferred: after step t, schedule_update() makes the
// update of step t's accumulated gradients pending, and the schedule's
// AdamW(u), placed right before Pack(u) at the start of step t+1, applies it
// to unit u's owned params (so it overlaps the previous unit's compute) and
// zeroes their accumulators. flush() applies whatever is still pending
// (before a checkpoint, an export, the end of training).
//
// A pending update is part of the master weights' value: pack() and
// accumulate() apply it to what they read or add into before touching it.
// A pack of the unit's own params, in store order, applies it block by
// block just before converting each block, while the block is still in
// cache, so AdamW then pack reads the masters from memory once instead of
// twice; the executor leaves such an AdamW(u) to its packs.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_EXEC_HOSTSTORE_H
#define MEGATRAIN_RUNTIME_EXEC_HOSTSTORE_H

#include "runtime/exec/Backend.h"
#include "runtime/exec/Program.h"
#include "runtime/host/AdamW.h"

#include <cstdint>
#include <vector>

namespace mtrt {

namespace host {
class ThreadPool;
}

struct OptimizerConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1; // only on params of rank >= 2
  double clip_grad = 1.0;    // max global grad norm; 0 disables clipping
  uint64_t rounding_seed = 0; // bf16 masters: stochastic rounding's stream
};

class HostStore {
public:
  HostStore(const Program &p, StorageFormat format,
            const OptimizerConfig &config);

  const Program &program() const { return p_; }
  const OptimizerConfig &config() const { return config_; }
  /// Has master weights, moments and an accumulator: untied, not frozen.
  bool trainable(int param) const { return slot_[param] >= 0; }
  bool bf16_master() const { return p_.master == MasterFormat::Bf16; }
  /// A trainable param's fp32 master weights or a frozen param's constant
  /// data; null for a tied param and for bf16 masters (values_bf16).
  float *values(int param);
  const float *values(int param) const;
  /// A trainable param's bf16 master weights (bits); null unless
  /// bf16_master().
  uint16_t *values_bf16(int param);
  const uint16_t *values_bf16(int param) const;
  float *adam_m(int param) { return m_.data() + slot_[param]; }
  float *adam_v(int param) { return v_.data() + slot_[param]; }
  const float *adam_m(int param) const { return m_.data() + slot_[param]; }
  const float *adam_v(int param) const { return v_.data() + slot_[param]; }
  /// The gradient accumulator: fp32 (grad) or bf16 bits (grad_bf16), as
  /// the master weights.
  float *grad(int param) { return grad_.data() + slot_[param]; }
  const float *grad(int param) const { return grad_.data() + slot_[param]; }
  uint16_t *grad_bf16(int param) { return grad16_.data() + slot_[param]; }
  const uint16_t *grad_bf16(int param) const {
    return grad16_.data() + slot_[param];
  }

  // ---- the host tasks of a step ----------------------------------------
  /// Writes elements [begin, begin + count) of the unit's packed region
  /// (its params at their offsets, in the storage format; a transposed tie
  /// reads its primary transposed) to the start of `staging`, after the
  /// pending update of what it reads. count < 0: the whole region.
  void pack(int unit, void *staging, host::ThreadPool *pool, int64_t begin = 0,
            int64_t count = -1);
  /// Adds landed f32 gradients, elements [begin, begin + count) of the
  /// unit's region held from the start of `grads`, into their primaries'
  /// accumulators. count < 0: the whole region.
  void accumulate(int unit, const float *grads, host::ThreadPool *pool,
                  int64_t begin = 0, int64_t count = -1);
  /// The units whose accumulators an accumulate(unit, ..., begin, count)
  /// adds into: the owners of the trained params it holds in that chunk.
  std::vector<int> accumulated_owners(int unit, int64_t begin,
                                      int64_t count = -1) const;
  /// Sums the squares of the unit's own accumulators and keeps the sum for
  /// compute_grad_norm. Called once a step's last gradient for them has
  /// landed, it moves that sweep off the step boundary; an accumulate into
  /// them, an update or zero_grads() drops the kept sum.
  void sum_unit_squares(int unit, host::ThreadPool *pool);
  /// sqrt of the sum of squares of every accumulator: per unit in unit
  /// order, each unit's sum kept or computed now. Remembered for the clip
  /// scale of the next schedule_update().
  double compute_grad_norm(host::ThreadPool *pool);
  double grad_norm() const { return grad_norm_; }
  /// Makes the optimizer step `step_count` (from 1) of the accumulated
  /// gradients pending for every unit, with learning rate lr and the clip
  /// scale of the last computed norm (after completing a previous update
  /// that a step left pending).
  void schedule_update(int64_t step_count, double lr);
  bool pending(int unit) const { return pending_[unit]; }
  bool any_pending() const;
  /// Applies the pending step to the unit's owned params, if any is pending,
  /// and zeroes their accumulators.
  void adamw(int unit, host::ThreadPool *pool);
  void flush(host::ThreadPool *pool);
  void zero_grads();

  /// The clip scale min(1, C / (norm + 1e-6)), or 1 when clipping is off.
  double clip_scale(double norm) const;

  int64_t trainable_params() const { return trainable_elems_; }
  /// Everything this store allocates.
  int64_t bytes() const;
  /// What a store of `p` allocates, before it is built.
  static int64_t bytes_for(const Program &p);

private:
  /// A stretch of one unit's state updated with one AdamW call; while the
  /// update is pending, [begin, begin + done) of it already has it.
  struct Run {
    int64_t begin, n;
    bool decay;
    int64_t done = 0;
  };

  /// Applies the pending update to store elements [begin, begin + n) of a
  /// run and zeroes their accumulators.
  void update(int64_t begin, int64_t n, bool decay, host::ThreadPool *pool);
  /// Completes the pending updates of the units owning `param`.
  void settle(int param, host::ThreadPool *pool);
  /// The run of `unit` that a pack of `param`'s elements [lo, hi) (store
  /// order) may update block by block: the one whose done part ends at lo.
  Run *next_run(int unit, int param, int64_t lo, int64_t hi);
  template <class Acc>
  void accumulate_into(Acc *acc, int u, const float *grads,
                       host::ThreadPool *pool, int64_t begin, int64_t end);

  const Program &p_;
  StorageFormat format_;
  OptimizerConfig config_;
  std::vector<int64_t> slot_;     // per param: offset in the arrays, or -1
  std::vector<int64_t> constant_; // per param: offset in constants_, or -1
  std::vector<std::vector<Run>> runs_; // per unit
  std::vector<std::vector<int>> owners_; // per param: units updating a part
  int64_t trainable_elems_ = 0;
  std::vector<float> master_, m_, v_, grad_, constants_;
  std::vector<uint16_t> master16_, grad16_; // bf16 masters instead

  double grad_norm_ = 0.0;
  std::vector<double> unit_squares_; // per unit, valid where squares_kept_
  std::vector<char> squares_kept_;
  std::vector<char> pending_; // per unit
  host::AdamWHyper hyper_;
  float grad_scale_ = 1.0f;
  uint32_t rounding_key_ = 0;
};

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_EXEC_HOSTSTORE_H
