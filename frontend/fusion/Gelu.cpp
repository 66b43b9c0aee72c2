//===- Gelu.cpp - GELU, erf and tanh forms, decomposed or as one op -------===//
//
// Recognized forms:
//   GELU erf   0.5 · x · (1 + Erf(x / √2)), x / √2 also as x · (1/√2), the
//              product in any association; Gelu (opset 20, approximate
//              none); com.microsoft Gelu.
//   GELU tanh  0.5 · x · (1 + Tanh(√(2/π) · (x + 0.044715 · x³))), x³ as
//              Pow(x, 3) or x·x·x, or the argument as √(2/π) · x ·
//              (1 + 0.044715 · x · x) (BLOOM); Gelu (opset 20, approximate
//              tanh); com.microsoft FastGelu without bias.
// They fuse before the mixtures of experts, which find GeGLU experts' GELU
// as an mt.gelu whichever form the export wrote.
//
//===----------------------------------------------------------------------===//
#include "frontend/fusion/Fusion.h"

#include "frontend/Error.h"
#include "frontend/fusion/Match.h"

#include <algorithm>

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
  auto ops =
      commuted(producer(v, "Add"), [](Value *k) { return isScalar(k, 1.0); });
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
    if (t.size() == 3 && a != t.end() && std::count(t.begin(), t.end(), x) == 2)
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

} // namespace

void fuseGelu(Graph &g) {
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
}

} // namespace mt::onnx_import
