//===- Neural.cpp - handlers of MatMul, Gemm, Softmax, norms, GELU, Attention ===//
//
// These ops only get their shapes inferred here (MatMul also folds, for RoPE
// tables computed as inv_freq x positions); idiom fusion turns them into
// mt primitives.
//
//===----------------------------------------------------------------------===//
#include "frontend/OpHandler.h"

namespace mt::onnx_import {
namespace {

void inferMatMul(OpContext &ctx) {
  Shape a = ctx.shape(0), b = ctx.shape(1);
  if (a.empty() || b.empty())
    ctx.error("operands must have rank >= 1");
  bool vecA = a.size() == 1, vecB = b.size() == 1;
  if (vecA)
    a.insert(a.begin(), 1);
  if (vecB)
    b.push_back(1);
  if (a.back() != b[b.size() - 2])
    ctx.error("inner dims differ: {} x {}", shapeStr(ctx.shape(0)),
              shapeStr(ctx.shape(1)));
  Shape batchA(a.begin(), a.end() - 2), batchB(b.begin(), b.end() - 2), out;
  if (!broadcastShapes(batchA, batchB, out))
    ctx.error("batch dims of {} and {} do not broadcast",
              shapeStr(ctx.shape(0)), shapeStr(ctx.shape(1)));
  if (!vecA)
    out.push_back(a[a.size() - 2]);
  if (!vecB)
    out.push_back(b.back());
  ctx.setOutput(0, ctx.in(0).dtype, out);
}

std::vector<ConstPtr> foldMatMul(OpContext &ctx) {
  ConstPtr a = ctx.in(0).constant, b = ctx.in(1).constant;
  if (a->shape.size() < 2 || b->shape.size() < 2)
    return {nullptr}; // vector products never compute tables; leave unfolded
  Shape out = ctx.node.out()->shape;
  int64_t m = a->shape[a->shape.size() - 2], k = a->shape.back(),
          n = b->shape.back();
  Shape batch(out.begin(), out.end() - 2);
  Shape batchA(a->shape.begin(), a->shape.end() - 2),
      batchB(b->shape.begin(), b->shape.end() - 2);
  BroadcastIndex ia(batch, batchA), ib(batch, batchB);
  return {lazyConst(a->dtype, out, [=](int64_t i) {
    int64_t col = i % n, row = (i / n) % m, bt = i / (n * m);
    int64_t baseA = ia(bt) * m * k, baseB = ib(bt) * k * n;
    double acc = 0;
    for (int64_t j = 0; j < k; ++j)
      acc += a->at(baseA + row * k + j) * b->at(baseB + j * n + col);
    return acc;
  })};
}

void inferGemm(OpContext &ctx) {
  const Shape &a = ctx.shape(0), &b = ctx.shape(1);
  if (a.size() != 2 || b.size() != 2)
    ctx.error("A and B must be 2-d, got {} and {}", shapeStr(a), shapeStr(b));
  bool ta = ctx.node.getInt("transA", 0), tb = ctx.node.getInt("transB", 0);
  int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1];
  int64_t kb = tb ? b[1] : b[0], n = tb ? b[0] : b[1];
  if (k != kb)
    ctx.error("inner dims differ: A {} (transA={}) and B {} (transB={})",
              shapeStr(a), ta, shapeStr(b), tb);
  if (ctx.hasInput(2)) {
    Shape out;
    if (!broadcastShapes({m, n}, ctx.shape(2), out) || out != Shape{m, n})
      ctx.error("C {} does not broadcast to [{},{}]", shapeStr(ctx.shape(2)),
                m, n);
  }
  ctx.setOutput(0, ctx.in(0).dtype, {m, n});
}

// 1-d only (LFM2's short convolution): x [N, C, L], w [M, C / group, K].
void inferConv(OpContext &ctx) {
  const Shape &x = ctx.shape(0), &w = ctx.shape(1);
  if (x.size() != 3 || w.size() != 3)
    ctx.error("only 1-d convolutions are supported: x {}, w {}", shapeStr(x),
              shapeStr(w));
  const int64_t group = ctx.node.getInt("group", 1);
  if (ctx.node.getString("auto_pad", "NOTSET") != "NOTSET")
    ctx.error("auto_pad {} is not supported (explicit pads are)",
              ctx.node.getString("auto_pad", ""));
  if (group < 1 || x[1] % group != 0 || w[1] * group != x[1] ||
      w[0] % group != 0)
    ctx.error("x {} and w {} do not form {} groups", shapeStr(x), shapeStr(w),
              group);
  std::vector<int64_t> pads = ctx.node.getInts("pads"),
                       strides = ctx.node.getInts("strides"),
                       dilations = ctx.node.getInts("dilations");
  if (pads.empty())
    pads = {0, 0};
  const int64_t stride = strides.empty() ? 1 : strides[0],
                dilation = dilations.empty() ? 1 : dilations[0];
  if (pads.size() != 2 || stride < 1 || dilation < 1)
    ctx.error("pads, strides or dilations do not describe one axis");
  const int64_t span = dilation * (w[2] - 1) + 1,
                length = x[2] + pads[0] + pads[1];
  if (length < span)
    ctx.error("the kernel spans {} positions of {}", span, length);
  ctx.setOutput(0, ctx.in(0).dtype, {x[0], w[0], (length - span) / stride + 1});
}

void inferSameAsInput(OpContext &ctx) {
  ctx.setOutput(0, ctx.in(0).dtype, ctx.shape(0));
}

void inferSoftmax(OpContext &ctx) {
  ctx.node.setInt("axis",
                  ctx.axis(ctx.node.getInt("axis", -1), ctx.shape(0).size()));
  inferSameAsInput(ctx);
}

// LayerNormalization, RMSNormalization, SimplifiedLayerNormalization: the
// normalized axes run from "axis" to the end; outputs 1 and 2 (mean and
// inverse std) are statistics we never use downstream.
void inferNorm(OpContext &ctx) {
  int64_t rank = ctx.shape(0).size();
  int64_t axis = ctx.axis(ctx.node.getInt("axis", -1), rank);
  ctx.node.setInt("axis", axis);
  ctx.setOutput(0, ctx.in(0).dtype, ctx.shape(0));
  Shape stat = ctx.shape(0);
  for (int64_t k = axis; k < rank; ++k)
    stat[k] = 1;
  ctx.setOutput(1, DType::F32, stat);
  ctx.setOutput(2, DType::F32, stat);
}

// Attention (opset 23): Q [B,H,S,D] or [B,S,H*D]; K, V likewise with KV
// heads. Only the causal, mask-free, cache-free form is imported; fusion
// checks the attributes.
void inferAttention(OpContext &ctx) {
  const Shape &q = ctx.shape(0), &v = ctx.shape(2);
  if (q.size() != 3 && q.size() != 4)
    ctx.error("Q must be 3-d or 4-d, got {}", shapeStr(q));
  Shape out = q;
  if (q.size() == 4) {
    out[3] = v[3];
  } else {
    int64_t kvHeads = ctx.node.getInt("kv_num_heads", 0);
    if (kvHeads <= 0 || v.back() % kvHeads)
      ctx.error("3-d inputs need kv_num_heads dividing V's width");
    out[2] = ctx.node.getInt("q_num_heads", 0) * (v.back() / kvHeads);
  }
  ctx.setOutput(0, ctx.in(0).dtype, out);
  if (ctx.node.outputs.size() > 1)
    ctx.error("present key/value outputs (a KV cache) are not supported in "
              "training");
}

// The scans' q and k [B, S, Hk, Dk] and v [B, S, Hv, Dv]; returns v's shape.
const Shape &scanHeads(OpContext &ctx) {
  const Shape &q = ctx.shape(0), &k = ctx.shape(1), &v = ctx.shape(2);
  if (q.size() != 4 || k != q || v.size() != 4 || v[0] != q[0] ||
      v[1] != q[1] || v[2] % q[2] != 0)
    ctx.error("expects q and k [B, S, Hk, Dk] and v [B, S, Hv, Dv] with Hv a "
              "multiple of Hk, got q {}, k {}, v {}",
              shapeStr(q), shapeStr(k), shapeStr(v));
  return v;
}

// MegaTrain's own nodes for the gated scans, GatedDeltaRule and
// GatedLinearRule (docs/importer.md): q, k [B, S, Hk, Dk], v [B, S, Hv,
// Dv], beta [B, S, Hv], g [B, S, Hv] or [B, S, Hv, Dk] (a decay per key
// channel), Hv a multiple of Hk; the output is v's shape.
void inferGatedScan(OpContext &ctx) {
  const Shape &v = scanHeads(ctx), &q = ctx.shape(0), &g = ctx.shape(3),
              &beta = ctx.shape(4);
  const Shape heads{v[0], v[1], v[2]}, keys{v[0], v[1], v[2], q[3]};
  if ((g != heads && g != keys) || beta != heads)
    ctx.error("beta must be {} (one per value head and position) and g that "
              "or {} (one per key channel), got g {} and beta {}",
              shapeStr(heads), shapeStr(keys), shapeStr(g), shapeStr(beta));
  ctx.setOutput(0, ctx.in(2).dtype, v);
}

// DecayLinearRule(q, k, v, rate): GatedLinearRule with a constant decay per
// value head, rate of Hv elements in any shape (MiniMax's slopes [Hv, 1, 1]).
void inferDecayScan(OpContext &ctx) {
  const Shape &v = scanHeads(ctx);
  if (ctx.in(3).numel() != v[2])
    ctx.error("rate must hold one decay per value head ({}), got shape {}",
              v[2], shapeStr(ctx.shape(3)));
  ctx.setOutput(0, ctx.in(2).dtype, v);
}

} // namespace

void addNeuralHandlers(std::vector<OpHandler> &t) {
  t.push_back({"", "MatMul", 13, inferMatMul, foldMatMul});
  t.push_back({"", "Gemm", 13, inferGemm, nullptr});
  t.push_back({"", "Softmax", 13, inferSoftmax, nullptr});
  t.push_back({"", "Conv", 11, inferConv, nullptr});
  t.push_back({"", "LayerNormalization", 17, inferNorm, nullptr});
  t.push_back({"", "RMSNormalization", 23, inferNorm, nullptr});
  // ONNX Runtime registers SimplifiedLayerNormalization in the default
  // domain; older exports put it in com.microsoft.
  t.push_back({"", "SimplifiedLayerNormalization", 1, inferNorm, nullptr});
  t.push_back({"com.microsoft", "SimplifiedLayerNormalization", 1, inferNorm,
               nullptr});
  t.push_back({"", "Gelu", 20, inferSameAsInput, nullptr});
  t.push_back({"com.microsoft", "Gelu", 1, inferSameAsInput, nullptr});
  t.push_back({"com.microsoft", "FastGelu", 1, inferSameAsInput, nullptr});
  t.push_back({"", "Attention", 23, inferAttention, nullptr});
  t.push_back({"ai.megatrain", "GatedDeltaRule", 1, inferGatedScan, nullptr});
  t.push_back({"ai.megatrain", "GatedLinearRule", 1, inferGatedScan, nullptr});
  t.push_back({"ai.megatrain", "DecayLinearRule", 1, inferDecayScan, nullptr});
}

} // namespace mt::onnx_import
