//===- Activations.cpp - ReLU, SiLU, SwiGLU, softplus and xIELU ----------===//
//
// Recognized forms (GELU has a file of its own, Gelu.cpp):
//   ReLU       Relu (OPT).
//   SiLU       x · Sigmoid(x).
//   SwiGLU     SiLU(gate) · up.
//   Sigmoid    a Sigmoid left over after those (a gate).
//   Softplus   Softplus (Laguna's gate), or Log(1 + Exp(x)) written out
//              (Kimi Linear's forget gate), also under a threshold as torch
//              exports it: Where(Greater(x, t), x, Softplus(x)) with t >= 15,
//              where the two sides differ by log1p(exp(−t)) < 4e-7.
//   xIELU      Where(Greater(x, 0), ap·x·x + beta·x,
//              (Exp(Min(x, eps)) − 1 − x) · an + beta·x) (Apertus), beta
//              and eps scalar constants; products in any association, sums
//              in either order. ap and an are one-element weights (the
//              optimizer's fold of the trained alphas' softplus), or, as
//              transformers trains them, ap = Softplus(αp) and an = beta +
//              Softplus(αn) of one-element weights (mt.xielu's `softplus`).
//
//===----------------------------------------------------------------------===//
#include "frontend/fusion/Fusion.h"

#include "frontend/fusion/Match.h"

#include <algorithm>

namespace mt::onnx_import {
namespace {

// A one-element weight's param.
Value *scalarWeight(Value *v) {
  auto w = weightView(v);
  return w && numelOf(w->param->shape) == 1 ? w->param : nullptr;
}

// An xIELU alpha: a one-element weight, or Softplus of one plus a scalar
// constant (0 for αp, beta for αn).
struct Alpha {
  Value *param = nullptr;
  bool softplus = false;
  double offset = 0;
};

Alpha alphaOf(Value *v) {
  if (Value *p = scalarWeight(v))
    return {p};
  double offset = 0;
  if (auto c = commuted(producer(v, "Add"),
                        [](Value *c) { return constScalar(c).has_value(); })) {
    offset = *constScalar(c->first);
    v = c->second;
  }
  Node *sp = producer(v, "Softplus");
  Value *p = sp ? scalarWeight(sp->in(0)) : nullptr;
  return p ? Alpha{p, true, offset} : Alpha{};
}

// c·x for a scalar constant c; returns c.
std::optional<double> linearIn(Value *v, Value *x) {
  std::vector<Value *> f = productFactors(v);
  if (f.size() != 2)
    return std::nullopt;
  for (int k = 0; k < 2; ++k)
    if (f[k] == x && constScalar(f[1 - k]))
      return constScalar(f[1 - k]);
  return std::nullopt;
}

// ap·x·x; returns ap.
Alpha quadraticIn(Value *v, Value *x) {
  std::vector<Value *> f = productFactors(v);
  if (f.size() != 3 || std::count(f.begin(), f.end(), x) != 2)
    return {};
  return alphaOf(
      *std::find_if(f.begin(), f.end(), [x](Value *a) { return a != x; }));
}

// (Exp(Min(x, eps)) − 1 − x) · an; returns an and sets eps.
Alpha eluIn(Value *v, Value *x, double &eps) {
  std::vector<Value *> f = productFactors(v);
  if (f.size() != 2)
    return {};
  for (int k = 0; k < 2; ++k) {
    Node *minusX = producer(f[k], "Sub");
    Node *minusOne = minusX ? producer(minusX->in(0), "Sub") : nullptr;
    Node *exp = minusOne ? producer(minusOne->in(0), "Exp") : nullptr;
    Node *min = exp ? producer(exp->in(0), "Min") : nullptr;
    if (!min || minusX->in(1) != x || !isScalar(minusOne->in(1), 1.0) ||
        min->inputs.size() != 2)
      continue;
    auto c = commuted(min, [](Value *m) { return constScalar(m).has_value(); });
    Alpha an = alphaOf(f[1 - k]);
    if (!c || c->second != x || !an.param)
      continue;
    eps = *constScalar(c->first);
    return an;
  }
  return {};
}

// term(a) + c·x in either order; returns term's result and sets c.
template <class Term>
Alpha plusLinear(Value *v, Value *x, double &c, Term term) {
  Node *add = producer(v, "Add");
  for (int k = 0; add && k < 2; ++k)
    if (auto lin = linearIn(add->in(1 - k), x))
      if (Alpha r = term(add->in(k)); r.param) {
        c = *lin;
        return r;
      }
  return {};
}

void fuseXielu(Graph &g, Node *where) {
  Node *gt = producer(where->in(0), "Greater");
  if (!gt || constScalar(gt->in(1)) != 0.0 || !isActivation(gt->in(0)))
    return;
  Value *x = gt->in(0);
  double betaP = 0, betaN = 0, eps = 0;
  Alpha ap = plusLinear(where->in(1), x, betaP,
                        [x](Value *t) { return quadraticIn(t, x); });
  Alpha an = plusLinear(where->in(2), x, betaN,
                        [x, &eps](Value *t) { return eluIn(t, x, eps); });
  if (!ap.param || !an.param || betaP != betaN ||
      where->out()->shape != x->shape)
    return;
  // Both alphas folded, or both through transformers' softplus.
  if (ap.softplus != an.softplus || ap.offset != 0 ||
      an.offset != (an.softplus ? betaP : 0.0))
    return;
  Node *y = replaceWithPrimitive(g, where, "mt.xielu", {x, ap.param, an.param},
                                 x->shape);
  y->setFloat("beta", betaP);
  y->setFloat("eps", eps);
  if (ap.softplus)
    y->setUnit("softplus");
}

} // namespace

void fuseActivations(Graph &g) {
  for (Node *log : nodesWithOp(g, "Log")) {
    auto one = commuted(producer(log->in(0), "Add"),
                        [](Value *c) { return isScalar(c, 1.0); });
    Node *exp = one ? producer(one->second, "Exp") : nullptr;
    if (exp && isActivation(exp->in(0)) &&
        exp->in(0)->shape == log->out()->shape)
      replaceWithPrimitive(g, log, "mt.softplus", {exp->in(0)},
                           exp->in(0)->shape);
  }
  // Softplus under torch's threshold (also xIELU's alphas, inside its Where).
  for (Node *w : nodesWithOp(g, "Where")) {
    Node *gt = producer(w->in(0), "Greater");
    Node *sp = producerOneOf(w->in(2), {"Softplus", "mt.softplus"});
    auto t = gt ? constScalar(gt->in(1)) : std::nullopt;
    if (sp && t && *t >= 15 && gt->in(0) == sp->in(0) &&
        w->in(1) == sp->in(0) && w->out()->shape == sp->out()->shape)
      g.replaceAllUses(w->out(), sp->out());
  }
  g.removeDeadNodes();
  for (Node *n : nodesWithOp(g, "Where"))
    fuseXielu(g, n);
  for (Node *n : nodesWithOp(g, "Relu"))
    if (isActivation(n->in(0)))
      replaceWithPrimitive(g, n, "mt.relu", {n->in(0)}, n->in(0)->shape);

  // SiLU, then SwiGLU over it.
  for (Node *n : nodesWithOp(g, "Mul")) {
    auto ops = commuted(n, [n](Value *s) {
      Node *sig = producer(s, "Sigmoid");
      return sig && (sig->in(0) == n->in(0) || sig->in(0) == n->in(1));
    });
    if (ops && ops->second == producer(ops->first, "Sigmoid")->in(0) &&
        isActivation(ops->second))
      replaceWithPrimitive(g, n, "mt.silu", {ops->second}, ops->second->shape);
  }
  for (Node *n : nodesWithOp(g, "Mul")) {
    auto ops = commuted(n, [](Value *s) {
      return s->producer && s->producer->op == "mt.silu" && s->users.size() == 1;
    });
    if (!ops || !isActivation(ops->second) ||
        ops->second->shape != ops->first->shape)
      continue;
    replaceWithPrimitive(g, n, "mt.swiglu",
                         {ops->first->producer->in(0), ops->second},
                         ops->first->shape);
  }
  // A Sigmoid left over is a gate of its own (Qwen2-MoE's shared expert);
  // those inside SiLUs go with their dead products first.
  g.removeDeadNodes();
  for (Node *n : nodesWithOp(g, "Sigmoid"))
    if (isActivation(n->in(0)))
      replaceWithPrimitive(g, n, "mt.sigmoid", {n->in(0)}, n->in(0)->shape);
  for (Node *n : nodesWithOp(g, "Softplus"))
    if (isActivation(n->in(0)))
      replaceWithPrimitive(g, n, "mt.softplus", {n->in(0)}, n->in(0)->shape);
}

} // namespace mt::onnx_import
