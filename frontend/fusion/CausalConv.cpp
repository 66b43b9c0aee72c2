//===- CausalConv.cpp - a depthwise convolution over past positions -------===//
//
// Recognized form (LFM2's short convolution as torch exports Conv1d with
// padding K − 1), x [B, C, S] an activation, w [C, 1, K] a weight:
//   Slice(Conv(x, w, group = C, pads = [K − 1, K − 1]), axis 2, [0, S))
// or Conv(x, w, group = C, pads = [K − 1, 0]) itself: each channel's
// positions convolved with its own taps over the current and K − 1 earlier
// positions. Strides and dilations 1, no bias. → mt.causal_conv %x, %w.
//
//===----------------------------------------------------------------------===//
#include "frontend/fusion/Fusion.h"

#include "frontend/fusion/Match.h"

namespace mt::onnx_import {
namespace {

// A depthwise, unit-stride, undilated Conv of activation x by weight w
// [C, 1, K] padded K − 1 before; returns w, or null.
Value *causalTaps(Node *conv, int64_t padAfter) {
  Value *x = conv->in(0);
  auto w = weightView(conv->in(1));
  if (!isActivation(x) || !w || w->transposed ||
      (conv->inputs.size() > 2 && conv->in(2)))
    return nullptr;
  const Shape &ws = w->param->shape;
  const int64_t C = x->dim(1), K = ws.size() == 3 ? ws[2] : 0;
  auto ones = [](const std::vector<int64_t> &v) {
    return v.empty() || v == std::vector<int64_t>{1};
  };
  bool depthwise = ws == Shape{C, 1, K} && conv->getInt("group", 1) == C;
  return depthwise && K >= 1 && ones(conv->getInts("strides")) &&
                 ones(conv->getInts("dilations")) &&
                 conv->getInts("pads") == std::vector<int64_t>{K - 1, padAfter}
             ? w->param
             : nullptr;
}

void fuse(Graph &g, Node *conv) {
  Value *x = conv->in(0), *out = conv->out();
  const int64_t K = conv->in(1)->rank() == 3 ? conv->in(1)->dim(2) : 0;
  if (Value *w = causalTaps(conv, 0); w && out->shape == x->shape) {
    replaceWithPrimitive(g, conv, "mt.causal_conv", {x, w}, x->shape);
    return;
  }
  Value *w = causalTaps(conv, K - 1);
  Node *slice = w ? soleUser(out) : nullptr;
  if (!slice || slice->op != "Slice" || slice->out()->shape != x->shape)
    return;
  for (int64_t start : slice->getInts("starts"))
    if (start != 0)
      return;
  for (int64_t step : slice->getInts("steps"))
    if (step != 1)
      return;
  replaceWithPrimitive(g, slice, "mt.causal_conv", {x, w}, x->shape);
}

} // namespace

void fuseCausalConv(Graph &g) {
  for (Node *n : nodesWithOp(g, "Conv"))
    fuse(g, n);
}

} // namespace mt::onnx_import
