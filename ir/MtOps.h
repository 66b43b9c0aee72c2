//===- MtOps.h - ops of the mt dialect --------------------------*- C++ -*-===//
#ifndef MT_IR_MTOPS_H
#define MT_IR_MTOPS_H

#include "ir/MtDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mt {
// Custom directive of mt.apply: a parenthesized list of param symbols.
mlir::ParseResult parseSymbolList(mlir::OpAsmParser &parser,
                                  mlir::ArrayAttr &symbols);
void printSymbolList(mlir::OpAsmPrinter &p, mlir::Operation *op,
                     mlir::ArrayAttr symbols);
} // namespace mt

#define GET_OP_CLASSES
#include "ir/MtOps.h.inc"

#endif // MT_IR_MTOPS_H
