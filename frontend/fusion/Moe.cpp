//===- Moe.cpp - a mixture of gated experts with top-k routing ------------===//
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
// with i' and w' views of i and w as [T·k, 1]. gpt-oss's experts: each
// product row-vector first, Squeeze(MatMul(Unsqueeze(v, 1), GatherND(W
// [E, H, 2I] or [E, I, H], i'))), plus GatherND(bias, i'); g and u the
// even and odd columns of h (Slice steps of 2), clamped (Clip(g, max = L),
// Clip(u, −L, L)), a = g·Sigmoid(α·g)·(u + c); a bias on the router's
// linear. Gemma 4's experts: a = gelu_tanh(g) · u (Gelu(g, approximate
// tanh) or its decomposition, as mt.gelu by then); w times
// GatherND(expert_scale [E], i') (after the renormalization); and the
// router on a copy of the token of its own (another norm of the same
// residual), router_x. The whole block becomes mt.moe %x, %router,
// %gate_up, %down[, %bias] [router_bias %rb] [gate_up_bias %gb] [down_bias
// %db] [router_x %rx] [expert_scale %es] {top_k, routing, groups,
// top_groups, scale, w_layout, interleaved, alpha, limit, up_shift,
// activation}, the selection bias a frozen copy.
//
// Llama 4's experts run on every token, each on the token scaled by its
// routing weight (0 for the experts not chosen):
//   (v, i) = TopK(linear(x, router), k)
//   w = Sigmoid(ScatterElements(-inf [T, E], i, v, last))
//   xe = Reshape(Tile(x, [E, 1]) · Reshape(Transpose(w), [E·T, 1]),
//        [E, T, H])
//   a = silu(g) · u, (g, u) = Split(MatMul(xe, gate_up [E, H, 2I]), last)
//   y = ReduceSum(MatMul(a, down [E, I, H]), axis 0)
// Bias-free experts map a zero input to 0, so this is mt.moe with sigmoid
// routing and `weigh_inputs`: y = Σ_j f_{e_j}(σ(v_j) · x).
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

// The initializer of a weight operand of `rank`, untransposed.
Value *weightOfRank(Value *v, int64_t rank) {
  auto w = weightView(v);
  return w && !w->transposed && w->param->rank() == rank ? w->param : nullptr;
}

// Each slot's expert matrix times its vector, and its bias if any.
struct ExpertProduct {
  Value *vec = nullptr, *w = nullptr, *idx = nullptr, *bias = nullptr;
  bool inOut = false; // vec · W[idx] (W [E, in, out]); else W[idx] · vec
};

// GatherND(W, idx) of a per-slot weight: its initializer of `rank`, and
// the index source.
Value *gathered(Value *v, int64_t rank, Value *&idx) {
  Node *gather = producer(v, "GatherND");
  if (!gather || gather->getInt("batch_dims", 0) != 0 ||
      gather->in(1)->shape.back() != 1)
    return nullptr;
  idx = unview(gather->in(1));
  return weightOfRank(gather->in(0), rank);
}

// Squeeze(MatMul(GatherND(W, idx), Unsqueeze(vec, -1)), -1), or
// Squeeze(MatMul(Unsqueeze(vec, 1), GatherND(W, idx)), 1) (inOut), either
// plus GatherND(bias, idx).
std::optional<ExpertProduct> expertProduct(Value *v) {
  ExpertProduct p;
  if (Node *add = producer(v, "Add")) {
    for (int side = 0; side < 2 && !p.bias; ++side) {
      Value *bidx = nullptr;
      if (Value *b = gathered(add->in(side), 2, bidx)) {
        p.bias = b;
        p.idx = bidx;
        v = add->in(1 - side);
      }
    }
    if (!p.bias)
      return std::nullopt;
  }
  Node *sq = producer(v, "Squeeze");
  Node *mm = sq ? producer(sq->in(0), "MatMul") : nullptr;
  if (!mm)
    return std::nullopt;
  Value *idx = nullptr;
  if (Node *col = producer(mm->in(1), "Unsqueeze")) {
    p.w = gathered(mm->in(0), 3, idx);
    p.vec = col->in(0);
  } else if (Node *row = producer(mm->in(0), "Unsqueeze")) {
    p.w = gathered(mm->in(1), 3, idx);
    p.vec = row->in(0);
    p.inOut = true;
  }
  if (!p.w || (p.bias && idx != p.idx))
    return std::nullopt;
  p.idx = idx;
  return p;
}

// The experts' activation: a = g'·Sigmoid(alpha·g')·(u' + shift), g' and
// u' clamped at a limit or not (SwiGLU: alpha 1, shift 0, no clamp), or
// a = gelu_tanh(g)·u (GeGLU), of the gate and up halves (or even and odd
// columns) of h.
struct ExpertActivation {
  Value *h = nullptr;
  bool interleaved = false, gelu = false;
  double alpha = 1, limit = 0, shift = 0;
};

// v = Clip(x, lo, hi): x and the bounds (absent ones infinite).
Value *clipped(Value *v, double &lo, double &hi) {
  Node *clip = producer(v, "Clip");
  if (!clip)
    return nullptr;
  lo = -INFINITY, hi = INFINITY;
  for (size_t i = 1; i < clip->inputs.size(); ++i) {
    if (!clip->in(i))
      continue;
    auto c = constScalar(clip->in(i));
    if (!c)
      return nullptr;
    (i == 1 ? lo : hi) = *c;
  }
  return clip->in(0);
}

// Where g and u come from: the halves of Split(h, last) or h's even and
// odd columns (Slice from 0 and 1 in steps of 2).
bool gateAndUp(Value *g, Value *u, ExpertActivation &act) {
  if (Node *split = producer(g, "Split"))
    if (int64_t axis = split->getInt("axis", 0), rank = split->in(0)->rank();
        split->outputs.size() == 2 && split->out(0) == g &&
        split->out(1) == u && rank >= 2 && (axis == rank - 1 || axis == -1)) {
      act.h = split->in(0);
      return true;
    }
  Node *sg = producer(g, "Slice"), *su = producer(u, "Slice");
  if (!sg || !su || sg->in(0) != su->in(0) || sg->in(0)->rank() != 2 ||
      sg->in(0)->dim(1) % 2)
    return false;
  // The Slice normal form (handlers/Tensor.cpp): every row, the columns
  // from `start` in steps of 2, half of them.
  const Value *h = sg->in(0);
  auto every = [&](Node *s, int64_t start) {
    return s->getInts("starts") == std::vector<int64_t>{0, start} &&
           s->getInts("steps") == std::vector<int64_t>{1, 2} &&
           s->getInts("sizes") ==
               std::vector<int64_t>{h->dim(0), h->dim(1) / 2};
  };
  if (!every(sg, 0) || !every(su, 1))
    return false;
  act.h = sg->in(0);
  act.interleaved = true;
  return true;
}

std::optional<ExpertActivation> activationOf(Value *a) {
  std::vector<Value *> f = productFactors(a);
  if (f.size() == 2) { // GeGLU
    for (int s = 0; s < 2; ++s) {
      // GELU fused before the experts (Gelu.cpp), from whichever form.
      Node *gelu = producer(f[s], "mt.gelu");
      ExpertActivation act;
      act.gelu = true;
      if (gelu && gelu->getString("approximate", "none") == "tanh" &&
          gateAndUp(gelu->in(0), f[1 - s], act))
        return act;
    }
    return std::nullopt;
  }
  if (f.size() != 3)
    return std::nullopt;
  for (int s = 0; s < 3; ++s) {
    Node *sig = producer(f[s], "Sigmoid");
    if (!sig)
      continue;
    ExpertActivation act;
    Value *g = peelScale(sig->in(0), act.alpha);
    for (int gi = 0; gi < 3; ++gi) {
      if (gi == s || f[gi] != g)
        continue;
      Value *u = f[3 - s - gi];
      if (auto shifted = commuted(producer(u, "Add"), [](Value *c) {
            return constScalar(c).has_value();
          })) {
        act.shift = *constScalar(shifted->first);
        u = shifted->second;
      }
      double glo, ghi, ulo, uhi;
      Value *g0 = clipped(g, glo, ghi), *u0 = clipped(u, ulo, uhi);
      if (g0 || u0) { // gpt-oss: g at most L, u within ±L
        if (!g0 || !u0 || !std::isinf(glo) || !(ghi > 0) || ulo != -ghi ||
            uhi != ghi)
          return std::nullopt;
        act.limit = ghi;
        g = g0, u = u0;
      }
      if (!(act.alpha > 0) || !gateAndUp(g, u, act))
        return std::nullopt;
      return act;
    }
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

// The router: linear(x, W [E, H]) as Gemm(x, W, transB) or MatMul(x, Wᵀ),
// with or without a bias [E] (Gemm's C, or an Add).
Value *routerOf(Value *logits, Value *&x, Value *&bias) {
  auto vector = [](Value *b) { return weightOfRank(b, 1); };
  if (auto biased = commuted(producer(logits, "Add"), vector)) {
    bias = vector(biased->first);
    logits = biased->second;
  }
  if (Node *gemm = producer(logits, "Gemm")) {
    auto w = weightView(gemm->in(1));
    if (gemm->getInt("transB", 0) != 1 || gemm->getInt("transA", 0) != 0 ||
        !w || w->transposed || gemm->getFloat("alpha", 1) != 1 ||
        (gemm->in(2) && (bias || !(bias = vector(gemm->in(2))) ||
                         gemm->getFloat("beta", 1) != 1)))
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
  Value *x = nullptr, *router = nullptr, *bias = nullptr, *routerBias = nullptr;
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
    // Frozen either way: an initializer, or one seen through a Squeeze (an
    // export without the ONNX optimizer).
    Value *bias = biased->second;
    if (auto view = weightView(bias); view && !view->transposed)
      bias = view->param;
    if (!bias->constant || isActivation(bias))
      return false;
    r.bias = bias;
    scores = biased->first;
  }
  Node *probs = producerOneOf(scores, {"Softmax", "Sigmoid"});
  r.sigmoid = probs && probs->op == "Sigmoid";
  r.router = routerOf(probs ? probs->in(0) : scores, r.x, r.routerBias);
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

// A frozen copy of a selection bias (an initializer or a view of one): it
// chooses experts and gets no gradient, so it is a table, not a trained
// param.
Value *frozenCopy(Graph &g, Value *param) {
  std::string name = "mt.moe.bias." + param->name;
  Value *&t = g.byName[name];
  if (!t) {
    t = g.newValue(name, DType::F32, param->shape);
    t->constant = param->constant;
  }
  return t;
}

// w · GatherND(expert_scale [E], Unsqueeze(i)) (Gemma 4's per-expert
// scales of the chosen weights): the scale, w set to the unscaled weights.
Value *expertScale(Value *&w, Value *chosen) {
  Node *mul = producer(w, "Mul");
  for (int side = 0; mul && side < 2; ++side) {
    Value *idx = nullptr;
    Value *scale = gathered(mul->in(side), 1, idx);
    if (scale && idx == chosen && mul->in(side)->shape == w->shape) {
      w = mul->in(1 - side);
      return scale;
    }
  }
  return nullptr;
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
    auto down = expertProduct(mul->in(side));
    auto act = down ? activationOf(down->vec) : std::nullopt;
    auto gateUp = act ? expertProduct(act->h) : std::nullopt;
    Value *x = gateUp ? repeatedRows(gateUp->vec, k) : nullptr;
    Node *topk =
        x && down->idx == gateUp->idx ? producer(down->idx, "TopK") : nullptr;
    if (!topk || topk->out(1) != down->idx || topk->out(1)->dim(-1) != k ||
        topk->getInt("largest", 1) != 1 || !lastAxis(topk) ||
        gateUp->inOut != down->inOut)
      continue;
    Routing r;
    Value *w = unview(mul->in(1 - side));
    Value *scales = expertScale(w, topk->out(1));
    if (!routingOf(topk, w, r) || r.x->shape != x->shape)
      continue;
    // The router reads the experts' input, or a copy of its own.
    Value *routerX = unview(r.x) == unview(x) ? nullptr : r.x;
    Value *router = r.router;
    const bool inOut = down->inOut;
    const Shape &gs = gateUp->w->shape, &ds = down->w->shape;
    const int64_t E = router->dim(0), H = router->dim(1),
                  I = inOut ? ds[1] : ds[2];
    const Shape wantGs = inOut ? Shape{E, H, 2 * I} : Shape{E, 2 * I, H},
                wantDs = inOut ? Shape{E, I, H} : Shape{E, H, I};
    if (gs != wantGs || ds != wantDs || x->shape != Shape{x->dim(0), H} ||
        sum->out()->shape != x->shape)
      continue;
    if ((r.bias && r.bias->shape != Shape{E}) ||
        (r.routerBias && r.routerBias->shape != Shape{E}) ||
        (gateUp->bias && gateUp->bias->shape != Shape{E, 2 * I}) ||
        (down->bias && down->bias->shape != Shape{E, H}) ||
        (scales && scales->shape != Shape{E}))
      continue;
    // Optional operands keep their slots (null when absent).
    std::vector<Value *> ins{routerX ? x : r.x,
                             router,
                             gateUp->w,
                             down->w,
                             r.bias ? frozenCopy(g, r.bias) : nullptr,
                             r.routerBias,
                             gateUp->bias,
                             down->bias,
                             routerX,
                             scales};
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
    if (inOut)
      moe->setString("w_layout", "in_out");
    if (act->interleaved)
      moe->setUnit("interleaved");
    if (act->alpha != 1)
      moe->setFloat("alpha", act->alpha);
    if (act->limit != 0)
      moe->setFloat("limit", act->limit);
    if (act->shift != 0)
      moe->setFloat("up_shift", act->shift);
    if (act->gelu)
      moe->setString("activation", "gelu_tanh");
    return;
  }
}

// Reshape(Transpose(Sigmoid(ScatterElements(-inf, i, v, last)), [1, 0]),
// [E·T, 1]), (v, i) = TopK(logits, k): the sigmoid of each token's k best
// logits, 0 for the other experts, experts major. Returns the TopK.
Node *scatteredSigmoid(Value *v) {
  Node *tr = producer(unview(v), "Transpose");
  Node *sig = tr ? producer(tr->in(0), "Sigmoid") : nullptr;
  Node *scatter = sig ? producer(sig->in(0), "ScatterElements") : nullptr;
  Node *topk = scatter ? producer(scatter->in(2), "TopK") : nullptr;
  if (!topk || tr->getInts("perm") != std::vector<int64_t>{1, 0} ||
      !lastAxis(scatter) || scatter->getString("reduction", "none") != "none" ||
      !allEqual(scatter->in(0), -INFINITY) || scatter->in(1) != topk->out(1) ||
      scatter->in(2) != topk->out(0) || !lastAxis(topk) ||
      topk->getInt("largest", 1) != 1 || sig->out()->rank() != 2 ||
      v->shape != Shape{sig->out()->numel(), 1})
    return nullptr;
  return topk;
}

// x [T, H] repeated E times: Tile(x, [E, 1]) (x behind an Expand to its
// own shape, or not).
Value *tiledRows(Value *v, int64_t E) {
  Node *tile = producer(v, "Tile");
  if (!tile || !tile->in(1)->constant || tile->in(0)->rank() != 2)
    return nullptr;
  const Const &reps = *tile->in(1)->constant;
  if (reps.numel != 2 || reps.at(0) != double(E) || reps.at(1) != 1)
    return nullptr;
  Value *x = tile->in(0);
  if (Node *e = producer(x, "Expand"); e && e->in(0)->shape == x->shape)
    x = e->in(0);
  return x;
}

// Llama 4's experts on every token (the header's second form).
void fuseDenseMoe(Graph &g, Node *sum) {
  if (sum->getInts("axes") != std::vector<int64_t>{0} ||
      sum->getInt("keepdims", 1) != 0 || sum->in(0)->rank() != 3)
    return;
  Node *mm2 = producer(sum->in(0), "MatMul");
  Value *down = mm2 ? weightOfRank(mm2->in(1), 3) : nullptr;
  auto act = down ? activationOf(mm2->in(0)) : std::nullopt;
  Node *mm1 = act && !act->interleaved && !act->gelu
                  ? producer(act->h, "MatMul")
                  : nullptr;
  Value *gateUp = mm1 ? weightOfRank(mm1->in(1), 3) : nullptr;
  Node *mul = gateUp ? producer(unview(mm1->in(0)), "Mul") : nullptr;
  if (!mul || act->limit != 0 || act->shift != 0 || act->alpha != 1)
    return;
  const int64_t E = down->dim(0), I = down->dim(1), H = down->dim(2);
  for (int side = 0; side < 2; ++side) {
    Value *x = tiledRows(mul->in(side), E);
    Node *topk = x ? scatteredSigmoid(mul->in(1 - side)) : nullptr;
    if (!topk)
      continue;
    Routing r;
    r.router = routerOf(topk->in(0), r.x, r.routerBias);
    if (!r.router || r.routerBias || unview(r.x) != unview(x) ||
        r.x->shape != x->shape || r.router->shape != Shape{E, H} ||
        gateUp->shape != Shape{E, H, 2 * I} ||
        x->shape != Shape{x->dim(0), H} || sum->out()->shape != x->shape ||
        mm1->in(0)->shape != Shape{E, x->dim(0), H})
      continue;
    Node *moe =
        replaceWithPrimitive(g, sum, "mt.moe",
                             {r.x, r.router, gateUp, down, nullptr, nullptr,
                              nullptr, nullptr, nullptr, nullptr},
                             x->shape);
    moe->setInt("top_k", topk->out(1)->dim(-1));
    moe->setString("routing", "sigmoid");
    moe->setString("w_layout", "in_out");
    moe->setUnit("weigh_inputs");
    return;
  }
}

} // namespace

void fuseMoe(Graph &g) {
  for (Node *n : nodesWithOp(g, "ReduceSum")) {
    fuseMoe(g, n);
    fuseDenseMoe(g, n);
  }
}

} // namespace mt::onnx_import
