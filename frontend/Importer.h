//===- Importer.h - ONNX decoder exports to mt IR ---------------*- C++ -*-===//
#ifndef MEGATRAIN_FRONTEND_IMPORTER_H
#define MEGATRAIN_FRONTEND_IMPORTER_H

#include "frontend/Const.h"
#include "frontend/GraphBuilder.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mt::onnx_import {

class OnnxFile;

struct ImportOptions {
  Bindings bindings;
  /// Split into embedding, layer templates and head (false: one "graph"
  /// template, for looking at fused idioms in isolation).
  bool discoverBlocks = true;
  /// Tie initializers holding the same data (see Ties.h).
  bool detectTies = true;
  /// Float initializers the user declares buffers: the model computes with
  /// them and never trains them. A table computed at compile time from any
  /// other initializer is refused (see checkTableSources).
  std::vector<std::string> buffers;
};

struct ImportedModel {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  /// The data of each param that has any, by symbol: initializers (read
  /// lazily from the file) and frozen tables. Absent for structure-only
  /// weights.
  std::map<std::string, ConstPtr> paramData;
  /// Float initializers the model reads only as compile-time constants
  /// (RoPE inv_freq, cos/sin caches): buffers, not trained.
  std::vector<std::string> constantInitializers;
  /// Those of rank >= 1: the model's buffers (the rest are scalars the
  /// exporter made of literals).
  std::vector<std::string> buffers;
  std::unique_ptr<OnnxFile> file; // keeps paramData's bytes mapped
  ~ImportedModel();
  ImportedModel();
  ImportedModel(ImportedModel &&);
};

/// Imports `path`; throws ImportError with a message naming the culprit.
ImportedModel importOnnx(mlir::MLIRContext &ctx, const std::string &path,
                         const ImportOptions &options);

} // namespace mt::onnx_import

#endif // MEGATRAIN_FRONTEND_IMPORTER_H
