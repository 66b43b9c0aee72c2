//===- Match.h - small matchers for idiom fusion ----------------*- C++ -*-===//
//
// Idiom fusion reads exported graphs the way a person does: "this Mul takes
// the Sigmoid of its other operand". These helpers keep each idiom file down
// to that reading: producers by op type, commutative operand matching,
// compile-time scalars, and the initializer behind a weight operand.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_FRONTEND_FUSION_MATCH_H
#define MEGATRAIN_FRONTEND_FUSION_MATCH_H

#include "frontend/Graph.h"

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mt::onnx_import {

/// v's producer when it is the (ai.onnx) op `op`, else null.
Node *producer(Value *v, const char *op);
/// v's producer when its op is one of `ops`, else null.
Node *producerOneOf(Value *v, std::initializer_list<const char *> ops);

/// An initializer that trains: neither a buffer nor the exporter's own
/// constant (its literals are rank 0).
bool isParameter(const Value *v);
/// A value the export computes from a parameter (fusion computes it at run
/// time, in the layer that reads it).
bool computedFromParameter(const Value *v);
/// The value of a one-element compile-time constant that is no parameter,
/// nor computed from one (a learned scale is no literal).
std::optional<double> constScalar(Value *v);
/// v is a one-element constant within relative tolerance `rtol` of `expected`.
bool isScalar(Value *v, double expected, double rtol = 1e-4);
/// v is a literal (a compile-time constant computed from no initializer:
/// a weight of ones at its initial value is none) with every element
/// `value`.
bool isSplat(Value *v, double value);
/// What v scales: through Mul and Div by one-element constants, whose
/// product (a divisor as its reciprocal) multiplies `factor`.
Value *peelScale(Value *v, double &factor);
/// v is computed at run time from the fed input.
inline bool isActivation(Value *v) { return v && v->fromInput; }

/// An operand that is a model weight: the initializer behind it, and
/// whether the operand is that initializer transposed (a 2-d Transpose).
struct WeightView {
  Value *param = nullptr;
  bool transposed = false;
};
std::optional<WeightView> weightView(Value *v);

/// For a two-input node, finds an operand order in which `first(a)` holds;
/// returns (a, b) or nothing.
std::optional<std::pair<Value *, Value *>>
commuted(Node *n, const std::function<bool(Value *)> &first);

/// The factors of a product: the operands of v's Mul, recursively through
/// Muls used only inside the product. `muls` collects the Mul nodes.
std::vector<Value *> productFactors(Value *v,
                                    std::vector<Node *> *muls = nullptr);

/// The nodes with `op` (ai.onnx) whose first output is still used, in
/// order; a snapshot, so fusions may add nodes while walking it.
std::vector<Node *> nodesWithOp(Graph &g, const char *op,
                                const char *domain = "");

/// The one node reading v, or null when v has zero or several users.
Node *soleUser(Value *v);

/// A primitive node right after `after` (which then points at it), named
/// `name`, with one f32 output of `shape` computed at run time.
Value *appendPrimitive(Graph &g, Node *&after, const std::string &name,
                       const char *op, std::vector<Value *> inputs,
                       const Shape &shape);

/// Creates a primitive node right after `root`, with one f32 output of
/// `shape`, and redirects every use of root's first output to it.
Node *replaceWithPrimitive(Graph &g, Node *root, const char *op,
                           std::vector<Value *> inputs, const Shape &shape);

} // namespace mt::onnx_import

#endif // MEGATRAIN_FRONTEND_FUSION_MATCH_H
