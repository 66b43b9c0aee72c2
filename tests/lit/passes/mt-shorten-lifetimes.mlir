// RUN: megatrain-opt %s -split-input-file --mt-derive-backward --mt-shorten-lifetimes | FileCheck %s

// The attention's input norm is read by the q, k and v projections and, in
// the backward, by their weight gradients after attention_grad. Held, it
// would be live across the attention's backward with q, k, v, their
// gradients and dy; instead it is computed again from the block input just
// before the first late reader, which shrinks the scratch. Each head-major
// copy sits beside the projection that makes it.
// CHECK-LABEL: mt.template @layer.bwd kind "layer"
// CHECK-NEXT:  [[N:%[0-9]+]] = mt.rms_norm %arg0, %arg2
// CHECK-NEXT:  mt.linear [[N]], %arg5
// CHECK-NEXT:  mt.reshape
// CHECK-NEXT:  mt.transpose
// CHECK-NEXT:  mt.linear [[N]], %arg4
// CHECK:       mt.attention_grad
// CHECK-NOT:   [[N]]
// CHECK:       [[N2:%[0-9]+]] = mt.rms_norm %arg0, %arg2
// CHECK-NEXT:  mt.linear_grad %{{[0-9]+}}, [[N2]], %arg3
// CHECK-NOT:   [[N]]
// CHECK:       mt.linear_grad %{{[0-9]+}}, [[N2]], %arg4
// CHECK:       mt.linear_grad %{{[0-9]+}}, [[N2]], %arg5
// CHECK:       mt.rms_norm_grad
module {
  mt.param @wte : tensor<32x16xf32>
  mt.param @ln : tensor<16xf32>
  mt.param @wq : tensor<16x16xf32>
  mt.param @wk : tensor<16x16xf32>
  mt.param @wv : tensor<16x16xf32>
  mt.param @wo : tensor<16x16xf32>
  mt.template @embedding kind "embedding" (%ids: tensor<2x8xi32>) params (%t: tensor<32x16xf32>) -> (tensor<2x8x16xf32>) {
    %h = mt.embed %ids, %t : (tensor<2x8xi32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
    mt.yield %h : tensor<2x8x16xf32>
  }
  mt.template @layer kind "layer" (%x: tensor<2x8x16xf32>) params (%ln: tensor<16xf32>, %wq: tensor<16x16xf32>, %wk: tensor<16x16xf32>, %wv: tensor<16x16xf32>, %wo: tensor<16x16xf32>) -> (tensor<2x8x16xf32>) {
    %n = mt.rms_norm %x, %ln {eps = 1.0e-5 : f64} : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %q = mt.linear %n, %wq : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %k = mt.linear %n, %wk : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %v = mt.linear %n, %wv : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %qr = mt.reshape %q : (tensor<2x8x16xf32>) -> tensor<2x8x2x8xf32>
    %qt = mt.transpose %qr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x8xf32>) -> tensor<2x2x8x8xf32>
    %kr = mt.reshape %k : (tensor<2x8x16xf32>) -> tensor<2x8x2x8xf32>
    %kt = mt.transpose %kr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x8xf32>) -> tensor<2x2x8x8xf32>
    %vr = mt.reshape %v : (tensor<2x8x16xf32>) -> tensor<2x8x2x8xf32>
    %vt = mt.transpose %vr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x8xf32>) -> tensor<2x2x8x8xf32>
    %a = mt.attention %qt, %kt, %vt {scale = 0.35 : f64} : (tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32>) -> tensor<2x2x8x8xf32>
    %b = mt.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x8x8xf32>) -> tensor<2x8x2x8xf32>
    %c = mt.reshape %b : (tensor<2x8x2x8xf32>) -> tensor<2x8x16xf32>
    %o = mt.linear %c, %wo : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %y = mt.add %x, %o : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    mt.yield %y : tensor<2x8x16xf32>
  }
  mt.template @head kind "head" (%x: tensor<2x8x16xf32>) params (%w: tensor<32x16xf32>) -> (tensor<2x8x32xf32>) {
    %l = mt.linear %x, %w : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
    mt.yield %l : tensor<2x8x32xf32>
  }
  mt.model @main(%tokens: tensor<2x8xi32>, %targets: tensor<2x8xi32>) -> (tensor<f32>) {
    %h0 = mt.apply @embedding(%tokens) params(@wte) : (tensor<2x8xi32>) -> tensor<2x8x16xf32>
    %h1 = mt.apply @layer(%h0) layer(0) params(@ln, @wq, @wk, @wv, @wo) : (tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %lg = mt.apply @head(%h1) params(@wte) : (tensor<2x8x16xf32>) -> tensor<2x8x32xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<2x8x32xf32>, tensor<2x8xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}

// -----

// A parallel-residual layer (the MLP reads its own norm of the input, as in
// GPT-NeoX). mt-derive-backward recomputes the block first and takes the
// MLP's gradients last; with each op moved to just before its first user,
// the MLP's recompute sits beside its gradients instead of being held
// across the attention's backward.
// CHECK-LABEL: mt.template @layer.bwd kind "layer"
// CHECK-NEXT: mt.layer_norm %arg0
// CHECK-NEXT: mt.linear
// CHECK-NEXT: mt.gelu
// CHECK-NEXT: mt.linear_grad %arg1
// CHECK-NEXT: mt.gelu_grad
// CHECK-NEXT: mt.linear_grad
// CHECK-NEXT: mt.layer_norm_grad
// CHECK-NEXT: mt.rms_norm %arg0
module {
  mt.param @wte : tensor<32x16xf32>
  mt.param @ln : tensor<16xf32>
  mt.param @wq : tensor<16x16xf32>
  mt.param @wo : tensor<16x16xf32>
  mt.param @ln2 : tensor<16xf32>
  mt.param @lb2 : tensor<16xf32>
  mt.param @wu : tensor<64x16xf32>
  mt.param @bu : tensor<64xf32>
  mt.param @wd : tensor<16x64xf32>
  mt.template @embedding kind "embedding" (%ids: tensor<2x8xi32>) params (%t: tensor<32x16xf32>) -> (tensor<2x8x16xf32>) {
    %h = mt.embed %ids, %t : (tensor<2x8xi32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
    mt.yield %h : tensor<2x8x16xf32>
  }
  mt.template @layer kind "layer" (%x: tensor<2x8x16xf32>) params (%ln: tensor<16xf32>, %wq: tensor<16x16xf32>, %wo: tensor<16x16xf32>, %ln2: tensor<16xf32>, %lb2: tensor<16xf32>, %wu: tensor<64x16xf32>, %bu: tensor<64xf32>, %wd: tensor<16x64xf32>) -> (tensor<2x8x16xf32>) {
    %m = mt.layer_norm %x, %ln2, bias %lb2 {eps = 1.0e-5 : f64} : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %u = mt.linear %m, %wu, %bu : (tensor<2x8x16xf32>, tensor<64x16xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
    %g = mt.gelu %u : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    %d = mt.linear %g, %wd : (tensor<2x8x64xf32>, tensor<16x64xf32>) -> tensor<2x8x16xf32>
    %n = mt.rms_norm %x, %ln {eps = 1.0e-5 : f64} : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %q = mt.linear %n, %wq : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %h = mt.reshape %q : (tensor<2x8x16xf32>) -> tensor<2x8x2x8xf32>
    %t = mt.transpose %h {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x8xf32>) -> tensor<2x2x8x8xf32>
    %a = mt.attention %t, %t, %t {scale = 0.35 : f64} : (tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32>) -> tensor<2x2x8x8xf32>
    %b = mt.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x8x8xf32>) -> tensor<2x8x2x8xf32>
    %c = mt.reshape %b : (tensor<2x8x2x8xf32>) -> tensor<2x8x16xf32>
    %o = mt.linear %c, %wo : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %r = mt.add %x, %o : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %y = mt.add %r, %d : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    mt.yield %y : tensor<2x8x16xf32>
  }
  mt.template @head kind "head" (%x: tensor<2x8x16xf32>) params (%w: tensor<32x16xf32>) -> (tensor<2x8x32xf32>) {
    %l = mt.linear %x, %w : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
    mt.yield %l : tensor<2x8x32xf32>
  }
  mt.model @main(%tokens: tensor<2x8xi32>, %targets: tensor<2x8xi32>) -> (tensor<f32>) {
    %h0 = mt.apply @embedding(%tokens) params(@wte) : (tensor<2x8xi32>) -> tensor<2x8x16xf32>
    %h1 = mt.apply @layer(%h0) layer(0) params(@ln, @wq, @wo, @ln2, @lb2, @wu, @bu, @wd) : (tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %lg = mt.apply @head(%h1) params(@wte) : (tensor<2x8x16xf32>) -> tensor<2x8x32xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<2x8x32xf32>, tensor<2x8xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}

// -----

// A Llama layer: attention_delta and attention_grad read the attention's
// output y. Held from the recompute, y would be live across the MLP's
// backward; instead it is rebuilt from the output projection's input (held
// until that projection's weight gradient) by the inverse reshape and
// transpose, just before attention_delta, and both read the rebuilt y.
// CHECK-LABEL: mt.template @layer.bwd kind "layer"
// CHECK:       [[A:%[a-z0-9_]+]], [[L:%[a-z0-9_]+]] = mt.attention
// CHECK-NEXT:  [[B:%[0-9]+]] = mt.transpose [[A]]
// CHECK-NEXT:  [[C:%[0-9]+]] = mt.reshape [[B]]
// CHECK-NOT:   [[A]]
// CHECK:       mt.swiglu_grad
// CHECK:       mt.linear_grad %{{[0-9]+}}, [[C]], %arg6
// CHECK:       [[R:%[0-9]+]] = mt.reshape [[C]] : (tensor<2x8x16xf32>) -> tensor<2x8x2x8xf32>
// CHECK-NEXT:  [[Y:%[0-9]+]] = mt.transpose [[R]] {perm = array<i64: 0, 2, 1, 3>}
// CHECK-NEXT:  [[D:%[0-9]+]] = mt.attention_delta %{{[0-9]+}}, [[Y]]
// CHECK-NEXT:  mt.attention_grad %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, [[Y]], [[D]], [[L]]
module {
  mt.param @wte : tensor<32x16xf32>
  mt.param @ln : tensor<16xf32>
  mt.param @wq : tensor<16x16xf32>
  mt.param @wk : tensor<16x16xf32>
  mt.param @wv : tensor<16x16xf32>
  mt.param @wo : tensor<16x16xf32>
  mt.param @ln2 : tensor<16xf32>
  mt.param @wg : tensor<64x16xf32>
  mt.param @wu : tensor<64x16xf32>
  mt.param @wd : tensor<16x64xf32>
  mt.template @embedding kind "embedding" (%ids: tensor<2x8xi32>) params (%t: tensor<32x16xf32>) -> (tensor<2x8x16xf32>) {
    %h = mt.embed %ids, %t : (tensor<2x8xi32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
    mt.yield %h : tensor<2x8x16xf32>
  }
  mt.template @layer kind "layer" (%x: tensor<2x8x16xf32>) params (%ln: tensor<16xf32>, %wq: tensor<16x16xf32>, %wk: tensor<16x16xf32>, %wv: tensor<16x16xf32>, %wo: tensor<16x16xf32>, %ln2: tensor<16xf32>, %wg: tensor<64x16xf32>, %wu: tensor<64x16xf32>, %wd: tensor<16x64xf32>) -> (tensor<2x8x16xf32>) {
    %n = mt.rms_norm %x, %ln {eps = 1.0e-5 : f64} : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %q = mt.linear %n, %wq : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %k = mt.linear %n, %wk : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %v = mt.linear %n, %wv : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %qr = mt.reshape %q : (tensor<2x8x16xf32>) -> tensor<2x8x2x8xf32>
    %qt = mt.transpose %qr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x8xf32>) -> tensor<2x2x8x8xf32>
    %kr = mt.reshape %k : (tensor<2x8x16xf32>) -> tensor<2x8x2x8xf32>
    %kt = mt.transpose %kr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x8xf32>) -> tensor<2x2x8x8xf32>
    %vr = mt.reshape %v : (tensor<2x8x16xf32>) -> tensor<2x8x2x8xf32>
    %vt = mt.transpose %vr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x8xf32>) -> tensor<2x2x8x8xf32>
    %a = mt.attention %qt, %kt, %vt {scale = 0.35 : f64} : (tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32>) -> tensor<2x2x8x8xf32>
    %b = mt.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x8x8xf32>) -> tensor<2x8x2x8xf32>
    %c = mt.reshape %b : (tensor<2x8x2x8xf32>) -> tensor<2x8x16xf32>
    %o = mt.linear %c, %wo : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %h = mt.add %x, %o : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %m = mt.rms_norm %h, %ln2 {eps = 1.0e-5 : f64} : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %g = mt.linear %m, %wg : (tensor<2x8x16xf32>, tensor<64x16xf32>) -> tensor<2x8x64xf32>
    %u = mt.linear %m, %wu : (tensor<2x8x16xf32>, tensor<64x16xf32>) -> tensor<2x8x64xf32>
    %s = mt.swiglu %g, %u : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    %d = mt.linear %s, %wd : (tensor<2x8x64xf32>, tensor<16x64xf32>) -> tensor<2x8x16xf32>
    %y = mt.add %h, %d : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    mt.yield %y : tensor<2x8x16xf32>
  }
  mt.template @head kind "head" (%x: tensor<2x8x16xf32>) params (%w: tensor<32x16xf32>) -> (tensor<2x8x32xf32>) {
    %l = mt.linear %x, %w : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
    mt.yield %l : tensor<2x8x32xf32>
  }
  mt.model @main(%tokens: tensor<2x8xi32>, %targets: tensor<2x8xi32>) -> (tensor<f32>) {
    %h0 = mt.apply @embedding(%tokens) params(@wte) : (tensor<2x8xi32>) -> tensor<2x8x16xf32>
    %h1 = mt.apply @layer(%h0) layer(0) params(@ln, @wq, @wk, @wv, @wo, @ln2, @wg, @wu, @wd) : (tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %lg = mt.apply @head(%h1) params(@wte) : (tensor<2x8x16xf32>) -> tensor<2x8x32xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<2x8x32xf32>, tensor<2x8xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}
