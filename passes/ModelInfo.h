//===- ModelInfo.h - what the schedule passes read off the model -*- C++ -*-===//
#ifndef MT_PASSES_MODELINFO_H
#define MT_PASSES_MODELINFO_H

#include "ir/MtOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"

namespace mt {

/// The model body's applications, with their templates and params resolved.
struct Application {
  int64_t index;
  ApplyOp op;
  TemplateOp tmpl;
  llvm::SmallVector<ParamOp> params;
};

/// The single mt.model of `module` and its applications; emits an error and
/// fails when the module has no model or more than one.
mlir::FailureOr<llvm::SmallVector<Application>>
applicationsOf(mlir::ModuleOp module);

/// Elements of a ranked tensor type.
int64_t elementsOf(mlir::Type type);

/// The param that holds `p`'s storage: its tie, or itself.
ParamOp primaryOf(ParamOp p, mlir::SymbolTable &symbols);

/// The module attribute that says how the host keeps trained params' master
/// weights and gradient accumulators: "fp32" (the default) or "bf16".
constexpr llvm::StringLiteral kMasterWeightsAttr = "mt.master_weights";

/// Host bytes per trained param, by kMasterWeightsAttr.
struct HostState {
  bool bf16Master = false;
  int64_t masterBytes = 4, gradBytes = 4;
  /// Master weights, accumulator and the fp32 Adam moments.
  int64_t bytesPerParam() const { return masterBytes + gradBytes + 8; }
};

/// The module's HostState; emits an error and fails on a value other than
/// "fp32" or "bf16".
mlir::FailureOr<HostState> hostStateOf(mlir::ModuleOp module);

/// Creates `mt.buffer` declarations before `before`.
BufferOp declareBuffer(mlir::OpBuilder &b, mlir::Location loc,
                       llvm::StringRef name, llvm::StringRef space,
                       llvm::StringRef kind, int64_t elems,
                       llvm::StringRef dtype);

} // namespace mt

#endif // MT_PASSES_MODELINFO_H
