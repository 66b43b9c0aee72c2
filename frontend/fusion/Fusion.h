//===- Fusion.h - idiom fusion: ONNX subgraphs to mt primitives -*- C++ -*-===//
//
// Each idiom lives in its own file and rewrites every occurrence it
// recognizes into one primitive node. fuseIdioms runs them in dependency
// order, lowers the remaining layout and arithmetic ops, and fails naming
// the first node on the activation path that no idiom explains.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_FRONTEND_FUSION_FUSION_H
#define MEGATRAIN_FRONTEND_FUSION_FUSION_H

#include "frontend/Graph.h"

namespace mt::onnx_import {

void fuseIdioms(Graph &g);

// The idioms, in the order fuseIdioms runs them.
void removeNoOps(Graph &g);     // Identity, Dropout, float-to-float Cast
void fuseEmbeddings(Graph &g);  // Gather of a table by ids or positions
void fuseNorms(Graph &g);       // RMSNorm and LayerNorm, op or decomposed
void fuseGelu(Graph &g);        // GELU (erf, tanh), op or decomposed
void fuseMoe(Graph &g);         // top-k routed experts
void fuseCausalConv(Graph &g);  // depthwise Conv over past positions
void fuseGatedScans(Graph &g); // ai.megatrain.GatedDeltaRule, GatedLinearRule
void fuseActivations(Graph &g); // SiLU, then SwiGLU; ReLU, xIELU...
void fuseRope(Graph &g);        // rotate-half RoPE, full or partial
void fuseAttention(Graph &g);   // causal SDPA with GQA, or Attention-23
void fuseSoftcaps(Graph &g);    // a · tanh(b · x), after attention's
void fuseLinear(Graph &g);      // MatMul/Gemm by a weight, plus bias
void lowerRemaining(Graph &g);  // Add, Mul, Reshape, Transpose, Slice...

} // namespace mt::onnx_import

#endif // MEGATRAIN_FRONTEND_FUSION_FUSION_H
