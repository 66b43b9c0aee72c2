// RUN: megatrain-opt %s -split-input-file --mt-partition | FileCheck %s
// RUN: megatrain-opt %s -split-input-file --mt-partition="min-unit-bytes=1100" | FileCheck %s --check-prefix=MERGE
// RUN: not megatrain-opt %s -split-input-file --mt-partition="gpu-mem-limit=4194304" 2>&1 | FileCheck %s --check-prefix=BUDGET

// One unit per application by default: the embedding, each layer, the head
// (which lists its tied weight like any other param).
// CHECK-LABEL: mt.model @main
// CHECK: mt.unit @u0 kind "embedding" applies [0] params [@wte]
// CHECK-NEXT: mt.unit @u1 kind "layer" applies [1] params [@l0.ln, @l0.wq]
// CHECK-NEXT: mt.unit @u2 kind "layer" applies [2] params [@l1.ln, @l1.wq]
// CHECK-NEXT: mt.unit @u3 kind "head" applies [3] params [@norm, @lm_head]
// A layer is 272 params, 544 bf16 bytes: two fit under 1100 bytes and merge;
// the embedding and the head never merge with layers.
// MERGE-LABEL: mt.model @main
// MERGE: mt.unit @u0 kind "embedding" applies [0] params [@wte]
// MERGE-NEXT: mt.unit @u1 kind "layer" applies [1, 2] params [@l0.ln, @l0.wq, @l1.ln, @l1.wq]
// MERGE-NEXT: mt.unit @u2 kind "head" applies [3] params [@norm, @lm_head]
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

// A layer of 1M params needs 6 MiB resident (2 B weights + 4 B gradients
// per param): over a 4 MiB budget it is an error naming the unit.
// BUDGET: error: unit @u1 (layer, applications 1..1) needs 6 MiB of weight and gradient slots alone, over the 4 MiB budget
// CHECK-LABEL: mt.model @main
// CHECK: mt.unit @u1 kind "layer" applies [1] params [@l0.w]
module {
  mt.param @wte : tensor<32x1024xf32>
  mt.param @l0.w : tensor<1024x1024xf32>
  mt.param @w : tensor<1024x32xf32>
  mt.template @embedding kind "embedding" (%ids: tensor<1x8xi32>) params (%t: tensor<32x1024xf32>) -> (tensor<1x8x1024xf32>) {
    %h = mt.embed %ids, %t : (tensor<1x8xi32>, tensor<32x1024xf32>) -> tensor<1x8x1024xf32>
    mt.yield %h : tensor<1x8x1024xf32>
  }
  mt.template @layer kind "layer" (%x: tensor<1x8x1024xf32>) params (%w: tensor<1024x1024xf32>) -> (tensor<1x8x1024xf32>) {
    %y = mt.linear %x, %w : (tensor<1x8x1024xf32>, tensor<1024x1024xf32>) -> tensor<1x8x1024xf32>
    mt.yield %y : tensor<1x8x1024xf32>
  }
  mt.template @head kind "head" (%x: tensor<1x8x1024xf32>) params (%w: tensor<1024x32xf32>) -> (tensor<1x8x32xf32>) {
    %l = mt.linear %x, %w {w_layout = "in_out"} : (tensor<1x8x1024xf32>, tensor<1024x32xf32>) -> tensor<1x8x32xf32>
    mt.yield %l : tensor<1x8x32xf32>
  }
  mt.model @main(%tokens: tensor<1x8xi32>, %targets: tensor<1x8xi32>) -> (tensor<f32>) {
    %h0 = mt.apply @embedding(%tokens) params(@wte) : (tensor<1x8xi32>) -> tensor<1x8x1024xf32>
    %h1 = mt.apply @layer(%h0) layer(0) params(@l0.w) : (tensor<1x8x1024xf32>) -> tensor<1x8x1024xf32>
    %lg = mt.apply @head(%h1) params(@w) : (tensor<1x8x1024xf32>) -> tensor<1x8x32xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<1x8x32xf32>, tensor<1x8xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}

// -----

// An embedding and an LM head in vocabulary pieces (mt-split-vocab's
// vocab_pieces): a unit per piece. The embedding's pieces hold ranges of
// the table's rows; the head's first piece also holds the norm whole, and
// as the head stores its weight [hidden, vocab] (in_out) its pieces hold
// ranges of columns: [kind, begin, elements] per param.
// CHECK-LABEL: mt.model @main
// CHECK: mt.unit @u0 kind "embedding" applies [0] params [@wte] {parts = array<i64: 1, 0, 256>, vocab_rows = array<i64: 0, 16>}
// CHECK: mt.unit @u1 kind "embedding" applies [0] params [@wte] {parts = array<i64: 1, 256, 256>, vocab_rows = array<i64: 16, 32>}
// CHECK: mt.unit @u2 kind "layer" applies [1] params [@l0.w]
// CHECK: mt.unit @u3 kind "head" applies [2] params [@ln, @w] {parts = array<i64: 0, 0, 16, 2, 0, 256>, vocab_rows = array<i64: 0, 16>}
// CHECK: mt.unit @u4 kind "head" applies [2] params [@w] {parts = array<i64: 2, 16, 256>, vocab_rows = array<i64: 16, 32>}
module {
  mt.param @wte : tensor<32x16xf32>
  mt.param @l0.w : tensor<16x16xf32>
  mt.param @ln : tensor<16xf32>
  mt.param @w : tensor<16x32xf32>
  mt.template @embedding kind "embedding" (%ids: tensor<1x8xi32>) params (%t: tensor<32x16xf32>) -> (tensor<1x8x16xf32>) {
    %h = mt.embed %ids, %t : (tensor<1x8xi32>, tensor<32x16xf32>) -> tensor<1x8x16xf32>
    mt.yield %h : tensor<1x8x16xf32>
  }
  mt.template @layer kind "layer" (%x: tensor<1x8x16xf32>) params (%w: tensor<16x16xf32>) -> (tensor<1x8x16xf32>) {
    %y = mt.linear %x, %w : (tensor<1x8x16xf32>, tensor<16x16xf32>) -> tensor<1x8x16xf32>
    mt.yield %y : tensor<1x8x16xf32>
  }
  mt.template @head kind "head" (%x: tensor<1x8x16xf32>) params (%g: tensor<16xf32>, %w: tensor<16x32xf32>) -> (tensor<1x8x32xf32>) {
    %n = mt.rms_norm %x, %g {eps = 1.0e-5 : f64} : (tensor<1x8x16xf32>, tensor<16xf32>) -> tensor<1x8x16xf32>
    %l = mt.linear %n, %w {w_layout = "in_out"} : (tensor<1x8x16xf32>, tensor<16x32xf32>) -> tensor<1x8x32xf32>
    mt.yield %l : tensor<1x8x32xf32>
  }
  mt.model @main(%tokens: tensor<1x8xi32>, %targets: tensor<1x8xi32>) -> (tensor<f32>) {
    %h0 = mt.apply @embedding(%tokens) params(@wte) {vocab_params = array<i64: 0>, vocab_pieces = array<i64: 0, 16, 32>} : (tensor<1x8xi32>) -> tensor<1x8x16xf32>
    %h1 = mt.apply @layer(%h0) layer(0) params(@l0.w) : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
    %lg = mt.apply @head(%h1) params(@ln, @w) {vocab_params = array<i64: 1>, vocab_pieces = array<i64: 0, 16, 32>} : (tensor<1x8x16xf32>) -> tensor<1x8x32xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<1x8x32xf32>, tensor<1x8xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}
