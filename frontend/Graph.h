//===- Graph.h - the importer's working graph -------------------*- C++ -*-===//
//
// ONNX nodes after shape inference (every shape static once batch and
// sequence are bound), rewritten in place by idiom fusion into mt primitives
// (nodes whose op starts with "mt."). Nodes are kept in topological order;
// a rewrite appends its new node right after the one it replaces, which keeps
// the order valid because a fused node's inputs all precede its root.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_FRONTEND_GRAPH_H
#define MEGATRAIN_FRONTEND_GRAPH_H

#include "frontend/Const.h"

#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace onnx {
class GraphProto;
class TensorProto;
} // namespace onnx

namespace mt::onnx_import {

struct Node;

/// An attribute value, normalized across opsets by the handlers.
struct Attr {
  enum Kind {
    Int,
    Float,
    String,
    Ints,
    Floats,
    Tensor,
    Graph,
    Unit,
    Other
  } kind = Other;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  ConstPtr tensor; // a Tensor attribute's value, decoded when the graph is built
  const onnx::GraphProto *graph = nullptr; // a Graph attribute (a Loop's body)
};

struct Value {
  std::string name;
  DType dtype = DType::Undefined;
  Shape shape;
  Node *producer = nullptr;
  std::vector<Node *> users;
  /// The initializer this value is (a candidate weight), or null.
  const onnx::TensorProto *initializer = nullptr;
  /// Set when the value is known at compile time (folded or an initializer
  /// with data).
  ConstPtr constant;
  /// The float initializers a folded value was computed from: a table made
  /// of it freezes them (checkTableSources in Importer.cpp), and only a
  /// value without any is a literal, which an idiom may drop.
  std::vector<Value *> sources;
  /// A folded ONNX sequence (dtype: its tensors'); sequences and loops are
  /// evaluated at import and never reach the model (ControlFlow.h).
  std::shared_ptr<const std::vector<ConstPtr>> sequence;
  /// A sequence of activations: its tensors (see lowerActivationSequence).
  std::vector<Value *> pieces;
  bool isGraphInput = false;
  /// An initializer declared a buffer (torch's signature, --buffers): never
  /// trained, even where the model reads it as a weight.
  bool buffer = false;
  /// An initializer of the exporter's own (torch's signature, present,
  /// names it neither parameter nor buffer): a literal or an optimizer's
  /// fold, never a parameter reached through a computation.
  bool exporterConstant = false;
  /// Computed from the fed input at run time (an activation).
  bool fromInput = false;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t dim(int64_t i) const { return shape[i < 0 ? i + rank() : i]; }
  int64_t numel() const { return numelOf(shape); }
};

struct Node {
  std::string op;     // ONNX op type, or "mt.<primitive>" once fused
  std::string domain; // "" for ai.onnx
  std::string name;   // the ONNX node name (or a made-up one), for errors
  int64_t opset = 0;  // the domain's opset the model imports
  std::vector<Value *> inputs;  // null for an omitted optional input
  std::vector<Value *> outputs;
  std::map<std::string, Attr> attrs;
  bool dead = false;

  Value *in(size_t i) const { return i < inputs.size() ? inputs[i] : nullptr; }
  Value *out(size_t i = 0) const { return outputs[i]; }
  bool isPrimitive() const { return op.rfind("mt.", 0) == 0; }
  /// "node 'name' (Op, opset N)": how errors name a node.
  std::string describe() const;

  bool has(const std::string &a) const { return attrs.count(a) != 0; }
  int64_t getInt(const std::string &a, int64_t dflt) const;
  double getFloat(const std::string &a, double dflt) const;
  std::string getString(const std::string &a, const std::string &dflt) const;
  std::vector<int64_t> getInts(const std::string &a) const;
  void setInt(const std::string &a, int64_t v);
  void setFloat(const std::string &a, double v);
  void setString(const std::string &a, std::string v);
  void setInts(const std::string &a, std::vector<int64_t> v);
  void setFloats(const std::string &a, std::vector<double> v);
  /// A flag (a primitive's unit attribute): set by being present.
  void setUnit(const std::string &a);
};

class Graph {
public:
  Value *newValue(std::string name, DType dtype, Shape shape);
  /// A new node placed right after `after` in the order (at the end if null).
  Node *newNode(std::string op, std::string name, std::vector<Value *> inputs,
                Node *after);
  /// Adds a fresh output value to `node`.
  Value *addOutput(Node *node, DType dtype, Shape shape);
  /// Points every user of `from` (and graph outputs) at `to`.
  void replaceAllUses(Value *from, Value *to);
  void setInput(Node *node, size_t i, Value *v);
  /// Whether any node reads v or v is a graph output.
  bool isUsed(const Value *v) const;
  /// Marks nodes whose outputs reach no graph output dead and drops them.
  void removeDeadNodes();

  std::list<std::unique_ptr<Node>> &nodes() { return nodes_; }
  std::vector<Value *> inputs;  // activation inputs (token ids)
  std::vector<Value *> outputs; // logits
  std::map<std::string, Value *> byName;

private:
  std::list<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<Value>> values_;
  std::map<Node *, std::list<std::unique_ptr<Node>>::iterator> position_;
  int64_t counter_ = 0;
};

} // namespace mt::onnx_import

#endif // MEGATRAIN_FRONTEND_GRAPH_H
