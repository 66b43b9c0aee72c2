//===- Passes.h - MegaTrain's passes ----------------------------*- C++ -*-===//
#ifndef MT_PASSES_PASSES_H
#define MT_PASSES_PASSES_H

#include "mlir/Pass/Pass.h"

namespace mt {

/// Registers every mt pass with the global registry (for megatrain-opt).
void registerPasses();

} // namespace mt

#endif // MT_PASSES_PASSES_H
