//===- MtDialect.td - the mt dialect ----------------------------*- tablegen -*-===//
//
// The layer-block IR of MegaTrain. One dialect, three levels: graph-level
// primitives inside stateless templates, model-level params and template
// applications, and schedule-level streams, slots, transfers and events.
//
//===----------------------------------------------------------------------===//

#ifndef MT_DIALECT_TD
#define MT_DIALECT_TD

include "mlir/IR/OpBase.td"

def Mt_Dialect : Dialect {
  let name = "mt";
  let summary = "MegaTrain's layer-block IR for streamed single-GPU training";
  let description = [{
    A decoder model as stateless layer templates (weights are block arguments)
    applied once per layer, lowered step by step to a static stream schedule
    that moves each layer's weights to the device just in time.
  }];
  let cppNamespace = "::mt";
  let useDefaultAttributePrinterParser = 0;
  let useDefaultTypePrinterParser = 0;
}

class Mt_Op<string mnemonic, list<Trait> traits = []>
    : Op<Mt_Dialect, mnemonic, traits>;

#endif // MT_DIALECT_TD
