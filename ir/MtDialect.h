//===- MtDialect.h - the mt dialect -----------------------------*- C++ -*-===//
#ifndef MT_IR_MTDIALECT_H
#define MT_IR_MTDIALECT_H

#include "mlir/IR/Dialect.h"

#include "ir/MtDialect.h.inc"

#endif // MT_IR_MTDIALECT_H
