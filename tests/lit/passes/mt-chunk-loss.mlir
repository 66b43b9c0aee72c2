// RUN: megatrain-opt %s -split-input-file --mt-derive-backward --mt-chunk-loss 2>/dev/null | FileCheck %s
// RUN: megatrain-opt %s -split-input-file --mt-derive-backward --mt-chunk-loss 2>&1 >/dev/null | FileCheck %s --check-prefix=WARN
// RUN: not megatrain-opt %s -split-input-file --mt-derive-backward --mt-chunk-loss=tokens=4 2>/dev/null | FileCheck %s --check-prefix=TOK
// RUN: not megatrain-opt %s -split-input-file --mt-derive-backward --mt-chunk-loss=tokens=4 2>&1 >/dev/null | FileCheck %s --check-prefix=ERR

// A row-wise head (norm, LM head, a bias broadcast over rows, a logit
// scale) with small logits: whole by default; in chunks of 4 of its 8 token
// rows when asked, the bias gradient (a sum over rows) accumulating.
// CHECK-LABEL: mt.template @head.bwd kind "head"
// CHECK-NOT: row_chunk
// CHECK-SAME: {
// TOK-LABEL: mt.template @head.bwd kind "head"
// TOK-SAME: row_chunk = 4 : i64
module {
  mt.param @ln : tensor<16xf32>
  mt.param @w : tensor<32x16xf32>
  mt.param @b : tensor<32xf32>
  mt.template @head kind "head" (%x: tensor<2x4x16xf32>) params (%g: tensor<16xf32>, %w: tensor<32x16xf32>, %b: tensor<32xf32>) -> (tensor<2x4x32xf32>) {
    %n = mt.rms_norm %x, %g {eps = 1.0e-5 : f64} : (tensor<2x4x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
    %l = mt.linear %n, %w : (tensor<2x4x16xf32>, tensor<32x16xf32>) -> tensor<2x4x32xf32>
    %lb = mt.add %l, %b : (tensor<2x4x32xf32>, tensor<32xf32>) -> tensor<2x4x32xf32>
    %s = mt.scale %lb {factor = 0.5 : f64} : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32>
    mt.yield %s : tensor<2x4x32xf32>
  }
  mt.model @main(%x: tensor<2x4x16xf32>, %targets: tensor<2x4xi32>) -> (tensor<f32>) {
    %lg = mt.apply @head(%x) params(@ln, @w, @b) : (tensor<2x4x16xf32>) -> tensor<2x4x32xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<2x4x32xf32>, tensor<2x4xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}

// -----

// Logits of 8192 x 32768 elements (2^28, over the 2^27 held whole): chunks
// of 4096 rows, the largest divisor of 8192 that keeps a chunk's logits at
// 2^27.
// CHECK-LABEL: mt.template @head.bwd kind "head"
// CHECK-SAME: row_chunk = 4096 : i64
// TOK-LABEL: mt.template @head.bwd kind "head"
// TOK-SAME: row_chunk = 4 : i64
module {
  mt.param @ln : tensor<16xf32>
  mt.param @w : tensor<32768x16xf32>
  mt.template @head kind "head" (%x: tensor<2x4096x16xf32>) params (%g: tensor<16xf32>, %w: tensor<32768x16xf32>) -> (tensor<2x4096x32768xf32>) {
    %n = mt.layer_norm %x, %g {eps = 1.0e-5 : f64} : (tensor<2x4096x16xf32>, tensor<16xf32>) -> tensor<2x4096x16xf32>
    %l = mt.linear %n, %w : (tensor<2x4096x16xf32>, tensor<32768x16xf32>) -> tensor<2x4096x32768xf32>
    mt.yield %l : tensor<2x4096x32768xf32>
  }
  mt.model @main(%x: tensor<2x4096x16xf32>, %targets: tensor<2x4096xi32>) -> (tensor<f32>) {
    %lg = mt.apply @head(%x) params(@ln, @w) : (tensor<2x4096x16xf32>) -> tensor<2x4096x32768xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<2x4096x32768xf32>, tensor<2x4096xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}

// -----

// A head that mixes token rows (a transpose puts the sequence last before
// the LM head's input is restored): it cannot run in chunks. Small logits
// run whole without a word; asking for chunks is an error naming the op.
// CHECK-LABEL: mt.template @head.bwd kind "head"
// CHECK-NOT: row_chunk
// CHECK-SAME: {
// ERR: error: --loss-chunk-tokens: the head @head.bwd cannot run in chunks of tokens: this op mixes token rows
// ERR-NEXT: %t = mt.transpose
module {
  mt.param @w : tensor<32x16xf32>
  mt.template @head kind "head" (%x: tensor<1x16x16xf32>) params (%w: tensor<32x16xf32>) -> (tensor<1x16x32xf32>) {
    %t = mt.transpose %x {perm = array<i64: 0, 2, 1>} : (tensor<1x16x16xf32>) -> tensor<1x16x16xf32>
    %l = mt.linear %t, %w : (tensor<1x16x16xf32>, tensor<32x16xf32>) -> tensor<1x16x32xf32>
    mt.yield %l : tensor<1x16x32xf32>
  }
  mt.model @main(%x: tensor<1x16x16xf32>, %targets: tensor<1x16xi32>) -> (tensor<f32>) {
    %lg = mt.apply @head(%x) params(@w) : (tensor<1x16x16xf32>) -> tensor<1x16x32xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<1x16x32xf32>, tensor<1x16xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}

// -----

// The same mixing head with logits over 2^27 elements: held whole, with a
// warning that says why.
// WARN: warning: the head's logits (8192 x 32768) are held whole: it cannot run in chunks of tokens because 'mt.transpose' mixes token rows
// CHECK-LABEL: mt.template @head.bwd kind "head"
// CHECK-NOT: row_chunk
// CHECK-SAME: {
module {
  mt.param @w : tensor<32768x16xf32>
  mt.template @head kind "head" (%x: tensor<1x8192x16xf32>) params (%w: tensor<32768x16xf32>) -> (tensor<1x8192x32768xf32>) {
    %t = mt.transpose %x {perm = array<i64: 1, 0, 2>} : (tensor<1x8192x16xf32>) -> tensor<8192x1x16xf32>
    %r = mt.reshape %t : (tensor<8192x1x16xf32>) -> tensor<1x8192x16xf32>
    %l = mt.linear %r, %w : (tensor<1x8192x16xf32>, tensor<32768x16xf32>) -> tensor<1x8192x32768xf32>
    mt.yield %l : tensor<1x8192x32768xf32>
  }
  mt.model @main(%x: tensor<1x8192x16xf32>, %targets: tensor<1x8192xi32>) -> (tensor<f32>) {
    %lg = mt.apply @head(%x) params(@w) : (tensor<1x8192x16xf32>) -> tensor<1x8192x32768xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<1x8192x32768xf32>, tensor<1x8192xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}

// -----

// 4099 tokens (a prime) of a 65536-word vocabulary: only chunks of one
// token keep the logits small, which the warning points out; chunks of 4
// do not divide the tokens.
// WARN: warning: the loss runs in 4099 chunks of 1 tokens: batch x seq-len = 4099 has no divisor near 2048
// CHECK-LABEL: mt.template @head.bwd kind "head"
// CHECK-SAME: row_chunk = 1 : i64
// ERR: error: --loss-chunk-tokens 4 does not divide the 4099 tokens of a micro-batch (batch x seq-len); 1 does
module {
  mt.param @w : tensor<65536x16xf32>
  mt.template @head kind "head" (%x: tensor<1x4099x16xf32>) params (%w: tensor<65536x16xf32>) -> (tensor<1x4099x65536xf32>) {
    %l = mt.linear %x, %w : (tensor<1x4099x16xf32>, tensor<65536x16xf32>) -> tensor<1x4099x65536xf32>
    mt.yield %l : tensor<1x4099x65536xf32>
  }
  mt.model @main(%x: tensor<1x4099x16xf32>, %targets: tensor<1x4099xi32>) -> (tensor<f32>) {
    %lg = mt.apply @head(%x) params(@w) : (tensor<1x4099x16xf32>) -> tensor<1x4099x65536xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<1x4099x65536xf32>, tensor<1x4099xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}
