//===- ModelInfo.cpp - what the schedule passes read off the model --------===//
#include "passes/ModelInfo.h"

#include "mlir/IR/Builders.h"

using namespace mlir;

namespace mt {

FailureOr<SmallVector<Application>> applicationsOf(ModuleOp module) {
  auto models = llvm::to_vector(module.getOps<ModelOp>());
  if (models.size() != 1)
    return module.emitError("expected one mt.model, found ") << models.size();
  SymbolTable symbols(module);
  SmallVector<Application> apps;
  for (ApplyOp apply : models[0].getBlock().getOps<ApplyOp>()) {
    Application a{static_cast<int64_t>(apps.size()), apply,
                  symbols.lookup<TemplateOp>(apply.getCallee()), {}};
    for (Attribute ref : apply.getParams())
      a.params.push_back(
          symbols.lookup<ParamOp>(cast<FlatSymbolRefAttr>(ref).getValue()));
    apps.push_back(a);
  }
  if (apps.empty())
    return models[0].emitError("applies no template");
  return apps;
}

int64_t elementsOf(Type type) {
  return cast<RankedTensorType>(type).getNumElements();
}

FailureOr<HostState> hostStateOf(ModuleOp module) {
  HostState state;
  auto attr = module->getAttr(kMasterWeightsAttr);
  if (!attr)
    return state;
  auto name = dyn_cast<StringAttr>(attr);
  if (!name || (name.getValue() != "fp32" && name.getValue() != "bf16"))
    return module.emitError() << kMasterWeightsAttr << " must be \"fp32\" or "
                              << "\"bf16\", not " << attr;
  if (name.getValue() == "bf16")
    state = {true, 2, 2};
  return state;
}

ParamOp primaryOf(ParamOp p, SymbolTable &symbols) {
  if (auto tie = p.getTieAttr())
    return symbols.lookup<ParamOp>(tie.getValue());
  return p;
}

BufferOp declareBuffer(OpBuilder &b, Location loc, StringRef name,
                       StringRef space, StringRef kind, int64_t elems,
                       StringRef dtype) {
  return b.create<BufferOp>(loc, name, space, kind, elems, dtype, IntegerAttr());
}

} // namespace mt
