//===- CausalConv.cpp - a depthwise convolution over past positions -------===//
//
// Recognized form (LFM2's short convolution as torch exports Conv1d with
// padding K − 1), x [B, C, S] an activation, w [C, 1, K] a weight:
//   Slice(Conv(x, w, group = C, pads = [K − 1, K − 1]), axis 2, [0, S))
// or Conv(x, w, group = C, pads = [K − 1, 0]) itself, or an unpadded Conv of
// Pad(x, K − 1 zeros before the positions): each channel's positions
// convolved with its own taps over the current and K − 1 earlier positions.
// Strides and dilations 1; a bias [C] (Mamba's) optional.
// → mt.causal_conv %x, %w[, %bias].
//
//===----------------------------------------------------------------------===//
#include "frontend/fusion/Fusion.h"

#include "frontend/fusion/Match.h"

namespace mt::onnx_import {
namespace {

// A depthwise, unit-stride, undilated Conv of activation x by weight w
// [C, 1, K] padded `padBefore` before and `padAfter` after; returns w and
// the bias (if any) as the primitive's inputs after x, or nothing.
std::optional<std::vector<Value *>> causalTaps(Node *conv, int64_t padBefore,
                                               int64_t padAfter) {
  Value *x = conv->in(0);
  auto w = weightView(conv->in(1));
  if (!isActivation(x) || !w || w->transposed)
    return std::nullopt;
  std::vector<Value *> params{w->param};
  // A bias of zeros (an export without the ONNX optimizer writes one out
  // for a Conv without) is none.
  if (conv->inputs.size() > 2 && conv->in(2) && !isSplat(conv->in(2), 0)) {
    auto bias = weightView(conv->in(2));
    if (!bias || bias->param->shape != Shape{x->dim(1)})
      return std::nullopt;
    params.push_back(bias->param);
  }
  const Shape &ws = w->param->shape;
  const int64_t C = x->dim(1), K = ws.size() == 3 ? ws[2] : 0;
  auto ones = [](const std::vector<int64_t> &v) {
    return v.empty() || v == std::vector<int64_t>{1};
  };
  bool depthwise = ws == Shape{C, 1, K} && conv->getInt("group", 1) == C;
  std::vector<int64_t> pads = conv->getInts("pads");
  if (pads.empty())
    pads = {0, 0};
  if (depthwise && K >= 1 && ones(conv->getInts("strides")) &&
      ones(conv->getInts("dilations")) &&
      pads == std::vector<int64_t>{padBefore, padAfter})
    return params;
  return std::nullopt;
}

// The zeros of Pad(x) before the positions of x [B, C, S], K − 1 of them
// and none elsewhere; returns x, or null.
Value *paddedBefore(Value *padded, int64_t K) {
  Node *pad = padded->producer;
  if (!pad || pad->op != "Pad" || pad->getFloat("value", 0) != 0)
    return nullptr;
  return pad->getInts("pads") == std::vector<int64_t>{0, 0, K - 1, 0, 0, 0}
             ? pad->in(0)
             : nullptr;
}

// x, then the taps and bias.
std::vector<Value *> inputs(Value *x, const std::vector<Value *> &params) {
  std::vector<Value *> in{x};
  in.insert(in.end(), params.begin(), params.end());
  return in;
}

void fuse(Graph &g, Node *conv) {
  Value *x = conv->in(0), *out = conv->out();
  const int64_t K = conv->in(1)->rank() == 3 ? conv->in(1)->dim(2) : 0;
  if (auto p = causalTaps(conv, K - 1, 0); p && out->shape == x->shape) {
    replaceWithPrimitive(g, conv, "mt.causal_conv", inputs(x, *p), x->shape);
    return;
  }
  if (Value *unpadded = paddedBefore(x, K)) {
    auto p = causalTaps(conv, 0, 0);
    if (p && isActivation(unpadded) && out->shape == unpadded->shape)
      replaceWithPrimitive(g, conv, "mt.causal_conv", inputs(unpadded, *p),
                           unpadded->shape);
    return;
  }
  auto p = causalTaps(conv, K - 1, K - 1);
  Node *slice = p ? soleUser(out) : nullptr;
  if (!slice || slice->op != "Slice" || slice->out()->shape != x->shape)
    return;
  for (int64_t start : slice->getInts("starts"))
    if (start != 0)
      return;
  for (int64_t step : slice->getInts("steps"))
    if (step != 1)
      return;
  replaceWithPrimitive(g, slice, "mt.causal_conv", inputs(x, *p), x->shape);
}

} // namespace

void fuseCausalConv(Graph &g) {
  for (Node *n : nodesWithOp(g, "Conv"))
    fuse(g, n);
}

} // namespace mt::onnx_import
