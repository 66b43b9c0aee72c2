//===- ShortenLifetimes.cpp - hold each value of a layer briefly ----------===//
//
// A layer's scratch is its widest cut of live values, so the order of its
// ops and what it keeps matter. Two rewrites, both free in compute:
// - every op moves to just before its first user (last op first, so chains
//   move together): mt-derive-backward recomputes a whole block before its
//   gradients, so a parallel-residual MLP's recompute would otherwise be
//   held across the attention's backward, far from its own gradients;
// - a norm of the block input whose result is read both early and late
//   (the attention's input norm: by the q/k/v projections, and by their
//   weight gradients after attention_grad) is computed again before the
//   late readers, when that shrinks the scratch: its input stays in the
//   launch's input buffer anyway, and a norm costs one pass over B·S·D
//   against attention's B·H·S²·D.
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
    }
  }
};

} // namespace
