//===- FoldAttentionLayout.cpp - attention on the projections' layout -----===//
//
// An export swaps heads and positions on the way into attention (q, k, v
// from [B, S, heads, D] to [B, heads, S, D], with rope between for q and k)
// and back on the way out: four transposes in the forward, and their
// gradients and the recompute's four more in the backward, each a pass over
// the tensor. The attention kernels read either layout at no cost
// (runtime/kernels/HeadLayout.h), so where every input comes through such
// a transpose (rope turned to the sequence axis 1) and every reader of the
// output transposes it back, the attention takes the sequence-major tensors
// directly and the transposes go.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "ir/AttentionLayout.h"
#include "ir/MtOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

namespace mt {
#define GEN_PASS_DEF_FOLDATTENTIONLAYOUT
#include "passes/Passes.h.inc"
} // namespace mt

using namespace mlir;
using namespace mt;

namespace {

// Whether op swaps dims 1 and 2 of a 4-d tensor.
bool swapsHeadsAndPositions(Operation *op) {
  auto t = dyn_cast_or_null<TransposeOp>(op);
  return t && t.getPerm() == ArrayRef<int64_t>{0, 2, 1, 3};
}

struct FoldAttentionLayoutPass
    : public mt::impl::FoldAttentionLayoutBase<FoldAttentionLayoutPass> {
  void runOnOperation() override {
    SmallVector<AttentionOp> attentions;
    getOperation().walk([&](AttentionOp a) { attentions.push_back(a); });
    for (AttentionOp a : attentions)
      fold(a);
  }

  // Whether heads-major `v` is made from a sequence-major value: by a swap
  // of heads and positions, or by a rope (along S) over such a swap that
  // only attentions read.
  static bool foldable(Value v) {
    Operation *op = v.getDefiningOp();
    if (swapsHeadsAndPositions(op))
      return true;
    auto rope = dyn_cast_or_null<RopeOp>(op);
    return rope && rope.getSeqAxis() == 2 &&
           swapsHeadsAndPositions(rope.getX().getDefiningOp()) &&
           llvm::all_of(rope->getUsers(),
                        [](Operation *u) { return isa<AttentionOp>(u); });
  }

  void fold(AttentionOp a) {
    if (isSeqMajor(a.getLayout()) || a.getLse() || a.getY().use_empty() ||
        !llvm::all_of(a.getY().getUsers(), swapsHeadsAndPositions))
      return;
    Value inputs[] = {a.getQ(), a.getK(), a.getV()};
    if (!llvm::all_of(inputs, foldable))
      return;
    // q, k and v may be one value: each is made once.
    llvm::SetVector<Operation *> makers;
    for (Value v : inputs)
      makers.insert(v.getDefiningOp());
    llvm::DenseMap<Value, Value> seqMajor;
    for (Operation *op : makers) {
      Value v = op->getResult(0);
      if (auto rope = dyn_cast<RopeOp>(op)) {
        Value x = rope.getX().getDefiningOp()->getOperand(0);
        OpBuilder b(rope);
        auto turned =
            b.create<RopeOp>(rope.getLoc(), x.getType(), x, rope.getCos(),
                             rope.getSin(), rope.getRotaryDimAttr(),
                             b.getI64IntegerAttr(1), rope.getRotationAttr());
        seqMajor[v] = turned.getY();
      } else {
        seqMajor[v] = op->getOperand(0);
      }
    }
    Operation *out = *a.getY().getUsers().begin();
    OpBuilder b(a);
    SmallVector<Value> operands{seqMajor[a.getQ()], seqMajor[a.getK()],
                                seqMajor[a.getV()]};
    if (a.getSinks())
      operands.push_back(a.getSinks());
    Operation *folded =
        b.create(a.getLoc(), a->getName().getIdentifier(), operands,
                 {out->getResult(0).getType()}, a->getAttrs());
    folded->setAttr("layout", b.getStringAttr("bshd"));
    for (Operation *user : llvm::to_vector(a.getY().getUsers())) {
      user->getResult(0).replaceAllUsesWith(folded->getResult(0));
      user->erase();
    }
    a.erase();
    // The heads-major inputs, now read by nothing: ropes, then transposes.
    llvm::SetVector<Operation *> transposes;
    for (Operation *op : makers)
      transposes.insert(isa<RopeOp>(op) ? op->getOperand(0).getDefiningOp()
                                        : op);
    for (Operation *op : makers)
      if (isa<RopeOp>(op) && op->use_empty())
        op->erase();
    for (Operation *op : transposes)
      if (op->use_empty())
        op->erase();
  }
};

} // namespace
