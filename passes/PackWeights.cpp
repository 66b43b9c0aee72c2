//===- PackWeights.cpp - layer-contiguous packed layout per unit ----------===//
#include "passes/Passes.h"

#include "passes/ModelInfo.h"
#include "mlir/IR/Builders.h"

namespace mt {
#define GEN_PASS_DEF_PACKWEIGHTS
#include "passes/Passes.h.inc"
} // namespace mt

using namespace mlir;
using namespace mt;

namespace {

// 128 elements (256 B in bf16) keep every param aligned for vector loads and
// DMA; regions are whole 4 KiB pages in bf16.
constexpr int64_t kParamAlign = 128;
constexpr int64_t kRegionAlign = 2048;

int64_t alignUp(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

struct PackWeightsPass : public mt::impl::PackWeightsBase<PackWeightsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable symbols(module);
    Builder b(module.getContext());
    // Per primary, the element ranges some unit already owns.
    llvm::DenseMap<Operation *, SmallVector<std::pair<int64_t, int64_t>>> owned;
    for (UnitOp unit : module.getOps<UnitOp>()) {
      SmallVector<int64_t> offsets;
      SmallVector<Attribute> owns;
      int64_t at = 0;
      for (auto [i, ref] : llvm::enumerate(unit.getParams())) {
        auto param =
            symbols.lookup<ParamOp>(cast<FlatSymbolRefAttr>(ref).getValue());
        // A vocabulary piece holds a part of its weight (mt-partition).
        int64_t begin = 0, n = elementsOf(param.getType());
        ParamOp primary = primaryOf(param, symbols);
        if (std::optional<ArrayRef<int64_t>> parts = unit.getParts()) {
          // Columns of an [R, C] weight count R elements each.
          int64_t scale = (*parts)[3 * i] == 2
                              ? cast<RankedTensorType>(primary.getType())
                                    .getDimSize(0)
                              : 1;
          begin = (*parts)[3 * i + 1] * scale;
          n = (*parts)[3 * i + 2];
        }
        offsets.push_back(at);
        at = alignUp(at + n, kParamAlign);
        // The master copy of a tied weight lives once, with the first unit
        // that reads it; of a weight in pieces, each part with its first.
        auto &ranges = owned[primary];
        int64_t overlap = 0;
        for (auto [lo, hi] : ranges)
          overlap += std::max<int64_t>(0, std::min(hi, begin + n) -
                                              std::max(lo, begin));
        if (overlap == 0) {
          ranges.push_back({begin, begin + n});
          owns.push_back(FlatSymbolRefAttr::get(primary));
        } else if (overlap != n) {
          unit.emitOpError("holds elements [")
              << begin << ", " << begin + n << ") of @" << primary.getSymName()
              << ", of which another unit owns only some";
          return signalPassFailure();
        }
      }
      unit.setElems(alignUp(std::max<int64_t>(at, 1), kRegionAlign));
      unit.setOffsets(offsets);
      unit.setOwnsAttr(b.getArrayAttr(owns));
    }
  }
};

} // namespace
