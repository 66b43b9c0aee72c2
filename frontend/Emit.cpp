//===- Emit.cpp - blocks to mt IR -----------------------------------------===//
#include "frontend/Emit.h"

#include "frontend/Error.h"
#include "ir/MtOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"

#include <map>

namespace mt::onnx_import {
namespace {

using namespace mlir;

class Emitter {
public:
  Emitter(MLIRContext &ctx, const std::map<Value *, Tie> &ties)
      : ctx_(ctx), b_(&ctx), ties_(ties) {}

  OwningOpRef<ModuleOp> run(const std::vector<Block> &blocks,
                            const std::string &source) {
    OwningOpRef<ModuleOp> module = ModuleOp::create(loc(source));
    b_.setInsertionPointToEnd(module->getBody());
    for (const Block &blk : blocks)
      for (Value *p : blk.params)
        declareParam(p);
    std::map<std::string, std::string> templates; // signature -> symbol
    std::map<std::string, int> kindCount;
    for (const Block &blk : blocks) {
      if (templates.count(blk.signature))
        continue;
      int k = kindCount[blk.kind]++;
      std::string sym = k ? fmt::format("{}_{}", blk.kind, k) : blk.kind;
      templates[blk.signature] = sym;
      emitTemplate(blk, sym);
    }
    if (blocks.size() > 1)
      emitModel(blocks, templates);
    if (failed(verify(*module)))
      fail("internal: the imported IR does not verify (see the diagnostic "
           "above)");
    return module;
  }

private:
  Location loc(const std::string &name) {
    return NameLoc::get(StringAttr::get(&ctx_, name));
  }

  Type typeOf(Value *v) {
    Type elem = isFloat(v->dtype) || v->dtype == DType::Undefined
                    ? Type(b_.getF32Type())
                    : Type(b_.getI32Type());
    return RankedTensorType::get(v->shape, elem);
  }

  void declareParam(Value *p) {
    if (!declared_.insert(p).second)
      return;
    auto param = b_.create<ParamOp>(loc(p->name), b_.getStringAttr(p->name),
                                    TypeAttr::get(typeOf(p)), FlatSymbolRefAttr(),
                                    UnitAttr(), UnitAttr(), StringAttr());
    if (!p->initializer || p->buffer)
      param.setFrozen(true);
    else if (p->dtype != DType::F32)
      param.setStorage(dtypeName(p->dtype));
    if (auto it = ties_.find(p); it != ties_.end()) {
      declareParam(it->second.primary);
      param.setTieAttr(FlatSymbolRefAttr::get(&ctx_, it->second.primary->name));
      param.setTransposed(it->second.transposed);
    }
  }

  Attribute attr(const Attr &a) {
    switch (a.kind) {
    case Attr::Int: return b_.getI64IntegerAttr(a.i);
    case Attr::Float: return b_.getF64FloatAttr(a.f);
    case Attr::String: return b_.getStringAttr(a.s);
    case Attr::Ints: return b_.getDenseI64ArrayAttr(a.ints);
    case Attr::Floats: return b_.getDenseF64ArrayAttr(a.floats);
    case Attr::Unit:
      return b_.getUnitAttr();
    default: fail("internal: unexpected attribute kind on a primitive");
    }
  }

  void emitTemplate(const Block &blk, const std::string &sym) {
    OpBuilder::InsertionGuard guard(b_);
    SmallVector<Type> inputs{typeOf(blk.input)};
    for (Value *p : blk.params)
      inputs.push_back(typeOf(p));
    auto type = b_.getFunctionType(inputs, {typeOf(blk.output)});
    // A graph that computes nothing (x + 0 folded away) has no first node.
    auto tmpl = b_.create<TemplateOp>(
        loc(blk.nodes.empty() ? sym : blk.nodes.front()->name), sym, blk.kind,
        type, /*numInputs=*/1, FlatSymbolRefAttr(), DenseI64ArrayAttr(),
        IntegerAttr(), DenseI64ArrayAttr(), FlatSymbolRefAttr());
    SmallVector<Location> locs(inputs.size(), b_.getUnknownLoc());
    mlir::Block *body = b_.createBlock(&tmpl.getBody(), {}, inputs, locs);
    std::map<Value *, mlir::Value> env;
    env[blk.input] = body->getArgument(0);
    for (auto [i, p] : llvm::enumerate(blk.params))
      env[p] = body->getArgument(1 + i);
    for (Node *n : blk.nodes) {
      OperationState st(loc(n->name), n->op);
      int32_t present = 0;
      for (Value *v : n->inputs) {
        if (!v)
          continue;
        st.addOperands(env.at(v));
        ++present;
      }
      // Ops with several optional operands: each input slot, present or
      // null, is one segment.
      if (n->op == "mt.layer_norm" || n->op == "mt.moe") {
        SmallVector<int32_t> segments;
        for (Value *v : n->inputs)
          segments.push_back(v ? 1 : 0);
        segments.resize(n->op == "mt.moe" ? 10 : 3, 0);
        st.addAttribute("operandSegmentSizes",
                        b_.getDenseI32ArrayAttr(segments));
      }
      for (auto &[k, a] : n->attrs)
        st.addAttribute(k, attr(a));
      for (Value *v : n->outputs)
        st.addTypes(typeOf(v));
      Operation *op = b_.create(st);
      for (auto [i, v] : llvm::enumerate(n->outputs))
        env[v] = op->getResult(i);
    }
    b_.create<YieldOp>(loc(sym), ValueRange{env.at(blk.output)});
  }

  void emitModel(const std::vector<Block> &blocks,
                 const std::map<std::string, std::string> &templates) {
    OpBuilder::InsertionGuard guard(b_);
    Value *ids = blocks.front().input;
    Type tokens = typeOf(ids);
    Type logits = typeOf(blocks.back().output);
    auto lossType = RankedTensorType::get({}, b_.getF32Type());
    auto model = b_.create<ModelOp>(
        loc("main"), "main", b_.getFunctionType({tokens, tokens}, {lossType}));
    mlir::Block *body = b_.createBlock(&model.getBody(), {}, {tokens, tokens},
                                 {b_.getUnknownLoc(), b_.getUnknownLoc()});
    mlir::Value h = body->getArgument(0);
    for (const Block &blk : blocks) {
      SmallVector<Attribute> params;
      for (Value *p : blk.params)
        params.push_back(FlatSymbolRefAttr::get(&ctx_, p->name));
      IntegerAttr layer =
          blk.layer >= 0 ? b_.getI64IntegerAttr(blk.layer) : IntegerAttr();
      auto apply = b_.create<ApplyOp>(
          loc(blk.kind), TypeRange{typeOf(blk.output)},
          templates.at(blk.signature), ValueRange{h}, layer,
          b_.getArrayAttr(params), DenseI64ArrayAttr(), DenseI64ArrayAttr());
      h = apply.getResult(0);
    }
    if (cast<RankedTensorType>(logits).getRank() != 3)
      fail("the logits must be [batch, seq, vocab]");
    mlir::Value loss = b_.create<CrossEntropyOp>(loc("loss"), lossType, h,
                                                 body->getArgument(1));
    b_.create<ReturnOp>(loc("main"), ValueRange{loss});
  }

  MLIRContext &ctx_;
  OpBuilder b_;
  const std::map<Value *, Tie> &ties_;
  std::set<Value *> declared_;
};

} // namespace

OwningOpRef<ModuleOp> emitModule(MLIRContext &ctx,
                                 const std::vector<Block> &blocks,
                                 const std::map<Value *, Tie> &ties,
                                 const std::string &source) {
  return Emitter(ctx, ties).run(blocks, source);
}

} // namespace mt::onnx_import
