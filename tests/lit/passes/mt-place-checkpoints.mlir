// RUN: megatrain-opt %s -split-input-file --mt-derive-backward --mt-partition --mt-pack-weights --mt-schedule="micro-batches=2" --mt-place-checkpoints="host-checkpoints=1" | FileCheck %s --check-prefix=ONE
// RUN: megatrain-opt %s -split-input-file --mt-derive-backward --mt-partition --mt-pack-weights --mt-schedule="micro-batches=2" --mt-place-checkpoints | FileCheck %s --check-prefix=NONE
// RUN: megatrain-opt %s -split-input-file --mt-derive-backward --mt-partition --mt-pack-weights --mt-schedule="micro-batches=2" --mt-place-checkpoints="gpu-mem-limit=28000" | FileCheck %s --check-prefix=USELESS
// RUN: megatrain-opt %s -split-input-file --mt-derive-backward --mt-partition --mt-pack-weights --mt-schedule="micro-batches=2" --mt-place-checkpoints="gpu-mem-limit=30500" | FileCheck %s --check-prefix=BUDGET
// RUN: megatrain-opt %s -split-input-file --mt-derive-backward --mt-partition --mt-pack-weights --mt-schedule="micro-batches=2" --mt-place-checkpoints="host-checkpoints=1" --mt-insert-transfers --mt-insert-events --mt-plan-memory --mt-verify-schedule | FileCheck %s --check-prefix=MOVED

// Two layers and a head: checkpoints ckpt.1.* and ckpt.2.* are layer
// inputs, ckpt.3.* the head's, which never leaves the device.
// host-checkpoints=1 offloads the first layer's; without a budget nothing
// moves. Over a budget, offloading would add staging rings of four layers'
// checkpoints to save two: nothing moves (mt-plan-memory reports the
// excess).
// ONE: mt.buffer @ckpt.1.0 "host" "checkpoint"
// ONE-NEXT: mt.buffer @ckpt.1.1 "host" "checkpoint"
// ONE-NEXT: mt.buffer @ckpt.2.0 "device" "checkpoint"
// ONE-NEXT: mt.buffer @ckpt.2.1 "device" "checkpoint"
// ONE-NEXT: mt.buffer @ckpt.3.0 "device" "checkpoint"
// NONE-NOT: "host" "checkpoint"
// USELESS-LABEL: mt.param @l0.ln
// USELESS-NOT: "host" "checkpoint"
// USELESS-LABEL: mt.param @l7
// BUDGET-LABEL: mt.param @l0.ln
// BUDGET-NOT: "host" "checkpoint"
// An offloaded checkpoint is written to the `fact` ring by the forward that
// makes it, read from there by the next forward, saved to host by a d2h,
// and copied back into the `bact` ring ahead of the backward that reads it.
// MOVED: mt.launch @embedding "fwd" unit @u0 apply 0 mb 0 {{.*}} outputs [@fact.1.0]
// MOVED: mt.d2h @fact.1.0 into @ckpt.1.0 on "d2h"
// MOVED: mt.launch @layer "fwd" unit @u1 apply 1 mb 0 {{.*}} inputs [@fact.1.0] outputs [@ckpt.2.0]
// MOVED: mt.h2d @ckpt.1.0 into @bact.{{[01]}}.0 on "h2d"
// MOVED: mt.launch @layer.bwd "bwd" unit @u1 apply 1 mb 0 {{.*}} inputs [@bact.{{[01]}}.0, @dact.0.0]
module {
  mt.param @wte : tensor<32x16xf32>
  mt.param @l0.ln : tensor<16xf32>
  mt.param @l0.wq : tensor<16x16xf32>
  mt.param @l1.ln : tensor<16xf32>
  mt.param @l1.wq : tensor<16x16xf32>
  mt.param @norm : tensor<16xf32>
  mt.param @lm_head : tensor<16x32xf32>
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

// Eight layers: checkpoints of 512 bytes per layer (2 micro-batches of
// 128 bf16 elements), rings worth 4 layers. The budget is 1 to 1.5 KiB
// short of keeping all eight: offloading k layers saves 512 k - 2048
// bytes, so the first 7 go to host and the last layer's stays.
// BUDGET-LABEL: mt.param @l7
// BUDGET: mt.buffer @ckpt.1.0 "host" "checkpoint"
// BUDGET: mt.buffer @ckpt.7.1 "host" "checkpoint"
// BUDGET-NEXT: mt.buffer @ckpt.8.0 "device" "checkpoint"
// BUDGET-NEXT: mt.buffer @ckpt.8.1 "device" "checkpoint"
// BUDGET-NEXT: mt.buffer @ckpt.9.0 "device" "checkpoint"
module {
  mt.param @wte : tensor<32x16xf32>
  mt.param @ln : tensor<16xf32>
  mt.param @l0 : tensor<16x16xf32>
  mt.param @l1 : tensor<16x16xf32>
  mt.param @l2 : tensor<16x16xf32>
  mt.param @l3 : tensor<16x16xf32>
  mt.param @l4 : tensor<16x16xf32>
  mt.param @l5 : tensor<16x16xf32>
  mt.param @l6 : tensor<16x16xf32>
  mt.param @l7 : tensor<16x16xf32>
  mt.param @lm_head : tensor<16x32xf32>
  mt.template @embedding kind "embedding" (%ids: tensor<1x8xi32>) params (%t: tensor<32x16xf32>) -> (tensor<1x8x16xf32>) {
    %h = mt.embed %ids, %t : (tensor<1x8xi32>, tensor<32x16xf32>) -> tensor<1x8x16xf32>
    mt.yield %h : tensor<1x8x16xf32>
  }
  mt.template @layer kind "layer" (%x: tensor<1x8x16xf32>) params (%w: tensor<16x16xf32>) -> (tensor<1x8x16xf32>) {
    %q = mt.linear %x, %w : (tensor<1x8x16xf32>, tensor<16x16xf32>) -> tensor<1x8x16xf32>
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
    %h1 = mt.apply @layer(%h0) layer(0) params(@l0) : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    %h2 = mt.apply @layer(%h1) layer(1) params(@l1) : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    %h3 = mt.apply @layer(%h2) layer(2) params(@l2) : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    %h4 = mt.apply @layer(%h3) layer(3) params(@l3) : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    %h5 = mt.apply @layer(%h4) layer(4) params(@l4) : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    %h6 = mt.apply @layer(%h5) layer(5) params(@l5) : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    %h7 = mt.apply @layer(%h6) layer(6) params(@l6) : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    %h8 = mt.apply @layer(%h7) layer(7) params(@l7) : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    %lg = mt.apply @head(%h8) params(@ln, @lm_head) : (tensor<1x8x16xf32>) -> tensor<1x8x32xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<1x8x32xf32>, tensor<1x8xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}
