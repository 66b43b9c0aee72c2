//===- Reduction.cpp - handlers of ReduceMean, ReduceSum, ReduceMax, ... -===//
//
// Axes moved from attribute to input at opset 18 (13 for ReduceSum); both
// are normalized into a sorted, non-negative "axes" attribute ("all axes"
// spelled out), with "keepdims" made explicit. ReduceLogSumExp has shapes
// only: Granite SWA's attention sinks read one of the scores, which the
// attention idiom takes in (frontend/fusion/Attention.cpp).
//
//===----------------------------------------------------------------------===//
#include "frontend/OpHandler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mt::onnx_import {
namespace {

template <bool AxesFromInput> void inferReduce(OpContext &ctx) {
  const Shape &in = ctx.shape(0);
  int64_t rank = in.size();
  std::vector<int64_t> axes =
      AxesFromInput ? (ctx.hasInput(1) ? ctx.intsIn(1, "axes")
                                       : std::vector<int64_t>())
                    : ctx.node.getInts("axes");
  bool noop = ctx.node.getInt("noop_with_empty_axes", 0) != 0;
  if (axes.empty() && noop) {
    ctx.node.setInts("axes", {});
  } else if (axes.empty()) {
    for (int64_t k = 0; k < rank; ++k)
      axes.push_back(k);
  }
  for (int64_t &a : axes)
    a = ctx.axis(a, rank);
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  bool keep = ctx.node.getInt("keepdims", 1) != 0;
  Shape out;
  for (int64_t k = 0; k < rank; ++k) {
    bool reduced = std::binary_search(axes.begin(), axes.end(), k);
    if (!reduced)
      out.push_back(in[k]);
    else if (keep)
      out.push_back(1);
  }
  ctx.node.setInts("axes", axes);
  ctx.node.setInt("keepdims", keep);
  ctx.setOutput(0, ctx.in(0).dtype, out);
}

enum class Kind { Mean, Sum, Max };

template <Kind K> std::vector<ConstPtr> foldReduce(OpContext &ctx) {
  ConstPtr a = ctx.in(0).constant;
  std::vector<int64_t> axes = ctx.node.getInts("axes");
  Shape in = a->shape;
  Shape out = ctx.node.out()->shape;
  // Result element i: iterate the reduced coordinates.
  std::vector<bool> reduced(in.size(), false);
  for (int64_t ax : axes)
    reduced[ax] = true;
  int64_t count = 1;
  for (int64_t ax : axes)
    count *= in[ax];
  return {lazyConst(a->dtype, out, [=](int64_t i) {
    // Coordinates of the kept dims, in order.
    std::vector<int64_t> kept;
    int64_t rest = i;
    std::vector<int64_t> keptDims;
    for (size_t k = 0; k < in.size(); ++k)
      if (!reduced[k])
        keptDims.push_back(in[k]);
    kept.resize(keptDims.size());
    for (size_t k = keptDims.size(); k-- > 0;) {
      kept[k] = rest % keptDims[k];
      rest /= keptDims[k];
    }
    double acc = K == Kind::Max ? -std::numeric_limits<double>::infinity() : 0;
    std::vector<int64_t> c(in.size());
    for (int64_t r = 0; r < count; ++r) {
      int64_t rr = r;
      size_t kk = keptDims.size();
      for (size_t k = in.size(); k-- > 0;) {
        if (reduced[k]) {
          c[k] = rr % in[k];
          rr /= in[k];
        } else {
          c[k] = kept[--kk];
        }
      }
      int64_t flat = 0;
      for (size_t k = 0; k < in.size(); ++k)
        flat = flat * in[k] + c[k];
      double v = a->at(flat);
      acc = K == Kind::Max ? std::max(acc, v) : acc + v;
    }
    return K == Kind::Mean ? acc / double(count) : acc;
  })};
}

} // namespace

void addReductionHandlers(std::vector<OpHandler> &t) {
  t.push_back({"", "ReduceMean", 13, inferReduce<false>, foldReduce<Kind::Mean>});
  t.push_back({"", "ReduceMean", 18, inferReduce<true>, foldReduce<Kind::Mean>});
  t.push_back({"", "ReduceSum", 13, inferReduce<true>, foldReduce<Kind::Sum>});
  t.push_back({"", "ReduceMax", 13, inferReduce<false>, foldReduce<Kind::Max>});
  t.push_back({"", "ReduceMax", 18, inferReduce<true>, foldReduce<Kind::Max>});
  t.push_back({"", "ReduceLogSumExp", 13, inferReduce<false>, nullptr});
  t.push_back({"", "ReduceLogSumExp", 18, inferReduce<true>, nullptr});
}

} // namespace mt::onnx_import
