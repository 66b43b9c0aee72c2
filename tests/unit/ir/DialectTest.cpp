//===- DialectTest.cpp - mt dialect: builders, verifiers, round trip ------===//
#include "ir/MtDialect.h"
#include "ir/MtOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

using namespace mlir;

namespace {

class DialectTest : public ::testing::Test {
protected:
  DialectTest() { ctx.loadDialect<mt::MtDialect>(); }

  // Parses `text`; returns the first diagnostic (empty when it verified).
  std::string parseError(const std::string &text) {
    std::string message;
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
      if (message.empty())
        message = d.str();
      return success();
    });
    OwningOpRef<ModuleOp> m = parseSourceString<ModuleOp>(text, &ctx);
    if (m && message.empty() && failed(verify(*m)))
      message = "verification failed";
    return message;
  }

  std::string print(Operation *op) {
    std::string s;
    llvm::raw_string_ostream os(s);
    op->print(os);
    return s;
  }

  MLIRContext ctx;
};

const char *kModel = R"mlir(
module {
  mt.param @wte : tensor<256x64xf32>
  mt.param @"onnx::MatMul_9" tied to @wte {transposed} : tensor<64x256xf32>
  mt.param @"l0.ln" : tensor<64xf32>
  mt.param @"l0.wq" : tensor<64x64xf32>
  mt.param @cos {frozen} : tensor<16x16xf32>
  mt.template @embedding kind "embedding" (%ids: tensor<2x16xi32>) params (%t: tensor<256x64xf32>) -> (tensor<2x16x64xf32>) {
    %h = mt.embed %ids, %t : (tensor<2x16xi32>, tensor<256x64xf32>) -> tensor<2x16x64xf32>
    mt.yield %h : tensor<2x16x64xf32>
  }
  mt.template @layer kind "layer" (%x: tensor<2x16x64xf32>) params (%ln: tensor<64xf32>, %wq: tensor<64x64xf32>) -> (tensor<2x16x64xf32>) {
    %n = mt.rms_norm %x, %ln {eps = 1.0e-5 : f64} : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
    %q = mt.linear %n, %wq : (tensor<2x16x64xf32>, tensor<64x64xf32>) -> tensor<2x16x64xf32>
    %y = mt.add %x, %q : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    mt.yield %y : tensor<2x16x64xf32>
  }
  mt.template @head kind "head" (%x: tensor<2x16x64xf32>) params (%w: tensor<64x256xf32>) -> (tensor<2x16x256xf32>) {
    %l = mt.linear %x, %w {w_layout = "in_out"} : (tensor<2x16x64xf32>, tensor<64x256xf32>) -> tensor<2x16x256xf32>
    mt.yield %l : tensor<2x16x256xf32>
  }
  mt.model @main(%tokens: tensor<2x16xi32>, %targets: tensor<2x16xi32>) -> (tensor<f32>) {
    %h = mt.apply @embedding(%tokens) params(@wte) : (tensor<2x16xi32>) -> tensor<2x16x64xf32>
    %h1 = mt.apply @layer(%h) layer(0) params(@"l0.ln", @"l0.wq") : (tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
    %lg = mt.apply @head(%h1) params(@"onnx::MatMul_9") : (tensor<2x16x64xf32>) -> tensor<2x16x256xf32>
    %loss = mt.cross_entropy %lg, %targets : (tensor<2x16x256xf32>, tensor<2x16xi32>) -> tensor<f32>
    mt.return %loss : tensor<f32>
  }
}
)mlir";

TEST_F(DialectTest, ModelRoundTrips) {
  OwningOpRef<ModuleOp> m = parseSourceString<ModuleOp>(kModel, &ctx);
  ASSERT_TRUE(m);
  ASSERT_TRUE(succeeded(verify(*m)));
  std::string once = print(*m);
  OwningOpRef<ModuleOp> again = parseSourceString<ModuleOp>(once, &ctx);
  ASSERT_TRUE(again);
  EXPECT_EQ(once, print(*again));
}

// Replaces the first occurrence of `from` in kModel.
std::string mutate(const std::string &from, const std::string &to) {
  std::string s = kModel;
  size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

TEST_F(DialectTest, ApplyChecksParamTypes) {
  std::string bad = mutate("params(@\"l0.ln\", @\"l0.wq\")",
                           "params(@\"l0.wq\", @\"l0.ln\")");
  EXPECT_NE(parseError(bad).find("template expects"), std::string::npos);
}

TEST_F(DialectTest, ApplyChecksParamCount) {
  std::string bad = mutate("params(@\"l0.ln\", @\"l0.wq\")", "params(@\"l0.ln\")");
  EXPECT_NE(parseError(bad).find("binds 1 params"), std::string::npos);
}

TEST_F(DialectTest, ApplyChecksCallee) {
  std::string bad = mutate("mt.apply @layer(", "mt.apply @wte(");
  EXPECT_NE(parseError(bad).find("is not an mt.template"), std::string::npos);
}

TEST_F(DialectTest, ModelBodyOnlyHoldsApplications) {
  std::string bad = mutate(
      "    %loss = mt.cross_entropy",
      "    %z = mt.scale %h {factor = 2.0 : f64} : (tensor<2x16x64xf32>) -> "
      "tensor<2x16x64xf32>\n    %loss = mt.cross_entropy");
  EXPECT_NE(parseError(bad).find("not allowed in a model body"),
            std::string::npos);
}

TEST_F(DialectTest, FrozenParamCannotBeTied) {
  std::string bad = mutate("mt.param @cos {frozen}",
                           "mt.param @cos tied to @wte {frozen}");
  EXPECT_NE(parseError(bad).find("frozen param cannot be tied"),
            std::string::npos);
}

TEST_F(DialectTest, RowChunkNamesAStretchOfTheBody) {
  const char *layer = "mt.template @layer kind \"layer\" (%x: tensor<2x16x64xf32>) "
                      "params (%ln: tensor<64xf32>, %wq: tensor<64x64xf32>) "
                      "-> (tensor<2x16x64xf32>) {";
  auto with = [&](const std::string &attrs) {
    std::string head = layer;
    return mutate(head, head.substr(0, head.size() - 1) + "attributes {" +
                            attrs + "} {");
  };
  // The layer's body has 4 ops (yield included).
  EXPECT_EQ(parseError(with("row_chunk = 8 : i64, row_ops = array<i64: 1, 4>")),
            "");
  EXPECT_EQ(parseError(with("row_chunk = 8 : i64")), "");
  EXPECT_NE(parseError(with("row_chunk = 0 : i64")).find("must be positive"),
            std::string::npos);
  EXPECT_NE(parseError(with("row_ops = array<i64: 1, 4>")).find("needs a row_chunk"),
            std::string::npos);
  for (const char *ops : {"array<i64: 1, 5>", "array<i64: 2, 2>",
                          "array<i64: 1>", "array<i64: -1, 3>"})
    EXPECT_NE(parseError(with(std::string("row_chunk = 8 : i64, row_ops = ") +
                              ops))
                  .find("within the body's 4 ops"),
              std::string::npos)
        << ops;
}

// One primitive in a graph template, for verifier tests.
std::string graphWith(const std::string &args, const std::string &body,
                      const std::string &result) {
  return "mt.template @g kind \"graph\" (" + args + ") -> (" + result +
         ") {\n" + body + "\n  mt.yield %y : " + result + "\n}";
}

TEST_F(DialectTest, LinearVerifier) {
  const char *args = "%x: tensor<2x8xf32>, %w: tensor<4x8xf32>";
  EXPECT_EQ(parseError(graphWith(args,
                                 "%y = mt.linear %x, %w : (tensor<2x8xf32>, "
                                 "tensor<4x8xf32>) -> tensor<2x4xf32>",
                                 "tensor<2x4xf32>")),
            "");
  // The same weight read as [in, out] does not contract with x.
  EXPECT_NE(parseError(graphWith(args,
                                 "%y = mt.linear %x, %w {w_layout = \"in_out\"} "
                                 ": (tensor<2x8xf32>, tensor<4x8xf32>) -> "
                                 "tensor<2x8xf32>",
                                 "tensor<2x8xf32>"))
                .find("expects 4"),
            std::string::npos);
}

TEST_F(DialectTest, AttentionNeedsWholeKvGroups) {
  std::string args = "%q: tensor<1x6x4x8xf32>, %k: tensor<1x4x4x8xf32>, %v: "
                     "tensor<1x4x4x8xf32>";
  std::string body = "%y = mt.attention %q, %k, %v {scale = 0.5 : f64} : "
                     "(tensor<1x6x4x8xf32>, tensor<1x4x4x8xf32>, "
                     "tensor<1x4x4x8xf32>) -> tensor<1x6x4x8xf32>";
  EXPECT_NE(parseError(graphWith(args, body, "tensor<1x6x4x8xf32>"))
                .find("multiple of KV heads"),
            std::string::npos);
}

TEST_F(DialectTest, AttentionLogSumExpHasOneValuePerQueryRow) {
  std::string args = "%q: tensor<1x4x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: "
                     "tensor<1x2x4x8xf32>";
  auto body = [](const std::string &lse) {
    return "%y, %lse = mt.attention %q, %k, %v {scale = 0.5 : f64} : "
           "(tensor<1x4x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) "
           "-> (tensor<1x4x4x8xf32>, " +
           lse + ")";
  };
  EXPECT_EQ(parseError(graphWith(args, body("tensor<1x4x4xf32>"),
                                 "tensor<1x4x4x8xf32>")),
            "");
  // One per KV head's row is too few.
  EXPECT_NE(parseError(graphWith(args, body("tensor<1x2x4xf32>"),
                                 "tensor<1x4x4x8xf32>"))
                .find("lse has shape [1,2,4], expected [1,4,4]"),
            std::string::npos);
}

// Sequence-major attention: heads in dim 2, positions in dim 1, the
// log-sum-exp still [B, H, S]; the heads-major reading of the same shapes
// fails (6 query heads over 4 KV heads), as does a layout of another name.
TEST_F(DialectTest, AttentionSequenceMajorReadsHeadsFromDimTwo) {
  std::string args = "%q: tensor<1x4x6x8xf32>, %k: tensor<1x4x2x8xf32>, %v: "
                     "tensor<1x4x2x8xf32>";
  auto body = [](const std::string &layout, const std::string &lse) {
    return "%y, %lse = mt.attention %q, %k, %v {layout = \"" + layout +
           "\", scale = 0.5 : f64} : (tensor<1x4x6x8xf32>, "
           "tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>) -> "
           "(tensor<1x4x6x8xf32>, " +
           lse + ")";
  };
  EXPECT_EQ(parseError(graphWith(args, body("bshd", "tensor<1x6x4xf32>"),
                                 "tensor<1x4x6x8xf32>")),
            "");
  EXPECT_NE(parseError(graphWith(args, body("bshd", "tensor<1x4x6xf32>"),
                                 "tensor<1x4x6x8xf32>"))
                .find("lse has shape [1,4,6], expected [1,6,4]"),
            std::string::npos);
  EXPECT_NE(parseError(graphWith(args, body("bhsd", "tensor<1x4x6xf32>"),
                                 "tensor<1x4x6x8xf32>"))
                .find("q [1,4,6,8] and k [1,4,2,8] disagree"),
            std::string::npos);
  EXPECT_NE(parseError(graphWith(args, body("sbhd", "tensor<1x6x4xf32>"),
                                 "tensor<1x4x6x8xf32>"))
                .find("layout must be \"bhsd\" or \"bshd\", not \"sbhd\""),
            std::string::npos);
}

// attention_grad reads the forward's output y (as cuDNN's backward does),
// which has q's shape.
TEST_F(DialectTest, AttentionGradReadsAnOutputOfQueriesShape) {
  std::string args =
      "%dy: tensor<1x4x4x8xf32>, %q: tensor<1x4x4x8xf32>, %k: "
      "tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>, %o: tensor<1x4x4x8xf32>, "
      "%o2: tensor<1x2x4x8xf32>, %delta: tensor<1x4x4xf32>, %lse: "
      "tensor<1x4x4xf32>";
  auto body = [](const std::string &out, const std::string &type) {
    return "%y, %dk, %dv = mt.attention_grad %dy, %q, %k, %v, " + out +
           ", %delta, %lse {scale = 0.5 : f64} : (tensor<1x4x4x8xf32>, "
           "tensor<1x4x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, " +
           type +
           ", tensor<1x4x4xf32>, tensor<1x4x4xf32>) -> (tensor<1x4x4x8xf32>, "
           "tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>)";
  };
  EXPECT_EQ(parseError(graphWith(args, body("%o", "tensor<1x4x4x8xf32>"),
                                 "tensor<1x4x4x8xf32>")),
            "");
  // One row per KV head's query is not the output.
  EXPECT_NE(parseError(graphWith(args, body("%o2", "tensor<1x2x4x8xf32>"),
                                 "tensor<1x4x4x8xf32>"))
                .find("y has type"),
            std::string::npos);
}

TEST_F(DialectTest, AttentionHasOneAlibiSlopePerQueryHead) {
  std::string args = "%q: tensor<1x4x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: "
                     "tensor<1x2x4x8xf32>";
  auto body = [](const std::string &slopes) {
    return "%y = mt.attention %q, %k, %v {alibi_slopes = array<f64: " + slopes +
           ">, scale = 0.5 : f64} : (tensor<1x4x4x8xf32>, "
           "tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x4x4x8xf32>";
  };
  EXPECT_EQ(parseError(graphWith(args, body("0.5, 0.25, 0.125, 0.0625"),
                                 "tensor<1x4x4x8xf32>")),
            "");
  // One per KV head is not enough: each query head has its own slope.
  EXPECT_NE(parseError(graphWith(args, body("0.5, 0.25"),
                                 "tensor<1x4x4x8xf32>"))
                .find("has 2 alibi_slopes for 4 query heads"),
            std::string::npos);
}

TEST_F(DialectTest, AttentionWindowIsPositive) {
  std::string args = "%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: "
                     "tensor<1x2x4x8xf32>";
  auto body = [](int window) {
    return "%y = mt.attention %q, %k, %v {scale = 0.5 : f64, window = " +
           std::to_string(window) +
           " : i64} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, "
           "tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>";
  };
  EXPECT_EQ(parseError(graphWith(args, body(2), "tensor<1x2x4x8xf32>")), "");
  EXPECT_NE(parseError(graphWith(args, body(0), "tensor<1x2x4x8xf32>"))
                .find("window must be positive, not 0"),
            std::string::npos);
}

TEST_F(DialectTest, AttentionChunkIsPositive) {
  std::string args = "%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: "
                     "tensor<1x2x4x8xf32>";
  auto body = [](int chunk) {
    return "%y = mt.attention %q, %k, %v {scale = 0.5 : f64, chunk = " +
           std::to_string(chunk) +
           " : i64} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, "
           "tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>";
  };
  EXPECT_EQ(parseError(graphWith(args, body(3), "tensor<1x2x4x8xf32>")), "");
  EXPECT_NE(parseError(graphWith(args, body(-1), "tensor<1x2x4x8xf32>"))
                .find("chunk must be positive, not -1"),
            std::string::npos);
}

TEST_F(DialectTest, RopeChecksTables) {
  std::string args = "%x: tensor<1x2x4x8xf32>, %c: tensor<4x6xf32>, %s: "
                     "tensor<4x4xf32>";
  std::string body = "%y = mt.rope %x, %c, %s {rotary_dim = 4 : i64, seq_axis "
                     "= 2 : i64} : (tensor<1x2x4x8xf32>, tensor<4x6xf32>, "
                     "tensor<4x4xf32>) -> tensor<1x2x4x8xf32>";
  EXPECT_NE(parseError(graphWith(args, body, "tensor<1x2x4x8xf32>"))
                .find("cos has shape [4,6], expected [4,4]"),
            std::string::npos);
}

TEST_F(DialectTest, RopeRotationIsHalfOrInterleaved) {
  std::string args = "%x: tensor<1x2x4x8xf32>, %c: tensor<4x8xf32>, %s: "
                     "tensor<4x8xf32>";
  auto body = [](const std::string &rotation) {
    return "%y = mt.rope %x, %c, %s {rotary_dim = 8 : i64, rotation = \"" +
           rotation +
           "\", seq_axis = 2 : i64} : (tensor<1x2x4x8xf32>, tensor<4x8xf32>, "
           "tensor<4x8xf32>) -> tensor<1x2x4x8xf32>";
  };
  for (const char *ok : {"half", "interleaved"})
    EXPECT_EQ(parseError(graphWith(args, body(ok), "tensor<1x2x4x8xf32>")), "")
        << ok;
  EXPECT_NE(parseError(graphWith(args, body("every_two"),
                                 "tensor<1x2x4x8xf32>"))
                .find("rotation must be \"half\" or \"interleaved\""),
            std::string::npos);
}

TEST_F(DialectTest, MoeChecksExpertShapesTopKAndRouting) {
  auto graph = [&](const std::string &gateUp, int64_t k,
                   const std::string &routing, const std::string &more = "") {
    std::string args =
        "%x: tensor<6x16xf32>, %r: tensor<4x16xf32>, %gu: " + gateUp +
        ", %d: tensor<4x16x8xf32>";
    std::string body = "%y = mt.moe %x, %r, %gu, %d {routing = \"" + routing +
                       "\", top_k = " + std::to_string(k) + " : i64" + more +
                       "} : (tensor<6x16xf32>, tensor<4x16xf32>, " + gateUp +
                       ", tensor<4x16x8xf32>) -> tensor<6x16xf32>";
    return parseError(graphWith(args, body, "tensor<6x16xf32>"));
  };
  EXPECT_EQ(graph("tensor<4x16x16xf32>", 2, "softmax_renorm"), "");
  EXPECT_NE(graph("tensor<4x8x16xf32>", 2, "softmax")
                .find("do not form E "
                      "experts"),
            std::string::npos);
  EXPECT_NE(graph("tensor<4x16x16xf32>", 5, "softmax")
                .find("top_k must be in [1, 4], not 5"),
            std::string::npos);
  EXPECT_NE(graph("tensor<4x16x16xf32>", 2, "sparsemixer")
                .find("routing must be softmax, softmax_renorm, sigmoid or "
                      "sigmoid_renorm"),
            std::string::npos);
  // Grouped routing: 2 groups of 2, the best one competes, scaled.
  const std::string gu = "tensor<4x16x16xf32>";
  EXPECT_EQ(graph(gu, 2, "sigmoid_renorm",
                  ", groups = 2 : i64, top_groups = 1 : i64, scale = 2.5"),
            "");
  EXPECT_NE(graph(gu, 2, "sigmoid", ", groups = 3 : i64")
                .find("groups must divide the 4 experts into groups of at "
                      "least 2, not 3"),
            std::string::npos);
  EXPECT_NE(graph(gu, 2, "sigmoid", ", groups = 4 : i64, top_groups = 2 : i64")
                .find("groups of at least 2"),
            std::string::npos);
  EXPECT_NE(graph(gu, 3, "sigmoid", ", groups = 2 : i64, top_groups = 1 : i64")
                .find("top_groups must be in [1, 2] and leave top_k = 3"),
            std::string::npos);
  EXPECT_NE(
      graph(gu, 2, "sigmoid", ", scale = 0.0").find("scale must be positive"),
      std::string::npos);
  // A selection bias has one entry per expert.
  auto biased = [&](const std::string &bias) {
    std::string args = "%x: tensor<6x16xf32>, %r: tensor<4x16xf32>, %gu: "
                       "tensor<4x16x16xf32>, %d: tensor<4x16x8xf32>, %b: " +
                       bias;
    std::string body = "%y = mt.moe %x, %r, %gu, %d, %b {top_k = 2 : i64} : "
                       "(tensor<6x16xf32>, tensor<4x16xf32>, "
                       "tensor<4x16x16xf32>, tensor<4x16x8xf32>, " +
                       bias + ") -> tensor<6x16xf32>";
    return parseError(graphWith(args, body, "tensor<6x16xf32>"));
  };
  EXPECT_EQ(biased("tensor<4xf32>"), "");
  EXPECT_NE(biased("tensor<5xf32>").find("bias"), std::string::npos);
  // Weights on the experts' inputs (Llama 4): experts without biases.
  EXPECT_EQ(graph(gu, 1, "sigmoid", ", weigh_inputs"), "");
  std::string args = "%x: tensor<6x16xf32>, %r: tensor<4x16xf32>, %gu: "
                     "tensor<4x16x16xf32>, %d: tensor<4x16x8xf32>, %db: "
                     "tensor<4x16xf32>";
  std::string body =
      "%y = mt.moe %x, %r, %gu, %d down_bias %db {top_k = 1 : i64, "
      "weigh_inputs} : (tensor<6x16xf32>, tensor<4x16xf32>, "
      "tensor<4x16x16xf32>, tensor<4x16x8xf32>, tensor<4x16xf32>) -> "
      "tensor<6x16xf32>";
  EXPECT_NE(parseError(graphWith(args, body, "tensor<6x16xf32>"))
                .find("weigh_inputs takes experts without gate_up_bias or "
                      "down_bias"),
            std::string::npos);
  // Gemma 4's experts: a router input of x's type, a scale per expert,
  // GeGLU without gpt-oss's constants.
  auto gemma4 = [&](const std::string &rx, const std::string &es,
                    const std::string &more = "") {
    std::string args = "%x: tensor<6x16xf32>, %r: tensor<4x16xf32>, %gu: "
                       "tensor<4x16x16xf32>, %d: tensor<4x16x8xf32>, %rx: " +
                       rx + ", %es: " + es;
    std::string body =
        "%y = mt.moe %x, %r, %gu, %d router_x %rx expert_scale %es {top_k = "
        "2 : i64, activation = \"gelu_tanh\"" +
        more +
        "} : (tensor<6x16xf32>, tensor<4x16xf32>, tensor<4x16x16xf32>, "
        "tensor<4x16x8xf32>, " +
        rx + ", " + es + ") -> tensor<6x16xf32>";
    return parseError(graphWith(args, body, "tensor<6x16xf32>"));
  };
  const std::string rx = "tensor<6x16xf32>", es = "tensor<4xf32>";
  EXPECT_EQ(gemma4(rx, es), "");
  EXPECT_NE(gemma4("tensor<6x8xf32>", es).find("router_x must have x's type"),
            std::string::npos);
  EXPECT_NE(gemma4(rx, "tensor<5xf32>").find("expert_scale"),
            std::string::npos);
  EXPECT_NE(gemma4(rx, es, ", limit = 7.0")
                .find("gelu_tanh experts take no alpha, limit or up_shift"),
            std::string::npos);
  EXPECT_NE(graph(gu, 2, "softmax", ", activation = \"relu\"")
                .find("activation must be silu or gelu_tanh, not relu"),
            std::string::npos);
}

TEST_F(DialectTest, AddBroadcasts) {
  std::string args = "%a: tensor<2x3x4xf32>, %b: tensor<3x4xf32>";
  EXPECT_EQ(parseError(graphWith(args,
                                 "%y = mt.add %a, %b : (tensor<2x3x4xf32>, "
                                 "tensor<3x4xf32>) -> tensor<2x3x4xf32>",
                                 "tensor<2x3x4xf32>")),
            "");
  std::string bad = "%a: tensor<2x3x4xf32>, %b: tensor<3x5xf32>";
  EXPECT_NE(parseError(graphWith(bad,
                                 "%y = mt.add %a, %b : (tensor<2x3x4xf32>, "
                                 "tensor<3x5xf32>) -> tensor<2x3x4xf32>",
                                 "tensor<2x3x4xf32>"))
                .find("do not broadcast"),
            std::string::npos);
}

TEST_F(DialectTest, BuilderMakesVerifiedTemplate) {
  OpBuilder b(&ctx);
  Location loc = b.getUnknownLoc();
  auto x = RankedTensorType::get({2, 4}, b.getF32Type());
  auto w = RankedTensorType::get({4}, b.getF32Type());
  OwningOpRef<ModuleOp> m = ModuleOp::create(loc);
  b.setInsertionPointToEnd(m->getBody());
  auto tmpl = b.create<mt::TemplateOp>(
      loc, "norm", "layer", b.getFunctionType({x, w}, {x}), /*numInputs=*/1,
      FlatSymbolRefAttr(), DenseI64ArrayAttr(), IntegerAttr(),
      DenseI64ArrayAttr(), FlatSymbolRefAttr());
  Block *block = b.createBlock(&tmpl.getBody(), {}, {x, w}, {loc, loc});
  b.setInsertionPointToEnd(block);
  Value y = b.create<mt::RmsNormOp>(loc, x, block->getArgument(0),
                                    block->getArgument(1),
                                    b.getF64FloatAttr(1e-6));
  b.create<mt::YieldOp>(loc, ValueRange{y});
  EXPECT_TRUE(succeeded(verify(*m)));
  EXPECT_EQ(tmpl.getNumParams(), 1u);
  EXPECT_NE(print(*m).find("params (%arg1: tensor<4xf32>)"), std::string::npos);
}

} // namespace
