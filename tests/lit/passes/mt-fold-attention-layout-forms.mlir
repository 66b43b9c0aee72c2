// RUN: megatrain-opt %s -split-input-file --mt-fold-attention-layout | FileCheck %s

// mt-fold-attention-layout beyond a Llama layer's attention
// (mt-fold-attention-layout.mlir): one value as q, k and v, and the
// attentions it leaves as they are.

// One swapped value as q, k and v (and sinks beside them): folded, the
// sinks kept.
// CHECK-LABEL: mt.template @shared kind "layer"
// CHECK-NEXT:  [[R:%.+]] = mt.reshape %arg0
// CHECK-NEXT:  [[A:%.+]] = mt.attention [[R]], [[R]], [[R]], %arg1 {layout = "bshd", scale = 5.000000e-01 : f64} : (tensor<1x8x2x8xf32>, tensor<1x8x2x8xf32>, tensor<1x8x2x8xf32>, tensor<2xf32>) -> tensor<1x8x2x8xf32>
// CHECK-NEXT:  mt.reshape [[A]]
// CHECK-NEXT:  mt.yield
module {
  mt.param @s : tensor<2xf32>
  mt.template @shared kind "layer" (%x: tensor<1x8x16xf32>) params (%s: tensor<2xf32>) -> (tensor<1x8x16xf32>) {
    %r = mt.reshape %x : (tensor<1x8x16xf32>) -> tensor<1x8x2x8xf32>
    %t = mt.transpose %r {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x8xf32>) -> tensor<1x2x8x8xf32>
    %a = mt.attention %t, %t, %t, %s {scale = 0.5 : f64} : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<2xf32>) -> tensor<1x2x8x8xf32>
    %b = mt.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x8x8xf32>) -> tensor<1x8x2x8xf32>
    %c = mt.reshape %b : (tensor<1x8x2x8xf32>) -> tensor<1x8x16xf32>
    mt.yield %c : tensor<1x8x16xf32>
  }
}

// -----

// Left as they are: the output read other than through the swap (here by
// an add beside it); v not a swap of anything; a rope that something else
// reads too.
// CHECK-LABEL: mt.template @read_heads_major
// CHECK:       mt.attention %{{.+}} {scale = 5.000000e-01 : f64}
// CHECK-LABEL: mt.template @v_unswapped
// CHECK:       mt.attention %{{.+}} {scale = 5.000000e-01 : f64}
// CHECK-LABEL: mt.template @rope_read_twice
// CHECK:       mt.attention %{{.+}} {scale = 5.000000e-01 : f64}
// CHECK-NOT:   layout
module {
  mt.template @read_heads_major kind "layer" (%x: tensor<1x8x16xf32>) -> (tensor<1x8x16xf32>) {
    %r = mt.reshape %x : (tensor<1x8x16xf32>) -> tensor<1x8x2x8xf32>
    %t = mt.transpose %r {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x8xf32>) -> tensor<1x2x8x8xf32>
    %a = mt.attention %t, %t, %t {scale = 0.5 : f64} : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
    %s = mt.add %a, %t : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
    %b = mt.transpose %s {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x8x8xf32>) -> tensor<1x8x2x8xf32>
    %c = mt.reshape %b : (tensor<1x8x2x8xf32>) -> tensor<1x8x16xf32>
    mt.yield %c : tensor<1x8x16xf32>
  }
  mt.template @v_unswapped kind "layer" (%x: tensor<1x8x16xf32>, %v: tensor<1x2x8x8xf32>) -> (tensor<1x8x16xf32>) {
    %r = mt.reshape %x : (tensor<1x8x16xf32>) -> tensor<1x8x2x8xf32>
    %t = mt.transpose %r {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x8xf32>) -> tensor<1x2x8x8xf32>
    %a = mt.attention %t, %t, %v {scale = 0.5 : f64} : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
    %b = mt.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x8x8xf32>) -> tensor<1x8x2x8xf32>
    %c = mt.reshape %b : (tensor<1x8x2x8xf32>) -> tensor<1x8x16xf32>
    mt.yield %c : tensor<1x8x16xf32>
  }
  mt.template @rope_read_twice kind "layer" (%x: tensor<1x8x16xf32>, %cos: tensor<8x8xf32>, %sin: tensor<8x8xf32>) -> (tensor<1x8x16xf32>, tensor<1x2x8x8xf32>) {
    %r = mt.reshape %x : (tensor<1x8x16xf32>) -> tensor<1x8x2x8xf32>
    %t = mt.transpose %r {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x2x8xf32>) -> tensor<1x2x8x8xf32>
    %e = mt.rope %t, %cos, %sin {rotary_dim = 8 : i64, seq_axis = 2 : i64} : (tensor<1x2x8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8x8xf32>
    %a = mt.attention %e, %e, %t {scale = 0.5 : f64} : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
    %b = mt.transpose %a {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x8x8xf32>) -> tensor<1x8x2x8xf32>
    %c = mt.reshape %b : (tensor<1x8x2x8xf32>) -> tensor<1x8x16xf32>
    mt.yield %c, %e : tensor<1x8x16xf32>, tensor<1x2x8x8xf32>
  }
}
