//===- megatrain-opt.cpp - mlir-opt with only MegaTrain's dialects --------===//
//
// Registers the mt dialect, the builtin one and MegaTrain's passes, nothing
// else: this keeps the tool small and quick to link, and it is what the lit
// tests drive.
//
//===----------------------------------------------------------------------===//
#include "ir/MtDialect.h"
#include "passes/Passes.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mt::MtDialect>();
  mt::registerPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "MegaTrain optimizer driver\n", registry));
}
