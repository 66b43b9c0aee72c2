// RUN: megatrain-opt %s -split-input-file --mt-derive-backward --mt-split-vocab=gpu-mem-limit=12000 2>/dev/null | FileCheck %s
// RUN: megatrain-opt %s -split-input-file --mt-derive-backward --mt-split-vocab=gpu-mem-limit=12000 2>&1 >/dev/null | FileCheck %s --check-prefix=WARN
// RUN: megatrain-opt %s -split-input-file --mt-derive-backward --mt-split-vocab 2>/dev/null | FileCheck %s --check-prefix=NOBUDGET
// RUN: not megatrain-opt %s -split-input-file --mt-derive-backward --mt-split-vocab=pieces=2 2>&1 >/dev/null | FileCheck %s --check-prefix=ERR

// A head and an embedding of 64 x 16 against a layer of 256 params: under a
// budget of 12000 bytes, less than their slots need (12 bytes a param), cut
// into ceil(1040 / 256) = 5 pieces of 13 rows (the last
// 12). Without a budget nothing is cut.
// CHECK-LABEL: mt.template @embedding.vp0 kind "embedding"
// CHECK-SAME: params (%{{.*}}: tensor<13x16xf32>) -> (tensor<1x8x16xf32>) attributes {piece_of = @embedding}
// CHECK: mt.embed_piece %arg0, %arg1 {vocab_offset = 0 : i64, vocab_size = 64 : i64}
// CHECK-LABEL: mt.template @embedding.vp0.bwd
// CHECK: mt.embed_piece_grad %arg1, %arg0 {vocab_offset = 0 : i64}
// CHECK-LABEL: mt.template @embedding.vp1 kind "embedding"
// CHECK: mt.embed_piece %arg0, %arg2, %arg1 {vocab_offset = 13 : i64, vocab_size = 64 : i64}
// The head's first piece holds the norm and hands on h and the statistics.
// CHECK-LABEL: mt.template @head.vp0 kind "head"
// CHECK-SAME: params (%{{.*}}: tensor<16xf32>, %{{.*}}: tensor<13x16xf32>) -> (tensor<1x8x16xf32>, tensor<1x8x3xf32>)
// CHECK: mt.rms_norm
// CHECK: mt.cross_entropy_stats %{{.*}}, %arg1 {vocab_offset = 0 : i64, vocab_size = 64 : i64}
// CHECK-LABEL: mt.template @head.vp0.bwd kind "head"
// CHECK-SAME: grad_of = @head.vp0, piece_of = @head, trained_params = array<i64: 0, 1>
// CHECK: mt.cross_entropy_piece_grad
// CHECK: mt.rms_norm_grad
// CHECK-LABEL: mt.template @head.vp1 kind "head"
// CHECK: mt.cross_entropy_stats %{{.*}}, %arg1, %arg2 {vocab_offset = 13 : i64
// The last piece: statistics complete, the loss, and its backward at once.
// CHECK-LABEL: mt.template @head.vp4 kind "head"
// CHECK-SAME: params (%{{.*}}: tensor<12x16xf32>) -> (tensor<f32>, tensor<1x8x16xf32>, tensor<1x8x3xf32>, tensor<12x16xf32>) attributes {grad_of = @head, piece_of = @head
// CHECK: %[[S:.*]] = mt.cross_entropy_stats {{.*}}vocab_offset = 52
// CHECK: mt.cross_entropy_stats_loss %[[S]]
// CHECK: mt.cross_entropy_piece_grad {{.*}}, %[[S]], %arg3 {vocab_offset = 52 : i64}
// CHECK: mt.apply @embedding(%arg0) params (@wte) {vocab_params = array<i64: 0>, vocab_pieces = array<i64: 0, 13, 26, 39, 52, 64>}
// CHECK: mt.apply @head(%1) params (@ln, @w) {vocab_params = array<i64: 1>, vocab_pieces = array<i64: 0, 13, 26, 39, 52, 64>}
// NOBUDGET-NOT: vocab_pieces
// NOBUDGET: mt.model
// NOBUDGET-NOT: vocab_pieces
module {
  mt.param @wte : tensor<64x16xf32>
  mt.param @l0.w : tensor<16x16xf32>
  mt.param @ln : tensor<16xf32>
  mt.param @w : tensor<64x16xf32>
  mt.template @embedding kind "embedding" (%ids: tensor<1x8xi32>) params (%t: tensor<64x16xf32>) -> (tensor<1x8x16xf32>) {
    %h = mt.embed %ids, %t : (tensor<1x8xi32>, tensor<64x16xf32>) -> tensor<1x8x16xf32>
    mt.yield %h : tensor<1x8x16xf32>
  }
  mt.template @layer kind "layer" (%x: tensor<1x8x16xf32>) params (%w: tensor<16x16xf32>) -> (tensor<1x8x16xf32>) {
    %q = mt.linear %x, %w : (tensor<1x8x16xf32>, tensor<16x16xf32>) -> tensor<1x8x16xf32>
    %y = mt.add %x, %q : (tensor<1x8x16xf32>, tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    mt.yield %y : tensor<1x8x16xf32>
  }
  mt.template @head kind "head" (%x: tensor<1x8x16xf32>) params (%g: tensor<16xf32>, %w: tensor<64x16xf32>) -> (tensor<1x8x64xf32>) {
    %n = mt.rms_norm %x, %g {eps = 1.0e-5 : f64} : (tensor<1x8x16xf32>, tensor<16xf32>) -> tensor<1x8x16xf32>
    %l = mt.linear %n, %w : (tensor<1x8x16xf32>, tensor<64x16xf32>) -> tensor<1x8x64xf32>
    mt.yield %l : tensor<1x8x64xf32>
  }
  mt.model @main(%tokens: tensor<1x8xi32>, %targets: tensor<1x8xi32>) -> (tensor<f32>) {
    %h0 = mt.apply @embedding(%tokens) params(@wte) : (tensor<1x8xi32>) -> tensor<1x8x16xf32>
    %h1 = mt.apply @layer(%h0) layer(0) params(@l0.w) : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    %lg = mt.apply @head(%h1) params(@ln, @w) : (tensor<1x8x16xf32>) -> tensor<1x8x64xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<1x8x64xf32>, tensor<1x8xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}

// -----

// A head stored [hidden, vocab] (in_out) is cut too: each piece computes
// with its rows of the [vocab, hidden] weight (mt-partition gathers them
// from the stored columns).
// CHECK-LABEL: mt.template @head.vp0 kind "head"
// CHECK-SAME: params (%{{.*}}: tensor<16xf32>, %{{.*}}: tensor<13x16xf32>)
// CHECK: mt.linear %{{.*}}, %arg3 : (tensor<1x8x16xf32>, tensor<13x16xf32>) -> tensor<1x8x13xf32>
// CHECK: mt.apply @head(%1) params (@ln, @w) {vocab_params = array<i64: 1>, vocab_pieces = array<i64: 0, 13, 26, 39, 52, 64>}
module {
  mt.param @wte : tensor<64x16xf32>
  mt.param @l0.w : tensor<16x16xf32>
  mt.param @ln : tensor<16xf32>
  mt.param @w : tensor<16x64xf32>
  mt.template @embedding kind "embedding" (%ids: tensor<1x8xi32>) params (%t: tensor<64x16xf32>) -> (tensor<1x8x16xf32>) {
    %h = mt.embed %ids, %t : (tensor<1x8xi32>, tensor<64x16xf32>) -> tensor<1x8x16xf32>
    mt.yield %h : tensor<1x8x16xf32>
  }
  mt.template @layer kind "layer" (%x: tensor<1x8x16xf32>) params (%w: tensor<16x16xf32>) -> (tensor<1x8x16xf32>) {
    %q = mt.linear %x, %w : (tensor<1x8x16xf32>, tensor<16x16xf32>) -> tensor<1x8x16xf32>
    %y = mt.add %x, %q : (tensor<1x8x16xf32>, tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    mt.yield %y : tensor<1x8x16xf32>
  }
  mt.template @head kind "head" (%x: tensor<1x8x16xf32>) params (%g: tensor<16xf32>, %w: tensor<16x64xf32>) -> (tensor<1x8x64xf32>) {
    %n = mt.rms_norm %x, %g {eps = 1.0e-5 : f64} : (tensor<1x8x16xf32>, tensor<16xf32>) -> tensor<1x8x16xf32>
    %l = mt.linear %n, %w {w_layout = "in_out"} : (tensor<1x8x16xf32>, tensor<16x64xf32>) -> tensor<1x8x64xf32>
    mt.yield %l : tensor<1x8x64xf32>
  }
  mt.model @main(%tokens: tensor<1x8xi32>, %targets: tensor<1x8xi32>) -> (tensor<f32>) {
    %h0 = mt.apply @embedding(%tokens) params(@wte) : (tensor<1x8xi32>) -> tensor<1x8x16xf32>
    %h1 = mt.apply @layer(%h0) layer(0) params(@l0.w) : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    %lg = mt.apply @head(%h1) params(@ln, @w) : (tensor<1x8x16xf32>) -> tensor<1x8x64xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<1x8x64xf32>, tensor<1x8xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}

// -----

// Neither can be cut (the embedding squares what it looks up, the head
// its logits): asking for pieces is an error that says why.
// WARN: warning: the embedding (1024 params) needs more than the budget in its slots but stays whole: it does more than look up rows of one table (and scale them)
// WARN: warning: the head (1040 params) needs more than the budget in its slots but stays whole: its logits do not come from a linear layer (and element-wise scalings or soft caps after it)
// ERR: error: --vocab-pieces: neither the LM head nor the embedding can run in vocabulary pieces
module {
  mt.param @wte : tensor<64x16xf32>
  mt.param @l0.w : tensor<16x16xf32>
  mt.param @ln : tensor<16xf32>
  mt.param @w : tensor<16x64xf32>
  mt.template @embedding kind "embedding" (%ids: tensor<1x8xi32>) params (%t: tensor<64x16xf32>) -> (tensor<1x8x16xf32>) {
    %e = mt.embed %ids, %t : (tensor<1x8xi32>, tensor<64x16xf32>) -> tensor<1x8x16xf32>
    %h = mt.mul %e, %e : (tensor<1x8x16xf32>, tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    mt.yield %h : tensor<1x8x16xf32>
  }
  mt.template @layer kind "layer" (%x: tensor<1x8x16xf32>) params (%w: tensor<16x16xf32>) -> (tensor<1x8x16xf32>) {
    %q = mt.linear %x, %w : (tensor<1x8x16xf32>, tensor<16x16xf32>) -> tensor<1x8x16xf32>
    %y = mt.add %x, %q : (tensor<1x8x16xf32>, tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    mt.yield %y : tensor<1x8x16xf32>
  }
  mt.template @head kind "head" (%x: tensor<1x8x16xf32>) params (%g: tensor<16xf32>, %w: tensor<16x64xf32>) -> (tensor<1x8x64xf32>) {
    %n = mt.rms_norm %x, %g {eps = 1.0e-5 : f64} : (tensor<1x8x16xf32>, tensor<16xf32>) -> tensor<1x8x16xf32>
    %z = mt.linear %n, %w {w_layout = "in_out"} : (tensor<1x8x16xf32>, tensor<16x64xf32>) -> tensor<1x8x64xf32>
    %l = mt.mul %z, %z : (tensor<1x8x64xf32>, tensor<1x8x64xf32>) -> tensor<1x8x64xf32>
    mt.yield %l : tensor<1x8x64xf32>
  }
  mt.model @main(%tokens: tensor<1x8xi32>, %targets: tensor<1x8xi32>) -> (tensor<f32>) {
    %h0 = mt.apply @embedding(%tokens) params(@wte) : (tensor<1x8xi32>) -> tensor<1x8x16xf32>
    %h1 = mt.apply @layer(%h0) layer(0) params(@l0.w) : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    %lg = mt.apply @head(%h1) params(@ln, @w) : (tensor<1x8x16xf32>) -> tensor<1x8x64xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<1x8x64xf32>, tensor<1x8xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}

// -----

// Gemma's form: the embedding scales its rows (by √hidden, here twice), the
// logits are scaled and soft-capped after the LM head (Gemma 2's
// 30 · tanh(z / 30)). Each embedding piece scales the rows it writes and
// the dy rows it scatters; each head piece scales and caps its own logits
// before its statistics, and differentiates through both.
// CHECK-LABEL: mt.template @embedding.vp0 kind "embedding"
// CHECK: mt.embed_piece %arg0, %arg1 {scale = 1.200000e+01 : f64, vocab_offset = 0 : i64, vocab_size = 64 : i64}
// CHECK-LABEL: mt.template @embedding.vp0.bwd
// CHECK: mt.embed_piece_grad %arg1, %arg0 {scale = 1.200000e+01 : f64, vocab_offset = 0 : i64}
// CHECK-LABEL: mt.template @embedding.vp4 kind "embedding"
// CHECK: mt.embed_piece %arg0, %arg2, %arg1 {scale = 1.200000e+01 : f64, vocab_offset = 52 : i64
// CHECK-LABEL: mt.template @head.vp0 kind "head"
// CHECK: %[[Z:.*]] = mt.linear
// CHECK-NEXT: %[[S:.*]] = mt.scale %[[Z]] {factor = 5.000000e-01 : f64} : (tensor<1x8x13xf32>) -> tensor<1x8x13xf32>
// CHECK-NEXT: %[[C:.*]] = mt.softcap %[[S]] {cap = 3.000000e+01 : f64} : (tensor<1x8x13xf32>) -> tensor<1x8x13xf32>
// CHECK-NEXT: mt.cross_entropy_stats %[[C]], %arg1 {vocab_offset = 0 : i64, vocab_size = 64 : i64}
// CHECK-LABEL: mt.template @head.vp0.bwd kind "head"
// CHECK: %[[DC:.*]] = mt.cross_entropy_piece_grad
// CHECK: %[[DS:.*]] = mt.softcap_grad %[[DC]], %{{.*}} {cap = 3.000000e+01 : f64}
// CHECK: mt.scale %[[DS]] {factor = 5.000000e-01 : f64}
// CHECK: mt.linear_grad
// CHECK-LABEL: mt.template @head.vp4 kind "head"
// CHECK: mt.softcap
// CHECK: mt.cross_entropy_stats_loss
// CHECK: mt.softcap_grad
// CHECK: mt.apply @head(%1) params (@ln, @w) {vocab_params = array<i64: 1>, vocab_pieces = array<i64: 0, 13, 26, 39, 52, 64>}
module {
  mt.param @wte : tensor<64x16xf32>
  mt.param @l0.w : tensor<16x16xf32>
  mt.param @ln : tensor<16xf32>
  mt.param @w : tensor<64x16xf32>
  mt.template @embedding kind "embedding" (%ids: tensor<1x8xi32>) params (%t: tensor<64x16xf32>) -> (tensor<1x8x16xf32>) {
    %e = mt.embed %ids, %t : (tensor<1x8xi32>, tensor<64x16xf32>) -> tensor<1x8x16xf32>
    %e4 = mt.scale %e {factor = 4.0 : f64} : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    %h = mt.scale %e4 {factor = 3.0 : f64} : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    mt.yield %h : tensor<1x8x16xf32>
  }
  mt.template @layer kind "layer" (%x: tensor<1x8x16xf32>) params (%w: tensor<16x16xf32>) -> (tensor<1x8x16xf32>) {
    %q = mt.linear %x, %w : (tensor<1x8x16xf32>, tensor<16x16xf32>) -> tensor<1x8x16xf32>
    %y = mt.add %x, %q : (tensor<1x8x16xf32>, tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    mt.yield %y : tensor<1x8x16xf32>
  }
  mt.template @head kind "head" (%x: tensor<1x8x16xf32>) params (%g: tensor<16xf32>, %w: tensor<64x16xf32>) -> (tensor<1x8x64xf32>) {
    %n = mt.rms_norm %x, %g {eps = 1.0e-5 : f64} : (tensor<1x8x16xf32>, tensor<16xf32>) -> tensor<1x8x16xf32>
    %z = mt.linear %n, %w : (tensor<1x8x16xf32>, tensor<64x16xf32>) -> tensor<1x8x64xf32>
    %s = mt.scale %z {factor = 0.5 : f64} : (tensor<1x8x64xf32>) -> tensor<1x8x64xf32>
    %l = mt.softcap %s {cap = 30.0 : f64} : (tensor<1x8x64xf32>) -> tensor<1x8x64xf32>
    mt.yield %l : tensor<1x8x64xf32>
  }
  mt.model @main(%tokens: tensor<1x8xi32>, %targets: tensor<1x8xi32>) -> (tensor<f32>) {
    %h0 = mt.apply @embedding(%tokens) params(@wte) : (tensor<1x8xi32>) -> tensor<1x8x16xf32>
    %h1 = mt.apply @layer(%h0) layer(0) params(@l0.w) : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    %lg = mt.apply @head(%h1) params(@ln, @w) : (tensor<1x8x16xf32>) -> tensor<1x8x64xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<1x8x64xf32>, tensor<1x8xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}
