//===- GatedDelta.cpp - the gated delta rule, as its own node -------------===//
//
// torch's exporter unrolls gated DeltaNet's chunked scan over a fixed
// sequence length, which no layer template can stream. The export helper
// (docs/importer.md, "Linear attention") writes the scan as one
// ai.megatrain.GatedDeltaRule(q, k, v, g, beta) node instead, with queries
// and keys already normalized and scaled; it becomes mt.gated_delta.
//
//===----------------------------------------------------------------------===//
#include "frontend/fusion/Fusion.h"

#include "frontend/Error.h"
#include "frontend/fusion/Match.h"

namespace mt::onnx_import {

void fuseGatedDelta(Graph &g) {
  for (Node *n : nodesWithOp(g, "GatedDeltaRule", "ai.megatrain")) {
    for (Value *in : n->inputs)
      if (!isActivation(in))
        fail("{}: q, k, v, g and beta must all be computed from the tokens "
             "(activations); '{}' is not",
             n->describe(), in->name);
    replaceWithPrimitive(g, n, "mt.gated_delta", n->inputs, n->in(2)->shape);
  }
}

} // namespace mt::onnx_import
