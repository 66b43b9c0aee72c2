//===- MtPieceOps.td - an LM head and embedding in vocabulary pieces -*- tablegen -*-===//
//
// When an LM head or an embedding is too large for one streaming unit,
// mt-split-vocab cuts its [V, D] weight into row ranges ("pieces") that
// move to the device one at a time. These ops compute the loss and the
// lookup piece by piece. A chain of them over the pieces (stats, or the
// embedding's output) runs in place on one launch buffer: the operand
// `*_in` of one piece is the result of the piece before.
//
//===----------------------------------------------------------------------===//

#ifndef MT_PIECE_OPS_TD
#define MT_PIECE_OPS_TD

include "ir/MtDialect.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

class Mt_PieceOp<string mnemonic, list<Trait> traits = []>
    : Mt_Op<mnemonic, !listconcat([Pure], traits)> {
  let hasVerifier = 1;
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Mt_CrossEntropyStatsOp : Mt_PieceOp<"cross_entropy_stats"> {
  let summary = "running log-sum-exp statistics of logits over vocabulary pieces";
  let description = [{
    `logits` [..., Vp] are the logits of vocabulary entries
    [vocab_offset, vocab_offset + Vp) of a vocabulary of `vocab_size`.
    The result [..., 3] holds per row the running max m, the running sum of
    exp(z - m) and the target's logit, merged with `stats_in` (the pieces
    before) when given; without it the target logit of a row whose target
    lies outside the vocabulary is NaN.

    ```mlir
    %s = mt.cross_entropy_stats %logits, %targets {vocab_offset = 0 : i64, vocab_size = 512 : i64} : (tensor<2x16x256xf32>, tensor<2x16xi32>) -> tensor<2x16x3xf32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$logits, Mt_IdTensor:$targets,
                       Optional<Mt_FloatTensor>:$stats_in,
                       I64Attr:$vocab_offset, I64Attr:$vocab_size);
  let results = (outs Mt_FloatTensor:$stats);
}

def Mt_CrossEntropyStatsLossOp : Mt_PieceOp<"cross_entropy_stats_loss"> {
  let summary = "the mean cross-entropy from complete statistics";
  let description = [{
    The mean over rows of m + log(sum) - target logit.

    ```mlir
    %l = mt.cross_entropy_stats_loss %s : (tensor<2x16x3xf32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$stats);
  let results = (outs 0DTensorOf<[F32]>:$loss);
}

def Mt_CrossEntropyPieceGradOp : Mt_PieceOp<"cross_entropy_piece_grad"> {
  let summary = "dlogits of one vocabulary piece, from complete statistics";
  let description = [{
    dloss · (exp(z - m) / sum - onehot) over the piece's entries
    [vocab_offset, vocab_offset + Vp).

    ```mlir
    %dl = mt.cross_entropy_piece_grad %logits, %targets, %s, %dloss {vocab_offset = 256 : i64} : (tensor<2x16x256xf32>, tensor<2x16xi32>, tensor<2x16x3xf32>, tensor<f32>) -> tensor<2x16x256xf32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$logits, Mt_IdTensor:$targets,
                       Mt_FloatTensor:$stats, 0DTensorOf<[F32]>:$dloss,
                       I64Attr:$vocab_offset);
  let results = (outs Mt_FloatTensor:$dlogits);
}

def Mt_EmbedPieceOp : Mt_PieceOp<"embed_piece"> {
  let summary = "the rows of an embedding whose ids fall in one vocabulary piece";
  let description = [{
    `table` [Vp, D] holds rows [vocab_offset, vocab_offset + Vp) of a
    vocabulary of `vocab_size`. The result [..., D] is `y_in` with the rows
    whose id falls in the piece replaced by their table rows times `scale`
    (an embedding's scaling, Gemma's √D). Without `y_in`
    (the first piece) the other rows are those of later pieces, and a row
    whose id lies outside the vocabulary is NaN.

    ```mlir
    %y = mt.embed_piece %ids, %table, %y0 {vocab_offset = 256 : i64, vocab_size = 512 : i64} : (tensor<2x16xi32>, tensor<256x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins Mt_IdTensor:$ids, Mt_FloatTensor:$table,
                       Optional<Mt_FloatTensor>:$y_in,
                       I64Attr:$vocab_offset, I64Attr:$vocab_size,
                       DefaultValuedAttr<F64Attr, "1.0">:$scale);
  let results = (outs Mt_FloatTensor:$y);
}

def Mt_EmbedPieceGradOp : Mt_PieceOp<"embed_piece_grad"> {
  let summary = "dtable of mt.embed_piece: the piece's rows of the scatter-add of scale · dy";
  let description = [{
    ```mlir
    %dt = mt.embed_piece_grad %dy, %ids {vocab_offset = 256 : i64} : (tensor<2x16x64xf32>, tensor<2x16xi32>) -> tensor<256x64xf32>
    ```
  }];
  let arguments = (ins Mt_FloatTensor:$dy, Mt_IdTensor:$ids,
                       I64Attr:$vocab_offset,
                       DefaultValuedAttr<F64Attr, "1.0">:$scale);
  let results = (outs Mt_FloatTensor:$dtable);
}

#endif // MT_PIECE_OPS_TD
