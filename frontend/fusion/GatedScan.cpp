//===- GatedScan.cpp - the gated scans, each as its own node --------------===//
//
// torch's exporter unrolls gated DeltaNet's and Mamba-2's chunked scans over
// a fixed sequence length, which no layer template can stream. The export
// helpers (docs/importer.md, "Linear attention") write each scan as one
// node instead: ai.megatrain.GatedDeltaRule(q, k, v, g, beta), queries and
// keys already normalized and scaled, becomes mt.gated_delta;
// ai.megatrain.GatedLinearRule(q, k, v, g, beta) becomes mt.gated_linear.
//
//===----------------------------------------------------------------------===//
#include "frontend/fusion/Fusion.h"

#include "frontend/Error.h"
#include "frontend/fusion/Match.h"

namespace mt::onnx_import {

void fuseGatedScans(Graph &g) {
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
