//===- ControlFlowTest.cpp - ONNX loops and sequences folded at import ----===//
//
// Expected values are written out by hand from the ONNX operator spec.
//
//===----------------------------------------------------------------------===//

#include "frontend/ControlFlow.h"
#include "frontend/Error.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <numeric>

using namespace mt::onnx_import;

namespace {

// Elements of a constant, flat.
std::vector<double> values(const Const &c) {
  std::vector<double> v(static_cast<size_t>(c.numel));
  for (int64_t i = 0; i < c.numel; ++i)
    v[size_t(i)] = c.at(i);
  return v;
}

std::vector<double> iota(int64_t n, double from = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), from);
  return v;
}

class ControlFlowTest : public ::testing::Test {
protected:
  Value *constant(Shape shape, std::vector<double> v,
                  DType t = DType::F32) {
    Value *x = g.newValue("", t, shape);
    x->constant = denseConst(t, std::move(shape), std::move(v));
    return x;
  }
  Value *activation(Shape shape) {
    Value *x = g.newValue("x", DType::F32, std::move(shape));
    x->fromInput = true;
    return x;
  }
  /// A node of `op` over `inputs` with `outputs` outputs, folded.
  Node *fold(const std::string &op, std::vector<Value *> inputs,
             std::map<std::string, Attr> attrs = {}, int outputs = 1,
             SubgraphRunner run = {}) {
    Node *n = g.newNode(op, "/" + op, std::move(inputs), nullptr);
    n->opset = 17;
    n->attrs = std::move(attrs);
    for (int i = 0; i < outputs; ++i)
      g.addOutput(n, DType::Undefined, {});
    foldControlFlow(*n, run);
    return n;
  }
  static Attr integer(int64_t i) {
    Attr a;
    a.kind = Attr::Int;
    a.i = i;
    return a;
  }
  static std::string errorOf(const std::function<void()> &f) {
    try {
      f();
    } catch (const ImportError &e) {
      return e.what();
    }
    return "";
  }

  Graph g;
};

TEST_F(ControlFlowTest, SplitBySizesAndConcatBack) {
  Value *x = constant({2, 5}, iota(10));
  Node *split = fold("SplitToSequence", {x, constant({2}, {2, 3}, DType::I64)},
                     {{"axis", integer(1)}});
  const auto &parts = *split->out()->sequence;
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0]->shape, (Shape{2, 2}));
  EXPECT_EQ(values(*parts[0]), (std::vector<double>{0, 1, 5, 6}));
  EXPECT_EQ(values(*parts[1]), (std::vector<double>{2, 3, 4, 7, 8, 9}));
  Node *cat = fold("ConcatFromSequence", {split->out()}, {{"axis", integer(-1)}});
  EXPECT_EQ(cat->out()->shape, (Shape{2, 5}));
  EXPECT_EQ(values(*cat->out()->constant), iota(10));
}

TEST_F(ControlFlowTest, SplitWithoutSizesKeepsOrDropsTheAxis) {
  Value *x = constant({3, 2}, iota(6));
  Node *kept = fold("SplitToSequence", {x});
  ASSERT_EQ(kept->out()->sequence->size(), 3u);
  EXPECT_EQ((*kept->out()->sequence)[2]->shape, (Shape{1, 2}));
  Node *dropped = fold("SplitToSequence", {x}, {{"keepdims", integer(0)}});
  EXPECT_EQ((*dropped->out()->sequence)[2]->shape, (Shape{2}));
  EXPECT_EQ(values(*(*dropped->out()->sequence)[2]), (std::vector<double>{4, 5}));
  // A scalar split: chunks of 2, the last smaller.
  Value *y = constant({5}, iota(5));
  Node *chunks = fold("SplitToSequence", {y, constant({}, {2}, DType::I64)});
  const auto &c = *chunks->out()->sequence;
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(values(*c[2]), (std::vector<double>{4}));
}

TEST_F(ControlFlowTest, ConstructInsertEraseAtLength) {
  Value *a = constant({1}, {1}), *b = constant({1}, {2}), *c = constant({1}, {3}),
        *d = constant({1}, {4});
  Node *s = fold("SequenceConstruct", {a, b, c});
  // [a, b, c] -> insert d at 1 -> [a, d, b, c] -> erase the last -> [a, d, b].
  s = fold("SequenceInsert", {s->out(), d, constant({}, {1}, DType::I64)});
  s = fold("SequenceErase", {s->out()});
  Node *len = fold("SequenceLength", {s->out()});
  EXPECT_EQ(values(*len->out()->constant), (std::vector<double>{3}));
  EXPECT_EQ(len->out()->dtype, DType::I64);
  Node *last = fold("SequenceAt", {s->out(), constant({}, {-1}, DType::I64)});
  EXPECT_EQ(values(*last->out()->constant), (std::vector<double>{2}));
  Node *second = fold("SequenceAt", {s->out(), constant({}, {1}, DType::I64)});
  EXPECT_EQ(values(*second->out()->constant), (std::vector<double>{4}));
  EXPECT_NE(errorOf([&] {
              fold("SequenceAt", {s->out(), constant({}, {3}, DType::I64)});
            }).find("position 3 is out of range for a sequence of 3 tensors"),
            std::string::npos);
}

TEST_F(ControlFlowTest, ConcatFromSequenceStacksOnANewAxis) {
  Node *s = fold("SequenceConstruct", {constant({2}, {1, 2}), constant({2}, {3, 4}),
                                       constant({2}, {5, 6})});
  Node *stacked = fold("ConcatFromSequence", {s->out()},
                       {{"axis", integer(-1)}, {"new_axis", integer(1)}});
  EXPECT_EQ(stacked->out()->shape, (Shape{2, 3}));
  EXPECT_EQ(values(*stacked->out()->constant),
            (std::vector<double>{1, 3, 5, 2, 4, 6}));
  Node *empty = fold("SequenceEmpty", {});
  EXPECT_NE(errorOf([&] {
              fold("ConcatFromSequence", {empty->out()}, {{"axis", integer(0)}});
            }).find("cannot concatenate an empty sequence"),
            std::string::npos);
}

// A body that doubles its carried value, scans 10 * iteration_num, and
// turns its condition false after iteration 2: with a trip count of 4 the
// loop runs iterations 0, 1 and 2.
TEST_F(ControlFlowTest, LoopThreadsCarriedValuesAndStacksScans) {
  int calls = 0;
  SubgraphRunner body = [&](Graph &scratch, const onnx::GraphProto &,
                            const std::vector<Value *> &in) {
    ++calls;
    const double i = in[0]->constant->at(0);
    auto out = [&](DType t, Shape s, std::vector<double> v) {
      Value *x = scratch.newValue("", t, s);
      x->constant = denseConst(t, s, std::move(v));
      return x;
    };
    return std::vector<Value *>{
        out(DType::Bool, {}, {i < 2 ? 1.0 : 0.0}),
        out(DType::F32, {2}, {2 * in[2]->constant->at(0), 2 * in[2]->constant->at(1)}),
        out(DType::I64, {1}, {10 * i})};
  };
  onnx::GraphProto unused; // the runner above stands in for it
  Attr graph;
  graph.kind = Attr::Graph;
  graph.graph = &unused;
  Node *loop = fold("Loop",
                    {constant({}, {4}, DType::I64), constant({}, {1}, DType::Bool),
                     constant({2}, {1, -3})},
                    {{"body", graph}}, 2, body);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(values(*loop->out(0)->constant), (std::vector<double>{8, -24}));
  EXPECT_EQ(loop->out(1)->shape, (Shape{3, 1}));
  EXPECT_EQ(values(*loop->out(1)->constant), (std::vector<double>{0, 10, 20}));
}

// A body that adds an activation into its carried value.
TEST_F(ControlFlowTest, ALoopBodyReadingAnActivationIsRefused) {
  SubgraphRunner body = [&](Graph &scratch, const onnx::GraphProto &,
                            const std::vector<Value *> &) {
    Value *cond = scratch.newValue("cond_out", DType::Bool, {});
    cond->constant = scalarConst(DType::Bool, 1);
    Value *sum = scratch.newValue("sum", DType::F32, {2});
    sum->fromInput = true;
    return std::vector<Value *>{cond, sum};
  };
  onnx::GraphProto unused;
  Attr graph;
  graph.kind = Attr::Graph;
  graph.graph = &unused;
  EXPECT_NE(errorOf([&] {
              fold("Loop", {constant({}, {2}, DType::I64), nullptr, constant({2}, {0, 0})},
                   {{"body", graph}}, 1, body);
            }).find("its body's loop-carried output 'sum' is not known at compile time"),
            std::string::npos);
}

TEST_F(ControlFlowTest, InputsMustBeKnownAtCompileTime) {
  Node *s = fold("SequenceEmpty", {});
  EXPECT_EQ(errorOf([&] { fold("SequenceInsert", {s->out(), activation({2})}); }),
            "node '/SequenceInsert' (SequenceInsert, opset 17): input 'x' is not "
            "known at compile time (loops and sequences are evaluated at import, "
            "over constants only)");
  EXPECT_NE(errorOf([&] { fold("SequenceAt", {activation({2}), constant({}, {0}, DType::I64)}); })
                .find("input 'x' is not a sequence known at compile time"),
            std::string::npos);
}

} // namespace
