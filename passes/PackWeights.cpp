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
    llvm::DenseSet<Operation *> owned;
    for (UnitOp unit : module.getOps<UnitOp>()) {
      SmallVector<int64_t> offsets;
      SmallVector<Attribute> owns;
      int64_t at = 0;
      for (Attribute ref : unit.getParams()) {
        auto param =
            symbols.lookup<ParamOp>(cast<FlatSymbolRefAttr>(ref).getValue());
        offsets.push_back(at);
        at = alignUp(at + elementsOf(param.getType()), kParamAlign);
        // The master copy of a tied weight lives once, with the first unit
        // that reads it.
        ParamOp primary = primaryOf(param, symbols);
        if (owned.insert(primary).second)
          owns.push_back(FlatSymbolRefAttr::get(primary));
      }
      unit.setElems(alignUp(std::max<int64_t>(at, 1), kRegionAlign));
      unit.setOffsets(offsets);
      unit.setOwnsAttr(b.getArrayAttr(owns));
    }
  }
};

} // namespace
