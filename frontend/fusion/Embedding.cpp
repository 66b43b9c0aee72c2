//===- Embedding.cpp - token and position embeddings ----------------------===//
//
// Recognized forms (T an initializer [rows, dim]):
//   Gather(T, ids)              ids computed from the fed token ids
//   Gather(T, positions)        positions a compile-time arange(o, o+S),
//                               any leading dims of size 1
//   Slice(T, o:o+S on axis 0)   learned positions as a slice of the table
//
//===----------------------------------------------------------------------===//
#include "frontend/fusion/Fusion.h"

#include "frontend/fusion/Match.h"

#include <algorithm>

namespace mt::onnx_import {
namespace {

std::optional<WeightView> tableOf(Value *v) {
  auto view = weightView(v);
  if (!view || view->transposed || view->param->rank() != 2)
    return std::nullopt;
  return view;
}

// The offset o when every row of c (its last dim) is arange(o, o + S).
std::optional<int64_t> arangeOffset(const Const &c) {
  if (c.numel == 0 || c.shape.empty())
    return std::nullopt;
  int64_t s = c.shape.back(), o = toInt(c.at(0));
  for (int64_t i = 0; i < c.numel; ++i)
    if (c.at(i) != double(o + i % s))
      return std::nullopt;
  return o;
}

// The fed ids behind v, through integer reshapes (HF's input_ids.view()).
Value *peelIdReshapes(Value *v) {
  while (Node *r = producerOneOf(v, {"Reshape", "Squeeze", "Unsqueeze", "Flatten"})) {
    if (!isInteger(v->dtype))
      break;
    v = r->in(0);
  }
  return v;
}

// Replaces root's output by `result`, reshaped to root's shape if needed.
void replaceReshaped(Graph &g, Node *root, Node *last, Value *result) {
  if (result->shape != root->out()->shape) {
    Node *r = g.newNode("mt.reshape", root->name, {result}, last);
    result = g.addOutput(r, DType::F32, root->out()->shape);
    result->fromInput = true;
  }
  g.replaceAllUses(root->out(), result);
}

void emitPositions(Graph &g, Node *root, Value *table, int64_t offset,
                   int64_t length) {
  Shape flat{length, table->dim(1)};
  Node *pe = g.newNode("mt.position_embed", root->name, {table}, root);
  g.addOutput(pe, DType::F32, flat)->fromInput = true;
  pe->setInt("offset", offset);
  if (numelOf(root->out()->shape) == numelOf(flat))
    replaceReshaped(g, root, pe, pe->out()); // [1, S, D] and the like
  else
    g.replaceAllUses(root->out(), pe->out()); // [B, S, D]: broadcast by Adds
}

} // namespace

void fuseEmbeddings(Graph &g) {
  for (Node *n : nodesWithOp(g, "Gather")) {
    auto table = tableOf(n->in(0));
    if (!table || n->getInt("axis", 0) != 0)
      continue;
    Value *ids = n->in(1);
    if (isActivation(ids)) {
      ids = peelIdReshapes(ids);
      Shape y = ids->shape;
      y.push_back(table->param->dim(1));
      Node *e = g.newNode("mt.embed", n->name, {ids, table->param}, n);
      g.addOutput(e, DType::F32, y)->fromInput = true;
      replaceReshaped(g, n, e, e->out());
    } else if (ids->constant) {
      // Positions per batch row ([B, S], OPT's from the mask) are the same
      // rows: one [S, D] table slice, which the Adds reading it broadcast.
      auto o = arangeOffset(*ids->constant);
      int64_t s = ids->constant->shape.empty() ? 1 : ids->constant->shape.back();
      bool rows = ids->constant->numel != s;
      bool addedOnly = std::all_of(n->out()->users.begin(), n->out()->users.end(),
                                   [](Node *u) { return u->op == "Add"; });
      if (o && (!rows || addedOnly))
        emitPositions(g, n, table->param, *o, s);
    }
  }
  for (Node *n : nodesWithOp(g, "Slice")) {
    auto table = tableOf(n->in(0));
    if (!table)
      continue;
    std::vector<int64_t> start = n->getInts("starts"), step = n->getInts("steps"),
                         size = n->getInts("sizes");
    // Only a slice added to the token embeddings is a position table; other
    // slices of a weight (a fused projection split by rows) are not.
    bool addedOnly = std::all_of(n->out()->users.begin(), n->out()->users.end(),
                                 [](Node *u) { return u->op == "Add"; });
    if (step != std::vector<int64_t>{1, 1} || size[1] != table->param->dim(1) ||
        !addedOnly)
      continue;
    emitPositions(g, n, table->param, start[0], size[0]);
  }
}

} // namespace mt::onnx_import
