//===- MtDialect.cpp - the mt dialect -------------------------------------===//
#include "ir/MtDialect.h"
#include "ir/MtOps.h"

#include "ir/MtDialect.cpp.inc"

void mt::MtDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "ir/MtOps.cpp.inc"
      >();
}
