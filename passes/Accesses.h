//===- Accesses.h - which buffers a schedule command touches ----*- C++ -*-===//
#ifndef MT_PASSES_ACCESSES_H
#define MT_PASSES_ACCESSES_H

#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

namespace mt {

enum class StreamId { H2D = 0, Compute = 1, D2H = 2, Host = 3 };
constexpr int kNumStreams = 4;

/// The stream a command runs on (its `stream` attribute).
StreamId streamOf(mlir::Operation *op);
llvm::StringRef streamName(StreamId s);

struct Access {
  llvm::StringRef buffer;
  bool write;
};

/// The buffers `op` reads and writes. Host-private state (master weights,
/// moments, gradient accumulators) is left out: only the host stream ever
/// touches it.
llvm::SmallVector<Access> accessesOf(mlir::Operation *op);

/// A one-line description of a command for diagnostics.
std::string describeCommand(mlir::Operation *op);

} // namespace mt

#endif // MT_PASSES_ACCESSES_H
