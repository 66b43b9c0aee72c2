// RUN: megatrain-opt %s -split-input-file --mt-derive-backward --mt-partition --mt-pack-weights --mt-schedule="micro-batches=2" | FileCheck %s
// RUN: megatrain-opt %s -split-input-file --mt-derive-backward --mt-partition="min-unit-bytes=1100" --mt-pack-weights --mt-schedule="micro-batches=2" | FileCheck %s --check-prefix=MERGED

// Two micro-batches: each unit runs both while resident (layer-major); the
// head runs forward, loss and backward in one fused launch per micro-batch;
// then the backward visits the units in reverse. Buffers: the tokens (ids
// and targets of both micro-batches), a checkpoint per application input
// and micro-batch, two activation-gradient buffers per micro-batch.
// CHECK-LABEL: mt.unit @u3
// CHECK: mt.buffer @tokens "device" "tokens" {dtype = "i32", elems = 32 : i64}
// CHECK: mt.buffer @loss "device" "loss" {dtype = "f32", elems = 2 : i64}
// CHECK: mt.buffer @ckpt.1.0 "device" "checkpoint" {dtype = "storage", elems = 128 : i64}
// CHECK: mt.buffer @ckpt.3.1 "device" "checkpoint"
// CHECK: mt.buffer @dact.1.1 "device" "activation_grad"
// CHECK: mt.schedule @step attributes {micro_batches = 2 : i64} {
// CHECK-NEXT: mt.launch @embedding "fwd" unit @u0 apply 0 mb 0 inputs [@tokens] outputs [@ckpt.1.0] on "compute"
// CHECK-NEXT: mt.launch @embedding "fwd" unit @u0 apply 0 mb 1 inputs [@tokens] outputs [@ckpt.1.1] on "compute"
// CHECK-NEXT: mt.launch @layer "fwd" unit @u1 apply 1 mb 0 inputs [@ckpt.1.0] outputs [@ckpt.2.0]
// CHECK-NEXT: mt.launch @layer "fwd" unit @u1 apply 1 mb 1 inputs [@ckpt.1.1] outputs [@ckpt.2.1]
// CHECK-NEXT: mt.launch @layer "fwd" unit @u2 apply 2 mb 0 inputs [@ckpt.2.0] outputs [@ckpt.3.0]
// CHECK-NEXT: mt.launch @layer "fwd" unit @u2 apply 2 mb 1 inputs [@ckpt.2.1] outputs [@ckpt.3.1]
// CHECK-NEXT: mt.launch @head.bwd "bwd" unit @u3 apply 3 mb 0 inputs [@ckpt.3.0, @tokens] outputs [@loss, @dact.1.0]
// CHECK-NEXT: mt.launch @head.bwd "bwd" unit @u3 apply 3 mb 1 inputs [@ckpt.3.1, @tokens] outputs [@loss, @dact.1.1]
// CHECK-NEXT: mt.launch @layer.bwd "bwd" unit @u2 apply 2 mb 0 inputs [@ckpt.2.0, @dact.1.0] outputs [@dact.0.0]
// CHECK-NEXT: mt.launch @layer.bwd "bwd" unit @u2 apply 2 mb 1 inputs [@ckpt.2.1, @dact.1.1] outputs [@dact.0.1]
// CHECK-NEXT: mt.launch @layer.bwd "bwd" unit @u1 apply 1 mb 0 inputs [@ckpt.1.0, @dact.0.0] outputs [@dact.1.0]
// CHECK-NEXT: mt.launch @layer.bwd "bwd" unit @u1 apply 1 mb 1 inputs [@ckpt.1.1, @dact.0.1] outputs [@dact.1.1]
// CHECK-NEXT: mt.launch @embedding.bwd "bwd" unit @u0 apply 0 mb 0 inputs [@tokens, @dact.1.0] outputs []
// CHECK-NEXT: mt.launch @embedding.bwd "bwd" unit @u0 apply 0 mb 1 inputs [@tokens, @dact.1.1] outputs []
// CHECK-NEXT: }
// A unit of two layers: forward applications in order, backward reversed,
// both micro-batches per application.
// MERGED-LABEL: mt.schedule @step
// MERGED: mt.launch @layer "fwd" unit @u1 apply 1 mb 0
// MERGED-NEXT: mt.launch @layer "fwd" unit @u1 apply 1 mb 1
// MERGED-NEXT: mt.launch @layer "fwd" unit @u1 apply 2 mb 0
// MERGED-NEXT: mt.launch @layer "fwd" unit @u1 apply 2 mb 1
// MERGED-NEXT: mt.launch @head.bwd "bwd" unit @u2 apply 3 mb 0
// MERGED-NEXT: mt.launch @head.bwd "bwd" unit @u2 apply 3 mb 1
// MERGED-NEXT: mt.launch @layer.bwd "bwd" unit @u1 apply 2 mb 0
// MERGED-NEXT: mt.launch @layer.bwd "bwd" unit @u1 apply 2 mb 1
// MERGED-NEXT: mt.launch @layer.bwd "bwd" unit @u1 apply 1 mb 0
// MERGED-NEXT: mt.launch @layer.bwd "bwd" unit @u1 apply 1 mb 1
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

// No decoder layers: the embedding's forward, the head's fused visit, the
// embedding's backward. The head reads the embedding's checkpoint and
// writes the activation gradient the embedding's backward reads.
// CHECK-LABEL: mt.unit @u1 kind "head"
// CHECK: mt.schedule @step attributes {micro_batches = 2 : i64} {
// CHECK-NEXT: mt.launch @embedding "fwd" unit @u0 apply 0 mb 0 inputs [@tokens] outputs [@ckpt.1.0]
// CHECK-NEXT: mt.launch @embedding "fwd" unit @u0 apply 0 mb 1 inputs [@tokens] outputs [@ckpt.1.1]
// CHECK-NEXT: mt.launch @head.bwd "bwd" unit @u1 apply 1 mb 0 inputs [@ckpt.1.0, @tokens] outputs [@loss, @dact.1.0]
// CHECK-NEXT: mt.launch @head.bwd "bwd" unit @u1 apply 1 mb 1 inputs [@ckpt.1.1, @tokens] outputs [@loss, @dact.1.1]
// CHECK-NEXT: mt.launch @embedding.bwd "bwd" unit @u0 apply 0 mb 0 inputs [@tokens, @dact.1.0] outputs []
// CHECK-NEXT: mt.launch @embedding.bwd "bwd" unit @u0 apply 0 mb 1 inputs [@tokens, @dact.1.1] outputs []
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
