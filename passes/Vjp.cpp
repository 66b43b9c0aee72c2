//===- Vjp.cpp - reverse-mode rules of the mt primitives ------------------===//
//
// One rule per primitive: the backward op of MtGradOps.td that produces the
// input gradients, or a forward op when the VJP is one (scale, reshape,
// transpose). docs/primitives.md has the math behind each.
//
//===----------------------------------------------------------------------===//
#include "passes/Vjp.h"

#include "ir/AttentionLayout.h"
#include "ir/MtOps.h"
#include "mlir/IR/Builders.h"

using namespace mlir;

namespace mt {

void GradientBuilder::addGradient(Value primal, Value grad) {
  Value &slot = grads_[primal];
  if (!slot) {
    slot = grad;
    return;
  }
  slot = b_.create<AddOp>(grad.getLoc(), primal.getType(), slot, grad);
}

Operation *GradientBuilder::create(Location loc, StringRef name,
                                   ValueRange operands, TypeRange results,
                                   ArrayRef<NamedAttribute> attrs) {
  OperationState st(loc, name);
  st.addOperands(operands);
  st.addTypes(results);
  st.addAttributes(attrs);
  return b_.create(st);
}

Value GradientBuilder::sumTo(Value dy, Value primal) {
  if (dy.getType() == primal.getType())
    return dy;
  return b_.create<SumToOp>(dy.getLoc(), primal.getType(), dy);
}

LogicalResult GradientBuilder::backprop(Operation *op) {
  if (op->getNumResults() != 1)
    return success(); // terminators and multi-result ops carry no rule here
  Value dy = gradientOf(op->getResult(0));
  if (!dy)
    return success();
  Location loc = op->getLoc();
  auto attr = [&](StringRef name) {
    return NamedAttribute(b_.getStringAttr(name), op->getAttr(name));
  };
  auto typesOf = [](ValueRange vs) {
    SmallVector<Type> t;
    for (Value v : vs)
      t.push_back(v.getType());
    return t;
  };

  if (auto lin = dyn_cast<LinearOp>(op)) {
    SmallVector<Value> primals{lin.getX(), lin.getW()};
    SmallVector<NamedAttribute> attrs{attr("w_layout")};
    if (lin.getBias()) {
      primals.push_back(lin.getBias());
      attrs.push_back(b_.getNamedAttr("has_bias", b_.getUnitAttr()));
    }
    Operation *g = create(loc, "mt.linear_grad", {dy, lin.getX(), lin.getW()},
                          typesOf(primals), attrs);
    for (auto [p, d] : llvm::zip(primals, g->getResults()))
      addGradient(p, d);
    return success();
  }
  if (auto n = dyn_cast<RmsNormOp>(op)) {
    SmallVector<Value> primals{n.getX()}, operands{dy, n.getX()};
    if (n.getWeight()) {
      primals.push_back(n.getWeight());
      operands.push_back(n.getWeight());
    }
    Operation *g = create(loc, "mt.rms_norm_grad", operands, typesOf(primals),
                          {attr("eps")});
    for (auto [p, d] : llvm::zip(primals, g->getResults()))
      addGradient(p, d);
    return success();
  }
  if (auto n = dyn_cast<LayerNormOp>(op)) {
    SmallVector<Value> primals{n.getX()}, operands{dy, n.getX()};
    SmallVector<NamedAttribute> attrs{attr("eps")};
    if (n.getWeight()) {
      primals.push_back(n.getWeight());
      operands.push_back(n.getWeight());
    }
    if (n.getBias()) {
      primals.push_back(n.getBias());
      attrs.push_back(b_.getNamedAttr("has_bias", b_.getUnitAttr()));
    }
    Operation *g =
        create(loc, "mt.layer_norm_grad", operands, typesOf(primals), attrs);
    for (auto [p, d] : llvm::zip(primals, g->getResults()))
      addGradient(p, d);
    return success();
  }
  if (auto r = dyn_cast<RopeOp>(op)) {
    // The tables are frozen: only x gets a gradient.
    SmallVector<NamedAttribute> attrs{attr("rotary_dim"), attr("seq_axis")};
    if (op->getAttr("rotation"))
      attrs.push_back(attr("rotation"));
    Operation *g = create(loc, "mt.rope_grad", {dy, r.getCos(), r.getSin()},
                          {r.getX().getType()}, attrs);
    addGradient(r.getX(), g->getResult(0));
    return success();
  }
  if (auto a = dyn_cast<AttentionOp>(op)) {
    SmallVector<NamedAttribute> attrs{attr("scale")};
    for (StringRef name :
         {"alibi_slopes", "window", "chunk", "softcap", "layout"})
      if (op->getAttr(name))
        attrs.push_back(attr(name));
    SmallVector<NamedAttribute> layout;
    if (op->getAttr("layout"))
      layout.push_back(attr("layout"));
    auto q = cast<RankedTensorType>(a.getQ().getType());
    auto rows = RankedTensorType::get(
        attentionRows(q.getShape(), a.getLayout()), q.getElementType());
    Value y = a.getY(), lse = a.getLse();
    if (!lse) {
      // The forward keeps each row's log-sum-exp for attention_grad: a twin
      // with the second result takes a's place (a, now unread, goes with
      // eraseUnread; its y stays the key of dy meanwhile).
      OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPoint(a);
      SmallVector<Type> results{a.getY().getType(), rows};
      Operation *twin =
          create(loc, "mt.attention", a->getOperands(), results, a->getAttrs());
      y = twin->getResult(0);
      lse = twin->getResult(1);
      a.getY().replaceAllUsesWith(y);
    }
    Operation *delta =
        create(loc, "mt.attention_delta", {dy, y}, {rows}, layout);
    SmallVector<Value> operands{
        dy, a.getQ(), a.getK(), a.getV(), y, delta->getResult(0), lse};
    SmallVector<Value> primals{a.getQ(), a.getK(), a.getV()};
    if (a.getSinks()) {
      operands.push_back(a.getSinks());
      primals.push_back(a.getSinks());
    }
    Operation *g =
        create(loc, "mt.attention_grad", operands, typesOf(primals), attrs);
    for (auto [p, d] : llvm::zip(primals, g->getResults()))
      addGradient(p, d);
    return success();
  }
  if (auto r = dyn_cast<ReluOp>(op)) {
    Operation *g =
        create(loc, "mt.relu_grad", {dy, r.getX()}, {r.getX().getType()});
    addGradient(r.getX(), g->getResult(0));
    return success();
  }
  if (auto s = dyn_cast<SigmoidOp>(op)) {
    Operation *g =
        create(loc, "mt.sigmoid_grad", {dy, s.getX()}, {s.getX().getType()});
    addGradient(s.getX(), g->getResult(0));
    return success();
  }
  if (auto e = dyn_cast<ExpOp>(op)) { // x̄ = ȳ · y
    addGradient(e.getX(),
                b_.create<MulOp>(loc, e.getX().getType(), dy, e.getY()));
    return success();
  }
  if (auto s = dyn_cast<SoftplusOp>(op)) {
    Operation *g =
        create(loc, "mt.softplus_grad", {dy, s.getX()}, {s.getX().getType()});
    addGradient(s.getX(), g->getResult(0));
    return success();
  }
  if (auto s = dyn_cast<SiluOp>(op)) {
    Operation *g =
        create(loc, "mt.silu_grad", {dy, s.getX()}, {s.getX().getType()});
    addGradient(s.getX(), g->getResult(0));
    return success();
  }
  if (auto m = dyn_cast<MoeOp>(op)) {
    SmallVector<Value> primals{m.getX(), m.getRouter(), m.getGateUp(),
                               m.getDown()};
    SmallVector<NamedAttribute> attrs{
        attr("top_k"),
        b_.getNamedAttr("routing", m.getRoutingAttr()),
        b_.getNamedAttr("groups", m.getGroupsAttr()),
        b_.getNamedAttr("top_groups", m.getTopGroupsAttr()),
        b_.getNamedAttr("scale", m.getScaleAttr()),
        b_.getNamedAttr("w_layout", m.getWLayoutAttr()),
        b_.getNamedAttr("alpha", m.getAlphaAttr()),
        b_.getNamedAttr("limit", m.getLimitAttr()),
        b_.getNamedAttr("up_shift", m.getUpShiftAttr()),
        b_.getNamedAttr("activation", m.getActivationAttr())};
    for (StringRef unit : {"interleaved", "weigh_inputs"})
      if (op->hasAttr(unit))
        attrs.push_back(b_.getNamedAttr(unit, b_.getUnitAttr()));
    SmallVector<Value> operands{dy};
    operands.append(primals);
    // The selection bias is frozen: it selects, and gets no gradient.
    SmallVector<int32_t> operandSegments{1, 1, 1, 1, 1, m.getBias() ? 1 : 0},
        resultSegments{1, 1, 1, 1};
    if (m.getBias())
      operands.push_back(m.getBias());
    for (Value b : {m.getRouterBias(), m.getGateUpBias(), m.getDownBias(),
                    m.getRouterX(), m.getExpertScale()}) {
      operandSegments.push_back(b ? 1 : 0);
      resultSegments.push_back(b ? 1 : 0);
      if (b) {
        operands.push_back(b);
        primals.push_back(b);
      }
    }
    attrs.push_back(b_.getNamedAttr("operandSegmentSizes",
                                    b_.getDenseI32ArrayAttr(operandSegments)));
    attrs.push_back(b_.getNamedAttr("resultSegmentSizes",
                                    b_.getDenseI32ArrayAttr(resultSegments)));
    Operation *g =
        create(loc, "mt.moe_grad", operands, typesOf(primals), attrs);
    for (auto [p, d] : llvm::zip(primals, g->getResults()))
      addGradient(p, d);
    return success();
  }
  if (auto c = dyn_cast<CausalConvOp>(op)) {
    SmallVector<Value> primals{c.getX(), c.getW()};
    SmallVector<NamedAttribute> attrs;
    if (c.getBias()) {
      primals.push_back(c.getBias());
      attrs.push_back(b_.getNamedAttr("has_bias", b_.getUnitAttr()));
    }
    Operation *g = create(loc, "mt.causal_conv_grad", {dy, c.getX(), c.getW()},
                          typesOf(primals), attrs);
    for (auto [p, d] : llvm::zip(primals, g->getResults()))
      addGradient(p, d);
    return success();
  }
  if (isa<GatedDeltaOp, GatedLinearOp>(op)) {
    // q, k, v, g, beta.
    SmallVector<Value> primals(op->getOperands());
    SmallVector<Value> operands{dy};
    operands.append(primals);
    Operation *g = create(loc,
                          isa<GatedDeltaOp>(op) ? "mt.gated_delta_grad"
                                                : "mt.gated_linear_grad",
                          operands, typesOf(primals));
    for (auto [p, dp] : llvm::zip(primals, g->getResults()))
      addGradient(p, dp);
    return success();
  }
  if (auto s = dyn_cast<XieluOp>(op)) {
    SmallVector<Value> primals{s.getX(), s.getAlphaP(), s.getAlphaN()};
    SmallVector<NamedAttribute> attrs{attr("beta"), attr("eps")};
    if (s.getSoftplus())
      attrs.push_back(attr("softplus"));
    Operation *g = create(loc, "mt.xielu_grad",
                          {dy, s.getX(), s.getAlphaP(), s.getAlphaN()},
                          typesOf(primals), attrs);
    for (auto [p, d] : llvm::zip(primals, g->getResults()))
      addGradient(p, d);
    return success();
  }
  if (auto s = dyn_cast<GeluOp>(op)) {
    Operation *g = create(loc, "mt.gelu_grad", {dy, s.getX()},
                          {s.getX().getType()}, {attr("approximate")});
    addGradient(s.getX(), g->getResult(0));
    return success();
  }
  if (auto s = dyn_cast<SoftcapOp>(op)) {
    Operation *g = create(loc, "mt.softcap_grad", {dy, s.getX()},
                          {s.getX().getType()}, {attr("cap")});
    addGradient(s.getX(), g->getResult(0));
    return success();
  }
  if (auto s = dyn_cast<SwigluOp>(op)) {
    Operation *g = create(loc, "mt.swiglu_grad", {dy, s.getGate(), s.getUp()},
                          typesOf({s.getGate(), s.getUp()}));
    addGradient(s.getGate(), g->getResult(0));
    addGradient(s.getUp(), g->getResult(1));
    return success();
  }
  if (auto a = dyn_cast<AddOp>(op)) {
    addGradient(a.getLhs(), sumTo(dy, a.getLhs()));
    addGradient(a.getRhs(), sumTo(dy, a.getRhs()));
    return success();
  }
  if (auto m = dyn_cast<MulOp>(op)) {
    Operation *g = create(loc, "mt.mul_grad", {dy, m.getLhs(), m.getRhs()},
                          typesOf({m.getLhs(), m.getRhs()}));
    addGradient(m.getLhs(), g->getResult(0));
    addGradient(m.getRhs(), g->getResult(1));
    return success();
  }
  if (auto s = dyn_cast<ScaleOp>(op)) {
    addGradient(s.getX(), b_.create<ScaleOp>(loc, s.getX().getType(), dy,
                                             s.getFactorAttr()));
    return success();
  }
  if (auto e = dyn_cast<EmbedOp>(op)) {
    Operation *g = create(loc, "mt.embed_grad", {dy, e.getIds()},
                          {e.getTable().getType()});
    addGradient(e.getTable(), g->getResult(0));
    return success();
  }
  if (auto p = dyn_cast<PositionEmbedOp>(op)) {
    Operation *g = create(loc, "mt.position_embed_grad", {dy},
                          {p.getTable().getType()}, {attr("offset")});
    addGradient(p.getTable(), g->getResult(0));
    return success();
  }
  if (auto r = dyn_cast<ReshapeOp>(op)) {
    addGradient(r.getX(), b_.create<ReshapeOp>(loc, r.getX().getType(), dy));
    return success();
  }
  if (auto t = dyn_cast<TransposeOp>(op)) {
    ArrayRef<int64_t> perm = t.getPerm();
    SmallVector<int64_t> inverse(perm.size());
    for (auto [i, p] : llvm::enumerate(perm))
      inverse[p] = i;
    addGradient(t.getX(),
                b_.create<TransposeOp>(loc, t.getX().getType(), dy,
                                       b_.getDenseI64ArrayAttr(inverse)));
    return success();
  }
  if (auto s = dyn_cast<SliceOp>(op)) {
    Operation *g = create(loc, "mt.slice_grad", {dy}, {s.getX().getType()},
                          {attr("axis"), attr("start")});
    addGradient(s.getX(), g->getResult(0));
    return success();
  }
  if (auto p = dyn_cast<PadOp>(op)) {
    addGradient(p.getX(),
                b_.create<SliceOp>(loc, p.getX().getType(), dy, p.getAxisAttr(),
                                   p.getStartAttr()));
    return success();
  }
  if (auto c = dyn_cast<ConcatOp>(op)) {
    // Each operand's gradient is its range of dy.
    int64_t start = 0;
    for (Value x : c.getXs()) {
      auto type = cast<RankedTensorType>(x.getType());
      addGradient(x, b_.create<SliceOp>(loc, type, dy, c.getAxisAttr(),
                                        b_.getI64IntegerAttr(start)));
      start += type.getDimSize(c.getAxis());
    }
    return success();
  }
  return op->emitOpError("has no VJP rule");
}

void eraseUnread(Block &body) {
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
    if (!op.hasTrait<OpTrait::IsTerminator>() && op.use_empty())
      op.erase();
}

} // namespace mt
