//===- ProgramCheck.h - validate a Program before running it -----*- C++ -*-===//
//
// The tables come from generated code; a bad index there would be a silent
// out-of-bounds write at run time. check_program() walks every table once
// and throws Error naming the entry and what is wrong. It also checks the
// ordering the deferred optimizer relies on: on the host stream, AdamW(u)
// precedes every Pack that reads u's params and every Accumulate that adds
// into them.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_EXEC_PROGRAMCHECK_H
#define MEGATRAIN_RUNTIME_EXEC_PROGRAMCHECK_H

#include "runtime/exec/Program.h"

namespace mtrt {

void check_program(const Program &p);

const char *op_name(Op op);
const char *stream_name(Stream s);

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_EXEC_PROGRAMCHECK_H
