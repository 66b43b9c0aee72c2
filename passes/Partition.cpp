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
    };
    SmallVector<Group> groups;
    for (Application &a : *apps) {
      StringRef kind = a.tmpl.getKind();
      int64_t elems = 0;
      for (ParamOp p : a.params)
        elems += elementsOf(p.getType());
      // Layers merge while the unit stays under min-unit-bytes.
      bool merge = kind == "layer" && !groups.empty() &&
                   groups.back().kind == "layer" &&
                   2 * (groups.back().elems + elems) <= minUnitBytes;
      if (!merge)
        groups.push_back({kind.str(), {}, {}, {}, 0});
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
            << " MiB budget; splitting one block across units is not "
               "supported yet";
        return signalPassFailure();
      }
      b.create<UnitOp>(module.getLoc(), name, g.kind,
                       b.getDenseI64ArrayAttr(g.applies),
                       b.getArrayAttr(g.params), IntegerAttr(),
                       DenseI64ArrayAttr(), ArrayAttr());
    }
  }
};

} // namespace
