//===- RowChunk.cpp - which stretches of a template work row by row -------===//
#include "passes/RowChunk.h"

#include "passes/TemplateMemory.h"

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

/// Proves ops row-wise one at a time, from the stretch's first op on.
class StretchAnalysis {
public:
  StretchAnalysis(TemplateOp tmpl, int64_t begin) : tmpl_(tmpl) {
    int64_t n = 0;
    for (Operation &op : tmpl.getBlock()) {
      position_[&op] = n++;
      ops_.push_back(&op);
    }
    c_.rows = launchRows(tmpl);
    c_.begin = c_.end = begin;
    for (BlockArgument arg : tmpl.getBlock().getArguments())
      if (arg.getArgNumber() >= tmpl.getNumInputs())
        weights_.insert(arg);
    placeParamGradients(tmpl, gradients_);
    // The scratch leaves of each yielded param gradient's sum.
    auto yield = cast<YieldOp>(tmpl.getBlock().getTerminator());
    if (std::optional<ArrayRef<int64_t>> trained = tmpl.getTrainedParams()) {
      int64_t lead = yield.getNumOperands() - trained->size();
      for (auto [i, param] : llvm::enumerate(*trained)) {
        SmallVector<Value> work{yield.getOperand(lead + i)};
        while (!work.empty()) {
          Value v = work.pop_back_val();
          auto it = gradients_.find(v);
          if (it == gradients_.end())
            gradientLeaves_[v] = param;
          else if (it->second.kind == Placement::SumNode)
            work.append(v.getDefiningOp()->getOperands().begin(),
                        v.getDefiningOp()->getOperands().end());
        }
      }
    }
  }

  int64_t size() const { return static_cast<int64_t>(ops_.size()); }
  int64_t end() const { return c_.end; }
  Operation *op(int64_t i) const { return ops_[i]; }
  int64_t positionOf(Operation *op) const { return position_.lookup(op); }

  /// Extends the stretch by its next op if that op is row-wise.
  bool admit() {
    Operation &op = *ops_[c_.end];
    if (!admit(op))
      return false;
    ++c_.end;
    return true;
  }

  /// The first op of the stretch that leaves a value to a later op in a
  /// form chunks cannot build (one that is not a row, a weight, or part of
  /// a param gradient, which adds up chunk by chunk), or nullptr.
  Operation *firstLeak() const {
    for (int64_t i = c_.begin; i < c_.end; ++i)
      for (Value r : ops_[i]->getResults())
        if (leaves(r) && !c_.isRow(r) && !weights_.contains(r) &&
            !gradients_.count(r) && !loopSum(r))
          return ops_[i];
    return nullptr;
  }

  /// The stretch so far, its local values and loop sums found.
  RowChunking result() const {
    RowChunking c = c_;
    // A yield after the stretch adds scratch contributions once; the loop
    // must add those it makes, chunk by chunk.
    bool yieldAfter = c.end < size();
    for (int64_t i = c.begin; i < c.end; ++i)
      for (Value r : ops_[i]->getResults()) {
        if (c.isRow(r) && !leaves(r))
          c.local.insert(r);
        if (yieldAfter && loopSum(r))
          c.loopSums[r] = gradientLeaves_.lookup(r);
      }
    return c;
  }

private:
  bool isRow(Value v) const { return c_.isRow(v); }
  bool rowShaped(Value v) const {
    RankedTensorType t = tensorOf(v);
    return t && isa<FloatType>(t.getElementType()) && leadingRows(v) == c_.rows;
  }
  bool definedBefore(Value v) const {
    Operation *def = v.getDefiningOp();
    return !def || position_.lookup(def) < c_.begin;
  }
  // A row operand: made by a row op of the stretch, or held whole before it.
  bool rowOperand(Value v) {
    if (c_.isRow(v))
      return true;
    if (!v || !definedBefore(v) || weights_.contains(v) || !rowShaped(v))
      return false;
    c_.rowValues.insert(v);
    return true;
  }
  // A sum over the chunk's rows that the yield would add to a param's
  // gradient in scratch.
  bool loopSum(Value v) const {
    return gradientLeaves_.count(v) && reduced_.contains(v);
  }
  // Whether an op after the stretch reads v.
  bool leaves(Value v) const {
    return llvm::any_of(v.getUsers(), [&](Operation *user) {
      return !c_.contains(position_.lookup(user));
    });
  }
  // A yielded param gradient: what yield accumulates (the scratch leaves of
  // its sum) must be sums over this chunk's rows, made in the stretch.
  bool chunkwiseGradient(Value v) const {
    auto it = gradients_.find(v);
    if (it != gradients_.end() && it->second.kind == Placement::ParamGrad)
      return true;
    if (it != gradients_.end() && it->second.kind == Placement::SumNode) {
      Operation *add = v.getDefiningOp();
      return chunkwiseGradient(add->getOperand(0)) &&
             chunkwiseGradient(add->getOperand(1));
    }
    return reduced_.contains(v);
  }

  bool admit(Operation &op) {
    if (auto yield = dyn_cast<YieldOp>(op)) {
      std::optional<ArrayRef<int64_t>> trained = tmpl_.getTrainedParams();
      int64_t acts = yield.getNumOperands() - (trained ? trained->size() : 0);
      for (auto [i, v] : llvm::enumerate(yield.getOperands())) {
        bool paramGrad = static_cast<int64_t>(i) >= acts;
        bool ok;
        if (paramGrad)
          ok = chunkwiseGradient(v);
        else if (tensorOf(v).getRank() == 0) // the loss, summed in its op
          ok = reduced_.contains(v) || definedBefore(v);
        else // activations leave per row
          ok = rowOperand(v);
        if (!ok)
          return false;
      }
      return true;
    }
    auto isReduced = [&](Value v) { return reduced_.contains(v); };
    if (llvm::any_of(op.getOperands(), isReduced)) {
      // Sums over rows may only add up to more of the same.
      if (!isa<AddOp>(op) || !llvm::all_of(op.getOperands(), isReduced))
        return false;
      reduced_.insert(op.getResult(0));
      return true;
    }
    // Ops whose every row operand is classified as one by rowOperand below.
    auto anyRowOperand = [&]() {
      for (Value v : op.getOperands())
        if (rowOperand(v))
          return true;
      return false;
    };
    if (!anyRowOperand()) {
      // Arithmetic on weights alone: the same in every chunk.
      if (!llvm::all_of(op.getOperands(),
                        [&](Value v) { return weights_.contains(v); }))
        return false;
      for (Value r : op.getResults())
        weights_.insert(r);
      return true;
    }
    // A row result: one slice per row, as its row operands.
    auto row = [&](Value r) {
      if (!r || !rowShaped(r))
        return false;
      c_.rowValues.insert(r);
      return true;
    };
    auto sum = [&](Value r) {
      if (r)
        reduced_.insert(r);
      return true;
    };
    auto weight = [&](Value v) { return !v || weights_.contains(v); };
    return llvm::TypeSwitch<Operation *, bool>(&op)
        .Case([&](LinearOp o) {
          return isRow(o.getX()) && weight(o.getW()) && weight(o.getBias()) &&
                 row(o.getY());
        })
        .Case([&](RmsNormOp o) {
          return isRow(o.getX()) && weight(o.getWeight()) && row(o.getY());
        })
        .Case([&](LayerNormOp o) {
          return isRow(o.getX()) && weight(o.getWeight()) &&
                 weight(o.getBias()) && row(o.getY());
        })
        .Case<ScaleOp, ReluOp, SiluOp, SigmoidOp, ExpOp, GeluOp, SoftcapOp>(
            [&](auto o) { return isRow(o.getX()) && row(o.getY()); })
        .Case([&](SwigluOp o) {
          return isRow(o.getGate()) && isRow(o.getUp()) && row(o.getY());
        })
        .Case([&](MoeOp o) {
          // Tokens route and run through their experts independently.
          return isRow(o.getX()) && weight(o.getRouter()) &&
                 weight(o.getGateUp()) && weight(o.getDown()) &&
                 weight(o.getBias()) && weight(o.getRouterBias()) &&
                 weight(o.getGateUpBias()) && weight(o.getDownBias()) &&
                 (!o.getRouterX() || isRow(o.getRouterX())) &&
                 weight(o.getExpertScale()) && row(o.getY());
        })
        .Case([&](XieluOp o) {
          return isRow(o.getX()) && weight(o.getAlphaP()) &&
                 weight(o.getAlphaN()) && row(o.getY());
        })
        .Case<AddOp, MulOp>([&](auto o) {
          // A row operand as wide as the result; the other broadcasts over
          // rows (a bias, a scale).
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
        .Case<ReluGradOp, SiluGradOp, SigmoidGradOp, GeluGradOp, SoftcapGradOp>(
            [&](auto o) {
              return isRow(o.getDy()) && isRow(o.getX()) && row(o.getDx());
            })
        .Case([&](SwigluGradOp o) {
          return isRow(o.getDy()) && isRow(o.getGate()) && isRow(o.getUp()) &&
                 row(o.getDgate()) && row(o.getDup());
        })
        .Case([&](MoeGradOp o) {
          return isRow(o.getDy()) && isRow(o.getX()) && weight(o.getRouter()) &&
                 weight(o.getGateUp()) && weight(o.getDown()) &&
                 weight(o.getBias()) && weight(o.getRouterBias()) &&
                 weight(o.getGateUpBias()) && weight(o.getDownBias()) &&
                 row(o.getDx()) && sum(o.getDrouter()) && sum(o.getDgateUp()) &&
                 sum(o.getDdown()) && sum(o.getDrouterBias()) &&
                 sum(o.getDgateUpBias()) && sum(o.getDdownBias()) &&
                 (!o.getRouterX() ||
                  (isRow(o.getRouterX()) && row(o.getDrouterX()))) &&
                 weight(o.getExpertScale()) && sum(o.getDexpertScale());
        })
        .Case([&](XieluGradOp o) {
          return isRow(o.getDy()) && isRow(o.getX()) && weight(o.getAlphaP()) &&
                 weight(o.getAlphaN()) && row(o.getDx()) &&
                 sum(o.getDalphaP()) && sum(o.getDalphaN());
        })
        .Case([&](LinearGradOp o) {
          return isRow(o.getDy()) && isRow(o.getX()) && weight(o.getW()) &&
                 row(o.getDx()) && sum(o.getDw()) && sum(o.getDb());
        })
        .Case<RmsNormGradOp, LayerNormGradOp>([&](auto o) {
          if (!isRow(o.getDy()) || !isRow(o.getX()) || !weight(o.getWeight()) ||
              !row(o.getGrads()[0]))
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
  }

  TemplateOp tmpl_;
  RowChunking c_;
  llvm::DenseMap<Operation *, int64_t> position_;
  SmallVector<Operation *> ops_;
  llvm::DenseSet<Value> weights_; // params and what is made of them alone
  llvm::DenseSet<Value> reduced_; // sums over rows: param gradients, loss
  llvm::DenseMap<Value, Placement> gradients_;
  // Yielded param gradient contributions made in scratch -> param #.
  llvm::DenseMap<Value, int64_t> gradientLeaves_;
};

// The stretch [begin, end) proven row-wise with nothing leaking out of it,
// or failure with *culprit set to the op that breaks it.
FailureOr<RowChunking> analyzeStretch(TemplateOp tmpl, int64_t begin,
                                      int64_t end, Operation **culprit) {
  StretchAnalysis a(tmpl, begin);
  *culprit = tmpl;
  if (begin < 0 || end > a.size() || begin >= end)
    return failure();
  for (int64_t i = begin; i < end; ++i)
    if (!a.admit()) {
      *culprit = a.op(i);
      return failure();
    }
  if (Operation *leak = a.firstLeak()) {
    *culprit = leak;
    return failure();
  }
  return a.result();
}

} // namespace

int64_t RowChunking::callElements(Value v) const {
  RankedTensorType t = tensorOf(v);
  if (chunk > 0 && isRow(v))
    return chunk * t.getShape().back();
  return t.getNumElements();
}

int64_t RowChunking::scratchElements(Value v) const {
  return isLocal(v) ? callElements(v) : tensorOf(v).getNumElements();
}

int64_t RowChunking::widestRow() const {
  int64_t widest = 0;
  for (Value v : local)
    widest = std::max(widest, tensorOf(v).getShape().back());
  return widest;
}

int64_t largestDivisorAtMost(int64_t n, int64_t bound) {
  for (int64_t d = std::min(n, std::max<int64_t>(bound, 1)); d > 1; --d)
    if (n % d == 0)
      return d;
  return 1;
}

int64_t launchRows(TemplateOp tmpl) {
  if (tmpl.getNumInputs() == 0)
    return 0;
  return leadingRows(tmpl.getBlock().getArgument(0));
}

SmallVector<RowChunking> rowStretches(TemplateOp tmpl) {
  SmallVector<RowChunking> stretches;
  if (launchRows(tmpl) <= 1)
    return stretches;
  int64_t n = StretchAnalysis(tmpl, 0).size();
  for (int64_t begin = 0; begin < n;) {
    // The longest row-wise run from begin, cut back until nothing leaks.
    StretchAnalysis run(tmpl, begin);
    while (run.end() < n && run.admit()) {
    }
    int64_t end = run.end();
    std::optional<RowChunking> found;
    while (end > begin && !found) {
      StretchAnalysis cut(tmpl, begin);
      while (cut.end() < end)
        cut.admit();
      if (Operation *leak = cut.firstLeak())
        end = cut.positionOf(leak);
      else
        found = cut.result();
    }
    if (found && !found->local.empty())
      stretches.push_back(std::move(*found));
    begin = std::max(end, begin + 1);
  }
  llvm::stable_sort(stretches, [](const RowChunking &a, const RowChunking &b) {
    return a.end - a.begin > b.end - b.begin;
  });
  return stretches;
}

FailureOr<RowChunking> analyzeWholeRows(TemplateOp tmpl, Operation **culprit) {
  int64_t n = static_cast<int64_t>(tmpl.getBlock().getOperations().size());
  if (launchRows(tmpl) <= 0) {
    *culprit = tmpl;
    return failure();
  }
  return analyzeStretch(tmpl, 0, n, culprit);
}

std::optional<RowChunking> rowChunkingOf(TemplateOp tmpl) {
  std::optional<int64_t> chunk = tmpl.getRowChunk();
  if (!chunk)
    return std::nullopt;
  int64_t begin = 0;
  int64_t end = static_cast<int64_t>(tmpl.getBlock().getOperations().size());
  if (std::optional<ArrayRef<int64_t>> ops = tmpl.getRowOps()) {
    begin = (*ops)[0];
    end = (*ops)[1];
  }
  Operation *culprit = nullptr;
  FailureOr<RowChunking> c = analyzeStretch(tmpl, begin, end, &culprit);
  if (failed(c) || *chunk >= c->rows || c->rows % *chunk != 0)
    return std::nullopt;
  c->chunk = *chunk;
  return std::move(*c);
}

} // namespace mt
