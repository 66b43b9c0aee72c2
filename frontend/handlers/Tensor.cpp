//===- Tensor.cpp - handlers of shape and layout ops ----------------------===//
//
// Shape, Reshape, Transpose, Slice, Gather and the rest: the ops exports use
// to compute shapes (all folded once batch and sequence are bound) and to
// move activations between layouts. Opset differences (axes or split sizes
// as attributes or as inputs) are normalized into attributes here, so that
// fusion reads one form.
//
//===----------------------------------------------------------------------===//
#include "frontend/OpHandler.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace mt::onnx_import {
namespace {

// A fold that keeps the flat order (Reshape, Squeeze, Unsqueeze, Flatten).
std::vector<ConstPtr> foldSameOrder(OpContext &ctx) {
  ConstPtr a = ctx.in(0).constant;
  return {lazyConst(a->dtype, ctx.node.out()->shape,
                    [a](int64_t i) { return a->at(i); })};
}

void inferConstant(OpContext &ctx) {
  const Node &n = ctx.node;
  ConstPtr c;
  if (n.has("value")) {
    c = n.attrs.at("value").tensor;
    if (!c)
      ctx.error("the value tensor carries no data");
  } else if (n.has("value_float")) {
    c = scalarConst(DType::F32, n.getFloat("value_float", 0));
  } else if (n.has("value_int")) {
    c = scalarConst(DType::I64, double(n.getInt("value_int", 0)));
  } else if (n.has("value_floats")) {
    auto &f = n.attrs.at("value_floats").floats;
    c = denseConst(DType::F32, {int64_t(f.size())}, f);
  } else if (n.has("value_ints")) {
    auto ints = n.getInts("value_ints");
    c = denseConst(DType::I64, {int64_t(ints.size())},
                   std::vector<double>(ints.begin(), ints.end()));
  } else {
    ctx.error("has no supported value attribute (value, value_float(s), "
              "value_int(s))");
  }
  ctx.setOutput(0, c->dtype, c->shape);
  ctx.node.out()->constant = c;
}

void inferShape(OpContext &ctx) {
  const Shape &s = ctx.shape(0);
  int64_t rank = s.size();
  auto clampAxis = [&](int64_t a) {
    if (a < 0)
      a += rank;
    return std::clamp<int64_t>(a, 0, rank);
  };
  int64_t start = clampAxis(ctx.node.getInt("start", 0));
  int64_t end = clampAxis(ctx.node.getInt("end", rank));
  std::vector<double> dims;
  for (int64_t k = start; k < end; ++k)
    dims.push_back(double(s[k]));
  int64_t n = dims.size();
  ctx.setOutput(0, DType::I64, {n});
  ctx.node.out()->constant = denseConst(DType::I64, {n}, std::move(dims));
}

void inferSize(OpContext &ctx) {
  ctx.setOutput(0, DType::I64, {});
  ctx.node.out()->constant = scalarConst(DType::I64, double(ctx.in(0).numel()));
}

void inferReshape(OpContext &ctx) {
  const Shape &in = ctx.shape(0);
  std::vector<int64_t> target = ctx.intsIn(1, "the target shape");
  bool allowZero = ctx.node.getInt("allowzero", 0) != 0;
  Shape out;
  int64_t inferred = -1, known = 1;
  for (size_t k = 0; k < target.size(); ++k) {
    int64_t d = target[k];
    if (d == 0 && !allowZero) {
      if (k >= in.size())
        ctx.error("dim 0 at position {} copies a dim the input lacks", k);
      d = in[k];
    }
    if (d == -1) {
      if (inferred >= 0)
        ctx.error("target shape has more than one -1");
      inferred = k;
      out.push_back(1);
      continue;
    }
    if (d < 0)
      ctx.error("target shape has a negative dim {}", d);
    out.push_back(d);
    known *= d;
  }
  int64_t n = numelOf(in);
  if (inferred >= 0) {
    if (known == 0 || n % known)
      ctx.error("cannot reshape {} into {}", shapeStr(in), shapeStr(target));
    out[inferred] = n / known;
  } else if (known != n) {
    ctx.error("cannot reshape {} ({} elements) into {}", shapeStr(in), n,
              shapeStr(out));
  }
  ctx.setOutput(0, ctx.in(0).dtype, out);
}

// Unsqueeze/Squeeze axes: an input from opset 13, normalized to "axes".
std::vector<int64_t> axesOf(OpContext &ctx, size_t input) {
  if (ctx.hasInput(input))
    ctx.node.setInts("axes", ctx.intsIn(input, "axes"));
  return ctx.node.getInts("axes");
}

void inferUnsqueeze(OpContext &ctx) {
  const Shape &in = ctx.shape(0);
  std::vector<int64_t> axes = axesOf(ctx, 1);
  int64_t rank = in.size() + axes.size();
  std::vector<bool> inserted(rank, false);
  for (int64_t &a : axes) {
    a = ctx.axis(a, rank);
    if (inserted[a])
      ctx.error("axis {} is repeated", a);
    inserted[a] = true;
  }
  Shape out;
  size_t next = 0;
  for (int64_t k = 0; k < rank; ++k)
    out.push_back(inserted[k] ? 1 : in[next++]);
  ctx.node.setInts("axes", axes);
  ctx.setOutput(0, ctx.in(0).dtype, out);
}

void inferSqueeze(OpContext &ctx) {
  const Shape &in = ctx.shape(0);
  std::vector<int64_t> axes = axesOf(ctx, 1);
  int64_t rank = in.size();
  std::vector<bool> drop(rank, false);
  if (axes.empty()) {
    for (int64_t k = 0; k < rank; ++k)
      drop[k] = in[k] == 1;
  }
  for (int64_t a : axes) {
    a = ctx.axis(a, rank);
    if (in[a] != 1)
      ctx.error("cannot squeeze axis {} of size {}", a, in[a]);
    drop[a] = true;
  }
  Shape out;
  for (int64_t k = 0; k < rank; ++k)
    if (!drop[k])
      out.push_back(in[k]);
  ctx.setOutput(0, ctx.in(0).dtype, out);
}

void inferFlatten(OpContext &ctx) {
  const Shape &in = ctx.shape(0);
  int64_t axis = ctx.node.getInt("axis", 1);
  if (axis < 0)
    axis += in.size();
  if (axis < 0 || axis > int64_t(in.size()))
    ctx.error("axis out of range");
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < int64_t(in.size()); ++k)
    (k < axis ? outer : inner) *= in[k];
  ctx.setOutput(0, ctx.in(0).dtype, {outer, inner});
}

void inferTranspose(OpContext &ctx) {
  const Shape &in = ctx.shape(0);
  int64_t rank = in.size();
  std::vector<int64_t> perm = ctx.node.getInts("perm");
  if (perm.empty())
    for (int64_t k = rank; k-- > 0;)
      perm.push_back(k);
  if (int64_t(perm.size()) != rank)
    ctx.error("perm has {} entries for rank {}", perm.size(), rank);
  std::vector<bool> seen(rank, false);
  Shape out;
  for (int64_t &p : perm) {
    p = ctx.axis(p, rank);
    if (seen[p])
      ctx.error("perm is not a permutation");
    seen[p] = true;
    out.push_back(in[p]);
  }
  ctx.node.setInts("perm", perm);
  ctx.setOutput(0, ctx.in(0).dtype, out);
}

std::vector<ConstPtr> foldTranspose(OpContext &ctx) {
  ConstPtr a = ctx.in(0).constant;
  std::vector<int64_t> perm = ctx.node.getInts("perm");
  Shape out = ctx.node.out()->shape;
  return {lazyConst(a->dtype, out, [a, perm, out](int64_t i) {
    std::vector<int64_t> oc, ic(perm.size());
    unravel(i, out, oc);
    for (size_t k = 0; k < perm.size(); ++k)
      ic[perm[k]] = oc[k];
    return a->at(ravel(ic, a->shape));
  })};
}

void inferConcat(OpContext &ctx) {
  const Shape &first = ctx.shape(0);
  int64_t axis = ctx.axis(ctx.node.getInt("axis", 0), first.size());
  Shape out = first;
  out[axis] = 0;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const Shape &s = ctx.shape(i);
    if (s.size() != first.size())
      ctx.error("inputs have ranks {} and {}", first.size(), s.size());
    for (size_t k = 0; k < s.size(); ++k)
      if (int64_t(k) != axis && s[k] != first[k])
        ctx.error("input shapes {} and {} differ off the concat axis",
                  shapeStr(first), shapeStr(s));
    out[axis] += s[axis];
  }
  ctx.node.setInt("axis", axis);
  ctx.setOutput(0, ctx.in(0).dtype, out);
}

std::vector<ConstPtr> foldConcat(OpContext &ctx) {
  std::vector<ConstPtr> ins;
  for (size_t i = 0; i < ctx.numInputs(); ++i)
    ins.push_back(ctx.in(i).constant);
  int64_t axis = ctx.node.getInt("axis", 0);
  Shape out = ctx.node.out()->shape;
  return {lazyConst(ins[0]->dtype, out, [ins, axis, out](int64_t i) {
    std::vector<int64_t> c;
    unravel(i, out, c);
    for (const ConstPtr &in : ins) {
      if (c[axis] < in->shape[axis])
        return in->at(ravel(c, in->shape));
      c[axis] -= in->shape[axis];
    }
    return 0.0;
  })};
}

// Slice normal form: for every dim, start/step/size (attrs "starts",
// "steps", "sizes", full rank).
void inferSlice(OpContext &ctx) {
  const Shape &in = ctx.shape(0);
  int64_t rank = in.size();
  std::vector<int64_t> starts = ctx.intsIn(1, "starts");
  std::vector<int64_t> ends = ctx.intsIn(2, "ends");
  std::vector<int64_t> axes, steps;
  if (ctx.hasInput(3))
    axes = ctx.intsIn(3, "axes");
  else
    for (size_t k = 0; k < starts.size(); ++k)
      axes.push_back(k);
  if (ctx.hasInput(4))
    steps = ctx.intsIn(4, "steps");
  else
    steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size())
    ctx.error("starts, ends, axes and steps differ in length");
  std::vector<int64_t> fullStart(rank, 0), fullStep(rank, 1), size(in);
  for (size_t k = 0; k < starts.size(); ++k) {
    int64_t a = ctx.axis(axes[k], rank), d = in[a], step = steps[k];
    if (step == 0)
      ctx.error("step 0 on axis {}", a);
    int64_t s = starts[k], e = ends[k];
    if (s < 0)
      s = s <= INT64_MIN / 2 ? 0 : s + d;
    if (e < 0)
      e = e <= INT64_MIN / 2 ? -1 : e + d;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, d);
      e = std::clamp<int64_t>(e, 0, d);
      size[a] = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, d - 1);
      e = std::clamp<int64_t>(e, -1, d - 1);
      size[a] = s > e ? (s - e - step - 1) / -step : 0;
    }
    fullStart[a] = s;
    fullStep[a] = step;
  }
  ctx.node.setInts("starts", fullStart);
  ctx.node.setInts("steps", fullStep);
  ctx.node.setInts("sizes", size);
  ctx.setOutput(0, ctx.in(0).dtype, size);
}

std::vector<ConstPtr> foldSlice(OpContext &ctx) {
  ConstPtr a = ctx.in(0).constant;
  std::vector<int64_t> start = ctx.node.getInts("starts"),
                       step = ctx.node.getInts("steps");
  Shape out = ctx.node.out()->shape;
  return {lazyConst(a->dtype, out, [a, start, step, out](int64_t i) {
    std::vector<int64_t> c;
    unravel(i, out, c);
    for (size_t k = 0; k < c.size(); ++k)
      c[k] = start[k] + c[k] * step[k];
    return a->at(ravel(c, a->shape));
  })};
}

// Pad normal form: attr "pads" with every dim's begins then ends (negative
// ones crop), attr "value" the fill. Only the constant mode: edge, reflect
// and wrap pads copy values, which no primitive here does.
void inferPad(OpContext &ctx) {
  const Shape &in = ctx.shape(0);
  const int64_t rank = in.size();
  std::string mode = ctx.node.getString("mode", "constant");
  if (mode != "constant")
    ctx.error("mode '{}' is not supported (only constant)", mode);
  std::vector<int64_t> given = ctx.intsIn(1, "pads"), axes;
  if (ctx.numInputs() > 3 && ctx.hasInput(3))
    axes = ctx.intsIn(3, "axes");
  else
    for (int64_t k = 0; k < rank; ++k)
      axes.push_back(k);
  const size_t n = axes.size();
  if (given.size() != 2 * n)
    ctx.error("pads has {} values for {} axes (needs {})", given.size(), n,
              2 * n);
  std::vector<int64_t> pads(2 * rank, 0);
  for (size_t i = 0; i < n; ++i) {
    const int64_t a = ctx.axis(axes[i], rank);
    pads[a] = given[i];
    pads[rank + a] = given[n + i];
  }
  Shape out = in;
  for (int64_t k = 0; k < rank; ++k) {
    out[k] = in[k] + pads[k] + pads[rank + k];
    if (out[k] < 0)
      ctx.error("pads {} and {} crop dim {} of size {} below nothing", pads[k],
                pads[rank + k], k, in[k]);
  }
  double value = 0;
  if (ctx.numInputs() > 2 && ctx.hasInput(2)) {
    const Const &c = ctx.constIn(2, "constant_value");
    if (c.numel != 1)
      ctx.error("constant_value has {} elements, not 1", c.numel);
    value = c.at(0);
  }
  ctx.node.setInts("pads", pads);
  ctx.node.setFloat("value", value);
  ctx.setOutput(0, ctx.in(0).dtype, out);
}

std::vector<ConstPtr> foldPad(OpContext &ctx) {
  ConstPtr a = ctx.in(0).constant;
  std::vector<int64_t> pads = ctx.node.getInts("pads");
  const double value = ctx.node.getFloat("value", 0);
  Shape out = ctx.node.out()->shape;
  return {lazyConst(a->dtype, out, [a, pads, value, out](int64_t i) {
    std::vector<int64_t> c;
    unravel(i, out, c);
    for (size_t k = 0; k < c.size(); ++k) {
      c[k] -= pads[k];
      if (c[k] < 0 || c[k] >= a->shape[k])
        return value;
    }
    return a->at(ravel(c, a->shape));
  })};
}

// Split normal form: attr "split" with every output's size.
void inferSplit(OpContext &ctx) {
  const Shape &in = ctx.shape(0);
  int64_t axis = ctx.axis(ctx.node.getInt("axis", 0), in.size());
  size_t n = ctx.node.outputs.size();
  std::vector<int64_t> split;
  if (ctx.hasInput(1))
    split = ctx.intsIn(1, "split");
  else if (ctx.node.has("split"))
    split = ctx.node.getInts("split");
  if (split.empty()) {
    int64_t parts = ctx.node.getInt("num_outputs", n);
    int64_t each = (in[axis] + parts - 1) / parts; // the last may be smaller
    for (int64_t k = 0, left = in[axis]; k < parts; ++k, left -= each)
      split.push_back(std::min(each, left));
  }
  int64_t total = 0;
  for (int64_t s : split)
    total += s;
  if (split.size() != n || total != in[axis])
    ctx.error("split sizes {} do not cover dim {} ({}) in {} outputs",
              shapeStr(split), axis, in[axis], n);
  ctx.node.setInts("split", split);
  ctx.node.setInt("axis", axis);
  for (size_t k = 0; k < n; ++k) {
    Shape s = in;
    s[axis] = split[k];
    ctx.setOutput(k, ctx.in(0).dtype, s);
  }
}

std::vector<ConstPtr> foldSplit(OpContext &ctx) {
  ConstPtr a = ctx.in(0).constant;
  int64_t axis = ctx.node.getInt("axis", 0), offset = 0;
  std::vector<ConstPtr> outs;
  for (size_t k = 0; k < ctx.node.outputs.size(); ++k) {
    Shape out = ctx.node.out(k)->shape;
    outs.push_back(lazyConst(a->dtype, out, [a, axis, offset, out](int64_t i) {
      std::vector<int64_t> c;
      unravel(i, out, c);
      c[axis] += offset;
      return a->at(ravel(c, a->shape));
    }));
    offset += out[axis];
  }
  return outs;
}

void inferGather(OpContext &ctx) {
  const Shape &data = ctx.shape(0), &idx = ctx.shape(1);
  int64_t axis = ctx.axis(ctx.node.getInt("axis", 0), data.size());
  if (!isInteger(ctx.in(1).dtype))
    ctx.error("indices must be integers");
  Shape out(data.begin(), data.begin() + axis);
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  ctx.node.setInt("axis", axis);
  ctx.setOutput(0, ctx.in(0).dtype, out);
}

// Gather indices lie in [-d, d) for the gathered axis of size d (the first
// 2^20 of them, which bounds the check on huge tables).
void checkIndices(OpContext &ctx, const Const &idx, int64_t axis, int64_t d) {
  for (int64_t i = 0; i < std::min<int64_t>(idx.numel, 1 << 20); ++i) {
    int64_t j = toInt(idx.at(i));
    if (j < -d || j >= d)
      ctx.error("index {} is out of range for dim {} of size {}", j, axis, d);
  }
}

std::vector<ConstPtr> foldGather(OpContext &ctx) {
  ConstPtr data = ctx.in(0).constant, idx = ctx.in(1).constant;
  int64_t axis = ctx.node.getInt("axis", 0), d = data->shape[axis];
  checkIndices(ctx, *idx, axis, d);
  Shape out = ctx.node.out()->shape;
  size_t idxRank = idx->shape.size();
  return {lazyConst(data->dtype, out, [=](int64_t i) {
    std::vector<int64_t> oc, ic;
    unravel(i, out, oc);
    std::vector<int64_t> ix(oc.begin() + axis, oc.begin() + axis + idxRank);
    int64_t j = toInt(idx->at(ravel(ix, idx->shape)));
    if (j < 0)
      j += d;
    ic.assign(oc.begin(), oc.begin() + axis);
    ic.push_back(j);
    ic.insert(ic.end(), oc.begin() + axis + idxRank, oc.end());
    return data->at(ravel(ic, data->shape));
  })};
}

// out[..., i, ...] = data[..., indices[..., i, ...], ...] along the axis;
// the output has the indices' shape (GPT-J's sin/cos lookup by position).
void inferGatherElements(OpContext &ctx) {
  const Shape &data = ctx.shape(0), &idx = ctx.shape(1);
  int64_t axis = ctx.axis(ctx.node.getInt("axis", 0), data.size());
  if (!isInteger(ctx.in(1).dtype))
    ctx.error("indices must be integers");
  if (idx.size() != data.size())
    ctx.error("indices {} and data {} differ in rank", shapeStr(idx),
              shapeStr(data));
  for (size_t k = 0; k < idx.size(); ++k)
    if (int64_t(k) != axis && idx[k] > data[k])
      ctx.error("indices {} exceed data {} on axis {}", shapeStr(idx),
                shapeStr(data), k);
  ctx.node.setInt("axis", axis);
  ctx.setOutput(0, ctx.in(0).dtype, idx);
}

std::vector<ConstPtr> foldGatherElements(OpContext &ctx) {
  ConstPtr data = ctx.in(0).constant, idx = ctx.in(1).constant;
  int64_t axis = ctx.node.getInt("axis", 0), d = data->shape[axis];
  checkIndices(ctx, *idx, axis, d);
  return {lazyConst(data->dtype, idx->shape, [=](int64_t i) {
    std::vector<int64_t> c;
    unravel(i, idx->shape, c);
    int64_t j = toInt(idx->at(i));
    c[size_t(axis)] = j < 0 ? j + d : j;
    return data->at(ravel(c, data->shape));
  })};
}

// GatherND: the last dim of the indices (k entries) picks a slice of data
// after its first batch_dims dims, which indices and data share. Folds only
// (the dynamo exporter builds masks from positions with it).
void inferGatherND(OpContext &ctx) {
  const Shape &data = ctx.shape(0), &idx = ctx.shape(1);
  const int64_t b = ctx.node.getInt("batch_dims", 0);
  if (!isInteger(ctx.in(1).dtype))
    ctx.error("indices must be integers");
  if (idx.empty() || b < 0 || b >= int64_t(idx.size()) ||
      b >= int64_t(data.size()))
    ctx.error("batch_dims {} does not fit indices {} and data {}", b,
              shapeStr(idx), shapeStr(data));
  const int64_t k = idx.back();
  if (k < 1 || b + k > int64_t(data.size()))
    ctx.error("index tuples of {} entries do not fit data {} after {} batch "
              "dims",
              k, shapeStr(data), b);
  for (int64_t d = 0; d < b; ++d)
    if (idx[size_t(d)] != data[size_t(d)])
      ctx.error("indices {} and data {} differ in batch dim {}", shapeStr(idx),
                shapeStr(data), d);
  Shape out(idx.begin(), idx.end() - 1);
  out.insert(out.end(), data.begin() + b + k, data.end());
  ctx.setOutput(0, ctx.in(0).dtype, out);
}

std::vector<ConstPtr> foldGatherND(OpContext &ctx) {
  ConstPtr data = ctx.in(0).constant, idx = ctx.in(1).constant;
  const int64_t b = ctx.node.getInt("batch_dims", 0);
  const int64_t k = idx->shape.back();
  const int64_t tuples = idx->numel / k;
  for (int64_t t = 0; t < std::min<int64_t>(tuples, 1 << 20); ++t)
    for (int64_t e = 0; e < k; ++e) {
      int64_t j = toInt(idx->at(t * k + e)), d = data->shape[size_t(b + e)];
      if (j < -d || j >= d)
        ctx.error("index {} is out of range for dim {} of size {}", j, b + e,
                  d);
    }
  Shape out = ctx.node.out()->shape;
  const size_t lead = idx->shape.size() - 1; // output dims from the indices
  return {lazyConst(data->dtype, out, [=](int64_t i) {
    std::vector<int64_t> oc, dc;
    unravel(i, out, oc);
    std::vector<int64_t> tuple(oc.begin(), oc.begin() + lead);
    tuple.push_back(0);
    const int64_t at = ravel(tuple, idx->shape);
    dc.assign(oc.begin(), oc.begin() + b);
    for (int64_t e = 0; e < k; ++e) {
      int64_t j = toInt(idx->at(at + e)), d = data->shape[size_t(b + e)];
      dc.push_back(j < 0 ? j + d : j);
    }
    dc.insert(dc.end(), oc.begin() + lead, oc.end());
    return data->at(ravel(dc, data->shape));
  })};
}

void inferExpand(OpContext &ctx) {
  std::vector<int64_t> target = ctx.intsIn(1, "the target shape");
  Shape out;
  if (!broadcastShapes(ctx.shape(0), target, out))
    ctx.error("cannot expand {} to {}", shapeStr(ctx.shape(0)),
              shapeStr(target));
  ctx.setOutput(0, ctx.in(0).dtype, out);
}

std::vector<ConstPtr> foldExpand(OpContext &ctx) {
  ConstPtr a = ctx.in(0).constant;
  Shape out = ctx.node.out()->shape;
  BroadcastIndex ia(out, a->shape);
  return {lazyConst(a->dtype, out, [a, ia](int64_t i) { return a->at(ia(i)); })};
}

void inferConstantOfShape(OpContext &ctx) {
  Shape out = ctx.intsIn(0, "the shape");
  DType t = DType::F32;
  double v = 0;
  if (ctx.node.has("value")) {
    ConstPtr c = ctx.node.attrs.at("value").tensor;
    if (!c || c->numel != 1)
      ctx.error("value must be a one-element tensor");
    t = c->dtype;
    v = c->at(0);
  }
  ctx.setOutput(0, t, out);
  ctx.node.out()->constant =
      lazyConst(t, out, [v](int64_t) { return v; });
}

void inferRange(OpContext &ctx) {
  double start = ctx.scalarIn(0, "start"), limit = ctx.scalarIn(1, "limit"),
         delta = ctx.scalarIn(2, "delta");
  if (delta == 0)
    ctx.error("delta is 0");
  int64_t n = std::max<int64_t>(
      0, static_cast<int64_t>(std::ceil((limit - start) / delta)));
  DType t = ctx.in(0).dtype;
  ctx.setOutput(0, t, {n});
  ctx.node.out()->constant = lazyConst(
      t, {n}, [start, delta](int64_t i) { return start + double(i) * delta; });
}

void inferTrilu(OpContext &ctx) {
  if (ctx.shape(0).size() < 2)
    ctx.error("needs rank >= 2");
  if (ctx.hasInput(1))
    ctx.node.setInt("k", ctx.scalarIn(1, "k"));
  ctx.setOutput(0, ctx.in(0).dtype, ctx.shape(0));
}

std::vector<ConstPtr> foldTrilu(OpContext &ctx) {
  ConstPtr a = ctx.in(0).constant;
  bool upper = ctx.node.getInt("upper", 1) != 0;
  int64_t k = ctx.node.getInt("k", 0);
  Shape s = a->shape;
  int64_t rows = s[s.size() - 2], cols = s.back();
  return {lazyConst(a->dtype, s, [=](int64_t i) {
    int64_t col = i % cols, row = (i / cols) % rows;
    bool keep = upper ? col - row >= k : col - row <= k;
    return keep ? a->at(i) : 0.0;
  })};
}

void inferTile(OpContext &ctx) {
  std::vector<int64_t> reps = ctx.intsIn(1, "repeats");
  Shape out = ctx.shape(0);
  if (reps.size() != out.size())
    ctx.error("repeats has {} entries for rank {}", reps.size(), out.size());
  for (size_t k = 0; k < out.size(); ++k)
    out[k] *= reps[k];
  ctx.setOutput(0, ctx.in(0).dtype, out);
}

std::vector<ConstPtr> foldTile(OpContext &ctx) {
  ConstPtr a = ctx.in(0).constant;
  Shape out = ctx.node.out()->shape;
  return {lazyConst(a->dtype, out, [a, out](int64_t i) {
    std::vector<int64_t> c;
    unravel(i, out, c);
    for (size_t k = 0; k < c.size(); ++k)
      c[k] %= a->shape[k];
    return a->at(ravel(c, a->shape));
  })};
}

// CumSum folds (OPT derives positions from the attention mask with it); on
// activations no primitive takes it.
void inferCumSum(OpContext &ctx) {
  int64_t axis = toInt(ctx.scalarIn(1, "axis"));
  ctx.node.setInt("axis", ctx.axis(axis, ctx.shape(0).size()));
  ctx.setOutput(0, ctx.in(0).dtype, ctx.shape(0));
}

std::vector<ConstPtr> foldCumSum(OpContext &ctx) {
  ConstPtr a = ctx.in(0).constant;
  Shape s = a->shape;
  int64_t axis = ctx.node.getInt("axis", 0);
  bool exclusive = ctx.node.getInt("exclusive", 0) != 0,
       reverse = ctx.node.getInt("reverse", 0) != 0;
  int64_t inner = 1;
  for (size_t k = axis + 1; k < s.size(); ++k)
    inner *= s[k];
  int64_t n = s[axis];
  return {lazyConst(a->dtype, s, [=](int64_t i) {
    int64_t pos = (i / inner) % n, base = i - pos * inner;
    double sum = 0;
    for (int64_t k = 0; k < n; ++k) {
      bool before = reverse ? k > pos : k < pos;
      if (before || (!exclusive && k == pos))
        sum += a->at(base + k * inner);
    }
    return sum;
  })};
}

// TopK: the k largest (or smallest) along an axis and their int64 indices;
// a mixture of experts' routing, fused by the MoE idiom, so never folded.
// The one value every element of c holds, if it holds one.
std::optional<double> splatValue(const Const &c) {
  if (c.numel == 0)
    return std::nullopt;
  const double v = c.at(0);
  for (int64_t i = 1; i < c.numel; ++i)
    if (c.at(i) != v)
      return std::nullopt;
  return v;
}

// Whether indices, along `axis` of a tensor shaped like them, are a TopK's
// over the whole axis (k its length): each row then names every position
// once, whatever the scores. Casts between integer types pass through.
bool wholeAxisTopK(Value *indices, int64_t axis) {
  Value *v = indices;
  while (v->producer && v->producer->op == "Cast" &&
         isInteger(v->producer->in(0)->dtype))
    v = v->producer->in(0);
  Node *n = v->producer;
  // The indices output, not the values (which may be integers too).
  return n && n->op == "TopK" && n->outputs.size() == 2 && n->outputs[1] == v &&
         n->getInt("axis", -1) == axis && n->in(0)->shape == indices->shape;
}

// Shape only, but for one case: a mixture of experts' group mask scatters
// ones into zeros (frontend/fusion/Moe.cpp), and anywhere else it is left
// unfused and refused. The case: one value scattered at the indices of a
// TopK over the whole axis writes every element, so the result is that
// value, a constant. DeepSeek's sparse attention so unmasks all keys when
// its index_topk is at least the sequence length (then it is dense).
void inferScatterElements(OpContext &ctx) {
  const Shape &data = ctx.shape(0), &idx = ctx.shape(1);
  if (!isInteger(ctx.in(1).dtype))
    ctx.error("indices must be integers");
  if (idx.size() != data.size() || ctx.shape(2) != idx)
    ctx.error("data {}, indices {} and updates {} must share a rank, and "
              "indices and updates a shape",
              shapeStr(data), shapeStr(idx), shapeStr(ctx.shape(2)));
  const int64_t axis =
      ctx.axis(ctx.node.getInt("axis", 0), int64_t(data.size()));
  ctx.node.setInt("axis", axis);
  ctx.setOutput(0, ctx.in(0).dtype, data);
  if (ConstPtr updates = ctx.in(2).constant;
      updates && idx == data &&
      ctx.node.getString("reduction", "none") == "none" &&
      wholeAxisTopK(&ctx.in(1), axis))
    if (std::optional<double> v = splatValue(*updates))
      ctx.node.out()->constant =
          lazyConst(ctx.in(0).dtype, data, [v = *v](int64_t) { return v; });
}

// Shape only: rows of data replaced by updates (DeepSeek's key assembled in
// an empty tensor); frontend/fusion/Lower.cpp lowers a run of consecutive
// rows, anything else is refused.
void inferScatterND(OpContext &ctx) {
  const Shape &data = ctx.shape(0), &idx = ctx.shape(1);
  if (!isInteger(ctx.in(1).dtype) || idx.empty() || idx.back() < 1 ||
      idx.back() > int64_t(data.size()))
    ctx.error("indices {} must be integer tuples of at most {} coordinates",
              shapeStr(idx), data.size());
  Shape updates(idx.begin(), idx.end() - 1);
  updates.insert(updates.end(), data.begin() + idx.back(), data.end());
  if (ctx.shape(2) != updates)
    ctx.error("updates {} for data {} and indices {} must be {}",
              shapeStr(ctx.shape(2)), shapeStr(data), shapeStr(idx),
              shapeStr(updates));
  ctx.setOutput(0, ctx.in(0).dtype, data);
}

// Scatters on compile-time values (Qwen3.5's interleaved multimodal rotary
// table, assembled from its three position streams), without reduction;
// duplicate indices resolve in index order. Tables past kScatterFoldElems
// are left for the lowering to refuse.
constexpr int64_t kScatterFoldElems = int64_t(1) << 24;

// A scatter's output before its updates: a copy of data.
std::vector<double> scatterBase(const Const &data) {
  std::vector<double> out(size_t(data.numel));
  for (int64_t i = 0; i < data.numel; ++i)
    out[size_t(i)] = data.at(i);
  return out;
}

std::vector<ConstPtr> foldScatterElements(OpContext &ctx) {
  ConstPtr data = ctx.in(0).constant, idx = ctx.in(1).constant,
           upd = ctx.in(2).constant;
  if (ctx.node.getString("reduction", "none") != "none" ||
      data->numel > kScatterFoldElems)
    return {nullptr};
  const int64_t axis = ctx.node.getInt("axis", 0), d = data->shape[axis];
  std::vector<double> out = scatterBase(*data);
  std::vector<int64_t> c;
  for (int64_t i = 0; i < idx->numel; ++i) {
    int64_t j = toInt(idx->at(i));
    if (j < -d || j >= d)
      ctx.error("index {} is out of range for axis {} of size {}", j, axis, d);
    unravel(i, idx->shape, c);
    c[size_t(axis)] = j < 0 ? j + d : j;
    out[size_t(ravel(c, data->shape))] = upd->at(i);
  }
  return {denseConst(data->dtype, data->shape, std::move(out))};
}

std::vector<ConstPtr> foldScatterND(OpContext &ctx) {
  ConstPtr data = ctx.in(0).constant, idx = ctx.in(1).constant,
           upd = ctx.in(2).constant;
  if (ctx.node.getString("reduction", "none") != "none" ||
      data->numel > kScatterFoldElems)
    return {nullptr};
  const int64_t k = idx->shape.back(), tuples = idx->numel / k;
  const int64_t slice = tuples ? upd->numel / tuples : 0;
  std::vector<double> out = scatterBase(*data);
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t at = 0;
    for (int64_t e = 0; e < k; ++e) {
      int64_t j = toInt(idx->at(t * k + e)), d = data->shape[size_t(e)];
      if (j < -d || j >= d)
        ctx.error("index {} is out of range for dim {} of size {}", j, e, d);
      at = at * d + (j < 0 ? j + d : j);
    }
    for (int64_t r = 0; r < slice; ++r)
      out[size_t(at * slice + r)] = upd->at(t * slice + r);
  }
  return {denseConst(data->dtype, data->shape, std::move(out))};
}

void inferTopK(OpContext &ctx) {
  const Shape &x = ctx.shape(0);
  const int64_t axis = ctx.axis(ctx.node.getInt("axis", -1), x.size());
  std::vector<int64_t> k = ctx.intsIn(1, "k");
  if (k.size() != 1 || k[0] < 0 || k[0] > x[size_t(axis)])
    ctx.error("k must be one value in [0, {}]", x[size_t(axis)]);
  ctx.node.setInt("axis", axis);
  Shape out = x;
  out[size_t(axis)] = k[0];
  ctx.setOutput(0, ctx.in(0).dtype, out);
  ctx.setOutput(1, DType::I64, out);
}

} // namespace

void addTensorHandlers(std::vector<OpHandler> &t) {
  t.push_back({"", "CumSum", 11, inferCumSum, foldCumSum});
  t.push_back({"", "Constant", 13, inferConstant, nullptr});
  t.push_back({"", "Shape", 13, inferShape, nullptr});
  t.push_back({"", "Size", 13, inferSize, nullptr});
  t.push_back({"", "Reshape", 13, inferReshape, foldSameOrder});
  t.push_back({"", "Unsqueeze", 13, inferUnsqueeze, foldSameOrder});
  t.push_back({"", "Squeeze", 13, inferSqueeze, foldSameOrder});
  t.push_back({"", "Flatten", 13, inferFlatten, foldSameOrder});
  t.push_back({"", "Transpose", 13, inferTranspose, foldTranspose});
  t.push_back({"", "Concat", 13, inferConcat, foldConcat});
  t.push_back({"", "Slice", 13, inferSlice, foldSlice});
  t.push_back({"", "Pad", 13, inferPad, foldPad});
  t.push_back({"", "Split", 13, inferSplit, foldSplit});
  t.push_back({"", "Gather", 13, inferGather, foldGather});
  t.push_back({"", "GatherElements", 13, inferGatherElements,
               foldGatherElements});
  t.push_back({"", "GatherND", 13, inferGatherND, foldGatherND});
  t.push_back({"", "TopK", 11, inferTopK, nullptr});
  t.push_back(
      {"", "ScatterElements", 13, inferScatterElements, foldScatterElements});
  t.push_back({"", "ScatterND", 13, inferScatterND, foldScatterND});
  t.push_back({"", "Expand", 13, inferExpand, foldExpand});
  t.push_back({"", "ConstantOfShape", 9, inferConstantOfShape, nullptr});
  t.push_back({"", "Range", 11, inferRange, nullptr});
  t.push_back({"", "Trilu", 14, inferTrilu, foldTrilu});
  t.push_back({"", "Tile", 13, inferTile, foldTile});
}

} // namespace mt::onnx_import
