//===- Passes.td - MegaTrain's passes ---------------------------*- tablegen -*-===//
//
// The pipeline from the model-level IR (templates applied per layer) to the
// schedule level (a static list of commands on four streams). Each pass is
// one file in passes/ and has a lit test named after it.
//
//===----------------------------------------------------------------------===//

#ifndef MT_PASSES_TD
#define MT_PASSES_TD

include "mlir/Pass/PassBase.td"

def FoldAttentionLayout : Pass<"mt-fold-attention-layout", "mlir::ModuleOp"> {
  let summary = "Runs attention on the projections' layout, without transposes";
  let description = [{
    Where each of an mt.attention's q, k and v is a transpose of dims 1 and
    2 of a [B, S, heads, D] value (q and k possibly through an mt.rope along
    S that nothing else reads), and every reader of its output transposes
    it back, the attention takes the [B, S, heads, D] values (`layout =
    "bshd"`), each rope runs along S of its input (`seq_axis = 1`), and
    the transposes go. Runs on the forward templates, before
    mt-derive-backward, so the backward has none either. Other attentions
    are left as they are.
  }];
  let dependentDialects = [];
}

def DeriveBackward : Pass<"mt-derive-backward", "mlir::ModuleOp"> {
  let summary = "Derives a backward template for every template";
  let description = [{
    For each template T (embedding, layer, head), adds `T.bwd`: it
    recomputes T's forward from its input (the block-input checkpoint, so
    activations inside a block are never kept across blocks) and applies
    each primitive's VJP rule in reverse, summing gradients where a value
    fans out. Signatures:
      embedding.bwd(ids, dy) params(...) -> (dparams...)
      layer.bwd(x, dy)       params(...) -> (dx, dparams...)
      head.bwd(x, targets, dloss) params(...) -> (loss, dx, dparams...)
    The head's backward includes the loss (mt.cross_entropy of the model),
    so the head's weights serve its forward and backward in one visit.
    dparams cover the params that are not frozen, in param order.
  }];
  let dependentDialects = [];
}

def ChunkLoss : Pass<"mt-chunk-loss", "mlir::ModuleOp"> {
  let summary = "Runs the head's backward over token rows in chunks";
  let description = [{
    Sets `row_chunk` on the head's backward template: its launch then runs
    its row-wise ops (final norm, LM head, cross-entropy and their
    gradients) over the B·S token rows of a micro-batch in chunks, so that
    no more than one chunk's logits and logit gradients are ever held, and
    the weight gradients and the loss accumulate chunk by chunk. `tokens`
    sets the rows per chunk (it must divide B·S); by default the logits of
    a launch run whole up to 2^27 elements, and above that in chunks of the
    largest divisor of B·S that keeps a chunk's logits under that size.
    A head that mixes token rows (anything but row-wise ops) runs whole,
    with a warning when its logits are that large, or an error when
    `tokens` asks for chunks.
  }];
  let options = [
    Option<"tokens", "tokens", "int64_t", "0",
           "token rows per chunk of the head (0: by the logits' size)">,
  ];
}

def ShortenLifetimes : Pass<"mt-shorten-lifetimes", "mlir::ModuleOp"> {
  let summary = "Orders a layer's ops so that each value is held briefly";
  let description = [{
    A layer's scratch is its widest cut of live values. Every op of a layer
    template moves to just before its first user, so that a backward's
    recompute sits beside the gradients that read it (a parallel-residual
    MLP's recompute would otherwise wait across the attention's backward).
    A norm of the block input read both early and late (the attention's
    input norm, by the projections and by their weight gradients) is
    computed again before its late readers when that shrinks the scratch:
    the block input stays in its buffer anyway, and a norm costs one pass
    over the activations.
  }];
  let dependentDialects = [];
}

def ChunkMlp : Pass<"mt-chunk-mlp", "mlir::ModuleOp"> {
  let summary = "Runs each layer's MLP over token rows in chunks";
  let description = [{
    Sets `row_chunk` and `row_ops` on layer templates: the stretch of a
    layer that works token row by token row (output projection, residual,
    norm and MLP, and in the backward their recompute and gradients) then
    runs over the B·S token rows of a micro-batch in chunks, so that its
    activations (B·S·F each, 11.5 GB at 512K tokens of a 7B model) are
    held for one chunk only, while the weight gradients accumulate chunk
    by chunk. Of the row-wise stretches (passes/RowChunk.h) it takes the one that leaves
    the least scratch. `tokens` sets the rows per chunk (it must divide
    B·S); by default a stretch runs whole while its widest activation holds
    up to 2^27 elements, and above that in chunks of the largest divisor of
    B·S that keeps it under that size, if that shrinks the layer's scratch.
  }];
  let options = [
    Option<"tokens", "tokens", "int64_t", "0",
           "token rows per chunk of a layer's MLP (0: by the activations' size)">,
  ];
}

def SplitVocab : Pass<"mt-split-vocab", "mlir::ModuleOp"> {
  let summary = "Cuts an LM head and embedding into vocabulary pieces";
  let description = [{
    An LM head or embedding whose [V, D] weight outweighs a decoder layer
    would size the device's weight and gradient slots alone. This pass cuts
    it into `pieces` ranges of vocabulary rows (by default, under a
    `gpu-mem-limit`, when its weight and gradient slots alone would not
    fit it, as many as make each piece no larger than a layer),
    adds a template per piece and direction (the head's pieces merge
    log-sum-exp statistics, so no piece needs the others' logits) and
    records the row bounds on the application as `vocab_pieces`;
    mt-partition then makes a unit of each piece. A tied head and embedding
    are cut alike. What cannot be cut (a head whose weight is stored
    [hidden, vocab], an embedding that does more than look up rows) stays
    whole, with a warning, or an error when `pieces` asks for the cut.
  }];
  let options = [
    Option<"pieces", "pieces", "int64_t", "0",
           "vocabulary pieces (0: by gpu-mem-limit, 1: never split)">,
    Option<"gpuMemLimit", "gpu-mem-limit", "int64_t", "0",
           "device memory budget in bytes (0: unlimited)">,
  ];
}

def Partition : Pass<"mt-partition", "mlir::ModuleOp"> {
  let summary = "Groups the model's applications into streaming units";
  let description = [{
    Each application of the model body becomes a unit whose params are
    fetched together; consecutive decoder layers smaller than
    `min-unit-bytes` (in bf16) merge. A unit too large for its share of
    `gpu-mem-limit` is an error naming the unit, its size and the budget.
  }];
  let options = [
    Option<"minUnitBytes", "min-unit-bytes", "int64_t", "0",
           "merge consecutive layers smaller than this (bf16 bytes)">,
    Option<"gpuMemLimit", "gpu-mem-limit", "int64_t", "0",
           "device memory budget in bytes (0: unlimited)">,
  ];
}

def PackWeights : Pass<"mt-pack-weights", "mlir::ModuleOp"> {
  let summary = "Lays out each unit's params in one contiguous region";
  let description = [{
    Assigns each param of a unit an element offset in the unit's packed
    region (128-element aligned; the region a multiple of 2048 elements,
    4 KiB in bf16), so one DMA moves a unit. Tied params are stored once in
    the host store, owned by the first unit that uses them.
  }];
}

def Schedule : Pass<"mt-schedule", "mlir::ModuleOp"> {
  let summary = "Orders the step: forward over units, loss, backward in reverse";
  let description = [{
    Creates `mt.schedule @step` holding the compute stream's launches:
    each unit's forward for all `micro-batches` micro-batches while it is
    resident (layer-major, so tokens per weight fetch grow with M), the
    head's fused forward, loss and backward, then the backward units in
    reverse. Creates the activation buffers: a block-input checkpoint per
    application and micro-batch (kept on the device), two activation-
    gradient buffers per micro-batch, the token and loss buffers.
  }];
  let options = [
    Option<"microBatches", "micro-batches", "int64_t", "1",
           "micro-batches run through each resident unit">,
  ];
}

def PlaceCheckpoints : Pass<"mt-place-checkpoints", "mlir::ModuleOp"> {
  let summary = "Keeps block-input checkpoints on the device or offloads them to host";
  let description = [{
    Decides where each block-input checkpoint lives between its forward and
    its backward: on the device while the budget allows, else in host
    memory (the earliest layers first: their checkpoints wait longest).
    An offloaded checkpoint's buffer moves to the "host" space; then
    mt-insert-transfers copies it out after the forward and back in ahead
    of the backward. `host-checkpoints=N` offloads the first N layers'
    checkpoints regardless of the budget; -1 (the default) decides by
    `gpu-mem-limit` (unlimited: none).
  }];
  let options = [
    Option<"gpuMemLimit", "gpu-mem-limit", "int64_t", "0",
           "device memory budget in bytes (0: unlimited)">,
    Option<"slots", "slots", "int64_t", "2", "weight slots (as mt-insert-transfers)">,
    Option<"hostCheckpoints", "host-checkpoints", "int64_t", "-1",
           "layers whose checkpoints go to host (-1: by budget)">,
  ];
}

def InsertTransfers : Pass<"mt-insert-transfers", "mlir::ModuleOp"> {
  let summary = "Adds packing, h2d and d2h copies with N-deep slot rotation";
  let description = [{
    Each unit visit fetches the unit into weight slot (visit mod `slots`)
    through host staging slabs (packed by the host stream, a chunk of at
    most `staging-elems` elements at a time), and each backward visit sends
    its gradient slot back, chunk by chunk, through host landing slabs,
    where the host stream accumulates it. The deferred optimizer update of a
    unit (mt.adamw) precedes its first pack of the step. Adds the batch
    load, its h2d, and the loss's d2h.
  }];
  let options = [
    Option<"slots", "slots", "int64_t", "2",
           "weight slots on the device (2: double buffering)">,
    Option<"stagingElems", "staging-elems", "int64_t", "8388608",
           "elements per host staging slab: units move in chunks of this size">,
  ];
}

def InsertEvents : Pass<"mt-insert-events", "mlir::ModuleOp"> {
  let summary = "Adds the event records and waits that order the streams";
  let description = [{
    Walks the commands in issue order with vector clocks over two copies of
    the step (the schedule repeats) and, wherever two commands on different
    streams touch the same buffer (one writing) without a happens-before
    edge, records an event after the first and waits on it before the
    second: param_ready (staging or slot filled), compute_done (gradients
    written), grad_landed (gradients copied to the host) and buffer_free
    (a reader is done, so the buffer may be overwritten).
  }];
}

def PlanMemory : Pass<"mt-plan-memory", "mlir::ModuleOp"> {
  let summary = "Assigns device buffers static offsets and checks the budget";
  let description = [{
    Lays out the device arena (one per element type: storage, f32, i32) and
    computes the exact peak, with each template's workspace from a liveness
    plan of its body. Over `gpu-mem-limit` (bf16 storage assumed), fails
    with the breakdown and the smallest change that fits.
  }];
  let options = [
    Option<"gpuMemLimit", "gpu-mem-limit", "int64_t", "0",
           "device memory budget in bytes (0: unlimited)">,
  ];
}

def VerifySchedule : Pass<"mt-verify-schedule", "mlir::ModuleOp"> {
  let summary = "Proves the schedule race-free with a happens-before analysis";
  let description = [{
    For every two commands on different streams that touch the same buffer,
    one writing, checks that the earlier (in issue order, across two
    consecutive steps) happens before the later through stream order and
    event record/wait edges. On failure, reports both commands and the
    buffer, and the edge that is missing.
  }];
}

def Simulate : Pass<"mt-simulate", "mlir::ModuleOp"> {
  let summary = "Predicts step time, stream occupancy and model TFLOPS";
  let description = [{
    Replays the schedule on a cost model of the machine (link bandwidth each
    way, device FLOP/s with an efficiency curve by GEMM size, host optimizer
    bandwidth, launch overhead) and attaches the prediction to the schedule;
    optionally writes the per-stream timeline as Chrome trace JSON.

    The replay runs four consecutive steps (each stream in order, a wait
    released by the latest record of its event issued before it, across
    steps) and reports the last step, the steady state, as
    `prediction = {preset, attention_efficiency, step_s, tokens_per_s,
    active_params, model_tflops, compute_busy_fraction, h2d_busy_fraction,
    d2h_busy_fraction, host_busy_fraction, link_bound_fraction, gemm_s,
    attention_s, other_kernels_s, suggested_micro_batches}` on mt.schedule. Model TFLOPS are 6 · active
    params · tokens per second: the trained params, with a mixture's expert
    weights counted k of E. Every preset number can be overridden; docs/schedule.md
    gives the model and the presets' sources.
  }];
  let options = [
    Option<"preset", "preset", "std::string", "\"h200-pcie5\"",
           "hardware preset: h200-pcie5, gh200, a100-pcie4, rtx3090-pcie4">,
    Option<"h2dGBps", "h2d-gbps", "double", "0", "host-to-device GB/s (0: preset)">,
    Option<"d2hGBps", "d2h-gbps", "double", "0", "device-to-host GB/s (0: preset)">,
    Option<"deviceTflops", "device-tflops", "double", "0",
           "peak dense bf16 TFLOP/s (0: preset)">,
    Option<"hbmGBps", "hbm-gbps", "double", "0",
           "device memory GB/s for memory-bound kernels (0: preset)">,
    Option<"hostGBps", "host-gbps", "double", "0",
           "host memory GB/s for the optimizer and packing (0: preset)">,
    Option<"launchUs", "launch-us", "double", "-1",
           "kernel launch overhead in microseconds (-1: preset)">,
    Option<"copyLatencyUs", "copy-latency-us", "double", "-1",
           "fixed latency of each h2d/d2h copy in microseconds (-1: preset)">,
    Option<"attentionEff", "attention-efficiency", "double", "0",
           "fraction of the dense peak fused attention reaches on long "
           "sequences (0: our tensor-core kernels' measured 0.06)">,
    Option<"tracePath", "trace", "std::string", "\"\"",
           "write the predicted timeline as Chrome trace JSON here">,
  ];
}

#endif // MT_PASSES_TD
