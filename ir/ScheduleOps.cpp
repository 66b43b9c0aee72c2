//===- ScheduleOps.cpp - verifiers of the schedule-level ops --------------===//
#include "ir/MtOps.h"

using namespace mlir;
using namespace mt;

namespace {

const char *const kStreams[] = {"h2d", "compute", "d2h", "host"};

LogicalResult checkStream(Operation *op, StringRef stream,
                          StringRef expected = "") {
  if (!llvm::is_contained(kStreams, stream))
    return op->emitOpError("stream must be h2d, compute, d2h or host, not '")
           << stream << "'";
  if (!expected.empty() && stream != expected)
    return op->emitOpError("runs on the ")
           << expected << " stream, not '" << stream << "'";
  return success();
}

LogicalResult checkRange(Operation *op, std::optional<ArrayRef<int64_t>> range) {
  if (range && (range->size() != 2 || (*range)[0] < 0 || (*range)[1] <= 0))
    return op->emitOpError("range must be [begin >= 0, count > 0]");
  return success();
}

} // namespace

LogicalResult UnitOp::verify() {
  if (getOffsets() && getOffsets()->size() != getParams().size())
    return emitOpError("has ") << getOffsets()->size() << " offsets for "
                               << getParams().size() << " params";
  if (getApplies().empty())
    return emitOpError("holds no application");
  if (getParts() && getParts()->size() != 3 * getParams().size())
    return emitOpError("has ") << getParts()->size() << " part numbers for "
                               << getParams().size()
                               << " params (3 each: kind, begin, elements)";
  if (getParts())
    for (size_t i = 0; i < getParts()->size(); i += 3)
      if ((*getParts())[i] < 0 || (*getParts())[i] > 2)
        return emitOpError("part kind must be 0 (whole), 1 (range) or 2 "
                           "(columns)");
  if (getVocabRows() && (getVocabRows()->size() != 2 ||
                         (*getVocabRows())[0] >= (*getVocabRows())[1]))
    return emitOpError("vocab_rows must be [begin, end) with begin < end");
  return success();
}

LogicalResult BufferOp::verify() {
  if (getSpace() != "device" && getSpace() != "host")
    return emitOpError("space must be device or host");
  if (getDtype() != "storage" && getDtype() != "f32" && getDtype() != "i32")
    return emitOpError("dtype must be storage, f32 or i32");
  if (getElems() < 0)
    return emitOpError("has a negative size");
  return success();
}

LogicalResult EventOp::verify() {
  static const char *const kinds[] = {"param_ready", "compute_done",
                                      "buffer_free", "grad_landed"};
  if (!llvm::is_contained(kinds, getKind()))
    return emitOpError("kind must be param_ready, compute_done, buffer_free "
                       "or grad_landed");
  return success();
}

LogicalResult LaunchOp::verify() {
  if (getDirection() != "fwd" && getDirection() != "bwd")
    return emitOpError("direction must be fwd or bwd");
  if (getGrads() && getDirection() != "bwd")
    return emitOpError("only a backward launch writes gradients");
  return checkStream(*this, getStream(), "compute");
}

LogicalResult PackOp::verify() {
  return failure(failed(checkStream(*this, getStream(), "host")) ||
                 failed(checkRange(*this, getRange())));
}
LogicalResult H2DOp::verify() {
  return failure(failed(checkStream(*this, getStream(), "h2d")) ||
                 failed(checkRange(*this, getRange())));
}
LogicalResult D2HOp::verify() {
  return failure(failed(checkStream(*this, getStream(), "d2h")) ||
                 failed(checkRange(*this, getRange())));
}
LogicalResult LoadBatchOp::verify() {
  return checkStream(*this, getStream(), "host");
}
LogicalResult AccumulateOp::verify() {
  return failure(failed(checkStream(*this, getStream(), "host")) ||
                 failed(checkRange(*this, getRange())));
}
LogicalResult GradNormOp::verify() {
  return checkStream(*this, getStream(), "host");
}
LogicalResult AdamWOp::verify() { return checkStream(*this, getStream(), "host"); }
LogicalResult RecordOp::verify() { return checkStream(*this, getStream()); }
LogicalResult WaitOp::verify() { return checkStream(*this, getStream()); }
