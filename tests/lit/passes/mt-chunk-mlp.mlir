// RUN: megatrain-opt %s -split-input-file --mt-derive-backward --mt-shorten-lifetimes --mt-chunk-mlp | FileCheck %s
// RUN: megatrain-opt %s -split-input-file --mt-derive-backward --mt-shorten-lifetimes --mt-chunk-mlp=tokens=4 | FileCheck %s --check-prefix=TOK
// RUN: not megatrain-opt %s -split-input-file --mt-derive-backward --mt-shorten-lifetimes --mt-chunk-mlp=tokens=3 2>&1 >/dev/null | FileCheck %s --check-prefix=ERR

// A layer: attention (mixes token rows), then the output projection, the
// residual, LayerNorm, a GELU MLP with a bias and the second residual, all
// row-wise. Its 16 token rows and 64-wide MLP are small: whole by default.
// In chunks of 4 rows when asked: the forward's stretch runs from the
// output projection (op 7) through the yield (op 14); the backward's from
// the recomputed output projection through its gradient (op 17), before
// the reshape back to heads. The other layer ops run once.
// CHECK-LABEL: mt.template @layer kind "layer"
// CHECK-NOT: row_chunk
// CHECK-LABEL: mt.template @head kind "head"
// TOK-LABEL: mt.template @layer kind "layer"
// TOK-SAME: row_chunk = 4 : i64, row_ops = array<i64: 7, 15>
// TOK-LABEL: mt.template @layer.bwd kind "layer"
// TOK-SAME: row_chunk = 4 : i64, row_ops = array<i64: 7, 18>
// TOK-COUNT-17: {{^    %}}
// TOK-NEXT: = mt.linear_grad %{{.*}}, %{{.*}}, %arg4
// TOK-NEXT: mt.reshape
// ERR: error: --mlp-chunk-tokens 3 does not divide the 16 tokens of a micro-batch (batch x seq-len); 2 does
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
    %n = mt.rms_norm %x, %ln {eps = 1.0e-5 : f64} : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %q = mt.linear %n, %wq : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %h = mt.reshape %q : (tensor<2x8x16xf32>) -> tensor<2x8x2x8xf32>
    %t = mt.transpose %h {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x8xf32>) -> tensor<2x2x8x8xf32>
    %a = mt.attention %t, %t, %t {scale = 0.35 : f64} : (tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32>) -> tensor<2x2x8x8xf32>
    %b = mt.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x8x8xf32>) -> tensor<2x8x2x8xf32>
    %c = mt.reshape %b : (tensor<2x8x2x8xf32>) -> tensor<2x8x16xf32>
    %o = mt.linear %c, %wo : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %r = mt.add %x, %o : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %m = mt.layer_norm %r, %ln2, bias %lb2 {eps = 1.0e-5 : f64} : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %u = mt.linear %m, %wu, %bu : (tensor<2x8x16xf32>, tensor<64x16xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
    %g = mt.gelu %u : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    %d = mt.linear %g, %wd : (tensor<2x8x64xf32>, tensor<16x64xf32>) -> tensor<2x8x16xf32>
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

// The same layer at 2 x 4096 tokens with a 32768-wide MLP: its activations
// (2^28 elements) pass the 2^27 held whole, so by default both directions
// run in chunks of 4096 rows, the largest divisor of 8192 that keeps them
// at 2^27.
// CHECK-LABEL: mt.template @layer kind "layer"
// CHECK-SAME: row_chunk = 4096 : i64, row_ops = array<i64: 7, 15>
// CHECK-LABEL: mt.template @layer.bwd kind "layer"
// CHECK-SAME: row_chunk = 4096 : i64, row_ops = array<i64: 7, 18>
// TOK-LABEL: mt.template @layer kind "layer"
// TOK-SAME: row_chunk = 4 : i64, row_ops = array<i64: 7, 15>
// TOK-LABEL: mt.template @layer.bwd kind "layer"
// TOK-SAME: row_chunk = 4 : i64, row_ops = array<i64: 7, 18>
module {
  mt.param @wte : tensor<32x16xf32>
  mt.param @ln : tensor<16xf32>
  mt.param @wq : tensor<16x16xf32>
  mt.param @wo : tensor<16x16xf32>
  mt.param @ln2 : tensor<16xf32>
  mt.param @lb2 : tensor<16xf32>
  mt.param @wu : tensor<32768x16xf32>
  mt.param @bu : tensor<32768xf32>
  mt.param @wd : tensor<16x32768xf32>
  mt.template @embedding kind "embedding" (%ids: tensor<2x4096xi32>) params (%t: tensor<32x16xf32>) -> (tensor<2x4096x16xf32>) {
    %h = mt.embed %ids, %t : (tensor<2x4096xi32>, tensor<32x16xf32>) -> tensor<2x4096x16xf32>
    mt.yield %h : tensor<2x4096x16xf32>
  }
  mt.template @layer kind "layer" (%x: tensor<2x4096x16xf32>) params (%ln: tensor<16xf32>, %wq: tensor<16x16xf32>, %wo: tensor<16x16xf32>, %ln2: tensor<16xf32>, %lb2: tensor<16xf32>, %wu: tensor<32768x16xf32>, %bu: tensor<32768xf32>, %wd: tensor<16x32768xf32>) -> (tensor<2x4096x16xf32>) {
    %n = mt.rms_norm %x, %ln {eps = 1.0e-5 : f64} : (tensor<2x4096x16xf32>, tensor<16xf32>) -> tensor<2x4096x16xf32>
    %q = mt.linear %n, %wq : (tensor<2x4096x16xf32>, tensor<16x16xf32>) -> tensor<2x4096x16xf32>
    %h = mt.reshape %q : (tensor<2x4096x16xf32>) -> tensor<2x4096x2x8xf32>
    %t = mt.transpose %h {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4096x2x8xf32>) -> tensor<2x2x4096x8xf32>
    %a = mt.attention %t, %t, %t {scale = 0.35 : f64} : (tensor<2x2x4096x8xf32>, tensor<2x2x4096x8xf32>, tensor<2x2x4096x8xf32>) -> tensor<2x2x4096x8xf32>
    %b = mt.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x4096x8xf32>) -> tensor<2x4096x2x8xf32>
    %c = mt.reshape %b : (tensor<2x4096x2x8xf32>) -> tensor<2x4096x16xf32>
    %o = mt.linear %c, %wo : (tensor<2x4096x16xf32>, tensor<16x16xf32>) -> tensor<2x4096x16xf32>
    %r = mt.add %x, %o : (tensor<2x4096x16xf32>, tensor<2x4096x16xf32>) -> tensor<2x4096x16xf32>
    %m = mt.layer_norm %r, %ln2, bias %lb2 {eps = 1.0e-5 : f64} : (tensor<2x4096x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x4096x16xf32>
    %u = mt.linear %m, %wu, %bu : (tensor<2x4096x16xf32>, tensor<32768x16xf32>, tensor<32768xf32>) -> tensor<2x4096x32768xf32>
    %g = mt.gelu %u : (tensor<2x4096x32768xf32>) -> tensor<2x4096x32768xf32>
    %d = mt.linear %g, %wd : (tensor<2x4096x32768xf32>, tensor<16x32768xf32>) -> tensor<2x4096x16xf32>
    %y = mt.add %r, %d : (tensor<2x4096x16xf32>, tensor<2x4096x16xf32>) -> tensor<2x4096x16xf32>
    mt.yield %y : tensor<2x4096x16xf32>
  }
  mt.template @head kind "head" (%x: tensor<2x4096x16xf32>) params (%w: tensor<32x16xf32>) -> (tensor<2x4096x32xf32>) {
    %l = mt.linear %x, %w : (tensor<2x4096x16xf32>, tensor<32x16xf32>) -> tensor<2x4096x32xf32>
    mt.yield %l : tensor<2x4096x32xf32>
  }
  mt.model @main(%tokens: tensor<2x4096xi32>, %targets: tensor<2x4096xi32>) -> (tensor<f32>) {
    %h0 = mt.apply @embedding(%tokens) params(@wte) : (tensor<2x4096xi32>) -> tensor<2x4096x16xf32>
    %h1 = mt.apply @layer(%h0) layer(0) params(@ln, @wq, @wo, @ln2, @lb2, @wu, @bu, @wd) : (tensor<2x4096x16xf32>) -> tensor<2x4096x16xf32>
    %lg = mt.apply @head(%h1) params(@wte) : (tensor<2x4096x16xf32>) -> tensor<2x4096x32xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<2x4096x32xf32>, tensor<2x4096xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}

// -----

// The layer with a bias added after the MLP's down projection as its own
// broadcast add: its gradient, a sum over rows (mt.sum_to of dy), reads
// only the layer's dy, so it moves to just before the yield, where it runs
// once over all rows; the backward's stretch is as before.
// TOK-LABEL: mt.template @layer kind "layer"
// TOK-SAME: row_chunk = 4 : i64, row_ops = array<i64: 7, 16>
// TOK-LABEL: mt.template @layer.bwd kind "layer"
// TOK-SAME: row_chunk = 4 : i64, row_ops = array<i64: 7, 18>
// TOK: mt.sum_to %arg1
// TOK-NEXT: mt.yield
// CHECK-LABEL: mt.template @layer.bwd kind "layer"
// CHECK: mt.sum_to %arg1
// CHECK-NEXT: mt.yield
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
  mt.param @bd : tensor<16xf32>
  mt.template @embedding kind "embedding" (%ids: tensor<2x8xi32>) params (%t: tensor<32x16xf32>) -> (tensor<2x8x16xf32>) {
    %h = mt.embed %ids, %t : (tensor<2x8xi32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
    mt.yield %h : tensor<2x8x16xf32>
  }
  mt.template @layer kind "layer" (%x: tensor<2x8x16xf32>) params (%ln: tensor<16xf32>, %wq: tensor<16x16xf32>, %wo: tensor<16x16xf32>, %ln2: tensor<16xf32>, %lb2: tensor<16xf32>, %wu: tensor<64x16xf32>, %bu: tensor<64xf32>, %wd: tensor<16x64xf32>, %bd: tensor<16xf32>) -> (tensor<2x8x16xf32>) {
    %n = mt.rms_norm %x, %ln {eps = 1.0e-5 : f64} : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %q = mt.linear %n, %wq : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %h = mt.reshape %q : (tensor<2x8x16xf32>) -> tensor<2x8x2x8xf32>
    %t = mt.transpose %h {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x8xf32>) -> tensor<2x2x8x8xf32>
    %a = mt.attention %t, %t, %t {scale = 0.35 : f64} : (tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32>) -> tensor<2x2x8x8xf32>
    %b = mt.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x8x8xf32>) -> tensor<2x8x2x8xf32>
    %c = mt.reshape %b : (tensor<2x8x2x8xf32>) -> tensor<2x8x16xf32>
    %o = mt.linear %c, %wo : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %r = mt.add %x, %o : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %m = mt.layer_norm %r, %ln2, bias %lb2 {eps = 1.0e-5 : f64} : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %u = mt.linear %m, %wu, %bu : (tensor<2x8x16xf32>, tensor<64x16xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
    %g = mt.gelu %u : (tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
    %d = mt.linear %g, %wd : (tensor<2x8x64xf32>, tensor<16x64xf32>) -> tensor<2x8x16xf32>
    %e = mt.add %d, %bd : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %y = mt.add %r, %e : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    mt.yield %y : tensor<2x8x16xf32>
  }
  mt.template @head kind "head" (%x: tensor<2x8x16xf32>) params (%w: tensor<32x16xf32>) -> (tensor<2x8x32xf32>) {
    %l = mt.linear %x, %w : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
    mt.yield %l : tensor<2x8x32xf32>
  }
  mt.model @main(%tokens: tensor<2x8xi32>, %targets: tensor<2x8xi32>) -> (tensor<f32>) {
    %h0 = mt.apply @embedding(%tokens) params(@wte) : (tensor<2x8xi32>) -> tensor<2x8x16xf32>
    %h1 = mt.apply @layer(%h0) layer(0) params(@ln, @wq, @wo, @ln2, @lb2, @wu, @bu, @wd, @bd) : (tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %lg = mt.apply @head(%h1) params(@wte) : (tensor<2x8x16xf32>) -> tensor<2x8x32xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<2x8x32xf32>, tensor<2x8xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}

// -----

// A parallel-residual layer (the MLP reads its own norm of the input, as in
// GPT-NeoX): mt-shorten-lifetimes puts the backward's MLP recompute beside
// its gradients (mt-shorten-lifetimes.mlir), and in chunks that stretch
// (recompute, gradients, the norm's gradient) runs row by row.
// TOK-LABEL: mt.template @layer.bwd kind "layer"
// TOK-SAME: row_chunk = 4 : i64, row_ops = array<i64: 0,
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
