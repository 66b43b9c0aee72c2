//===- ChunkMlp.cpp - a layer's row-wise stretch over token rows in chunks ===//
#include "passes/Passes.h"

#include "passes/RowChunk.h"
#include "passes/TemplateMemory.h"

#include <limits>

namespace mt {
#define GEN_PASS_DEF_CHUNKMLP
#include "passes/Passes.h.inc"
} // namespace mt

using namespace mlir;
using namespace mt;

namespace {

struct ChunkMlpPass : public mt::impl::ChunkMlpBase<ChunkMlpPass> {
  using ChunkMlpBase::ChunkMlpBase;

  void runOnOperation() override {
    if (tokens < 0) {
      getOperation().emitError("--mlp-chunk-tokens must be positive (0: by "
                               "the activations' size), not ")
          << static_cast<int64_t>(tokens);
      return signalPassFailure();
    }
    for (TemplateOp t : getOperation().getOps<TemplateOp>())
      if (t.getKind() == "layer" && failed(chunk(t)))
        return signalPassFailure();
  }

  static void mark(TemplateOp t, int64_t chunk, const RowChunking &s) {
    t.setRowChunk(chunk);
    t.setRowOps(ArrayRef<int64_t>{s.begin, s.end});
  }

  // Of the template's row-wise stretches, the chunked one that leaves the
  // least scratch (the longest of equals): by default only if it leaves
  // less than running whole, and always when `tokens` asks for chunks.
  LogicalResult chunk(TemplateOp t) {
    int64_t rows = launchRows(t);
    int64_t tokens = this->tokens;
    if (tokens > 0 && rows % tokens != 0)
      return t.emitError("--mlp-chunk-tokens ")
             << tokens << " does not divide the " << rows
             << " tokens of a micro-batch (batch x seq-len); "
             << largestDivisorAtMost(rows, tokens) << " does";
    int64_t best = tokens > 0 ? std::numeric_limits<int64_t>::max()
                              : planTemplate(t).workspaceElems;
    std::optional<std::pair<int64_t, RowChunking>> choice;
    for (const RowChunking &s : rowStretches(t)) {
      int64_t widest = s.widestRow();
      int64_t chunk = tokens;
      if (chunk == 0) {
        if (rows * widest <= kWholeRowElems)
          continue;
        chunk = largestDivisorAtMost(rows, kWholeRowElems / widest);
      }
      if (chunk >= rows)
        continue;
      mark(t, chunk, s);
      int64_t elems = planTemplate(t).workspaceElems;
      if (elems < best) {
        best = elems;
        choice = {chunk, s};
      }
    }
    t.removeRowChunkAttr();
    t.removeRowOpsAttr();
    if (!choice) {
      if (tokens > 0 && tokens < rows && t.getGradOf())
        t.emitWarning("--mlp-chunk-tokens: the layer @")
            << t.getSymName()
            << " runs whole: no stretch of it works row by row and holds "
               "anything a chunk would shrink";
      return success();
    }
    mark(t, choice->first, choice->second);
    return success();
  }
};

} // namespace
