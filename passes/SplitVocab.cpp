//===- SplitVocab.cpp - an LM head and embedding in vocabulary pieces -----===//
//
// A [V, D] LM head or embedding table larger than a decoder layer sizes
// the device's weight and gradient slots by itself (for a 128K vocabulary
// they hold the head's 2-4x a layer's bytes, four times over). Cut into K
// pieces of vocabulary rows, one unit each, it moves like a layer.
//
// The head, h = pre(x) (its final norm) and logits = post(h·Wᵀ + b), with
// post any chain of elementwise scalings and soft caps (Gemma 2's
// 30 · tanh(z / 30)) that each piece applies to its own logits, becomes:
//
//   T.vp0        (x, targets)               -> (h, stats)          forward
//   T.vpJ        (h, targets, stats)        -> (stats)             forward
//   T.vpLAST     (h, targets, stats, dloss) -> (loss, dh, stats, dW...)
//   T.vpJ.bwd    (h, targets, stats, dh, dloss) -> (dh, dW...)     backward
//   T.vp0.bwd    (x, targets, stats, dh, dloss) -> (dx, dparams...)
//
// The forward pieces merge per-token log-sum-exp statistics (running max,
// sum, target logit: mt.cross_entropy_stats), the last piece turns them
// into the loss and starts the backward at once (its weights are resident),
// and the backward pieces recompute their logits to add their part of dh;
// the first piece finishes with the backward of pre. So each piece's
// weights are fetched twice per step like a layer's (the last once), at the
// price of recomputing the other pieces' logits.
//
// The embedding, y = c · table[ids] (c = 1 without scalings, Gemma's
// √hidden), becomes T.vpJ (ids[, y]) -> (y), each piece writing c times the
// rows whose ids it holds, and T.vpJ.bwd (ids, dy) -> (dtable), each
// scattering its rows of c · dy.
//
// The pieces of one weight take rows [b_j, b_j+1) of `vocab_pieces` on the
// application; mt-partition makes a unit of each, which holds those rows of
// the [V, D] weight the template computes with however it is stored (a
// [D, V] one, or a transposed tie, gives columns). A tied head and
// embedding split alike, so the embedding's pieces own the rows the head's
// pieces read.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "passes/ModelInfo.h"
#include "passes/Vjp.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/Support/FormatVariadic.h"

namespace mt {
#define GEN_PASS_DEF_SPLITVOCAB
#include "passes/Passes.h.inc"
} // namespace mt

using namespace mlir;
using namespace mt;

namespace {

// Piece boundaries are multiples of this many rows (GEMM-friendly).
constexpr int64_t kRowAlign = 64;

// Device bytes a unit's param costs in two bf16 weight slots and two f32
// gradient slots.
constexpr int64_t kSlotBytesPerParam = 2 * 2 + 2 * 4;

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// How one application's template reads its [V, D] weight, when it can be
/// split: the param positions of the weight (and the head's bias).
struct Splittable {
  Application *app = nullptr;
  int64_t vocab = 0;
  int weight = -1, bias = -1;    // template param positions
  LinearOp linear;               // the head's LM head
  SmallVector<Operation *> post; // the head's elementwise ops after it
  EmbedOp embed;                 // the embedding's lookup
  double embedScale = 1.0;       // the scalings after it, multiplied
};

RankedTensorType withLeading(Type t, int64_t rows) {
  auto r = cast<RankedTensorType>(t);
  SmallVector<int64_t> shape(r.getShape());
  shape.front() = rows;
  return RankedTensorType::get(shape, r.getElementType());
}

RankedTensorType withLast(Type t, int64_t n) {
  auto r = cast<RankedTensorType>(t);
  SmallVector<int64_t> shape(r.getShape());
  shape.back() = n;
  return RankedTensorType::get(shape, r.getElementType());
}

struct SplitVocabPass : public mt::impl::SplitVocabBase<SplitVocabPass> {
  using SplitVocabBase::SplitVocabBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (pieces < 0) {
      module.emitError("--vocab-pieces must be positive (0: by the "
                       "budget), not ")
          << static_cast<int64_t>(pieces);
      return signalPassFailure();
    }
    if (pieces == 1 || (pieces == 0 && gpuMemLimit <= 0))
      return;
    auto apps = applicationsOf(module);
    if (failed(apps))
      return signalPassFailure();
    for (Application &a : *apps)
      if (a.op.getVocabPieces())
        return; // already split
    int64_t layer = 0;
    for (Application &a : *apps)
      if (a.tmpl.getKind() == "layer")
        layer = std::max(layer, paramElems(a));

    SmallVector<Splittable> splits;
    std::string cannot;
    for (Application &a : *apps) {
      StringRef kind = a.tmpl.getKind();
      if (kind != "head" && kind != "embedding")
        continue;
      std::string why;
      std::optional<Splittable> s = analyze(a, why);
      // By default only what the budget cannot hold otherwise splits:
      // pieces cost the recomputed logits of all but the last piece and
      // per-micro-batch state (docs/benchmarks.md), so they pay only when
      // the slots of the whole would not fit.
      bool wanted =
          pieces >= 2 || (layer > 0 && paramElems(a) > layer &&
                          kSlotBytesPerParam * paramElems(a) > gpuMemLimit);
      if (!wanted)
        continue;
      if (!s) {
        a.op.emitWarning("the ")
            << kind << " (" << paramElems(a) << " params) "
            << (pieces >= 2 ? ""
                            : "needs more than the budget in its slots but ")
            << "stays whole: " << why;
        cannot = kind.str() + ": " + why;
        continue;
      }
      splits.push_back(*s);
    }
    if (splits.empty()) {
      if (pieces >= 2 && !cannot.empty()) {
        module.emitError("--vocab-pieces: neither the LM head nor the "
                         "embedding can run in vocabulary pieces (")
            << cannot << ")";
        return signalPassFailure();
      }
      return;
    }
    // One set of bounds for all: a tied head reads the rows the
    // embedding's pieces own.
    int64_t vocab = splits.front().vocab, count = pieces;
    if (count == 0)
      for (Splittable &s : splits)
        count = std::max(count, ceilDiv(paramElems(*s.app), layer));
    int64_t rows = ceilDiv(vocab, count);
    if (rows >= 4 * kRowAlign)
      rows = ceilDiv(rows, kRowAlign) * kRowAlign;
    SmallVector<int64_t> bounds{0};
    while (bounds.back() < vocab)
      bounds.push_back(std::min(vocab, bounds.back() + rows));
    if (bounds.size() < 3)
      return; // one piece: nothing to split
    for (Splittable &s : splits) {
      if (s.vocab != vocab) {
        s.app->op.emitError("the head and the embedding have different "
                            "vocabularies (")
            << s.vocab << " vs " << vocab << ")";
        return signalPassFailure();
      }
      LogicalResult made = s.app->tmpl.getKind() == "head"
                               ? makeHeadPieces(module, s, bounds)
                               : makeEmbeddingPieces(s, bounds);
      if (failed(made))
        return signalPassFailure();
      s.app->op.setVocabPiecesAttr(
          DenseI64ArrayAttr::get(module.getContext(), bounds));
      SmallVector<int64_t> cut{s.weight};
      if (s.bias >= 0)
        cut.push_back(s.bias);
      s.app->op.setVocabParamsAttr(
          DenseI64ArrayAttr::get(module.getContext(), cut));
    }
  }

  static int64_t paramElems(Application &a) {
    int64_t n = 0;
    for (ParamOp p : a.params)
      n += elementsOf(p.getType());
    return n;
  }

  // Whether a's weight can be cut by rows, and where it sits.
  std::optional<Splittable> analyze(Application &a, std::string &why) {
    Splittable s;
    s.app = &a;
    Block &body = a.tmpl.getBlock();
    auto yield = cast<YieldOp>(body.getTerminator());
    auto paramPos = [&](Value v) -> int {
      auto arg = dyn_cast<BlockArgument>(v);
      if (!arg || arg.getArgNumber() < a.tmpl.getNumInputs())
        return -1;
      return arg.getArgNumber() - a.tmpl.getNumInputs();
    };
    if (a.tmpl.getKind() == "head") {
      // Elementwise ops act on each piece's logits alone.
      Value logits = yield.getResults()[0];
      while (Operation *op = logits.getDefiningOp()) {
        if (!isa<ScaleOp, SoftcapOp>(op) || !op->getOperand(0).hasOneUse())
          break;
        s.post.insert(s.post.begin(), op);
        logits = op->getOperand(0);
      }
      s.linear = logits.getDefiningOp<LinearOp>();
      if (!s.linear) {
        why = "its logits do not come from a linear layer (and element-wise "
              "scalings or soft caps after it)";
        return std::nullopt;
      }
      s.weight = paramPos(s.linear.getW());
      s.bias = s.linear.getBias() ? paramPos(s.linear.getBias()) : -1;
      if (s.weight < 0 || (s.linear.getBias() && s.bias < 0) ||
          !s.linear.getW().hasOneUse() ||
          (s.linear.getBias() && !s.linear.getBias().hasOneUse())) {
        why = "its weight is not a param read by the LM head alone";
        return std::nullopt;
      }
    } else {
      Value y = yield.getResults()[0];
      while (auto scale = y.getDefiningOp<ScaleOp>()) {
        if (!scale.getX().hasOneUse())
          break;
        s.embedScale *= scale.getFactor().convertToDouble();
        y = scale.getX();
      }
      s.embed = y.getDefiningOp<EmbedOp>();
      if (!s.embed || &body.front() != s.embed.getOperation() ||
          s.embed.getIds() != body.getArgument(0)) {
        why = "it does more than look up rows of one table (and scale "
              "them)";
        return std::nullopt;
      }
      s.weight = paramPos(s.embed.getTable());
      if (s.weight < 0) {
        why = "its table is not a param";
        return std::nullopt;
      }
    }
    if (a.params[s.weight].getFrozen()) {
      why = "its weight is frozen";
      return std::nullopt;
    }
    Value rows = s.linear ? s.linear.getY() : s.embed.getTable();
    s.vocab = s.linear
                  ? cast<RankedTensorType>(rows.getType()).getShape().back()
                  : cast<RankedTensorType>(rows.getType()).getShape().front();
    return s;
  }

  // A new template `name` for a piece of `of`, with a body block. One that
  // yields param gradients names the template it differentiates in gradOf.
  TemplateOp createTemplate(OpBuilder &b, TemplateOp of, StringRef name,
                            ArrayRef<Type> inputs, ArrayRef<Type> params,
                            ArrayRef<Type> results, StringRef gradOf,
                            ArrayRef<int64_t> trained) {
    SmallVector<Type> all(inputs);
    all.append(params.begin(), params.end());
    bool backward = !gradOf.empty();
    b.setInsertionPointAfter(last_ ? last_ : of.getOperation());
    auto t = b.create<TemplateOp>(
        of.getLoc(), name, of.getKind(), b.getFunctionType(all, results),
        inputs.size(),
        backward ? FlatSymbolRefAttr::get(b.getContext(), gradOf)
                 : FlatSymbolRefAttr(),
        backward ? b.getDenseI64ArrayAttr(trained) : DenseI64ArrayAttr(),
        IntegerAttr(), DenseI64ArrayAttr(), FlatSymbolRefAttr::get(of));
    SmallVector<Location> locs(all.size(), of.getLoc());
    b.createBlock(&t.getBody(), {}, all, locs);
    last_ = t;
    return t;
  }

  Operation *last_ = nullptr; // the template made last, to keep them in order

  LogicalResult makeHeadPieces(ModuleOp module, Splittable &s,
                               ArrayRef<int64_t> bounds) {
    TemplateOp fwd = s.app->tmpl;
    OpBuilder b(fwd->getContext());
    b.setInsertionPointAfter(fwd);
    Location loc = fwd.getLoc();
    Type targets;
    module.walk([&](CrossEntropyOp ce) {
      if (ce->getParentOfType<ModelOp>())
        targets = ce.getTargets().getType();
    });
    if (!targets)
      return fwd.emitOpError("is a head, but the model has no loss");
    auto scalar = RankedTensorType::get({}, b.getF32Type());
    Type xType = fwd.getFunctionType().getInput(0);
    Type hType = s.linear.getX().getType();
    Type statsType = withLast(hType, 3);
    SmallVector<Type> allParams(fwd.getFunctionType().getInputs().drop_front());
    SmallVector<bool> trained;
    for (ParamOp p : s.app->params)
      trained.push_back(!p.getFrozen());
    int64_t K = bounds.size() - 1;
    std::string base = fwd.getSymName().str();

    for (int64_t j = 0; j < K; ++j) {
      int64_t v0 = bounds[j], rows = bounds[j + 1] - bounds[j];
      bool first = j == 0, last = j == K - 1;
      // The piece's params: the first holds them all, the others only the
      // sliced weight (and bias).
      SmallVector<int> held;
      for (int i = 0; i < static_cast<int>(allParams.size()); ++i)
        if (first || i == s.weight || i == s.bias)
          held.push_back(i);
      // A piece computes with its rows of the [V, D] weight however the
      // whole is stored (mt-partition gathers them).
      auto hTensor = cast<RankedTensorType>(hType);
      SmallVector<Type> params;
      for (int i : held)
        params.push_back(i == s.weight ? Type(RankedTensorType::get(
                                             {rows, hTensor.getShape().back()},
                                             hTensor.getElementType()))
                         : i == s.bias ? Type(withLeading(allParams[i], rows))
                                       : allParams[i]);
      Type logitsType = withLast(s.linear.getY().getType(), rows);
      auto trainedOf = [&](ArrayRef<Type> ps, SmallVector<int64_t> &idx) {
        SmallVector<Type> out;
        for (auto [k, i] : llvm::enumerate(held))
          if (trained[i]) {
            idx.push_back(k);
            out.push_back(ps[k]);
          }
        return out;
      };
      std::string name = llvm::formatv("{0}.vp{1}", base, j).str();

      // One direction of the piece. `withX`: recompute h = pre(x).
      auto build = [&](bool backward) -> LogicalResult {
        SmallVector<Type> ins;
        ins.push_back(first ? xType : hType);
        ins.push_back(targets);
        if (!first || backward)
          ins.push_back(statsType);
        bool dhIn = backward && !last;
        if (dhIn)
          ins.push_back(hType);
        bool grads = backward || last;
        if (grads)
          ins.push_back(scalar);
        SmallVector<int64_t> trainedIdx;
        SmallVector<Type> results;
        if (!grads) {
          if (first)
            results.push_back(hType);
          results.push_back(statsType);
        } else {
          if (last)
            results.append({scalar, hType, statsType});
          else
            results.push_back(first ? xType : hType);
          SmallVector<Type> g = trainedOf(params, trainedIdx);
          results.append(g.begin(), g.end());
        }
        // The last piece differentiates the head itself (as T.bwd does).
        std::string tname = name + (backward && !last ? ".bwd" : "");
        TemplateOp t = createTemplate(b, fwd, tname, ins, params, results,
                                      !grads ? StringRef()
                                      : last ? StringRef(base)
                                             : StringRef(name),
                                      trainedIdx);
        Block *body = &t.getBody().front();
        b.setInsertionPointToStart(body);
        int64_t nIn = ins.size();
        Value tgt = body->getArgument(1);
        Value stats = (!first || backward) ? body->getArgument(2) : Value();
        Value dloss = grads ? body->getArgument(nIn - 1) : Value();
        // Clone pre (the first piece) and the LM head on the piece's rows.
        IRMapping map;
        auto paramArg = [&](int i) -> Value {
          auto it = llvm::find(held, i);
          return it == held.end()
                     ? Value()
                     : body->getArgument(nIn + (it - held.begin()));
        };
        SmallVector<Operation *> pre;
        Value h;
        if (first) {
          map.map(fwd.getBlock().getArgument(0), body->getArgument(0));
          for (int i : held)
            map.map(fwd.getParamArg(i), paramArg(i));
          for (Operation &op : fwd.getBlock()) {
            if (&op == s.linear.getOperation())
              break;
            pre.push_back(b.clone(op, map));
          }
          h = map.lookupOrDefault(s.linear.getX());
        } else {
          h = body->getArgument(0);
        }
        Value bias = s.bias >= 0 ? paramArg(s.bias) : Value();
        auto linear = b.create<LinearOp>(loc, logitsType, h, paramArg(s.weight),
                                         bias, b.getStringAttr("out_in"));
        SmallVector<Operation *> post;
        map.map(s.linear.getY(), linear.getY());
        for (Operation *op : s.post) {
          Operation *clone = b.clone(*op, map);
          clone->getResult(0).setType(logitsType);
          post.push_back(clone);
        }
        Value logits =
            post.empty() ? Value(linear.getY()) : post.back()->getResult(0);
        auto vAttr = [&](int64_t v) { return b.getI64IntegerAttr(v); };
        SmallVector<Value> outs;
        Value merged;
        if (!backward) {
          merged = b.create<CrossEntropyStatsOp>(
              loc, statsType, logits, tgt, stats, vAttr(v0), vAttr(s.vocab));
          if (!last) {
            if (first)
              outs.push_back(h);
            outs.push_back(merged);
            b.create<YieldOp>(loc, outs);
            return success();
          }
          stats = merged;
          outs.push_back(b.create<CrossEntropyStatsLossOp>(loc, scalar, stats));
        }
        Value dlogits = b.create<CrossEntropyPieceGradOp>(
            loc, logitsType, logits, tgt, stats, dloss, vAttr(v0));
        GradientBuilder g(b);
        g.addGradient(logits, dlogits);
        if (dhIn)
          g.addGradient(h, body->getArgument(3));
        for (Operation *op : llvm::reverse(post))
          if (failed(g.backprop(op)))
            return failure();
        if (failed(g.backprop(linear)))
          return failure();
        for (Operation *op : llvm::reverse(pre))
          if (failed(g.backprop(op)))
            return failure();
        Value in = body->getArgument(0);
        Value din = g.gradientOf(in);
        if (!din)
          return fwd.emitOpError("output does not depend on its input");
        outs.push_back(din);
        if (last)
          outs.push_back(merged);
        for (auto [k, i] : llvm::enumerate(held)) {
          if (!trained[i])
            continue;
          Value dp = g.gradientOf(body->getArgument(nIn + k));
          if (!dp)
            return fwd.emitOpError("output does not depend on param #") << i;
          outs.push_back(dp);
        }
        b.create<YieldOp>(loc, outs);
        eraseUnread(*body);
        return success();
      };
      if (failed(build(/*backward=*/false)))
        return failure();
      if (!last && failed(build(/*backward=*/true)))
        return failure();
    }
    return success();
  }

  LogicalResult makeEmbeddingPieces(Splittable &s, ArrayRef<int64_t> bounds) {
    TemplateOp fwd = s.app->tmpl;
    OpBuilder b(fwd->getContext());
    b.setInsertionPointAfter(fwd);
    Location loc = fwd.getLoc();
    Type ids = fwd.getFunctionType().getInput(0);
    Type yType = s.embed.getY().getType();
    Type table = fwd.getFunctionType().getInput(1 + s.weight);
    std::string base = fwd.getSymName().str();
    for (int64_t j = 0; j + 1 < static_cast<int64_t>(bounds.size()); ++j) {
      int64_t v0 = bounds[j], rows = bounds[j + 1] - bounds[j];
      Type piece = withLeading(table, rows);
      std::string name = llvm::formatv("{0}.vp{1}", base, j).str();
      SmallVector<Type> ins{ids};
      if (j > 0)
        ins.push_back(yType);
      TemplateOp t =
          createTemplate(b, fwd, name, ins, {piece}, {yType}, StringRef(), {});
      Block *body = &t.getBody().front();
      b.setInsertionPointToStart(body);
      FloatAttr scale =
          s.embedScale != 1.0 ? b.getF64FloatAttr(s.embedScale) : FloatAttr();
      Value y = b.create<EmbedPieceOp>(
          loc, yType, body->getArgument(0), body->getArgument(ins.size()),
          j > 0 ? body->getArgument(1) : Value(), b.getI64IntegerAttr(v0),
          b.getI64IntegerAttr(s.vocab), scale);
      b.create<YieldOp>(loc, y);

      TemplateOp bt = createTemplate(b, fwd, name + ".bwd", {ids, yType},
                                     {piece}, {piece}, name, {0});
      body = &bt.getBody().front();
      b.setInsertionPointToStart(body);
      Value dt = b.create<EmbedPieceGradOp>(loc, piece, body->getArgument(1),
                                            body->getArgument(0),
                                            b.getI64IntegerAttr(v0), scale);
      b.create<YieldOp>(loc, dt);
    }
    return success();
  }
};

} // namespace
