//===- GatedScan.cpp - the gated scans, each as its own node --------------===//
//
// torch's exporter unrolls gated DeltaNet's and Mamba-2's chunked scans over
// a fixed sequence length, which no layer template can stream. The export
// helpers (docs/importer.md, "Linear attention") write each scan as one
// node instead: ai.megatrain.GatedDeltaRule(q, k, v, g, beta), queries and
// keys already normalized and scaled, becomes mt.gated_delta;
// ai.megatrain.GatedLinearRule(q, k, v, g, beta) becomes mt.gated_linear;
// so does ai.megatrain.DecayLinearRule(q, k, v, rate), a constant decay per
// value head (MiniMax's lightning attention), with frozen tables g = −rate
// at every position and beta = 1.
//
//===----------------------------------------------------------------------===//
#include "frontend/fusion/Fusion.h"

#include "frontend/Error.h"
#include "frontend/fusion/Match.h"

namespace mt::onnx_import {
namespace {

void fuseDecayScans(Graph &g) {
  Value *ones = nullptr; // beta, shared by every layer
  for (Node *n : nodesWithOp(g, "DecayLinearRule", "ai.megatrain")) {
    for (size_t i = 0; i < 3; ++i)
      if (!isActivation(n->in(i)))
        fail("{}: q, k and v must be computed from the tokens (activations); "
             "'{}' is not",
             n->describe(), n->in(i)->name);
    Value *rate = n->in(3);
    if (!rate->constant || isActivation(rate))
      fail("{}: rate '{}' is not known at compile time", n->describe(),
           rate->name);
    const Shape &v = n->in(2)->shape;
    const Shape heads{v[0], v[1], v[2]};
    // The decay table freezes the rate: an initializer behind it must be a
    // buffer (checked with every table, in Importer.cpp).
    Value *decay =
        g.newValue("mt.const." + rate->name + ".decay", DType::F32, heads);
    ConstPtr r = rate->constant;
    decay->constant = lazyConst(
        DType::F32, heads, [r, h = v[2]](int64_t i) { return -r->at(i % h); });
    decay->sources = rate->sources;
    if (rate->initializer)
      decay->sources.push_back(rate);
    if (!ones || ones->shape != heads) {
      ones =
          g.newValue(fmt::format("mt.const.ones.{}", v[2]), DType::F32, heads);
      ones->constant =
          lazyConst(DType::F32, heads, [](int64_t) { return 1.0; });
    }
    replaceWithPrimitive(g, n, "mt.gated_linear",
                         {n->in(0), n->in(1), n->in(2), decay, ones}, v);
  }
}

} // namespace

void fuseGatedScans(Graph &g) {
  fuseDecayScans(g);
  for (auto [node, primitive] : {std::pair{"GatedDeltaRule", "mt.gated_delta"},
                                 std::pair{"GatedLinearRule", "mt.gated_linear"}})
    for (Node *n : nodesWithOp(g, node, "ai.megatrain")) {
      for (Value *in : n->inputs)
        if (!isActivation(in))
          fail("{}: q, k, v, g and beta must all be computed from the tokens "
               "(activations); '{}' is not",
               n->describe(), in->name);
      replaceWithPrimitive(g, n, primitive, n->inputs, n->in(2)->shape);
    }
}

} // namespace mt::onnx_import
