//===- MtOps.cpp - verifiers of the graph-level primitives ----------------===//
//
// Each verifier checks what the runtime kernel will assume: ranks, the dims
// the math contracts or broadcasts over, and the result shape.
//
//===----------------------------------------------------------------------===//
#include "ir/MtOps.h"

#include "ir/AttentionLayout.h"

#include "mlir/Dialect/Traits.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mt;

namespace {

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

std::string str(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(shape))
    s += (i ? "," : "") + std::to_string(d);
  return s + "]";
}

LogicalResult expectShape(Operation *op, Value v, ArrayRef<int64_t> expected,
                          StringRef what) {
  if (shapeOf(v) != expected)
    return op->emitOpError() << what << " has shape " << str(shapeOf(v))
                             << ", expected " << str(expected);
  return success();
}

LogicalResult expectStatic(Operation *op) {
  auto check = [&](TypeRange types) -> LogicalResult {
    for (Type t : types)
      if (auto rt = dyn_cast<RankedTensorType>(t); rt && !rt.hasStaticShape())
        return op->emitOpError("needs static shapes, got ") << t;
    return success();
  };
  return failure(failed(check(op->getOperandTypes())) ||
                 failed(check(op->getResultTypes())));
}

// A per-feature vector (norm weight, bias) must match the last dim.
LogicalResult expectFeatureVector(Operation *op, Value v, int64_t dim,
                                  StringRef what) {
  if (!v)
    return success();
  return expectShape(op, v, {dim}, what);
}

LogicalResult verifyElementwise(Operation *op) {
  if (failed(expectStatic(op)))
    return failure();
  return expectShape(op, op->getResult(0), shapeOf(op->getOperand(0)),
                     "result");
}

LogicalResult verifyBroadcast(Operation *op) {
  if (failed(expectStatic(op)))
    return failure();
  SmallVector<int64_t> shape;
  if (!OpTrait::util::getBroadcastedShape(shapeOf(op->getOperand(0)),
                                          shapeOf(op->getOperand(1)), shape))
    return op->emitOpError("operands ")
           << str(shapeOf(op->getOperand(0))) << " and "
           << str(shapeOf(op->getOperand(1))) << " do not broadcast";
  return expectShape(op, op->getResult(0), shape, "result");
}

} // namespace

LogicalResult LinearOp::verify() {
  if (failed(expectStatic(*this)))
    return failure();
  if (getWLayout() != "out_in" && getWLayout() != "in_out")
    return emitOpError("w_layout must be out_in or in_out, not ")
           << getWLayout();
  auto x = shapeOf(getX()), w = shapeOf(getW());
  if (x.empty() || w.size() != 2)
    return emitOpError("needs x of rank >= 1 and a 2-d weight");
  int64_t k = isInOut() ? w[0] : w[1], n = isInOut() ? w[1] : w[0];
  if (x.back() != k)
    return emitOpError("x has ") << x.back() << " features, weight " << str(w)
                                 << " (" << getWLayout() << ") expects " << k;
  // A bias is [N], or [1, N] as Gemm's C often is.
  if (Value b = getBias(); b && shapeOf(b) != ArrayRef<int64_t>{n} &&
                           shapeOf(b) != ArrayRef<int64_t>{1, n})
    return emitOpError("bias has shape ")
           << str(shapeOf(b)) << ", expected [" << n << "]";
  SmallVector<int64_t> y(x.begin(), x.end());
  y.back() = n;
  return expectShape(*this, getY(), y, "result");
}

LogicalResult RmsNormOp::verify() {
  if (failed(verifyElementwise(*this)))
    return failure();
  if (shapeOf(getX()).empty())
    return emitOpError("needs x of rank >= 1");
  if (getEps().convertToDouble() < 0)
    return emitOpError("eps must be non-negative");
  return expectFeatureVector(*this, getWeight(), shapeOf(getX()).back(),
                             "weight");
}

LogicalResult LayerNormOp::verify() {
  if (failed(verifyElementwise(*this)))
    return failure();
  if (shapeOf(getX()).empty())
    return emitOpError("needs x of rank >= 1");
  if (getEps().convertToDouble() < 0)
    return emitOpError("eps must be non-negative");
  int64_t d = shapeOf(getX()).back();
  if (failed(expectFeatureVector(*this, getWeight(), d, "weight")))
    return failure();
  return expectFeatureVector(*this, getBias(), d, "bias");
}

LogicalResult RopeOp::verify() {
  if (failed(verifyElementwise(*this)))
    return failure();
  auto x = shapeOf(getX());
  if (x.size() != 4)
    return emitOpError("x must be 4-d ([B,H,S,D] or [B,S,H,D])");
  int64_t seqAxis = getSeqAxis(), r = getRotaryDim();
  if (seqAxis != 1 && seqAxis != 2)
    return emitOpError("seq_axis must be 1 or 2, not ") << seqAxis;
  if (r <= 0 || r % 2 || r > x[3])
    return emitOpError("rotary_dim ")
           << r << " must be even and in (0, " << x[3] << "]";
  if (getRotation() != "half" && getRotation() != "interleaved")
    return emitOpError("rotation must be \"half\" or \"interleaved\", not \"")
           << getRotation() << "\"";
  if (failed(expectShape(*this, getCos(), {x[seqAxis], r}, "cos")))
    return failure();
  return expectShape(*this, getSin(), {x[seqAxis], r}, "sin");
}

LogicalResult AttentionOp::verify() {
  if (failed(expectStatic(*this)))
    return failure();
  StringRef layout = getLayout();
  if (!isAttentionLayout(layout))
    return emitOpError("layout must be \"bhsd\" or \"bshd\", not \"")
           << layout << "\"";
  auto q = shapeOf(getQ()), k = shapeOf(getK()), v = shapeOf(getV());
  if (q.size() != 4 || k.size() != 4 || v.size() != 4)
    return emitOpError("q, k and v must be 4-d ")
           << (isSeqMajor(layout) ? "[B, S, heads, head_dim]"
                                  : "[B, heads, S, head_dim]");
  if (k != v)
    return emitOpError("k ") << str(k) << " and v " << str(v) << " differ";
  const unsigned ha = headsAxis(layout), sa = seqAxis(layout);
  if (q[0] != k[0] || q[sa] != k[sa] || q[3] != k[3])
    return emitOpError("q ") << str(q) << " and k " << str(k)
                             << " disagree on batch, sequence or head_dim";
  const int64_t heads = q[ha];
  if (k[ha] <= 0 || heads % k[ha])
    return emitOpError("query heads (")
           << heads << ") must be a multiple of KV heads (" << k[ha] << ")";
  if (auto slopes = getAlibiSlopes();
      slopes && int64_t(slopes->size()) != heads)
    return emitOpError("has ")
           << slopes->size() << " alibi_slopes for " << heads << " query heads";
  // Read signed: the accessors' unsigned values hide a negative one.
  if (auto w = getWindowAttr(); w && w.getInt() <= 0)
    return emitOpError("window must be positive, not ") << w.getInt();
  if (auto c = getChunkAttr(); c && c.getInt() <= 0)
    return emitOpError("chunk must be positive, not ") << c.getInt();
  if (auto c = getSoftcapAttr(); c && !(c.getValueAsDouble() > 0))
    return emitOpError("softcap must be positive, not ")
           << c.getValueAsDouble();
  if (getSinks()) {
    auto sinks = shapeOf(getSinks());
    int64_t n = 1;
    for (int64_t d : sinks)
      n *= d;
    if (n != heads)
      return emitOpError("sinks ")
             << str(sinks) << " must hold one logit per query head (" << heads
             << ")";
  }
  if (getLse() &&
      failed(expectShape(*this, getLse(), attentionRows(q, layout), "lse")))
    return failure();
  return expectShape(*this, getY(), q, "result");
}

LogicalResult ReluOp::verify() { return verifyElementwise(*this); }
LogicalResult SiluOp::verify() { return verifyElementwise(*this); }
LogicalResult SigmoidOp::verify() { return verifyElementwise(*this); }
LogicalResult SoftplusOp::verify() { return verifyElementwise(*this); }
LogicalResult ExpOp::verify() { return verifyElementwise(*this); }

LogicalResult GeluOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError("approximate must be none or tanh, not ")
           << getApproximate();
  return verifyElementwise(*this);
}

LogicalResult SoftcapOp::verify() {
  if (!(getCap().convertToDouble() > 0))
    return emitOpError("cap must be positive, not ")
           << getCap().convertToDouble();
  return verifyElementwise(*this);
}

LogicalResult MoeOp::verify() {
  if (failed(expectStatic(*this)))
    return failure();
  auto x = shapeOf(getX()), r = shapeOf(getRouter()), gu = shapeOf(getGateUp()),
       d = shapeOf(getDown());
  if (getWLayout() != "out_in" && getWLayout() != "in_out")
    return emitOpError("w_layout must be out_in or in_out, not ")
           << getWLayout();
  const bool inOut = getWLayout() == "in_out";
  if (x.empty() || r.size() != 2 || gu.size() != 3 || d.size() != 3)
    return emitOpError("expects x [..., H], router [E, H], gate_up [E, 2I, "
                       "H] and down [E, H, I] (in_out: [E, H, 2I], [E, I, H])");
  const int64_t H = x.back(), E = r[0], I = inOut ? d[1] : d[2];
  const SmallVector<int64_t> wantGu = inOut ? SmallVector<int64_t>{E, H, 2 * I}
                                            : SmallVector<int64_t>{E, 2 * I, H};
  const SmallVector<int64_t> wantD =
      inOut ? SmallVector<int64_t>{E, I, H} : SmallVector<int64_t>{E, H, I};
  if (r[1] != H || ArrayRef<int64_t>(gu) != ArrayRef<int64_t>(wantGu) ||
      ArrayRef<int64_t>(d) != ArrayRef<int64_t>(wantD))
    return emitOpError("router ")
           << str(r) << ", gate_up " << str(gu) << " and down " << str(d)
           << " do not form E experts of " << (inOut ? "[H, 2I]" : "[2I, H]")
           << " and " << (inOut ? "[I, H]" : "[H, I]") << " for H = " << H;
  if (getTopK() < 1 || getTopK() > E)
    return emitOpError("top_k must be in [1, ") << E << "], not " << getTopK();
  if (getBias() && failed(expectShape(*this, getBias(), {E}, "bias")))
    return failure();
  if (getRouterBias() &&
      failed(expectShape(*this, getRouterBias(), {E}, "router_bias")))
    return failure();
  if (getGateUpBias() &&
      failed(expectShape(*this, getGateUpBias(), {E, 2 * I}, "gate_up_bias")))
    return failure();
  if (getDownBias() &&
      failed(expectShape(*this, getDownBias(), {E, H}, "down_bias")))
    return failure();
  if (double a = getAlpha().convertToDouble(); !(a > 0))
    return emitOpError("alpha must be positive, not ") << a;
  if (double l = getLimit().convertToDouble(); !(l >= 0))
    return emitOpError("limit must be positive (or 0: no clamp), not ") << l;
  if (getRouting() != "softmax" && getRouting() != "softmax_renorm" &&
      getRouting() != "sigmoid" && getRouting() != "sigmoid_renorm")
    return emitOpError("routing must be softmax, softmax_renorm, sigmoid or "
                       "sigmoid_renorm, not ")
           << getRouting();
  const int64_t G = getGroups(), TG = getTopGroups();
  if (G < 1 || E % G != 0 || (G > 1 && E / G < 2))
    return emitOpError("groups must divide the ")
           << E << " experts into groups of at least 2, not " << G;
  if (TG < 1 || TG > G || getTopK() > TG * (E / G))
    return emitOpError("top_groups must be in [1, ")
           << G << "] and leave top_k = " << getTopK()
           << " experts to choose from, not " << TG;
  if (double scale = getScale().convertToDouble(); !(scale > 0))
    return emitOpError("scale must be positive, not ") << scale;
  if (getWeighInputs() && (getGateUpBias() || getDownBias()))
    return emitOpError("weigh_inputs takes experts without gate_up_bias or "
                       "down_bias");
  if (getRouterX() && getRouterX().getType() != getX().getType())
    return emitOpError("router_x must have x's type ")
           << getX().getType() << ", not " << getRouterX().getType();
  if (getExpertScale() &&
      failed(expectShape(*this, getExpertScale(), {E}, "expert_scale")))
    return failure();
  if (getActivation() != "silu" && getActivation() != "gelu_tanh")
    return emitOpError("activation must be silu or gelu_tanh, not ")
           << getActivation();
  if (getActivation() == "gelu_tanh" &&
      (getLimit().convertToDouble() != 0 || getAlpha().convertToDouble() != 1 ||
       getUpShift().convertToDouble() != 0))
    return emitOpError("gelu_tanh experts take no alpha, limit or up_shift");
  return verifyElementwise(*this);
}

LogicalResult XieluOp::verify() {
  if (failed(verifyElementwise(*this)))
    return failure();
  for (auto [a, what] :
       {std::pair(getAlphaP(), "alpha_p"), std::pair(getAlphaN(), "alpha_n")})
    if (failed(expectShape(*this, a, {1}, what)))
      return failure();
  return success();
}

LogicalResult CausalConvOp::verify() {
  if (failed(verifyElementwise(*this)))
    return failure();
  auto x = shapeOf(getX()), w = shapeOf(getW());
  if (x.size() != 3 || w.size() != 3 || w[0] != x[1] || w[1] != 1 || w[2] < 1)
    return emitOpError("expects x [B, C, S] and w [C, 1, K], not ")
           << str(x) << " and " << str(w);
  if (getBias())
    return expectShape(*this, getBias(), {x[1]}, "bias");
  return success();
}

/// mt.gated_delta's and mt.gated_linear's shapes.
template <class ScanOp> static LogicalResult verifyGatedScan(ScanOp op) {
  if (failed(expectStatic(op)))
    return failure();
  auto q = shapeOf(op.getQ()), k = shapeOf(op.getK()), v = shapeOf(op.getV());
  if (q.size() != 4 || k != q || v.size() != 4 || v[0] != q[0] ||
      v[1] != q[1] || v[2] % q[2] != 0)
    return op.emitOpError("expects q and k [B, S, Hk, Dk] and v [B, S, Hv, "
                          "Dv] with Hv a multiple of Hk, not ")
           << str(q) << ", " << str(k) << " and " << str(v);
  SmallVector<int64_t> heads{v[0], v[1], v[2]}, keys{v[0], v[1], v[2], q[3]};
  // g: a decay per head, or per key channel (Kimi Delta Attention).
  if (shapeOf(op.getG()) != ArrayRef<int64_t>(keys) &&
      failed(expectShape(op, op.getG(), heads, "g")))
    return failure();
  if (failed(expectShape(op, op.getBeta(), heads, "beta")) ||
      failed(expectShape(op, op.getO(), v, "o")))
    return failure();
  return success();
}

LogicalResult GatedDeltaOp::verify() { return verifyGatedScan(*this); }
LogicalResult GatedLinearOp::verify() { return verifyGatedScan(*this); }

LogicalResult SwigluOp::verify() {
  if (failed(verifyElementwise(*this)))
    return failure();
  return expectShape(*this, getUp(), shapeOf(getGate()), "up");
}

LogicalResult AddOp::verify() { return verifyBroadcast(*this); }
LogicalResult MulOp::verify() { return verifyBroadcast(*this); }
LogicalResult ScaleOp::verify() { return verifyElementwise(*this); }

LogicalResult EmbedOp::verify() {
  if (failed(expectStatic(*this)))
    return failure();
  auto table = shapeOf(getTable());
  if (table.size() != 2)
    return emitOpError("table must be 2-d [vocab, dim]");
  SmallVector<int64_t> y(shapeOf(getIds()));
  y.push_back(table[1]);
  return expectShape(*this, getY(), y, "result");
}

LogicalResult PositionEmbedOp::verify() {
  if (failed(expectStatic(*this)))
    return failure();
  auto table = shapeOf(getTable()), y = shapeOf(getY());
  if (table.size() != 2 || y.size() != 2 || y[1] != table[1])
    return emitOpError("maps a [P, D] table to [S, D]");
  if (getOffset() < 0 || getOffset() + y[0] > table[0])
    return emitOpError("positions ")
           << getOffset() << ".." << getOffset() + y[0] - 1
           << " exceed the table's " << table[0] << " rows";
  return success();
}

LogicalResult CrossEntropyOp::verify() {
  if (failed(expectStatic(*this)))
    return failure();
  auto logits = shapeOf(getLogits());
  if (logits.empty() || shapeOf(getTargets()) != logits.drop_back())
    return emitOpError("targets ")
           << str(shapeOf(getTargets())) << " must be the logits' shape "
           << str(logits) << " without the vocab dim";
  return success();
}

LogicalResult ReshapeOp::verify() {
  if (failed(expectStatic(*this)))
    return failure();
  auto x = cast<RankedTensorType>(getX().getType());
  auto y = cast<RankedTensorType>(getY().getType());
  if (x.getNumElements() != y.getNumElements())
    return emitOpError("cannot reshape ")
           << str(x.getShape()) << " into " << str(y.getShape());
  return success();
}

// `part` is a range [start, start + n) of `whole` along `axis`, the same
// off it (mt.slice's result in x, mt.pad's x in its result).
static LogicalResult verifyRange(Operation *op, Value whole, Value part,
                                 int64_t axis, int64_t start) {
  if (failed(expectStatic(op)))
    return failure();
  auto w = shapeOf(whole), p = shapeOf(part);
  if (w.size() != p.size() || axis < 0 ||
      axis >= static_cast<int64_t>(w.size()))
    return op->emitOpError("axis ")
           << axis << " is out of range, or ranks differ";
  for (size_t k = 0; k < w.size(); ++k)
    if (static_cast<int64_t>(k) != axis && w[k] != p[k])
      return op->emitOpError("shapes ")
             << str(p) << " and " << str(w) << " differ off axis " << axis;
  if (start < 0 || start + p[axis] > w[axis])
    return op->emitOpError("range ")
           << start << ".." << start + p[axis] - 1 << " exceeds dim " << axis
           << " of size " << w[axis];
  return success();
}

LogicalResult SliceOp::verify() {
  return verifyRange(*this, getX(), getY(), getAxis(), getStart());
}

LogicalResult ConcatOp::verify() {
  if (failed(expectStatic(*this)))
    return failure();
  auto y = shapeOf(getY());
  const int64_t axis = getAxis();
  if (getXs().empty() || axis < 0 || axis >= static_cast<int64_t>(y.size()))
    return emitOpError("needs operands and an axis in range, not ") << axis;
  int64_t total = 0;
  for (Value x : getXs()) {
    auto s = shapeOf(x);
    for (size_t k = 0; k < y.size(); ++k)
      if (s.size() != y.size() ||
          (static_cast<int64_t>(k) != axis && s[k] != y[k]))
        return emitOpError("operand ") << str(s) << " differs from the result "
                                       << str(y) << " off axis " << axis;
    total += s[axis];
  }
  if (total != y[axis])
    return emitOpError("operands sum to ")
           << total << " along axis " << axis << ", not " << y[axis];
  return success();
}

LogicalResult PadOp::verify() {
  return verifyRange(*this, getY(), getX(), getAxis(), getStart());
}

LogicalResult TransposeOp::verify() {
  if (failed(expectStatic(*this)))
    return failure();
  auto x = shapeOf(getX());
  ArrayRef<int64_t> perm = getPerm();
  if (perm.size() != x.size())
    return emitOpError("perm has ")
           << perm.size() << " entries for rank " << x.size();
  SmallVector<bool> seen(x.size(), false);
  SmallVector<int64_t> y;
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(x.size()) || seen[p])
      return emitOpError("perm is not a permutation");
    seen[p] = true;
    y.push_back(x[p]);
  }
  return expectShape(*this, getY(), y, "result");
}

#define GET_OP_CLASSES
#include "ir/MtOps.cpp.inc"
