//===- Ties.h - tied weights across initializers ----------------*- C++ -*-===//
#ifndef MEGATRAIN_FRONTEND_TIES_H
#define MEGATRAIN_FRONTEND_TIES_H

#include "frontend/Graph.h"

#include <map>
#include <vector>

namespace mt::onnx_import {

struct Tie {
  Value *primary = nullptr;
  bool transposed = false;
};

/// Finds params whose data equal an earlier param's (as stored, or
/// transposed): the same weight exported twice, as torch's exporter does
/// when it folds Transpose(W) into a new initializer. The earlier param in
/// the graph's initializer order is the primary; the map is keyed by the
/// later one. Tensors whose elements are all equal never tie, and params
/// without data (structure-only models) never do either. The oracle of
/// tests/e2e follows the same rule.
std::map<Value *, Tie> findTies(const std::vector<Value *> &params);

} // namespace mt::onnx_import

#endif // MEGATRAIN_FRONTEND_TIES_H
