// RUN: megatrain-opt %s -split-input-file --mt-derive-backward --mt-partition --mt-pack-weights --mt-schedule="micro-batches=2" --mt-insert-transfers="slots=3" | FileCheck %s

// Three slots: visit i (a unit's run of launches in one direction) computes
// from wslot.(i mod 3), and the fetch of visit i+2 is issued right before
// visit i's launches. Units move through a ring of two staging slabs (each
// unit here is one chunk: range [0, 2048]). Each unit's deferred AdamW comes
// right before its first (forward) pack, and not before its backward pack.
// Gradient slots alternate between backward visits; a visit's gradients
// drain (d2h, then accumulate) right before the next visit's launches;
// `fresh` marks a visit's first micro-batch (it overwrites the gradient
// slot rather than adding).
// CHECK-LABEL: mt.schedule @step
// CHECK-NEXT: mt.load_batch into @batch on "host"
// CHECK-NEXT: mt.h2d @batch into @tokens on "h2d"
// CHECK-NEXT: mt.adamw @u0 on "host"
// CHECK-NEXT: mt.pack @u0 range [0, 2048] into @stage.0 on "host"
// CHECK-NEXT: mt.h2d @stage.0 into @wslot.0 range [0, 2048] on "h2d"
// CHECK-NEXT: mt.adamw @u1 on "host"
// CHECK-NEXT: mt.pack @u1 range [0, 2048] into @stage.1 on "host"
// CHECK-NEXT: mt.h2d @stage.1 into @wslot.1 range [0, 2048] on "h2d"
// CHECK-NEXT: mt.adamw @u2 on "host"
// CHECK-NEXT: mt.pack @u2 range [0, 2048] into @stage.0 on "host"
// CHECK-NEXT: mt.h2d @stage.0 into @wslot.2 range [0, 2048] on "h2d"
// CHECK-NEXT: mt.launch @embedding "fwd" unit @u0 apply 0 mb 0 weights @wslot.0
// CHECK-NEXT: mt.launch @embedding "fwd" unit @u0 apply 0 mb 1 weights @wslot.0
// CHECK-NEXT: mt.adamw @u3 on "host"
// CHECK-NEXT: mt.pack @u3 range [0, 2048] into @stage.1 on "host"
// CHECK-NEXT: mt.h2d @stage.1 into @wslot.0 range [0, 2048] on "h2d"
// CHECK-NEXT: mt.launch @layer "fwd" unit @u1 apply 1 mb 0 weights @wslot.1
// CHECK-NEXT: mt.launch @layer "fwd" unit @u1 apply 1 mb 1 weights @wslot.1
// CHECK-NEXT: mt.pack @u2 range [0, 2048] into @stage.0 on "host"
// CHECK-NEXT: mt.h2d @stage.0 into @wslot.1 range [0, 2048] on "h2d"
// CHECK-NEXT: mt.launch @layer "fwd" unit @u2 apply 2 mb 0 weights @wslot.2
// CHECK-NEXT: mt.launch @layer "fwd" unit @u2 apply 2 mb 1 weights @wslot.2
// CHECK-NEXT: mt.pack @u1 range [0, 2048] into @stage.1 on "host"
// CHECK-NEXT: mt.h2d @stage.1 into @wslot.2 range [0, 2048] on "h2d"
// CHECK-NEXT: mt.launch @head.bwd "bwd" unit @u3 apply 3 mb 0 weights @wslot.0 {{.*}} grads @gslot.0 on "compute" {fresh}
// CHECK-NEXT: mt.launch @head.bwd "bwd" unit @u3 apply 3 mb 1 weights @wslot.0 {{.*}} grads @gslot.0 on "compute"{{$}}
// CHECK-NEXT: mt.d2h @loss into @loss.host on "d2h"
// CHECK-NEXT: mt.pack @u0 range [0, 2048] into @stage.0 on "host"
// CHECK-NEXT: mt.h2d @stage.0 into @wslot.0 range [0, 2048] on "h2d"
// CHECK-NEXT: mt.d2h @gslot.0 range [0, 2048] into @gstage.0 on "d2h"
// CHECK-NEXT: mt.accumulate @gstage.0 unit @u3 range [0, 2048] on "host"
// CHECK-NEXT: mt.launch @layer.bwd "bwd" unit @u2 apply 2 mb 0 weights @wslot.1 {{.*}} grads @gslot.1 on "compute" {fresh}
// CHECK-NEXT: mt.launch @layer.bwd "bwd" unit @u2 apply 2 mb 1 weights @wslot.1 {{.*}} grads @gslot.1
// CHECK-NEXT: mt.d2h @gslot.1 range [0, 2048] into @gstage.1 on "d2h"
// CHECK-NEXT: mt.accumulate @gstage.1 unit @u2 range [0, 2048] on "host"
// CHECK-NEXT: mt.launch @layer.bwd "bwd" unit @u1 apply 1 mb 0 weights @wslot.2 {{.*}} grads @gslot.0 on "compute" {fresh}
// CHECK-NEXT: mt.launch @layer.bwd "bwd" unit @u1 apply 1 mb 1 weights @wslot.2 {{.*}} grads @gslot.0
// CHECK-NEXT: mt.d2h @gslot.0 range [0, 2048] into @gstage.0 on "d2h"
// CHECK-NEXT: mt.accumulate @gstage.0 unit @u1 range [0, 2048] on "host"
// CHECK-NEXT: mt.launch @embedding.bwd "bwd" unit @u0 apply 0 mb 0 weights @wslot.0 {{.*}} grads @gslot.1 on "compute" {fresh}
// CHECK-NEXT: mt.launch @embedding.bwd "bwd" unit @u0 apply 0 mb 1 weights @wslot.0 {{.*}} grads @gslot.1
// CHECK-NEXT: mt.d2h @gslot.1 range [0, 2048] into @gstage.1 on "d2h"
// CHECK-NEXT: mt.accumulate @gstage.1 unit @u0 range [0, 2048] on "host"
// CHECK-NEXT: mt.grad_norm on "host"
// CHECK-NEXT: }
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

// Three visits (embedding forward, head, embedding backward) and three
// slots: every fetch is issued before the first launch, and the buffers are
// three weight slots, a ring of two staging slabs of one chunk, two gradient
// slots with their landing slabs, the batch and the landed losses.
// CHECK-LABEL: mt.unit @u1 kind "head"
// CHECK: mt.buffer @wslot.0 "device" "weights" {dtype = "storage", elems = 2048 : i64}
// CHECK: mt.buffer @wslot.2 "device" "weights"
// CHECK-NEXT: mt.buffer @stage.0 "host" "staging" {dtype = "storage", elems = 2048 : i64}
// CHECK-NEXT: mt.buffer @stage.1 "host" "staging"
// CHECK-NEXT: mt.buffer @gslot.0 "device" "grads" {dtype = "f32", elems = 2048 : i64}
// CHECK-NEXT: mt.buffer @gstage.0 "host" "grad_staging" {dtype = "f32", elems = 2048 : i64}
// CHECK: mt.buffer @batch "host" "batch" {dtype = "i32", elems = 32 : i64}
// CHECK-NEXT: mt.buffer @loss.host "host" "loss_host" {dtype = "f32", elems = 2 : i64}
// CHECK-LABEL: mt.schedule @step
// CHECK: mt.pack @u0 range [0, 2048] into @stage.0
// CHECK-NEXT: mt.h2d @stage.0 into @wslot.0
// CHECK: mt.pack @u1 range [0, 2048] into @stage.1
// CHECK-NEXT: mt.h2d @stage.1 into @wslot.1
// CHECK-NEXT: mt.pack @u0 range [0, 2048] into @stage.0
// CHECK-NEXT: mt.h2d @stage.0 into @wslot.2
// CHECK-NEXT: mt.launch @embedding "fwd"
// CHECK-NOT: mt.h2d @stage
// CHECK: mt.grad_norm
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
