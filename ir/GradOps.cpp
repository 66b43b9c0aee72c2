//===- GradOps.cpp - verifiers of the backward primitives -----------------===//
//
// A gradient has its primal's shape; each verifier checks that, so a VJP
// rule that wires the wrong value fails at once.
//
//===----------------------------------------------------------------------===//
#include "ir/MtOps.h"

#include "ir/AttentionLayout.h"

using namespace mlir;
using namespace mt;

namespace {

Type typeOf(Value v) { return v.getType(); }

LogicalResult sameType(Operation *op, Value grad, Value primal,
                       StringRef what) {
  if (typeOf(grad) != typeOf(primal))
    return op->emitOpError() << what << " has type " << typeOf(grad)
                             << ", expected " << typeOf(primal);
  return success();
}

LogicalResult checkResults(Operation *op, ResultRange results,
                           ArrayRef<Value> primals) {
  if (results.size() != primals.size())
    return op->emitOpError("has ")
           << results.size() << " results, expected " << primals.size();
  for (auto [r, p] : llvm::zip(results, primals))
    if (failed(sameType(op, r, p, "gradient")))
      return failure();
  return success();
}

} // namespace

LogicalResult LinearGradOp::verify() {
  if ((getDb() != nullptr) != getHasBias())
    return emitOpError("returns db exactly when has_bias is set");
  if (failed(sameType(*this, getDx(), getX(), "dx")) ||
      failed(sameType(*this, getDw(), getW(), "dw")))
    return failure();
  auto dy = cast<RankedTensorType>(getDy().getType());
  auto w = cast<RankedTensorType>(getW().getType());
  int64_t n = getWLayout() == "in_out" ? w.getDimSize(1) : w.getDimSize(0);
  if (dy.getShape().back() != n)
    return emitOpError("dy has ")
           << dy.getShape().back() << " features, the weight produces " << n;
  if (Value db = getDb();
      db && cast<RankedTensorType>(db.getType()).getNumElements() != n)
    return emitOpError("db must have ") << n << " elements";
  return success();
}

LogicalResult RmsNormGradOp::verify() {
  SmallVector<Value> primals{getX()};
  if (getWeight())
    primals.push_back(getWeight());
  if (failed(sameType(*this, getDy(), getX(), "dy")))
    return failure();
  return checkResults(*this, getGrads(), primals);
}

LogicalResult LayerNormGradOp::verify() {
  SmallVector<Value> primals{getX()};
  if (getWeight())
    primals.push_back(getWeight());
  if (failed(sameType(*this, getDy(), getX(), "dy")))
    return failure();
  ResultRange grads = getGrads();
  if (getHasBias()) {
    if (grads.empty())
      return emitOpError("needs a db result when has_bias is set");
    int64_t d = cast<RankedTensorType>(getX().getType()).getShape().back();
    if (cast<RankedTensorType>(grads.back().getType()).getShape() !=
        ArrayRef<int64_t>{d})
      return emitOpError("db must be [") << d << "]";
    grads = grads.drop_back();
  }
  return checkResults(*this, grads, primals);
}

LogicalResult RopeGradOp::verify() {
  if (typeOf(getDx()) != typeOf(getDy()))
    return emitOpError("dx and dy differ in type");
  auto dy = cast<RankedTensorType>(getDy().getType());
  if (dy.getRank() != 4 || getRotaryDim() > dy.getShape()[3])
    return emitOpError("needs a 4-d dy with head_dim >= rotary_dim");
  if (getRotation() != "half" && getRotation() != "interleaved")
    return emitOpError("rotation must be \"half\" or \"interleaved\"");
  return success();
}

// The type of a 4-d attention tensor's rows: [B, H, S] (AttentionLayout.h).
static RankedTensorType rowsOf(Value v, StringRef layout) {
  auto t = cast<RankedTensorType>(v.getType());
  return RankedTensorType::get(attentionRows(t.getShape(), layout),
                               t.getElementType());
}

static LogicalResult checkLayout(Operation *op, StringRef layout) {
  if (isAttentionLayout(layout))
    return success();
  return op->emitOpError("layout must be \"bhsd\" or \"bshd\", not \"")
         << layout << "\"";
}

LogicalResult AttentionDeltaOp::verify() {
  if (failed(checkLayout(*this, getLayout())))
    return failure();
  if (cast<RankedTensorType>(getY().getType()).getRank() != 4)
    return emitOpError("needs a 4-d y");
  if (failed(sameType(*this, getDy(), getY(), "dy")))
    return failure();
  if (getDelta().getType() != rowsOf(getY(), getLayout()))
    return emitOpError("delta has type ")
           << getDelta().getType() << ", expected "
           << rowsOf(getY(), getLayout());
  return success();
}

LogicalResult AttentionGradOp::verify() {
  if (failed(checkLayout(*this, getLayout())))
    return failure();
  if (cast<RankedTensorType>(getQ().getType()).getRank() != 4)
    return emitOpError("needs a 4-d q");
  if (failed(sameType(*this, getDy(), getQ(), "dy")) ||
      failed(sameType(*this, getY(), getQ(), "y")))
    return failure();
  const RankedTensorType rows = rowsOf(getQ(), getLayout());
  if (getDelta().getType() != rows)
    return emitOpError("delta has type ")
           << getDelta().getType() << ", expected " << rows;
  if (getLse().getType() != rows)
    return emitOpError("lse has type ")
           << getLse().getType() << ", expected " << rows;
  if (auto slopes = getAlibiSlopes();
      slopes && int64_t(slopes->size()) != rows.getDimSize(1))
    return emitOpError("has ")
           << slopes->size() << " alibi_slopes, not one per query head";
  // Read signed: the accessors' unsigned values hide a negative one.
  if (auto w = getWindowAttr(); w && w.getInt() <= 0)
    return emitOpError("window must be positive, not ") << w.getInt();
  if (auto c = getChunkAttr(); c && c.getInt() <= 0)
    return emitOpError("chunk must be positive, not ") << c.getInt();
  if (auto c = getSoftcapAttr(); c && !(c.getValueAsDouble() > 0))
    return emitOpError("softcap must be positive, not ")
           << c.getValueAsDouble();
  if (getSinks())
    return checkResults(*this, getResults(),
                        {getQ(), getK(), getV(), getSinks()});
  return checkResults(*this, getResults(), {getQ(), getK(), getV()});
}

LogicalResult ReluGradOp::verify() {
  return failure(failed(sameType(*this, getDy(), getX(), "dy")) ||
                 failed(sameType(*this, getDx(), getX(), "dx")));
}

LogicalResult SigmoidGradOp::verify() {
  return failure(failed(sameType(*this, getDy(), getX(), "dy")) ||
                 failed(sameType(*this, getDx(), getX(), "dx")));
}

LogicalResult SoftplusGradOp::verify() {
  return failure(failed(sameType(*this, getDy(), getX(), "dy")) ||
                 failed(sameType(*this, getDx(), getX(), "dx")));
}

LogicalResult SiluGradOp::verify() {
  return failure(failed(sameType(*this, getDy(), getX(), "dy")) ||
                 failed(sameType(*this, getDx(), getX(), "dx")));
}

LogicalResult GeluGradOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError("approximate must be none or tanh");
  return failure(failed(sameType(*this, getDy(), getX(), "dy")) ||
                 failed(sameType(*this, getDx(), getX(), "dx")));
}

LogicalResult SoftcapGradOp::verify() {
  if (!(getCap().convertToDouble() > 0))
    return emitOpError("cap must be positive");
  return failure(failed(sameType(*this, getDy(), getX(), "dy")) ||
                 failed(sameType(*this, getDx(), getX(), "dx")));
}

LogicalResult MoeGradOp::verify() {
  if (failed(sameType(*this, getDy(), getX(), "dy")))
    return failure();
  SmallVector<Value> primals{getX(), getRouter(), getGateUp(), getDown()};
  for (Value b : {getRouterBias(), getGateUpBias(), getDownBias(), getRouterX(),
                  getExpertScale()})
    if (b)
      primals.push_back(b);
  return checkResults(*this, getResults(), primals);
}

LogicalResult CausalConvGradOp::verify() {
  if (failed(sameType(*this, getDy(), getX(), "dy")))
    return failure();
  if ((getDb() != nullptr) != getHasBias())
    return emitOpError("returns db exactly when has_bias is set");
  if (Value db = getDb()) {
    auto x = cast<RankedTensorType>(getX().getType());
    if (cast<RankedTensorType>(db.getType()).getShape() !=
        ArrayRef<int64_t>{x.getDimSize(1)})
      return emitOpError("db must be [") << x.getDimSize(1) << "]";
  }
  return checkResults(*this, getResults().take_front(2), {getX(), getW()});
}

template <class ScanGradOp>
static LogicalResult verifyGatedScanGrad(ScanGradOp op) {
  if (failed(sameType(op, op.getDout(), op.getV(), "dout")))
    return failure();
  return checkResults(op, op.getResults(),
                      {op.getQ(), op.getK(), op.getV(), op.getG(),
                       op.getBeta()});
}

LogicalResult GatedDeltaGradOp::verify() { return verifyGatedScanGrad(*this); }
LogicalResult GatedLinearGradOp::verify() {
  return verifyGatedScanGrad(*this);
}

LogicalResult XieluGradOp::verify() {
  if (failed(sameType(*this, getDy(), getX(), "dy")))
    return failure();
  return checkResults(*this, getResults(), {getX(), getAlphaP(), getAlphaN()});
}

LogicalResult SwigluGradOp::verify() {
  if (failed(sameType(*this, getDy(), getGate(), "dy")))
    return failure();
  return checkResults(*this, getResults(), {getGate(), getUp()});
}

LogicalResult MulGradOp::verify() {
  return checkResults(*this, getResults(), {getLhs(), getRhs()});
}

LogicalResult SumToOp::verify() {
  auto dy = cast<RankedTensorType>(getDy().getType());
  auto y = cast<RankedTensorType>(getY().getType());
  if (y.getRank() > dy.getRank())
    return emitOpError("cannot sum ") << dy << " to a higher rank " << y;
  auto ds = dy.getShape().take_back(y.getRank());
  for (auto [a, b] : llvm::zip(ds, y.getShape()))
    if (b != 1 && a != b)
      return emitOpError("cannot sum ") << dy << " to " << y;
  return success();
}

LogicalResult EmbedGradOp::verify() {
  auto dy = cast<RankedTensorType>(getDy().getType());
  auto ids = cast<RankedTensorType>(getIds().getType());
  auto dt = cast<RankedTensorType>(getDtable().getType());
  if (dt.getRank() != 2 || dy.getShape().drop_back() != ids.getShape() ||
      dy.getShape().back() != dt.getShape()[1])
    return emitOpError("dy must be ids' shape plus the table's row width");
  return success();
}

LogicalResult PositionEmbedGradOp::verify() {
  auto dy = cast<RankedTensorType>(getDy().getType());
  auto dt = cast<RankedTensorType>(getDtable().getType());
  if (dy.getRank() != 2 || dt.getRank() != 2 ||
      dy.getShape()[1] != dt.getShape()[1] ||
      getOffset() + dy.getShape()[0] > dt.getShape()[0])
    return emitOpError("maps [S, D] back into a [P, D] table");
  return success();
}

LogicalResult CrossEntropyGradOp::verify() {
  if (typeOf(getDlogits()) != typeOf(getLogits()))
    return emitOpError("dlogits must have the logits' type");
  auto l = cast<RankedTensorType>(getLogits().getType());
  auto t = cast<RankedTensorType>(getTargets().getType());
  if (t.getShape() != l.getShape().drop_back())
    return emitOpError("targets must be the logits' shape without vocab");
  return success();
}

LogicalResult SliceGradOp::verify() {
  auto dy = cast<RankedTensorType>(getDy().getType());
  auto dx = cast<RankedTensorType>(getDx().getType());
  int64_t axis = getAxis();
  if (dy.getRank() != dx.getRank() || axis < 0 || axis >= dx.getRank() ||
      getStart() < 0 || getStart() + dy.getShape()[axis] > dx.getShape()[axis])
    return emitOpError("dy does not fit in dx at axis ")
           << axis << " from " << getStart();
  for (int64_t k = 0; k < dx.getRank(); ++k)
    if (k != axis && dx.getShape()[k] != dy.getShape()[k])
      return emitOpError("dy and dx differ off the sliced axis");
  return success();
}
