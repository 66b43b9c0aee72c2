//===- Softcap.cpp - soft-capping: a · tanh(b · x) ------------------------===//
//
// Recognized form: Tanh of an activation x scaled by one-element constants
// (Mul or Div, any number, either side), the Tanh's output scaled likewise:
// a · tanh(b · x). With cap = |a| it is cap · tanh(s / cap) for s = a·b · x,
// so it becomes mt.softcap {cap} of x, behind an mt.scale by a·b unless
// that is 1 to float precision (30 and 1/30 as exported constants). Gemma 2
// caps its logits so (30 · tanh(logits / 30)); a bare Tanh is the cap 1. Runs
// after the attention idiom, which folds a soft cap of the attention scores
// into mt.attention itself.
//
//===----------------------------------------------------------------------===//
#include "frontend/fusion/Fusion.h"

#include "frontend/fusion/Match.h"

#include <cmath>

namespace mt::onnx_import {
namespace {

// The last of the constant scalings that alone read v, and their product
// `factor`; v's producer when none does.
Node *outerScale(Value *v, double &factor) {
  Node *last = v->producer;
  for (Node *u = soleUser(v); u; u = soleUser(v)) {
    bool isDiv = u->op == "Div" && u->domain.empty() && u->in(0) == v;
    bool isMul = u->op == "Mul" && u->domain.empty();
    Value *other = isDiv   ? u->in(1)
                   : isMul ? (u->in(0) == v ? u->in(1) : u->in(0))
                           : nullptr;
    std::optional<double> c = constScalar(other);
    if (!c || other == v || u->out()->shape != v->shape)
      break;
    factor = isDiv ? factor / *c : factor * *c;
    last = u;
    v = u->out();
  }
  return last;
}

void fuseOne(Graph &g, Node *tanh) {
  double inner = 1.0, outer = 1.0;
  Value *x = peelScale(tanh->in(0), inner);
  if (!isActivation(x) || x->shape != tanh->out()->shape)
    return;
  Node *root = outerScale(tanh->out(), outer);
  const double cap = std::abs(outer), factor = outer * inner;
  if (cap == 0 || !std::isfinite(cap) || !std::isfinite(factor))
    return;
  Value *s = x;
  if (std::abs(factor - 1.0) > 1e-6) {
    Node *scale = g.newNode("mt.scale", tanh->name, {x}, tanh);
    scale->setFloat("factor", factor);
    s = g.addOutput(scale, DType::F32, x->shape);
    s->fromInput = true;
  }
  replaceWithPrimitive(g, root, "mt.softcap", {s}, x->shape)
      ->setFloat("cap", cap);
}

} // namespace

void fuseSoftcaps(Graph &g) {
  for (Node *n : nodesWithOp(g, "Tanh"))
    fuseOne(g, n);
}

} // namespace mt::onnx_import
