//===- FoldHarness.h - one ONNX node's handler run on constants -*- C++ -*-===//
//
// The fixture of the handler tests: constants to feed a node, the node's
// handler inferring and folding it as the importer does, and the folded
// values read back.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_TESTS_UNIT_FRONTEND_FOLDHARNESS_H
#define MEGATRAIN_TESTS_UNIT_FRONTEND_FOLDHARNESS_H

#include "frontend/OpHandler.h"

#include <gtest/gtest.h>

namespace mt::onnx_import {

class FoldHarness : public ::testing::Test {
protected:
  Value *constant(Shape shape, std::vector<double> v, DType t) {
    Value *x = g.newValue("", t, shape);
    x->constant = denseConst(t, std::move(shape), std::move(v));
    return x;
  }
  /// n (its attributes set) inferred and folded by its handler at `opset`;
  /// its output.
  Value *fold(Node *n, int64_t opset) {
    n->opset = opset;
    g.addOutput(n, DType::Undefined, {});
    const OpHandler *h = findHandler(*n);
    EXPECT_NE(h, nullptr);
    OpContext ctx(*n);
    h->infer(ctx);
    n->out()->constant = h->fold(ctx)[0];
    return n->out();
  }
  static std::vector<double> values(const Value *v) {
    std::vector<double> out;
    for (int64_t i = 0; i < v->constant->numel; ++i)
      out.push_back(v->constant->at(i));
    return out;
  }

  Graph g;
};

} // namespace mt::onnx_import

#endif // MEGATRAIN_TESTS_UNIT_FRONTEND_FOLDHARNESS_H
