//===- Linear.cpp - MatMul and Gemm by a weight ---------------------------===//
//
// Recognized forms (W an initializer, possibly through a storage Cast):
//   MatMul(x, W)             W is [in, out]   (folded transposes, Conv1D)
//   MatMul(x, Transpose(W))  W is [out, in]   (nn.Linear, unfolded export)
//   Gemm(x, W, b, transB)    either layout, per transB; alpha = beta = 1
//   then an optional Add of a [out] bias.
//   MatMul(W, y)             W is [out, in], y [..., in, T]: the weight on
//                            the left (Mamba's dt_proj.weight @ dtᵀ), the
//                            linear of yᵀ transposed back.
//
//===----------------------------------------------------------------------===//
#include "frontend/fusion/Fusion.h"

#include "frontend/Error.h"
#include "frontend/fusion/Match.h"

namespace mt::onnx_import {
namespace {

// A bias for an output of width n: a weight of shape [n] or [1, n].
Value *biasOf(Value *v, int64_t n) {
  auto view = weightView(v);
  if (!view || view->transposed)
    return nullptr;
  const Shape &s = view->param->shape;
  return (s == Shape{n} || s == Shape{1, n}) ? view->param : nullptr;
}

Node *emitLinear(Graph &g, Node *root, Value *x, WeightView w, bool outIn,
                 Value *bias) {
  int64_t n = outIn ? w.param->dim(0) : w.param->dim(1);
  Shape y = x->shape;
  y.back() = n;
  // A following bias Add folds in, when nothing else reads the product.
  Node *user = soleUser(root->out());
  if (!bias && user && user->op == "Add" && user->domain.empty()) {
    auto ops = commuted(user, [n](Value *b) { return biasOf(b, n) != nullptr; });
    if (ops && ops->second == root->out()) {
      bias = biasOf(ops->first, n);
      root = user;
    }
  }
  Node *lin = replaceWithPrimitive(g, root, "mt.linear", {x, w.param, bias}, y);
  lin->setString("w_layout", outIn ? "out_in" : "in_out");
  return lin;
}

void fuseMatMul(Graph &g, Node *mm) {
  Value *x = mm->in(0);
  auto w = weightView(mm->in(1));
  if (!isActivation(x) || !w || w->param->rank() != 2 || x->rank() < 2)
    return;
  // MatMul(x, W) contracts with W as stored, [in, out]; through a Transpose
  // the stored W is [out, in].
  emitLinear(g, mm, x, *w, w->transposed, nullptr);
}

// The permutation that swaps the last two of `rank` axes.
std::vector<int64_t> swapLastTwo(size_t rank) {
  std::vector<int64_t> perm(rank);
  for (size_t i = 0; i < rank; ++i)
    perm[i] = int64_t(i);
  std::swap(perm[rank - 2], perm[rank - 1]);
  return perm;
}

// MatMul(W, y) = (yᵀ · Wᵀ)ᵀ over the last two axes: a linear of yᵀ with W
// as stored [out, in] (or, through a Transpose, [in, out]).
void fuseLeftMatMul(Graph &g, Node *mm) {
  Value *y = mm->in(1);
  auto w = weightView(mm->in(0));
  if (!isActivation(y) || !w || w->param->rank() != 2 || y->rank() < 2)
    return;
  std::vector<int64_t> swap = swapLastTwo(y->rank());
  Node *at = mm;
  auto transposed = [&](Value *v, const std::string &name) {
    Shape s = v->shape;
    std::swap(s[s.size() - 2], s[s.size() - 1]);
    Value *t = appendPrimitive(g, at, name, "mt.transpose", {v}, s);
    at->setInts("perm", swap);
    return t;
  };
  // y is often already the transpose of the activation that the linear
  // reads.
  Node *t = producer(y, "Transpose");
  Value *x = t && t->getInts("perm") == swap
                 ? t->in(0)
                 : transposed(y, mm->name + ".input");
  Shape xw = x->shape;
  xw.back() = w->transposed ? w->param->dim(1) : w->param->dim(0);
  Value *lin = appendPrimitive(g, at, mm->name + ".linear", "mt.linear",
                               {x, w->param, nullptr}, xw);
  at->setString("w_layout", w->transposed ? "in_out" : "out_in");
  // A product transposed straight back is the linear itself.
  Node *back = soleUser(mm->out());
  if (back && back->op == "Transpose" && back->domain.empty() &&
      back->getInts("perm") == swap)
    g.replaceAllUses(back->out(), lin);
  else
    g.replaceAllUses(mm->out(), transposed(lin, mm->name));
}

void fuseGemm(Graph &g, Node *gemm) {
  Value *x = gemm->in(0);
  auto w = weightView(gemm->in(1));
  if (!isActivation(x) || !w)
    return;
  if (gemm->getInt("transA", 0) || gemm->getFloat("alpha", 1.0) != 1.0 ||
      (gemm->in(2) && gemm->getFloat("beta", 1.0) != 1.0))
    fail("{}: only Gemm with transA=0, alpha=1 and beta=1 is supported",
         gemm->describe());
  bool transB = gemm->getInt("transB", 0) != 0;
  bool outIn = transB != w->transposed;
  int64_t n = gemm->out()->dim(1);
  Value *bias = nullptr;
  if (gemm->in(2)) {
    bias = biasOf(gemm->in(2), n);
    if (!bias)
      fail("{}: C must be a [{}] bias weight", gemm->describe(), n);
  }
  emitLinear(g, gemm, x, *w, outIn, bias);
}

} // namespace

void fuseLinear(Graph &g) {
  for (Node *n : nodesWithOp(g, "MatMul"))
    fuseMatMul(g, n);
  for (Node *n : nodesWithOp(g, "MatMul"))
    fuseLeftMatMul(g, n);
  for (Node *n : nodesWithOp(g, "Gemm"))
    fuseGemm(g, n);
}

} // namespace mt::onnx_import
