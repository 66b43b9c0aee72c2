//===- Fusion.cpp - the idiom fusion pipeline -----------------------------===//
#include "frontend/fusion/Fusion.h"

#include "frontend/Error.h"
#include "frontend/fusion/Match.h"

#include <algorithm>
#include <set>
#include <vector>

namespace mt::onnx_import {

namespace {

// A TopK that n is or feeds within a few ops: a choice by score that none
// of the fused routers made (further off, it would more likely be another
// layer's, beside the point).
Node *topKNear(Node *n) {
  std::vector<Node *> ring{n};
  std::set<Node *> seen{n};
  for (int hops = 0; hops <= 8 && !ring.empty(); ++hops) {
    std::vector<Node *> next;
    for (Node *m : ring) {
      if (m->op == "TopK" && !m->isPrimitive())
        return m;
      for (Value *v : m->outputs)
        if (v)
          for (Node *u : v->users)
            if (seen.insert(u).second)
              next.push_back(u);
    }
    ring = std::move(next);
  }
  return nullptr;
}

// An op that returns its first input as it is, whatever the values: what
// an export without the ONNX optimizer writes around a router's indices
// and the experts' weights (a Max, Min, Sum or Concat of one input, an
// Expand or Reshape to the input's own shape, a Transpose by the identity),
// and around a strided slice, one per axis (a Slice of every element).
bool isIdentity(const Node *n) {
  const Value *x = n->in(0);
  if (!n->domain.empty() || n->out()->shape != x->shape ||
      n->out()->dtype != x->dtype)
    return false;
  const std::string &op = n->op;
  if (op == "Max" || op == "Min" || op == "Sum" || op == "Mean" ||
      op == "Concat")
    return n->inputs.size() == 1;
  if (op == "Expand" || op == "Reshape")
    return true;
  if (op == "Slice") {
    std::vector<int64_t> steps = n->getInts("steps");
    return std::all_of(steps.begin(), steps.end(),
                       [](int64_t s) { return s == 1; });
  }
  if (op == "Transpose") {
    std::vector<int64_t> perm = n->getInts("perm");
    for (size_t i = 0; i < perm.size(); ++i)
      if (perm[i] != int64_t(i))
        return false;
    return true;
  }
  return false;
}

bool isView(const Node *n) {
  return n && n->domain.empty() &&
         (n->op == "Reshape" || n->op == "Squeeze" || n->op == "Unsqueeze" ||
          n->op == "Flatten");
}

// The earliest value behind a run of views ending in n whose shape is n's
// (Squeeze(Unsqueeze(h)) is h: views keep the elements in order), or null.
Value *viewedBack(const Node *n) {
  if (!isView(n))
    return nullptr;
  Value *found = nullptr;
  for (const Node *v = n; isView(v); v = v->in(0)->producer)
    if (v->in(0)->shape == n->out()->shape)
      found = v->in(0);
  return found;
}

} // namespace

void removeNoOps(Graph &g) {
  for (auto &node : g.nodes()) {
    Node *n = node.get();
    Value *x = n->in(0);
    if (!x || n->outputs.empty())
      continue;
    if (x->initializer && isIdentity(n)) { // a weight seen as it is
      g.replaceAllUses(n->out(), x);
      continue;
    }
    // x · 1, x / 1, x + 0, x − 0 by constants that do not broadcast x (an
    // export without the ONNX optimizer keeps softplus's beta of 1, also on
    // weights: xIELU's alphas).
    auto identity = [&](Value *c, double one) {
      return isSplat(c, one) && n->out()->shape == x->shape &&
             n->out()->dtype == x->dtype;
    };
    if (n->domain.empty() && n->inputs.size() == 2 &&
        (((n->op == "Mul" || n->op == "Div") && identity(n->in(1), 1)) ||
         ((n->op == "Add" || n->op == "Sub") && identity(n->in(1), 0)))) {
      g.replaceAllUses(n->out(), x);
      continue;
    }
    if (!isActivation(x))
      continue;
    if (Value *same = viewedBack(n)) {
      g.replaceAllUses(n->out(), same);
      continue;
    }
    bool noOp =
        ((n->op == "Identity" || n->op == "Dropout") && n->domain.empty()) ||
        isIdentity(n);
    // The trainer computes in f32 throughout: casts between float types (an
    // fp16 export's upcasts around norms and softmax) change nothing, and
    // casts between integer types only touch token ids.
    if (n->op == "Cast" || n->op == "CastLike")
      noOp = (isFloat(x->dtype) && isFloat(n->out()->dtype)) ||
             (isInteger(x->dtype) && isInteger(n->out()->dtype));
    if (noOp)
      g.replaceAllUses(n->out(), x);
  }
}

void fuseIdioms(Graph &g) {
  // Dead nodes are dropped after each step so that use counts, which the
  // idioms consult ("used only by this Mul"), stay exact.
  for (void (*step)(Graph &) :
       {removeNoOps, fuseEmbeddings, fuseNorms, fuseGelu, fuseMoe,
        fuseCausalConv, fuseGatedScans, fuseActivations, fuseRope,
        fuseAttention, fuseSoftcaps, fuseLinear, lowerRemaining}) {
    step(g);
    g.removeDeadNodes();
  }
  // The first unexplained node computing an activation, in graph order:
  // usually where an idiom broke. (Constants it reads are not the culprit.)
  for (auto &node : g.nodes()) {
    if (node->isPrimitive() || node->outputs.empty() ||
        !isActivation(node->out()))
      continue;
    // A choice by score, made or fed here, outside the fused routers.
    if (Node *topk = topKNear(node.get())) {
      const char *instance =
          "DeepSeek's sparse attention chooses each query's keys so, and "
          "compiles while its index_topk covers --seq-len; see "
          "docs/importer.md";
      if (topk == node.get())
        fail("{} computes '{}' at run time: a choice by score that no "
             "supported router makes ({})",
             node->describe(), node->out()->name, instance);
      fail("{} computes '{}' at run time, and no supported idiom explains "
           "it: it leads to {}, a choice by score that no supported router "
           "makes ({})",
           node->describe(), node->out()->name, topk->describe(), instance);
    }
    fail("{} computes '{}' at run time, and no supported idiom explains "
         "it (see docs/importer.md for the supported forms)",
         node->describe(), node->out()->name);
  }
}

} // namespace mt::onnx_import
