//===- ShortenLifetimes.cpp - hold each value of a layer briefly ----------===//
//
// A layer's scratch is its widest cut of live values, so the order of its
// ops and what it keeps matter. Three rewrites, all but free in compute:
// - every op moves to just before its first user (last op first, so chains
//   move together): mt-derive-backward recomputes a whole block before its
//   gradients, so a parallel-residual MLP's recompute would otherwise be
//   held across the attention's backward, far from its own gradients;
// - a norm of the block input whose result is read both early and late
//   (the attention's input norm: by the q/k/v projections, and by their
//   weight gradients after attention_grad) is computed again before the
//   late readers, when that shrinks the scratch: its input stays in the
//   launch's input buffer anyway, and a norm costs one pass over B·S·D
//   against attention's B·H·S²·D;
// - the attention's output, read by attention_delta, is rebuilt from the
//   output projection's input rather than held (below).
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "passes/TemplateMemory.h"

#include "mlir/IR/Builders.h"

namespace mt {
#define GEN_PASS_DEF_SHORTENLIFETIMES
#include "passes/Passes.h.inc"
} // namespace mt

using namespace mlir;
using namespace mt;

namespace {

void sinkToFirstUse(TemplateOp t) {
  SmallVector<Operation *> ops;
  for (Operation &op : t.getBlock().without_terminator())
    ops.push_back(&op);
  for (Operation *op : llvm::reverse(ops)) {
    Operation *first = nullptr;
    for (Operation *user : op->getUsers())
      if (!first || user->isBeforeInBlock(first))
        first = user;
    if (first && first != op->getNextNode())
      op->moveBefore(first);
  }
}

// A norm computed from block arguments alone: recomputing it holds nothing.
bool recomputable(Operation &op) {
  return isa<RmsNormOp, LayerNormOp>(op) &&
         llvm::all_of(op.getOperands(),
                      [](Value v) { return isa<BlockArgument>(v); });
}

// attention_delta and attention_grad read the attention's output y, late:
// y would be held across the layer's MLP. The end of y's layout chain (the
// output projection's input) is held until that projection's weight
// gradient, just before, so y is rebuilt from it there by the inverse
// layout ops (one pass over B·S·hidden, bit-exact) when that shrinks the
// scratch.
void rebuildAttentionOutput(TemplateOp t, AttentionDeltaOp d) {
  SmallVector<Operation *> chain;
  Value end = d.getY();
  for (bool extended = true; extended;) {
    extended = false;
    for (Operation *user : end.getUsers())
      if (isa<TransposeOp, ReshapeOp>(user) && user->isBeforeInBlock(d)) {
        chain.push_back(user);
        end = user->getResult(0);
        extended = true;
        break;
      }
  }
  if (chain.empty())
    return;
  int64_t before = planTemplate(t).workspaceElems;
  OpBuilder b(d);
  SmallVector<Operation *> rebuilt;
  Value y = end;
  for (Operation *op : llvm::reverse(chain)) {
    Type to = op->getOperand(0).getType();
    if (auto tr = dyn_cast<TransposeOp>(op)) {
      SmallVector<int64_t> inverse(tr.getPerm().size());
      for (auto [i, p] : llvm::enumerate(tr.getPerm()))
        inverse[p] = int64_t(i);
      rebuilt.push_back(b.create<TransposeOp>(op->getLoc(), to, y,
                                              b.getDenseI64ArrayAttr(inverse)));
    } else {
      rebuilt.push_back(b.create<ReshapeOp>(op->getLoc(), to, y));
    }
    y = rebuilt.back()->getResult(0);
  }
  // The readers of y from d on: d and the attention_grad after it.
  Value held = d.getY();
  SmallVector<OpOperand *> late;
  for (OpOperand &use : held.getUses())
    if (!use.getOwner()->isBeforeInBlock(d))
      late.push_back(&use);
  for (OpOperand *use : late)
    use->set(y);
  if (planTemplate(t).workspaceElems < before)
    return;
  for (OpOperand *use : late)
    use->set(held);
  for (Operation *op : llvm::reverse(rebuilt))
    op->erase();
}

// Splits one recomputable op's readers in two where that shrinks the
// template's scratch the most: the later ones read a copy of the op made
// just before the first of them.
void recomputeForLateReaders(TemplateOp t, Operation *op) {
  SmallVector<OpOperand *> uses;
  for (OpOperand &use : op->getResult(0).getUses())
    uses.push_back(&use);
  llvm::sort(uses, [](OpOperand *a, OpOperand *b) {
    return a->getOwner()->isBeforeInBlock(b->getOwner());
  });
  int64_t best = planTemplate(t).workspaceElems;
  size_t bestSplit = 0;
  for (size_t k = 1; k < uses.size(); ++k) {
    if (uses[k]->getOwner() == uses[k - 1]->getOwner())
      continue;
    OpBuilder b(uses[k]->getOwner());
    Operation *copy = b.clone(*op);
    for (size_t i = k; i < uses.size(); ++i)
      uses[i]->set(copy->getResult(0));
    int64_t elems = planTemplate(t).workspaceElems;
    for (size_t i = k; i < uses.size(); ++i)
      uses[i]->set(op->getResult(0));
    copy->erase();
    if (elems < best) {
      best = elems;
      bestSplit = k;
    }
  }
  if (bestSplit == 0)
    return;
  OpBuilder b(uses[bestSplit]->getOwner());
  Operation *copy = b.clone(*op);
  for (size_t i = bestSplit; i < uses.size(); ++i)
    uses[i]->set(copy->getResult(0));
}

struct ShortenLifetimesPass
    : public mt::impl::ShortenLifetimesBase<ShortenLifetimesPass> {
  void runOnOperation() override {
    for (TemplateOp t : getOperation().getOps<TemplateOp>()) {
      if (t.getKind() != "layer")
        continue;
      sinkToFirstUse(t);
      SmallVector<Operation *> candidates;
      for (Operation &op : t.getBlock())
        if (recomputable(op))
          candidates.push_back(&op);
      for (Operation *op : candidates)
        recomputeForLateReaders(t, op);
      for (auto d : llvm::to_vector(t.getBlock().getOps<AttentionDeltaOp>()))
        rebuildAttentionOutput(t, d);
    }
  }
};

} // namespace
