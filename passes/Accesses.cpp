//===- Accesses.cpp - which buffers a schedule command touches ------------===//
#include "passes/Accesses.h"

#include "ir/MtOps.h"
#include "mlir/IR/Builders.h"

#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace mt {

StreamId streamOf(Operation *op) {
  StringRef s = op->getAttrOfType<StringAttr>("stream").getValue();
  if (s == "h2d")
    return StreamId::H2D;
  if (s == "compute")
    return StreamId::Compute;
  if (s == "d2h")
    return StreamId::D2H;
  return StreamId::Host;
}

StringRef streamName(StreamId s) {
  static const char *const names[] = {"h2d", "compute", "d2h", "host"};
  return names[static_cast<int>(s)];
}

SmallVector<Access> accessesOf(Operation *op) {
  SmallVector<Access> a;
  auto add = [&](Attribute ref, bool write) {
    if (ref)
      a.push_back({cast<FlatSymbolRefAttr>(ref).getValue(), write});
  };
  if (auto l = dyn_cast<LaunchOp>(op)) {
    add(l.getWeightsAttr(), false);
    for (Attribute in : l.getInputs())
      add(in, false);
    for (Attribute out : l.getOutputs())
      add(out, true);
    add(l.getGradsAttr(), true);
  } else if (auto p = dyn_cast<PackOp>(op)) {
    add(p.getIntoAttr(), true);
  } else if (auto c = dyn_cast<H2DOp>(op)) {
    add(c.getFromAttr(), false);
    add(c.getIntoAttr(), true);
  } else if (auto c = dyn_cast<D2HOp>(op)) {
    add(c.getFromAttr(), false);
    add(c.getIntoAttr(), true);
  } else if (auto lb = dyn_cast<LoadBatchOp>(op)) {
    add(lb.getIntoAttr(), true);
  } else if (auto acc = dyn_cast<AccumulateOp>(op)) {
    add(acc.getFromAttr(), false);
  }
  return a;
}

std::string describeCommand(Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  OpPrintingFlags flags;
  op->print(os, flags.useLocalScope());
  return s;
}

} // namespace mt
