//===- OpHandler.h - the opset table of ONNX op handlers --------*- C++ -*-===//
//
// One entry per (domain, op type, since-version), in the style of
// torch-mlir's ONNX lowering: a node is handled by the entry with the largest
// since-version not above the opset the model imports. An entry infers the
// node's output types and static shapes (normalizing opset differences, such
// as axes given as an attribute or as an input, into attributes) and, where
// the op can be evaluated at compile time, folds constant inputs into
// constant outputs. Adding an op is adding one entry.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_FRONTEND_OPHANDLER_H
#define MEGATRAIN_FRONTEND_OPHANDLER_H

#include "frontend/Error.h"
#include "frontend/Graph.h"

#include <string>
#include <vector>

namespace mt::onnx_import {

/// What a handler works on: one node, with its inputs' types, shapes and
/// constant values already known.
class OpContext {
public:
  explicit OpContext(Node &node) : node(node) {}

  Node &node;

  size_t numInputs() const { return node.inputs.size(); }
  bool hasInput(size_t i) const { return node.in(i) != nullptr; }
  /// Input i, which must be present.
  Value &in(size_t i) const;
  const Shape &shape(size_t i) const { return in(i).shape; }
  /// Input i's constant value; fails naming the node if it is not constant.
  const Const &constIn(size_t i, const char *what) const;
  /// Input i's one element (a scalar or a one-element tensor, known at
  /// compile time); fails naming the node otherwise.
  double scalarIn(size_t i, const char *what) const;
  /// Input i as a list of integers (a shape, axes, indices).
  std::vector<int64_t> intsIn(size_t i, const char *what) const;
  /// Normalizes an axis into [0, rank); fails if out of range.
  int64_t axis(int64_t a, int64_t rank) const;

  void setOutput(size_t i, DType dtype, Shape shape) const;

  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> format,
                          Args &&...args) const {
    fail("{}: {}", node.describe(),
         fmt::format(format, std::forward<Args>(args)...));
  }
};

struct OpHandler {
  const char *domain; // "" for ai.onnx, "com.microsoft"
  const char *op;
  int since;
  /// Sets output types and shapes; may rewrite attributes into normal form.
  void (*infer)(OpContext &);
  /// Output constants from constant inputs (all present inputs are
  /// constant when called); null when the op never folds.
  std::vector<ConstPtr> (*fold)(OpContext &);
};

/// The whole table, registered from the handler files.
const std::vector<OpHandler> &opsetTable();
/// The handler for `node` at its opset, or null when there is none.
const OpHandler *findHandler(const Node &node);

// Registration functions, one per handler file.
void addElementwiseHandlers(std::vector<OpHandler> &table);
void addTensorHandlers(std::vector<OpHandler> &table);
void addReductionHandlers(std::vector<OpHandler> &table);
void addNeuralHandlers(std::vector<OpHandler> &table);

/// The oldest opset of the default domain we import.
constexpr int64_t kMinOpset = 13;
constexpr int64_t kMaxOpset = 23;

} // namespace mt::onnx_import

#endif // MEGATRAIN_FRONTEND_OPHANDLER_H
