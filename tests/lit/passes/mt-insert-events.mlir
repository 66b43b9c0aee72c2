// RUN: megatrain-opt %s -split-input-file --mt-derive-backward --mt-partition --mt-pack-weights --mt-schedule="micro-batches=2" --mt-insert-transfers --mt-insert-events | FileCheck %s

// Embedding and head, two slots, the whole step. Every cross-stream
// conflict gets a record after the earlier command and a wait before the
// later one: param_ready (host packed a staging slab -> h2d; h2d filled a
// weight slot -> compute; the batch), buffer_free (h2d read a staging slab
// -> the host may repack it; compute read a weight slot -> h2d may refill
// it), compute_done (gradients written -> d2h) and grad_landed (gradients on
// the host -> accumulate; the losses written -> their d2h, which also
// orders the gradient d2h behind it on the same stream). Conflicts already
// ordered through other events (the head's slot, refilled only in the next
// step) get none.
// CHECK-LABEL: mt.event @batch.ready "param_ready"
// CHECK-NEXT: mt.event @stage.0.ready "param_ready"
// CHECK-NEXT: mt.event @stage.1.ready "param_ready"
// CHECK-NEXT: mt.event @wslot.0.ready "param_ready"
// CHECK-NEXT: mt.event @stage.0.free "buffer_free"
// CHECK-NEXT: mt.event @wslot.0.free "buffer_free"
// CHECK-NEXT: mt.event @wslot.1.ready "param_ready"
// CHECK-NEXT: mt.event @loss.ready "compute_done"
// CHECK-NEXT: mt.event @gstage.0.ready "grad_landed"
// CHECK-NEXT: mt.event @gslot.1.ready "compute_done"
// CHECK-NEXT: mt.event @gstage.1.ready "grad_landed"
// CHECK-LABEL: mt.schedule @step
// CHECK-NEXT: mt.load_batch into @batch on "host"
// CHECK-NEXT: mt.record @batch.ready on "host"
// CHECK-NEXT: mt.wait @batch.ready on "h2d"
// CHECK-NEXT: mt.h2d @batch into @tokens on "h2d"
// CHECK-NEXT: mt.adamw @u0 on "host"
// CHECK-NEXT: mt.pack @u0 range [0, 2048] into @stage.0 on "host"
// CHECK-NEXT: mt.record @stage.0.ready on "host"
// CHECK-NEXT: mt.wait @stage.0.ready on "h2d"
// CHECK-NEXT: mt.h2d @stage.0 into @wslot.0 range [0, 2048] on "h2d"
// CHECK-NEXT: mt.record @stage.0.free on "h2d"
// CHECK-NEXT: mt.record @wslot.0.ready on "h2d"
// CHECK-NEXT: mt.adamw @u1 on "host"
// CHECK-NEXT: mt.pack @u1 range [0, 2048] into @stage.1 on "host"
// CHECK-NEXT: mt.record @stage.1.ready on "host"
// CHECK-NEXT: mt.wait @stage.1.ready on "h2d"
// CHECK-NEXT: mt.h2d @stage.1 into @wslot.1 range [0, 2048] on "h2d"
// CHECK-NEXT: mt.record @wslot.1.ready on "h2d"
// CHECK-NEXT: mt.wait @wslot.0.ready on "compute"
// CHECK-NEXT: mt.launch @embedding "fwd" unit @u0 apply 0 mb 0 weights @wslot.0 {{.*}} on "compute"
// CHECK-NEXT: mt.launch @embedding "fwd" unit @u0 apply 0 mb 1 weights @wslot.0 {{.*}} on "compute"
// CHECK-NEXT: mt.record @wslot.0.free on "compute"
// CHECK-NEXT: mt.wait @stage.0.free on "host"
// CHECK-NEXT: mt.pack @u0 range [0, 2048] into @stage.0 on "host"
// CHECK-NEXT: mt.record @stage.0.ready on "host"
// CHECK-NEXT: mt.wait @stage.0.ready on "h2d"
// CHECK-NEXT: mt.wait @wslot.0.free on "h2d"
// CHECK-NEXT: mt.h2d @stage.0 into @wslot.0 range [0, 2048] on "h2d"
// CHECK-NEXT: mt.record @wslot.0.ready on "h2d"
// CHECK-NEXT: mt.wait @wslot.1.ready on "compute"
// CHECK-NEXT: mt.launch @head.bwd "bwd" unit @u1 apply 1 mb 0 weights @wslot.1 {{.*}} grads @gslot.0 on "compute" {fresh}
// CHECK-NEXT: mt.launch @head.bwd "bwd" unit @u1 apply 1 mb 1 weights @wslot.1 {{.*}} grads @gslot.0 on "compute"
// CHECK-NEXT: mt.record @loss.ready on "compute"
// CHECK-NEXT: mt.wait @loss.ready on "d2h"
// CHECK-NEXT: mt.d2h @loss into @loss.host on "d2h"
// CHECK-NEXT: mt.d2h @gslot.0 range [0, 2048] into @gstage.0 on "d2h"
// CHECK-NEXT: mt.record @gstage.0.ready on "d2h"
// CHECK-NEXT: mt.wait @gstage.0.ready on "host"
// CHECK-NEXT: mt.accumulate @gstage.0 unit @u1 range [0, 2048] on "host"
// CHECK-NEXT: mt.wait @wslot.0.ready on "compute"
// CHECK-NEXT: mt.launch @embedding.bwd "bwd" unit @u0 apply 0 mb 0 weights @wslot.0 {{.*}} grads @gslot.1 on "compute" {fresh}
// CHECK-NEXT: mt.launch @embedding.bwd "bwd" unit @u0 apply 0 mb 1 weights @wslot.0 {{.*}} grads @gslot.1 on "compute"
// CHECK-NEXT: mt.record @gslot.1.ready on "compute"
// CHECK-NEXT: mt.wait @gslot.1.ready on "d2h"
// CHECK-NEXT: mt.d2h @gslot.1 range [0, 2048] into @gstage.1 on "d2h"
// CHECK-NEXT: mt.record @gstage.1.ready on "d2h"
// CHECK-NEXT: mt.wait @gstage.1.ready on "host"
// CHECK-NEXT: mt.accumulate @gstage.1 unit @u0 range [0, 2048] on "host"
// CHECK-NEXT: mt.grad_norm on "host"
// CHECK-NEXT: }
module {
  mt.param @wte : tensor<32x16xf32>
  mt.param @w : tensor<16x32xf32>
  mt.template @embedding kind "embedding" (%ids: tensor<1x8xi32>) params (%t: tensor<32x16xf32>) -> (tensor<1x8x16xf32>) {
    %h = mt.embed %ids, %t : (tensor<1x8xi32>, tensor<32x16xf32>) -> tensor<1x8x16xf32>
    mt.yield %h : tensor<1x8x16xf32>
  }
  mt.template @head kind "head" (%x: tensor<1x8x16xf32>) params (%w: tensor<16x32xf32>) -> (tensor<1x8x32xf32>) {
    %l = mt.linear %x, %w {w_layout = "in_out"} : (tensor<1x8x16xf32>, tensor<16x32xf32>) -> tensor<1x8x32xf32>
    mt.yield %l : tensor<1x8x32xf32>
  }
  mt.model @main(%tokens: tensor<1x8xi32>, %targets: tensor<1x8xi32>) -> (tensor<f32>) {
    %h0 = mt.apply @embedding(%tokens) params(@wte) : (tensor<1x8xi32>) -> tensor<1x8x16xf32>
    %lg = mt.apply @head(%h0) params(@w) : (tensor<1x8x16xf32>) -> tensor<1x8x32xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<1x8x32xf32>, tensor<1x8xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}

// -----

// Two layers: the gradient slots and landing slabs are reused every other
// backward visit, so their reuse waits on buffer_free events: compute waits
// for the d2h that read gslot.0 before a later visit writes it again, and
// the d2h waits for the host's accumulate before overwriting gstage.0.
// CHECK-LABEL: mt.schedule @step
// CHECK: mt.launch @head.bwd "bwd" unit @u3 apply 3 mb 1 {{.*}} grads @gslot.0
// CHECK-NEXT: mt.record @wslot.1.free on "compute"
// CHECK-NEXT: mt.record @loss.ready on "compute"
// CHECK-NEXT: mt.wait @loss.ready on "d2h"
// CHECK-NEXT: mt.d2h @loss into @loss.host on "d2h"
// CHECK: mt.d2h @gslot.0 range [0, 2048] into @gstage.0 on "d2h"
// CHECK-NEXT: mt.record @gslot.0.free on "d2h"
// CHECK-NEXT: mt.record @gstage.0.ready on "d2h"
// CHECK-NEXT: mt.wait @gstage.0.ready on "host"
// CHECK-NEXT: mt.accumulate @gstage.0 unit @u3 range [0, 2048] on "host"
// CHECK-NEXT: mt.record @gstage.0.free on "host"
// CHECK: mt.wait @wslot.1.ready on "compute"
// CHECK-NEXT: mt.wait @gslot.0.free on "compute"
// CHECK-NEXT: mt.launch @layer.bwd "bwd" unit @u1 apply 1 mb 0 {{.*}} grads @gslot.0 on "compute" {fresh}
// CHECK: mt.wait @gslot.0.ready on "d2h"
// CHECK-NEXT: mt.wait @gstage.0.free on "d2h"
// CHECK-NEXT: mt.d2h @gslot.0 range [0, 2048] into @gstage.0 on "d2h"
module {
  mt.param @wte : tensor<32x16xf32>
  mt.param @l0.ln : tensor<16xf32>
  mt.param @l0.wq : tensor<16x16xf32>
  mt.param @l1.ln : tensor<16xf32>
  mt.param @l1.wq : tensor<16x16xf32>
  mt.param @norm : tensor<16xf32>
  mt.param @lm_head tied to @wte {transposed} : tensor<16x32xf32>
  mt.template @embedding kind "embedding" (%ids: tensor<1x8xi32>) params (%t: tensor<32x16xf32>) -> (tensor<1x8x16xf32>) {
    %h = mt.embed %ids, %t : (tensor<1x8xi32>, tensor<32x16xf32>) -> tensor<1x8x16xf32>
    mt.yield %h : tensor<1x8x16xf32>
  }
  mt.template @layer kind "layer" (%x: tensor<1x8x16xf32>) params (%ln: tensor<16xf32>, %wq: tensor<16x16xf32>) -> (tensor<1x8x16xf32>) {
    %n = mt.rms_norm %x, %ln {eps = 1.0e-5 : f64} : (tensor<1x8x16xf32>, tensor<16xf32>) -> tensor<1x8x16xf32>
    %q = mt.linear %n, %wq : (tensor<1x8x16xf32>, tensor<16x16xf32>) -> tensor<1x8x16xf32>
    %y = mt.add %x, %q : (tensor<1x8x16xf32>, tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    mt.yield %y : tensor<1x8x16xf32>
  }
  mt.template @head kind "head" (%x: tensor<1x8x16xf32>) params (%g: tensor<16xf32>, %w: tensor<16x32xf32>) -> (tensor<1x8x32xf32>) {
    %n = mt.rms_norm %x, %g {eps = 1.0e-5 : f64} : (tensor<1x8x16xf32>, tensor<16xf32>) -> tensor<1x8x16xf32>
    %l = mt.linear %n, %w {w_layout = "in_out"} : (tensor<1x8x16xf32>, tensor<16x32xf32>) -> tensor<1x8x32xf32>
    mt.yield %l : tensor<1x8x32xf32>
  }
  mt.model @main(%tokens: tensor<1x8xi32>, %targets: tensor<1x8xi32>) -> (tensor<f32>) {
    %h0 = mt.apply @embedding(%tokens) params(@wte) : (tensor<1x8xi32>) -> tensor<1x8x16xf32>
    %h1 = mt.apply @layer(%h0) layer(0) params(@l0.ln, @l0.wq) : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    %h2 = mt.apply @layer(%h1) layer(1) params(@l1.ln, @l1.wq) : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    %lg = mt.apply @head(%h2) params(@norm, @lm_head) : (tensor<1x8x16xf32>) -> tensor<1x8x32xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<1x8x32xf32>, tensor<1x8xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}

// -----

// A hand-written step: pack, copy, launch. Besides the in-step ready events,
// the next step's pack and copy would overwrite what this step's copy and
// launch read, so waits on the free events go at the top of their streams,
// binding to the previous step's records (in the first step there is none
// and they pass). (The earlier passes of the RUN line leave an already
// partitioned and scheduled module as it is.)
// CHECK-LABEL: mt.event @stage.ready "param_ready"
// CHECK-NEXT: mt.event @slot.ready "param_ready"
// CHECK-NEXT: mt.event @stage.free "buffer_free"
// CHECK-NEXT: mt.event @slot.free "buffer_free"
// CHECK-NEXT: mt.schedule @step {
// CHECK-NEXT: mt.wait @stage.free on "host"
// CHECK-NEXT: mt.pack @u0 into @stage on "host"
// CHECK-NEXT: mt.record @stage.ready on "host"
// CHECK-NEXT: mt.wait @stage.ready on "h2d"
// CHECK-NEXT: mt.wait @slot.free on "h2d"
// CHECK-NEXT: mt.h2d @stage into @slot on "h2d"
// CHECK-NEXT: mt.record @stage.free on "h2d"
// CHECK-NEXT: mt.record @slot.ready on "h2d"
// CHECK-NEXT: mt.wait @slot.ready on "compute"
// CHECK-NEXT: mt.launch @layer "fwd"
// CHECK-NEXT: mt.record @slot.free on "compute"
// CHECK-NEXT: }
module {
  mt.unit @u0 kind "layer" applies [0] params []
  mt.buffer @stage "host" "staging" {dtype = "storage", elems = 2048 : i64}
  mt.buffer @slot "device" "weights" {dtype = "storage", elems = 2048 : i64}
  mt.buffer @act "device" "checkpoint" {dtype = "storage", elems = 128 : i64}
  mt.schedule @step {
    mt.pack @u0 into @stage on "host"
    mt.h2d @stage into @slot on "h2d"
    mt.launch @layer "fwd" unit @u0 apply 0 mb 0 weights @slot inputs [] outputs [@act] on "compute"
  }
}
