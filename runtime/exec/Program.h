//===- Program.h - what a compiled plan gives the runtime -------*- C++ -*-===//
//
// The contract between codegen and the runtime. A generated trainer.cpp
// defines one Program: tables of params, units, buffers, templates, launches
// and the commands of one training step per stream, plus one C++ function
// per template that calls kernels with static shapes. The runtime loads the
// weights, sets up the host store and the device arena from these tables,
// and executes the commands step after step.
//
// Everything here is plain data, so the generated code needs nothing but
// this header and Kernels.h, and the runtime needs nothing of the compiler.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_EXEC_PROGRAM_H
#define MEGATRAIN_RUNTIME_EXEC_PROGRAM_H

#include <cstdint>

namespace mtrt {

class DeviceKernels;
struct Program;

enum class Stream : uint8_t { H2D = 0, Compute = 1, D2H = 2, Host = 3 };
constexpr int kNumStreams = 4;

enum class Space : uint8_t { Device, Host };

/// Element types of buffers. Storage is the device's activation and weight
/// type: f32 on the CPU backend, bf16 on CUDA.
enum class DType : uint8_t { Storage, F32, I32 };

enum class BufferKind : uint8_t {
  Weights,     // a weight slot: one unit's packed params (storage)
  Grads,       // a gradient slot: one unit's param gradients (f32)
  Checkpoint,  // a block input kept for the backward (storage)
  ActGrad,     // a gradient flowing backward between blocks (storage)
  Tokens,      // device: per micro-batch, B*S ids then B*S targets (i32)
  Loss,        // device: one mean loss per micro-batch (f32)
  Staging,     // host: a packed unit on its way to the device (storage)
  GradStaging, // host: a unit's gradients landed from the device (f32)
  Batch,       // host: the step's token windows, as Tokens (i32)
  LossHost,    // host: the landed per-micro-batch losses (f32)
  LossState,   // device: what a head in vocabulary pieces hands on
};

struct BufferDesc {
  const char *name;
  Space space;
  BufferKind kind;
  DType dtype;
  int64_t elems;
  /// Device buffers: offset in elements of dtype within the device arena of
  /// that dtype (one arena per dtype). Host buffers: -1.
  int64_t offset;
};

/// How --init random fills a param. Auto: normal(0, 0.02) for rank >= 2;
/// rank < 2 gets 0 when the name says bias (or beta), else 1 (norm weights).
enum class ParamInit : uint8_t { Auto, Normal, Ones, Zeros };

struct ParamDesc {
  const char *name; // the ONNX initializer name, or mt.rope.* for tables
  int rank;
  int64_t shape[4];
  int64_t numel;
  /// A tied param reads `tie`'s storage (transposed when tie_transposed, a
  /// 2-d param), has no master copy of its own, and sends its gradient
  /// there. -1 when untied.
  int tie;
  bool tie_transposed;
  bool frozen; // a constant table: never updated, no gradient
  int owner;   // for untied params: the unit holding its master copy
  ParamInit init = ParamInit::Auto; // --init random only; frozen: from file
};

/// How a unit holds a param, in its primary's storage (the param itself,
/// or for a tie the param it reads):
///   Whole    all of it (a transposed tie read transposed)
///   Range    elements [begin, begin + elems): rows of a [V, D] weight
///   Columns  columns [begin, begin + elems / R) of an [R, C] weight, held
///            one column after another: rows of the [V, D] weight a
///            [D, V]-stored LM head computes with
enum class PartKind : uint8_t { Whole, Range, Columns };

struct UnitDesc {
  const char *name;
  const char *kind;   // "embedding", "layer" or "head"
  int64_t elems;      // packed region size, storage elements
  int num_params;     // params in packing order
  const int *params;
  const int64_t *offsets; // element offsets of the params in the region
  int num_owned;          // untied params whose master copy lives here
  const int *owned;
  /// The part of params[i] the unit holds (and, when owned, updates), in
  /// part_elems[i] elements. An LM head or embedding too large for one unit
  /// is split by vocabulary rows over several units. Null: every param
  /// whole.
  const PartKind *part_kind = nullptr;
  const int64_t *part_begin = nullptr;
  const int64_t *part_elems = nullptr;
};

inline PartKind part_kind(const UnitDesc &u, int i) {
  return u.part_kind ? u.part_kind[i] : PartKind::Whole;
}
inline int64_t part_begin(const UnitDesc &u, int i) {
  return u.part_begin ? u.part_begin[i] : 0;
}
inline int64_t part_elems(const Program &p, const UnitDesc &u, int i);

/// What a template function gets for one launch.
struct LaunchArgs {
  DeviceKernels *k;
  /// Template inputs in argument order. Token ids and targets are i32;
  /// everything else storage.
  void *const *inputs;
  void *const *outputs; // template results, in order (storage; loss f32)
  const void *weights;  // the unit's slot (storage)
  float *grads;         // the unit's gradient slot (f32); null forward
  /// Element offsets, in the slot and in the gradient slot alike, of the
  /// params this application binds, in the template's param order.
  const int64_t *param_offsets;
  void *workspace;      // template scratch (storage), workspace_elems long
  float dloss;          // head backward: d(step loss) / d(sum of token losses)
};

struct TemplateDesc {
  const char *name;
  void (*fn)(const LaunchArgs &);
  int64_t workspace_elems;
};

struct LaunchDesc {
  int tmpl;
  int unit;
  int apply;
  int mb;
  bool backward;
  bool fresh;   // the first launch writing this gradient slot for the unit
  int weights;  // buffer index
  int grads;    // buffer index, -1 forward
  int num_inputs;
  const int *inputs;  // buffer indices (Tokens: this micro-batch's part)
  int num_outputs;
  const int *outputs; // buffer indices (Loss: this micro-batch's entry)
  const int64_t *param_offsets;
};

enum class Op : uint8_t {
  Launch,     // a: launch index
  Pack,       // a: unit, b: staging buffer
  H2D,        // a: from buffer, b: into buffer
  D2H,        // a: from buffer, b: into buffer
  LoadBatch,  // b: batch buffer
  Accumulate, // a: unit, b: gradient staging buffer
  GradNorm,   //
  AdamW,      // a: unit
  Record,     // a: event
  Wait,       // a: event
};

/// One command of the step. Pack, H2D, D2H and Accumulate may move one
/// chunk of a unit: elements [begin, begin + count) of its packed region,
/// which the staging or landing slab holds from its start. count < 0: the
/// whole buffer or unit.
struct Command {
  Op op;
  Stream stream;
  int a, b;
  int64_t begin = 0;
  int64_t count = -1;
};

enum class EventKind : uint8_t { ParamReady, ComputeDone, BufferFree, GradLanded };

struct EventDesc {
  const char *name;
  EventKind kind;
  /// The buffer whose state the event announces (ready or free), or -1.
  int buffer;
};

/// How the host store keeps trained params' master weights and gradient
/// accumulators (compile --master-weights): fp32 (16 B/param with the fp32
/// Adam moments) or bf16 (12 B/param; AdamW rounds stochastically).
enum class MasterFormat : uint8_t { F32, Bf16 };

struct Program {
  const char *model_name;
  const char *plan_hash; // identifies the plan; checkpoints match it, or
                         // carry over with --resume-other-plan
  int64_t batch, seq_len, vocab, micro_batches;
  int num_params;
  const ParamDesc *params;
  int num_units;
  const UnitDesc *units;
  int num_buffers;
  const BufferDesc *buffers;
  int num_templates;
  const TemplateDesc *templates;
  int num_launches;
  const LaunchDesc *launches;
  int num_events;
  const EventDesc *events;
  int num_commands; // one training step, in issue order
  const Command *commands;
  MasterFormat master = MasterFormat::F32;
  /// What the attention kernels must support (0: the model has no
  /// attention, or no ALiBi): a backend refuses a plan past its limits
  /// before anything is loaded.
  int64_t max_head_dim = 0;
  int64_t max_alibi_heads = 0;
  /// The device bytes the plan was made for (--gpu-mem-limit; 0: none).
  int64_t device_budget = 0;
};

inline int64_t part_elems(const Program &p, const UnitDesc &u, int i) {
  return u.part_elems ? u.part_elems[i] : p.params[u.params[i]].numel;
}

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_EXEC_PROGRAM_H
