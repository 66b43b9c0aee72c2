//===- Emit.h - blocks to mt IR ---------------------------------*- C++ -*-===//
#ifndef MEGATRAIN_FRONTEND_EMIT_H
#define MEGATRAIN_FRONTEND_EMIT_H

#include "frontend/BlockDiscovery.h"
#include "frontend/Ties.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace mt::onnx_import {

/// Emits the params, one template per distinct block signature, and (for a
/// model) the mt.model that applies them in order and takes the loss.
mlir::OwningOpRef<mlir::ModuleOp> emitModule(mlir::MLIRContext &ctx,
                                             const std::vector<Block> &blocks,
                                             const std::map<Value *, Tie> &ties,
                                             const std::string &source);

} // namespace mt::onnx_import

#endif // MEGATRAIN_FRONTEND_EMIT_H
