// RUN: megatrain-opt %s -split-input-file -verify-diagnostics --mt-verify-schedule | FileCheck %s

// Correct: the host packs, h2d copies once the slab is ready, compute runs
// once the slot is ready; the free events keep the next step's pack and
// copy from overwriting what this step still reads. The pass changes
// nothing.
// CHECK-LABEL: mt.schedule @step {
// CHECK-NEXT: mt.wait @stage.free on "host"
// CHECK-NEXT: mt.pack @u0 into @stage on "host"
// CHECK: mt.record @slot.free on "compute"
// CHECK-NEXT: }
module {
  mt.buffer @stage "host" "staging" {dtype = "storage", elems = 2048 : i64}
  mt.buffer @slot "device" "weights" {dtype = "storage", elems = 2048 : i64}
  mt.buffer @act "device" "checkpoint" {dtype = "storage", elems = 128 : i64}
  mt.event @stage.ready "param_ready"
  mt.event @slot.ready "param_ready"
  mt.event @stage.free "buffer_free"
  mt.event @slot.free "buffer_free"
  mt.schedule @step {
    mt.wait @stage.free on "host"
    mt.pack @u0 into @stage on "host"
    mt.record @stage.ready on "host"
    mt.wait @stage.ready on "h2d"
    mt.wait @slot.free on "h2d"
    mt.h2d @stage into @slot on "h2d"
    mt.record @stage.free on "h2d"
    mt.record @slot.ready on "h2d"
    mt.wait @slot.ready on "compute"
    mt.launch @layer "fwd" unit @u0 apply 0 mb 0 weights @slot inputs [] outputs [@act] on "compute"
    mt.record @slot.free on "compute"
  }
}

// -----

// The launch reads the weight slot with no wait on the copy that fills it:
// the error names both commands, the buffer and the missing edge.
module {
  mt.buffer @stage "host" "staging" {dtype = "storage", elems = 2048 : i64}
  mt.buffer @slot "device" "weights" {dtype = "storage", elems = 2048 : i64}
  mt.buffer @act "device" "checkpoint" {dtype = "storage", elems = 128 : i64}
  mt.event @stage.ready "param_ready"
  mt.schedule @step {
    mt.pack @u0 into @stage on "host"
    mt.record @stage.ready on "host"
    mt.wait @stage.ready on "h2d"
    // expected-note @+1 {{the earlier command}}
    mt.h2d @stage into @slot on "h2d"
    // expected-error @+1 {{race on @slot: this command (compute, reads) may run before mt.h2d @stage into @slot on "h2d" (h2d, writes) has finished; missing edge: a record on h2d after that command, waited on by compute before this one}}
    mt.launch @layer "fwd" unit @u0 apply 0 mb 0 weights @slot inputs [] outputs [@act] on "compute"
  }
}

// -----

// A record too early orders nothing: compute_done is recorded before the
// backward launch, so the d2h may copy the gradient slot while the launch
// still writes it.
module {
  mt.buffer @gslot "device" "grads" {dtype = "f32", elems = 2048 : i64}
  mt.buffer @gstage "host" "grad_staging" {dtype = "f32", elems = 2048 : i64}
  mt.event @gslot.ready "compute_done"
  mt.schedule @step {
    mt.record @gslot.ready on "compute"
    // expected-note @+1 {{the earlier command}}
    mt.launch @layer.bwd "bwd" unit @u0 apply 0 mb 0 inputs [] outputs [] grads @gslot on "compute" {fresh}
    mt.wait @gslot.ready on "d2h"
    // expected-error @+1 {{race on @gslot: this command (d2h, reads) may run before mt.launch @layer.bwd "bwd" unit @u0 apply 0 mb 0 inputs [] outputs [] grads @gslot on "compute" {fresh} (compute, writes) has finished}}
    mt.d2h @gslot into @gstage on "d2h"
  }
}

// -----

// Race across steps: the copy waits for the slot to be ready but nothing
// says the slot is free again, so the next step's copy may overwrite it
// while this step's launch still reads it.
module {
  mt.buffer @stage "host" "staging" {dtype = "storage", elems = 2048 : i64}
  mt.buffer @slot "device" "weights" {dtype = "storage", elems = 2048 : i64}
  mt.buffer @act "device" "checkpoint" {dtype = "storage", elems = 128 : i64}
  mt.event @stage.ready "param_ready"
  mt.event @stage.free "buffer_free"
  mt.event @slot.ready "param_ready"
  mt.schedule @step {
    mt.wait @stage.free on "host"
    mt.pack @u0 into @stage on "host"
    mt.record @stage.ready on "host"
    mt.wait @stage.ready on "h2d"
    // expected-error @+1 {{race on @slot: this command (h2d, writes) may run before the previous step's mt.launch @layer "fwd" unit @u0 apply 0 mb 0 weights @slot inputs [] outputs [@act] on "compute" (compute, reads) has finished}}
    mt.h2d @stage into @slot on "h2d"
    mt.record @stage.free on "h2d"
    mt.record @slot.ready on "h2d"
    mt.wait @slot.ready on "compute"
    // expected-note @+1 {{the earlier command}}
    mt.launch @layer "fwd" unit @u0 apply 0 mb 0 weights @slot inputs [] outputs [@act] on "compute"
  }
}
