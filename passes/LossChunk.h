//===- LossChunk.h - the head's launch in chunks of token rows ---*- C++ -*-===//
//
// The head's backward (final norm, LM head, loss and their gradients) works
// row by row: a token's logits depend on that token's hidden state alone,
// and the param gradients are sums over tokens. So it can run over the
// launch's B·S token rows in chunks and hold the logits of one chunk only
// (B·S·V of them would be 33 GB at 512K tokens of a 32K vocabulary).
//
// A row value holds one slice of F elements per token row (shape [..., F]
// whose leading dims multiply to B·S). The analysis proves a template
// row-wise: rows flow only through the ops below, every non-row operand of
// a row op broadcasts over rows (weights, biases), and a sum over rows (a
// param gradient, the loss) feeds nothing but the template's param-gradient
// results and loss, which the kernels accumulate chunk by chunk.
//
//===----------------------------------------------------------------------===//
#ifndef MT_PASSES_LOSSCHUNK_H
#define MT_PASSES_LOSSCHUNK_H

#include "ir/MtOps.h"

#include "llvm/ADT/DenseSet.h"

#include <optional>

namespace mt {

/// How a head's backward template runs: in chunks of `chunk` token rows.
struct LossChunking {
  int64_t rows = 0;  // token rows of one launch (B·S)
  int64_t chunk = 0; // rows per chunk; divides rows
  llvm::DenseSet<mlir::Value> rowValues;

  bool isRow(mlir::Value v) const { return rowValues.contains(v); }
  int64_t chunks() const { return rows / chunk; }
  /// Elements one chunk holds of v: chunk·F for a row value, else all.
  int64_t elements(mlir::Value v) const;
};

/// The rows and row values of a head's backward template (its chunk left
/// 0), or failure with *culprit set to the op that mixes rows.
mlir::FailureOr<LossChunking> analyzeLossRows(TemplateOp tmpl,
                                              mlir::Operation **culprit);

/// The chunking a template's `loss_chunk` asks for; std::nullopt without
/// one (or when it does not divide the rows), when the template runs whole.
std::optional<LossChunking> lossChunkingOf(TemplateOp tmpl);

} // namespace mt

#endif // MT_PASSES_LOSSCHUNK_H
