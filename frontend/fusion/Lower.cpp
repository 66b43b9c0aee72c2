//===- Lower.cpp - the remaining layout and arithmetic ops ----------------===//
//
// After the idioms, what is left on the activation path must map one to one
// onto a primitive: residual and bias Adds, scalings, elementwise products
// and squares, reshapes, transposes, slices (a fused QKV projection split
// three ways), concatenations, broadcasts (an Expand: x plus a zero table
// of the new dims, whose gradient sums them back) and DeepSeek's scatters
// of rows into an empty tensor (pads, then a concatenation). A tensor the
// export computes at compile time and multiplies or adds to an activation
// (Ministral 3's per-position query scaling) is a frozen table, or nothing
// where it is all ones (Mul) or all zeros (Add). A Clip of an activation at
// constant bounds (Nemotron-H's floor on Mamba's time step) is ReLUs of
// shifted copies. Anything else is left for fuseIdioms to report.
//
//===----------------------------------------------------------------------===//
#include "frontend/fusion/Fusion.h"

#include "frontend/Error.h"
#include "frontend/fusion/Match.h"

#include <algorithm>
#include <cmath>

namespace mt::onnx_import {
namespace {

// An operand of an elementwise primitive: an activation or a weight; null
// for anything else (a computed constant), which no primitive takes.
Value *operand(Value *v) {
  if (isActivation(v))
    return v;
  if (auto w = weightView(v); w && !w->transposed)
    return w->param;
  return nullptr;
}

// The frozen tables of compile-time operands, one per distinct value.
using Tables = std::vector<Value *>;

// A compile-time tensor c applied elementwise to an activation x without
// growing it: a frozen table of c's values (shared with an equal one).
Value *tableOf(Graph &g, Tables &tables, Value *c) {
  for (Value *t : tables)
    if (t->shape == c->shape && sameValues(*t->constant, *c->constant)) {
      for (Value *s : c->sources)
        if (std::find(t->sources.begin(), t->sources.end(), s) ==
            t->sources.end())
          t->sources.push_back(s);
      return t;
    }
  // Tables become symbols: two of one name (the zeros of two expands of
  // other shapes, say) are told apart by a count.
  std::string name = "mt.const." + c->name;
  auto taken = [&](const std::string &n) {
    return std::any_of(tables.begin(), tables.end(),
                       [&](Value *t) { return t->name == n; });
  };
  for (int k = 1; taken(name); ++k)
    name = fmt::format("mt.const.{}.{}", c->name, k);
  Value *t = g.newValue(name, DType::F32, c->shape);
  t->constant = c->constant;
  t->sources = c->sources; // checkTableSources (Importer.cpp) reads them
  tables.push_back(t);
  return t;
}

// c, which the export computes from parameters (−exp(A_log) and D[:, None]
// when exported without the ONNX optimizer), as primitives on the params
// themselves, placed after `after`: computed at run time in the layer that
// reads it, their gradients flow back to the parameters. Parts computed
// from no parameter are frozen tables. Null where a step has no primitive:
// c then stays a table, which checkTableSources (Importer.cpp) refuses.
Value *atRunTime(Graph &g, Tables &tables, Value *c, Node *&after) {
  auto w = weightView(c);
  if (w && !w->transposed && isParameter(w->param))
    return w->param;
  if (!computedFromParameter(c))
    return c->constant && c->constant->numel <= kMaterializeLimit
               ? tableOf(g, tables, c)
               : nullptr;
  Node *p = c->producer;
  if (!p || !p->domain.empty())
    return nullptr;
  const std::string &op = p->op;
  const Shape &shape = c->shape;
  auto unary = [&](const char *prim) -> Value * {
    Value *x = atRunTime(g, tables, p->in(0), after);
    return x ? appendPrimitive(g, after, p->name, prim, {x}, shape) : nullptr;
  };
  auto scaled = [&](Value *v, double factor) -> Value * {
    Value *x = atRunTime(g, tables, v, after);
    if (!x)
      return nullptr;
    Value *y = appendPrimitive(g, after, p->name, "mt.scale", {x}, shape);
    after->setFloat("factor", factor);
    return y;
  };
  if ((op == "Cast" || op == "Identity") && isFloat(c->dtype))
    return atRunTime(g, tables, p->in(0), after);
  if (op == "Neg")
    return scaled(p->in(0), -1.0);
  if (op == "Exp")
    return unary("mt.exp");
  if (op == "Sigmoid")
    return unary("mt.sigmoid");
  if (op == "Softplus")
    return unary("mt.softplus");
  if (op == "Reshape" || op == "Squeeze" || op == "Unsqueeze" ||
      op == "Flatten") {
    if (p->in(0)->shape == shape)
      return atRunTime(g, tables, p->in(0), after);
    return unary("mt.reshape");
  }
  if (op == "Mul" || op == "Div") {
    if (auto k = constScalar(p->in(1)))
      return scaled(p->in(0), op == "Mul" ? *k : 1.0 / *k);
    if (auto k = constScalar(p->in(0)); k && op == "Mul")
      return scaled(p->in(1), *k);
  }
  if (op == "Mul" || op == "Add" || op == "Sub") {
    // The larger operand first: the primitives broadcast the second.
    Value *a = p->in(0), *b = p->in(1);
    if (a->shape != shape)
      std::swap(a, b);
    if (a->shape != shape || (op == "Sub" && a != p->in(0)))
      return nullptr;
    Value *ra = atRunTime(g, tables, a, after);
    Value *rb = ra ? atRunTime(g, tables, b, after) : nullptr;
    if (!rb)
      return nullptr;
    if (op == "Sub") {
      rb = appendPrimitive(g, after, p->name, "mt.scale", {rb}, b->shape);
      after->setFloat("factor", -1.0);
    }
    return appendPrimitive(g, after, p->name, op == "Mul" ? "mt.mul" : "mt.add",
                           {ra, rb}, shape);
  }
  return nullptr;
}

// Leaves the node alone when an operand fits no primitive: fuseIdioms then
// reports the first unexplained node, usually where an idiom broke.
// `identity` is the element that makes the op a no-op (1 for mt.mul, 0 for
// mt.add).
void lowerBinary(Graph &g, Tables &tables, Node *n, const char *prim,
                 double identity) {
  Value *a = operand(n->in(0)), *b = operand(n->in(1));
  if (a && b) {
    replaceWithPrimitive(g, n, prim, {a, b}, n->out()->shape);
    return;
  }
  auto computed = commuted(
      n, [](Value *c) { return c->constant && !operand(c) && c->rank() >= 1; });
  if (!computed || !isActivation(computed->second))
    return;
  // c broadcasts against x as a weight would (Mamba's dt[..., None] · A,
  // computed at run time or frozen).
  auto [c, x] = *computed;
  if (computedFromParameter(c)) {
    Node *after = n;
    if (Value *r = atRunTime(g, tables, c, after)) {
      g.replaceAllUses(n->out(), appendPrimitive(g, after, n->name, prim,
                                                 {x, r}, n->out()->shape));
      return;
    }
  }
  if (c->constant->numel > kMaterializeLimit)
    return;
  const Const &k = *c->constant;
  bool noop = x->shape == n->out()->shape;
  for (int64_t i = 0; i < k.numel && noop; ++i)
    noop = k.at(i) == identity;
  if (noop)
    g.replaceAllUses(n->out(), x);
  else
    replaceWithPrimitive(g, n, prim, {x, tableOf(g, tables, c)},
                         n->out()->shape);
}

// Clip(x, lo, hi) at constant bounds (absent ones infinite): lo + relu(x −
// lo), then hi − relu(hi − y); the gradient passes exactly where x lies
// inside the bounds, as Clip's does.
void lowerClip(Graph &g, Tables &tables, Node *n, Value *x) {
  std::optional<double> lo, hi;
  if (n->inputs.size() > 1 && n->in(1) && !(lo = constScalar(n->in(1))))
    return;
  if (n->inputs.size() > 2 && n->in(2) && !(hi = constScalar(n->in(2))))
    return;
  auto table = [&](double v) {
    Value *c = g.newValue(fmt::format("{}.bound", n->name), DType::F32, {1});
    c->constant = denseConst(DType::F32, {1}, {v});
    return tableOf(g, tables, c);
  };
  Node *after = n;
  auto step = [&](const char *prim, std::vector<Value *> inputs) {
    const Shape shape = inputs[0]->shape;
    return appendPrimitive(g, after, n->name, prim, std::move(inputs), shape);
  };
  Value *y = x;
  if (lo && !std::isinf(*lo)) {
    Value *r = step("mt.relu", {step("mt.add", {y, table(-*lo)})});
    y = step("mt.add", {r, table(*lo)});
  }
  if (hi && !std::isinf(*hi)) {
    Value *below = step("mt.scale", {y});
    after->setFloat("factor", -1.0);
    Value *r = step("mt.relu", {step("mt.add", {below, table(*hi)})});
    Value *neg = step("mt.scale", {r});
    after->setFloat("factor", -1.0);
    y = step("mt.add", {neg, table(*hi)});
  }
  g.replaceAllUses(n->out(), y);
}

void lowerScale(Graph &g, Node *n, Value *x, double factor) {
  replaceWithPrimitive(g, n, "mt.scale", {x}, n->out()->shape)
      ->setFloat("factor", factor);
}

// x sliced to [start, start + size) on every dim, one mt.slice per dim that
// shrinks.
Value *sliceOf(Graph &g, Node *n, Value *x, const std::vector<int64_t> &start,
               const std::vector<int64_t> &size) {
  Value *cur = x;
  Node *after = n;
  for (int64_t k = 0; k < x->rank(); ++k) {
    if (start[k] == 0 && size[k] == x->dim(k))
      continue;
    Shape s = cur->shape;
    s[k] = size[k];
    Node *sl = g.newNode("mt.slice", n->name, {cur}, after);
    sl->setInt("axis", k);
    sl->setInt("start", start[k]);
    cur = g.addOutput(sl, DType::F32, s);
    cur->fromInput = true;
    after = sl;
  }
  return cur;
}

void lowerSlices(Graph &g, Node *n, Value *x, const std::vector<int64_t> &start,
                 const std::vector<int64_t> &size, Value *result) {
  g.replaceAllUses(result, sliceOf(g, n, x, start, size));
}

// Pad of an activation with zeros: the crop of negative pads (mt.slice),
// then each padded dim's zeros (mt.pad).
void lowerPad(Graph &g, Node *n, Value *x) {
  const std::vector<int64_t> pads = n->getInts("pads");
  const int64_t rank = x->rank();
  std::vector<int64_t> start(rank, 0);
  Shape size = x->shape;
  for (int64_t k = 0; k < rank; ++k) {
    start[k] = std::max<int64_t>(0, -pads[k]);
    size[k] -= start[k] + std::max<int64_t>(0, -pads[rank + k]);
  }
  Value *cur = sliceOf(g, n, x, start, size);
  Node *after = cur == x ? n : cur->producer;
  for (int64_t k = 0; k < rank; ++k) {
    const int64_t before = std::max<int64_t>(0, pads[k]),
                  behind = std::max<int64_t>(0, pads[rank + k]);
    if (before == 0 && behind == 0)
      continue;
    Shape s = cur->shape;
    s[k] += before + behind;
    Node *p = g.newNode("mt.pad", n->name, {cur}, after);
    p->setInt("axis", k);
    p->setInt("start", before);
    cur = g.addOutput(p, DType::F32, s);
    cur->fromInput = true;
    after = p;
  }
  g.replaceAllUses(n->out(), cur);
}

// Picking one index, or a run of consecutive ones, along an axis of an
// activation is a slice (Falcon's fused QKV views, say). Leaves n alone
// otherwise.
void lowerGather(Graph &g, Node *n, Value *x, int64_t axis, const Const &idx) {
  const int64_t count = idx.numel, d = x->dim(axis);
  if (count < 1)
    return;
  auto index = [&](int64_t i) {
    int64_t j = toInt(idx.at(i));
    return j < 0 ? j + d : j;
  };
  const int64_t first = index(0);
  for (int64_t i = 1; i < count; ++i)
    if (index(i) != first + i)
      return;
  if (first < 0 || first + count > d)
    return;
  std::vector<int64_t> start(x->rank(), 0);
  Shape size = x->shape;
  start[axis] = first;
  size[axis] = count;
  Value *sliced = sliceOf(g, n, x, start, size);
  if (sliced->shape != n->out()->shape) { // a scalar index drops the axis
    Node *r = g.newNode("mt.reshape", n->name, {sliced}, sliced->producer);
    sliced = g.addOutput(r, DType::F32, n->out()->shape);
    sliced->fromInput = true;
  }
  g.replaceAllUses(n->out(), sliced);
}

// Expand(x, shape) of an activation (DeepSeek's one rotary key read by
// every head): mt.add of x and a zero table [1, .., n, .., 1] holding the
// dims x broadcasts over; the add's gradient sums them back into x.
void lowerExpand(Graph &g, Tables &tables, Node *n, Value *x) {
  const Shape &out = n->out()->shape;
  if (x->rank() > int64_t(out.size()))
    return;
  Shape zeros(out.size(), 1);
  const int64_t lead = int64_t(out.size()) - x->rank();
  for (int64_t k = 0; k < int64_t(out.size()); ++k) {
    const int64_t d = k < lead ? 1 : x->dim(k - lead);
    if (d != out[k])
      zeros[k] = out[k];
  }
  if (numelOf(zeros) == 1) {
    if (x->shape == out)
      g.replaceAllUses(n->out(), x);
    else
      replaceWithPrimitive(g, n, "mt.reshape", {x}, out);
    return;
  }
  Value *z = g.newValue("expand.zeros", DType::F32, zeros);
  z->constant = lazyConst(DType::F32, zeros, [](int64_t) { return 0.0; });
  replaceWithPrimitive(g, n, "mt.add", {x, tableOf(g, tables, z)}, out);
}

// v seen through pairs of transposes that undo each other (DeepSeek's
// scatters transpose their result back and forth between them).
Value *throughInverseTransposes(Value *v) {
  auto transpose = [](Value *x) -> Node * {
    Node *t = x->producer;
    return t && (t->op == "mt.transpose" || t->op == "Transpose") ? t : nullptr;
  };
  for (;;) {
    Node *outer = transpose(v);
    Node *inner = outer ? transpose(outer->in(0)) : nullptr;
    if (!inner)
      return v;
    std::vector<int64_t> p1 = inner->getInts("perm"),
                         p2 = outer->getInts("perm");
    if (p1.size() != p2.size())
      return v;
    for (size_t i = 0; i < p2.size(); ++i)
      if (p1[p2[i]] != int64_t(i))
        return v;
    v = inner->in(0);
  }
}

// ScatterND(data, indices, updates) with one-coordinate indices that pick
// a run of consecutive rows [s, s + m) of data's first axis, no reduction:
// data with those rows replaced. DeepSeek's key, assembled in an empty
// tensor from its nope and rope parts: into zeros, an mt.pad of the
// updates; into such a pad, next to what it holds, an mt.concat of the two.
// Other scatters are left unexplained.
void lowerScatterRows(Graph &g, Node *n) {
  Value *data = n->in(0), *idx = n->in(1), *upd = n->in(2);
  if (!idx->constant || idx->rank() != 2 || idx->dim(0) == 0 ||
      idx->dim(1) != 1 || n->getString("reduction", "none") != "none" ||
      !isActivation(upd))
    return;
  const int64_t m = idx->dim(0), start = int64_t(idx->constant->at(0));
  for (int64_t i = 0; i < m; ++i)
    if (idx->constant->at(i) != double(start + i))
      return;
  const Shape &out = n->out()->shape;
  if (start < 0 || start + m > out[0])
    return;
  bool zeros = data->constant != nullptr;
  for (int64_t i = 0; zeros && i < data->constant->numel; ++i)
    zeros = data->constant->at(i) == 0;
  if (zeros) {
    Node *pad = replaceWithPrimitive(g, n, "mt.pad", {upd}, out);
    pad->setInt("axis", 0);
    pad->setInt("start", start);
    return;
  }
  Node *pad = throughInverseTransposes(data)->producer;
  if (!pad || pad->op != "mt.pad" || pad->getInt("axis", -1) != 0)
    return;
  Value *held = pad->in(0);
  const int64_t p0 = pad->getInt("start", 0), n0 = held->dim(0);
  std::vector<Value *> two;
  if (p0 == 0 && n0 == start && start + m == out[0])
    two = {held, upd};
  else if (start == 0 && m == p0 && p0 + n0 == out[0])
    two = {upd, held};
  if (!two.empty())
    replaceWithPrimitive(g, n, "mt.concat", two, out)->setInt("axis", 0);
}

void lower(Graph &g, Tables &tables, Node *n) {
  const std::string &op = n->op;
  Value *x = n->in(0);
  if (op == "Add") {
    lowerBinary(g, tables, n, "mt.add", 0.0);
  } else if (op == "Mul") {
    auto scalar = commuted(n, [](Value *c) { return constScalar(c).has_value(); });
    if (scalar && isActivation(scalar->second))
      lowerScale(g, n, scalar->second, *constScalar(scalar->first));
    else
      lowerBinary(g, tables, n, "mt.mul", 1.0);
  } else if (op == "Pow" && isActivation(x) && isScalar(n->in(1), 2.0)) {
    // A square (the dynamo exporter's squared ReLU) is a product.
    replaceWithPrimitive(g, n, "mt.mul", {x, x}, n->out()->shape);
  } else if (op == "Div" && isActivation(x) && constScalar(n->in(1))) {
    lowerScale(g, n, x, 1.0 / *constScalar(n->in(1)));
  } else if (op == "Exp" && isActivation(x)) {
    replaceWithPrimitive(g, n, "mt.exp", {x}, n->out()->shape);
  } else if (op == "Neg" && isActivation(x)) {
    lowerScale(g, n, x, -1.0);
  } else if (op == "Clip" && isActivation(x)) {
    lowerClip(g, tables, n, x);
  } else if (op == "Reshape" || op == "Squeeze" || op == "Unsqueeze" ||
             op == "Flatten") {
    if (x->shape == n->out()->shape)
      g.replaceAllUses(n->out(), x);
    else
      replaceWithPrimitive(g, n, "mt.reshape", {x}, n->out()->shape);
  } else if (op == "Transpose") {
    replaceWithPrimitive(g, n, "mt.transpose", {x}, n->out()->shape)
        ->setInts("perm", n->getInts("perm"));
  } else if (op == "Slice") {
    for (int64_t step : n->getInts("steps"))
      if (step != 1)
        fail("{}: strided slices of activations are not supported",
             n->describe());
    lowerSlices(g, n, x, n->getInts("starts"), n->getInts("sizes"), n->out());
  } else if (op == "Gather" && n->in(1)->constant) {
    const Const &idx = *n->in(1)->constant;
    if (idx.shape.size() <= 1)
      lowerGather(g, n, x, n->getInt("axis", 0), idx);
  } else if (op == "GatherND" && n->in(1)->constant &&
             n->getInt("batch_dims", 0) == 0) {
    // Tuples of one index pick along axis 0: a Gather (the dynamo
    // exporter's view of Falcon's fused QKV).
    const Const &idx = *n->in(1)->constant;
    if (idx.shape.back() == 1 && idx.shape.size() <= 2)
      lowerGather(g, n, x, 0, idx);
  } else if (op == "Pad" && isActivation(x) && n->getFloat("value", 0) == 0) {
    lowerPad(g, n, x);
  } else if (op == "ScatterND") {
    lowerScatterRows(g, n);
  } else if (op == "Expand" && isActivation(x)) {
    lowerExpand(g, tables, n, x);
  } else if (op == "Concat") {
    std::vector<Value *> xs;
    for (Value *v : n->inputs)
      if (Value *o = operand(v))
        xs.push_back(o);
    if (xs.size() == n->inputs.size())
      replaceWithPrimitive(g, n, "mt.concat", xs, n->out()->shape)
          ->setInt("axis", n->getInt("axis", 0)); // made non-negative
  } else if (op == "Split") {
    int64_t axis = n->getInt("axis", 0), offset = 0;
    std::vector<int64_t> split = n->getInts("split");
    for (size_t k = 0; k < n->outputs.size(); ++k) {
      std::vector<int64_t> start(x->rank(), 0);
      Shape size = x->shape;
      start[axis] = offset;
      size[axis] = split[k];
      lowerSlices(g, n, x, start, size, n->out(k));
      offset += split[k];
    }
  }
}

} // namespace

void lowerRemaining(Graph &g) {
  std::vector<Node *> todo;
  for (auto &n : g.nodes())
    if (!n->isPrimitive() && !n->outputs.empty() && isActivation(n->out()))
      todo.push_back(n.get());
  Tables tables;
  for (Node *n : todo)
    if (n->domain.empty())
      lower(g, tables, n);
}

} // namespace mt::onnx_import
