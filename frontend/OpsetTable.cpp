//===- OpsetTable.cpp - lookup in the table of ONNX op handlers -----------===//
#include "frontend/OpHandler.h"

#include <cstring>

namespace mt::onnx_import {

Value &OpContext::in(size_t i) const {
  Value *v = node.in(i);
  if (!v)
    error("input #{} is required", i);
  return *v;
}

const Const &OpContext::constIn(size_t i, const char *what) const {
  Value &v = in(i);
  if (!v.constant)
    error("{} (input '{}') must be known at compile time once batch and "
          "sequence length are bound",
          what, v.name);
  return *v.constant;
}

double OpContext::scalarIn(size_t i, const char *what) const {
  const Const &c = constIn(i, what);
  if (c.numel != 1)
    error("{} (input '{}') must be a scalar, got shape {}", what, in(i).name,
          shapeStr(c.shape));
  return c.at(0);
}

std::vector<int64_t> OpContext::intsIn(size_t i, const char *what) const {
  return toInts(constIn(i, what));
}

int64_t OpContext::axis(int64_t a, int64_t rank) const {
  if (a < -rank || a >= rank) // a scalar has no axis at all
    error("axis {} is out of range for rank {}", a, rank);
  return a < 0 ? a + rank : a;
}

void OpContext::setOutput(size_t i, DType dtype, Shape shape) const {
  if (i >= node.outputs.size())
    return; // an optional output the model does not use
  for (int64_t d : shape)
    if (d < 0)
      error("inferred a negative dim in output shape {}", shapeStr(shape));
  node.outputs[i]->dtype = dtype;
  node.outputs[i]->shape = std::move(shape);
}

const std::vector<OpHandler> &opsetTable() {
  static const std::vector<OpHandler> table = [] {
    std::vector<OpHandler> t;
    addElementwiseHandlers(t);
    addTensorHandlers(t);
    addReductionHandlers(t);
    addNeuralHandlers(t);
    return t;
  }();
  return table;
}

const OpHandler *findHandler(const Node &node) {
  const OpHandler *best = nullptr;
  for (const OpHandler &h : opsetTable()) {
    if (node.op != h.op || node.domain != h.domain || h.since > node.opset)
      continue;
    if (!best || h.since > best->since)
      best = &h;
  }
  return best;
}

} // namespace mt::onnx_import
