//===- Match.cpp - small matchers for idiom fusion ------------------------===//
#include "frontend/fusion/Match.h"

#include <algorithm>
#include <cmath>

namespace mt::onnx_import {

Node *producer(Value *v, const char *op) {
  if (!v || !v->producer || v->producer->op != op ||
      !v->producer->domain.empty())
    return nullptr;
  return v->producer;
}

Node *producerOneOf(Value *v, std::initializer_list<const char *> ops) {
  for (const char *op : ops)
    if (Node *n = producer(v, op))
      return n;
  return nullptr;
}

bool isParameter(const Value *v) {
  return v->initializer && isFloat(v->dtype) && !v->buffer &&
         !v->exporterConstant && v->rank() >= 1;
}

bool computedFromParameter(const Value *v) {
  return std::any_of(v->sources.begin(), v->sources.end(), isParameter);
}

std::optional<double> constScalar(Value *v) {
  if (!v || !v->constant || v->constant->numel != 1 || isParameter(v) ||
      computedFromParameter(v))
    return std::nullopt;
  return v->constant->at(0);
}

bool isScalar(Value *v, double expected, double rtol) {
  std::optional<double> c = constScalar(v);
  return c && std::fabs(*c - expected) <= rtol * std::fabs(expected) + 1e-12;
}

bool isSplat(Value *v, double value) {
  if (!v || !v->constant || isActivation(v) || v->initializer ||
      !v->sources.empty())
    return false;
  for (int64_t i = 0; i < v->constant->numel; ++i)
    if (v->constant->at(i) != value)
      return false;
  return true;
}

Value *peelScale(Value *v, double &factor) {
  for (;;) {
    if (Node *div = producer(v, "Div"); div && constScalar(div->in(1))) {
      factor /= *constScalar(div->in(1));
      v = div->in(0);
      continue;
    }
    auto ops = commuted(producer(v, "Mul"),
                        [](Value *c) { return constScalar(c).has_value(); });
    if (!ops)
      return v;
    factor *= *constScalar(ops->first);
    v = ops->second;
  }
}

std::optional<WeightView> weightView(Value *v) {
  if (!v)
    return std::nullopt;
  if (v->initializer && isFloat(v->dtype))
    return WeightView{v, false};
  // A storage cast (f16 weights computed in f32) keeps the weight.
  if (Node *c = producerOneOf(v, {"Cast", "Identity"}))
    return weightView(c->in(0));
  if (Node *t = producer(v, "Transpose")) {
    auto inner = weightView(t->in(0));
    if (inner && t->in(0)->rank() == 2 &&
        t->getInts("perm") == std::vector<int64_t>{1, 0})
      return WeightView{inner->param, !inner->transposed};
  }
  // Reshapes back to the weight's own shape (Unsqueeze of a Squeeze, as an
  // export without the ONNX optimizer writes a Conv's weight) keep it.
  Value *s = v;
  while (Node *r = producerOneOf(s, {"Reshape", "Squeeze", "Unsqueeze"}))
    s = r->in(0);
  if (auto inner = s != v ? weightView(s) : std::nullopt;
      inner && !inner->transposed && inner->param->shape == v->shape)
    return inner;
  return std::nullopt;
}

std::optional<std::pair<Value *, Value *>>
commuted(Node *n, const std::function<bool(Value *)> &first) {
  if (!n || n->inputs.size() != 2 || !n->in(0) || !n->in(1))
    return std::nullopt;
  if (first(n->in(0)))
    return std::make_pair(n->in(0), n->in(1));
  if (first(n->in(1)))
    return std::make_pair(n->in(1), n->in(0));
  return std::nullopt;
}

static void collectFactors(Value *v, bool root, std::vector<Value *> &out,
                           std::vector<Node *> *muls) {
  Node *m = producer(v, "Mul");
  if (m && (root || v->users.size() == 1)) {
    if (muls)
      muls->push_back(m);
    collectFactors(m->in(0), false, out, muls);
    collectFactors(m->in(1), false, out, muls);
    return;
  }
  out.push_back(v);
}

std::vector<Value *> productFactors(Value *v, std::vector<Node *> *muls) {
  std::vector<Value *> out;
  collectFactors(v, true, out, muls);
  return out;
}

std::vector<Node *> nodesWithOp(Graph &g, const char *op, const char *domain) {
  std::vector<Node *> out;
  for (auto &n : g.nodes())
    if (n->op == op && n->domain == domain && !n->outputs.empty() &&
        g.isUsed(n->out()))
      out.push_back(n.get());
  return out;
}

Node *soleUser(Value *v) {
  return v && v->users.size() == 1 ? v->users[0] : nullptr;
}

Value *appendPrimitive(Graph &g, Node *&after, const std::string &name,
                       const char *op, std::vector<Value *> inputs,
                       const Shape &shape) {
  after = g.newNode(op, name, std::move(inputs), after);
  Value *y = g.addOutput(after, DType::F32, shape);
  y->fromInput = true;
  return y;
}

Node *replaceWithPrimitive(Graph &g, Node *root, const char *op,
                           std::vector<Value *> inputs, const Shape &shape) {
  Node *n = root;
  g.replaceAllUses(root->out(), appendPrimitive(g, n, root->name, op,
                                                std::move(inputs), shape));
  return n;
}

} // namespace mt::onnx_import
