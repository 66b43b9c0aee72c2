//===- ControlFlow.cpp - ONNX loops and sequences, evaluated at import ----===//
#include "frontend/ControlFlow.h"

#include "frontend/OpHandler.h"

#include <algorithm>
#include <limits>
#include <memory>

namespace mt::onnx_import {
namespace {

using Sequence = std::vector<ConstPtr>;

// A loop without a trip count ends when its condition does; past this many
// iterations it is taken for one that never does.
constexpr int64_t kMaxIterations = int64_t(1) << 20;

ConstPtr tensorIn(OpContext &ctx, size_t i) {
  Value &v = ctx.in(i);
  if (!v.constant)
    ctx.error("input '{}' is not known at compile time (loops and sequences "
              "are evaluated at import, over constants only)",
              v.name);
  return v.constant;
}

const Sequence &sequenceIn(OpContext &ctx, size_t i) {
  Value &v = ctx.in(i);
  if (!v.sequence)
    ctx.error("input '{}' is not a sequence known at compile time", v.name);
  return *v.sequence;
}

int64_t scalarIn(OpContext &ctx, size_t i, const char *what) {
  ConstPtr c = tensorIn(ctx, i);
  if (c->numel != 1)
    ctx.error("{} must be a scalar, got shape {}", what, shapeStr(c->shape));
  return toInt(c->at(0));
}

void setSequence(Node &n, size_t k, DType dtype, Sequence items) {
  Value *v = n.out(k);
  v->dtype = dtype;
  v->shape = {};
  v->sequence = std::make_shared<const Sequence>(std::move(items));
}

void setTensor(Node &n, size_t k, ConstPtr c) {
  Value *v = n.out(k);
  v->dtype = c->dtype;
  v->shape = c->shape;
  v->constant = std::move(c);
}

// A position into a sequence of n items: [-n, n - 1], or [-n, n] where one
// may insert at the end.
int64_t position(OpContext &ctx, int64_t p, int64_t n, bool atEnd) {
  int64_t hi = atEnd ? n : n - 1;
  if (p < -n || p > hi)
    ctx.error("position {} is out of range for a sequence of {} tensors", p,
              n);
  return p < 0 ? p + n : p;
}

// Elements [begin, begin + size) of `a` along `axis`; the axis is dropped
// when !keepDim (size 1).
ConstPtr slice(ConstPtr a, int64_t axis, int64_t begin, int64_t size,
               bool keepDim) {
  Shape out = a->shape;
  out[axis] = size;
  Shape view = out;
  if (!keepDim)
    out.erase(out.begin() + axis);
  return lazyConst(a->dtype, out, [a, axis, begin, view](int64_t i) {
    std::vector<int64_t> c;
    unravel(i, view, c);
    c[axis] += begin;
    return a->at(ravel(c, a->shape));
  });
}

// The parts joined along `axis`, or stacked along a new one.
ConstPtr join(OpContext &ctx, const Sequence &parts, int64_t axis,
              bool newAxis) {
  if (parts.empty())
    ctx.error("cannot concatenate an empty sequence");
  const Shape &first = parts[0]->shape;
  const int64_t rank = int64_t(first.size()) + (newAxis ? 1 : 0);
  axis = ctx.axis(axis, rank);
  std::vector<int64_t> offsets = {0}; // of each part along the axis
  for (const ConstPtr &p : parts) {
    bool same = p->shape.size() == first.size() && p->dtype == parts[0]->dtype;
    for (size_t k = 0; same && k < first.size(); ++k)
      same = p->shape[k] == first[k] || (!newAxis && int64_t(k) == axis);
    if (!same)
      ctx.error("sequence tensors {} {} and {} {} do not {}",
                dtypeName(parts[0]->dtype), shapeStr(first),
                dtypeName(p->dtype), shapeStr(p->shape),
                newAxis ? "stack" : "concatenate");
    offsets.push_back(offsets.back() + (newAxis ? 1 : p->shape[axis]));
  }
  Shape out = first;
  if (newAxis)
    out.insert(out.begin() + axis, 1);
  out[axis] = offsets.back();
  return lazyConst(parts[0]->dtype, out,
                   [parts, offsets, axis, newAxis, out](int64_t i) {
                     std::vector<int64_t> c;
                     unravel(i, out, c);
                     size_t k = size_t(std::upper_bound(offsets.begin(),
                                                        offsets.end(), c[axis]) -
                                       offsets.begin()) - 1;
                     c[axis] -= offsets[k];
                     if (newAxis)
                       c.erase(c.begin() + axis);
                     return parts[k]->at(ravel(c, parts[k]->shape));
                   });
}

// SplitToSequence's pieces along `axis` of a dim of `dim`: their sizes, and
// whether they keep the axis.
struct Pieces {
  std::vector<int64_t> sizes;
  bool keepDim = true;
};

Pieces piecesOf(OpContext &ctx, int64_t axis, int64_t dim) {
  Pieces p;
  if (ctx.hasInput(1)) {
    ConstPtr split = tensorIn(ctx, 1);
    if (split->shape.empty()) { // chunks of one size, the last may be smaller
      int64_t each = toInt(split->at(0));
      if (each <= 0)
        ctx.error("split size {} is not positive", each);
      for (int64_t left = dim; left > 0; left -= each)
        p.sizes.push_back(std::min(each, left));
    } else {
      p.sizes = toInts(*split);
    }
  } else {
    p.sizes.assign(size_t(dim), 1);
    p.keepDim = ctx.node.getInt("keepdims", 1) != 0;
  }
  int64_t total = 0;
  for (int64_t s : p.sizes) {
    if (s < 0)
      ctx.error("split size {} is negative", s);
    total += s;
  }
  if (total != dim)
    ctx.error("split sizes {} do not cover dim {} ({})", shapeStr(p.sizes),
              axis, dim);
  return p;
}

void splitToSequence(OpContext &ctx) {
  ConstPtr a = tensorIn(ctx, 0);
  const int64_t axis = ctx.axis(ctx.node.getInt("axis", 0), a->shape.size());
  Pieces p = piecesOf(ctx, axis, a->shape[axis]);
  Sequence parts;
  for (int64_t k = 0, begin = 0; k < int64_t(p.sizes.size());
       begin += p.sizes[k++])
    parts.push_back(slice(a, axis, begin, p.sizes[k], p.keepDim));
  setSequence(ctx.node, 0, a->dtype, std::move(parts));
}

// Drops a node's inputs from position `keep` on.
void keepInputs(Graph &g, Node &n, size_t keep) {
  for (size_t i = keep; i < n.inputs.size(); ++i)
    g.setInput(&n, i, nullptr);
  n.inputs.resize(std::min(keep, n.inputs.size()));
}

// An int64 constant for a rewritten node's operand.
Value *intsValue(Graph &g, const std::string &name,
                 const std::vector<int64_t> &v) {
  Value *c = g.newValue(name, DType::I64, {int64_t(v.size())});
  c->constant = denseConst(DType::I64, {int64_t(v.size())},
                           std::vector<double>(v.begin(), v.end()));
  return c;
}

void loop(OpContext &ctx, const SubgraphRunner &run) {
  Node &n = ctx.node;
  auto body = n.attrs.find("body");
  if (body == n.attrs.end() || !body->second.graph)
    ctx.error("has no body graph");
  const onnx::GraphProto &graph = *body->second.graph;
  int64_t trips = std::numeric_limits<int64_t>::max();
  if (ctx.hasInput(0))
    trips = scalarIn(ctx, 0, "the trip count");
  bool cond = !ctx.hasInput(1) || scalarIn(ctx, 1, "the condition") != 0;
  std::vector<Value *> carried(n.inputs.begin() + std::min<size_t>(2, n.inputs.size()),
                               n.inputs.end());
  for (Value *v : carried)
    if (!v || (!v->constant && !v->sequence))
      ctx.error("loop-carried input '{}' is not known at compile time (loops "
                "are evaluated at import, over constants only)",
                v ? v->name : std::string("?"));
  const size_t numCarried = carried.size();
  if (n.outputs.size() < numCarried)
    ctx.error("has {} outputs for {} loop-carried values", n.outputs.size(),
              numCarried);
  const size_t numScans = n.outputs.size() - numCarried;

  Graph scratch; // the body's values, every iteration
  std::vector<Sequence> scans(numScans);
  int64_t i = 0;
  for (; i < trips && cond; ++i) {
    if (i == kMaxIterations)
      ctx.error("ran {} iterations without its condition turning false",
                kMaxIterations);
    Value *iteration = scratch.newValue("iteration_num", DType::I64, {});
    iteration->constant = scalarConst(DType::I64, double(i));
    Value *condIn = scratch.newValue("cond", DType::Bool, {});
    condIn->constant = scalarConst(DType::Bool, 1.0);
    std::vector<Value *> ins = {iteration, condIn};
    ins.insert(ins.end(), carried.begin(), carried.end());
    std::vector<Value *> outs = run(scratch, graph, ins);
    if (outs.size() != 1 + numCarried + numScans)
      ctx.error("its body has {} outputs; the loop needs {} (the condition, "
                "{} loop-carried, {} scanned)",
                outs.size(), 1 + numCarried + numScans, numCarried, numScans);
    if (!outs[0]->constant || outs[0]->constant->numel != 1)
      ctx.error("its body's condition '{}' is not a scalar known at compile "
                "time",
                outs[0]->name);
    cond = outs[0]->constant->at(0) != 0;
    std::copy(outs.begin() + 1, outs.begin() + 1 + numCarried, carried.begin());
    for (Value *v : carried)
      if (!v->constant && !v->sequence)
        ctx.error("its body's loop-carried output '{}' is not known at "
                  "compile time (it reads an activation)",
                  v->name);
    for (size_t k = 0; k < numScans; ++k) {
      Value *s = outs[1 + numCarried + k];
      if (!s->constant)
        ctx.error("its body's scan output '{}' is not known at compile time",
                  s->name);
      scans[k].push_back(s->constant);
    }
  }
  // The body's nodes read outer values too; they must not stay their users.
  for (auto &node : scratch.nodes())
    for (Value *v : node->inputs)
      if (v)
        v->users.erase(std::remove(v->users.begin(), v->users.end(), node.get()),
                       v->users.end());
  for (size_t k = 0; k < numCarried; ++k) {
    Value *out = n.out(k);
    out->dtype = carried[k]->dtype;
    out->shape = carried[k]->shape;
    out->constant = carried[k]->constant;
    out->sequence = carried[k]->sequence;
  }
  for (size_t k = 0; k < numScans; ++k) {
    if (scans[k].empty())
      ctx.error("runs no iteration, so its scan output #{} has no shape", k);
    setTensor(n, numCarried + k, join(ctx, scans[k], 0, /*newAxis=*/true));
  }
}

} // namespace

bool isControlFlow(const Node &n) {
  static const char *const kOps[] = {
      "Loop",           "SequenceEmpty",     "SequenceConstruct",
      "SequenceInsert", "SequenceAt",        "SequenceLength",
      "SequenceErase",  "SplitToSequence",   "ConcatFromSequence"};
  if (!n.domain.empty())
    return false;
  return std::any_of(std::begin(kOps), std::end(kOps),
                     [&](const char *op) { return n.op == op; });
}

bool lowerActivationSequence(Graph &g, Node &n,
                             const std::function<void(Node &)> &infer) {
  if (!isControlFlow(n) || !n.in(0))
    return false;
  OpContext ctx(n);
  Value *in = n.in(0);
  if (n.op == "SplitToSequence" && !in->constant) {
    const int64_t axis = ctx.axis(n.getInt("axis", 0), in->rank());
    Pieces p = piecesOf(ctx, axis, in->dim(axis));
    Value *seq = n.out();
    n.op = "Split";
    keepInputs(g, n, 1);
    n.attrs.clear();
    n.setInt("axis", axis);
    n.setInts("split", p.sizes);
    n.outputs.clear();
    seq->producer = nullptr;
    seq->dtype = in->dtype;
    for (size_t k = 0; k < p.sizes.size(); ++k)
      g.addOutput(&n, in->dtype, {})->name = fmt::format("{}.{}", seq->name, k);
    infer(n);
    // unbind: each piece without the split axis.
    Node *after = &n;
    for (Value *piece : n.outputs) {
      Value *part = piece;
      if (!p.keepDim) {
        after =
            g.newNode("Squeeze", n.name + ".squeeze",
                      {piece, intsValue(g, n.name + ".axis", {axis})}, after);
        after->opset = n.opset;
        part = g.addOutput(after, in->dtype, {});
        part->name = piece->name + ".squeezed";
        infer(*after);
      }
      seq->pieces.push_back(part);
    }
    return true;
  }
  if (in->pieces.empty())
    return false;
  if (n.op != "SequenceAt")
    ctx.error("reads the sequence '{}' of activations, which only SequenceAt "
              "may (sequences of other values are evaluated at import)",
              in->name);
  int64_t at = position(ctx, scalarIn(ctx, 1, "the position"),
                        int64_t(in->pieces.size()), false);
  n.op = "Identity";
  keepInputs(g, n, 1);
  g.setInput(&n, 0, in->pieces[size_t(at)]);
  infer(n);
  return true;
}

void foldControlFlow(Node &n, const SubgraphRunner &run) {
  OpContext ctx(n);
  const std::string &op = n.op;
  if (op == "Loop") {
    loop(ctx, run);
  } else if (op == "SequenceEmpty") {
    DType t = dtypeFromOnnx(int(n.getInt("dtype", 1)));
    if (t == DType::Undefined)
      ctx.error("unsupported element type {}", n.getInt("dtype", 1));
    setSequence(n, 0, t, {});
  } else if (op == "SequenceConstruct") {
    Sequence items;
    for (size_t i = 0; i < ctx.numInputs(); ++i)
      items.push_back(tensorIn(ctx, i));
    if (items.empty())
      ctx.error("needs at least one tensor");
    const DType t = items[0]->dtype;
    setSequence(n, 0, t, std::move(items));
  } else if (op == "SequenceInsert") {
    Sequence items = sequenceIn(ctx, 0);
    ConstPtr t = tensorIn(ctx, 1);
    int64_t at = ctx.hasInput(2) ? scalarIn(ctx, 2, "the position")
                                 : int64_t(items.size());
    at = position(ctx, at, int64_t(items.size()), /*atEnd=*/true);
    items.insert(items.begin() + at, t);
    setSequence(n, 0, t->dtype, std::move(items));
  } else if (op == "SequenceAt") {
    const Sequence &items = sequenceIn(ctx, 0);
    int64_t at = position(ctx, scalarIn(ctx, 1, "the position"),
                          int64_t(items.size()), false);
    setTensor(n, 0, items[size_t(at)]);
  } else if (op == "SequenceLength") {
    setTensor(n, 0,
              scalarConst(DType::I64, double(sequenceIn(ctx, 0).size())));
  } else if (op == "SequenceErase") {
    Sequence items = sequenceIn(ctx, 0);
    int64_t at = ctx.hasInput(1) ? scalarIn(ctx, 1, "the position") : -1;
    at = position(ctx, at, int64_t(items.size()), false);
    items.erase(items.begin() + at);
    setSequence(n, 0, ctx.in(0).dtype, std::move(items));
  } else if (op == "SplitToSequence") {
    splitToSequence(ctx);
  } else if (op == "ConcatFromSequence") {
    if (!n.has("axis"))
      ctx.error("attribute 'axis' is required");
    setTensor(n, 0,
              join(ctx, sequenceIn(ctx, 0), n.getInt("axis", 0),
                   n.getInt("new_axis", 0) != 0));
  } else {
    ctx.error("unsupported op");
  }
}

} // namespace mt::onnx_import
