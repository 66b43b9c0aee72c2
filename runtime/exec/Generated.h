//===- Generated.h - what a generated trainer.cpp includes ------*- C++ -*-===//
//
// The one header of generated code: the plan tables, the kernel interface,
// the trainer's entry point, and small helpers the emitted functions use.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_EXEC_GENERATED_H
#define MEGATRAIN_RUNTIME_EXEC_GENERATED_H

#include "runtime/exec/DeviceKernels.h"
#include "runtime/exec/Program.h"

#include <cstdint>
#include <initializer_list>
#include <stdexcept>

namespace mtrt {

/// Runs the trainer for `program` (flags, data, training loop, checkpoints).
int trainer_main(int argc, char **argv, const Program *program);

namespace codegen {

/// The broadcast of two static shapes, built once per call site.
inline Broadcast broadcast(std::initializer_list<int64_t> lhs,
                           std::initializer_list<int64_t> rhs) {
  Broadcast bc{};
  if (!cpu::make_broadcast(bc, lhs.begin(), static_cast<int>(lhs.size()),
                           rhs.begin(), static_cast<int>(rhs.size())))
    throw std::logic_error("generated code: shapes do not broadcast");
  return bc;
}

} // namespace codegen
} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_EXEC_GENERATED_H
