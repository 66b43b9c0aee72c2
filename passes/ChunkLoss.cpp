//===- ChunkLoss.cpp - the head's backward over token rows in chunks ------===//
#include "passes/Passes.h"

#include "passes/RowChunk.h"

namespace mt {
#define GEN_PASS_DEF_CHUNKLOSS
#include "passes/Passes.h.inc"
} // namespace mt

using namespace mlir;
using namespace mt;

namespace {

struct ChunkLossPass : public mt::impl::ChunkLossBase<ChunkLossPass> {
  using ChunkLossBase::ChunkLossBase;

  void runOnOperation() override {
    if (tokens < 0) {
      getOperation().emitError("--loss-chunk-tokens must be positive (0: "
                               "by the logits' size), not ")
          << static_cast<int64_t>(tokens);
      return signalPassFailure();
    }
    for (TemplateOp t : getOperation().getOps<TemplateOp>())
      if (t.getKind() == "head" && t.getGradOf() && !t.getPieceOf() &&
          failed(chunk(t)))
        return signalPassFailure();
  }

  LogicalResult chunk(TemplateOp t) {
    CrossEntropyOp loss;
    t.getBlock().walk([&](CrossEntropyOp ce) { loss = ce; });
    if (!loss)
      return success(); // a head without a loss has no logits to chunk
    auto logits = cast<RankedTensorType>(loss.getLogits().getType());
    int64_t rows = cast<RankedTensorType>(loss.getTargets().getType())
                       .getNumElements();
    int64_t vocab = logits.getShape().back();
    Operation *culprit = nullptr;
    bool rowWise = succeeded(analyzeWholeRows(t, &culprit));
    int64_t chunk;
    int64_t tokens = this->tokens;
    if (tokens > 0) {
      if (!rowWise)
        return culprit->emitError("--loss-chunk-tokens: the head @")
               << t.getSymName()
               << " cannot run in chunks of tokens: this op mixes token rows";
      if (rows % tokens != 0)
        return t.emitError("--loss-chunk-tokens ")
               << tokens << " does not divide the " << rows
               << " tokens of a micro-batch (batch x seq-len); "
               << largestDivisorAtMost(rows, tokens) << " does";
      chunk = tokens;
    } else {
      if (rows * vocab <= kWholeRowElems)
        return success();
      if (!rowWise) {
        t.emitWarning("the head's logits (")
            << rows << " x " << vocab
            << ") are held whole: it cannot run in chunks of tokens because '"
            << culprit->getName() << "' mixes token rows";
        return success();
      }
      int64_t target = std::max<int64_t>(1, kWholeRowElems / vocab);
      chunk = largestDivisorAtMost(rows, target);
      if (4 * chunk < target)
        t.emitWarning("the loss runs in ")
            << rows / chunk << " chunks of " << chunk
            << " tokens: batch x seq-len = " << rows
            << " has no divisor near " << target
            << "; a sequence length with more divisors makes fewer, larger "
               "chunks";
    }
    if (chunk < rows)
      t.setRowChunk(chunk);
    return success();
  }
};

} // namespace
