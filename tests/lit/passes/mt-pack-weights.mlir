// RUN: megatrain-opt %s -split-input-file --mt-partition --mt-pack-weights | FileCheck %s

// Small params each start on a 128-element boundary and every region is a
// whole 2048 elements (4 KiB in bf16). The head's weight is tied to the
// embedding: the embedding's unit owns it, the head owns only its norm.
// CHECK-LABEL: mt.model @main
// CHECK: mt.unit @u0 kind "embedding" applies [0] params [@wte] {elems = 2048 : i64, offsets = array<i64: 0>, owns = [@wte]}
// CHECK-NEXT: mt.unit @u1 kind "layer" applies [1] params [@l0.ln, @l0.wq] {elems = 2048 : i64, offsets = array<i64: 0, 128>, owns = [@l0.ln, @l0.wq]}
// CHECK-NEXT: mt.unit @u2 kind "layer" applies [2] params [@l1.ln, @l1.wq] {elems = 2048 : i64, offsets = array<i64: 0, 128>, owns = [@l1.ln, @l1.wq]}
// CHECK-NEXT: mt.unit @u3 kind "head" applies [3] params [@norm, @lm_head] {elems = 2048 : i64, offsets = array<i64: 0, 128>, owns = [@norm]}
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

// Sizes that are not multiples of 128: a (100) at 0, b (2304) at 128, c (48)
// at 2432 (= 128 + 2304, already aligned); the region, 2480 elements, rounds
// up to 4096.
// CHECK-LABEL: mt.model @main
// CHECK: mt.unit @u1 kind "layer" applies [1] params [@l0.a, @l0.b, @l0.c] {elems = 4096 : i64, offsets = array<i64: 0, 128, 2432>, owns = [@l0.a, @l0.b, @l0.c]}
module {
  mt.param @wte : tensor<32x48xf32>
  mt.param @l0.a : tensor<100xf32>
  mt.param @l0.b : tensor<48x48xf32>
  mt.param @l0.c : tensor<48xf32>
  mt.param @w : tensor<48x32xf32>
  mt.template @embedding kind "embedding" (%ids: tensor<1x8xi32>) params (%t: tensor<32x48xf32>) -> (tensor<1x8x48xf32>) {
    %h = mt.embed %ids, %t : (tensor<1x8xi32>, tensor<32x48xf32>) -> tensor<1x8x48xf32>
    mt.yield %h : tensor<1x8x48xf32>
  }
  mt.template @layer kind "layer" (%x: tensor<1x8x48xf32>) params (%a: tensor<100xf32>, %b: tensor<48x48xf32>, %c: tensor<48xf32>) -> (tensor<1x8x48xf32>) {
    %y = mt.linear %x, %b, %c : (tensor<1x8x48xf32>, tensor<48x48xf32>, tensor<48xf32>) -> tensor<1x8x48xf32>
    mt.yield %y : tensor<1x8x48xf32>
  }
  mt.template @head kind "head" (%x: tensor<1x8x48xf32>) params (%w: tensor<48x32xf32>) -> (tensor<1x8x32xf32>) {
    %l = mt.linear %x, %w {w_layout = "in_out"} : (tensor<1x8x48xf32>, tensor<48x32xf32>) -> tensor<1x8x32xf32>
    mt.yield %l : tensor<1x8x32xf32>
  }
  mt.model @main(%tokens: tensor<1x8xi32>, %targets: tensor<1x8xi32>) -> (tensor<f32>) {
    %h0 = mt.apply @embedding(%tokens) params(@wte) : (tensor<1x8xi32>) -> tensor<1x8x48xf32>
    %h1 = mt.apply @layer(%h0) layer(0) params(@l0.a, @l0.b, @l0.c) : (tensor<1x8x48xf32>) -> tensor<1x8x48xf32>
    %lg = mt.apply @head(%h1) params(@w) : (tensor<1x8x48xf32>) -> tensor<1x8x32xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<1x8x32xf32>, tensor<1x8xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}

// -----

// An embedding and a tied LM head in vocabulary pieces: each embedding
// piece holds and owns its rows of the table (a region of only those rows);
// the head's pieces read the same rows and own nothing of them, its first
// piece owning its norm.
// CHECK: mt.unit @u0 kind "embedding" {{.*}}elems = 2048 : i64, offsets = array<i64: 0>, owns = [@wte], parts = array<i64: 1, 0, 256>
// CHECK: mt.unit @u1 kind "embedding" {{.*}}owns = [@wte], parts = array<i64: 1, 256, 256>
// CHECK: mt.unit @u3 kind "head" applies [2] params [@ln, @lm] {elems = 2048 : i64, offsets = array<i64: 0, 128>, owns = [@ln], parts = array<i64: 0, 0, 16, 1, 0, 256>
// CHECK: mt.unit @u4 kind "head" applies [2] params [@lm] {elems = 2048 : i64, offsets = array<i64: 0>, owns = [], parts = array<i64: 1, 256, 256>
module {
  mt.param @wte : tensor<32x16xf32>
  mt.param @l0.w : tensor<16x16xf32>
  mt.param @ln : tensor<16xf32>
  mt.param @lm tied to @wte : tensor<32x16xf32>
  mt.template @embedding kind "embedding" (%ids: tensor<1x8xi32>) params (%t: tensor<32x16xf32>) -> (tensor<1x8x16xf32>) {
    %h = mt.embed %ids, %t : (tensor<1x8xi32>, tensor<32x16xf32>) -> tensor<1x8x16xf32>
    mt.yield %h : tensor<1x8x16xf32>
  }
  mt.template @layer kind "layer" (%x: tensor<1x8x16xf32>) params (%w: tensor<16x16xf32>) -> (tensor<1x8x16xf32>) {
    %y = mt.linear %x, %w : (tensor<1x8x16xf32>, tensor<16x16xf32>) -> tensor<1x8x16xf32>
    mt.yield %y : tensor<1x8x16xf32>
  }
  mt.template @head kind "head" (%x: tensor<1x8x16xf32>) params (%g: tensor<16xf32>, %w: tensor<32x16xf32>) -> (tensor<1x8x32xf32>) {
    %n = mt.rms_norm %x, %g {eps = 1.0e-5 : f64} : (tensor<1x8x16xf32>, tensor<16xf32>) -> tensor<1x8x16xf32>
    %l = mt.linear %n, %w : (tensor<1x8x16xf32>, tensor<32x16xf32>) -> tensor<1x8x32xf32>
    mt.yield %l : tensor<1x8x32xf32>
  }
  mt.model @main(%tokens: tensor<1x8xi32>, %targets: tensor<1x8xi32>) -> (tensor<f32>) {
    %h0 = mt.apply @embedding(%tokens) params(@wte) {vocab_params = array<i64: 0>, vocab_pieces = array<i64: 0, 16, 32>} : (tensor<1x8xi32>) -> tensor<1x8x16xf32>
    %h1 = mt.apply @layer(%h0) layer(0) params(@l0.w) : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    %lg = mt.apply @head(%h1) params(@ln, @lm) {vocab_params = array<i64: 1>, vocab_pieces = array<i64: 0, 16, 32>} : (tensor<1x8x16xf32>) -> tensor<1x8x32xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<1x8x32xf32>, tensor<1x8xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}
