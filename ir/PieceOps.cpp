//===- PieceOps.cpp - verifiers of the vocabulary-piece ops ---------------===//
#include "ir/MtOps.h"

using namespace mlir;
using namespace mt;

namespace {

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

// A piece [offset, offset + rows) of a vocabulary of `size`.
LogicalResult checkPiece(Operation *op, int64_t offset, int64_t rows,
                         int64_t size) {
  if (offset < 0 || rows < 1 || offset + rows > size)
    return op->emitOpError("piece [")
           << offset << ", " << offset + rows << ") is not inside a vocabulary of "
           << size;
  return success();
}

// stats [..., 3] for logits [..., V].
LogicalResult checkStats(Operation *op, Value stats, Value logits) {
  SmallVector<int64_t> want(shapeOf(logits).drop_back());
  want.push_back(3);
  if (shapeOf(stats) != ArrayRef<int64_t>(want))
    return op->emitOpError("stats must be the logits' rows by 3");
  return success();
}

LogicalResult checkTargets(Operation *op, Value targets, Value rows) {
  if (shapeOf(targets) != shapeOf(rows).drop_back())
    return op->emitOpError("targets must be one per row");
  return success();
}

} // namespace

LogicalResult CrossEntropyStatsOp::verify() {
  if (failed(checkPiece(*this, getVocabOffset(),
                        shapeOf(getLogits()).back(), getVocabSize())) ||
      failed(checkTargets(*this, getTargets(), getLogits())) ||
      failed(checkStats(*this, getStats(), getLogits())))
    return failure();
  if (getStatsIn() && getStatsIn().getType() != getStats().getType())
    return emitOpError("stats_in must have the result's type");
  return success();
}

LogicalResult CrossEntropyStatsLossOp::verify() {
  if (shapeOf(getStats()).empty() || shapeOf(getStats()).back() != 3)
    return emitOpError("stats must have 3 values per row");
  return success();
}

LogicalResult CrossEntropyPieceGradOp::verify() {
  if (getDlogits().getType() != getLogits().getType())
    return emitOpError("dlogits must have the logits' type");
  if (getVocabOffset() < 0)
    return emitOpError("vocab_offset must not be negative");
  return failure(failed(checkTargets(*this, getTargets(), getLogits())) ||
                 failed(checkStats(*this, getStats(), getLogits())));
}

LogicalResult EmbedPieceOp::verify() {
  auto table = shapeOf(getTable());
  if (table.size() != 2)
    return emitOpError("table must be 2-d [rows, dim]");
  if (failed(checkPiece(*this, getVocabOffset(), table[0], getVocabSize())))
    return failure();
  SmallVector<int64_t> y(shapeOf(getIds()));
  y.push_back(table[1]);
  if (shapeOf(getY()) != ArrayRef<int64_t>(y))
    return emitOpError("result must be the ids' shape by the table's width");
  if (getYIn() && getYIn().getType() != getY().getType())
    return emitOpError("y_in must have the result's type");
  return success();
}

LogicalResult EmbedPieceGradOp::verify() {
  auto dt = shapeOf(getDtable()), dy = shapeOf(getDy());
  if (dt.size() != 2 || dy.drop_back() != shapeOf(getIds()) ||
      dy.back() != dt[1])
    return emitOpError("dy must be the ids' shape by the table's width");
  if (getVocabOffset() < 0)
    return emitOpError("vocab_offset must not be negative");
  return success();
}
