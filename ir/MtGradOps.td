//===- MtGradOps.td - backward primitives (VJPs) of mt ----------*- tablegen -*-===//
//
// One backward op per primitive that needs one, produced by
// mt-derive-backward and executed by the primitive's backward kernel.
// Primitives whose VJP is another primitive (scale, reshape, transpose) reuse
// their forward op. Each op takes the output gradient first, then the
// forward inputs it needs (backward kernels recompute statistics), and
// returns one gradient per differentiable input, in operand order.
//
//===----------------------------------------------------------------------===//

#ifndef MT_GRAD_OPS_TD
#define MT_GRAD_OPS_TD

include "ir/MtDialect.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Mt_GradTensor : RankedTensorOf<[F32]>;

class Mt_GradOp<string mnemonic, list<Trait> traits = []>
    : Mt_Op<mnemonic, !listconcat([Pure], traits)> {
  let hasVerifier = 1;
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Mt_LinearGradOp : Mt_GradOp<"linear_grad"> {
  let summary = "dx, dw (and db) of mt.linear";
  let description = [{
    ```mlir
    %dx, %dw = mt.linear_grad %dy, %x, %w : (tensor<2x16x128xf32>, tensor<2x16x64xf32>, tensor<128x64xf32>) -> (tensor<2x16x64xf32>, tensor<128x64xf32>)
    ```
  }];
  let arguments = (ins Mt_GradTensor:$dy, Mt_GradTensor:$x, Mt_GradTensor:$w,
                       UnitAttr:$has_bias,
                       DefaultValuedStrAttr<StrAttr, "out_in">:$w_layout);
  let results = (outs Mt_GradTensor:$dx, Mt_GradTensor:$dw,
                      Optional<Mt_GradTensor>:$db);
}

def Mt_RmsNormGradOp : Mt_GradOp<"rms_norm_grad"> {
  let summary = "dx (and dw) of mt.rms_norm";
  let description = [{
    ```mlir
    %dx, %dw = mt.rms_norm_grad %dy, %x, %w {eps = 1.0e-06 : f64} : (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>)
    ```
  }];
  let arguments = (ins Mt_GradTensor:$dy, Mt_GradTensor:$x,
                       Optional<Mt_GradTensor>:$weight, F64Attr:$eps);
  let results = (outs Variadic<Mt_GradTensor>:$grads);
}

def Mt_LayerNormGradOp : Mt_GradOp<"layer_norm_grad"> {
  let summary = "dx (and dw, db) of mt.layer_norm";
  let description = [{
    Results: dx, then dw if a weight is given, then db if `has_bias`.

    ```mlir
    %dx, %dw, %db = mt.layer_norm_grad %dy, %x, %w {eps = 1.0e-05 : f64, has_bias} : (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>)
    ```
  }];
  let arguments = (ins Mt_GradTensor:$dy, Mt_GradTensor:$x,
                       Optional<Mt_GradTensor>:$weight, F64Attr:$eps,
                       UnitAttr:$has_bias);
  let results = (outs Variadic<Mt_GradTensor>:$grads);
}

def Mt_RopeGradOp : Mt_GradOp<"rope_grad"> {
  let summary = "dx of mt.rope (the rotation transposed)";
  let description = [{
    ```mlir
    %dx = mt.rope_grad %dy, %cos, %sin {rotary_dim = 16 : i64, seq_axis = 2 : i64} : (tensor<2x4x16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<2x4x16x16xf32>
    ```
  }];
  let arguments = (ins Mt_GradTensor:$dy, Mt_GradTensor:$cos, Mt_GradTensor:$sin,
                       I64Attr:$rotary_dim, I64Attr:$seq_axis,
                       DefaultValuedStrAttr<StrAttr, "half">:$rotation);
  let results = (outs Mt_GradTensor:$dx);
}

def Mt_AttentionDeltaOp : Mt_GradOp<"attention_delta"> {
  let summary = "δ = dy · y per query row, for mt.attention_grad";
  let description = [{
    The row term the softmax's backward subtracts, Σ_j p_ij (dy_i · v_j),
    from the forward's output y: dy and y are [B, H, S, D] (or [B, S, H, D]
    under `layout = "bshd"`), δ is [B, H, S].
    It is kept in f32 wherever it lives (dp − δ cancels), and it is small,
    so y need not be held until attention_grad.

    ```mlir
    %delta = mt.attention_delta %dy, %y : (tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>) -> tensor<2x4x16xf32>
    ```
  }];
  let arguments = (ins Mt_GradTensor:$dy, Mt_GradTensor:$y,
                       DefaultValuedStrAttr<StrAttr, "bhsd">:$layout);
  let results = (outs Mt_GradTensor:$delta);
}

def Mt_AttentionGradOp : Mt_GradOp<"attention_grad"> {
  let summary = "dq, dk, dv (and dsinks) of mt.attention, recomputing the scores";
  let description = [{
    `y` is the forward's output, `delta` mt.attention_delta's δ of each
    query row (from `y`), `lse` the forward's log-sum-exp of each
    (mt.attention's second result): each weight is exp(score − lse) again.
    A backend reads δ or y, whichever its kernel takes (cuDNN's finds δ
    from y itself). With `sinks`, the fourth result is their gradient.
    `layout` is the forward's (mt.attention).

    ```mlir
    %dq, %dk, %dv = mt.attention_grad %dy, %q, %k, %v, %y, %delta, %lse {scale = 0.25 : f64} : (tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>, tensor<2x2x16x16xf32>, tensor<2x2x16x16xf32>, tensor<2x4x16x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> (tensor<2x4x16x16xf32>, tensor<2x2x16x16xf32>, tensor<2x2x16x16xf32>)
    ```
  }];
  let arguments = (ins Mt_GradTensor:$dy, Mt_GradTensor:$q, Mt_GradTensor:$k,
                       Mt_GradTensor:$v, Mt_GradTensor:$y,
                       Mt_GradTensor:$delta, Mt_GradTensor:$lse,
                       Optional<Mt_GradTensor>:$sinks, F64Attr:$scale,
                       OptionalAttr<DenseF64ArrayAttr>:$alibi_slopes,
                       OptionalAttr<I64Attr>:$window,
                       OptionalAttr<I64Attr>:$chunk,
                       OptionalAttr<F64Attr>:$softcap,
                       DefaultValuedStrAttr<StrAttr, "bhsd">:$layout);
  let results = (outs Mt_GradTensor:$dq, Mt_GradTensor:$dk, Mt_GradTensor:$dv,
                      Optional<Mt_GradTensor>:$dsinks);
}

def Mt_ReluGradOp : Mt_GradOp<"relu_grad"> {
  let summary = "dx of mt.relu: dy where x > 0, else 0";
  let description = [{
    ```mlir
    %dx = mt.relu_grad %dy, %x : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins Mt_GradTensor:$dy, Mt_GradTensor:$x);
  let results = (outs Mt_GradTensor:$dx);
}

def Mt_SigmoidGradOp : Mt_GradOp<"sigmoid_grad"> {
  let summary = "dx of mt.sigmoid: dy · σ(x)(1 − σ(x))";
  let description = [{
    ```mlir
    %dx = mt.sigmoid_grad %dy, %x : (tensor<2x16x1xf32>, tensor<2x16x1xf32>) -> tensor<2x16x1xf32>
    ```
  }];
  let arguments = (ins Mt_GradTensor:$dy, Mt_GradTensor:$x);
  let results = (outs Mt_GradTensor:$dx);
}

def Mt_SoftplusGradOp : Mt_GradOp<"softplus_grad"> {
  let summary = "dx of mt.softplus: dy · σ(x)";
  let description = [{
    ```mlir
    %dx = mt.softplus_grad %dy, %x : (tensor<2x16x4xf32>, tensor<2x16x4xf32>) -> tensor<2x16x4xf32>
    ```
  }];
  let arguments = (ins Mt_GradTensor:$dy, Mt_GradTensor:$x);
  let results = (outs Mt_GradTensor:$dx);
}

def Mt_SiluGradOp : Mt_GradOp<"silu_grad"> {
  let summary = "dx of mt.silu";
  let description = [{
    ```mlir
    %dx = mt.silu_grad %dy, %x : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins Mt_GradTensor:$dy, Mt_GradTensor:$x);
  let results = (outs Mt_GradTensor:$dx);
}

def Mt_GeluGradOp : Mt_GradOp<"gelu_grad"> {
  let summary = "dx of mt.gelu";
  let description = [{
    ```mlir
    %dx = mt.gelu_grad %dy, %x {approximate = "tanh"} : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins Mt_GradTensor:$dy, Mt_GradTensor:$x,
                       DefaultValuedStrAttr<StrAttr, "none">:$approximate);
  let results = (outs Mt_GradTensor:$dx);
}

def Mt_SoftcapGradOp : Mt_GradOp<"softcap_grad"> {
  let summary = "dx of mt.softcap: dy · (1 − tanh²(x / cap))";
  let description = [{
    ```mlir
    %dx = mt.softcap_grad %dy, %x {cap = 30.0 : f64} : (tensor<2x16x256xf32>, tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
    ```
  }];
  let arguments = (ins Mt_GradTensor:$dy, Mt_GradTensor:$x, F64Attr:$cap);
  let results = (outs Mt_GradTensor:$dx);
}

def Mt_MoeGradOp : Mt_GradOp<"moe_grad", [AttrSizedOperandSegments,
                                          AttrSizedResultSegments]> {
  let summary = "dx, drouter, dgate_up, ddown (and the trained biases', router_x's, expert_scale's) of mt.moe";
  let description = [{
    The routing is recomputed from x (or router_x); the gradient of the
    top-k choice is that of the chosen weights (the choice itself is
    piecewise constant, and the frozen selection bias gets none). Each
    trained bias operand, router_x and expert_scale has its gradient among
    the results, in the same order.

    ```mlir
    %dx, %dr, %dgu, %dd = mt.moe_grad %dy, %x, %router, %gate_up, %down {routing = "softmax_renorm", top_k = 2 : i64} : (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<8x64xf32>, tensor<8x256x64xf32>, tensor<8x64x128xf32>) -> (tensor<2x16x64xf32>, tensor<8x64xf32>, tensor<8x256x64xf32>, tensor<8x64x128xf32>)
    ```
  }];
  let arguments = (ins Mt_GradTensor:$dy, Mt_GradTensor:$x,
                       Mt_GradTensor:$router, Mt_GradTensor:$gate_up,
                       Mt_GradTensor:$down, Optional<Mt_GradTensor>:$bias,
                       Optional<Mt_GradTensor>:$router_bias,
                       Optional<Mt_GradTensor>:$gate_up_bias,
                       Optional<Mt_GradTensor>:$down_bias,
                       I64Attr:$top_k,
                       DefaultValuedStrAttr<StrAttr, "softmax">:$routing,
                       DefaultValuedAttr<I64Attr, "1">:$groups,
                       DefaultValuedAttr<I64Attr, "1">:$top_groups,
                       DefaultValuedAttr<F64Attr, "1.0">:$scale,
                       DefaultValuedStrAttr<StrAttr, "out_in">:$w_layout,
                       UnitAttr:$interleaved,
                       DefaultValuedAttr<F64Attr, "1.0">:$alpha,
                       DefaultValuedAttr<F64Attr, "0.0">:$limit,
                       DefaultValuedAttr<F64Attr, "0.0">:$up_shift,
                       UnitAttr:$weigh_inputs,
                       Optional<Mt_GradTensor>:$router_x,
                       Optional<Mt_GradTensor>:$expert_scale,
                       DefaultValuedStrAttr<StrAttr, "silu">:$activation);
  let results = (outs Mt_GradTensor:$dx, Mt_GradTensor:$drouter,
                      Mt_GradTensor:$dgate_up, Mt_GradTensor:$ddown,
                      Optional<Mt_GradTensor>:$drouter_bias,
                      Optional<Mt_GradTensor>:$dgate_up_bias,
                      Optional<Mt_GradTensor>:$ddown_bias,
                      Optional<Mt_GradTensor>:$drouter_x,
                      Optional<Mt_GradTensor>:$dexpert_scale);
}

def Mt_CausalConvGradOp : Mt_GradOp<"causal_conv_grad"> {
  let summary = "dx, dw (and db) of mt.causal_conv";
  let description = [{
    ```mlir
    %dx, %dw = mt.causal_conv_grad %dy, %x, %w : (tensor<2x64x16xf32>, tensor<2x64x16xf32>, tensor<64x1x3xf32>) -> (tensor<2x64x16xf32>, tensor<64x1x3xf32>)
    ```
  }];
  let arguments = (ins Mt_GradTensor:$dy, Mt_GradTensor:$x, Mt_GradTensor:$w,
                       UnitAttr:$has_bias);
  let results = (outs Mt_GradTensor:$dx, Mt_GradTensor:$dw,
                      Optional<Mt_GradTensor>:$db);
}

def Mt_GatedDeltaGradOp : Mt_GradOp<"gated_delta_grad"> {
  let summary = "dq, dk, dv, dg, dbeta of mt.gated_delta";
  let description = [{
    The kernel recomputes the forward's states from checkpoints it keeps
    in kernel scratch.

    ```mlir
    %dq, %dk, %dv, %dg, %dbeta = mt.gated_delta_grad %do, %q, %k, %v, %g, %beta : (tensor<2x16x4x8xf32>, tensor<2x16x2x8xf32>, tensor<2x16x2x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x4xf32>, tensor<2x16x4xf32>) -> (tensor<2x16x2x8xf32>, tensor<2x16x2x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x4xf32>, tensor<2x16x4xf32>)
    ```
  }];
  let arguments = (ins Mt_GradTensor:$dout, Mt_GradTensor:$q,
                       Mt_GradTensor:$k, Mt_GradTensor:$v, Mt_GradTensor:$g,
                       Mt_GradTensor:$beta);
  let results = (outs Mt_GradTensor:$dq, Mt_GradTensor:$dk,
                      Mt_GradTensor:$dv, Mt_GradTensor:$dg,
                      Mt_GradTensor:$dbeta);
}

def Mt_GatedLinearGradOp : Mt_GradOp<"gated_linear_grad"> {
  let summary = "dq, dk, dv, dg, dbeta of mt.gated_linear";
  let description = [{
    As mt.gated_delta_grad, without the delta rule's terms.
  }];
  let arguments = (ins Mt_GradTensor:$dout, Mt_GradTensor:$q,
                       Mt_GradTensor:$k, Mt_GradTensor:$v, Mt_GradTensor:$g,
                       Mt_GradTensor:$beta);
  let results = (outs Mt_GradTensor:$dq, Mt_GradTensor:$dk,
                      Mt_GradTensor:$dv, Mt_GradTensor:$dg,
                      Mt_GradTensor:$dbeta);
}

def Mt_XieluGradOp : Mt_GradOp<"xielu_grad"> {
  let summary = "dx, dalpha_p, dalpha_n of mt.xielu (through the softplus with `softplus`)";
  let description = [{
    ```mlir
    %dx, %dap, %dan = mt.xielu_grad %dy, %x, %ap, %an {beta = 5.0e-01 : f64, eps = -1.0e-06 : f64} : (tensor<2x16x128xf32>, tensor<2x16x128xf32>, tensor<1xf32>, tensor<1xf32>) -> (tensor<2x16x128xf32>, tensor<1xf32>, tensor<1xf32>)
    ```
  }];
  let arguments = (ins Mt_GradTensor:$dy, Mt_GradTensor:$x,
                       Mt_GradTensor:$alpha_p, Mt_GradTensor:$alpha_n,
                       F64Attr:$beta, F64Attr:$eps, UnitAttr:$softplus);
  let results = (outs Mt_GradTensor:$dx, Mt_GradTensor:$dalpha_p,
                      Mt_GradTensor:$dalpha_n);
}

def Mt_SwigluGradOp : Mt_GradOp<"swiglu_grad"> {
  let summary = "dgate, dup of mt.swiglu";
  let description = [{
    ```mlir
    %dg, %du = mt.swiglu_grad %dy, %g, %u : (tensor<2x16x128xf32>, tensor<2x16x128xf32>, tensor<2x16x128xf32>) -> (tensor<2x16x128xf32>, tensor<2x16x128xf32>)
    ```
  }];
  let arguments = (ins Mt_GradTensor:$dy, Mt_GradTensor:$gate, Mt_GradTensor:$up);
  let results = (outs Mt_GradTensor:$dgate, Mt_GradTensor:$dup);
}

def Mt_MulGradOp : Mt_GradOp<"mul_grad"> {
  let summary = "dlhs, drhs of mt.mul, each summed over its broadcast dims";
  let description = [{
    ```mlir
    %da, %db = mt.mul_grad %dy, %a, %b : (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>)
    ```
  }];
  let arguments = (ins Mt_GradTensor:$dy, Mt_GradTensor:$lhs, Mt_GradTensor:$rhs);
  let results = (outs Mt_GradTensor:$dlhs, Mt_GradTensor:$drhs);
}

def Mt_SumToOp : Mt_GradOp<"sum_to"> {
  let summary = "sums a broadcast gradient back to an operand's shape";
  let description = [{
    The VJP of NumPy broadcasting: sums `dy` over the dims the operand was
    broadcast along (leading dims, and dims of size 1 in the result type).

    ```mlir
    %db = mt.sum_to %dy : (tensor<2x16x64xf32>) -> tensor<16x64xf32>
    ```
  }];
  let arguments = (ins Mt_GradTensor:$dy);
  let results = (outs Mt_GradTensor:$y);
}

def Mt_EmbedGradOp : Mt_GradOp<"embed_grad"> {
  let summary = "dtable of mt.embed: dy rows scattered-added by token id";
  let description = [{
    ```mlir
    %dt = mt.embed_grad %dy, %ids : (tensor<2x16x64xf32>, tensor<2x16xi32>) -> tensor<256x64xf32>
    ```
  }];
  let arguments = (ins Mt_GradTensor:$dy, RankedTensorOf<[I32, I64]>:$ids);
  let results = (outs Mt_GradTensor:$dtable);
}

def Mt_PositionEmbedGradOp : Mt_GradOp<"position_embed_grad"> {
  let summary = "dtable of mt.position_embed";
  let description = [{
    ```mlir
    %dt = mt.position_embed_grad %dy {offset = 0 : i64} : (tensor<16x64xf32>) -> tensor<64x64xf32>
    ```
  }];
  let arguments = (ins Mt_GradTensor:$dy, DefaultValuedAttr<I64Attr, "0">:$offset);
  let results = (outs Mt_GradTensor:$dtable);
}

def Mt_CrossEntropyGradOp : Mt_GradOp<"cross_entropy_grad"> {
  let summary = "dlogits of the summed cross-entropy, scaled by dloss";
  let description = [{
    `dloss` is d(step loss)/d(sum of per-token losses): 1 / (targets in the
    step) for a mean loss, known only when the trainer runs.

    ```mlir
    %dl = mt.cross_entropy_grad %logits, %targets, %dloss : (tensor<2x16x256xf32>, tensor<2x16xi32>, tensor<f32>) -> tensor<2x16x256xf32>
    ```
  }];
  let arguments = (ins Mt_GradTensor:$logits, RankedTensorOf<[I32, I64]>:$targets,
                       0DTensorOf<[F32]>:$dloss);
  let results = (outs Mt_GradTensor:$dlogits);
}

def Mt_SliceGradOp : Mt_GradOp<"slice_grad"> {
  let summary = "dx of mt.slice: dy placed at the slice, zeros elsewhere";
  let description = [{
    ```mlir
    %dx = mt.slice_grad %dy {axis = 2 : i64, start = 64 : i64} : (tensor<2x16x64xf32>) -> tensor<2x16x192xf32>
    ```
  }];
  let arguments = (ins Mt_GradTensor:$dy, I64Attr:$axis, I64Attr:$start);
  let results = (outs Mt_GradTensor:$dx);
}

#endif // MT_GRAD_OPS_TD
