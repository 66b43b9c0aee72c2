//===- LossChunk.cpp - which values of a head hold one slice per token ----===//
#include "passes/LossChunk.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace mt {

namespace {

RankedTensorType tensorOf(Value v) {
  return dyn_cast<RankedTensorType>(v.getType());
}

// The product of all dims but the last: how many F-element slices v holds.
int64_t leadingRows(Value v) {
  RankedTensorType t = tensorOf(v);
  if (!t || t.getRank() == 0)
    return -1;
  int64_t n = 1;
  for (int64_t d : t.getShape().drop_back())
    n *= d;
  return n;
}

int64_t rowsOfLoss(TemplateOp tmpl) {
  for (Operation &op : tmpl.getBlock())
    if (auto ce = dyn_cast<CrossEntropyOp>(op))
      return tensorOf(ce.getTargets()).getNumElements();
  return 0;
}

} // namespace

int64_t LossChunking::elements(Value v) const {
  RankedTensorType t = tensorOf(v);
  if (chunk > 0 && isRow(v))
    return chunk * t.getShape().back();
  return t.getNumElements();
}

FailureOr<LossChunking> analyzeLossRows(TemplateOp tmpl, Operation **culprit) {
  *culprit = tmpl;
  LossChunking c;
  c.rows = rowsOfLoss(tmpl);
  if (tmpl.getKind() != "head" || !tmpl.getGradOf() || c.rows == 0)
    return failure();
  llvm::DenseSet<Value> reduced; // sums over rows: param gradients, the loss
  auto isRow = [&](Value v) { return c.isRow(v); };
  auto rowShaped = [&](Value v) {
    RankedTensorType t = tensorOf(v);
    return t && isa<FloatType>(t.getElementType()) && leadingRows(v) == c.rows;
  };
  // A row result: one slice per row, as its row operands.
  auto row = [&](Value r) {
    if (!r || !rowShaped(r))
      return false;
    c.rowValues.insert(r);
    return true;
  };
  auto sum = [&](Value r) {
    if (r)
      reduced.insert(r);
    return true;
  };
  // Weights, biases and constants: the same for every row.
  auto perRowConstant = [&](Value v) { return !v || !isRow(v); };

  Block &body = tmpl.getBlock();
  for (BlockArgument arg : body.getArguments().take_front(tmpl.getNumInputs()))
    if (rowShaped(arg))
      c.rowValues.insert(arg);

  for (Operation &op : body) {
    if (auto yield = dyn_cast<YieldOp>(op)) {
      std::optional<ArrayRef<int64_t>> trained = tmpl.getTrainedParams();
      int64_t acts = yield.getNumOperands() - (trained ? trained->size() : 0);
      for (auto [i, v] : llvm::enumerate(yield.getOperands())) {
        bool paramGrad = static_cast<int64_t>(i) >= acts;
        bool loss = !paramGrad && tensorOf(v).getRank() == 0;
        // Activations leave per row; the loss and param gradients are the
        // sums the kernels accumulate chunk by chunk.
        bool ok = isRow(v) ? !paramGrad : reduced.contains(v) && (paramGrad || loss);
        if (!ok) {
          *culprit = yield;
          return failure();
        }
      }
      continue;
    }
    bool anyRow = llvm::any_of(op.getOperands(), isRow);
    bool anyReduced = llvm::any_of(op.getOperands(),
                                   [&](Value v) { return reduced.contains(v); });
    if (anyReduced) {
      // Sums over rows may only add up to more of the same.
      if (isa<AddOp>(op) && llvm::all_of(op.getOperands(), [&](Value v) {
            return reduced.contains(v);
          })) {
        reduced.insert(op.getResult(0));
        continue;
      }
      *culprit = &op;
      return failure();
    }
    if (!anyRow)
      continue; // arithmetic on weights alone, the same in every chunk
    bool ok =
        llvm::TypeSwitch<Operation *, bool>(&op)
            .Case([&](LinearOp o) {
              return isRow(o.getX()) && perRowConstant(o.getW()) &&
                     perRowConstant(o.getBias()) && row(o.getY());
            })
            .Case([&](RmsNormOp o) {
              return isRow(o.getX()) && perRowConstant(o.getWeight()) &&
                     row(o.getY());
            })
            .Case([&](LayerNormOp o) {
              return isRow(o.getX()) && perRowConstant(o.getWeight()) &&
                     perRowConstant(o.getBias()) && row(o.getY());
            })
            .Case<ScaleOp, SiluOp, GeluOp>(
                [&](auto o) { return isRow(o.getX()) && row(o.getY()); })
            .Case([&](SwigluOp o) {
              return isRow(o.getGate()) && isRow(o.getUp()) && row(o.getY());
            })
            .Case<AddOp, MulOp>([&](auto o) {
              // A row operand as wide as the result; the other broadcasts
              // over rows (a bias, a scale).
              for (Value v : {o.getLhs(), o.getRhs()})
                if (isRow(v) ? v.getType() != o.getY().getType()
                             : leadingRows(v) != 1)
                  return false;
              return row(o.getY());
            })
            .Case([&](ReshapeOp o) {
              return isRow(o.getX()) &&
                     tensorOf(o.getX()).getShape().back() ==
                         tensorOf(o.getY()).getShape().back() &&
                     row(o.getY());
            })
            .Case([&](CrossEntropyOp o) {
              return isRow(o.getLogits()) && sum(o.getLoss());
            })
            .Case([&](CrossEntropyGradOp o) {
              return isRow(o.getLogits()) && row(o.getDlogits());
            })
            .Case<SiluGradOp, GeluGradOp>([&](auto o) {
              return isRow(o.getDy()) && isRow(o.getX()) && row(o.getDx());
            })
            .Case([&](SwigluGradOp o) {
              return isRow(o.getDy()) && isRow(o.getGate()) &&
                     isRow(o.getUp()) && row(o.getDgate()) && row(o.getDup());
            })
            .Case([&](LinearGradOp o) {
              return isRow(o.getDy()) && isRow(o.getX()) &&
                     perRowConstant(o.getW()) && row(o.getDx()) &&
                     sum(o.getDw()) && sum(o.getDb());
            })
            .Case<RmsNormGradOp, LayerNormGradOp>([&](auto o) {
              if (!isRow(o.getDy()) || !isRow(o.getX()) ||
                  !perRowConstant(o.getWeight()) || !row(o.getGrads()[0]))
                return false;
              for (Value g : o.getGrads().drop_front())
                sum(g);
              return true;
            })
            .Case([&](MulGradOp o) {
              if (!isRow(o.getDy()))
                return false;
              for (auto [x, dx] : {std::pair(o.getLhs(), o.getDlhs()),
                                   std::pair(o.getRhs(), o.getDrhs())}) {
                if (isRow(x) ? !row(dx) : leadingRows(x) != 1)
                  return false;
                if (!isRow(x))
                  sum(dx);
              }
              return true;
            })
            .Case([&](SumToOp o) {
              if (!isRow(o.getDy()))
                return false;
              if (o.getY().getType() == o.getDy().getType())
                return row(o.getY());
              return leadingRows(o.getY()) == 1 && sum(o.getY());
            })
            .Default([](Operation *) { return false; });
    if (!ok) {
      *culprit = &op;
      return failure();
    }
  }
  return c;
}

std::optional<LossChunking> lossChunkingOf(TemplateOp tmpl) {
  std::optional<int64_t> chunk = tmpl.getLossChunk();
  if (!chunk)
    return std::nullopt;
  Operation *culprit = nullptr;
  FailureOr<LossChunking> c = analyzeLossRows(tmpl, &culprit);
  if (failed(c) || *chunk >= c->rows || c->rows % *chunk != 0)
    return std::nullopt;
  c->chunk = *chunk;
  return std::move(*c);
}

} // namespace mt
