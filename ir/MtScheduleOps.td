//===- MtScheduleOps.td - schedule-level ops of mt --------------*- tablegen -*-===//
//
// The schedule level: streaming units and their packed layout, buffers in
// device and host memory, events, and mt.schedule, whose body lists every
// command of one training step in issue order. Each command runs on one
// stream ("h2d", "compute", "d2h" or "host"); a stream runs its commands in
// order, and streams order each other only through events: a wait on @e
// blocks its stream until the latest record of @e issued before the wait
// has run (CUDA's cudaEventRecord / cudaStreamWaitEvent semantics). The body
// repeats every step, so a wait may bind to a record of the previous step.
//
//===----------------------------------------------------------------------===//

#ifndef MT_SCHEDULE_OPS_TD
#define MT_SCHEDULE_OPS_TD

include "ir/MtDialect.td"
include "mlir/IR/SymbolInterfaces.td"

//===----------------------------------------------------------------------===//
// Declarations
//===----------------------------------------------------------------------===//

def Mt_UnitOp : Mt_Op<"unit", [Symbol]> {
  let summary = "a streaming unit: model applications whose weights move as one";
  let description = [{
    Groups consecutive applications of the model body (by index) whose
    params are fetched to the device together. After mt-pack-weights,
    `offsets` gives each param's offset in the unit's packed region, in
    elements of the device storage type (128-element aligned, so 256 bytes
    in bf16), and `elems` the region's size (a multiple of 2048 elements:
    4 KiB in bf16). `owns` lists the params whose master copy, moments and
    update belong to this unit (a tied param is owned by its first unit).
    A piece of an LM head or embedding split by mt-split-vocab holds
    vocabulary rows `vocab_rows` = [begin, end) of it, and `parts` says,
    per param, which part it holds of the storage the param reads (itself,
    or its tie): [kind, begin, elements] each, kind 0 whole, 1 the
    elements from begin (rows of a [V, D] weight), 2 the columns from
    begin of an [R, C] weight held one column after another (rows of a
    weight stored [D, V]). It owns its part of what it owns.

    ```mlir
    mt.unit @u3 kind "layer" applies array<i64: 3> params [@"l2.wq", @"l2.wk"] {elems = 4096 : i64, offsets = array<i64: 0, 2048>}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrAttr:$kind,
                       DenseI64ArrayAttr:$applies, SymbolRefArrayAttr:$params,
                       OptionalAttr<I64Attr>:$elems,
                       OptionalAttr<DenseI64ArrayAttr>:$offsets,
                       OptionalAttr<SymbolRefArrayAttr>:$owns,
                       OptionalAttr<DenseI64ArrayAttr>:$vocab_rows,
                       OptionalAttr<DenseI64ArrayAttr>:$parts);
  let assemblyFormat = [{
    $sym_name `kind` $kind `applies` $applies `params` $params attr-dict
  }];
  let hasVerifier = 1;
}

def Mt_BufferOp : Mt_Op<"buffer", [Symbol]> {
  let summary = "a region of device or host memory the schedule uses";
  let description = [{
    `space` is "device" or "host"; `kind` says what lives there (weights,
    grads, checkpoint, activation, gradient, workspace, tokens, loss,
    staging, grad_staging, batch). `elems` counts elements of `dtype`:
    "storage" (bf16 on the GPU, f32 on the CPU), "f32" or "i32".
    mt-plan-memory assigns device buffers a byte `offset` in the arena (for
    bf16 storage).

    ```mlir
    mt.buffer @slot0 device weights {elems = 4096 : i64, dtype = "storage", offset = 0 : i64}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrAttr:$space, StrAttr:$kind,
                       I64Attr:$elems, StrAttr:$dtype,
                       OptionalAttr<I64Attr>:$offset);
  let assemblyFormat = "$sym_name $space $kind attr-dict";
  let hasVerifier = 1;
}

def Mt_EventOp : Mt_Op<"event", [Symbol]> {
  let summary = "a named event: param_ready, compute_done, buffer_free or grad_landed";
  let description = [{
    ```mlir
    mt.event @slot0.ready param_ready
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrAttr:$kind);
  let assemblyFormat = "$sym_name $kind attr-dict";
  let hasVerifier = 1;
}

def Mt_ScheduleOp : Mt_Op<"schedule", [Symbol, NoTerminator, SingleBlock]> {
  let summary = "one training step as commands on four streams, in issue order";
  let description = [{
    ```mlir
    mt.schedule @step {micro_batches = 2 : i64, slots = 2 : i64} {
      mt.h2d @stage0 into @slot0 unit @u1 on "h2d"
      mt.record @slot0.ready on "h2d"
      mt.wait @slot0.ready on "compute"
      ...
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $body";
}

//===----------------------------------------------------------------------===//
// Commands
//===----------------------------------------------------------------------===//

class Mt_CommandOp<string mnemonic, list<Trait> traits = []>
    : Mt_Op<mnemonic, !listconcat([HasParent<"ScheduleOp">], traits)> {
  let hasVerifier = 1;
}

def Mt_LaunchOp : Mt_CommandOp<"launch"> {
  let summary = "runs a template for one unit and micro-batch";
  let description = [{
    `callee` is a forward or backward template (`direction` "fwd" or
    "bwd") applied as the model body's application #`apply`, whose params
    it reads from the weight slot `weights` holding `unit`. `inputs` and `outputs` are activation buffers in the
    template's argument and result order (a backward template's param
    gradients go to `grads`, accumulated over micro-batches unless
    `fresh`).

    ```mlir
    mt.launch @layer fwd unit @u3 apply 3 mb 0 weights @slot1 inputs [@ckpt.3.0] outputs [@ckpt.4.0] on "compute"
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$callee, StrAttr:$direction,
                       FlatSymbolRefAttr:$unit, I64Attr:$apply, I64Attr:$mb,
                       OptionalAttr<FlatSymbolRefAttr>:$weights,
                       SymbolRefArrayAttr:$inputs, SymbolRefArrayAttr:$outputs,
                       OptionalAttr<FlatSymbolRefAttr>:$grads, UnitAttr:$fresh,
                       StrAttr:$stream);
  let assemblyFormat = [{
    $callee $direction `unit` $unit `apply` $apply `mb` $mb (`weights` $weights^)?
      `inputs` $inputs `outputs` $outputs (`grads` $grads^)? `on` $stream attr-dict
  }];
}

def Mt_PackOp : Mt_CommandOp<"pack"> {
  let summary = "host: packs a unit's master weights into a staging slab";
  let description = [{
    Converts the unit's fp32 master weights to the device's storage type
    in the packed layout, ready for one DMA. With `range [begin, count]`,
    only those elements of the unit's packed region, so that staging slabs
    stay small however large a unit is.

    ```mlir
    mt.pack @u3 range [0, 8388608] into @stage.0 on "host"
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$unit, FlatSymbolRefAttr:$into,
                       StrAttr:$stream, OptionalAttr<DenseI64ArrayAttr>:$range);
  let assemblyFormat = "$unit (`range` $range^)? `into` $into `on` $stream attr-dict";
}

def Mt_H2DOp : Mt_CommandOp<"h2d"> {
  let summary = "copies a host buffer to a device buffer";
  let description = [{
    With `range [begin, count]`, copies `count` elements from the start of
    `from` to element `begin` of `into` (one chunk of a unit).

    ```mlir
    mt.h2d @stage.0 into @wslot.1 range [8388608, 8388608] on "h2d"
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$from, FlatSymbolRefAttr:$into,
                       StrAttr:$stream, OptionalAttr<DenseI64ArrayAttr>:$range);
  let assemblyFormat = "$from `into` $into (`range` $range^)? `on` $stream attr-dict";
}

def Mt_D2HOp : Mt_CommandOp<"d2h"> {
  let summary = "copies a device buffer to a host buffer";
  let description = [{
    With `range [begin, count]`, copies elements begin .. begin+count-1 of
    `from` to the start of `into`.

    ```mlir
    mt.d2h @gslot.0 range [0, 8388608] into @gstage.0 on "d2h"
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$from, FlatSymbolRefAttr:$into,
                       StrAttr:$stream, OptionalAttr<DenseI64ArrayAttr>:$range);
  let assemblyFormat = "$from (`range` $range^)? `into` $into `on` $stream attr-dict";
}

def Mt_LoadBatchOp : Mt_CommandOp<"load_batch"> {
  let summary = "host: reads the step's token windows into a staging buffer";
  let description = [{
    ```mlir
    mt.load_batch into @batch on "host"
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$into, StrAttr:$stream);
  let assemblyFormat = "`into` $into `on` $stream attr-dict";
}

def Mt_AccumulateOp : Mt_CommandOp<"accumulate"> {
  let summary = "host: adds a unit's landed gradients into its gradient accumulators";
  let description = [{
    With `range [begin, count]`, `from` holds elements begin ..
    begin+count-1 of the unit's packed gradient region.

    ```mlir
    mt.accumulate @gstage.0 unit @u3 range [0, 8388608] on "host"
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$from, FlatSymbolRefAttr:$unit,
                       StrAttr:$stream, OptionalAttr<DenseI64ArrayAttr>:$range);
  let assemblyFormat = "$from `unit` $unit (`range` $range^)? `on` $stream attr-dict";
}

def Mt_GradNormOp : Mt_CommandOp<"grad_norm"> {
  let summary = "host: the global gradient norm, for clipping";
  let description = [{
    ```mlir
    mt.grad_norm on "host"
    ```
  }];
  let arguments = (ins StrAttr:$stream);
  let assemblyFormat = "`on` $stream attr-dict";
}

def Mt_AdamWOp : Mt_CommandOp<"adamw"> {
  let summary = "host: the AdamW update of one unit's params";
  let description = [{
    ```mlir
    mt.adamw @u3 on "host"
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$unit, StrAttr:$stream);
  let assemblyFormat = "$unit `on` $stream attr-dict";
}

def Mt_RecordOp : Mt_CommandOp<"record"> {
  let summary = "records an event on a stream";
  let description = [{
    ```mlir
    mt.record @slot0.ready on "h2d"
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$event, StrAttr:$stream);
  let assemblyFormat = "$event `on` $stream attr-dict";
}

def Mt_WaitOp : Mt_CommandOp<"wait"> {
  let summary = "makes a stream wait for the latest record of an event";
  let description = [{
    ```mlir
    mt.wait @slot0.ready on "compute"
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$event, StrAttr:$stream);
  let assemblyFormat = "$event `on` $stream attr-dict";
}

#endif // MT_SCHEDULE_OPS_TD
