//===- Activations.cpp - ReLU, GELU, SiLU, SwiGLU, softplus and xIELU -----===//
//
// Recognized forms:
//   ReLU       Relu (OPT).
//   GELU erf   0.5 · x · (1 + Erf(x / √2)), x / √2 also as x · (1/√2), the
//              product in any association; Gelu (opset 20, approximate
//              none); com.microsoft Gelu.
//   GELU tanh  0.5 · x · (1 + Tanh(√(2/π) · (x + 0.044715 · x³))), x³ as
//              Pow(x, 3) or x·x·x, or the argument as √(2/π) · x ·
//              (1 + 0.044715 · x · x) (BLOOM); Gelu (opset 20, approximate
//              tanh); com.microsoft FastGelu without bias.
//   SiLU       x · Sigmoid(x).
//   SwiGLU     SiLU(gate) · up.
//   Sigmoid    a Sigmoid left over after those (a gate).
//   Softplus   Softplus (Laguna's gate), also as torch exports its threshold:
//              Where(Greater(x, t), x, Softplus(x)) with t >= 15, where the
//              two sides differ by log1p(exp(−t)) < 4e-7.
//   xIELU      Where(Greater(x, 0), ap·x·x + beta·x,
//              (Exp(Min(x, eps)) − 1 − x) · an + beta·x) (Apertus), ap and an
//              one-element weights (the export's softplus of the trained
//              alphas, folded), beta and eps scalar constants; products in
//              any association, sums in either order.
//
//===----------------------------------------------------------------------===//
#include "frontend/fusion/Fusion.h"

#include "frontend/Error.h"
#include "frontend/fusion/Match.h"

#include <algorithm>
#include <cmath>

namespace mt::onnx_import {
namespace {

constexpr double kSqrt2 = 1.4142135623730951;
constexpr double kSqrt2OverPi = 0.7978845608028654;

// x / c or x · (1/c) for the constant c; returns x.
Value *dividedBy(Value *v, double c) {
  if (Node *div = producer(v, "Div"))
    return isScalar(div->in(1), c) ? div->in(0) : nullptr;
  auto ops = commuted(producer(v, "Mul"),
                      [c](Value *k) { return isScalar(k, 1.0 / c); });
  return ops ? ops->second : nullptr;
}

// 1 + F(inner) where F is the unary `op`; returns inner.
Value *onePlus(Value *v, const char *op) {
  auto ops = commuted(producer(v, "Add"),
                      [](Value *k) { return isScalar(k, 1.0); });
  Node *f = ops ? producer(ops->second, op) : nullptr;
  return f ? f->in(0) : nullptr;
}

// √(2/π) · x · (1 + 0.044715 · x · x), the factors in any order; returns x.
Value *factoredTanhArgument(const std::vector<Value *> &f) {
  auto c = std::find_if(f.begin(), f.end(),
                        [](Value *s) { return isScalar(s, kSqrt2OverPi); });
  if (f.size() != 3 || c == f.end())
    return nullptr;
  std::vector<Value *> rest;
  for (Value *s : f)
    if (s != *c)
      rest.push_back(s);
  for (int k = 0; k < 2; ++k) {
    Value *x = rest[k];
    auto ops = commuted(producer(rest[1 - k], "Add"),
                        [](Value *s) { return isScalar(s, 1.0); });
    if (!ops)
      continue;
    std::vector<Value *> t = productFactors(ops->second);
    auto a = std::find_if(t.begin(), t.end(),
                          [](Value *s) { return isScalar(s, 0.044715); });
    if (t.size() == 3 && a != t.end() &&
        std::count(t.begin(), t.end(), x) == 2)
      return x;
  }
  return nullptr;
}

// √(2/π) · (x + 0.044715 · x³); returns x.
Value *tanhArgument(Value *v) {
  std::vector<Value *> f = productFactors(v);
  if (f.size() == 3)
    return factoredTanhArgument(f);
  if (f.size() != 2)
    return nullptr;
  if (isScalar(f[1], kSqrt2OverPi))
    std::swap(f[0], f[1]);
  if (!isScalar(f[0], kSqrt2OverPi))
    return nullptr;
  Node *add = producer(f[1], "Add");
  if (!add)
    return nullptr;
  for (int k = 0; k < 2; ++k) {
    Value *x = add->in(k), *cubicTerm = add->in(1 - k);
    std::vector<Value *> t = productFactors(cubicTerm);
    auto c = std::find_if(t.begin(), t.end(),
                          [](Value *s) { return isScalar(s, 0.044715); });
    if (c == t.end())
      continue;
    t.erase(c);
    bool cube = (t.size() == 1 && producer(t[0], "Pow") &&
                 producer(t[0], "Pow")->in(0) == x &&
                 isScalar(producer(t[0], "Pow")->in(1), 3.0));
    if (!cube)
      cube = t.size() == 3 &&
             std::all_of(t.begin(), t.end(), [x](Value *s) { return s == x; });
    if (cube)
      return x;
  }
  return nullptr;
}

void emitGelu(Graph &g, Node *root, Value *x, bool tanhForm) {
  replaceWithPrimitive(g, root, "mt.gelu", {x}, x->shape)
      ->setString("approximate", tanhForm ? "tanh" : "none");
}

void fuseDecomposedGelu(Graph &g, Node *mul) {
  std::vector<Value *> f = productFactors(mul->out());
  if (f.size() != 3)
    return;
  auto half = std::find_if(f.begin(), f.end(),
                           [](Value *v) { return isScalar(v, 0.5); });
  if (half == f.end())
    return;
  f.erase(half);
  for (int k = 0; k < 2; ++k) {
    Value *x = f[k], *phi = f[1 - k];
    if (!isActivation(x))
      continue;
    if (Value *e = onePlus(phi, "Erf"); e && dividedBy(e, kSqrt2) == x)
      return emitGelu(g, mul, x, false);
    if (Value *t = onePlus(phi, "Tanh"); t && tanhArgument(t) == x)
      return emitGelu(g, mul, x, true);
  }
}

// A one-element weight's param.
Value *scalarWeight(Value *v) {
  auto w = weightView(v);
  return w && numelOf(w->param->shape) == 1 ? w->param : nullptr;
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

// ap·x·x; returns ap's param.
Value *quadraticIn(Value *v, Value *x) {
  std::vector<Value *> f = productFactors(v);
  if (f.size() != 3 || std::count(f.begin(), f.end(), x) != 2)
    return nullptr;
  return scalarWeight(
      *std::find_if(f.begin(), f.end(), [x](Value *a) { return a != x; }));
}

// (Exp(Min(x, eps)) − 1 − x) · an; returns an's param and sets eps.
Value *eluIn(Value *v, Value *x, double &eps) {
  std::vector<Value *> f = productFactors(v);
  if (f.size() != 2)
    return nullptr;
  for (int k = 0; k < 2; ++k) {
    Node *minusX = producer(f[k], "Sub");
    Node *minusOne = minusX ? producer(minusX->in(0), "Sub") : nullptr;
    Node *exp = minusOne ? producer(minusOne->in(0), "Exp") : nullptr;
    Node *min = exp ? producer(exp->in(0), "Min") : nullptr;
    if (!min || minusX->in(1) != x || !isScalar(minusOne->in(1), 1.0) ||
        min->inputs.size() != 2)
      continue;
    auto c = commuted(min, [](Value *m) { return constScalar(m).has_value(); });
    Value *an = scalarWeight(f[1 - k]);
    if (!c || c->second != x || !an)
      continue;
    eps = *constScalar(c->first);
    return an;
  }
  return nullptr;
}

// term(a) + c·x in either order; returns term's result and sets c.
template <class Term>
Value *plusLinear(Value *v, Value *x, double &c, Term term) {
  Node *add = producer(v, "Add");
  for (int k = 0; add && k < 2; ++k)
    if (auto lin = linearIn(add->in(1 - k), x))
      if (Value *r = term(add->in(k))) {
        c = *lin;
        return r;
      }
  return nullptr;
}

void fuseXielu(Graph &g, Node *where) {
  Node *gt = producer(where->in(0), "Greater");
  if (!gt || constScalar(gt->in(1)) != 0.0 || !isActivation(gt->in(0)))
    return;
  Value *x = gt->in(0);
  double betaP = 0, betaN = 0, eps = 0;
  Value *ap = plusLinear(where->in(1), x, betaP,
                         [x](Value *t) { return quadraticIn(t, x); });
  Value *an = plusLinear(where->in(2), x, betaN,
                         [x, &eps](Value *t) { return eluIn(t, x, eps); });
  if (!ap || !an || betaP != betaN || where->out()->shape != x->shape)
    return;
  Node *y = replaceWithPrimitive(g, where, "mt.xielu", {x, ap, an}, x->shape);
  y->setFloat("beta", betaP);
  y->setFloat("eps", eps);
}

} // namespace

void fuseActivations(Graph &g) {
  for (Node *n : nodesWithOp(g, "Where"))
    fuseXielu(g, n);
  for (Node *n : nodesWithOp(g, "Mul"))
    fuseDecomposedGelu(g, n);
  for (Node *n : nodesWithOp(g, "Gelu")) {
    std::string approx = n->getString("approximate", "none");
    if (approx != "none" && approx != "tanh")
      fail("{}: unknown approximate '{}'", n->describe(), approx);
    emitGelu(g, n, n->in(0), approx == "tanh");
  }
  for (Node *n : nodesWithOp(g, "Gelu", "com.microsoft"))
    emitGelu(g, n, n->in(0), false);
  for (Node *n : nodesWithOp(g, "FastGelu", "com.microsoft")) {
    if (n->in(1))
      fail("{}: FastGelu with a bias input is not supported", n->describe());
    emitGelu(g, n, n->in(0), true);
  }

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
  for (Node *w : nodesWithOp(g, "Where")) {
    Node *gt = producer(w->in(0), "Greater");
    Node *sp = producer(w->in(2), "Softplus");
    auto t = gt ? constScalar(gt->in(1)) : std::nullopt;
    if (sp && t && *t >= 15 && gt->in(0) == sp->in(0) &&
        w->in(1) == sp->in(0) && w->out()->shape == sp->out()->shape)
      g.replaceAllUses(w->out(), sp->out());
  }
  g.removeDeadNodes();
  for (Node *n : nodesWithOp(g, "Softplus"))
    if (isActivation(n->in(0)))
      replaceWithPrimitive(g, n, "mt.softplus", {n->in(0)}, n->in(0)->shape);
}

} // namespace mt::onnx_import
