//===- Norms.cpp - RMSNorm and LayerNorm ----------------------------------===//
//
// Recognized forms, normalizing over the last dim:
//   RMSNorm   x / Sqrt(ReduceMean(x²) + eps), or x · Reciprocal(Sqrt(..)),
//             x · Div(1, Sqrt(..)), or x · Pow(.., -0.5); x² as Pow(x, 2) or
//             x·x; then an optional Mul by a [D] weight, or by c + weight
//             (Gemma's 1 + w). Also RMSNormalization (opset 23) and
//             com.microsoft SimplifiedLayerNormalization.
//   LayerNorm d = x - ReduceMean(x); d / Sqrt(ReduceMean(d²) + eps) with the
//             same variants, optional Mul by weight and Add of bias; and
//             LayerNormalization (opset 17), its scale a weight, c + weight
//             or literal ones, its bias a weight, literal zeros or none.
//   L2 norm   x / Sqrt(ReduceSum(x²) + eps) in the same forms, weightless
//             (gated DeltaNet's queries and keys): as sum = D · mean, it is
//             a weightless RMSNorm with eps / D, scaled by 1 / √D.
//
//===----------------------------------------------------------------------===//
#include "frontend/fusion/Fusion.h"

#include "frontend/Error.h"
#include "frontend/fusion/Match.h"

#include <cmath>
#include <tuple>

namespace mt::onnx_import {
namespace {

// A ReduceMean over exactly the last dim, keeping it.
Value *meanOverLastDim(Value *v) {
  Node *r = producer(v, "ReduceMean");
  if (!r || !r->getInt("keepdims", 1))
    return nullptr;
  Value *x = r->in(0);
  if (r->getInts("axes") != std::vector<int64_t>{x->rank() - 1})
    return nullptr;
  return x;
}

// A ReduceSum over exactly the last dim, keeping it.
Value *sumOverLastDim(Value *v) {
  Node *r = producer(v, "ReduceSum");
  if (!r || !r->getInt("keepdims", 1))
    return nullptr;
  Value *x = r->in(0);
  return r->getInts("axes") == std::vector<int64_t>{x->rank() - 1} ? x
                                                                   : nullptr;
}

// x² as Pow(x, 2) or Mul(x, x); returns x.
Value *squared(Value *v) {
  if (Node *p = producer(v, "Pow"))
    return isScalar(p->in(1), 2.0) ? p->in(0) : nullptr;
  if (Node *m = producer(v, "Mul"))
    return m->in(0) == m->in(1) ? m->in(0) : nullptr;
  return nullptr;
}

// Matches x · rsqrt(ms + eps) in its forms; returns x, ms and eps.
struct Normalize {
  Value *x = nullptr, *meanSquare = nullptr;
  double eps = 0;
};

// ms + eps, with eps a non-negative scalar; or ms alone, eps 0 (Helium's
// 1e-8 leaves no Add in a dynamo export). The callers check that ms is a
// mean square.
bool matchAddEps(Value *s, Normalize &out) {
  auto ops = commuted(producer(s, "Add"),
                      [](Value *c) { return constScalar(c).has_value(); });
  if (!ops) {
    out.eps = 0;
    out.meanSquare = s;
    return true;
  }
  if (*constScalar(ops->first) < 0)
    return false;
  out.eps = *constScalar(ops->first);
  out.meanSquare = ops->second;
  return true;
}

// 1 / Sqrt(ms + eps) as Reciprocal(Sqrt(..)), Div(1, Sqrt(..)) (torch's
// rsqrt) or Pow(.., -0.5).
bool matchRsqrt(Value *r, Normalize &out) {
  if (Node *rec = producer(r, "Reciprocal")) {
    Node *sqrt = producer(rec->in(0), "Sqrt");
    return sqrt && matchAddEps(sqrt->in(0), out);
  }
  if (Node *div = producer(r, "Div"); div && isScalar(div->in(0), 1.0)) {
    Node *sqrt = producer(div->in(1), "Sqrt");
    return sqrt && matchAddEps(sqrt->in(0), out);
  }
  Node *pow = producer(r, "Pow");
  return pow && isScalar(pow->in(1), -0.5) && matchAddEps(pow->in(0), out);
}

std::optional<Normalize> matchNormalize(Value *v) {
  Normalize out;
  if (Node *div = producer(v, "Div")) {
    Node *sqrt = producer(div->in(1), "Sqrt");
    if (!sqrt || !matchAddEps(sqrt->in(0), out))
      return std::nullopt;
    out.x = div->in(0);
    return out;
  }
  auto ops = commuted(producer(v, "Mul"), [](Value *r) {
    Normalize probe;
    return matchRsqrt(r, probe);
  });
  if (!ops)
    return std::nullopt;
  matchRsqrt(ops->first, out);
  out.x = ops->second;
  return out;
}

// An optional Mul by a [D] weight, then (for LayerNorm) an optional Add of a
// [D] bias, after the normalized value `n`.
struct Affine {
  Node *root;
  Value *weight = nullptr, *bias = nullptr;
  double weightOffset = 0; // the norm scales by (offset + weight): Gemma's 1 + w
};

// The [d] weight behind v (through casts and views), or null.
Value *featureWeight(Value *v, int64_t d) {
  auto view = weightView(v);
  return view && !view->transposed && view->param->shape == Shape{d}
             ? view->param
             : nullptr;
}

// c + w for a scalar c and a [d] weight w (Gemma's and Nemotron's 1 + w).
std::optional<std::pair<double, Value *>> offsetWeight(Value *v, int64_t d) {
  auto ops = commuted(producer(v, "Add"),
                      [](Value *c) { return constScalar(c).has_value(); });
  Value *w = ops ? featureWeight(ops->second, d) : nullptr;
  if (!w)
    return std::nullopt;
  return std::make_pair(*constScalar(ops->first), w);
}

Affine matchAffine(Node *normalized, int64_t d, bool withBias) {
  Affine a{normalized};
  auto isFeatureWeight = [d](Value *w) {
    return featureWeight(w, d) != nullptr;
  };
  Node *user = soleUser(a.root->out());
  if (user && user->op == "Mul" && user->domain.empty()) {
    if (auto ops = commuted(user, isFeatureWeight); ops && ops->second == a.root->out()) {
      a.weight = featureWeight(ops->first, d);
      a.root = user;
      user = soleUser(a.root->out());
    } else if (auto ops = commuted(
                   user,
                   [&](Value *w) { return offsetWeight(w, d).has_value(); });
               ops && ops->second == a.root->out()) {
      std::tie(a.weightOffset, a.weight) = *offsetWeight(ops->first, d);
      a.root = user;
      user = soleUser(a.root->out());
    }
  }
  if (withBias && user && user->op == "Add" && user->domain.empty()) {
    if (auto ops = commuted(user, isFeatureWeight); ops && ops->second == a.root->out()) {
      a.bias = featureWeight(ops->first, d);
      a.root = user;
    }
  }
  return a;
}

// A weightless norm `prim` of x after root, times (c + w), plus an optional
// bias: the offset c is a frozen one-element table added to the weight at
// run time, so w itself stays the trained param. Replaces root's output.
void emitOffsetNorm(Graph &g, Node *root, const char *prim, Value *x,
                    Value *weight, double offset, Value *bias, double eps) {
  Node *after = root;
  Value *n = appendPrimitive(g, after, root->name, prim, {x}, x->shape);
  after->setFloat("eps", eps);
  std::string name = fmt::format("mt.const.{}", offset);
  Value *&c = g.byName[name]; // one table per offset, shared by every norm
  if (!c) {
    c = g.newValue(name, DType::F32, {1});
    c->constant = denseConst(DType::F32, {1}, {offset});
  }
  Value *scale = appendPrimitive(g, after, root->name, "mt.add", {weight, c},
                                 weight->shape);
  Value *y =
      appendPrimitive(g, after, root->name, "mt.mul", {n, scale}, x->shape);
  if (bias)
    y = appendPrimitive(g, after, root->name, "mt.add", {y, bias}, x->shape);
  g.replaceAllUses(root->out(), y);
}

void emitRmsNorm(Graph &g, Node *root, Value *x, Value *weight, double eps,
                 double weightOffset = 0) {
  if (weightOffset != 0) {
    emitOffsetNorm(g, root, "mt.rms_norm", x, weight, weightOffset, nullptr,
                   eps);
    return;
  }
  std::vector<Value *> ins{x};
  if (weight)
    ins.push_back(weight);
  replaceWithPrimitive(g, root, "mt.rms_norm", ins, x->shape)
      ->setFloat("eps", eps);
}

// x / √(Σx² + eps) = rms_norm(x; eps / D) / √D.
void emitL2Norm(Graph &g, Node *root, Value *x, double eps) {
  const double d = double(x->dim(-1));
  Node *norm = g.newNode("mt.rms_norm", root->name, {x}, root);
  norm->setFloat("eps", eps / d);
  Value *n = g.addOutput(norm, DType::F32, x->shape);
  n->fromInput = true;
  replaceWithPrimitive(g, root, "mt.scale", {n}, x->shape)
      ->setFloat("factor", 1.0 / std::sqrt(d));
}

void emitLayerNorm(Graph &g, Node *root, Value *x, Value *weight, Value *bias,
                   double eps) {
  Node *n = replaceWithPrimitive(g, root, "mt.layer_norm", {x, weight, bias},
                                 x->shape);
  n->setFloat("eps", eps);
}

bool lastDimOnly(Node *n) {
  return n->getInt("axis", -1) == n->in(0)->rank() - 1;
}

void fuseDecomposed(Graph &g, Node *n) {
  std::optional<Normalize> m = matchNormalize(n->out());
  if (!m || !isActivation(m->x))
    return;
  int64_t d = m->x->dim(-1);
  // LayerNorm: x here is the centered c = x - mean(x), and the mean square
  // is of c (or of a second, identical Sub).
  if (Node *center = producer(m->x, "Sub");
      center && meanOverLastDim(center->in(1)) == center->in(0)) {
    Value *var = meanOverLastDim(m->meanSquare);
    Value *sqOf = var ? squared(var) : nullptr;
    Node *again = producer(sqOf, "Sub");
    bool sameCenter = sqOf && (sqOf == m->x ||
                               (again && again->in(0) == center->in(0) &&
                                again->in(1) == center->in(1)));
    if (sameCenter) {
      Affine a = matchAffine(n, d, true);
      if (a.weightOffset != 0)
        return; // an offset weight on a LayerNorm: not a form we know
      emitLayerNorm(g, a.root, center->in(0), a.weight, a.bias, m->eps);
    }
    return;
  }
  // RMSNorm: the mean square is of x itself.
  if (Value *sq = meanOverLastDim(m->meanSquare); sq && squared(sq) == m->x) {
    Affine a = matchAffine(n, d, false);
    emitRmsNorm(g, a.root, m->x, a.weight, m->eps, a.weightOffset);
    return;
  }
  if (Value *sq = sumOverLastDim(m->meanSquare); sq && squared(sq) == m->x)
    emitL2Norm(g, n, m->x, m->eps);
}

} // namespace

void fuseNorms(Graph &g) {
  for (const char *op : {"Div", "Mul"})
    for (Node *n : nodesWithOp(g, op))
      fuseDecomposed(g, n);

  for (Node *n : nodesWithOp(g, "LayerNormalization")) {
    if (!lastDimOnly(n))
      fail("{}: normalizing over more than the last dim is not supported",
           n->describe());
    // Scale: a weight, c + w (Nemotron's 1 + w, as an export without the
    // ONNX optimizer leaves it) or literal ones (OLMo's norm without
    // weights); bias: a weight, literal zeros or none.
    const int64_t d = n->in(0)->dim(-1);
    const double eps = n->getFloat("epsilon", 1e-5);
    Value *bias = n->in(2) ? featureWeight(n->in(2), d) : nullptr;
    if (n->in(2) && !bias && !isSplat(n->in(2), 0.0))
      fail("{}: bias must be a [{}] weight (an initializer)", n->describe(), d);
    if (auto offset = offsetWeight(n->in(1), d)) {
      emitOffsetNorm(g, n, "mt.layer_norm", n->in(0), offset->second,
                     offset->first, bias, eps);
      continue;
    }
    Value *scale = featureWeight(n->in(1), d);
    if (!scale && !isSplat(n->in(1), 1.0))
      fail("{}: scale must be a [{}] weight (an initializer), c + weight or "
           "ones",
           n->describe(), d);
    emitLayerNorm(g, n, n->in(0), scale, bias, eps);
  }
  for (auto [op, domain] :
       {std::pair{"RMSNormalization", ""},
        std::pair{"SimplifiedLayerNormalization", ""},
        std::pair{"SimplifiedLayerNormalization", "com.microsoft"}}) {
    for (Node *n : nodesWithOp(g, op, domain)) {
      if (!lastDimOnly(n))
        fail("{}: normalizing over more than the last dim is not supported",
             n->describe());
      auto w = weightView(n->in(1));
      if (!w)
        fail("{}: scale must be a weight (initializer)", n->describe());
      emitRmsNorm(g, n, n->in(0), w->param, n->getFloat("epsilon", 1e-5));
    }
  }
}

} // namespace mt::onnx_import
