//===- Attention.cpp - causal scaled dot-product attention ----------------===//
//
// Recognized form, q [B, H, S, D], k and v [B, Hkv, S, D]:
//   MatMul(Softmax(mask(scale · MatMul(q, kᵀ)), last dim), v)
// where kᵀ is a Transpose (of k, or of k's pre-transpose layout); the scale
// is any product of Mul/Div by constants on the scores or on q and k; mask is
// any chain of Add of a constant bias, Where(constant condition, scores,
// fill) / Where(condition, fill, scores) and Mul by a 0/1 constant (whose
// zeros another term masks: OpenAI GPT) that together keep exactly j <= i
// (or the last W of those keys: a sliding window; or those of i's chunk of C
// tokens: Llama 4's chunked attention; or both), and whose finite biases,
// if any, are ALiBi's m_h · j (BLOOM, MPT);
// GQA's repeat of k and v as Unsqueeze/Reshape + Expand + Reshape is undone.
// q, k, scores and v may also be merged over batch x heads ([B·H, S, ·],
// GPT-NeoX's baddbmm, OPT's bmm), or q over tokens x heads with one KV head
// (GPT-BigCode's [B, S·H, D]), the scores viewed in 4-d and back for the
// masks, and a Max of the scores with a constant at or below the mask's
// -inf (OPT's clamp to the lowest float) is a no-op. Scores soft-capped
// before the masks, a · Tanh(b · scores) with constants a and b (Gemma 2's
// cap · tanh(s / cap)), become the attention's `softcap` |a| and a factor
// a · b of its scale. Sinks (gpt-oss): the 4-d probabilities are
// Slice(Softmax(c − ReduceMax(c)), all but the last key), c =
// Concat(masked scores, Expand(sinks [1, H, 1, 1])) on the key axis; the
// sinks param becomes the attention's `sinks` operand; or (Granite SWA) the
// product scaled by Unsqueeze(Sigmoid(ReduceLogSumExp(masked scores) −
// sinks [1, H, 1]), -1), the same softmax with one more logit. Also the
// Attention op of opset 23 (causal, no cache, optionally soft-capped), 3-d
// or 4-d.
//
//===----------------------------------------------------------------------===//
#include "frontend/fusion/Fusion.h"

#include "frontend/Error.h"
#include "frontend/fusion/Match.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

namespace mt::onnx_import {
namespace {

// Values at or below this in an additive mask or a fill count as -inf.
constexpr double kMaskedBelow = -1e4;

// What the masks of one attention amount to.
struct MaskForm {
  std::vector<double> slopes; // ALiBi, per query head; empty without
  int64_t window = 0;         // keys j with i - j < window; 0: all j <= i
  int64_t chunk = 0;          // keys j >= i - i % chunk; 0: all j <= i

  int64_t firstKey(int64_t i) const {
    int64_t first = window ? std::max<int64_t>(0, i - window + 1) : 0;
    return chunk ? std::max(first, i - i % chunk) : first;
  }
  bool visible(int64_t i, int64_t j) const {
    return j <= i && j >= firstKey(i);
  }
};

struct MaskTerm {
  // ZeroWhereFalse: a product with a 0/1 constant (OpenAI GPT's scores ·
  // tril + -1e4 · (1 - tril)), which another term must mask where it is 0.
  enum Kind { Additive, KeepWhereTrue, KeepWhereFalse, ZeroWhereFalse } kind;
  ConstPtr condition;  // Additive: the bias; Where: the condition
  ConstPtr fill;       // Where: the masked value
  Shape view;          // the scores' shape where the mask applies
  double factor = 1.0; // Additive: the scales applied after the bias
};

class AttentionFusion {
public:
  explicit AttentionFusion(Graph &g) : g_(g) {}

  void run() {
    for (Node *n : nodesWithOp(g_, "MatMul"))
      fuseDecomposed(n);
    for (Node *n : nodesWithOp(g_, "Attention"))
      fuseOp(n);
  }

private:
  // Folds a scaling of x's source into `scale` when x is only a view of it
  // (OPT scales q before splitting heads): the views then read the
  // unscaled source.
  void foldScaleBehindViews(Value *x, double &scale) {
    // Shape and Size read no values: the unscaled source serves them alike.
    auto onlyReader = [](Value *v) {
      return std::count_if(v->users.begin(), v->users.end(), [](Node *u) {
               return u->op != "Shape" && u->op != "Size";
             }) == 1;
    };
    while (Node *view = producerOneOf(x, {"Reshape", "Transpose"})) {
      x = view->in(0);
      if (!onlyReader(x))
        return;
    }
    double factor = 1.0;
    Value *source = peelScale(x, factor);
    if (source != x && source->shape == x->shape && isActivation(source)) {
      g_.replaceAllUses(x, source);
      scale *= factor;
    }
  }

  // Peels masks and scales off the softmax input; returns the raw scores.
  static Value *peelMasks(Value *s, std::vector<MaskTerm> &masks,
                          double &scale) {
    Shape view = s->shape;
    size_t before = masks.size();
    s = peelMaskTerms(s, masks, scale);
    for (size_t k = before; k < masks.size(); ++k)
      masks[k].view = view;
    return s;
  }

  static Value *peelMaskTerms(Value *s, std::vector<MaskTerm> &masks,
                              double &scale) {
    for (;;) {
      s = peelScale(s, scale);
      // A clamp from below at -inf or lower changes no kept score.
      if (auto clamp = commuted(producer(s, "Max"),
                                [](Value *c) {
                                  auto v = constScalar(c);
                                  return v && *v <= kMaskedBelow;
                                });
          clamp && isActivation(clamp->second)) {
        s = clamp->second;
        continue;
      }
      auto bias = commuted(producer(s, "Add"),
                           [](Value *c) { return c->constant != nullptr; });
      if (bias && isActivation(bias->second)) {
        masks.push_back(
            {MaskTerm::Additive, bias->first->constant, nullptr, {}, scale});
        s = bias->second;
        continue;
      }
      auto zeroing = commuted(producer(s, "Mul"), [](Value *c) {
        if (!c->constant || c->constant->numel < 2)
          return false;
        for (int64_t i = 0; i < c->constant->numel; ++i)
          if (double v = c->constant->at(i); v != 0 && v != 1)
            return false;
        return true;
      });
      if (zeroing && isActivation(zeroing->second)) {
        masks.push_back({MaskTerm::ZeroWhereFalse, zeroing->first->constant,
                         nullptr});
        s = zeroing->second;
        continue;
      }
      Node *where = producer(s, "Where");
      if (where && where->in(0)->constant) {
        if (isActivation(where->in(1)) && where->in(2)->constant) {
          masks.push_back({MaskTerm::KeepWhereTrue, where->in(0)->constant,
                           where->in(2)->constant});
          s = where->in(1);
          continue;
        }
        if (isActivation(where->in(2)) && where->in(1)->constant) {
          masks.push_back({MaskTerm::KeepWhereFalse, where->in(0)->constant,
                           where->in(1)->constant});
          s = where->in(2);
          continue;
        }
      }
      return s;
    }
  }

  // Whether position (i, j) of scores [B, H, S, S] at (b, h) survives the
  // masks, and the finite bias they add there; throws when a Where's fill
  // is not "-inf". The scores' rows are ordered (b, h, i), or (b, i, h) when
  // `seqMajor` (GPT-BigCode's queries merged with their heads); each mask
  // sees them in its own view of that order.
  static bool kept(const std::vector<MaskTerm> &masks, const Shape &scores,
                   bool seqMajor, int64_t b, int64_t h, int64_t i, int64_t j,
                   Node *at, double &bias) {
    int64_t H = scores[1], S = scores[2];
    int64_t row = seqMajor ? (b * S + i) * H + h : (b * H + h) * S + i;
    int64_t flat = row * scores[3] + j;
    bool keep = true, zeroed = false;
    bias = 0;
    for (const MaskTerm &m : masks) {
      const Shape &view = m.view;
      double c =
          m.condition->at(BroadcastIndex(view, m.condition->shape)(flat));
      if (m.kind == MaskTerm::ZeroWhereFalse) {
        zeroed |= c == 0;
        continue;
      }
      if (m.kind == MaskTerm::Additive) {
        if (c <= kMaskedBelow)
          keep = false;
        else
          bias += m.factor * c;
        continue;
      }
      bool k = (c != 0) == (m.kind == MaskTerm::KeepWhereTrue);
      if (!k) {
        double fill = m.fill->at(BroadcastIndex(view, m.fill->shape)(flat));
        if (fill > kMaskedBelow)
          fail("{}: the attention mask fills masked scores with {}, not -inf",
               at->describe(), fill);
      }
      keep &= k;
    }
    if (zeroed && keep)
      fail("{}: the attention multiplies score ({}, {}) by 0 and keeps it; a "
           "product mask must be masked again where it is 0",
           at->describe(), i, j);
    return keep;
  }

  // Checks that the masks keep exactly the causal triangle, or its band of
  // the last `window` keys (a sliding window), and that their finite biases
  // are ALiBi's (per head, a slope times the key position, plus anything
  // constant along a row). Every row is checked when the sequence is short,
  // else the first and last 64 rows and 64 between, in full, at the first
  // and last batch row and head; the heads between (whose ALiBi slopes
  // differ) on their first, middle and last rows.
  MaskForm checkCausal(const std::vector<MaskTerm> &masks, const Shape &scores,
                       Node *at, bool seqMajor = false) {
    // Attentions with the same masks, seen the same way, agree.
    CheckKey key{{}, scores, seqMajor};
    for (const MaskTerm &m : masks)
      std::get<0>(key).push_back({m.condition.get(), m.factor, m.view});
    if (auto it = checked_.find(key); it != checked_.end())
      return it->second;
    if (masks.empty())
      fail("{}: attention without a causal mask; decoder training needs "
           "causal attention",
           at->describe());
    MaskForm form;
    int64_t s = scores[2];
    double bias = 0;
    auto keptAt = [&](int64_t b, int64_t h, int64_t i, int64_t j, double &c) {
      return kept(masks, scores, seqMajor, b, h, i, j, at, c);
    };
    // The first key that row i of the first batch row and head keeps,
    // searched from `from` on (an earlier row's, when the form holds).
    auto firstKept = [&](int64_t i, int64_t from) {
      while (from < i && !keptAt(0, 0, i, from, bias))
        ++from;
      return from;
    };
    // Chunks: the first row after 0 that sees only itself starts the second
    // chunk (a window of 1 makes every row so). Then the window, from the
    // last row of the first chunk (or of the sequence).
    int64_t first = 0, edge = s;
    for (int64_t i = 1; i < s && edge == s; ++i)
      if ((first = firstKept(i, first)) == i)
        edge = i;
    if (edge == 1)
      form.window = 1;
    else if (edge < s)
      form.chunk = edge;
    int64_t last = std::min(edge, s) - 1;
    if (edge > 1 && (first = firstKept(last, 0)) > 0)
      form.window = last - first + 1;
    // The slopes, from the bias between the last two keys of the last row
    // that sees two.
    form.slopes.assign(scores[1], 0.0);
    int64_t two = s - 1;
    while (two > 0 && form.firstKey(two) == two)
      --two;
    for (int64_t h = 0; h < scores[1] && two > 0; ++h) {
      double before;
      keptAt(0, h, two, two - 1, before);
      keptAt(0, h, two, two, bias);
      form.slopes[h] = bias - before;
    }
    // Long sequences are checked on a sample: the first and last 64
    // queries and keys, 64 strided ones, and the bands around the diagonal
    // and the row's first key (where an off-by-one at a window's or chunk's
    // edge would show).
    auto sampled = [&](int64_t i) {
      return s <= 256 || i < 64 || i >= s - 64 || i % (s / 64) == 0;
    };
    auto near = [&](int64_t i, int64_t j) {
      return std::abs(j - i) <= 64 || std::abs(form.firstKey(i) - j) <= 64;
    };
    std::vector<int64_t> rows, fewRows{0, s / 2, s - 1};
    for (int64_t i = 0; i < s; ++i)
      if (sampled(i))
        rows.push_back(i);
    const int64_t H = scores[1];
    for (int64_t b : {int64_t(0), scores[0] - 1})
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i : h == 0 || h == H - 1 ? rows : fewRows) {
          // Biases are compared along the row from its first visible key.
          int64_t base = form.firstKey(i);
          double rowBias = 0;
          keptAt(b, h, i, base, rowBias);
          for (int64_t j = 0; j < s; ++j) {
            if (!sampled(j) && !near(i, j))
              continue;
            bool keep = keptAt(b, h, i, j, bias);
            if (keep != form.visible(i, j))
              fail("{}: the attention mask {} query {} to see key {}; only "
                   "causal masks, with or without a sliding window or "
                   "chunks, are supported",
                   at->describe(), keep ? "allows" : "does not allow", i, j);
            double want = rowBias + form.slopes[h] * double(j - base);
            // The exported biases are float32: a few ulps of the terms.
            if (keep && std::abs(bias - want) >
                            1e-5 * (std::abs(bias) + std::abs(want)) + 1e-6)
              fail("{}: the attention bias is {} at head {}, query {}, key "
                   "{}; only causal masks and ALiBi (a slope per head times "
                   "the key position) are supported",
                   at->describe(), bias, h, i, j);
          }
        }
    if (std::all_of(form.slopes.begin(), form.slopes.end(),
                    [](double m) { return m == 0; }))
      form.slopes.clear();
    return checked_[key] = form;
  }

  static void setScoreAttrs(Node *attn, double scale, double softcap,
                            const MaskForm &form) {
    attn->setFloat("scale", scale);
    if (softcap != 0)
      attn->setFloat("softcap", softcap);
    if (!form.slopes.empty())
      attn->setFloats("alibi_slopes", form.slopes);
    if (form.window)
      attn->setInt("window", form.window);
    if (form.chunk)
      attn->setInt("chunk", form.chunk);
  }

  Value *transposed(Node *after, Value *x, std::vector<int64_t> perm) {
    Shape s;
    for (int64_t p : perm)
      s.push_back(x->dim(p));
    Node *t = g_.newNode("mt.transpose", after->name, {x}, after);
    t->setInts("perm", perm);
    Value *y = g_.addOutput(t, DType::F32, s);
    y->fromInput = true;
    return y;
  }

  // x [B, S, n·D] split into n heads: [B, n, S, D].
  Value *splitHeads(Node *after, Value *x, int64_t n) {
    Value *r = reshaped(after, x, {x->dim(0), x->dim(1), n, x->dim(2) / n});
    return transposed(r->producer, r, {0, 2, 1, 3});
  }

  // x [B, n, S, d] with zeros after its d columns, to `width`.
  Value *padded(Node *after, Value *x, int64_t width) {
    Shape s = x->shape;
    s.back() = width;
    Node *p = g_.newNode("mt.pad", after->name, {x},
                         x->producer ? x->producer : after);
    p->setInt("axis", 3);
    p->setInt("start", 0);
    Value *y = g_.addOutput(p, DType::F32, std::move(s));
    y->fromInput = true;
    return y;
  }

  Value *reshaped(Node *after, Value *x, Shape s) {
    Node *r = g_.newNode("mt.reshape", after->name, {x}, after);
    Value *y = g_.addOutput(r, DType::F32, std::move(s));
    y->fromInput = true;
    return y;
  }

  // k [B, H, S, D] from kᵀ [B, H, D, S].
  Value *untranspose(Node *at, Value *kt) {
    if (Node *t = producer(kt, "Transpose")) {
      std::vector<int64_t> p = t->getInts("perm");
      std::vector<int64_t> q{p[0], p[1], p[3], p[2]};
      if (q == std::vector<int64_t>{0, 1, 2, 3})
        return t->in(0);
      return transposed(at, t->in(0), q);
    }
    return transposed(at, kt, {0, 1, 3, 2});
  }

  // x4 [B, H, S, D] when x is its reshape to [B·H, S, D]; else null.
  static Value *unmerge(Value *x, int64_t B, int64_t H) {
    Node *r = producer(x, "Reshape");
    if (!r || x->rank() != 3)
      return nullptr;
    Value *x4 = r->in(0);
    bool ok = x4->rank() == 4 && x4->dim(0) == B && x4->dim(1) == H &&
              x->shape == Shape{B * H, x4->dim(2), x4->dim(3)};
    return ok ? x4 : nullptr;
  }

  // kv [B, Hkv, S, D] when x is its GQA repeat to [B, Hkv·n, S, D].
  static Value *unrepeat(Value *x) {
    Node *reshape = producer(x, "Reshape");
    Node *expand = reshape ? producer(reshape->in(0), "Expand") : nullptr;
    Node *unsq = expand ? producerOneOf(expand->in(0), {"Unsqueeze", "Reshape"})
                        : nullptr;
    if (!unsq)
      return x;
    Value *kv = unsq->in(0);
    const Shape &u = unsq->out()->shape, &e = expand->out()->shape;
    bool ok = kv->rank() == 4 &&
              u == Shape{kv->dim(0), kv->dim(1), 1, kv->dim(2), kv->dim(3)} &&
              e.size() == 5 && e[0] == u[0] && e[1] == u[1] && e[3] == u[3] &&
              e[4] == u[4] && x->shape == Shape{e[0], e[1] * e[2], e[3], e[4]};
    return ok ? kv : x;
  }

  // The raw scores behind the softmax input: masks, scales and a soft cap
  // peeled off, through views between the merged 3-d scores ([B·H, S, S],
  // or [B, S·H, S]) and a 4-d one.
  static Value *rawScores(Value *s, std::vector<MaskTerm> &masks, double &scale,
                          double &softcap) {
    Node *tanh = nullptr; // the soft cap's, once peeled
    for (;;) {
      size_t before = masks.size();
      s = peelMasks(s, masks, scale);
      if (tanh && masks.size() != before)
        fail("{}: an attention mask inside the soft cap's Tanh is not "
             "supported (masks go after it)",
             tanh->describe());
      // a · tanh(b · x) = |a| · tanh(a·b · x / |a|): |a| caps the scores
      // a·b · x.
      if (Node *t = producer(s, "Tanh"); t && !tanh && scale != 0) {
        tanh = t;
        double inner = 1.0;
        s = peelScale(t->in(0), inner);
        softcap = std::abs(scale);
        scale *= inner;
        continue;
      }
      Node *r = producer(s, "Reshape");
      if (!r)
        return s;
      const Shape &from = r->in(0)->shape;
      // Any view keeps the rows' order, which q's layout fixes (kept()).
      bool view = s->rank() + int64_t(from.size()) == 7 &&
                  numelOf(from) == s->numel() && from.back() == s->shape.back();
      if (!view)
        return s;
      s = r->in(0);
    }
  }

  // The softmax behind p: through float-to-float Casts (BLOOM's) and views
  // of the probabilities between 3-d and 4-d.
  static Node *softmaxOf(Value *p) {
    for (;;) {
      if (Node *c = producer(p, "Cast");
          c && c->in(0)->dtype == DType::F32 && p->dtype == DType::F32) {
        p = c->in(0);
        continue;
      }
      Node *r = producer(p, "Reshape");
      if (!r || numelOf(r->in(0)->shape) != numelOf(p->shape) ||
          r->in(0)->shape.back() != p->shape.back() ||
          (r->in(0)->rank() != 3 && r->in(0)->rank() != 4))
        return producer(p, "Softmax");
      p = r->in(0);
    }
  }

  // x when p = Slice(x) keeps all but the last element of x's last axis
  // (the sink's column), else null. Slices are in their normal form
  // (handlers/Tensor.cpp: per dim a start, a step and a size).
  static Value *allButLastKey(Value *p) {
    Node *s = producer(p, "Slice");
    if (!s || s->in(0)->rank() == 0 || s->in(0)->shape.back() < 2)
      return nullptr;
    Value *x = s->in(0);
    Shape sizes = x->shape;
    sizes.back() -= 1;
    bool kept = s->getInts("starts") == std::vector<int64_t>(x->rank(), 0) &&
                s->getInts("steps") == std::vector<int64_t>(x->rank(), 1) &&
                s->getInts("sizes") == std::vector<int64_t>(sizes);
    return kept ? x : nullptr;
  }

  // c when v = c − ReduceMax(c, last axis, keepdims): a shift the softmax
  // cancels. (The reductions' handler has made the axes an attribute.)
  static Value *withoutRowMax(Value *v) {
    Node *sub = producer(v, "Sub");
    Node *max = sub ? producer(sub->in(1), "ReduceMax") : nullptr;
    bool shift =
        max && max->in(0) == sub->in(0) && max->getInt("keepdims", 1) == 1 &&
        max->getInts("axes") == std::vector<int64_t>{sub->in(0)->rank() - 1};
    return shift ? sub->in(0) : v;
  }

  // The masked scores of c = Concat(scores, Expand(sinks), last axis) with
  // sinks a param of H elements ([1, H, 1, 1], or a Reshape of [H]); sets
  // `sinks`. Null when c is not that.
  static Value *sinkLogits(Value *c, Value *&sinks) {
    Node *cat = producer(c, "Concat");
    if (!cat || cat->inputs.size() != 2 || c->rank() != 4 ||
        cat->getInt("axis", 0) != 3) // made non-negative by its handler
      return nullptr;
    Node *expand = producer(cat->in(1), "Expand");
    Value *w = expand ? expand->in(0) : nullptr;
    if (Node *r = w ? producer(w, "Reshape") : nullptr)
      w = r->in(0);
    auto param = w ? weightView(w) : std::nullopt;
    const int64_t H = c->dim(1);
    if (!param || param->transposed || param->param->numel() != H ||
        expand->in(0)->shape != Shape{1, H, 1, 1} ||
        cat->in(1)->shape != Shape{c->dim(0), H, c->dim(2), 1})
      return nullptr;
    sinks = param->param;
    return cat->in(0);
  }

  // Granite SWA's sinks: the product scaled by Unsqueeze(Sigmoid(
  // ReduceLogSumExp(logits, last) − sinks), -1) (that is, by Σ / (Σ +
  // exp(sink))), sinks a param of H elements [1, H, 1] (or a Reshape of
  // [H], exported without the ONNX optimizer). Returns the Mul
  // whose output the attention with sinks is, and sets `sinks`; else null.
  static Node *sinkScaled(Node *mm, Value *logits, Value *&sinks) {
    Node *mul = soleUser(mm->out());
    if (!mul || mul->op != "Mul" || logits->rank() != 4)
      return nullptr;
    Value *other = mul->in(0) == mm->out() ? mul->in(1) : mul->in(0);
    Node *unsq = producer(other, "Unsqueeze");
    // The activations' fusion has made the Sigmoid a primitive by now.
    Node *sig =
        unsq ? producerOneOf(unsq->in(0), {"Sigmoid", "mt.sigmoid"}) : nullptr;
    Node *sub = sig ? producer(sig->in(0), "Sub") : nullptr;
    Node *lse = sub ? producer(sub->in(0), "ReduceLogSumExp") : nullptr;
    const int64_t H = logits->dim(1);
    Value *w = lse ? sub->in(1) : nullptr;
    if (Node *r = w ? producer(w, "Reshape") : nullptr)
      w = r->in(0);
    auto param = w ? weightView(w) : std::nullopt;
    if (!param || param->transposed || param->param->numel() != H ||
        sub->in(1)->shape != Shape{1, H, 1} || lse->in(0) != logits ||
        lse->getInts("axes") != std::vector<int64_t>{3} ||
        lse->getInt("keepdims", 1) != 0 ||
        (unsq->getInts("axes") != std::vector<int64_t>{3} &&
         unsq->getInts("axes") != std::vector<int64_t>{-1}) ||
        mul->out()->shape != mm->out()->shape)
      return nullptr;
    sinks = param->param;
    return mul;
  }

  void fuseDecomposed(Node *mm) {
    Value *withSink = allButLastKey(mm->in(0));
    Node *softmax = softmaxOf(withSink ? withSink : mm->in(0));
    Value *v = mm->in(1);
    if (!softmax || !isActivation(v) || (v->rank() != 4 && v->rank() != 3) ||
        mm->in(0)->rank() != v->rank() ||
        softmax->getInt("axis", -1) != softmax->out()->rank() - 1)
      return;
    // Softmax(c − max c) is Softmax(c) (gpt-oss, MiMo-V2-Flash subtract it).
    Value *logits = withoutRowMax(softmax->in(0)), *sinks = nullptr;
    if (withSink && !(logits = sinkLogits(logits, sinks)))
      return;
    // What the attention replaces: the product, or its sink-scaled value.
    Node *root = withSink ? nullptr : sinkScaled(mm, logits, sinks);
    if (!root)
      root = mm;
    std::vector<MaskTerm> masks;
    double scale = 1.0, softcap = 0.0;
    Value *scores = rawScores(logits, masks, scale, softcap);
    Node *qk = producer(scores, "MatMul");
    if (!qk || (sinks && scores->rank() != 4))
      return;
    Value *q = peelScale(qk->in(0), scale);
    Value *kt = peelScale(qk->in(1), scale);
    Value *k = nullptr;
    // Scores from a batched 3-d product over B·H: look through to q and k
    // in 4-d; B and H come from q's reshape. kᵀ is k merged and transposed
    // ([0, 2, 1]), or kᵀ [B, H, D, S] merged (BLOOM).
    if (scores->rank() == 3) {
      Node *r = producer(q, "Reshape");
      if (r && r->in(0)->rank() == 3)
        return fuseSeqMajor(mm, masks, scale, softcap, r->in(0), q, kt, v);
      if (!r || r->in(0)->rank() != 4)
        return;
      int64_t B = r->in(0)->dim(0), H = r->in(0)->dim(1);
      q = unmerge(q, B, H);
      if (Node *t = producer(kt, "Transpose");
          t && t->getInts("perm") == std::vector<int64_t>{0, 2, 1})
        k = unmerge(peelScale(t->in(0), scale), B, H);
      else if (Value *kt4 = unmerge(kt, B, H))
        kt = peelScale(kt4, scale);
      if (!q || (!k && kt->rank() != 4))
        return;
      q = peelScale(q, scale);
    }
    if (!isActivation(q) || !isActivation(kt) || q->rank() != 4 ||
        (!k && kt->rank() != 4))
      return;
    int64_t B = q->dim(0), H = q->dim(1);
    bool mergedOut = v->rank() == 3;
    if (mergedOut && !(v = unmerge(v, B, H)))
      return;
    MaskForm form = checkCausal(masks, Shape{B, H, q->dim(2), v->dim(2)}, mm);
    // The kernels bias by m_h · (j − i), a shift per row that the softmax
    // cancels, but not against an unbiased sink.
    if (sinks && !form.slopes.empty())
      fail("{}: attention sinks together with ALiBi are not supported",
           mm->describe());
    if (sinks && mergedOut)
      return;
    // A scale may also sit before kᵀ's transpose (k · d^-¼, then kᵀ).
    k = unrepeat(peelScale(k ? k : untranspose(mm, kt), scale));
    v = unrepeat(v);
    // A value head dim unlike the query's (MiMo-V2-Flash, DeepSeek's MLA)
    // is padded to the wider one below.
    auto offLast = [](const Shape &s) { return Shape(s.begin(), s.end() - 1); };
    if (offLast(k->shape) != offLast(v->shape) || q->dim(1) % k->dim(1) ||
        q->dim(3) != k->dim(3) || (mergedOut && k->shape != v->shape))
      fail("{}: attention with q {}, k {} and v {} is not supported (k and v "
           "must match but for their head dims, and query heads be a "
           "multiple of KV heads)",
           mm->describe(), shapeStr(q->shape), shapeStr(k->shape),
           shapeStr(v->shape));
    // The graph changes from here on: no more bailing out.
    foldScaleBehindViews(q, scale);
    auto setAttrs = [&](Node *attn) {
      setScoreAttrs(attn, scale, softcap, form);
    };
    // Zeros widen the narrower head dims: q·k is unchanged, and the
    // padded values' columns of the output are 0, sliced off again.
    const int64_t D = q->dim(3), Dv = v->dim(3), width = std::max(D, Dv);
    if (D < width) {
      q = padded(mm, q, width);
      k = padded(mm, k, width);
    } else if (Dv < width) {
      v = padded(mm, v, width);
    }
    std::vector<Value *> ins{q, k, v};
    if (sinks)
      ins.push_back(sinks);
    if (!mergedOut && Dv == width) {
      setAttrs(replaceWithPrimitive(g_, root, "mt.attention", ins, q->shape));
      return;
    }
    if (!mergedOut) {
      Node *attn = g_.newNode("mt.attention", mm->name, ins, root);
      setAttrs(attn);
      Value *y = g_.addOutput(attn, DType::F32, q->shape);
      y->fromInput = true;
      Node *narrow = g_.newNode("mt.slice", mm->name, {y}, attn);
      narrow->setInt("axis", 3);
      narrow->setInt("start", 0);
      Value *out = g_.addOutput(narrow, DType::F32, root->out()->shape);
      out->fromInput = true;
      g_.replaceAllUses(root->out(), out);
      return;
    }
    // The product was [B·H, S, D]: the attention's output merged the same way.
    Node *attn = g_.newNode("mt.attention", mm->name, ins, mm);
    setAttrs(attn);
    Value *y = g_.addOutput(attn, DType::F32, q->shape);
    y->fromInput = true;
    // Its views back to [B, H, S, D] read the attention's output directly.
    for (Node *u : std::vector<Node *>(mm->out()->users))
      if (u->op == "Reshape" && u->out()->shape == y->shape)
        g_.replaceAllUses(u->out(), y);
    g_.replaceAllUses(mm->out(), reshaped(attn, y, mm->out()->shape));
  }

  // GPT-BigCode's multi-query form: q [B, S, H·D] merged to [B, S·H, D]
  // (rows ordered by token, then head), one KV head k, v [B, S, D], scores
  // [B, S·H, S] (viewed as [B, S, H, S] for the mask) and the product
  // [B, S·H, D].
  void fuseSeqMajor(Node *mm, const std::vector<MaskTerm> &masks, double scale,
                    double softcap, Value *x, Value *q3, Value *kt, Value *v) {
    int64_t B = x->dim(0), S = x->dim(1), D = q3->dim(2);
    Node *t = producer(kt, "Transpose");
    if (q3->dim(1) % S || !t ||
        t->getInts("perm") != std::vector<int64_t>{0, 2, 1} || v->rank() != 3)
      return;
    int64_t H = q3->dim(1) / S;
    x = peelScale(x, scale);
    Value *k = peelScale(t->in(0), scale);
    if (!isActivation(x) || !isActivation(k) || !isActivation(v) ||
        x->shape != Shape{B, S, H * D} || k->shape != Shape{B, S, D} ||
        v->shape != k->shape)
      return;
    MaskForm form = checkCausal(masks, Shape{B, H, S, S}, mm, true);
    Value *q4 = splitHeads(mm, x, H);
    Value *k4 = reshaped(q4->producer, k, {B, 1, S, D});
    Value *v4 = reshaped(k4->producer, v, {B, 1, S, D});
    Node *attn =
        g_.newNode("mt.attention", mm->name, {q4, k4, v4}, v4->producer);
    setScoreAttrs(attn, scale, softcap, form);
    Value *y = g_.addOutput(attn, DType::F32, q4->shape);
    y->fromInput = true;
    Value *ty = transposed(attn, y, {0, 2, 1, 3});
    g_.replaceAllUses(mm->out(), reshaped(ty->producer, ty, mm->out()->shape));
  }

  void fuseOp(Node *n) {
    if (n->in(4) || n->in(5))
      fail("{}: a KV cache (past_key/past_value) is not supported in training",
           n->describe());
    const double softcap = n->getFloat("softcap", 0);
    if (softcap < 0)
      fail("{}: softcap {} is negative", n->describe(), softcap);
    Value *q = n->in(0), *k = n->in(1), *v = n->in(2);
    bool threeD = q->rank() == 3;
    if (threeD) {
      int64_t h = n->getInt("q_num_heads", 0),
              hkv = n->getInt("kv_num_heads", 0);
      if (h <= 0 || hkv <= 0 || q->dim(2) % h || k->dim(2) % hkv)
        fail("{}: 3-d inputs need q_num_heads and kv_num_heads", n->describe());
      q = splitHeads(n, q, h);
      k = splitHeads(n, k, hkv);
      v = splitHeads(n, v, hkv);
    }
    Shape scores{q->dim(0), q->dim(1), q->dim(2), k->dim(2)};
    MaskForm form;
    if (Value *mask = n->in(3)) {
      if (!mask->constant)
        fail("{}: attn_mask must be a compile-time causal mask", n->describe());
      MaskTerm m =
          mask->dtype == DType::Bool
              ? MaskTerm{MaskTerm::KeepWhereTrue, mask->constant,
                         scalarConst(DType::F32, -INFINITY), scores}
              : MaskTerm{MaskTerm::Additive, mask->constant, nullptr, scores};
      form = checkCausal({m}, scores, n);
    } else if (!n->getInt("is_causal", 0)) {
      fail("{}: attention without a causal mask; decoder training needs "
           "causal attention",
           n->describe());
    }
    if (k->shape != v->shape || q->dim(1) % k->dim(1))
      fail("{}: query heads must be a multiple of KV heads and k match v",
           n->describe());
    double scale = n->getFloat("scale", 1.0 / std::sqrt(double(q->dim(3))));
    Node *attn = g_.newNode("mt.attention", n->name, {q, k, v}, n);
    setScoreAttrs(attn, scale, softcap, form);
    Value *y = g_.addOutput(attn, DType::F32, q->shape);
    y->fromInput = true;
    if (threeD) {
      Value *t = transposed(attn, y, {0, 2, 1, 3});
      y = reshaped(t->producer, t, n->out()->shape);
    }
    g_.replaceAllUses(n->out(), y);
  }

  Graph &g_;
  using CheckKey =
      std::tuple<std::vector<std::tuple<const Const *, double, Shape>>, Shape,
                 bool>;
  std::map<CheckKey, MaskForm> checked_;
};

} // namespace

void fuseAttention(Graph &g) { AttentionFusion(g).run(); }

} // namespace mt::onnx_import
