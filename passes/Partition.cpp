//===- Partition.cpp - applications into streaming units ------------------===//
#include "passes/Passes.h"

#include "passes/ModelInfo.h"
#include "mlir/IR/Builders.h"

namespace mt {
#define GEN_PASS_DEF_PARTITION
#include "passes/Passes.h.inc"
} // namespace mt

using namespace mlir;
using namespace mt;

namespace {

// Device bytes a unit costs while resident: its bf16 weights in a slot
// plus its f32 gradients in a gradient slot.
constexpr int64_t kResidentBytesPerParam = 2 + 4;

// UnitOp's part kinds (runtime/exec/Program.h's PartKind).
constexpr int64_t kWhole = 0, kRange = 1, kColumns = 2;

// Whether the template computes with param #pos stored [D, V] (an in_out
// linear).
bool storesVocabLast(Application &a, int64_t pos) {
  Value arg = a.tmpl.getParamArg(pos);
  for (Operation *user : arg.getUsers())
    if (auto l = dyn_cast<LinearOp>(user); l && l.getW() == arg)
      return l.isInOut();
  return false;
}

struct PartitionPass : public mt::impl::PartitionBase<PartitionPass> {
  using PartitionBase::PartitionBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (!module.getOps<UnitOp>().empty())
      return; // already partitioned
    auto apps = applicationsOf(module);
    if (failed(apps))
      return signalPassFailure();

    struct Group {
      std::string kind;
      SmallVector<int64_t> applies;
      SmallVector<Attribute> params;
      llvm::SmallDenseSet<Attribute> seen;
      int64_t elems = 0;
      SmallVector<int64_t> vocabRows, parts; // a vocabulary piece's
    };
    std::vector<Group> groups;
    for (Application &a : *apps) {
      StringRef kind = a.tmpl.getKind();
      if (std::optional<ArrayRef<int64_t>> bounds = a.op.getVocabPieces()) {
        // One unit per piece of vocabulary rows (mt-split-vocab).
        ArrayRef<int64_t> cut = *a.op.getVocabParams();
        for (size_t j = 0; j + 1 < bounds->size(); ++j) {
          int64_t v0 = (*bounds)[j], v1 = (*bounds)[j + 1];
          Group g{kind.str(), {a.index}, {}, {}, 0, {v0, v1}, {}};
          for (auto [i, p] : llvm::enumerate(a.params)) {
            bool sliced = llvm::is_contained(cut, int64_t(i));
            if (!sliced && (kind != "head" || j > 0))
              continue;
            int64_t n = elementsOf(p.getType());
            g.params.push_back(a.op.getParams()[i]);
            if (!sliced) {
              g.parts.append({kWhole, 0, n});
              g.elems += n;
              continue;
            }
            // Rows [v0, v1) of the [V, D] weight the template computes
            // with, in the storage of the param it reads: rows of a [V, D]
            // one, columns of a [D, V] one.
            int64_t perRow = n / (*bounds).back(), held = (v1 - v0) * perRow;
            bool vocabLast = storesVocabLast(a, i) != (p.getTie() && p.getTransposed());
            if (vocabLast)
              g.parts.append({kColumns, v0, held});
            else
              g.parts.append({kRange, v0 * perRow, held});
            g.elems += held;
          }
          groups.push_back(std::move(g));
        }
        continue;
      }
      int64_t elems = 0;
      for (ParamOp p : a.params)
        elems += elementsOf(p.getType());
      // Layers merge while the unit stays under min-unit-bytes.
      bool merge = kind == "layer" && !groups.empty() &&
                   groups.back().kind == "layer" && groups.back().vocabRows.empty() &&
                   2 * (groups.back().elems + elems) <= minUnitBytes;
      if (!merge)
        groups.push_back({kind.str(), {}, {}, {}, 0, {}, {}});
      Group &g = groups.back();
      g.applies.push_back(a.index);
      for (Attribute ref : a.op.getParams())
        if (g.seen.insert(ref).second) {
          g.params.push_back(ref);
        }
      g.elems += elems;
    }

    OpBuilder b(module.getBodyRegion());
    b.setInsertionPointToEnd(module.getBody());
    for (auto [i, g] : llvm::enumerate(groups)) {
      std::string name = "u" + std::to_string(i);
      if (gpuMemLimit > 0 && g.elems * kResidentBytesPerParam > gpuMemLimit) {
        module.emitError("unit @")
            << name << " (" << g.kind << ", applications " << g.applies.front()
            << ".." << g.applies.back() << ") needs "
            << g.elems * kResidentBytesPerParam / (1 << 20)
            << " MiB of weight and gradient slots alone, over the "
            << gpuMemLimit / (1 << 20)
            << " MiB budget; "
            << (g.kind == "layer"
                    ? "splitting a decoder layer across units is not supported"
                    : "--vocab-pieces cuts it into smaller pieces");
        return signalPassFailure();
      }
      b.create<UnitOp>(module.getLoc(), name, g.kind,
                       b.getDenseI64ArrayAttr(g.applies),
                       b.getArrayAttr(g.params), IntegerAttr(),
                       DenseI64ArrayAttr(), ArrayAttr(),
                       g.vocabRows.empty() ? DenseI64ArrayAttr()
                                           : b.getDenseI64ArrayAttr(g.vocabRows),
                       g.parts.empty() ? DenseI64ArrayAttr()
                                       : b.getDenseI64ArrayAttr(g.parts));
    }
  }
};

} // namespace
