//===- TemplateCodegen.cpp - a template as a C++ function -----------------===//
//
// Straight-line code: each op becomes one kernel call on the launch's
// DeviceKernels with its shapes spelled out, reading and writing the places
// planTemplate chose. Backward kernels accumulate, so their scratch results
// are zeroed first, except swiglu_grad's and attention_grad's, which their
// kernels write, and those of kernelWritesOrAdds: each kernel writes its
// result, or adds it into the sum planTemplate placed it in (that sum's
// adds, and the reshapes planTemplate made views, run nothing). Param gradients
// accumulate straight into the gradient slot (zeroed by the runtime on a unit's
// first micro-batch), which also sums them over micro-batches. The stretch a
// `row_chunk` names becomes a loop over chunks of token rows (RowChunk.h): row
// values held whole are addressed at the chunk's first row, and local ones take
// one chunk.
//
//===----------------------------------------------------------------------===//
#include "codegen/TemplateCodegen.h"

#include "passes/TemplateMemory.h"

#include "ir/AttentionLayout.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace mt {

std::string templateFunctionName(StringRef symbol) {
  std::string name = "t_";
  for (char c : symbol)
    name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
}

namespace {

std::string lit(double v) { return llvm::formatv("{0:e9}f", v).str(); }

std::string ints(ArrayRef<int64_t> xs) {
  std::string s = "{";
  for (auto [i, x] : llvm::enumerate(xs))
    s += (i ? ", " : "") + std::to_string(x);
  return s + "}";
}

/// A mixture of experts' routing as the kernels' MoeRouting aggregate:
/// {sigmoid, normalize, groups, top_groups, scale, weigh_inputs}.
template <class MoeLike> std::string routingLiteral(MoeLike m) {
  StringRef r = m.getRouting();
  return llvm::formatv("{{{0}, {1}, {2}, {3}, {4}, {5}}",
                       r.starts_with("sigmoid"), r.ends_with("_renorm"),
                       m.getGroups(), m.getTopGroups(),
                       lit(m.getScale().convertToDouble()), m.getWeighInputs())
      .str();
}

/// {in_out, interleaved, alpha, limit, up_shift, gelu}: MoeExperts.
template <class MoeLike> std::string expertsLiteral(MoeLike m) {
  return llvm::formatv("{{{0}, {1}, {2}, {3}, {4}, {5}}",
                       m.getWLayout() == "in_out", m.getInterleaved(),
                       lit(m.getAlpha().convertToDouble()),
                       lit(m.getLimit().convertToDouble()),
                       lit(m.getUpShift().convertToDouble()),
                       m.getActivation() == "gelu_tanh")
      .str();
}

ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}
int64_t numel(Value v) {
  return cast<RankedTensorType>(v.getType()).getNumElements();
}

class FunctionWriter {
public:
  FunctionWriter(TemplateOp tmpl, const TemplatePlan &plan)
      : tmpl_(tmpl), plan_(plan),
        chunk_(plan.chunking ? &*plan.chunking : nullptr), os_(body_) {}

  FailureOr<std::string> run() {
    std::optional<size_t> loopBegin;
    size_t loopEnd = 0;
    int64_t position = 0;
    for (Operation &op : tmpl_.getBlock()) {
      inLoop_ = chunk_ && chunk_->contains(position++);
      if (inLoop_ && !loopBegin)
        loopBegin = body_.size();
      if (failed(emit(op)))
        return failure();
      if (inLoop_ && position == chunk_->end)
        for (auto [v, param] : chunk_->loopSums)
          addToGradient(v, param);
      if (inLoop_)
        loopEnd = body_.size();
    }
    std::string out;
    llvm::raw_string_ostream os(out);
    os << "// @" << tmpl_.getSymName() << "\n";
    os << "static void " << templateFunctionName(tmpl_.getSymName())
       << "(const mtrt::LaunchArgs &a) {\n";
    os << "  mtrt::DeviceKernels &k = *a.k;\n";
    if (!chunk_) {
      os << body_ << "}\n";
      return out;
    }
    // Row values address the chunk that starts at token row r0.
    StringRef body(body_);
    os << body.take_front(*loopBegin);
    os << llvm::formatv("  for (int64_t r0 = 0; r0 < {0}; r0 += {1}) {{\n",
                        chunk_->rows, chunk_->chunk);
    StringRef loop = body.slice(*loopBegin, loopEnd).rtrim('\n');
    for (StringRef line : llvm::split(loop, '\n'))
      os << "  " << line << "\n";
    os << "  }\n" << body.drop_front(loopEnd) << "}\n";
    return out;
  }

private:
  const Placement &where(Value v) { return plan_.values.find(v)->second; }
  // Whether v, inside the chunk loop, is a row value.
  bool isRow(Value v) const { return inLoop_ && chunk_->isRow(v); }
  // Elements of v one kernel call covers: a chunk's worth of a row value.
  int64_t count(Value v) const {
    return inLoop_ ? chunk_->callElements(v) : numel(v);
  }
  // v's shape as one chunk sees it: its rows cut to the chunk's.
  SmallVector<int64_t> chunkShape(Value v) const {
    SmallVector<int64_t> s(shapeOf(v));
    if (isRow(v)) {
      std::fill(s.begin(), s.end() - 1, 1);
      s[s.size() - 2] = chunk_->chunk;
    }
    return s;
  }
  // The offset of the chunk's first row in a launch input or output.
  std::string rowOffset(Value v) const {
    return llvm::formatv(", r0 * {0}", shapeOf(v).back()).str();
  }

  // A C++ expression for v's memory (void*, or float* for f32 places).
  std::string ref(Value v) {
    const Placement &p = where(v);
    switch (p.kind) {
    case Placement::Input:
      if (isRow(v))
        return llvm::formatv("k.at(a.inputs[{0}]{1})", p.index, rowOffset(v))
            .str();
      return llvm::formatv("a.inputs[{0}]", p.index).str();
    case Placement::Scalar:
      return "a.dloss";
    case Placement::Param:
      return llvm::formatv("k.at(a.weights, a.param_offsets[{0}])", p.index)
          .str();
    case Placement::Workspace:
      // A row value held whole: the chunk's rows of it.
      if (isRow(v) && !chunk_->isLocal(v))
        return llvm::formatv("k.at(a.workspace, {0} + r0 * {1})", p.offset,
                             shapeOf(v).back())
            .str();
      return llvm::formatv("k.at(a.workspace, {0})", p.offset).str();
    case Placement::ParamGrad:
    case Placement::SumNode:
      return llvm::formatv("(a.grads + a.param_offsets[{0}])", p.index).str();
    case Placement::Loss:
      return "static_cast<float *>(a.outputs[0])";
    case Placement::Output:
      if (isRow(v))
        return llvm::formatv("k.at(a.outputs[{0}]{1})", p.index, rowOffset(v))
            .str();
      return llvm::formatv("a.outputs[{0}]", p.index).str();
    }
    return "";
  }
  // Token ids, or the targets: a launch gets its micro-batch's tokens as
  // B*S ids followed by B*S targets (Program.h), and the head's backward
  // reads the targets.
  std::string ids(Value v) {
    std::string p = "static_cast<const int32_t *>(" + ref(v) + ")";
    const Placement &where = plan_.values.find(v)->second;
    if (where.kind == Placement::Input && where.index == 1 &&
        tmpl_.getKind() == "head")
      p += " + " + std::to_string(numel(v)) + (inLoop_ ? " + r0" : "");
    return p;
  }
  std::string opt(Value v) { return v ? ref(v) : "nullptr"; }
  // A mixture of experts' params as an mtrt::MoeParams literal, and its
  // T, H, E, I.
  template <class MoeLike> std::string moeParams(MoeLike m) {
    return llvm::formatv("{{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}",
                         ref(m.getRouter()), ref(m.getGateUp()),
                         ref(m.getDown()), opt(m.getBias()),
                         opt(m.getRouterBias()), opt(m.getGateUpBias()),
                         opt(m.getDownBias()), opt(m.getExpertScale()))
        .str();
  }
  template <class MoeLike> std::string moeDims(MoeLike m) const {
    const int64_t H = shapeOf(m.getX()).back(), E = shapeOf(m.getRouter())[0],
                  I = numel(m.getDown()) / (E * H);
    return llvm::formatv("{0}, {1}, {2}, {3}", count(m.getX()) / H, H, E, I);
  }
  // Vocabulary-piece statistics, always f32: in place in an output buffer,
  // or read from an input.
  FailureOr<std::string> stats(Operation *op, Value v) {
    Placement::Kind kind = where(v).kind;
    if (kind != Placement::Output && kind != Placement::Input)
      return op->emitOpError("statistics must be a launch input or be "
                             "yielded"),
             failure();
    return "static_cast<float *>(" + ref(v) + ")";
  }
  // Whether the kernelWritesOrAdds result v is added into its sum (else
  // written).
  const char *adds(Value v) const {
    return plan_.addsInto.count(v) ? "true" : "false";
  }
  // A gradient result the kernel accumulates into: zeroed first (in
  // scratch, or in the output buffer a layer's yielded sum is built in).
  std::string grad(Value v) {
    if (!v)
      return "nullptr";
    const Placement &p = where(v);
    if (p.kind == Placement::Workspace || p.kind == Placement::Output)
      os_ << "  k.zero(" << ref(v) << ", " << count(v) << ");\n";
    return ref(v);
  }
  // B, T, Hk, Hv, Dk, Dv, delta, key_decay of a gated scan's q [B, T, Hk,
  // Dk], v and g ([B, T, Hv], or [B, T, Hv, Dk] with a decay per key
  // channel).
  static std::string gatedScanDims(Value q, Value v, Value g, bool delta) {
    auto qs = shapeOf(q), vs = shapeOf(v);
    return llvm::formatv("{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}", qs[0], qs[1],
                         qs[2], vs[2], qs[3], vs[3], delta ? "true" : "false",
                         shapeOf(g).size() == 4 ? "true" : "false");
  }
  // An f32 param gradient argument (dw, db, dtable); null where the param
  // is frozen and nothing reads it (the kernels skip a null one).
  FailureOr<std::string> paramGrad(Operation *op, Value v) {
    if (!v || v.use_empty())
      return std::string("nullptr");
    Placement::Kind kind = where(v).kind;
    if (kind != Placement::ParamGrad && kind != Placement::SumNode)
      return op->emitOpError("param gradient is not bound to the gradient "
                             "slot"),
             failure();
    return ref(v);
  }
  std::string broadcast(Value lhs, Value rhs) {
    std::string name = "bc" + std::to_string(counter_++);
    auto a = chunkShape(lhs), b = chunkShape(rhs);
    os_ << "  static const mtrt::Broadcast " << name
        << " = mtrt::codegen::broadcast(" << ints(a) << ", " << ints(b)
        << ");\n";
    return name;
  }

  LogicalResult emit(Operation &op) {
    if (plan_.values.count(op.getNumResults() ? op.getResult(0) : Value()) &&
        where(op.getResult(0)).kind == Placement::SumNode)
      return success(); // sums of param gradients happen by accumulation
    os_ << "  // " << op.getName().stripDialect();
    for (Value r : op.getResults())
      os_ << " " << llvm::formatv("{0}", shapeStr(shapeOf(r)));
    os_ << "\n";
    if (auto l = dyn_cast<LinearOp>(op)) {
      auto [M, K, N] = linearDims(l.getX(), l.getW(), l.isInOut());
      os_ << llvm::formatv("  k.linear_forward({0}, {1}, {2}, {3}, {4}, {5}, "
                           "{6}, {7}, {8});\n",
                           ref(l.getY()), ref(l.getX()), ref(l.getW()),
                           opt(l.getBias()), M, K, N, l.isInOut(),
                           adds(l.getY()));
    } else if (auto g = dyn_cast<LinearGradOp>(op)) {
      bool inOut = g.getWLayout() == "in_out";
      auto [M, K, N] = linearDims(g.getX(), g.getW(), inOut);
      auto dw = paramGrad(&op, g.getDw()), db = paramGrad(&op, g.getDb());
      if (failed(dw) || failed(db))
        return failure();
      os_ << llvm::formatv("  k.linear_backward({0}, {1}, {2}, {3}, {4}, {5}, "
                           "{6}, {7}, {8}, {9}, {10});\n",
                           ref(g.getDx()), *dw, *db, ref(g.getDy()),
                           ref(g.getX()), ref(g.getW()), M, K, N, inOut,
                           adds(g.getDx()));
    } else if (auto n = dyn_cast<RmsNormOp>(op)) {
      int64_t D = shapeOf(n.getX()).back();
      os_ << llvm::formatv(
          "  k.rms_norm_forward({0}, {1}, {2}, {3}, {4}, {5});\n",
          ref(n.getY()), ref(n.getX()), opt(n.getWeight()), count(n.getX()) / D,
          D, lit(n.getEps().convertToDouble()));
    } else if (auto g = dyn_cast<RmsNormGradOp>(op)) {
      int64_t D = shapeOf(g.getX()).back();
      auto dw = paramGrad(&op, g.getWeight() ? g.getGrads()[1] : Value());
      if (failed(dw))
        return failure();
      Value dx = g.getGrads()[0];
      os_ << llvm::formatv(
          "  k.rms_norm_backward({0}, {1}, {2}, {3}, {4}, {5}, "
          "{6}, {7}, {8});\n",
          ref(dx), *dw, ref(g.getDy()), ref(g.getX()), opt(g.getWeight()),
          count(g.getX()) / D, D, lit(g.getEps().convertToDouble()), adds(dx));
    } else if (auto n = dyn_cast<LayerNormOp>(op)) {
      int64_t D = shapeOf(n.getX()).back();
      os_ << llvm::formatv(
          "  k.layer_norm_forward({0}, {1}, {2}, {3}, {4}, {5}, "
          "{6});\n",
          ref(n.getY()), ref(n.getX()), opt(n.getWeight()), opt(n.getBias()),
          count(n.getX()) / D, D, lit(n.getEps().convertToDouble()));
    } else if (auto g = dyn_cast<LayerNormGradOp>(op)) {
      int64_t D = shapeOf(g.getX()).back();
      unsigned next = 1;
      Value dw = g.getWeight() ? g.getGrads()[next++] : Value();
      Value db = g.getHasBias() ? g.getGrads()[next++] : Value();
      auto dwRef = paramGrad(&op, dw), dbRef = paramGrad(&op, db);
      if (failed(dwRef) || failed(dbRef))
        return failure();
      Value dx = g.getGrads()[0];
      os_ << llvm::formatv("  k.layer_norm_backward({0}, {1}, {2}, {3}, {4}, "
                           "{5}, {6}, {7}, {8}, {9});\n",
                           ref(dx), *dwRef, *dbRef, ref(g.getDy()),
                           ref(g.getX()), opt(g.getWeight()),
                           count(g.getX()) / D, D,
                           lit(g.getEps().convertToDouble()), adds(dx));
    } else if (auto r = dyn_cast<RopeOp>(op)) {
      os_ << "  k.rope_forward(" << ref(r.getY()) << ", " << ref(r.getX())
          << ", " << ref(r.getCos()) << ", " << ref(r.getSin()) << ", "
          << ropeDims(r.getX(), r.getSeqAxis(), r.getRotaryDim()) << ", "
          << (r.getRotation() == "interleaved" ? "true" : "false") << ");\n";
    } else if (auto r = dyn_cast<RopeGradOp>(op)) {
      os_ << "  k.rope_backward(" << ref(r.getDx()) << ", " << ref(r.getDy())
          << ", " << ref(r.getCos()) << ", " << ref(r.getSin()) << ", "
          << ropeDims(r.getDy(), r.getSeqAxis(), r.getRotaryDim()) << ", "
          << (r.getRotation() == "interleaved" ? "true" : "false") << ", "
          << adds(r.getDx()) << ");\n";
    } else if (auto at = dyn_cast<AttentionOp>(op)) {
      std::string slopes = alibiSlopes(at.getAlibiSlopes());
      Value lse = at.getLse();
      os_ << "  k.attention_forward(" << ref(at.getY()) << ", "
          << (lse && !lse.use_empty() ? "static_cast<float *>(" + ref(lse) + ")"
                                      : std::string("nullptr"))
          << ", " << ref(at.getQ()) << ", " << ref(at.getK()) << ", "
          << ref(at.getV()) << ", "
          << attentionDims(at.getQ(), at.getK(),
                           at.getScale().convertToDouble(), at.getLayout())
          << ", " << keyRange(at.getWindow(), at.getChunk()) << ", "
          << softcap(at.getSoftcapAttr()) << ", " << slopes << ", "
          << opt(at.getSinks()) << ", " << headLayout(at.getLayout()) << ");\n";
    } else if (auto d = dyn_cast<AttentionDeltaOp>(op)) {
      auto rows = attentionRows(shapeOf(d.getY()), d.getLayout());
      os_ << llvm::formatv(
          "  k.attention_delta(static_cast<float *>({0}), {1}, {2}, {3}, {4}, "
          "{5}, {6}, {7});\n",
          ref(d.getDelta()), ref(d.getDy()), ref(d.getY()), rows[0], rows[1],
          rows[2], shapeOf(d.getY()).back(), headLayout(d.getLayout()));
    } else if (auto g = dyn_cast<AttentionGradOp>(op)) {
      std::string slopes = alibiSlopes(g.getAlibiSlopes());
      auto dsinks = paramGrad(&op, g.getDsinks());
      if (failed(dsinks))
        return failure();
      // dq, dk and dv written (not zeroed first).
      os_ << "  k.attention_backward(" << opt(g.getDq()) << ", "
          << opt(g.getDk()) << ", " << opt(g.getDv()) << ", " << ref(g.getDy())
          << ", " << ref(g.getQ()) << ", " << ref(g.getK()) << ", "
          << ref(g.getV()) << ", " << ref(g.getY())
          << ", static_cast<const float *>(" << ref(g.getDelta())
          << "), static_cast<const float *>(" << ref(g.getLse()) << "), "
          << attentionDims(g.getQ(), g.getK(), g.getScale().convertToDouble(),
                           g.getLayout())
          << ", " << keyRange(g.getWindow(), g.getChunk()) << ", "
          << softcap(g.getSoftcapAttr()) << ", " << slopes << ", "
          << opt(g.getSinks()) << ", " << *dsinks << ", false, "
          << headLayout(g.getLayout()) << ");\n";
    } else if (auto r = dyn_cast<ReluOp>(op)) {
      os_ << llvm::formatv("  k.relu_forward({0}, {1}, {2});\n", ref(r.getY()),
                           ref(r.getX()), count(r.getX()));
    } else if (auto r = dyn_cast<ReluGradOp>(op)) {
      os_ << llvm::formatv("  k.relu_backward({0}, {1}, {2}, {3});\n",
                           grad(r.getDx()), ref(r.getDy()), ref(r.getX()),
                           count(r.getX()));
    } else if (auto s = dyn_cast<SiluOp>(op)) {
      os_ << llvm::formatv("  k.silu_forward({0}, {1}, {2});\n", ref(s.getY()),
                           ref(s.getX()), count(s.getX()));
    } else if (auto s = dyn_cast<SiluGradOp>(op)) {
      os_ << llvm::formatv("  k.silu_backward({0}, {1}, {2}, {3});\n",
                           grad(s.getDx()), ref(s.getDy()), ref(s.getX()),
                           count(s.getX()));
    } else if (auto s = dyn_cast<SigmoidOp>(op)) {
      os_ << llvm::formatv("  k.sigmoid_forward({0}, {1}, {2});\n",
                           ref(s.getY()), ref(s.getX()), count(s.getX()));
    } else if (auto s = dyn_cast<SigmoidGradOp>(op)) {
      os_ << llvm::formatv("  k.sigmoid_backward({0}, {1}, {2}, {3});\n",
                           grad(s.getDx()), ref(s.getDy()), ref(s.getX()),
                           count(s.getX()));
    } else if (auto e = dyn_cast<ExpOp>(op)) {
      os_ << llvm::formatv("  k.exp_forward({0}, {1}, {2});\n", ref(e.getY()),
                           ref(e.getX()), count(e.getX()));
    } else if (auto s = dyn_cast<SoftplusOp>(op)) {
      os_ << llvm::formatv("  k.softplus_forward({0}, {1}, {2});\n",
                           ref(s.getY()), ref(s.getX()), count(s.getX()));
    } else if (auto s = dyn_cast<SoftplusGradOp>(op)) {
      os_ << llvm::formatv("  k.softplus_backward({0}, {1}, {2}, {3});\n",
                           grad(s.getDx()), ref(s.getDy()), ref(s.getX()),
                           count(s.getX()));
    } else if (auto s = dyn_cast<GeluOp>(op)) {
      os_ << llvm::formatv("  k.gelu_forward({0}, {1}, {2}, {3});\n",
                           ref(s.getY()), ref(s.getX()), count(s.getX()),
                           s.getApproximate() == "tanh");
    } else if (auto s = dyn_cast<GeluGradOp>(op)) {
      os_ << llvm::formatv("  k.gelu_backward({0}, {1}, {2}, {3}, {4});\n",
                           grad(s.getDx()), ref(s.getDy()), ref(s.getX()),
                           count(s.getX()), s.getApproximate() == "tanh");
    } else if (auto m = dyn_cast<MoeOp>(op)) {
      os_ << llvm::formatv(
          "  k.moe_forward({0}, {1}, {2}, {3}, {4}, {5}, {6}, {7});\n",
          ref(m.getY()), ref(m.getX()), opt(m.getRouterX()), moeParams(m),
          moeDims(m), m.getTopK(), routingLiteral(m), expertsLiteral(m));
    } else if (auto m = dyn_cast<MoeGradOp>(op)) {
      SmallVector<std::string> grads;
      for (Value d :
           {m.getDrouter(), m.getDgateUp(), m.getDdown(), m.getDrouterBias(),
            m.getDgateUpBias(), m.getDdownBias(), m.getDexpertScale()}) {
        // A frozen weight's gradient has no use: the kernels skip it.
        auto g = paramGrad(&op, d);
        if (failed(g))
          return failure();
        grads.push_back(*g);
      }
      const std::string dx = grad(m.getDx()), drx = grad(m.getDrouterX());
      os_ << llvm::formatv("  k.moe_backward({0}, {1}, {{{2}}, {3}, {4}, {5}, "
                           "{6}, {7}, {8}, {9}, {10});\n",
                           dx, drx, llvm::join(grads, ", "), ref(m.getDy()),
                           ref(m.getX()), opt(m.getRouterX()), moeParams(m),
                           moeDims(m), m.getTopK(), routingLiteral(m),
                           expertsLiteral(m));
    } else if (auto c = dyn_cast<CausalConvOp>(op)) {
      auto x = shapeOf(c.getX());
      os_ << llvm::formatv("  k.causal_conv_forward({0}, {1}, {2}, {3}, {4}, "
                           "{5}, {6}, {7});\n",
                           ref(c.getY()), ref(c.getX()), ref(c.getW()),
                           opt(c.getBias()), x[0], x[1], x[2],
                           shapeOf(c.getW())[2]);
    } else if (auto c = dyn_cast<CausalConvGradOp>(op)) {
      auto dw = paramGrad(&op, c.getDw());
      auto db = paramGrad(&op, c.getDb());
      if (failed(dw) || failed(db))
        return failure();
      auto x = shapeOf(c.getX());
      os_ << llvm::formatv("  k.causal_conv_backward({0}, {1}, {2}, {3}, {4}, "
                           "{5}, {6}, {7}, {8}, {9});\n",
                           grad(c.getDx()), *dw, *db, ref(c.getDy()),
                           ref(c.getX()), ref(c.getW()), x[0], x[1], x[2],
                           shapeOf(c.getW())[2]);
    } else if (auto s = dyn_cast<XieluOp>(op)) {
      os_ << llvm::formatv("  k.xielu_forward({0}, {1}, {2}, {3}, {4}, {5}, "
                           "{6}, {7});\n",
                           ref(s.getY()), ref(s.getX()), ref(s.getAlphaP()),
                           ref(s.getAlphaN()), count(s.getX()),
                           lit(s.getBeta().convertToDouble()),
                           lit(s.getEps().convertToDouble()),
                           s.getSoftplus() ? "true" : "false");
    } else if (auto s = dyn_cast<XieluGradOp>(op)) {
      auto dap = paramGrad(&op, s.getDalphaP()),
           dan = paramGrad(&op, s.getDalphaN());
      if (failed(dap) || failed(dan))
        return failure();
      os_ << llvm::formatv(
          "  k.xielu_backward({0}, {1}, {2}, {3}, {4}, {5}, "
          "{6}, {7}, {8}, {9}, {10});\n",
          grad(s.getDx()), *dap, *dan, ref(s.getDy()), ref(s.getX()),
          ref(s.getAlphaP()), ref(s.getAlphaN()), count(s.getX()),
          lit(s.getBeta().convertToDouble()), lit(s.getEps().convertToDouble()),
          s.getSoftplus() ? "true" : "false");
    } else if (auto s = dyn_cast<SoftcapOp>(op)) {
      os_ << llvm::formatv("  k.softcap_forward({0}, {1}, {2}, {3});\n",
                           ref(s.getY()), ref(s.getX()), count(s.getX()),
                           lit(s.getCap().convertToDouble()));
    } else if (auto s = dyn_cast<SoftcapGradOp>(op)) {
      os_ << llvm::formatv("  k.softcap_backward({0}, {1}, {2}, {3}, {4});\n",
                           grad(s.getDx()), ref(s.getDy()), ref(s.getX()),
                           count(s.getX()), lit(s.getCap().convertToDouble()));
    } else if (auto s = dyn_cast<SwigluOp>(op)) {
      os_ << llvm::formatv("  k.swiglu_forward({0}, {1}, {2}, {3});\n",
                           ref(s.getY()), ref(s.getGate()), ref(s.getUp()),
                           count(s.getGate()));
    } else if (isa<GatedDeltaOp, GatedLinearOp>(&op)) {
      // q, k, v, g, beta -> o.
      Value q = op.getOperand(0), v = op.getOperand(2);
      os_ << llvm::formatv(
          "  k.gated_scan_forward({0}, {1}, {2}, {3}, {4}, "
          "{5}, {6});\n",
          ref(op.getResult(0)), ref(q), ref(op.getOperand(1)), ref(v),
          ref(op.getOperand(3)), ref(op.getOperand(4)),
          gatedScanDims(q, v, op.getOperand(3), isa<GatedDeltaOp>(&op)));
    } else if (isa<GatedDeltaGradOp, GatedLinearGradOp>(&op)) {
      // dout, q, k, v, g, beta -> dq, dk, dv, dg, dbeta.
      Value q = op.getOperand(1), v = op.getOperand(3);
      os_ << llvm::formatv(
          "  k.gated_scan_backward({0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, "
          "{8}, {9}, {10}, {11});\n",
          grad(op.getResult(0)), grad(op.getResult(1)), grad(op.getResult(2)),
          grad(op.getResult(3)), grad(op.getResult(4)), ref(op.getOperand(0)),
          ref(q), ref(op.getOperand(2)), ref(v), ref(op.getOperand(4)),
          ref(op.getOperand(5)),
          gatedScanDims(q, v, op.getOperand(4), isa<GatedDeltaGradOp>(&op)));
    } else if (auto s = dyn_cast<SwigluGradOp>(op)) {
      // Written, never zeroed first.
      os_ << llvm::formatv(
          "  k.swiglu_backward({0}, {1}, {2}, {3}, {4}, {5}, false);\n",
          ref(s.getDgate()), ref(s.getDup()), ref(s.getDy()), ref(s.getGate()),
          ref(s.getUp()), count(s.getGate()));
    } else if (auto s = dyn_cast<ScaleOp>(op)) {
      os_ << llvm::formatv("  k.scale_forward({0}, {1}, {2}, {3});\n",
                           ref(s.getY()), ref(s.getX()), count(s.getX()),
                           lit(s.getFactor().convertToDouble()));
    } else if (auto s = dyn_cast<AddOp>(op)) {
      if (plan_.summedInPlace.count(s.getY())) {
        os_ << "  // summed in place by its operands' kernels\n";
        return success();
      }
      std::string bc = broadcast(s.getLhs(), s.getRhs());
      os_ << llvm::formatv("  k.add_forward({0}, {1}, {2}, {3});\n",
                           ref(s.getY()), ref(s.getLhs()), ref(s.getRhs()), bc);
    } else if (auto s = dyn_cast<MulOp>(op)) {
      std::string bc = broadcast(s.getLhs(), s.getRhs());
      os_ << llvm::formatv("  k.mul_forward({0}, {1}, {2}, {3});\n",
                           ref(s.getY()), ref(s.getLhs()), ref(s.getRhs()), bc);
    } else if (auto g = dyn_cast<MulGradOp>(op)) {
      std::string bc = broadcast(g.getLhs(), g.getRhs());
      os_ << llvm::formatv("  k.mul_backward({0}, {1}, {2}, {3}, {4}, {5});\n",
                           grad(g.getDlhs()), grad(g.getDrhs()), ref(g.getDy()),
                           ref(g.getLhs()), ref(g.getRhs()), bc);
    } else if (auto s = dyn_cast<SumToOp>(op)) {
      std::string bc = broadcast(s.getY(), s.getDy());
      os_ << llvm::formatv("  k.add_backward({0}, nullptr, {1}, {2});\n",
                           grad(s.getY()), ref(s.getDy()), bc);
    } else if (auto e = dyn_cast<EmbedOp>(op)) {
      auto t = shapeOf(e.getTable());
      os_ << llvm::formatv("  k.embed_forward({0}, {1}, {2}, {3}, {4}, {5});\n",
                           ref(e.getY()), ids(e.getIds()), ref(e.getTable()),
                           count(e.getIds()), t[0], t[1]);
    } else if (auto g = dyn_cast<EmbedGradOp>(op)) {
      auto t = shapeOf(g.getDtable());
      auto dt = paramGrad(&op, g.getDtable());
      if (failed(dt))
        return failure();
      os_ << llvm::formatv(
          "  k.embed_backward({0}, {1}, {2}, {3}, {4}, {5});\n", *dt,
          ref(g.getDy()), ids(g.getIds()), count(g.getIds()), t[0], t[1]);
    } else if (auto p = dyn_cast<PositionEmbedOp>(op)) {
      auto y = shapeOf(p.getY());
      os_ << llvm::formatv(
          "  k.position_embed_forward({0}, {1}, {2}, {3}, {4});\n",
          ref(p.getY()), ref(p.getTable()), y[0], y[1], p.getOffset());
    } else if (auto g = dyn_cast<PositionEmbedGradOp>(op)) {
      auto y = shapeOf(g.getDy());
      auto dt = paramGrad(&op, g.getDtable());
      if (failed(dt))
        return failure();
      os_ << llvm::formatv(
          "  k.position_embed_backward({0}, {1}, {2}, {3}, {4});\n", *dt,
          ref(g.getDy()), y[0], y[1], g.getOffset());
    } else if (auto c = dyn_cast<CrossEntropyOp>(op)) {
      int64_t V = shapeOf(c.getLogits()).back();
      // The mean over all the launch's rows, summed chunk by chunk.
      os_ << llvm::formatv("  k.cross_entropy_forward({0}, {1}, {2}, {3}, {4}, "
                           "{5}, {6});\n",
                           ref(c.getLoss()), ref(c.getLogits()),
                           ids(c.getTargets()), count(c.getLogits()) / V, V,
                           numel(c.getLogits()) / V,
                           inLoop_ ? "r0 > 0" : "false");
    } else if (auto c = dyn_cast<CrossEntropyGradOp>(op)) {
      int64_t V = shapeOf(c.getLogits()).back();
      os_ << llvm::formatv(
          "  k.cross_entropy_backward({0}, {1}, {2}, {3}, {4}, "
          "{5}, {6});\n",
          ref(c.getDlogits()), ref(c.getLogits()), ids(c.getTargets()),
          count(c.getLogits()) / V, V, ref(c.getDloss()), adds(c.getDlogits()));
    } else if (auto c = dyn_cast<CrossEntropyStatsOp>(op)) {
      // In place: a later piece's stats_in is the same launch buffer.
      int64_t V = shapeOf(c.getLogits()).back();
      auto out = stats(&op, c.getStats());
      if (failed(out))
        return failure();
      os_ << llvm::formatv("  k.cross_entropy_stats({0}, {1}, {2}, {3}, {4}, "
                           "{5}, {6}, {7});\n",
                           *out, ref(c.getLogits()), ids(c.getTargets()),
                           count(c.getLogits()) / V, V, c.getVocabOffset(),
                           c.getVocabSize(), c.getStatsIn() ? "false" : "true");
    } else if (auto c = dyn_cast<CrossEntropyStatsLossOp>(op)) {
      int64_t rows = count(c.getStats()) / 3;
      auto in = stats(&op, c.getStats());
      if (failed(in))
        return failure();
      os_ << llvm::formatv("  k.cross_entropy_stats_loss({0}, {1}, {2}, {2}, "
                           "false);\n",
                           ref(c.getLoss()), *in, rows);
    } else if (auto c = dyn_cast<CrossEntropyPieceGradOp>(op)) {
      int64_t V = shapeOf(c.getLogits()).back();
      auto in = stats(&op, c.getStats());
      if (failed(in))
        return failure();
      os_ << llvm::formatv("  k.cross_entropy_backward_piece({0}, {1}, {2}, "
                           "{3}, {4}, {5}, {6}, {7}, {8});\n",
                           ref(c.getDlogits()), ref(c.getLogits()),
                           ids(c.getTargets()), *in, count(c.getLogits()) / V,
                           V, c.getVocabOffset(), ref(c.getDloss()),
                           adds(c.getDlogits()));
    } else if (auto e = dyn_cast<EmbedPieceOp>(op)) {
      // In place: a later piece's y_in is the same launch buffer.
      if (where(e.getY()).kind != Placement::Output)
        return op.emitOpError("must be yielded"), failure();
      auto t = shapeOf(e.getTable());
      os_ << llvm::formatv("  k.embed_forward_piece({0}, {1}, {2}, {3}, {4}, "
                           "{5}, {6}, {7}, {8}, {9});\n",
                           ref(e.getY()), ids(e.getIds()), ref(e.getTable()),
                           count(e.getIds()), t[0], t[1], e.getVocabOffset(),
                           e.getVocabSize(), e.getYIn() ? "false" : "true",
                           lit(e.getScale().convertToDouble()));
    } else if (auto g = dyn_cast<EmbedPieceGradOp>(op)) {
      auto t = shapeOf(g.getDtable());
      auto dt = paramGrad(&op, g.getDtable());
      if (failed(dt))
        return failure();
      os_ << llvm::formatv("  k.embed_backward_piece({0}, {1}, {2}, {3}, {4}, "
                           "{5}, {6}, {7});\n",
                           *dt, ref(g.getDy()), ids(g.getIds()),
                           count(g.getIds()), t[0], t[1], g.getVocabOffset(),
                           lit(g.getScale().convertToDouble()));
    } else if (auto r = dyn_cast<ReshapeOp>(op)) {
      if (plan_.views.count(r.getY()))
        os_ << "  // a view of its operand's memory\n";
      else
        os_ << llvm::formatv("  k.copy({0}, {1}, {2});\n", ref(r.getY()),
                             ref(r.getX()), count(r.getX()));
    } else if (auto t = dyn_cast<TransposeOp>(op)) {
      auto x = shapeOf(t.getX());
      os_ << "  { static const int64_t shape[] = " << ints(x)
          << ", perm[] = " << ints(t.getPerm()) << ";\n"
          << "    k.transpose_forward(" << ref(t.getY()) << ", "
          << ref(t.getX()) << ", shape, perm, " << x.size() << "); }\n";
    } else if (auto s = dyn_cast<SliceOp>(op)) {
      os_ << "  k.slice_forward(" << ref(s.getY()) << ", " << ref(s.getX())
          << ", " << sliceDims(s.getX(), s.getY(), s.getAxis(), s.getStart())
          << ");\n";
    } else if (auto p = dyn_cast<PadOp>(op)) {
      // Zeros, then x added into its range.
      os_ << "  k.zero(" << ref(p.getY()) << ", " << count(p.getY()) << ");\n"
          << "  k.slice_backward(" << ref(p.getY()) << ", " << ref(p.getX())
          << ", " << sliceDims(p.getY(), p.getX(), p.getAxis(), p.getStart())
          << ");\n";
    } else if (auto c = dyn_cast<ConcatOp>(op)) {
      // Zeros, then each operand added into its range.
      os_ << "  k.zero(" << ref(c.getY()) << ", " << count(c.getY()) << ");\n";
      int64_t start = 0;
      for (Value x : c.getXs()) {
        os_ << "  k.slice_backward(" << ref(c.getY()) << ", " << ref(x) << ", "
            << sliceDims(c.getY(), x, c.getAxis(), start) << ");\n";
        start += shapeOf(x)[c.getAxis()];
      }
    } else if (auto s = dyn_cast<SliceGradOp>(op)) {
      std::string dx = grad(s.getDx());
      os_ << "  k.slice_backward(" << dx << ", " << ref(s.getDy()) << ", "
          << sliceDims(s.getDx(), s.getDy(), s.getAxis(), s.getStart())
          << ");\n";
    } else if (auto y = dyn_cast<YieldOp>(op)) {
      return emitYield(y);
    } else {
      return op.emitOpError("has no code generator");
    }
    return success();
  }

  // Yielded activations go to the launch's output buffers; param gradients
  // not already in the gradient slot are accumulated there.
  LogicalResult emitYield(YieldOp y) {
    std::optional<ArrayRef<int64_t>> trained = tmpl_.getTrainedParams();
    int64_t numGrads = trained ? trained->size() : 0;
    int64_t numActs = y.getNumOperands() - numGrads;
    int64_t out = 0;
    for (int64_t i = 0; i < numActs; ++i) {
      Value v = y.getOperand(i);
      if (where(v).kind == Placement::Loss ||
          where(v).kind == Placement::Output) {
        ++out; // written in place by its op
        continue;
      }
      std::string to = llvm::formatv("a.outputs[{0}]", out++).str();
      if (isRow(v))
        to = "k.at(" + to + rowOffset(v) + ")";
      os_ << llvm::formatv("  k.copy({0}, {1}, {2});\n", to, ref(v), count(v));
    }
    for (int64_t i = 0; i < numGrads; ++i)
      accumulateGrad(y.getOperand(numActs + i), (*trained)[i]);
    return success();
  }

  void accumulateGrad(Value v, int64_t param) {
    const Placement &p = where(v);
    if (p.kind == Placement::ParamGrad || (chunk_ && chunk_->loopSums.count(v)))
      return; // added by its kernel, or chunk by chunk in the loop
    if (p.kind == Placement::SumNode) {
      Operation *add = v.getDefiningOp();
      accumulateGrad(add->getOperand(0), param);
      accumulateGrad(add->getOperand(1), param);
      return;
    }
    addToGradient(v, param);
  }
  void addToGradient(Value v, int64_t param) {
    os_ << llvm::formatv("  k.accumulate_f32(a.grads + a.param_offsets[{0}], "
                         "{1}, {2});\n",
                         param, ref(v), count(v));
  }

  std::tuple<int64_t, int64_t, int64_t> linearDims(Value x, Value w,
                                                   bool inOut) const {
    auto ws = shapeOf(w);
    int64_t K = inOut ? ws[0] : ws[1], N = inOut ? ws[1] : ws[0];
    return {count(x) / K, K, N};
  }
  static std::string ropeDims(Value x, int64_t seqAxis, int64_t rotary) {
    auto s = shapeOf(x);
    int64_t H = seqAxis == 2 ? s[1] : s[2], S = s[seqAxis];
    return llvm::formatv("{0}, {1}, {2}, {3}, {4}, {5}", s[0], H, S, s[3],
                         rotary, seqAxis)
        .str();
  }
  // The ALiBi slopes as a static array declared before the call, named for
  // the call's use; "nullptr" without them.
  std::string alibiSlopes(std::optional<ArrayRef<double>> slopes) {
    if (!slopes)
      return "nullptr";
    std::string name = "alibi_slopes_" + std::to_string(alibiArrays_++);
    os_ << "  static const float " << name << "[] = {";
    for (auto [i, m] : llvm::enumerate(*slopes))
      os_ << (i ? ", " : "") << lit(m);
    os_ << "};\n";
    return name;
  }
  // The keys each query sees, a window and chunks (0: none).
  static std::string keyRange(std::optional<uint64_t> window,
                              std::optional<uint64_t> chunk) {
    return llvm::formatv("mtrt::KeyRange{{{0}, {1}}", window.value_or(0),
                         chunk.value_or(0))
        .str();
  }
  // The attention's soft cap as a float literal; 0 (none) without one.
  static std::string softcap(FloatAttr cap) {
    return lit(cap ? cap.getValueAsDouble() : 0.0);
  }
  static std::string attentionDims(Value q, Value k, double scale,
                                   StringRef layout) {
    auto qs = shapeOf(q);
    const unsigned h = headsAxis(layout), s = seqAxis(layout);
    return llvm::formatv("{0}, {1}, {2}, {3}, {4}, {5}", qs[0], qs[h],
                         shapeOf(k)[h], qs[s], qs[3], lit(scale))
        .str();
  }
  static std::string headLayout(StringRef layout) {
    return isSeqMajor(layout) ? "mtrt::HeadLayout{true}"
                              : "mtrt::HeadLayout{false}";
  }
  static std::string sliceDims(Value whole, Value part, int64_t axis,
                               int64_t start) {
    auto w = shapeOf(whole);
    int64_t outer = 1, inner = 1;
    for (int64_t k = 0; k < axis; ++k)
      outer *= w[k];
    for (int64_t k = axis + 1; k < static_cast<int64_t>(w.size()); ++k)
      inner *= w[k];
    return llvm::formatv("{0}, {1}, {2}, {3}, {4}", outer, w[axis], inner,
                         start, shapeOf(part)[axis])
        .str();
  }
  static std::string shapeStr(ArrayRef<int64_t> s) {
    std::string out = "(";
    for (auto [i, d] : llvm::enumerate(s))
      out += (i ? ", " : "") + std::to_string(d);
    return out + ")";
  }

  TemplateOp tmpl_;
  const TemplatePlan &plan_;
  const RowChunking *chunk_;
  bool inLoop_ = false; // emitting an op of the chunked stretch
  std::string body_;
  llvm::raw_string_ostream os_;
  int counter_ = 0;
  int alibiArrays_ = 0;
};

} // namespace

FailureOr<std::string> emitTemplateFunction(TemplateOp tmpl,
                                            int64_t &workspaceElems) {
  TemplatePlan plan = planTemplate(tmpl);
  workspaceElems = plan.workspaceElems;
  return FunctionWriter(tmpl, plan).run();
}

} // namespace mt
