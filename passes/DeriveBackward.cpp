//===- DeriveBackward.cpp - backward templates by reverse mode ------------===//
#include "passes/Passes.h"

#include "ir/MtOps.h"
#include "mlir/IR/Builders.h"
#include "passes/Vjp.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"

namespace mt {
#define GEN_PASS_DEF_DERIVEBACKWARD
#include "passes/Passes.h.inc"
} // namespace mt

using namespace mlir;
using namespace mt;

namespace {

// Which param positions of `tmpl` are trained: not frozen in any application.
// Every application must agree, since the template is shared.
FailureOr<SmallVector<bool>> trainedParams(TemplateOp tmpl, ModuleOp module) {
  SmallVector<bool> trained(tmpl.getNumParams(), true);
  bool seen = false;
  SymbolTable symbols(module);
  for (ModelOp model : module.getOps<ModelOp>())
    for (ApplyOp apply : model.getBlock().getOps<ApplyOp>()) {
      if (apply.getCallee() != tmpl.getSymName())
        continue;
      for (auto [i, ref] : llvm::enumerate(apply.getParams())) {
        auto param = symbols.lookup<ParamOp>(
            cast<FlatSymbolRefAttr>(ref).getValue());
        bool t = !param.getFrozen();
        if (seen && trained[i] != t)
          return apply.emitOpError("binds param #")
                 << i << " frozen in one application and trained in another";
        trained[i] = t;
      }
      seen = true;
    }
  return trained;
}

// The model's targets value feeding its loss, for the head's signature.
Type targetsType(ModuleOp module) {
  for (ModelOp model : module.getOps<ModelOp>())
    for (CrossEntropyOp ce : model.getBlock().getOps<CrossEntropyOp>())
      return ce.getTargets().getType();
  return {};
}

LogicalResult deriveBackward(TemplateOp fwd, ModuleOp module) {
  FailureOr<SmallVector<bool>> trained = trainedParams(fwd, module);
  if (failed(trained))
    return failure();
  StringRef kind = fwd.getKind();
  bool isHead = kind == "head", isEmbedding = kind == "embedding";
  if (fwd.getNumInputs() != 1 || fwd.getFunctionType().getNumResults() != 1)
    return fwd.emitOpError("must have one input and one result to be "
                           "differentiated");
  OpBuilder b(fwd->getContext());
  Location loc = fwd.getLoc();
  Type xType = fwd.getFunctionType().getInput(0);
  Type yType = fwd.getFunctionType().getResult(0);
  auto scalar = RankedTensorType::get({}, b.getF32Type());

  SmallVector<Type> inputs{xType};
  if (isHead) {
    Type targets = targetsType(module);
    if (!targets)
      return fwd.emitOpError("is a head, but the model has no loss");
    inputs.append({targets, scalar});
  } else {
    inputs.push_back(yType);
  }
  int64_t numInputs = inputs.size();
  SmallVector<Type> params(fwd.getFunctionType().getInputs().drop_front());
  inputs.append(params);
  SmallVector<Type> results;
  if (isHead)
    results.push_back(scalar);
  if (!isEmbedding)
    results.push_back(xType);
  for (auto [i, t] : llvm::enumerate(params))
    if ((*trained)[i])
      results.push_back(t);

  b.setInsertionPointAfter(fwd);
  SmallVector<int64_t> trainedIndices;
  for (auto [i, t] : llvm::enumerate(*trained))
    if (t)
      trainedIndices.push_back(i);
  auto bwd = b.create<TemplateOp>(loc, (fwd.getSymName() + ".bwd").str(), kind,
                                  b.getFunctionType(inputs, results),
                                  numInputs, FlatSymbolRefAttr::get(fwd),
                                  b.getDenseI64ArrayAttr(trainedIndices),
                                  IntegerAttr(), DenseI64ArrayAttr(), FlatSymbolRefAttr());
  SmallVector<Location> locs(inputs.size(), loc);
  Block *body = b.createBlock(&bwd.getBody(), {}, inputs, locs);

  // Recompute the forward from the block input.
  IRMapping map;
  map.map(fwd.getBlock().getArgument(0), body->getArgument(0));
  for (unsigned i = 0; i < params.size(); ++i)
    map.map(fwd.getParamArg(i), body->getArgument(numInputs + i));
  Value y;
  for (Operation &op : fwd.getBlock()) {
    if (auto yield = dyn_cast<YieldOp>(op)) {
      y = map.lookup(yield.getResults()[0]);
      break;
    }
    b.clone(op, map);
  }

  GradientBuilder grads(b);
  Value loss;
  if (isHead) {
    Value targets = body->getArgument(1), dloss = body->getArgument(2);
    loss = b.create<CrossEntropyOp>(loc, scalar, y, targets);
    OperationState st(loc, "mt.cross_entropy_grad");
    st.addOperands({y, targets, dloss});
    st.addTypes(y.getType());
    grads.addGradient(y, b.create(st)->getResult(0));
  } else {
    grads.addGradient(y, body->getArgument(1));
  }
  // Walk the recomputed forward in reverse.
  SmallVector<Operation *> forward;
  for (Operation &op : *body)
    if (op.getNumResults() && !isa<CrossEntropyOp>(op))
      forward.push_back(&op);
  for (Operation *op : llvm::reverse(forward))
    if (failed(grads.backprop(op)))
      return failure();

  SmallVector<Value> outs;
  if (isHead)
    outs.push_back(loss);
  if (!isEmbedding) {
    Value dx = grads.gradientOf(body->getArgument(0));
    if (!dx)
      return fwd.emitOpError("output does not depend on its input");
    outs.push_back(dx);
  }
  for (unsigned i = 0; i < params.size(); ++i) {
    if (!(*trained)[i])
      continue;
    Value dp = grads.gradientOf(body->getArgument(numInputs + i));
    if (!dp)
      return fwd.emitOpError("output does not depend on param #") << i;
    outs.push_back(dp);
  }
  b.create<YieldOp>(loc, outs);

  eraseUnread(*body);
  return success();
}

struct DeriveBackwardPass
    : public mt::impl::DeriveBackwardBase<DeriveBackwardPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<TemplateOp> forwards;
    for (TemplateOp t : module.getOps<TemplateOp>())
      if (!t.getGradOf() && !t.getPieceOf() && t.getKind() != "graph")
        forwards.push_back(t);
    for (TemplateOp t : forwards) {
      if (SymbolTable::lookupSymbolIn(module, (t.getSymName() + ".bwd").str()))
        continue; // already derived
      if (failed(deriveBackward(t, module)))
        return signalPassFailure();
    }
  }
};

} // namespace
