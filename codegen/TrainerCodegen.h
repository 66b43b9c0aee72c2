//===- TrainerCodegen.h - the schedule as a generated trainer.cpp -*- C++ -*-===//
#ifndef MT_CODEGEN_TRAINERCODEGEN_H
#define MT_CODEGEN_TRAINERCODEGEN_H

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace mt {

/// Emits trainer.cpp for a module at the schedule level: one function per
/// template and the mtrt::Program tables (params, units, buffers, events,
/// launches, commands) that runtime/exec/Program.h describes.
mlir::FailureOr<std::string> emitTrainerSource(mlir::ModuleOp module,
                                               llvm::StringRef modelName);

/// A stable fingerprint of the plan (the simulator's prediction aside);
/// checkpoints carry it.
std::string planHash(mlir::ModuleOp module);

} // namespace mt

#endif // MT_CODEGEN_TRAINERCODEGEN_H
