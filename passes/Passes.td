//===- Passes.td - MegaTrain's passes ---------------------------*- tablegen -*-===//

#ifndef MT_PASSES_TD
#define MT_PASSES_TD

include "mlir/Pass/PassBase.td"

#endif // MT_PASSES_TD
