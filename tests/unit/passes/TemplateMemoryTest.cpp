//===- TemplateMemoryTest.cpp - where planTemplate puts a template's values
//===//
//
// A reshape is a view of its operand's memory: these check where the view
// lives, that the memory it shows outlives every read of it, and which
// reshapes stay copies. A sum whose terms' kernels can add into their
// result (a sum of linear_grad dx, a residual and its gradient) is made by
// those kernels in one buffer: which adds run nothing and which kernels add.
//
//===----------------------------------------------------------------------===//
#include "passes/TemplateMemory.h"

#include "ir/MtDialect.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace mt;

namespace {

class TemplateMemoryTest : public ::testing::Test {
protected:
  void SetUp() override { ctx.loadDialect<MtDialect>(); }

  /// The one template of a module's text, planned.
  TemplatePlan plan(const std::string &text) {
    module = parseSourceString<ModuleOp>(text, &ctx);
    EXPECT_TRUE(module);
    if (!module)
      return TemplatePlan();
    tmpl = *module->getOps<TemplateOp>().begin();
    return planTemplate(tmpl);
  }
  /// The result of the op-th op of the template's body (0-based).
  Value result(int op) {
    auto it = tmpl.getBlock().begin();
    std::advance(it, op);
    return it->getResult(0);
  }
  /// A layer backward's body over dy, x and three weights of 16x16: the dx
  /// of three projections of x, then `rest` (which reads %a, %b, %c).
  std::string projections(const std::string &rest, const std::string &yield) {
    return R"mlir(
module {
  mt.template @t kind "layer" (%dy: tensor<4x16xf32>, %x: tensor<4x16xf32>) params (%w0: tensor<16x16xf32>, %w1: tensor<16x16xf32>, %w2: tensor<16x16xf32>) -> (tensor<4x16xf32>) {
    %a, %da = mt.linear_grad %dy, %x, %w0 : (tensor<4x16xf32>, tensor<4x16xf32>, tensor<16x16xf32>) -> (tensor<4x16xf32>, tensor<16x16xf32>)
    %b, %db = mt.linear_grad %dy, %x, %w1 : (tensor<4x16xf32>, tensor<4x16xf32>, tensor<16x16xf32>) -> (tensor<4x16xf32>, tensor<16x16xf32>)
    %c, %dc = mt.linear_grad %dy, %x, %w2 : (tensor<4x16xf32>, tensor<4x16xf32>, tensor<16x16xf32>) -> (tensor<4x16xf32>, tensor<16x16xf32>)
)mlir" + rest +
           "    mt.yield " + yield + R"mlir( : tensor<4x16xf32>
  }
}
)mlir";
  }

  /// A layer over x (4x16) and one 16x16 weight w, yielding a 4x16 value:
  /// `body` ends in its mt.yield.
  static std::string layer(const std::string &body) {
    return R"mlir(
module {
  mt.template @t kind "layer" (%x: tensor<4x16xf32>) params (%w: tensor<16x16xf32>) -> (tensor<4x16xf32>) {
)mlir" + body +
           R"mlir(  }
}
)mlir";
  }

  MLIRContext ctx;
  OwningOpRef<ModuleOp> module;
  TemplateOp tmpl;
};

// %a's last direct reader is the reshape, but %r (its view) is read by the
// add, after %b is made: %b must not take %a's memory.
TEST_F(TemplateMemoryTest, AViewKeepsItsOperandsMemoryAliveUntilItsLastRead) {
  TemplatePlan p = plan(layer(R"mlir(
    %a = mt.linear %x, %w : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
    %r = mt.reshape %a : (tensor<4x16xf32>) -> tensor<64xf32>
    %b = mt.linear %x, %w : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
    %s = mt.reshape %b : (tensor<4x16xf32>) -> tensor<64xf32>
    %c = mt.add %r, %s : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
    %y = mt.reshape %c : (tensor<64xf32>) -> tensor<4x16xf32>
    mt.yield %y : tensor<4x16xf32>
)mlir"));
  ASSERT_TRUE(module);
  Value a = result(0), r = result(1), b = result(2), s = result(3);
  ASSERT_TRUE(p.views.count(r));
  ASSERT_TRUE(p.views.count(s));
  EXPECT_EQ(p.values[r].kind, Placement::Workspace);
  EXPECT_EQ(p.values[r].offset, p.values[a].offset);
  EXPECT_EQ(p.values[s].offset, p.values[b].offset);
  EXPECT_NE(p.values[b].offset, p.values[a].offset);
}

// A view of a view shows the first operand's memory.
TEST_F(TemplateMemoryTest, AViewOfAViewShowsTheFirstOperand) {
  TemplatePlan p = plan(layer(R"mlir(
    %a = mt.linear %x, %w : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
    %r = mt.reshape %a : (tensor<4x16xf32>) -> tensor<64xf32>
    %q = mt.reshape %r : (tensor<64xf32>) -> tensor<8x8xf32>
    %b = mt.linear %x, %w : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
    %s = mt.reshape %b : (tensor<4x16xf32>) -> tensor<8x8xf32>
    %c = mt.add %q, %s : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %y = mt.reshape %c : (tensor<8x8xf32>) -> tensor<4x16xf32>
    mt.yield %y : tensor<4x16xf32>
)mlir"));
  ASSERT_TRUE(module);
  Value a = result(0), q = result(2), b = result(3);
  ASSERT_TRUE(p.views.count(q));
  EXPECT_EQ(p.values[q].offset, p.values[a].offset);
  EXPECT_NE(p.values[b].offset, p.values[a].offset);
}

// Enough views that placing them grows the plan's map: each still shows the
// first operand's memory.
TEST_F(TemplateMemoryTest, ManyViewsAllShowTheirOperandsMemory) {
  std::string body =
      "    %v0 = mt.linear %x, %w : (tensor<4x16xf32>, tensor<16x16xf32>) -> "
      "tensor<4x16xf32>\n";
  const int views = 300;
  for (int i = 1; i <= views; ++i) {
    const char *from = i % 2 ? "tensor<4x16xf32>" : "tensor<64xf32>";
    const char *to = i % 2 ? "tensor<64xf32>" : "tensor<4x16xf32>";
    body += "    %v" + std::to_string(i) + " = mt.reshape %v" +
            std::to_string(i - 1) + " : (" + from + ") -> " + to + "\n";
  }
  TemplatePlan p = plan(layer(body + R"mlir(
    %y = mt.mul %v300, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    mt.yield %y : tensor<4x16xf32>
)mlir"));
  ASSERT_TRUE(module);
  const Placement first = p.values[result(0)];
  for (int i = 1; i <= views; ++i) {
    ASSERT_TRUE(p.views.count(result(i))) << i;
    EXPECT_EQ(p.values[result(i)].kind, first.kind) << i;
    EXPECT_EQ(p.values[result(i)].offset, first.offset) << i;
  }
  EXPECT_NE(p.values[result(views + 1)].offset, first.offset);
}

// A reshape of a launch input or a param is that input or param.
TEST_F(TemplateMemoryTest, AViewOfAnInputOrAParamIsThatInputOrParam) {
  TemplatePlan p = plan(layer(R"mlir(
    %r = mt.reshape %x : (tensor<4x16xf32>) -> tensor<8x8xf32>
    %v = mt.reshape %w : (tensor<16x16xf32>) -> tensor<8x32xf32>
    %c = mt.add %r, %r : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %u = mt.reshape %v : (tensor<8x32xf32>) -> tensor<16x16xf32>
    %y = mt.reshape %c : (tensor<8x8xf32>) -> tensor<4x16xf32>
    %o = mt.linear %y, %u : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
    mt.yield %o : tensor<4x16xf32>
)mlir"));
  ASSERT_TRUE(module);
  Value r = result(0), v = result(1), u = result(3);
  ASSERT_TRUE(p.views.count(r));
  EXPECT_EQ(p.values[r].kind, Placement::Input);
  EXPECT_EQ(p.values[r].index, 0);
  ASSERT_TRUE(p.views.count(u));
  EXPECT_EQ(p.values[v].kind, Placement::Param);
  EXPECT_EQ(p.values[u].kind, Placement::Param);
  EXPECT_EQ(p.values[u].index, 0);
}

// A layer's yielded sum is built in place in its output buffer, over the
// value it adds to: a reshape of that value read after the add would see
// the sum, so it stays a copy.
TEST_F(TemplateMemoryTest, AReshapeOfAValueOverwrittenInPlaceIsACopy) {
  TemplatePlan p = plan(R"mlir(
module {
  mt.template @t kind "layer" (%x: tensor<4x16xf32>) params (%w: tensor<16x16xf32>) -> (tensor<4x16xf32>, tensor<64xf32>) {
    %a = mt.linear %x, %w : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
    %r = mt.reshape %a : (tensor<4x16xf32>) -> tensor<64xf32>
    %y = mt.add %a, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %z = mt.mul %r, %r : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
    mt.yield %y, %z : tensor<4x16xf32>, tensor<64xf32>
  }
}
)mlir");
  ASSERT_TRUE(module);
  Value a = result(0), r = result(1);
  EXPECT_EQ(p.values[a].kind, Placement::Output);
  EXPECT_FALSE(p.views.count(r));
  EXPECT_EQ(p.values[r].kind, Placement::Workspace);
}

// dx = (a + b) + c, as a layer's q, k and v projections give it: a's
// kernel writes the sum's buffer, b's and c's add into it, no add runs, and
// nothing else lives there from a's kernel to the sum's last read.
TEST_F(TemplateMemoryTest, ASumOfProjectionsDxIsMadeByTheirKernels) {
  TemplatePlan p = plan(projections(R"mlir(
    %s = mt.add %a, %b : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %t = mt.add %s, %c : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %u = mt.mul %t, %dy : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
)mlir",
                                    "%u"));
  ASSERT_TRUE(module);
  Value a = result(0), b = result(1), c = result(2), s = result(3),
        t = result(4), u = result(5);
  EXPECT_TRUE(p.summedInPlace.count(s));
  EXPECT_TRUE(p.summedInPlace.count(t));
  EXPECT_FALSE(p.addsInto.count(a));
  EXPECT_TRUE(p.addsInto.count(b));
  EXPECT_TRUE(p.addsInto.count(c));
  for (Value v : {a, b, c, s})
    EXPECT_EQ(p.values[v].offset, p.values[t].offset);
  EXPECT_EQ(p.values[t].kind, Placement::Workspace);
  // The dw made while the sum is built, and the product read with it,
  // live elsewhere.
  for (int op : {0, 1, 2})
    EXPECT_NE(p.values[result(op).getDefiningOp()->getResult(1)].offset,
              p.values[t].offset);
  EXPECT_NE(p.values[u].offset, p.values[t].offset);
}

// A dx read by more than its add, or an add of something other than dx,
// runs as before: the dx are zeroed-free writes, the adds kernels.
TEST_F(TemplateMemoryTest, OnlySumsOfSingleUseDxAreMadeInPlace) {
  TemplatePlan p = plan(projections(R"mlir(
    %s = mt.add %a, %b : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %t = mt.add %s, %a : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %u = mt.add %c, %dy : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %v = mt.add %t, %u : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
)mlir",
                                    "%v"));
  ASSERT_TRUE(module);
  EXPECT_TRUE(p.summedInPlace.empty());
  EXPECT_TRUE(p.addsInto.empty());
}

// The gradient of a layer's input is the residual's (%s, in the output
// buffer, read by the next projection's backward) plus the norm's dx: the
// norm's kernel adds its dx into the output buffer, and the add runs nothing.
TEST_F(TemplateMemoryTest, AResidualsGradientIsAddedIntoByTheNormsKernel) {
  TemplatePlan p = plan(R"mlir(
module {
  mt.template @t kind "layer" (%dy: tensor<4x16xf32>, %x: tensor<4x16xf32>) params (%w: tensor<16x16xf32>, %g: tensor<16xf32>) -> (tensor<4x16xf32>) {
    %a, %da = mt.linear_grad %dy, %x, %w : (tensor<4x16xf32>, tensor<4x16xf32>, tensor<16x16xf32>) -> (tensor<4x16xf32>, tensor<16x16xf32>)
    %s = mt.add %dy, %a : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %b, %db = mt.linear_grad %s, %x, %w : (tensor<4x16xf32>, tensor<4x16xf32>, tensor<16x16xf32>) -> (tensor<4x16xf32>, tensor<16x16xf32>)
    %n:2 = mt.rms_norm_grad %b, %x, %g {eps = 1.0e-5 : f64} : (tensor<4x16xf32>, tensor<4x16xf32>, tensor<16xf32>) -> (tensor<4x16xf32>, tensor<16xf32>)
    %y = mt.add %n#0, %s : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    mt.yield %y : tensor<4x16xf32>
  }
}
)mlir");
  ASSERT_TRUE(module);
  Value s = result(1), n = result(3), y = result(4);
  EXPECT_TRUE(p.summedInPlace.count(y));
  EXPECT_FALSE(p.summedInPlace.count(s));
  EXPECT_TRUE(p.addsInto.count(n));
  for (Value v : {s, n, y}) {
    EXPECT_EQ(p.values[v].kind, Placement::Output);
    EXPECT_EQ(p.values[v].index, 0);
  }
}

// The same, but %s is read after the norm's kernel would have added into
// it: the sum stays an add, over a dx the norm's kernel writes.
TEST_F(TemplateMemoryTest, AResidualReadAfterTheNextTermIsMadeIsNotAddedInto) {
  TemplatePlan p = plan(R"mlir(
module {
  mt.template @t kind "layer" (%dy: tensor<4x16xf32>, %x: tensor<4x16xf32>) params (%w: tensor<16x16xf32>, %g: tensor<16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>) {
    %a, %da = mt.linear_grad %dy, %x, %w : (tensor<4x16xf32>, tensor<4x16xf32>, tensor<16x16xf32>) -> (tensor<4x16xf32>, tensor<16x16xf32>)
    %s = mt.add %dy, %a : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %n:2 = mt.rms_norm_grad %a, %x, %g {eps = 1.0e-5 : f64} : (tensor<4x16xf32>, tensor<4x16xf32>, tensor<16xf32>) -> (tensor<4x16xf32>, tensor<16xf32>)
    %m = mt.mul %s, %s : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %y = mt.add %s, %n#0 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    mt.yield %y, %m : tensor<4x16xf32>, tensor<4x16xf32>
  }
}
)mlir");
  ASSERT_TRUE(module);
  Value s = result(1), n = result(2);
  EXPECT_TRUE(p.summedInPlace.empty());
  EXPECT_TRUE(p.addsInto.empty());
  EXPECT_EQ(p.values[s].kind, Placement::Output);
  EXPECT_EQ(p.values[n].kind, Placement::Workspace);
}

// A forward's second residual: the MLP's last projection adds its product
// into the output buffer that holds the first, whichever side of the add
// each is on. A projection that read that buffer itself could not.
TEST_F(TemplateMemoryTest, AResidualIsAddedIntoByTheProjectionsGemm) {
  const char *sum = R"mlir(
    %a = mt.linear %x, %w : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
    %h = mt.add %x, %a : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %n = mt.mul %h, %h : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %m = mt.linear %IN, %w : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
    %y = mt.add %m, %h : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    mt.yield %y : tensor<4x16xf32>
)mlir";
  auto body = [&](const char *in) {
    std::string text = sum;
    text.replace(text.find("%IN"), 3, in);
    return layer(text);
  };
  TemplatePlan reads = plan(body("%h"));
  ASSERT_TRUE(module);
  EXPECT_TRUE(reads.summedInPlace.empty());
  EXPECT_TRUE(reads.addsInto.empty());

  TemplatePlan p = plan(body("%n"));
  ASSERT_TRUE(module);
  Value a = result(0), h = result(1), m = result(3), y = result(4);
  EXPECT_TRUE(p.summedInPlace.count(y));
  EXPECT_TRUE(p.addsInto.count(m));
  EXPECT_FALSE(p.addsInto.count(a));
  for (Value v : {h, m, y})
    EXPECT_EQ(p.values[v].kind, Placement::Output);
  EXPECT_EQ(p.values[a].kind, Placement::Workspace);
}

// A sum's first term may come from any kernel (here a product): it writes
// the sum's buffer, and the dx made after it adds into it.
TEST_F(TemplateMemoryTest, ASumMayStartFromAnyKernelsResult) {
  TemplatePlan p = plan(projections(R"mlir(
    %m = mt.mul %a, %b : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %e, %de = mt.linear_grad %dy, %x, %w0 : (tensor<4x16xf32>, tensor<4x16xf32>, tensor<16x16xf32>) -> (tensor<4x16xf32>, tensor<16x16xf32>)
    %s = mt.add %e, %m : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
    %t = mt.mul %s, %c : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
)mlir",
                                    "%t"));
  ASSERT_TRUE(module);
  Value m = result(3), e = result(4), s = result(5);
  EXPECT_TRUE(p.summedInPlace.count(s));
  EXPECT_TRUE(p.addsInto.count(e));
  EXPECT_FALSE(p.addsInto.count(m));
  EXPECT_EQ(p.values[s].kind, Placement::Workspace);
  EXPECT_EQ(p.values[m].offset, p.values[s].offset);
  EXPECT_EQ(p.values[e].offset, p.values[s].offset);
  // %c, read after the sum is made, lives elsewhere.
  EXPECT_NE(p.values[result(2)].offset, p.values[s].offset);
}

} // namespace
