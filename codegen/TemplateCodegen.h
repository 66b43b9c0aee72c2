//===- TemplateCodegen.h - a template as a C++ function ---------*- C++ -*-===//
#ifndef MT_CODEGEN_TEMPLATECODEGEN_H
#define MT_CODEGEN_TEMPLATECODEGEN_H

#include "ir/MtOps.h"

#include <string>

namespace mt {

/// The C++ function name of a template ("layer.bwd" -> "t_layer_bwd").
std::string templateFunctionName(llvm::StringRef symbol);

/// Emits `static void NAME(const mtrt::LaunchArgs &a)`: one DeviceKernels
/// call per primitive with static shapes, values at the scratch offsets of
/// planTemplate, param gradients accumulated into the gradient slot.
/// Fails (with a diagnostic on the op) for an op it cannot lower.
mlir::FailureOr<std::string> emitTemplateFunction(TemplateOp tmpl,
                                                  int64_t &workspaceElems);

} // namespace mt

#endif // MT_CODEGEN_TEMPLATECODEGEN_H
