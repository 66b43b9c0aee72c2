// RUN: megatrain-opt %s -split-input-file --mt-derive-backward | FileCheck %s

// A layer: rms_norm, linear and attention get their VJPs; q = k = v fans out
// (dq + dk + dv summed with mt.add) and so does the residual input. The
// attention's ALiBi slopes and window carry over to its gradient, which
// reads the recomputed output (the attention's own result) and its δ, the
// recompute's log-sum-exp (its second result, asked for in the backward
// only) and the gradient arriving at it.
// CHECK-LABEL: mt.template @layer.bwd kind "layer"
// CHECK-SAME: (%[[X:.*]]: tensor<1x8x16xf32>, %[[DY:.*]]: tensor<1x8x16xf32>) params (%[[LN:.*]]: tensor<16xf32>, %[[WQ:.*]]: tensor<16x16xf32>)
// CHECK-SAME: -> (tensor<1x8x16xf32>, tensor<16xf32>, tensor<16x16xf32>)
// CHECK-SAME: grad_of = @layer, trained_params = array<i64: 0, 1>
// CHECK: %[[N:.*]] = mt.rms_norm %[[X]], %[[LN]]
// CHECK: mt.linear %[[N]], %[[WQ]]
// CHECK: %[[T:.*]] = mt.transpose
// CHECK: %[[A:.*]], %[[LSE:.*]] = mt.attention %[[T]], %[[T]], %[[T]]
// CHECK-SAME: -> (tensor<1x2x8x8xf32>, tensor<1x2x8xf32>)
// CHECK: %[[DA:.*]] = mt.transpose
// CHECK: %[[DELTA:.*]] = mt.attention_delta %[[DA]], %[[A]] : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8xf32>
// CHECK: %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = mt.attention_grad %[[DA]], %[[T]], %[[T]], %[[T]], %[[A]], %[[DELTA]], %[[LSE]]
// CHECK-SAME: {alibi_slopes = array<f64: 5.000000e-01, 2.500000e-01>, scale = 3.500000e-01 : f64, window = 4 : i64}
// CHECK: %[[S:.*]] = mt.add %[[DQ]], %[[DK]]
// CHECK: mt.add %[[S]], %[[DV]]
// CHECK: %[[DN:.*]], %[[DW:.*]] = mt.linear_grad %{{.*}}, %[[N]], %[[WQ]]
// CHECK: %[[G:.*]]:2 = mt.rms_norm_grad %[[DN]], %[[X]], %[[LN]]
// CHECK: %[[DX:.*]] = mt.add %[[DY]], %[[G]]#0
// CHECK: mt.yield %[[DX]], %[[G]]#1, %[[DW]]
module {
  mt.param @wte : tensor<32x16xf32>
  mt.param @l0.ln : tensor<16xf32>
  mt.param @l0.wq : tensor<16x16xf32>
  mt.param @w : tensor<16x32xf32>
  mt.template @embedding kind "embedding" (%ids: tensor<1x8xi32>) params (%t: tensor<32x16xf32>) -> (tensor<1x8x16xf32>) {
    %h = mt.embed %ids, %t : (tensor<1x8xi32>, tensor<32x16xf32>) -> tensor<1x8x16xf32>
    mt.yield %h : tensor<1x8x16xf32>
  }
  mt.template @layer kind "layer" (%x: tensor<1x8x16xf32>) params (%ln: tensor<16xf32>, %wq: tensor<16x16xf32>) -> (tensor<1x8x16xf32>) {
    %n = mt.rms_norm %x, %ln {eps = 1.0e-5 : f64} : (tensor<1x8x16xf32>, tensor<16xf32>) -> tensor<1x8x16xf32>
    %q = mt.linear %n, %wq : (tensor<1x8x16xf32>, tensor<16x16xf32>) -> tensor<1x8x16xf32>
    %h = mt.reshape %q : (tensor<1x8x16xf32>) -> tensor<1x8x2x8xf32>
    %t = mt.transpose %h {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x8xf32>) -> tensor<1x2x8x8xf32>
    %a = mt.attention %t, %t, %t {alibi_slopes = array<f64: 0.5, 0.25>, scale = 0.35 : f64, window = 4 : i64} : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
    %b = mt.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x8x8xf32>) -> tensor<1x8x2x8xf32>
    %c = mt.reshape %b : (tensor<1x8x2x8xf32>) -> tensor<1x8x16xf32>
    %y = mt.add %x, %c : (tensor<1x8x16xf32>, tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    mt.yield %y : tensor<1x8x16xf32>
  }
  mt.template @head kind "head" (%x: tensor<1x8x16xf32>) params (%w: tensor<16x32xf32>) -> (tensor<1x8x32xf32>) {
    %l = mt.linear %x, %w {w_layout = "in_out"} : (tensor<1x8x16xf32>, tensor<16x32xf32>) -> tensor<1x8x32xf32>
    mt.yield %l : tensor<1x8x32xf32>
  }
  mt.model @main(%tokens: tensor<1x8xi32>, %targets: tensor<1x8xi32>) -> (tensor<f32>) {
    %h0 = mt.apply @embedding(%tokens) params(@wte) : (tensor<1x8xi32>) -> tensor<1x8x16xf32>
    %h1 = mt.apply @layer(%h0) layer(0) params(@l0.ln, @l0.wq) : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    %lg = mt.apply @head(%h1) params(@w) : (tensor<1x8x16xf32>) -> tensor<1x8x32xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<1x8x32xf32>, tensor<1x8xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}

// -----

// The head's backward takes (x, targets, dloss), computes the loss and
// cross_entropy_grad itself, and returns (loss, dx, dparams); the
// embedding's returns only its table's gradient (no dx of token ids).
// CHECK-LABEL: mt.template @embedding.bwd kind "embedding"
// CHECK-SAME: (%[[IDS:.*]]: tensor<1x8xi32>, %[[DH:.*]]: tensor<1x8x16xf32>) params (%{{.*}}: tensor<32x16xf32>) -> (tensor<32x16xf32>)
// CHECK: %[[DT:.*]] = mt.embed_grad %[[DH]], %[[IDS]]
// CHECK: mt.yield %[[DT]] : tensor<32x16xf32>
// CHECK-LABEL: mt.template @head.bwd kind "head"
// CHECK-SAME: (%[[X:.*]]: tensor<1x8x16xf32>, %[[T:.*]]: tensor<1x8xi32>, %[[DL:.*]]: tensor<f32>) params (%[[W:.*]]: tensor<16x32xf32>)
// CHECK-SAME: -> (tensor<f32>, tensor<1x8x16xf32>, tensor<16x32xf32>)
// CHECK: %[[L:.*]] = mt.linear %[[X]], %[[W]] {w_layout = "in_out"}
// CHECK: %[[LOSS:.*]] = mt.cross_entropy %[[L]], %[[T]]
// CHECK: %[[DLG:.*]] = mt.cross_entropy_grad %[[L]], %[[T]], %[[DL]]
// CHECK: %[[DX:.*]], %[[DW:.*]] = mt.linear_grad %[[DLG]], %[[X]], %[[W]] {w_layout = "in_out"}
// CHECK: mt.yield %[[LOSS]], %[[DX]], %[[DW]]
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

// A frozen param (here a fixed scale table) gets no gradient result: the
// layer's backward returns dx and the gradient of param #0 only.
// CHECK-LABEL: mt.template @layer.bwd kind "layer"
// CHECK-SAME: params (%{{.*}}: tensor<16xf32>, %{{.*}}: tensor<16xf32>) -> (tensor<1x8x16xf32>, tensor<16xf32>)
// CHECK-SAME: trained_params = array<i64: 0>
// CHECK: %[[DN:.*]], %{{.*}} = mt.mul_grad
// CHECK: %[[G:.*]]:2 = mt.rms_norm_grad %[[DN]]
// CHECK: mt.yield %[[G]]#0, %[[G]]#1 : tensor<1x8x16xf32>, tensor<16xf32>
module {
  mt.param @wte : tensor<32x16xf32>
  mt.param @l0.ln : tensor<16xf32>
  mt.param @scale {frozen} : tensor<16xf32>
  mt.param @w : tensor<16x32xf32>
  mt.template @embedding kind "embedding" (%ids: tensor<1x8xi32>) params (%t: tensor<32x16xf32>) -> (tensor<1x8x16xf32>) {
    %h = mt.embed %ids, %t : (tensor<1x8xi32>, tensor<32x16xf32>) -> tensor<1x8x16xf32>
    mt.yield %h : tensor<1x8x16xf32>
  }
  mt.template @layer kind "layer" (%x: tensor<1x8x16xf32>) params (%ln: tensor<16xf32>, %s: tensor<16xf32>) -> (tensor<1x8x16xf32>) {
    %n = mt.rms_norm %x, %ln {eps = 1.0e-5 : f64} : (tensor<1x8x16xf32>, tensor<16xf32>) -> tensor<1x8x16xf32>
    %y = mt.mul %n, %s : (tensor<1x8x16xf32>, tensor<16xf32>) -> tensor<1x8x16xf32>
    mt.yield %y : tensor<1x8x16xf32>
  }
  mt.template @head kind "head" (%x: tensor<1x8x16xf32>) params (%w: tensor<16x32xf32>) -> (tensor<1x8x32xf32>) {
    %l = mt.linear %x, %w {w_layout = "in_out"} : (tensor<1x8x16xf32>, tensor<16x32xf32>) -> tensor<1x8x32xf32>
    mt.yield %l : tensor<1x8x32xf32>
  }
  mt.model @main(%tokens: tensor<1x8xi32>, %targets: tensor<1x8xi32>) -> (tensor<f32>) {
    %h0 = mt.apply @embedding(%tokens) params(@wte) : (tensor<1x8xi32>) -> tensor<1x8x16xf32>
    %h1 = mt.apply @layer(%h0) layer(0) params(@l0.ln, @scale) : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    %lg = mt.apply @head(%h1) params(@w) : (tensor<1x8x16xf32>) -> tensor<1x8x32xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<1x8x32xf32>, tensor<1x8xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}
