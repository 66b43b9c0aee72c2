// RUN: megatrain-opt %s -split-input-file --mt-derive-backward --mt-partition --mt-pack-weights --mt-schedule="micro-batches=2" --mt-insert-transfers --mt-insert-events --mt-plan-memory | FileCheck %s
// RUN: megatrain-opt %s -split-input-file --mt-derive-backward --mt-partition --mt-pack-weights --mt-schedule="micro-batches=2" --mt-insert-transfers --mt-insert-events --mt-plan-memory="gpu-mem-limit=1073741824" | FileCheck %s --check-prefix=BUDGET
// RUN: not megatrain-opt %s -split-input-file --mt-derive-backward --mt-partition --mt-pack-weights --mt-schedule="micro-batches=8" --mt-insert-transfers --mt-insert-events --mt-plan-memory="gpu-mem-limit=104857600" 2>&1 | FileCheck %s --check-prefix=OVER
// RUN: not megatrain-opt %s -split-input-file --mt-derive-backward --mt-partition --mt-pack-weights --mt-schedule="micro-batches=1" --mt-insert-transfers --mt-insert-events --mt-plan-memory="gpu-mem-limit=25165824" 2>&1 | FileCheck %s --check-prefix=SEQ

// One arena per element type (storage, f32, i32), each buffer at a 256-
// element boundary in declaration order; host buffers get no offset. The
// workspace is the largest template scratch; device_bytes sums the arenas
// in bf16 storage bytes, and device_breakdown by buffer kind.
// CHECK-LABEL: mt.buffer @tokens "device" "tokens" {dtype = "i32", elems = 32 : i64, offset = 0 : i64}
// CHECK-NEXT: mt.buffer @loss "device" "loss" {dtype = "f32", elems = 2 : i64, offset = 0 : i64}
// CHECK-NEXT: mt.buffer @ckpt.1.0 "device" "checkpoint" {dtype = "storage", elems = 128 : i64, offset = 0 : i64}
// CHECK-NEXT: mt.buffer @ckpt.1.1 "device" "checkpoint" {dtype = "storage", elems = 128 : i64, offset = 256 : i64}
// CHECK: mt.buffer @dact.1.1 "device" "activation_grad" {dtype = "storage", elems = 128 : i64, offset = 2304 : i64}
// CHECK-NEXT: mt.buffer @wslot.0 "device" "weights" {dtype = "storage", elems = 2048 : i64, offset = 2560 : i64}
// CHECK-NEXT: mt.buffer @wslot.1 "device" "weights" {dtype = "storage", elems = 2048 : i64, offset = 4608 : i64}
// CHECK-NEXT: mt.buffer @stage.0 "host" "staging" {dtype = "storage", elems = 2048 : i64}
// CHECK: mt.buffer @gslot.0 "device" "grads" {dtype = "f32", elems = 2048 : i64, offset = 256 : i64}
// CHECK: mt.buffer @gslot.1 "device" "grads" {dtype = "f32", elems = 2048 : i64, offset = 2304 : i64}
// CHECK: mt.buffer @workspace "device" "workspace" {dtype = "storage", elems = 640 : i64, offset = 6656 : i64}
// CHECK: mt.schedule @step attributes {device_breakdown = {activation_grad = 2048 : i64, checkpoint = 3072 : i64, grads = 16384 : i64, loss = 1024 : i64, tokens = 1024 : i64, weights = 8192 : i64, workspace = 1536 : i64}, device_bytes = 33280 : i64, micro_batches = 2 : i64}
// Under a budget the plan keeps it, for the runtime's optional scratch.
// BUDGET: mt.schedule @step attributes {device_breakdown = {{[{][^}]*[}]}}, device_budget = 1073741824 : i64, device_bytes = 33280 : i64, micro_batches = 2 : i64}
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

// Width 1024 over 2048 tokens: each checkpoint and activation gradient is
// 4 MiB per micro-batch. At 8 micro-batches the plan needs 0.14 GiB, over
// a 100 MiB budget: the error gives the breakdown by kind and the largest
// micro-batch count that fits. At one micro-batch over 24 MiB, fewer
// micro-batches cannot help: the hint is a shorter sequence.
// OVER: error: the plan needs 0.14 GiB of device memory, over the budget of 0.10 GiB:
// OVER-NEXT: activation_grad: 0.06 GiB
// OVER-NEXT: checkpoint: 0.06 GiB
// OVER-NEXT: grads: 0.01 GiB
// OVER: hint: --micro-batches 5 fits (0.09 GiB)
// SEQ: error: the plan needs 0.03 GiB of device memory, over the budget of 0.02 GiB:
// SEQ: hint: a sequence about 59% as long (--seq-len) fits, at one micro-batch
// Under no budget (the first RUN line, two micro-batches) it plans fine.
// CHECK: mt.schedule @step attributes {device_breakdown = {activation_grad = 16777216 : i64, checkpoint = 16777216 : i64, {{.*}}device_bytes = 50627584 : i64
module {
  mt.param @wte : tensor<32x1024xf32>
  mt.param @l0.w : tensor<1024x1024xf32>
  mt.param @w : tensor<1024x32xf32>
  mt.template @embedding kind "embedding" (%ids: tensor<1x2048xi32>) params (%t: tensor<32x1024xf32>) -> (tensor<1x2048x1024xf32>) {
    %h = mt.embed %ids, %t : (tensor<1x2048xi32>, tensor<32x1024xf32>) -> tensor<1x2048x1024xf32>
    mt.yield %h : tensor<1x2048x1024xf32>
  }
  mt.template @layer kind "layer" (%x: tensor<1x2048x1024xf32>) params (%w: tensor<1024x1024xf32>) -> (tensor<1x2048x1024xf32>) {
    %y = mt.linear %x, %w : (tensor<1x2048x1024xf32>, tensor<1024x1024xf32>) -> tensor<1x2048x1024xf32>
    mt.yield %y : tensor<1x2048x1024xf32>
  }
  mt.template @head kind "head" (%x: tensor<1x2048x1024xf32>) params (%w: tensor<1024x32xf32>) -> (tensor<1x2048x32xf32>) {
    %l = mt.linear %x, %w {w_layout = "in_out"} : (tensor<1x2048x1024xf32>, tensor<1024x32xf32>) -> tensor<1x2048x32xf32>
    mt.yield %l : tensor<1x2048x32xf32>
  }
  mt.model @main(%tokens: tensor<1x2048xi32>, %targets: tensor<1x2048xi32>) -> (tensor<f32>) {
    %h0 = mt.apply @embedding(%tokens) params(@wte) : (tensor<1x2048xi32>) -> tensor<1x2048x1024xf32>
    %h1 = mt.apply @layer(%h0) layer(0) params(@l0.w) : (tensor<1x2048x1024xf32>) -> tensor<1x2048x1024xf32>
    %lg = mt.apply @head(%h1) params(@w) : (tensor<1x2048x1024xf32>) -> tensor<1x2048x32xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<1x2048x32xf32>, tensor<1x2048xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}
