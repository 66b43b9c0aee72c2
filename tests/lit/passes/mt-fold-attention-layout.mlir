// RUN: megatrain-opt %s --mt-fold-attention-layout | FileCheck %s
// RUN: megatrain-opt %s --mt-fold-attention-layout --mt-derive-backward | FileCheck %s --check-prefix=BWD
// Other forms, and the attentions it leaves: mt-fold-attention-layout-forms.mlir.

// A Llama layer's attention: q and k through rope after the swap of heads
// and positions, v swapped alone, the output swapped back. The attention
// takes the projections' [B, S, heads, D] values, rope runs along their
// dim 1, and no transpose is left, in the forward or in its backward.
// CHECK-LABEL: mt.template @layer kind "layer"
// CHECK-NOT:   mt.transpose
// CHECK:       [[QR:%.+]] = mt.reshape %{{.+}} : (tensor<2x8x32xf32>) -> tensor<2x8x4x8xf32>
// CHECK-NEXT:  [[Q:%.+]] = mt.rope [[QR]], %arg5, %arg6 {rotary_dim = 8 : i64, seq_axis = 1 : i64} : (tensor<2x8x4x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<2x8x4x8xf32>
// CHECK:       [[KR:%.+]] = mt.reshape %{{.+}} : (tensor<2x8x16xf32>) -> tensor<2x8x2x8xf32>
// CHECK-NEXT:  [[K:%.+]] = mt.rope [[KR]], %arg5, %arg6 {rotary_dim = 8 : i64, seq_axis = 1 : i64}
// CHECK:       [[V:%.+]] = mt.reshape %{{.+}} : (tensor<2x8x16xf32>) -> tensor<2x8x2x8xf32>
// CHECK-NEXT:  [[A:%.+]] = mt.attention [[Q]], [[K]], [[V]] {layout = "bshd", scale = 3.500000e-01 : f64, window = 4 : i64} : (tensor<2x8x4x8xf32>, tensor<2x8x2x8xf32>, tensor<2x8x2x8xf32>) -> tensor<2x8x4x8xf32>
// CHECK-NEXT:  mt.reshape [[A]] : (tensor<2x8x4x8xf32>) -> tensor<2x8x32xf32>
// CHECK-NOT:   mt.transpose
// CHECK:       mt.yield

// BWD-LABEL:   mt.template @layer.bwd kind "layer"
// BWD-NOT:     mt.transpose
// BWD:         %{{.+}}, [[LSE:%.+]] = mt.attention {{.+}} {layout = "bshd", scale = 3.500000e-01 : f64, window = 4 : i64} : (tensor<2x8x4x8xf32>, tensor<2x8x2x8xf32>, tensor<2x8x2x8xf32>) -> (tensor<2x8x4x8xf32>, tensor<2x4x8xf32>)
// BWD:         mt.attention_delta {{.+}} {layout = "bshd"} : (tensor<2x8x4x8xf32>, tensor<2x8x4x8xf32>) -> tensor<2x4x8xf32>
// BWD:         mt.attention_grad {{.+}}, [[LSE]] {layout = "bshd", scale = 3.500000e-01 : f64, window = 4 : i64} : ({{.+}}) -> (tensor<2x8x4x8xf32>, tensor<2x8x2x8xf32>, tensor<2x8x2x8xf32>)
// BWD:         mt.rope_grad {{.+}} {rotary_dim = 8 : i64, seq_axis = 1 : i64} : (tensor<2x8x2x8xf32>
// BWD:         mt.rope_grad {{.+}} {rotary_dim = 8 : i64, seq_axis = 1 : i64} : (tensor<2x8x4x8xf32>
// BWD-NOT:     mt.transpose
// BWD:         mt.yield
module {
  mt.param @wte : tensor<32x16xf32>
  mt.param @wq : tensor<16x32xf32>
  mt.param @wk : tensor<16x16xf32>
  mt.param @wv : tensor<16x16xf32>
  mt.param @wo : tensor<32x16xf32>
  mt.param @cos {frozen} : tensor<8x8xf32>
  mt.param @sin {frozen} : tensor<8x8xf32>
  mt.template @layer kind "layer" (%x: tensor<2x8x16xf32>) params (%wq: tensor<16x32xf32>, %wk: tensor<16x16xf32>, %wv: tensor<16x16xf32>, %wo: tensor<32x16xf32>, %cos: tensor<8x8xf32>, %sin: tensor<8x8xf32>) -> (tensor<2x8x16xf32>) {
    %q = mt.linear %x, %wq {w_layout = "in_out"} : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
    %qr = mt.reshape %q : (tensor<2x8x32xf32>) -> tensor<2x8x4x8xf32>
    %qt = mt.transpose %qr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x8xf32>) -> tensor<2x4x8x8xf32>
    %qe = mt.rope %qt, %cos, %sin {rotary_dim = 8 : i64, seq_axis = 2 : i64} : (tensor<2x4x8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8x8xf32>
    %k = mt.linear %x, %wk {w_layout = "in_out"} : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %kr = mt.reshape %k : (tensor<2x8x16xf32>) -> tensor<2x8x2x8xf32>
    %kt = mt.transpose %kr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x8xf32>) -> tensor<2x2x8x8xf32>
    %ke = mt.rope %kt, %cos, %sin {rotary_dim = 8 : i64, seq_axis = 2 : i64} : (tensor<2x2x8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<2x2x8x8xf32>
    %v = mt.linear %x, %wv {w_layout = "in_out"} : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %vr = mt.reshape %v : (tensor<2x8x16xf32>) -> tensor<2x8x2x8xf32>
    %vt = mt.transpose %vr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x8xf32>) -> tensor<2x2x8x8xf32>
    %a = mt.attention %qe, %ke, %vt {scale = 0.35 : f64, window = 4 : i64} : (tensor<2x4x8x8xf32>, tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32>) -> tensor<2x4x8x8xf32>
    %b = mt.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x8xf32>) -> tensor<2x8x4x8xf32>
    %c = mt.reshape %b : (tensor<2x8x4x8xf32>) -> tensor<2x8x32xf32>
    %o = mt.linear %c, %wo {w_layout = "in_out"} : (tensor<2x8x32xf32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
    mt.yield %o : tensor<2x8x16xf32>
  }
  mt.template @embedding kind "embedding" (%ids: tensor<2x8xi32>) params (%t: tensor<32x16xf32>) -> (tensor<2x8x16xf32>) {
    %h = mt.embed %ids, %t : (tensor<2x8xi32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
    mt.yield %h : tensor<2x8x16xf32>
  }
  mt.template @head kind "head" (%x: tensor<2x8x16xf32>) params (%w: tensor<32x16xf32>) -> (tensor<2x8x32xf32>) {
    %l = mt.linear %x, %w : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
    mt.yield %l : tensor<2x8x32xf32>
  }
  mt.model @main(%tokens: tensor<2x8xi32>, %targets: tensor<2x8xi32>) -> (tensor<f32>) {
    %h0 = mt.apply @embedding(%tokens) params(@wte) : (tensor<2x8xi32>) -> tensor<2x8x16xf32>
    %h1 = mt.apply @layer(%h0) layer(0) params(@wq, @wk, @wv, @wo, @cos, @sin) : (tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
    %lg = mt.apply @head(%h1) params(@wte) : (tensor<2x8x16xf32>) -> tensor<2x8x32xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<2x8x32xf32>, tensor<2x8xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}
