//===- PlanJson.h - plan.json: what inspect shows ---------------*- C++ -*-===//
#ifndef MT_CODEGEN_PLANJSON_H
#define MT_CODEGEN_PLANJSON_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/JSON.h"

#include <string>
#include <vector>

namespace mt {

/// The plan's facts for people and tools: model shape, units (params, bytes,
/// slot), the device memory plan, host memory per parameter and, when
/// mt-simulate ran, the prediction.
/// `constantInitializers` lists the float initializers the importer folded
/// as constants: they are not trained; `modelBuffers` those of rank >= 1.
llvm::json::Object
planJson(mlir::ModuleOp module, llvm::StringRef modelName,
         const std::vector<std::string> &constantInitializers,
         const std::vector<std::string> &modelBuffers);

} // namespace mt

#endif // MT_CODEGEN_PLANJSON_H
