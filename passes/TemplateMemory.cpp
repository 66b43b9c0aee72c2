//===- TemplateMemory.cpp - where a template's values live ----------------===//
//
// Scratch is assigned by liveness: values in definition order, each placed
// at the lowest offset free over its lifetime (first fit), so a layer's
// backward needs roughly its widest cut of live activations, not their sum.
//
//===----------------------------------------------------------------------===//
#include "passes/TemplateMemory.h"

#include <functional>
#include <map>

using namespace mlir;

namespace mt {

bool writesParamGradient(Operation *op, unsigned i) {
  if (isa<LinearGradOp>(op))
    return i >= 1;
  if (auto m = dyn_cast<MoeGradOp>(op)) // all but dx and drouter_x
    return i >= 1 && (!m.getDrouterX() || m.getDrouterX() != op->getResult(i));
  if (isa<RmsNormGradOp, LayerNormGradOp, XieluGradOp, CausalConvGradOp>(op))
    return i >= 1;
  if (isa<AttentionGradOp>(op))
    return i == 3; // dsinks
  return isa<EmbedGradOp, PositionEmbedGradOp, EmbedPieceGradOp>(op);
}

bool kernelWritesOrAdds(Value v) {
  auto r = dyn_cast<OpResult>(v);
  if (!r)
    return false;
  Operation *op = r.getOwner();
  if (isa<LinearOp>(op))
    return true;
  return isa<LinearGradOp, RmsNormGradOp, LayerNormGradOp, RopeGradOp,
             CrossEntropyGradOp, CrossEntropyPieceGradOp>(op) &&
         r.getResultNumber() == 0; // dx, dlogits
}

int64_t storageWidth(Value v) {
  if (auto a = v.getDefiningOp<AttentionOp>(); a && v == a.getLse())
    return 2;
  return v.getDefiningOp<AttentionDeltaOp>() ? 2 : 1;
}

namespace {

// Scratch offsets keep 64-element (128 B in bf16) alignment.
constexpr int64_t kAlign = 64;

int64_t alignUp(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

} // namespace

void placeParamGradients(TemplateOp tmpl,
                         llvm::DenseMap<Value, Placement> &values) {
  auto yield = cast<YieldOp>(tmpl.getBlock().getTerminator());
  std::optional<ArrayRef<int64_t>> trained = tmpl.getTrainedParams();
  if (!trained)
    return;
  // The last results are the param gradients, one per trained param: walk
  // each back through its sum tree.
  int64_t lead = yield.getNumOperands() - trained->size();
  for (int64_t r = lead; r < yield.getNumOperands(); ++r) {
    int64_t param = (*trained)[r - lead];
    SmallVector<Value> work{yield.getOperand(r)};
    while (!work.empty()) {
      Value v = work.pop_back_val();
      if (auto add = v.getDefiningOp<AddOp>(); add && v.hasOneUse()) {
        values[v] = {Placement::SumNode, param};
        work.push_back(add.getLhs());
        work.push_back(add.getRhs());
        continue;
      }
      auto res = dyn_cast<OpResult>(v);
      if (res && v.hasOneUse() &&
          writesParamGradient(res.getOwner(), res.getResultNumber()))
        values[v] = {Placement::ParamGrad, param};
      // Anything else is computed in scratch, then accumulated.
    }
  }
}

TemplatePlan planTemplate(TemplateOp tmpl) {
  TemplatePlan plan;
  plan.chunking = rowChunkingOf(tmpl);
  Block &body = tmpl.getBlock();
  int64_t numInputs = tmpl.getNumInputs();
  for (BlockArgument arg : body.getArguments()) {
    int64_t i = arg.getArgNumber();
    if (i >= numInputs)
      plan.values[arg] = {Placement::Param, i - numInputs};
    else if (cast<RankedTensorType>(arg.getType()).getRank() == 0)
      plan.values[arg] = {Placement::Scalar, i};
    else
      plan.values[arg] = {Placement::Input, i};
  }
  placeParamGradients(tmpl, plan.values);
  auto yield = cast<YieldOp>(body.getTerminator());

  // Vocabulary-piece results go straight to their output buffers.
  for (auto [i, v] : llvm::enumerate(yield.getOperands()))
    if (v.getDefiningOp<CrossEntropyStatsOp>() || v.getDefiningOp<EmbedPieceOp>())
      plan.values[v] = {Placement::Output, static_cast<int64_t>(i)};

  llvm::DenseMap<Operation *, int64_t> position;
  int64_t n = 0;
  for (Operation &op : body)
    position[&op] = n++;
  auto madeAt = [&](Value v) { // a block argument: before every op
    Operation *def = v.getDefiningOp();
    return def ? position[def] : -1;
  };

  // A layer's yielded sum is built in place in its output buffer (a layer
  // launch's outputs are never its inputs: mt-schedule alternates them),
  // so the value it adds to is written there from the start and takes no
  // scratch: the residual's gradient in a backward, held across the
  // attention's backward, or the residual in a forward.
  if (tmpl.getKind() == "layer") {
    std::optional<ArrayRef<int64_t>> trained = tmpl.getTrainedParams();
    int64_t acts = yield.getNumOperands() - (trained ? trained->size() : 0);
    for (int64_t i = 0; i < acts; ++i) {
      Value v = yield.getOperand(i);
      auto add = v.getDefiningOp<AddOp>();
      if (!add || !v.hasOneUse() || plan.values.count(v))
        continue;
      // The operand made first: the other, made later, can then be added
      // into it by its kernel (below).
      SmallVector<Value, 2> operands{add.getLhs(), add.getRhs()};
      if (madeAt(operands[1]) < madeAt(operands[0]))
        std::swap(operands[0], operands[1]);
      for (Value a : operands) {
        bool readLater = llvm::any_of(a.getUsers(), [&](Operation *user) {
          return user != add && position[user] > position[add];
        });
        if (a.getType() != v.getType() || isa<BlockArgument>(a) ||
            plan.values.count(a) || readLater ||
            llvm::is_contained(yield.getOperands(), a))
          continue;
        plan.values[a] = plan.values[v] = {Placement::Output, i};
        break;
      }
    }
  }

  // Values placed in another's memory (below) are not where a chunked
  // stretch touches them: there a row value's place depends on its shape.
  const std::optional<RowChunking> &chunks = plan.chunking;
  auto touchedByChunks = [&](Value v) {
    if (!chunks)
      return false;
    Operation *def = v.getDefiningOp();
    return (def && chunks->contains(position[def])) ||
           llvm::any_of(v.getUsers(), [&](Operation *user) {
             return chunks->contains(position[user]);
           });
  };
  llvm::DenseMap<Value, Value> memoryOf; // a view or summand -> its memory

  // A sum is built in one buffer, the root's, by its terms' kernels: a tree
  // of single-use mt.add ops whose terms, but for the first made, are
  // results of kernels that add into their result when asked
  // (kernelWritesOrAdds; the gradient of a value several projections read,
  // or a residual's gradient). The first term writes the buffer, the others
  // add into it, and the adds run nothing. That first term may be any
  // single-use result, or the value a layer's yielded sum adds to (in the
  // output buffer already) if no one reads it once the next term is made.
  auto unplaced = [&](Value v) {
    return isa<OpResult>(v) && v.hasOneUse() && !plan.values.count(v) &&
           !touchedByChunks(v) && storageWidth(v) == 1;
  };
  auto addsItself = [&](Value v) {
    return kernelWritesOrAdds(v) && unplaced(v);
  };
  auto outputOf = [&](Value v) {
    auto it = plan.values.find(v);
    return it != plan.values.end() && it->second.kind == Placement::Output
               ? it->second.index
               : -1;
  };
  // Adds that can be part of such a tree: each operand a possible term or
  // a single-use add that can be.
  llvm::DenseSet<Operation *> summable;
  for (Operation &op : body) {
    auto add = dyn_cast<AddOp>(op);
    if (!add || touchedByChunks(add.getY()) ||
        (plan.values.count(add.getY()) && outputOf(add.getY()) < 0))
      continue;
    if (llvm::all_of(add->getOperands(), [&](Value v) {
          auto inner = v.getDefiningOp<AddOp>();
          return v.getType() == add.getY().getType() &&
                 (unplaced(v) || outputOf(v) >= 0 ||
                  (inner && summable.count(inner) && v.hasOneUse()));
        }))
      summable.insert(add);
  }
  llvm::DenseMap<Value, int64_t> firstSummand; // a root -> its first term's op
  for (Operation &op : llvm::reverse(body)) {  // a root before its inner adds
    auto add = dyn_cast<AddOp>(op);
    if (!add || !summable.count(add) || memoryOf.count(add.getY()))
      continue;
    Value root = add.getY();
    SmallVector<Value> work(add->getOperands()), terms, inners{root};
    while (!work.empty()) {
      Value v = work.pop_back_val();
      auto inner = v.getDefiningOp<AddOp>();
      if (inner && summable.count(inner) && v.hasOneUse() &&
          !plan.values.count(v)) {
        inners.push_back(v);
        work.append(inner->operand_begin(), inner->operand_end());
      } else {
        terms.push_back(v);
      }
    }
    llvm::stable_sort(terms,
                      [&](Value a, Value b) { return madeAt(a) < madeAt(b); });
    Value first = terms.front();
    int64_t next = madeAt(terms[1]);
    auto inTree = [&](Operation *user) {
      return llvm::any_of(inners,
                          [&](Value v) { return v.getDefiningOp() == user; });
    };
    bool firstWrites =
        (unplaced(first) && !first.getDefiningOp<ReshapeOp>()) ||
        (outputOf(first) >= 0 && outputOf(first) == outputOf(root) &&
         llvm::all_of(first.getUsers(), [&](Operation *user) {
           return inTree(user) || position[user] < next;
         }));
    if (!firstWrites || next == madeAt(first) ||
        !llvm::all_of(llvm::drop_begin(terms), addsItself))
      continue;
    for (Value v : inners)
      plan.summedInPlace.insert(v);
    for (Value v : llvm::concat<Value>(terms, llvm::drop_begin(inners)))
      memoryOf[v] = root;
    if (!plan.values.count(root))
      firstSummand[root] = madeAt(first);
    plan.addsInto.insert(terms.begin() + 1, terms.end());
  }

  // A reshape moves no bytes: where its operand lives in an input, a param
  // or scratch, its result is the same memory (a view), and that memory
  // then lives until the last read of either.
  for (Operation &op : body) {
    auto reshape = dyn_cast<ReshapeOp>(op);
    if (!reshape || plan.values.count(reshape.getY()))
      continue;
    Value x = reshape.getX();
    if (plan.views.count(x))
      x = memoryOf[x];
    auto placed = plan.values.find(x);
    bool addressable = placed == plan.values.end()
                           ? cast<RankedTensorType>(x.getType()).getRank() > 0
                           : placed->second.kind == Placement::Input ||
                                 placed->second.kind == Placement::Param;
    if (!addressable || storageWidth(x) != 1 ||
        touchedByChunks(reshape.getX()) || touchedByChunks(reshape.getY()))
      continue;
    memoryOf[reshape.getY()] = x;
    plan.views.insert(reshape.getY());
  }
  // The last op that reads v, or any view of v.
  std::function<int64_t(Value)> lastRead = [&](Value v) {
    int64_t end = -1;
    for (Operation *user : v.getUsers()) {
      end = std::max(end, position[user]);
      if (auto r = dyn_cast<ReshapeOp>(user); r && plan.views.count(r.getY()))
        end = std::max(end, lastRead(r.getY()));
    }
    return end;
  };

  // Scratch for every other result, by liveness.
  struct Interval {
    Value v;
    int64_t start, end, size;
  };
  std::vector<Interval> intervals;
  for (Operation &op : body)
    for (Value r : op.getResults()) {
      if (plan.values.count(r) || memoryOf.count(r))
        continue;
      auto type = cast<RankedTensorType>(r.getType());
      if (type.getRank() == 0) {
        plan.values[r] = {Placement::Loss};
        continue;
      }
      int64_t end = std::max(position[&op], lastRead(r));
      auto summed = firstSummand.find(r);
      Interval iv{r,
                  summed == firstSummand.end() ? position[&op] : summed->second,
                  end, type.getNumElements() * storageWidth(r)};
      if (chunks) {
        iv.size = chunks->scratchElements(r) * storageWidth(r);
        // A value the chunked stretch touches but does not hold locally is
        // read or written by every chunk: it lives across the whole loop.
        bool touched = chunks->contains(iv.start) ||
                       llvm::any_of(r.getUsers(), [&](Operation *user) {
                         return chunks->contains(position[user]);
                       });
        if (touched && !chunks->isLocal(r)) {
          iv.start = std::min(iv.start, chunks->begin);
          iv.end = std::max(iv.end, chunks->end - 1);
        }
      }
      iv.size = alignUp(iv.size);
      intervals.push_back(iv);
    }
  // First fit in order of first use.
  llvm::stable_sort(intervals, [](const Interval &a, const Interval &b) {
    return a.start < b.start;
  });
  // Active allocations by offset; first fit over the gaps.
  std::multimap<int64_t, const Interval *> active; // end -> interval
  std::map<int64_t, int64_t> used;                 // offset -> size
  for (const Interval &iv : intervals) {
    for (auto it = active.begin(); it != active.end() && it->first < iv.start;) {
      used.erase(plan.values[it->second->v].offset);
      it = active.erase(it);
    }
    int64_t at = 0;
    for (auto [off, size] : used) {
      if (off - at >= iv.size)
        break;
      at = std::max(at, off + size);
    }
    plan.values[iv.v] = {Placement::Workspace, -1, at};
    used[at] = iv.size;
    active.emplace(iv.end, &iv);
    plan.workspaceElems = std::max(plan.workspaceElems, at + iv.size);
  }
  for (auto [v, memory] : memoryOf) {
    // A copy first: inserting v may grow the map under a reference.
    const Placement where = plan.values.find(memory)->second;
    plan.values[v] = where;
  }
  return plan;
}

int64_t launchScratchElems(ModuleOp module) {
  llvm::DenseSet<StringRef> launched;
  module.walk([&](LaunchOp l) { launched.insert(l.getCallee()); });
  int64_t elems = 0;
  for (TemplateOp t : module.getOps<TemplateOp>())
    if (launched.contains(t.getSymName()))
      elems = std::max(elems, planTemplate(t).workspaceElems);
  return elems;
}

} // namespace mt
