//===- Moe.cpp - a mixture of SwiGLU experts with top-k routing -----------===//
//
// Recognized form (HF transformers 5's batched experts, exported by torch's
// dynamo exporter; Mixtral, Qwen3-MoE, OLMoE, Granite-MoE), x [T, H] the
// flattened hidden states:
//   p = Softmax(linear(x, router [E, H]));  (v, i) = TopK(p, k)
//   w = v / ReduceSum(v, last, keepdims)     (normalize; or w = v)
//   or (v, i) = TopK(linear(x, router), k), w = Softmax(v): the same
//   renormalized weights
//   or (v, i) = TopK(p + bias, k), w = GatherElements(p, i), renormalized
//   (over a Clip of the sum at a tiny minimum) or not: experts chosen by
//   biased scores, weighed by their probabilities (ERNIE 4.5)
//   or p = Sigmoid(linear(x, router)) in any of these (GLM-4.5), the
//   biased scores masked to the best groups of experts (groupLimited), and
//   w times a constant
//   xr = Reshape(Expand(Unsqueeze(x, 1), [T, k, H]), [T·k, H])
//   h = Squeeze(MatMul(GatherND(gate_up [E, 2I, H], i'), Unsqueeze(xr, -1)))
//   a = silu(g) · u, (g, u) = Split(h, last)
//   o = Squeeze(MatMul(GatherND(down [E, H, I], i'), Unsqueeze(a, -1)))
//   y = ReduceSum(Reshape(o · w', [T, k, H]), axis 1)
// with i' and w' views of i and w as [T·k, 1]. The whole block becomes
// mt.moe %x, %router, %gate_up, %down[, %bias] {top_k, routing, groups,
// top_groups, scale}, the bias a frozen copy.
//
//===----------------------------------------------------------------------===//
#include "frontend/fusion/Fusion.h"

#include "frontend/Error.h"
#include "frontend/fusion/Match.h"

#include <cmath>

namespace mt::onnx_import {
namespace {

// v through views that keep its elements (Reshape, Squeeze, Unsqueeze).
Value *unview(Value *v) {
  while (Node *n = producerOneOf(v, {"Reshape", "Squeeze", "Unsqueeze"}))
    v = n->in(0);
  return v;
}

// The initializer of a 3-d weight operand, untransposed.
Value *weight3d(Value *v) {
  auto w = weightView(v);
  return w && !w->transposed && w->param->rank() == 3 ? w->param : nullptr;
}

// Squeeze(MatMul(GatherND(W, idx), Unsqueeze(vec, -1)), -1): each slot's
// expert matrix times its vector. Returns vec; sets W and the index source.
Value *expertProduct(Value *v, Value *&w, Value *&idx) {
  Node *sq = producer(v, "Squeeze");
  Node *mm = sq ? producer(sq->in(0), "MatMul") : nullptr;
  Node *gather = mm ? producer(mm->in(0), "GatherND") : nullptr;
  Node *col = mm ? producer(mm->in(1), "Unsqueeze") : nullptr;
  if (!gather || !col || gather->getInt("batch_dims", 0) != 0 ||
      gather->in(1)->shape.back() != 1)
    return nullptr;
  w = weight3d(gather->in(0));
  idx = unview(gather->in(1));
  return w ? col->in(0) : nullptr;
}

// silu(g) · u as the product g · Sigmoid(g) · u; returns (g, u).
std::optional<std::pair<Value *, Value *>> swigluOf(Value *a) {
  std::vector<Value *> f = productFactors(a);
  if (f.size() != 3)
    return std::nullopt;
  for (int s = 0; s < 3; ++s) {
    Node *sig = producer(f[s], "Sigmoid");
    if (!sig)
      continue;
    for (int g = 0; g < 3; ++g)
      if (g != s && f[g] == sig->in(0))
        return std::make_pair(f[g], f[3 - s - g]);
  }
  return std::nullopt;
}

// Reshape(Expand(Unsqueeze(x, 1), [T, k, H]), [T·k, H]): x repeated k times
// row by row. Returns x.
Value *repeatedRows(Value *v, int64_t k) {
  Node *flat = producer(v, "Reshape");
  Node *expand = flat ? producer(flat->in(0), "Expand") : nullptr;
  Node *unsq = expand ? producer(expand->in(0), "Unsqueeze") : nullptr;
  if (!unsq || unsq->getInts("axes") != std::vector<int64_t>{1})
    return nullptr;
  Value *x = unsq->in(0);
  const Shape &e = expand->out()->shape;
  bool repeats = x->rank() == 2 && e == Shape{x->dim(0), k, x->dim(1)} &&
                 v->shape == Shape{x->dim(0) * k, x->dim(1)};
  return repeats ? x : nullptr;
}

// The router: linear(x, W [E, H]) as Gemm(x, W, transB) or MatMul(x, Wᵀ).
Value *routerOf(Value *logits, Value *&x) {
  if (Node *gemm = producer(logits, "Gemm")) {
    auto w = weightView(gemm->in(1));
    if (gemm->getInt("transB", 0) != 1 || gemm->getInt("transA", 0) != 0 ||
        gemm->in(2) || !w || w->transposed)
      return nullptr;
    x = gemm->in(0);
    return w->param;
  }
  if (Node *mm = producer(logits, "MatMul")) {
    auto w = weightView(mm->in(1));
    if (!w || !w->transposed)
      return nullptr;
    x = mm->in(0);
    return w->param;
  }
  return nullptr;
}

bool lastAxis(Node *n) { return n->getInt("axis", -1) == n->in(0)->rank() - 1; }

// w / s, w / Clip(s, tiny) or w / (s + tiny), s = ReduceSum(w, last,
// keepdims): w renormalized (a guard against 0 changes nothing).
bool renormalized(Value *v, Value *w) {
  Node *div = producer(v, "Div");
  if (!div || div->in(0) != w)
    return false;
  Value *d = div->in(1);
  if (Node *clip = producer(d, "Clip")) {
    auto lo = clip->inputs.size() > 1 && clip->in(1) ? constScalar(clip->in(1))
                                                     : std::nullopt;
    if (!lo || *lo > 1e-6 || (clip->inputs.size() > 2 && clip->in(2)))
      return false;
    d = clip->in(0);
  } else if (auto guarded = commuted(producer(d, "Add"), [](Value *c) {
               auto eps = constScalar(c);
               return eps && *eps >= 0 && *eps <= 1e-6;
             })) {
    d = guarded->second;
  }
  Node *total = producer(d, "ReduceSum");
  return total && total->in(0) == w && total->getInt("keepdims", 1) == 1 &&
         total->getInts("axes") == std::vector<int64_t>{w->rank() - 1};
}

struct Routing {
  Value *x = nullptr, *router = nullptr, *bias = nullptr;
  bool normalize = false, sigmoid = false;
  int64_t groups = 1, topGroups = 1;
  double scale = 1;
};

// Every element of v's compile-time value is `expected`.
bool allEqual(Value *v, double expected) {
  if (!v || !v->constant || v->constant->numel == 0)
    return false;
  for (int64_t i = 0; i < v->constant->numel; ++i)
    if (v->constant->at(i) != expected)
      return false;
  return true;
}

// Where(Not(Cast(m)), -inf, c) or Where(Cast(m), c, -inf): the biased
// scores c [T, E] kept only in the groups that compete, where
//   m = Reshape(Expand(Unsqueeze(ScatterElements(0, gi, 1), -1), [T, G, n]))
//   gi = TopK(ReduceSum(TopK(Reshape(c, [T, G, n]), 2).values, -1), top)
// (DeepSeek V3's and GLM-4.5's group-limited routing). Returns c and sets
// the groups.
Value *groupLimited(Node *where, Routing &r) {
  Value *mask = nullptr, *c = nullptr;
  auto ninf = [](Value *v) {
    auto f = constScalar(v);
    return f && std::isinf(*f) && *f < 0;
  };
  if (Node *no = producer(where->in(0), "Not"); no && ninf(where->in(1)))
    mask = no->in(0), c = where->in(2);
  else if (ninf(where->in(2)))
    mask = where->in(0), c = where->in(1);
  Node *cast = mask ? producer(mask, "Cast") : nullptr;
  Node *flat = cast ? producer(cast->in(0), "Reshape") : nullptr;
  Node *expand = flat ? producer(flat->in(0), "Expand") : nullptr;
  Node *unsq = expand ? producer(expand->in(0), "Unsqueeze") : nullptr;
  Node *scatter = unsq ? producer(unsq->in(0), "ScatterElements") : nullptr;
  if (!scatter || c->rank() != 2 || flat->out()->shape != c->shape ||
      !lastAxis(scatter) || scatter->getString("reduction", "none") != "none" ||
      !allEqual(scatter->in(0), 0) || !allEqual(scatter->in(2), 1) ||
      (unsq->getInts("axes") != std::vector<int64_t>{2} &&
       unsq->getInts("axes") != std::vector<int64_t>{-1}))
    return nullptr;
  const Shape &g = expand->out()->shape; // [T, G, n]
  Node *top = producer(scatter->in(1), "TopK");
  Node *sum = top ? producer(top->in(0), "ReduceSum") : nullptr;
  Node *best2 = sum ? producer(sum->in(0), "TopK") : nullptr;
  Node *view = best2 ? producer(best2->in(0), "Reshape") : nullptr;
  if (!view || g.size() != 3 || g[0] != c->dim(0) || g[1] * g[2] != c->dim(1) ||
      top->out(1) != scatter->in(1) || !lastAxis(top) ||
      top->getInt("largest", 1) != 1 || sum->in(0) != best2->out(0) ||
      sum->getInt("keepdims", 1) != 0 ||
      sum->getInts("axes") != std::vector<int64_t>{2} || !lastAxis(best2) ||
      best2->getInt("largest", 1) != 1 || best2->out(0)->dim(-1) != 2 ||
      view->in(0) != c || view->out()->shape != g)
    return nullptr;
  r.groups = g[1];
  r.topGroups = top->out(1)->dim(-1);
  return c;
}

// The routing that chose TopK's experts and weighs them by w: top k of the
// softmax, weights its values (or those renormalized); top k of the logits
// (Granite), weights their softmax (the probabilities renormalized); top k
// of the softmax or the sigmoid plus a bias (ERNIE 4.5, GLM-4.5), among
// the competing groups of experts (DeepSeek V3, GLM-4.5), weights the
// scores gathered at the chosen experts (or those renormalized); any of
// them times a constant (the routed scaling factor).
bool routingOf(Node *topk, Value *w, Routing &r) {
  Value *scores = topk->in(0);
  if (Node *where = producer(scores, "Where")) {
    scores = groupLimited(where, r);
    if (!scores)
      return false;
  }
  w = peelScale(w, r.scale);
  auto isScore = [](Value *v) {
    return producerOneOf(v, {"Softmax", "Sigmoid"}) != nullptr;
  };
  if (auto biased = commuted(producer(scores, "Add"), isScore)) {
    auto bias = weightView(biased->second);
    if (!bias || bias->transposed)
      return false;
    r.bias = bias->param;
    scores = biased->first;
  }
  Node *probs = producerOneOf(scores, {"Softmax", "Sigmoid"});
  r.sigmoid = probs && probs->op == "Sigmoid";
  r.router = routerOf(probs ? probs->in(0) : scores, r.x);
  if (!r.router || (probs && !r.sigmoid && !lastAxis(probs)))
    return false;
  if (!probs) { // top k of the logits
    Node *chosen = producer(w, "Softmax");
    r.normalize = true;
    return r.groups == 1 && chosen && chosen->in(0) == topk->out(0) &&
           lastAxis(chosen);
  }
  // The chosen scores: TopK's values where they are the scores themselves,
  // else the scores gathered at the chosen experts.
  Value *picked = r.bias ? nullptr : topk->out(0);
  for (Node *u : probs->out()->users)
    if (u->op == "GatherElements" && u->in(1) == topk->out(1) && lastAxis(u) &&
        (w == u->out() || renormalized(w, u->out())))
      picked = u->out();
  if (!picked)
    return false;
  r.normalize = w != picked;
  return w == picked || renormalized(w, picked);
}

// A frozen copy of a selection bias: it chooses experts and gets no
// gradient, so it is a table, not a trained param.
Value *frozenCopy(Graph &g, Value *param) {
  if (!param->constant)
    fail("initializer '{}': the experts' selection bias has no data",
         param->name);
  std::string name = "mt.moe.bias." + param->name;
  Value *&t = g.byName[name];
  if (!t) {
    t = g.newValue(name, DType::F32, param->shape);
    t->constant = param->constant;
  }
  return t;
}

void fuseMoe(Graph &g, Node *sum) {
  // y = ReduceSum(Reshape(o · w', [T, k, H]), axis 1, keepdims 0)
  if (sum->getInts("axes") != std::vector<int64_t>{1} ||
      sum->getInt("keepdims", 1) != 0 || sum->in(0)->rank() != 3)
    return;
  const int64_t k = sum->in(0)->dim(1);
  Node *rs = producer(sum->in(0), "Reshape");
  Node *mul = rs ? producer(rs->in(0), "Mul") : nullptr;
  if (!mul)
    return;
  for (int side = 0; side < 2; ++side) {
    Value *downW = nullptr, *gateUpW = nullptr, *idxD = nullptr,
          *idxG = nullptr;
    Value *a = expertProduct(mul->in(side), downW, idxD);
    auto gu = a ? swigluOf(a) : std::nullopt;
    Node *split = gu ? producer(gu->first, "Split") : nullptr;
    if (!split || split->outputs.size() != 2 || split->out(0) != gu->first ||
        split->out(1) != gu->second || split->getInt("axis", 0) != 1)
      continue;
    Value *xr = expertProduct(split->in(0), gateUpW, idxG);
    Value *x = xr ? repeatedRows(xr, k) : nullptr;
    Node *topk = idxD == idxG ? producer(idxD, "TopK") : nullptr;
    if (!x || !topk || topk->out(1) != idxD || topk->out(1)->dim(-1) != k ||
        topk->getInt("largest", 1) != 1 || !lastAxis(topk))
      continue;
    Routing r;
    if (!routingOf(topk, unview(mul->in(1 - side)), r) ||
        unview(r.x) != unview(x) || r.x->shape != x->shape)
      continue;
    Value *rx = r.x, *router = r.router;
    const Shape &gs = gateUpW->shape, &ds = downW->shape;
    const int64_t E = router->dim(0), H = router->dim(1), I = ds[2];
    if (gs != Shape{E, 2 * I, H} || ds != Shape{E, H, I} ||
        x->shape != Shape{x->dim(0), H} || sum->out()->shape != x->shape)
      continue;
    if (r.bias && r.bias->shape != Shape{E})
      continue;
    std::vector<Value *> ins{rx, router, gateUpW, downW};
    if (r.bias)
      ins.push_back(frozenCopy(g, r.bias));
    Node *moe = replaceWithPrimitive(g, sum, "mt.moe", ins, x->shape);
    moe->setInt("top_k", k);
    moe->setString("routing", std::string(r.sigmoid ? "sigmoid" : "softmax") +
                                  (r.normalize ? "_renorm" : ""));
    if (r.groups > 1) {
      moe->setInt("groups", r.groups);
      moe->setInt("top_groups", r.topGroups);
    }
    if (r.scale != 1)
      moe->setFloat("scale", r.scale);
    return;
  }
}

} // namespace

void fuseMoe(Graph &g) {
  for (Node *n : nodesWithOp(g, "ReduceSum"))
    fuseMoe(g, n);
}

} // namespace mt::onnx_import
