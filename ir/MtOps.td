//===- MtOps.td - graph- and model-level ops of mt -------------*- tablegen -*-===//

#ifndef MT_OPS_TD
#define MT_OPS_TD

include "ir/MtDialect.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"

def Mt_FloatTensor : RankedTensorOf<[F32]>;
def Mt_IdTensor : RankedTensorOf<[I32, I64]>;

//===----------------------------------------------------------------------===//
// Model level
//===----------------------------------------------------------------------===//

def Mt_ParamOp : Mt_Op<"param", [Symbol]> {
  let summary = "a model parameter, named after its ONNX initializer";
  let description = [{
    Declares one parameter of the model. Its symbol is the ONNX initializer
    name, so gradients and exports can be keyed by it. The tensor type is the
    fp32 master type; `storage` records the ONNX element type when it is not
    f32. A param `tied to` another shares the other's storage (optionally
    transposed) and has no gradient of its own. A `frozen` param is a constant
    the model reads (a RoPE table, say) and is never trained.

    ```mlir
    mt.param @"model.embed_tokens.weight" : tensor<256x64xf32>
    mt.param @"onnx::MatMul_711" tied to @"model.embed_tokens.weight" {transposed} : tensor<64x256xf32>
    mt.param @"rope.cos" {frozen} : tensor<16x16xf32>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<Mt_FloatTensor>:$type,
                       OptionalAttr<FlatSymbolRefAttr>:$tie,
                       UnitAttr:$transposed,
                       UnitAttr:$frozen,
                       OptionalAttr<StrAttr>:$storage);
  let assemblyFormat = [{
    $sym_name (`tied` `to` $tie^)? attr-dict `:` $type
  }];
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
  }];
  let hasVerifier = 1;
}

def Mt_TemplateOp : Mt_Op<"template", [Symbol, IsolatedFromAbove]> {
  let summary = "a stateless layer template: weights are block arguments";
  let description = [{
    A region of primitives computing one streaming block (the embedding, one
    decoder layer, the head). The first `num_inputs` block arguments are
    activations; the rest are the weights, bound per application by
    `mt.apply`. `kind` is `embedding`, `layer`, `head` or `graph` (a whole
    graph, not split into blocks). A backward template (made by
    mt-derive-backward) names its forward template in `grad_of`, and lists
    in `trained_params` the params whose gradients are its last results.
    `row_chunk` (set by mt-chunk-loss and mt-chunk-mlp) runs the body ops
    [begin, end) that `row_ops` names (all of them without it) over the
    launch's token rows in chunks of that many rows, so that their inner
    values (logits, MLP activations) are never held for more than one
    chunk. A template made by
    mt-split-vocab for one vocabulary piece of template T names T in
    `piece_of`.

    ```mlir
    mt.template @layer0 kind "layer" (%x: tensor<2x16x64xf32>)
        params (%w: tensor<64xf32>) -> (tensor<2x16x64xf32>) {
      %y = mt.rms_norm %x, %w {eps = 1.0e-05 : f64} : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
      mt.yield %y : tensor<2x16x64xf32>
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       StrAttr:$kind,
                       TypeAttrOf<FunctionType>:$function_type,
                       I64Attr:$num_inputs,
                       OptionalAttr<FlatSymbolRefAttr>:$grad_of,
                       OptionalAttr<DenseI64ArrayAttr>:$trained_params,
                       OptionalAttr<I64Attr>:$row_chunk,
                       OptionalAttr<DenseI64ArrayAttr>:$row_ops,
                       OptionalAttr<FlatSymbolRefAttr>:$piece_of);
  let regions = (region SizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::Block &getBlock() { return getBody().front(); }
    unsigned getNumParams() {
      return getFunctionType().getNumInputs() - getNumInputs();
    }
    ::mlir::BlockArgument getParamArg(unsigned i) {
      return getBlock().getArgument(getNumInputs() + i);
    }
  }];
}

def Mt_YieldOp : Mt_Op<"yield", [Pure, Terminator, HasParent<"TemplateOp">]> {
  let summary = "returns a template's results";
  let description = [{
    ```mlir
    mt.yield %y : tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$results);
  let assemblyFormat = "($results^ `:` type($results))? attr-dict";
  let hasVerifier = 1;
}

def Mt_ModelOp : Mt_Op<"model", [Symbol, IsolatedFromAbove]> {
  let summary = "the training step's forward: template applications and the loss";
  let description = [{
    Takes the token ids and the targets of one step and returns the mean
    next-token loss. Its body holds only `mt.apply`, `mt.cross_entropy` and
    `mt.return`.

    ```mlir
    mt.model @main(%tokens: tensor<2x16xi32>, %targets: tensor<2x16xi32>) -> tensor<f32> {
      %h = mt.apply @embedding(%tokens) params(@wte) : (tensor<2x16xi32>) -> tensor<2x16x64xf32>
      ...
      mt.return %loss : tensor<f32>
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<FunctionType>:$function_type);
  let regions = (region SizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    ::mlir::Block &getBlock() { return getBody().front(); }
  }];
  let hasVerifier = 1;
}

def Mt_ReturnOp : Mt_Op<"return", [Pure, Terminator, HasParent<"ModelOp">]> {
  let summary = "returns the model's results";
  let description = [{
    ```mlir
    mt.return %loss : tensor<f32>
    ```
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$results);
  let assemblyFormat = "($results^ `:` type($results))? attr-dict";
}

def Mt_ApplyOp : Mt_Op<"apply", [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "applies a template to activations with one layer's params bound";
  let description = [{
    Binds the params named in `params` to the template's weight arguments, in
    order, and applies it. `layer` is the decoder layer index, absent for the
    embedding and the head. `vocab_pieces` (set by mt-split-vocab) are the
    vocabulary row bounds [0, b1, ..., V] of an LM head or embedding that
    runs in pieces, one unit each, and `vocab_params` the positions in
    `params` of the [V, ...] weights cut by rows (a head's first piece also
    holds its other params).

    ```mlir
    %y = mt.apply @decoder(%x) layer(3) params(@"l3.ln", @"l3.wq") : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$callee,
                       Variadic<AnyRankedTensor>:$inputs,
                       OptionalAttr<I64Attr>:$layer,
                       TypedArrayAttrBase<FlatSymbolRefAttr, "param symbols">:$params,
                       OptionalAttr<DenseI64ArrayAttr>:$vocab_pieces,
                       OptionalAttr<DenseI64ArrayAttr>:$vocab_params);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let assemblyFormat = [{
    $callee `(` $inputs `)` (`layer` `(` $layer^ `)`)? `params` custom<SymbolList>($params)
      attr-dict `:` functional-type($inputs, $results)
  }];
}

//===----------------------------------------------------------------------===//
// Graph level: primitives. Each has a forward and a backward kernel in the
// runtime and a VJP rule in mt-derive-backward. docs/primitives.md gives the
// exact math.
//===----------------------------------------------------------------------===//

class Mt_PrimOp<string mnemonic, list<Trait> traits = []>
    : Mt_Op<mnemonic, !listconcat([Pure], traits)> {
  let hasVerifier = 1;
}

def Mt_LinearOp : Mt_PrimOp<"linear"> {
  let summary = "y = x·Wᵀ + b (w_layout out_in) or y = x·W + b (in_out)";
  let description = [{
    Contracts the last dim of `x` with the weight. `w_layout = "out_in"` (the
    default, PyTorch's nn.Linear) takes W as [N, K]; `"in_out"` (folded
    transposes, Conv1D) takes W as [K, N]. The bias is optional.

    ```mlir
    %y = mt.linear %x, %w : (tensor<2x16x64xf32>, tensor<128x64xf32>) -> tensor<2x16x128xf32>
    %z = mt.linear %x, %w2, %b {w_layout = "in_out"} : (tensor<2x16x64xf32>, tensor<64x32xf32>, tensor<32xf32>) -> tensor<2x16x32xf32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$x, Mt_FloatTensor:$w,
                       Optional<Mt_FloatTensor>:$bias,
                       DefaultValuedStrAttr<StrAttr, "out_in">:$w_layout);
  let results = (outs Mt_FloatTensor:$y);
  let assemblyFormat = [{
    $x `,` $w (`,` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    bool isInOut() { return getWLayout() == "in_out"; }
  }];
}

def Mt_RmsNormOp : Mt_PrimOp<"rms_norm"> {
  let summary = "y = x / sqrt(mean(x²) + eps) · w over the last dim";
  let description = [{
    ```mlir
    %y = mt.rms_norm %x, %w {eps = 1.0e-06 : f64} : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$x, Optional<Mt_FloatTensor>:$weight,
                       F64Attr:$eps);
  let results = (outs Mt_FloatTensor:$y);
  let assemblyFormat = [{
    $x (`,` $weight^)? attr-dict `:` functional-type(operands, results)
  }];
}

def Mt_LayerNormOp : Mt_PrimOp<"layer_norm", [AttrSizedOperandSegments]> {
  let summary = "y = (x - mean) / sqrt(var + eps) · w + b over the last dim";
  let description = [{
    Biased variance, as in PyTorch. Weight and bias are optional.

    ```mlir
    %y = mt.layer_norm %x, %w, %b {eps = 1.0e-05 : f64} : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$x, Optional<Mt_FloatTensor>:$weight,
                       Optional<Mt_FloatTensor>:$bias, F64Attr:$eps);
  let results = (outs Mt_FloatTensor:$y);
  let assemblyFormat = [{
    $x (`,` $weight^)? (`,` `bias` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
}

def Mt_RopeOp : Mt_PrimOp<"rope"> {
  let summary = "rotary position embedding, rotate-half form, full or partial";
  let description = [{
    `x` is [B, H, S, D] (`seq_axis = 2`) or [B, S, H, D] (`seq_axis = 1`);
    `cos` and `sin` are [S, R] with R = `rotary_dim` ≤ D. y[..., :R] =
    x[..., :R]·cos + rot(x[..., :R])·sin and y[..., R:] = x[..., R:], where
    with `rotation = "half"` (the default) and h = R/2, rot(x) =
    cat(-x[..., h:R], x[..., :h]); with `"interleaved"` (GPT-J) the pairs
    (x[2m], x[2m+1]) rotate: rot(x)[2m] = -x[2m+1], rot(x)[2m+1] = x[2m].

    ```mlir
    %y = mt.rope %x, %cos, %sin {rotary_dim = 16 : i64, seq_axis = 2 : i64} : (tensor<2x4x16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<2x4x16x16xf32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$x, Mt_FloatTensor:$cos,
                       Mt_FloatTensor:$sin, I64Attr:$rotary_dim, I64Attr:$seq_axis,
                       DefaultValuedStrAttr<StrAttr, "half">:$rotation);
  let results = (outs Mt_FloatTensor:$y);
  let assemblyFormat = "$x `,` $cos `,` $sin attr-dict `:` functional-type(operands, results)";
}

def Mt_AttentionOp : Mt_PrimOp<"attention"> {
  let summary = "causal scaled dot-product attention with grouped KV heads";
  let description = [{
    q is [B, H, S, D]; k and v are [B, Hkv, S, D] with H a multiple of Hkv
    (query head h reads KV head h / (H / Hkv)); with `layout = "bshd"` each
    (and y) has its heads and positions swapped, [B, S, H, D], as the
    projections write them (ir/AttentionLayout.h). y[b, h, i] =
    Σ_{j ≤ i} softmax_j(scale · q_i · k_j + m_h · (j − i)) · v_j, where the
    ALiBi slopes m (one per query head, `alibi_slopes`) are 0 when absent;
    with a sliding `window` W, only keys j > i − W take part; with a
    `chunk` C (Llama 4's chunked attention), only the keys of i's chunk of C
    tokens, j ≥ i − i mod C (both: the later bound). With a
    `softcap` c (Gemma 2), each scaled product s = scale · q_i · k_j enters
    as c · tanh(s / c). With `sinks` (a param of H elements, [H] or
    [1, H, 1, 1]; gpt-oss), head h's softmax has one more logit, sinks[h],
    that weighs no value: the row's weights sum to less than 1.

    The optional second result `lse` (f32, [B, H, S] in either layout) is each query row's
    log-sum-exp, log Σ_j exp(score_ij) (with the sink's logit where there
    is one): mt.attention_grad reads it, so the backward need not find each
    row's softmax again. mt-derive-backward asks for it where the backward
    recomputes the forward; elsewhere nothing computes it.

    ```mlir
    %y = mt.attention %q, %k, %v {scale = 0.25 : f64} : (tensor<2x4x16x16xf32>, tensor<2x2x16x16xf32>, tensor<2x2x16x16xf32>) -> tensor<2x4x16x16xf32>
    %z = mt.attention %q, %k, %v, %sinks {scale = 0.25 : f64} : (tensor<2x4x16x16xf32>, tensor<2x2x16x16xf32>, tensor<2x2x16x16xf32>, tensor<4xf32>) -> tensor<2x4x16x16xf32>
    %u, %lse = mt.attention %q, %k, %v {scale = 0.25 : f64} : (tensor<2x4x16x16xf32>, tensor<2x2x16x16xf32>, tensor<2x2x16x16xf32>) -> (tensor<2x4x16x16xf32>, tensor<2x4x16xf32>)
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$q, Mt_FloatTensor:$k, Mt_FloatTensor:$v,
                       Optional<Mt_FloatTensor>:$sinks,
                       F64Attr:$scale, OptionalAttr<DenseF64ArrayAttr>:$alibi_slopes,
                       OptionalAttr<I64Attr>:$window, OptionalAttr<I64Attr>:$chunk,
                       OptionalAttr<F64Attr>:$softcap,
                       DefaultValuedStrAttr<StrAttr, "bhsd">:$layout);
  let results = (outs Mt_FloatTensor:$y, Optional<Mt_FloatTensor>:$lse);
  let assemblyFormat = "$q `,` $k `,` $v (`,` $sinks^)? attr-dict `:` functional-type(operands, results)";
}

class Mt_UnaryOp<string mnemonic> : Mt_PrimOp<mnemonic> {
  let arguments = (ins Mt_FloatTensor:$x);
  let results = (outs Mt_FloatTensor:$y);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
}

def Mt_ReluOp : Mt_UnaryOp<"relu"> {
  let summary = "y = max(x, 0)";
  let description = [{
    ```mlir
    %y = mt.relu %x : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
}

def Mt_SiluOp : Mt_UnaryOp<"silu"> {
  let summary = "y = x · sigmoid(x)";
  let description = [{
    ```mlir
    %y = mt.silu %x : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
}

def Mt_SoftplusOp : Mt_UnaryOp<"softplus"> {
  let summary = "y = log(1 + exp(x)) (a positive gate: Laguna's attention output)";
  let description = [{
    ```mlir
    %y = mt.softplus %x : (tensor<2x16x4xf32>) -> tensor<2x16x4xf32>
    ```
  }];
}

def Mt_SigmoidOp : Mt_UnaryOp<"sigmoid"> {
  let summary = "y = 1 / (1 + exp(-x)) (a gate: Qwen2-MoE's shared expert)";
  let description = [{
    ```mlir
    %y = mt.sigmoid %x : (tensor<2x16x1xf32>) -> tensor<2x16x1xf32>
    ```
  }];
}

def Mt_ExpOp : Mt_UnaryOp<"exp"> {
  let summary = "y = exp(x) (a weight kept positive: Mamba-2's A = −exp(A_log))";
  let description = [{
    ```mlir
    %y = mt.exp %x : (tensor<4xf32>) -> tensor<4xf32>
    ```
  }];
}

def Mt_GeluOp : Mt_PrimOp<"gelu"> {
  let summary = "GELU, exact (erf) or tanh-approximated";
  let description = [{
    `approximate = "none"`: y = x/2 · (1 + erf(x/√2)); `"tanh"`:
    y = x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³))).

    ```mlir
    %y = mt.gelu %x {approximate = "tanh"} : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$x,
                       DefaultValuedStrAttr<StrAttr, "none">:$approximate);
  let results = (outs Mt_FloatTensor:$y);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
}

def Mt_SoftcapOp : Mt_PrimOp<"softcap"> {
  let summary = "y = cap · tanh(x / cap)";
  let description = [{
    Squashes x smoothly into (−cap, cap); Gemma 2 caps its logits so.

    ```mlir
    %y = mt.softcap %x {cap = 30.0 : f64} : (tensor<2x16x256xf32>) -> tensor<2x16x256xf32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$x, F64Attr:$cap);
  let results = (outs Mt_FloatTensor:$y);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
}

def Mt_MoeOp : Mt_PrimOp<"moe", [AttrSizedOperandSegments]> {
  let summary = "a mixture of gated experts (SwiGLU, GeGLU, gpt-oss's), top-k routing";
  let description = [{
    Per token x [H] (the rows of x [..., H]): p = softmax(router · x) over E
    experts, the k largest p_e (ties to the lower index) weigh their experts
    (`routing = "softmax"`), or those k renormalized to sum to 1
    (`"softmax_renorm"`); expert e computes
    down[e] · (silu(g) ⊙ u), (g; u) = gate_up[e] · x (g the first I rows).
    router [E, H], gate_up [E, 2I, H], down [E, H, I]. Mixtral and
    Qwen3-MoE renormalize, OLMoE does not. With a `bias` [E] (frozen; ERNIE
    4.5's score correction) the k experts are those of the largest p_e +
    bias_e, still weighted by their p_e. `routing = "sigmoid"` or
    `"sigmoid_renorm"` takes p = sigmoid(router · x) instead (DeepSeek V3,
    GLM-4.5). With `groups` > 1 the experts form that many equal groups and
    only the `top_groups` groups whose two largest p_e + bias_e sum highest
    compete. The weights are multiplied by `scale` (the routed scaling
    factor) last.

    gpt-oss's experts: trained biases on the router's logits
    (`router_bias` [E]) and on each expert's products (`gate_up_bias`
    [E, 2I], `down_bias` [E, H]); a = g'·σ(alpha·g')·(u' + up_shift), with
    g' = min(g, limit) and u' = clamp(u, −limit, limit) when `limit` > 0;
    `w_layout = "in_out"` stores the matrices for x · W (gate_up [E, H, 2I],
    down [E, I, H]); `interleaved` alternates g and u along 2I (and in
    gate_up_bias).

    Llama 4's experts: with `weigh_inputs`, each chosen expert's weight
    scales its input instead of its output, y = Σ_j f_{e_j}(w_j · x)
    (experts without biases only: Llama 4 runs every expert on every token,
    the unchosen ones on a zero input, which bias-free experts map to 0).

    Gemma 4's experts: `activation = "gelu_tanh"` computes
    gelu_tanh(g) ⊙ u (GeGLU) instead of silu(g) ⊙ u; a trained
    `expert_scale` [E] multiplies each chosen expert's weight (after the
    renormalization, before `scale`); and the router reads `router_x` (the
    shape of x) where given, a copy of the token normed apart from the
    experts' input.

    ```mlir
    %y = mt.moe %x, %router, %gate_up, %down {routing = "softmax_renorm", top_k = 2 : i64} : (tensor<2x16x64xf32>, tensor<8x64xf32>, tensor<8x256x64xf32>, tensor<8x64x128xf32>) -> tensor<2x16x64xf32>
    %z = mt.moe %x, %router, %gate_up, %down router_bias %rb gate_up_bias %gb down_bias %db {alpha = 1.702 : f64, interleaved, limit = 7.0 : f64, routing = "softmax_renorm", top_k = 2 : i64, up_shift = 1.0 : f64, w_layout = "in_out"} : (tensor<2x16x64xf32>, tensor<8x64xf32>, tensor<8x64x256xf32>, tensor<8x128x64xf32>, tensor<8xf32>, tensor<8x256xf32>, tensor<8x64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$x, Mt_FloatTensor:$router,
                       Mt_FloatTensor:$gate_up, Mt_FloatTensor:$down,
                       Optional<Mt_FloatTensor>:$bias,
                       Optional<Mt_FloatTensor>:$router_bias,
                       Optional<Mt_FloatTensor>:$gate_up_bias,
                       Optional<Mt_FloatTensor>:$down_bias, I64Attr:$top_k,
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
                       Optional<Mt_FloatTensor>:$router_x,
                       Optional<Mt_FloatTensor>:$expert_scale,
                       DefaultValuedStrAttr<StrAttr, "silu">:$activation);
  let results = (outs Mt_FloatTensor:$y);
  let assemblyFormat = [{
    $x `,` $router `,` $gate_up `,` $down (`,` $bias^)?
    (`router_bias` $router_bias^)? (`gate_up_bias` $gate_up_bias^)?
    (`down_bias` $down_bias^)? (`router_x` $router_x^)?
    (`expert_scale` $expert_scale^)? attr-dict `:`
    functional-type(operands, results)
  }];
}

def Mt_XieluOp : Mt_PrimOp<"xielu"> {
  let summary = "xIELU (Apertus): a trained quadratic above 0, a trained ELU below";
  let description = [{
    y = αp·x² + β·x where x > 0, αn·(expm1(min(x, eps)) − x) + β·x elsewhere.
    β and eps are constants. alpha_p and alpha_n are one-element params: αp
    and αn themselves (an optimizer's fold of the trained alphas' softplus),
    or with `softplus` the trained alphas as transformers keeps them, αp =
    softplus(alpha_p) and αn = β + softplus(alpha_n).

    ```mlir
    %y = mt.xielu %x, %ap, %an {beta = 5.0e-01 : f64, eps = -1.0e-06 : f64} : (tensor<2x16x128xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x16x128xf32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$x, Mt_FloatTensor:$alpha_p,
                       Mt_FloatTensor:$alpha_n, F64Attr:$beta, F64Attr:$eps,
                       UnitAttr:$softplus);
  let results = (outs Mt_FloatTensor:$y);
  let assemblyFormat = "$x `,` $alpha_p `,` $alpha_n attr-dict `:` functional-type(operands, results)";
}

def Mt_CausalConvOp : Mt_PrimOp<"causal_conv"> {
  let summary = "a depthwise causal convolution along the sequence";
  let description = [{
    x [B, C, S] (channels before positions), w [C, 1, K], an optional bias
    [C]: y[b, c, s] = bias[c] + Σ_{j<K} w[c, 0, j] · x[b, c, s − (K − 1) +
    j], positions before 0 read as 0. LFM2's short convolution (K = 3);
    Mamba's, with a bias (K = 4).

    ```mlir
    %y = mt.causal_conv %x, %w : (tensor<2x64x16xf32>, tensor<64x1x3xf32>) -> tensor<2x64x16xf32>
    %z = mt.causal_conv %x, %w, %b : (tensor<2x64x16xf32>, tensor<64x1x4xf32>, tensor<64xf32>) -> tensor<2x64x16xf32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$x, Mt_FloatTensor:$w,
                       Optional<Mt_FloatTensor>:$bias);
  let results = (outs Mt_FloatTensor:$y);
  let assemblyFormat = "$x `,` $w (`,` $bias^)? attr-dict `:` functional-type(operands, results)";
}

def Mt_GatedDeltaOp : Mt_PrimOp<"gated_delta"> {
  let summary = "the gated delta rule: linear attention with a decaying state";
  let description = [{
    q, k [B, S, Hk, Dk], v [B, S, Hv, Dv], beta [B, S, Hv], g [B, S, Hv]
    or [B, S, Hv, Dk], Hv a multiple of Hk (value head h reads key head
    h / (Hv / Hk)). Per batch and value head a state M [Dk, Dv] starts at 0
    and, position by position: M ← exp(g) · M (row i by exp(g[i]) where g
    has a decay per key channel); δ = beta · (v − Mᵀk); M ← M + k δᵀ; the
    output is Mᵀq. Gated DeltaNet's core (Qwen3.5, Qwen3-Next), and with a
    decay per key channel Kimi Delta Attention's (Kimi Linear); queries and
    keys come normalized and scaled.

    ```mlir
    %o = mt.gated_delta %q, %k, %v, %g, %beta : (tensor<2x16x2x8xf32>, tensor<2x16x2x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x4xf32>, tensor<2x16x4xf32>) -> tensor<2x16x4x8xf32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$q, Mt_FloatTensor:$k,
                       Mt_FloatTensor:$v, Mt_FloatTensor:$g,
                       Mt_FloatTensor:$beta);
  let results = (outs Mt_FloatTensor:$o);
  let assemblyFormat = "$q `,` $k `,` $v `,` $g `,` $beta attr-dict `:` functional-type(operands, results)";
}

def Mt_GatedLinearOp : Mt_PrimOp<"gated_linear"> {
  let summary = "gated linear attention: a decaying state, no delta rule";
  let description = [{
    Operands as mt.gated_delta's. Per batch and value head a state M
    [Dk, Dv] starts at 0 and, position by position: M ← exp(g) · M;
    M ← M + k (beta · v)ᵀ; the output is Mᵀq. Mamba-2's state space model
    (the SSD scan): k = B, q = C, v = x, beta = dt, g = dt · A.

    ```mlir
    %o = mt.gated_linear %q, %k, %v, %g, %beta : (tensor<2x16x1x8xf32>, tensor<2x16x1x8xf32>, tensor<2x16x4x8xf32>, tensor<2x16x4xf32>, tensor<2x16x4xf32>) -> tensor<2x16x4x8xf32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$q, Mt_FloatTensor:$k,
                       Mt_FloatTensor:$v, Mt_FloatTensor:$g,
                       Mt_FloatTensor:$beta);
  let results = (outs Mt_FloatTensor:$o);
  let assemblyFormat = "$q `,` $k `,` $v `,` $g `,` $beta attr-dict `:` functional-type(operands, results)";
}

def Mt_SwigluOp : Mt_PrimOp<"swiglu"> {
  let summary = "y = silu(gate) · up";
  let description = [{
    ```mlir
    %y = mt.swiglu %gate, %up : (tensor<2x16x128xf32>, tensor<2x16x128xf32>) -> tensor<2x16x128xf32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$gate, Mt_FloatTensor:$up);
  let results = (outs Mt_FloatTensor:$y);
  let assemblyFormat = "$gate `,` $up attr-dict `:` functional-type(operands, results)";
}

class Mt_BinaryOp<string mnemonic> : Mt_PrimOp<mnemonic> {
  let arguments = (ins Mt_FloatTensor:$lhs, Mt_FloatTensor:$rhs);
  let results = (outs Mt_FloatTensor:$y);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

def Mt_AddOp : Mt_BinaryOp<"add"> {
  let summary = "elementwise sum with NumPy broadcasting";
  let description = [{
    ```mlir
    %y = mt.add %x, %r : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
}

def Mt_MulOp : Mt_BinaryOp<"mul"> {
  let summary = "elementwise product with NumPy broadcasting";
  let description = [{
    ```mlir
    %y = mt.mul %a, %b : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
}

def Mt_ScaleOp : Mt_PrimOp<"scale"> {
  let summary = "y = factor · x";
  let description = [{
    ```mlir
    %y = mt.scale %x {factor = 8.0 : f64} : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$x, F64Attr:$factor);
  let results = (outs Mt_FloatTensor:$y);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
}

def Mt_EmbedOp : Mt_PrimOp<"embed"> {
  let summary = "gathers table rows by token id";
  let description = [{
    ids [B, S] and table [V, D] give [B, S, D].

    ```mlir
    %h = mt.embed %ids, %wte : (tensor<2x16xi32>, tensor<256x64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins Mt_IdTensor:$ids, Mt_FloatTensor:$table);
  let results = (outs Mt_FloatTensor:$y);
  let assemblyFormat = "$ids `,` $table attr-dict `:` functional-type(operands, results)";
}

def Mt_PositionEmbedOp : Mt_PrimOp<"position_embed"> {
  let summary = "the learned position embeddings of positions offset .. offset+S-1";
  let description = [{
    table [P, D] gives [S, D] = table[offset : offset + S].

    ```mlir
    %p = mt.position_embed %wpe {offset = 0 : i64} : (tensor<64x64xf32>) -> tensor<16x64xf32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$table, DefaultValuedAttr<I64Attr, "0">:$offset);
  let results = (outs Mt_FloatTensor:$y);
  let assemblyFormat = "$table attr-dict `:` functional-type(operands, results)";
}

def Mt_CrossEntropyOp : Mt_PrimOp<"cross_entropy"> {
  let summary = "mean cross-entropy of logits [..., V] against integer targets [...]";
  let description = [{
    ```mlir
    %l = mt.cross_entropy %logits, %targets : (tensor<2x16x256xf32>, tensor<2x16xi32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$logits, Mt_IdTensor:$targets);
  let results = (outs 0DTensorOf<[F32]>:$loss);
  let assemblyFormat = "$logits `,` $targets attr-dict `:` functional-type(operands, results)";
}

def Mt_ReshapeOp : Mt_PrimOp<"reshape"> {
  let summary = "reinterprets a row-major tensor with another shape";
  let description = [{
    ```mlir
    %y = mt.reshape %x : (tensor<2x16x64xf32>) -> tensor<2x16x4x16xf32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$x);
  let results = (outs Mt_FloatTensor:$y);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
}

def Mt_SliceOp : Mt_PrimOp<"slice"> {
  let summary = "a contiguous range of one dim: y = x[.., start : start + n, ..]";
  let description = [{
    n is the result's size along `axis`. Splits a fused projection, say.

    ```mlir
    %q = mt.slice %qkv {axis = 2 : i64, start = 0 : i64} : (tensor<2x16x192xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$x, I64Attr:$axis, I64Attr:$start);
  let results = (outs Mt_FloatTensor:$y);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
}

def Mt_ConcatOp : Mt_PrimOp<"concat"> {
  let summary = "joins its operands along one dim, in order";
  let description = [{
    Every operand has the result's shape off `axis`; the result's size along
    it is the sum of theirs. The gradient of each operand is a slice of the
    result's.

    ```mlir
    %y = mt.concat %a, %b {axis = 3 : i64} : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x16xf32>
    ```
  }];
  let arguments = (ins Variadic<Mt_FloatTensor>:$xs, I64Attr:$axis);
  let results = (outs Mt_FloatTensor:$y);
  let assemblyFormat = "$xs attr-dict `:` functional-type(operands, results)";
}

def Mt_PadOp : Mt_PrimOp<"pad"> {
  let summary = "x in zeros along one dim: y[.., start : start + n, ..] = x";
  let description = [{
    n is x's size along `axis`; the rest of y is 0. Widens the values of an
    attention whose value head dim is not its query's, say.

    ```mlir
    %y = mt.pad %v {axis = 3 : i64, start = 0 : i64} : (tensor<2x4x16x8xf32>) -> tensor<2x4x16x12xf32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$x, I64Attr:$axis, I64Attr:$start);
  let results = (outs Mt_FloatTensor:$y);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
}

def Mt_TransposeOp : Mt_PrimOp<"transpose"> {
  let summary = "permutes dims: y.shape[i] = x.shape[perm[i]]";
  let description = [{
    ```mlir
    %y = mt.transpose %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x16xf32>) -> tensor<2x4x16x16xf32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$x, DenseI64ArrayAttr:$perm);
  let results = (outs Mt_FloatTensor:$y);
  let assemblyFormat = "$x attr-dict `:` functional-type(operands, results)";
}

include "ir/MtGradOps.td"
include "ir/MtPieceOps.td"
include "ir/MtScheduleOps.td"

#endif // MT_OPS_TD
