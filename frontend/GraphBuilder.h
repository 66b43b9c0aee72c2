//===- GraphBuilder.h - ONNX model to the working graph ---------*- C++ -*-===//
#ifndef MEGATRAIN_FRONTEND_GRAPHBUILDER_H
#define MEGATRAIN_FRONTEND_GRAPHBUILDER_H

#include "frontend/Graph.h"

#include <map>
#include <memory>
#include <optional>
#include <string>

namespace mt::onnx_import {

class OnnxFile;

/// How the model's dynamic dims and extra inputs are bound.
struct Bindings {
  std::optional<int64_t> batch, seqLen;
  /// Extra graph inputs by name: "ones", "zeros" or "arange" (positions).
  /// attention_mask, position_ids and token_type_ids are bound by default.
  std::map<std::string, std::string> inputs;
};

/// Builds the graph with every shape static and every compile-time value
/// folded; throws ImportError naming the culprit on any problem.
std::unique_ptr<Graph> buildGraph(OnnxFile &file, const Bindings &bindings);

} // namespace mt::onnx_import

#endif // MEGATRAIN_FRONTEND_GRAPHBUILDER_H
