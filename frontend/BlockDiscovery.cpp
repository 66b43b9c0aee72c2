//===- BlockDiscovery.cpp - layers between residual-stream cuts -----------===//
//
// Walking the primitives in topological order, a value is a cut when it is
// the only activation still waiting for a reader: then every path from the
// input to the logits passes through it (the residual stream between two
// sublayers, the final norm's output). The graph between consecutive cuts is
// a segment; a segment is residual when its output is a sum that includes
// its input. Segments before the first residual one form the embedding,
// those after the last the head, and the residual ones group into decoder
// layers, each starting where a token mixer does: attention, a gated scan
// (gated DeltaNet, Mamba-2) or a short causal convolution (LFM2), so that a
// hybrid's mixers of either kind each head a layer. Layers are deduplicated by
// a structural signature (ops, attributes, shapes and wiring, never names), so
// N identical layers become one template applied N times.
//
//===----------------------------------------------------------------------===//
#include "frontend/BlockDiscovery.h"

#include "frontend/Error.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

namespace mt::onnx_import {

std::vector<Node *> topologicalOrder(Graph &g) {
  std::vector<Node *> order;
  std::set<Node *> visited;
  // Iterative DFS: a 100-layer model nests a few thousand producers deep.
  std::vector<std::pair<Node *, size_t>> stack;
  for (Value *out : g.outputs) {
    if (!out->producer || !visited.insert(out->producer).second)
      continue;
    stack.push_back({out->producer, 0});
    while (!stack.empty()) {
      auto &[n, next] = stack.back();
      if (next < n->inputs.size()) {
        Value *v = n->inputs[next++];
        if (v && v->producer && visited.insert(v->producer).second)
          stack.push_back({v->producer, 0});
        continue;
      }
      order.push_back(n);
      stack.pop_back();
    }
  }
  return order;
}

namespace {

bool isParam(Value *v) { return v && !v->producer && !v->fromInput; }

// Ops, attributes, shapes and wiring of `b`, numbering activations by
// definition and params by first use.
void sign(Block &b) {
  std::map<Value *, int64_t> act, param;
  act[b.input] = 0;
  std::string s;
  for (Node *n : b.nodes) {
    s += n->op + "(";
    for (Value *v : n->inputs) {
      if (!v) {
        s += "_,";
      } else if (isParam(v)) {
        auto [it, fresh] = param.emplace(v, param.size());
        if (fresh)
          b.params.push_back(v);
        // Frozen or trained is part of a template: its backward differs.
        bool frozen = !v->initializer || v->buffer;
        s += "p" + std::to_string(it->second) + (frozen ? "f" : "") +
             shapeStr(v->shape) + ",";
      } else {
        auto it = act.find(v);
        if (it == act.end())
          fail("internal: block input '{}' is not the block's input", v->name);
        s += "a" + std::to_string(it->second) + ",";
      }
    }
    s += ")";
    for (auto &[k, a] : n->attrs) {
      s += k + "=";
      switch (a.kind) {
      case Attr::Int: s += std::to_string(a.i); break;
      case Attr::Float: s += fmt::format("{:.17g}", a.f); break;
      case Attr::String: s += a.s; break;
      case Attr::Ints: s += shapeStr(a.ints); break;
      case Attr::Floats:
        for (double f : a.floats)
          s += fmt::format("{:.17g},", f);
        break;
      case Attr::Unit:
        break; // present

      default: break;
      }
      s += ";";
    }
    for (Value *v : n->outputs) {
      act.emplace(v, act.size());
      s += shapeStr(v->shape);
    }
    s += "\n";
  }
  b.signature = b.kind + "\n" + s;
}

// Whether the mt.add tree computing v has `input` as a summand.
bool sumsIn(Value *v, Value *input) {
  if (v == input)
    return true;
  Node *add = v->producer;
  return add && add->op == "mt.add" &&
         (sumsIn(add->in(0), input) || sumsIn(add->in(1), input));
}

struct Segment {
  Value *input, *output;
  std::vector<Node *> nodes;
  bool residual = false, mixes = false; // mixes: reads other positions
};

bool mixesPositions(const Node *n) {
  return n->op == "mt.attention" || n->op == "mt.gated_delta" ||
         n->op == "mt.gated_linear" || n->op == "mt.causal_conv";
}

// A residual segment computes x + f(x): its output sums in its input, and
// something other than those sums reads the input (x + pos is no layer).
bool isResidual(const Segment &s) {
  if (s.output == s.input || !sumsIn(s.output, s.input))
    return false;
  std::set<Value *> fromInput{s.input};
  for (Node *n : s.nodes) {
    bool reads = std::any_of(n->inputs.begin(), n->inputs.end(),
                             [&](Value *v) { return fromInput.count(v); });
    if (!reads)
      continue;
    if (n->op != "mt.add")
      return true;
    fromInput.insert(n->outputs.begin(), n->outputs.end());
  }
  return false;
}

// With no cut between embedding and head, the activation (of two or more
// readers) read over the longest stretch of the order, if that is most of
// it: what stays live beside the residual stream and so prevents the cuts.
Value *sideInput(const std::vector<Node *> &order) {
  std::map<Node *, size_t> at;
  for (size_t i = 0; i < order.size(); ++i)
    at[order[i]] = i;
  Value *longest = nullptr;
  size_t span = 0;
  for (size_t i = 0; i < order.size(); ++i)
    for (Value *v : order[i]->outputs) {
      if (!v || v->users.size() < 2)
        continue;
      size_t last = i;
      for (Node *u : v->users)
        if (auto it = at.find(u); it != at.end())
          last = std::max(last, it->second);
      if (last - i > span)
        longest = v, span = last - i;
    }
  return 2 * span > order.size() ? longest : nullptr;
}

// Two segments doing the same: the same ops with the same output shapes.
bool sameOps(const Segment &a, const Segment &b) {
  return std::equal(a.nodes.begin(), a.nodes.end(), b.nodes.begin(),
                    b.nodes.end(), [](Node *x, Node *y) {
                      return x->op == y->op &&
                             x->out()->shape == y->out()->shape;
                    });
}

Block makeBlock(const std::string &kind, int64_t layer,
                std::vector<Segment>::const_iterator begin,
                std::vector<Segment>::const_iterator end) {
  Block b;
  b.kind = kind;
  b.layer = layer;
  b.input = begin->input;
  b.output = std::prev(end)->output;
  for (auto it = begin; it != end; ++it)
    b.nodes.insert(b.nodes.end(), it->nodes.begin(), it->nodes.end());
  sign(b);
  return b;
}

} // namespace

Block wholeGraph(Graph &g) {
  Block b;
  b.kind = "graph";
  b.input = g.inputs.at(0);
  b.output = g.outputs.at(0);
  b.nodes = topologicalOrder(g);
  sign(b);
  return b;
}

std::vector<Block> discoverBlocks(Graph &g) {
  std::vector<Node *> order = topologicalOrder(g);
  Value *input = g.inputs.at(0);
  // Readers of each activation still to run.
  std::map<Value *, int64_t> pending;
  auto readers = [](Value *v) {
    return static_cast<int64_t>(v->users.size());
  };
  pending[input] = readers(input);
  std::vector<Segment> segments;
  Segment cur{input, nullptr, {}};
  for (Node *n : order) {
    cur.nodes.push_back(n);
    cur.mixes |= mixesPositions(n);
    for (Value *v : n->inputs)
      if (v && pending.count(v) && --pending[v] == 0)
        pending.erase(v);
    for (Value *v : n->outputs)
      if (readers(v) > 0)
        pending[v] = readers(v);
    Value *out = n->out();
    if ((pending.size() == 1 && pending.begin()->first == out) ||
        out == g.outputs[0]) {
      cur.output = out;
      cur.residual = isResidual(cur);
      segments.push_back(std::move(cur));
      cur = Segment{out, nullptr, {}};
    }
  }
  if (segments.empty() || segments.back().output != g.outputs[0])
    fail("internal: block discovery did not reach the logits");

  auto firstRes = std::find_if(segments.begin(), segments.end(),
                               [](const Segment &s) { return s.residual; });
  if (firstRes == segments.end())
    if (Value *side = sideInput(order))
      fail("no residual blocks found: the output of node '{}' is read from "
           "the first layers to the last, beside the residual stream; "
           "layers that take such a side input (per-layer embeddings, as "
           "Gemma 3n's and Gemma 4's E2B/E4B have) are not supported",
           side->producer->name);
  if (firstRes == segments.end())
    fail("no residual blocks found: the graph is not a decoder (no value of "
         "the form x + f(x) on the path from the embedding to the logits)");
  auto lastRes = std::find_if(segments.rbegin(), segments.rend(),
                              [](const Segment &s) { return s.residual; })
                     .base();
  bool hasEmbed = false;
  for (auto it = segments.begin(); it != firstRes; ++it)
    for (Node *n : it->nodes)
      hasEmbed |= n->op == "mt.embed";
  if (firstRes == segments.begin() || !hasEmbed)
    fail("the model does not start with a token embedding (a Gather of an "
         "initializer by the token ids) before its first residual block");
  if (lastRes == segments.end())
    fail("the model has no head after its last residual block (the logits "
         "are the residual stream itself)");

  // Layers start at each mixing segment; segments before the first one
  // join the first layer. Without mixers, each segment is a layer.
  using SegmentIt = std::vector<Segment>::const_iterator;
  std::vector<std::pair<SegmentIt, SegmentIt>> layers;
  bool anyMixer =
      std::any_of(firstRes, lastRes, [](const Segment &s) { return s.mixes; });
  SegmentIt start = firstRes;
  for (SegmentIt it = firstRes; it != lastRes; ++it) {
    SegmentIt next = std::next(it);
    bool boundary =
        next == lastRes ||
        (anyMixer ? next->mixes &&
                        std::any_of(start, next,
                                    [](const Segment &s) { return s.mixes; })
                  : true);
    if (boundary) {
      layers.push_back({start, next});
      start = next;
    }
  }
  // A layer may end past its last residual sum: a post-norm layer's norm
  // (OPT-350m), the view back of a stream its MLP flattened (OPT). The last
  // layer's copy of that tail follows the last residual segment; it belongs
  // to the layer, as it does in every layer before it, not to the head.
  if (layers.size() >= 2) {
    auto [prevBegin, prevEnd] = layers[layers.size() - 2];
    SegmentIt tail = prevEnd;
    while (tail != prevBegin && !std::prev(tail)->residual)
      --tail;
    auto n = std::distance(tail, prevEnd);
    if (n > 0 && std::distance(SegmentIt(lastRes), segments.cend()) > n &&
        std::equal(tail, prevEnd, SegmentIt(lastRes), sameOps)) {
      lastRes += n;
      layers.back().second = lastRes;
    }
  }

  std::vector<Block> blocks;
  blocks.push_back(makeBlock("embedding", -1, segments.begin(), firstRes));
  for (size_t i = 0; i < layers.size(); ++i)
    blocks.push_back(
        makeBlock("layer", int64_t(i), layers[i].first, layers[i].second));
  blocks.push_back(makeBlock("head", -1, lastRes, segments.end()));
  return blocks;
}

} // namespace mt::onnx_import
