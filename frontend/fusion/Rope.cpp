//===- Rope.cpp - rotary position embedding -------------------------------===//
//
// Recognized form, x 4-d ([B, H, S, D] or [B, S, H, D]):
//   x · cos + rotate_half(x) · sin,   rotate_half(x) = Concat(-x2, x1) on the
//   last dim, with x1, x2 the halves of x as two Slices or one Split, or
//   Concat(x2, -x1) (NanoChat: the rotation the other way, sin negated);
//   or x · cos + rotate_every_two(x) · sin (GPT-J, CodeGen), with
//   rotate_every_two(x) = Reshape(Concat(Unsqueeze(-x[..., 1::2], -1),
//   Unsqueeze(x[..., ::2], -1), last dim)) interleaving the rotated pairs;
//   partial rotary: the above on x0[..., :R], concatenated with x0[..., R:];
//   or Concat(x1 · c − x2 · s, x2 · c + x1 · s) with tables c, s of half
//   width (gpt-oss): the rotate_half form, its tables [c, c] and [s, s];
//   with x1, x2 the even and odd elements of x instead (DeepSeek V3's
//   interleaved pairs, rotated in place and laid out evens first), the
//   rotate_every_two form, its tables [c0, c0, c1, c1, ...], then the
//   pairs de-interleaved (a reshape, a transpose, a reshape).
// cos and sin must fold to compile-time tables broadcast over batch and
// heads; they become frozen [S, R] params shared by every layer that uses
// the same table.
//
//===----------------------------------------------------------------------===//
#include "frontend/fusion/Fusion.h"

#include "frontend/Error.h"
#include "frontend/fusion/Match.h"

#include <map>
#include <tuple>

namespace mt::onnx_import {
namespace {

// The last-dim slice of `size` elements from `start` every `step` of a 4-d
// x: the source x.
Value *lastDimSliceOf(Value *v, int64_t start, int64_t size, int64_t step = 1) {
  Node *s = producer(v, "Slice");
  if (!s)
    return nullptr;
  Value *x = s->in(0);
  std::vector<int64_t> st = s->getInts("starts"), steps = s->getInts("steps"),
                       sz = s->getInts("sizes");
  for (int64_t k = 0; k + 1 < x->rank(); ++k)
    if (st[k] != 0 || steps[k] != 1 || sz[k] != x->dim(k))
      return nullptr;
  bool ok = st.back() == start && steps.back() == step && sz.back() == size;
  return ok ? x : nullptr;
}

// x when x1 and x2 are its lower and upper halves on the last dim (one
// Split, or two Slices).
Value *halvesOf(Value *x1, Value *x2) {
  int64_t h = x1->dim(-1);
  if (Node *split = producer(x1, "Split"); split && split == x2->producer) {
    bool halves = split->outputs.size() == 2 && split->out(0) == x1 &&
                  split->out(1) == x2 &&
                  split->getInt("axis", 0) == x1->rank() - 1;
    return halves ? split->in(0) : nullptr;
  }
  Value *a = lastDimSliceOf(x1, 0, h), *b = lastDimSliceOf(x2, h, h);
  return a && a == b && a->dim(-1) == 2 * h ? a : nullptr;
}

// rotate_half(x) = Concat(-x[..., h:], x[..., :h]), or the rotation the
// other way, Concat(x[..., h:], -x[..., :h]) (sets *flipped); returns x.
Value *rotateHalfOf(Value *v, bool *flipped) {
  Node *cat = producer(v, "Concat");
  if (!cat || cat->inputs.size() != 2 || cat->getInt("axis", 0) != v->rank() - 1)
    return nullptr;
  // x2 is the upper half, x1 the lower; one of the two is negated.
  Value *x2, *x1;
  if (Node *neg = producer(cat->in(0), "Neg")) {
    x2 = neg->in(0);
    x1 = cat->in(1);
    *flipped = false;
  } else if (Node *neg = producer(cat->in(1), "Neg")) {
    x2 = cat->in(0);
    x1 = neg->in(0);
    *flipped = true;
  } else {
    return nullptr;
  }
  return halvesOf(x1, x2);
}

// rotate_every_two(x): the pairs (x[2m], x[2m+1]) become (-x[2m+1], x[2m]),
// exported as Reshape(Concat(Unsqueeze(Neg(x[..., 1::2])), Unsqueeze(x[...,
// ::2])) on a new last dim); returns x.
Value *rotateEveryTwoOf(Value *v) {
  Node *flat = producer(v, "Reshape");
  Node *cat = flat ? producer(flat->in(0), "Concat") : nullptr;
  if (!cat || cat->inputs.size() != 2 || v->rank() != 4 ||
      cat->out()->rank() != 5 || cat->getInt("axis", 0) != 4)
    return nullptr;
  Node *u0 = producer(cat->in(0), "Unsqueeze");
  Node *u1 = producer(cat->in(1), "Unsqueeze");
  if (!u0 || !u1 || u0->getInts("axes") != std::vector<int64_t>{4} ||
      u1->getInts("axes") != std::vector<int64_t>{4})
    return nullptr;
  Node *neg = producer(u0->in(0), "Neg");
  if (!neg)
    return nullptr;
  int64_t h = u1->in(0)->dim(-1);
  Value *a = lastDimSliceOf(u1->in(0), 0, h, 2);
  Value *b = lastDimSliceOf(neg->in(0), 1, h, 2);
  bool ok = a && a == b && a->shape == v->shape && a->dim(-1) == 2 * h;
  return ok ? a : nullptr;
}

class RopeFusion {
public:
  explicit RopeFusion(Graph &g) : g_(g) {}

  void run() {
    for (Node *n : nodesWithOp(g_, "Add"))
      fuse(n);
    for (Node *n : nodesWithOp(g_, "Concat"))
      fuseHalves(n);
  }

private:
  // x · t in either order, t a compile-time tensor; returns (x, t).
  static std::optional<std::pair<Value *, Value *>> scaledBy(Value *v) {
    Node *mul = producer(v, "Mul");
    auto ops = commuted(mul, [](Value *t) { return t->constant != nullptr; });
    if (!ops || !isActivation(ops->second))
      return std::nullopt;
    return std::make_pair(ops->second, ops->first);
  }

  void fuse(Node *add) {
    for (int k = 0; k < 2; ++k) {
      auto direct = scaledBy(add->in(k)), rotated = scaledBy(add->in(1 - k));
      if (!direct || !rotated || direct->first->rank() != 4)
        continue;
      bool interleaved = rotateEveryTwoOf(rotated->first) == direct->first;
      bool flipped = false;
      if (!interleaved && rotateHalfOf(rotated->first, &flipped) != direct->first)
        continue;
      Value *x = direct->first;
      int64_t r = x->dim(-1);
      int seqAxis = seqAxisOf(*direct->second->constant, x->shape, r);
      if (seqAxis < 0 ||
          seqAxisOf(*rotated->second->constant, x->shape, r) != seqAxis)
        return;
      Value *cos = table(add, direct->second->constant, x->shape, seqAxis, "cos");
      Value *sin = table(add, rotated->second->constant, x->shape, seqAxis,
                         "sin", flipped ? -1.0 : 1.0);
      // Partial rotary: x is x0[..., :R], and the result is concatenated with
      // x0[..., R:].
      Node *root = add;
      Value *src = x;
      if (Node *cat = soleUser(add->out()); cat && cat->op == "Concat" &&
                                            cat->inputs.size() == 2 &&
                                            cat->in(0) == add->out()) {
        Value *x0 = lastDimSliceOf(x, 0, r);
        if (x0 && x0->rank() == 4 && cat->getInt("axis", 0) == 3 &&
            lastDimSliceOf(cat->in(1), r, x0->dim(3) - r) == x0) {
          root = cat;
          src = x0;
        }
      }
      Node *rope = replaceWithPrimitive(g_, root, "mt.rope", {src, cos, sin},
                                        src->shape);
      rope->setInt("rotary_dim", r);
      rope->setInt("seq_axis", seqAxis);
      if (interleaved)
        rope->setString("rotation", "interleaved");
      return;
    }
  }

  // Concat(x1·c − x2·s, x2·c + x1·s) on the last dim of a 4-d x whose
  // halves are x1 and x2, c and s tables of half width (gpt-oss).
  void fuseHalves(Node *cat) {
    Node *sub = cat->inputs.size() == 2 ? producer(cat->in(0), "Sub") : nullptr;
    Node *add = cat->inputs.size() == 2 ? producer(cat->in(1), "Add") : nullptr;
    if (!sub || !add || cat->out()->rank() != 4 || cat->getInt("axis", 0) != 3)
      return;
    auto x1c = scaledBy(sub->in(0)), x2s = scaledBy(sub->in(1));
    if (!x1c || !x2s)
      return;
    Value *x1 = x1c->first, *x2 = x2s->first, *c = x1c->second,
          *s = x2s->second;
    auto same = [](Value *a, Value *b) {
      return a == b ||
             (a->shape == b->shape && sameValues(*a->constant, *b->constant));
    };
    bool matched = false;
    for (int k = 0; k < 2 && !matched; ++k) {
      auto x2c = scaledBy(add->in(k)), x1s = scaledBy(add->in(1 - k));
      matched = x2c && x1s && x2c->first == x2 && x1s->first == x1 &&
                same(x2c->second, c) && same(x1s->second, s);
    }
    const int64_t h = x1->dim(-1);
    Value *x = matched ? halvesOf(x1, x2) : nullptr;
    Value *paired = matched ? lastDimSliceOf(x1, 0, h, 2) : nullptr;
    if (!x && paired && paired == lastDimSliceOf(x2, 1, h, 2) &&
        paired->dim(-1) == 2 * h)
      x = paired;
    else
      paired = nullptr;
    if (!x || x->rank() != 4)
      return;
    int seqAxis = seqAxisOf(*c->constant, x->shape, h);
    if (seqAxis < 0 || seqAxisOf(*s->constant, x->shape, h) != seqAxis)
      return;
    const Widen widen = paired ? Widen::Pairs : Widen::Halves;
    Value *cos = table(cat, c->constant, x->shape, seqAxis, "cos", 1.0, widen);
    Value *sin = table(cat, s->constant, x->shape, seqAxis, "sin", 1.0, widen);
    if (!paired) {
      Node *rope =
          replaceWithPrimitive(g_, cat, "mt.rope", {x, cos, sin}, x->shape);
      rope->setInt("rotary_dim", x->dim(3));
      rope->setInt("seq_axis", seqAxis);
      return;
    }
    // The pairs rotated in place, then the evens and the odds apart.
    Node *rope = g_.newNode("mt.rope", cat->name, {x, cos, sin}, cat);
    rope->setInt("rotary_dim", x->dim(3));
    rope->setInt("seq_axis", seqAxis);
    rope->setString("rotation", "interleaved");
    Value *y = activation(rope, x->shape);
    Shape pairs = x->shape;
    pairs.back() = h;
    pairs.push_back(2);
    Node *view = g_.newNode("mt.reshape", cat->name, {y}, rope);
    Value *v = activation(view, pairs);
    Node *apart = g_.newNode("mt.transpose", cat->name, {v}, view);
    apart->setInts("perm", {0, 1, 2, 4, 3});
    Value *t = activation(apart, {pairs[0], pairs[1], pairs[2], 2, h});
    Node *back = g_.newNode("mt.reshape", cat->name, {t}, apart);
    g_.replaceAllUses(cat->out(), activation(back, x->shape));
  }

  Value *activation(Node *n, Shape shape) {
    Value *v = g_.addOutput(n, DType::F32, std::move(shape));
    v->fromInput = true;
    return v;
  }

  // The axis (1 or 2) of a 4-d x along which the table varies; -1 if the
  // table is not [.., S, .., width] broadcast over batch and heads.
  static int seqAxisOf(const Const &t, const Shape &x, int64_t width) {
    if (t.shape.size() > 4)
      return -1;
    Shape s(4 - t.shape.size(), 1);
    s.insert(s.end(), t.shape.begin(), t.shape.end());
    if (s[3] != width || (s[0] != 1 && s[0] != x[0]))
      return -1;
    bool on1 = s[1] != 1, on2 = s[2] != 1;
    if (on1 && on2)
      return -1;
    if (on1)
      return s[1] == x[1] ? 1 : -1;
    return on2 && s[2] != x[2] ? -1 : 2;
  }

  // How a table of half width becomes one of x's: [c, c] or [c0, c0, c1,
  // c1, ...].
  enum class Widen { None, Halves, Pairs };

  // The [S, R] table of sign · t (R = x's last dim; t of width R / 2
  // widened as `widen` says); the same Value for the same source constant,
  // sign and widening.
  Value *table(Node *at, const ConstPtr &t, const Shape &x, int seqAxis,
               const char *kind, double sign = 1.0, Widen widen = Widen::None) {
    auto key = std::make_tuple(t.get(), sign, int(widen));
    auto it = tables_.find(key);
    if (it != tables_.end())
      return it->second;
    int64_t seq = x[seqAxis], r = x[3];
    Shape s(4 - t->shape.size(), 1);
    s.insert(s.end(), t->shape.begin(), t->shape.end());
    // Flat index of (b, seq position, r) in the aligned table.
    auto index = [s, seqAxis, widen](int64_t b, int64_t pos, int64_t col) {
      int64_t c[4] = {s[0] == 1 ? 0 : b, 0, 0,
                      widen == Widen::Pairs ? col / 2 : col % s[3]};
      c[seqAxis] = s[seqAxis] == 1 ? 0 : pos;
      return ((c[0] * s[1] + c[1]) * s[2] + c[2]) * s[3] + c[3];
    };
    for (int64_t b = 1; b < s[0]; ++b) // every batch row reads the same table
      for (int64_t i = 0; i < seq * r; ++i)
        if (t->at(index(b, i / r, i % r)) != t->at(index(0, i / r, i % r)))
          fail("{}: the RoPE {} table differs between batch rows; only "
               "positions 0..S-1 in every row are supported",
               at->describe(), kind);
    ConstPtr src = t;
    ConstPtr data =
        lazyConst(DType::F32, {seq, r}, [src, index, r, sign](int64_t i) {
          return sign * src->at(index(0, i / r, i % r));
        });
    // Exports that recompute the tables in every layer yield equal tables:
    // share one frozen param.
    for (Value *known : kinds_[kind])
      if (known->shape == Shape{seq, r} && sameValues(*known->constant, *data))
        return tables_[key] = known;
    int &count = kindCount_[kind];
    std::string name = count ? fmt::format("mt.rope.{}.{}", kind, count)
                             : fmt::format("mt.rope.{}", kind);
    ++count;
    Value *v = g_.newValue(name, DType::F32, {seq, r});
    v->constant = data;
    tables_[key] = v;
    kinds_[kind].push_back(v);
    return v;
  }

  Graph &g_;
  std::map<std::tuple<const Const *, double, int>, Value *> tables_;
  std::map<std::string, std::vector<Value *>> kinds_;
  std::map<std::string, int> kindCount_;
};

} // namespace

void fuseRope(Graph &g) { RopeFusion(g).run(); }

} // namespace mt::onnx_import
