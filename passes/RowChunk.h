//===- RowChunk.h - a stretch of a template in chunks of token rows -*- C++ -*-===//
//
// Much of a decoder works row by row: a token's logits, its MLP output and
// the gradients through them depend on that token's hidden state alone,
// and the param gradients are sums over tokens. Such a stretch of a
// template can run over the launch's B·S token rows in chunks and hold one
// chunk of its inner values: the head's logits (B·S·V of them would be
// 33 GB at 512K tokens of a 32K vocabulary) or a layer's MLP activations
// (B·S·F: 11.5 GB each at 512K tokens of a 7B model).
//
// A row value holds one slice of F elements per token row (shape [..., F]
// whose leading dims multiply to B·S). The analysis proves a stretch of
// ops row-wise: rows flow only through the ops below, every non-row
// operand of a row op broadcasts over rows (weights, biases), and a sum
// over rows (a param gradient, the loss) is accumulated by its kernel
// chunk by chunk. Row values the stretch reads from before it, or leaves
// to ops after it, are held whole and addressed at the chunk's rows; the
// others (local) take one chunk's worth of scratch. A param gradient
// summed in scratch is added to the gradient slot chunk by chunk.
//
//===----------------------------------------------------------------------===//
#ifndef MT_PASSES_ROWCHUNK_H
#define MT_PASSES_ROWCHUNK_H

#include "ir/MtOps.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"

#include <optional>

namespace mt {

/// Row values up to this many elements (256 MiB in bf16) run whole: a
/// chunk adds a pass over the param gradients its ops accumulate into, so
/// chunks pay off only when the values they shrink are large.
constexpr int64_t kWholeRowElems = int64_t(1) << 27;

/// How a stretch of a template's ops runs: in chunks of `chunk` token rows.
struct RowChunking {
  int64_t rows = 0;  // token rows of one launch (B·S)
  int64_t chunk = 0; // rows per chunk; divides rows
  int64_t begin = 0, end = 0; // the stretch: body ops [begin, end)
  llvm::DenseSet<mlir::Value> rowValues; // row values the stretch touches
  llvm::DenseSet<mlir::Value> local;     // ... that live inside it alone
  /// Param gradient contributions the stretch sums over rows in scratch
  /// (LayerScale's mul_grad) while the yield that would add them to the
  /// gradient slot runs after it: the loop adds each chunk's to the slot
  /// of param #index.
  llvm::MapVector<mlir::Value, int64_t> loopSums; // in op order

  bool isRow(mlir::Value v) const { return rowValues.contains(v); }
  bool isLocal(mlir::Value v) const { return local.contains(v); }
  bool contains(int64_t position) const {
    return begin <= position && position < end;
  }
  int64_t chunks() const { return rows / chunk; }
  /// Elements of v one kernel call inside the stretch covers: chunk·F for
  /// a row value, else all.
  int64_t callElements(mlir::Value v) const;
  /// Scratch elements v needs: chunk·F for a local row value, else all.
  int64_t scratchElements(mlir::Value v) const;
  /// The widest slice F of a local row value (0 without one).
  int64_t widestRow() const;
};

/// The largest divisor of n that is at most bound (1 at the least).
int64_t largestDivisorAtMost(int64_t n, int64_t bound);

/// Token rows of a launch of tmpl: the leading dims of its first input.
int64_t launchRows(TemplateOp tmpl);

/// The row-wise stretches of tmpl (chunk left 0), longest first.
llvm::SmallVector<RowChunking> rowStretches(TemplateOp tmpl);

/// Whether the whole body of tmpl is row-wise, or failure with *culprit set
/// to the first op that mixes rows.
mlir::FailureOr<RowChunking> analyzeWholeRows(TemplateOp tmpl,
                                              mlir::Operation **culprit);

/// The chunking a template's `row_chunk` (and `row_ops`) ask for;
/// std::nullopt without one, or when the stretch is not row-wise or the
/// chunk does not divide the rows: the template then runs whole.
std::optional<RowChunking> rowChunkingOf(TemplateOp tmpl);

} // namespace mt

#endif // MT_PASSES_ROWCHUNK_H
