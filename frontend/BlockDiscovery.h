//===- BlockDiscovery.h - layers between residual-stream cuts ---*- C++ -*-===//
#ifndef MEGATRAIN_FRONTEND_BLOCKDISCOVERY_H
#define MEGATRAIN_FRONTEND_BLOCKDISCOVERY_H

#include "frontend/Graph.h"

#include <string>
#include <vector>

namespace mt::onnx_import {

/// A run of primitives with one activation input and one output.
struct Block {
  std::string kind; // "embedding", "layer", "head" or "graph"
  int64_t layer = -1;
  Value *input = nullptr, *output = nullptr;
  std::vector<Node *> nodes; // in topological order
  /// The params (initializers and frozen tables) in order of first use.
  std::vector<Value *> params;
  /// Blocks with equal signatures are one template.
  std::string signature;
};

/// The primitives that reach the graph's output, in topological order.
std::vector<Node *> topologicalOrder(Graph &g);

/// The whole graph as one block (no discovery).
Block wholeGraph(Graph &g);

/// Splits the graph at its residual-stream cut points (values every path
/// from the input to the logits passes through) into the embedding, the
/// decoder layers (a layer starts at each residual segment that mixes
/// positions: attention, a gated scan, a causal convolution)
/// and the head; throws if the graph is not shaped like a decoder.
std::vector<Block> discoverBlocks(Graph &g);

} // namespace mt::onnx_import

#endif // MEGATRAIN_FRONTEND_BLOCKDISCOVERY_H
