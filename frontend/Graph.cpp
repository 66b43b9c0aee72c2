//===- Graph.cpp - the importer's working graph ---------------------------===//
#include "frontend/Graph.h"

#include "frontend/Error.h"

#include <algorithm>
#include <set>

namespace mt::onnx_import {

std::string Node::describe() const {
  std::string d = domain.empty() ? "" : domain + ".";
  return fmt::format("node '{}' ({}{}, opset {})", name, d, op, opset);
}

int64_t Node::getInt(const std::string &a, int64_t dflt) const {
  auto it = attrs.find(a);
  if (it == attrs.end())
    return dflt;
  if (it->second.kind != Attr::Int)
    fail("{}: attribute '{}' must be an int", describe(), a);
  return it->second.i;
}

double Node::getFloat(const std::string &a, double dflt) const {
  auto it = attrs.find(a);
  if (it == attrs.end())
    return dflt;
  if (it->second.kind == Attr::Int)
    return double(it->second.i);
  if (it->second.kind != Attr::Float)
    fail("{}: attribute '{}' must be a float", describe(), a);
  return it->second.f;
}

std::string Node::getString(const std::string &a,
                            const std::string &dflt) const {
  auto it = attrs.find(a);
  if (it == attrs.end())
    return dflt;
  if (it->second.kind != Attr::String)
    fail("{}: attribute '{}' must be a string", describe(), a);
  return it->second.s;
}

std::vector<int64_t> Node::getInts(const std::string &a) const {
  auto it = attrs.find(a);
  if (it == attrs.end())
    return {};
  if (it->second.kind == Attr::Int)
    return {it->second.i};
  if (it->second.kind != Attr::Ints)
    fail("{}: attribute '{}' must be a list of ints", describe(), a);
  return it->second.ints;
}

void Node::setInt(const std::string &a, int64_t v) {
  Attr &x = attrs[a];
  x = Attr();
  x.kind = Attr::Int;
  x.i = v;
}

void Node::setFloat(const std::string &a, double v) {
  Attr &x = attrs[a];
  x = Attr();
  x.kind = Attr::Float;
  x.f = v;
}

void Node::setString(const std::string &a, std::string v) {
  Attr &x = attrs[a];
  x = Attr();
  x.kind = Attr::String;
  x.s = std::move(v);
}

void Node::setInts(const std::string &a, std::vector<int64_t> v) {
  Attr &x = attrs[a];
  x = Attr();
  x.kind = Attr::Ints;
  x.ints = std::move(v);
}

void Node::setFloats(const std::string &a, std::vector<double> v) {
  Attr &x = attrs[a];
  x = Attr();
  x.kind = Attr::Floats;
  x.floats = std::move(v);
}

void Node::setUnit(const std::string &a) {
  attrs[a] = Attr();
  attrs[a].kind = Attr::Unit;
}

Value *Graph::newValue(std::string name, DType dtype, Shape shape) {
  values_.push_back(std::make_unique<Value>());
  Value *v = values_.back().get();
  v->name = name.empty() ? fmt::format("%{}", counter_++) : std::move(name);
  v->dtype = dtype;
  v->shape = std::move(shape);
  return v;
}

Node *Graph::newNode(std::string op, std::string name,
                     std::vector<Value *> inputs, Node *after) {
  auto node = std::make_unique<Node>();
  Node *n = node.get();
  n->op = std::move(op);
  n->name = name.empty() ? fmt::format("{}_{}", n->op, counter_++)
                         : std::move(name);
  n->inputs = std::move(inputs);
  for (Value *v : n->inputs)
    if (v)
      v->users.push_back(n);
  auto where = nodes_.end();
  if (after) {
    where = std::next(position_.at(after));
    n->opset = after->opset;
  }
  position_[n] = nodes_.insert(where, std::move(node));
  return n;
}

Value *Graph::addOutput(Node *node, DType dtype, Shape shape) {
  Value *v = newValue("", dtype, std::move(shape));
  v->producer = node;
  node->outputs.push_back(v);
  return v;
}

void Graph::setInput(Node *node, size_t i, Value *v) {
  if (Value *old = node->inputs[i]) {
    auto &u = old->users;
    u.erase(std::find(u.begin(), u.end(), node));
  }
  node->inputs[i] = v;
  if (v)
    v->users.push_back(node);
}

void Graph::replaceAllUses(Value *from, Value *to) {
  if (from == to)
    return;
  for (Node *user : std::vector<Node *>(from->users))
    for (size_t i = 0; i < user->inputs.size(); ++i)
      if (user->inputs[i] == from)
        setInput(user, i, to);
  for (Value *&out : outputs)
    if (out == from)
      out = to;
}

bool Graph::isUsed(const Value *v) const {
  return !v->users.empty() ||
         std::find(outputs.begin(), outputs.end(), v) != outputs.end();
}

void Graph::removeDeadNodes() {
  std::set<Node *> live;
  std::vector<Node *> work;
  for (Value *v : outputs)
    if (v->producer && live.insert(v->producer).second)
      work.push_back(v->producer);
  while (!work.empty()) {
    Node *n = work.back();
    work.pop_back();
    for (Value *v : n->inputs)
      if (v && v->producer && live.insert(v->producer).second)
        work.push_back(v->producer);
  }
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    Node *n = it->get();
    if (live.count(n)) {
      ++it;
      continue;
    }
    for (size_t i = 0; i < n->inputs.size(); ++i)
      setInput(n, i, nullptr);
    for (Value *v : n->outputs)
      v->producer = nullptr;
    position_.erase(n);
    it = nodes_.erase(it);
  }
}

} // namespace mt::onnx_import
