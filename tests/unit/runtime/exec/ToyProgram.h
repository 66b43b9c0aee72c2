//===- ToyProgram.h - a hand-made Program for runtime tests ------*- C++ -*-===//
//
// A 4-unit model small enough to check by hand, scheduled the way codegen
// schedules a real one: two weight slots, two staging slabs, two gradient
// slots, M micro-batches per fetch, the deferred AdamW before each unit's
// first Pack, and every ParamReady / ComputeDone / BufferFree / GradLanded
// record-wait pair of the design.
//
//   u0 "embedding": x0 = E[ids] ⊙ gain                      E (V, D), gain (D)
//   u1, u2 "layer": y = x + (x·W + b)                       W (D, D), b (D)
//   u3 "head":      logits = (x ⊙ scale)·Eᵀ + hb, mean CE   Eᵀ tied transposed,
//                                                           hb (V), scale (D) frozen
//
// Visits: u0 F, u1 F, u2 F, u3 F+B, u2 B (still resident), u1 B and u0 B
// (fetched again). Most Waits are necessary: removing one lets some
// interleaving read a buffer too early or overwrite it too soon;
// necessary_waits() tells them from the ones other waits imply.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_TESTS_UNIT_RUNTIME_EXEC_TOYPROGRAM_H
#define MEGATRAIN_TESTS_UNIT_RUNTIME_EXEC_TOYPROGRAM_H

#include "runtime/exec/Executor.h"
#include "runtime/exec/Program.h"

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace mtrt::toy {

constexpr int64_t V = 11, D = 8, B = 2, S = 5;
constexpr int64_t N = B * S; // rows per micro-batch

enum ParamIndex {
  kEmbed, kW0, kB0, kW1, kB1, kHeadW, kHeadB, kScale, kGain, kNumParams
};

class ToyProgram {
public:
  explicit ToyProgram(int64_t micro_batches = 2, const char *plan_hash = "toy-plan-1");
  ToyProgram(const ToyProgram &) = delete;
  ToyProgram &operator=(const ToyProgram &) = delete;

  const Program &program() const { return program_; }
  /// The step's commands; edit, then call commit().
  std::vector<Command> &commands() { return commands_; }
  void commit();
  /// Indices of the Wait commands.
  std::vector<int> waits() const;
  /// The Waits no other wait and stream order already imply (vector clocks
  /// over one step; the barrier between steps orders everything before).
  std::vector<int> necessary_waits() const;
  std::string describe(int command) const;
  int64_t micro_batches() const { return M_; }

private:
  int buffer(const char *name, Space space, BufferKind kind, DType dtype,
             int64_t elems);
  int event(const std::string &name, EventKind kind, int buffer);
  void cmd(Op op, Stream s, int a = 0, int b = 0);
  int launch(int tmpl, int unit, int mb, bool backward, bool fresh,
             int weights, int grads, std::vector<int> inputs,
             std::vector<int> outputs);
  void build_schedule();

  int64_t M_;
  std::string plan_hash_;
  std::vector<ParamDesc> params_;
  std::vector<UnitDesc> units_;
  std::deque<std::vector<int>> int_lists_;
  std::deque<std::vector<int64_t>> offset_lists_;
  std::deque<std::string> names_;
  std::vector<BufferDesc> buffers_;
  std::vector<TemplateDesc> templates_;
  std::vector<LaunchDesc> launches_;
  std::vector<EventDesc> events_;
  std::vector<Command> commands_;
  int64_t arena_[3] = {0, 0, 0};
  Program program_{};
};

/// Deterministic token windows: a pure function of (step, micro, position).
class ToyBatches final : public BatchSource {
public:
  explicit ToyBatches(int64_t micro_batches) : M_(micro_batches) {}
  void fill(int64_t step, int micro, int32_t *batch) override;
  /// ids and targets of micro-batch mb, as fill writes them.
  void tokens(int64_t step, int micro, int64_t mb, std::vector<int32_t> &ids,
              std::vector<int32_t> &targets) const;

private:
  int64_t M_;
};

/// Untied params' values, by ParamIndex (empty for the tied head weight).
using ToyWeights = std::vector<std::vector<double>>;
ToyWeights toy_initial_weights(uint64_t seed);

/// The model in double: mean loss over the micro-batch and d(mean)/d(param)
/// added into grads (tied head weight folded into kEmbed).
double toy_loss_and_grads(const ToyWeights &w, const std::vector<int32_t> &ids,
                          const std::vector<int32_t> &targets, double scale,
                          ToyWeights *grads);

} // namespace mtrt::toy

#endif // MEGATRAIN_TESTS_UNIT_RUNTIME_EXEC_TOYPROGRAM_H
