//===- Elementwise.cpp - handlers of broadcasting and unary ops -----------===//
//
// Arithmetic, comparisons, logic, Where, Cast and friends. Folding is lazy
// (lazyConst stores small results): masks and RoPE tables are built from
// these.
//
//===----------------------------------------------------------------------===//
#include "frontend/OpHandler.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace mt::onnx_import {
namespace {

using BinaryFn = double (*)(double, double);
using UnaryFn = double (*)(double);

Shape broadcastAll(OpContext &ctx) {
  Shape out = ctx.shape(0);
  for (size_t i = 1; i < ctx.numInputs(); ++i) {
    Shape next;
    if (!broadcastShapes(out, ctx.shape(i), next))
      ctx.error("input shapes {} and {} do not broadcast", shapeStr(out),
                shapeStr(ctx.shape(i)));
    out = next;
  }
  return out;
}

double roundTo(DType t, double v) {
  switch (t) {
  case DType::F32: return static_cast<float>(v);
  case DType::F16: case DType::BF16: return static_cast<float>(v);
  case DType::F64: return v;
  case DType::Bool: return v != 0 ? 1 : 0;
  case DType::Undefined: return v;
  default: {
    if (std::isnan(v))
      return 0;
    return static_cast<double>(toInt(std::trunc(v)));
  }
  }
}

template <bool Predicate> void inferBinary(OpContext &ctx) {
  Shape out = broadcastAll(ctx);
  ctx.setOutput(0, Predicate ? DType::Bool : ctx.in(0).dtype, out);
}

template <BinaryFn F>
std::vector<ConstPtr> foldBinary(OpContext &ctx) {
  const Value &y = *ctx.node.out();
  ConstPtr a = ctx.in(0).constant, b = ctx.in(1).constant;
  BroadcastIndex ia(y.shape, a->shape), ib(y.shape, b->shape);
  DType t = y.dtype;
  return {lazyConst(t, y.shape, [a, b, ia, ib, t](int64_t i) {
    return roundTo(t, F(a->at(ia(i)), b->at(ib(i))));
  })};
}

double add(double a, double b) { return a + b; }
double sub(double a, double b) { return a - b; }
double mul(double a, double b) { return a * b; }
double divide(double a, double b) { return a / b; }
double power(double a, double b) { return std::pow(a, b); }
double equal(double a, double b) { return a == b; }
double less(double a, double b) { return a < b; }
double lessEq(double a, double b) { return a <= b; }
double greater(double a, double b) { return a > b; }
double greaterEq(double a, double b) { return a >= b; }
double logicAnd(double a, double b) { return (a != 0) && (b != 0); }
double logicOr(double a, double b) { return (a != 0) || (b != 0); }
double logicXor(double a, double b) { return (a != 0) != (b != 0); }
double maximum(double a, double b) { return std::isnan(a) ? a : std::max(a, b); }
double minimum(double a, double b) { return std::isnan(a) ? a : std::min(a, b); }

// Integer Div truncates toward zero, as C does; float Div is IEEE.
std::vector<ConstPtr> foldDiv(OpContext &ctx) {
  if (isFloat(ctx.node.out()->dtype))
    return foldBinary<divide>(ctx);
  const Value &y = *ctx.node.out();
  ConstPtr a = ctx.in(0).constant, b = ctx.in(1).constant;
  BroadcastIndex ia(y.shape, a->shape), ib(y.shape, b->shape);
  return {lazyConst(y.dtype, y.shape, [a, b, ia, ib](int64_t i) {
    double d = b->at(ib(i));
    return d == 0 ? 0.0 : std::trunc(a->at(ia(i)) / d);
  })};
}

std::vector<ConstPtr> foldMod(OpContext &ctx) {
  const Value &y = *ctx.node.out();
  ConstPtr a = ctx.in(0).constant, b = ctx.in(1).constant;
  BroadcastIndex ia(y.shape, a->shape), ib(y.shape, b->shape);
  bool cStyle = ctx.node.getInt("fmod", 0) != 0;
  return {lazyConst(y.dtype, y.shape, [=](int64_t i) {
    double x = a->at(ia(i)), d = b->at(ib(i));
    if (d == 0)
      return 0.0;
    double r = std::fmod(x, d);
    if (!cStyle && r != 0 && ((r < 0) != (d < 0)))
      r += d; // Python semantics: the result takes the divisor's sign
    return r;
  })};
}

// Variadic Max/Min fold pairwise.
template <BinaryFn F> std::vector<ConstPtr> foldVariadic(OpContext &ctx) {
  const Value &y = *ctx.node.out();
  std::vector<ConstPtr> ins;
  std::vector<BroadcastIndex> idx;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    ins.push_back(ctx.in(i).constant);
    idx.emplace_back(y.shape, ins.back()->shape);
  }
  return {lazyConst(y.dtype, y.shape, [ins, idx](int64_t i) {
    double r = ins[0]->at(idx[0](i));
    for (size_t k = 1; k < ins.size(); ++k)
      r = F(r, ins[k]->at(idx[k](i)));
    return r;
  })};
}

void inferUnary(OpContext &ctx) {
  ctx.setOutput(0, ctx.in(0).dtype, ctx.shape(0));
}

template <UnaryFn F> std::vector<ConstPtr> foldUnary(OpContext &ctx) {
  ConstPtr a = ctx.in(0).constant;
  DType t = ctx.node.out()->dtype;
  return {lazyConst(t, a->shape,
                    [a, t](int64_t i) { return roundTo(t, F(a->at(i))); })};
}

double neg(double x) { return -x; }
double sqrtFn(double x) { return std::sqrt(x); }
double recip(double x) { return 1.0 / x; }
double expFn(double x) { return std::exp(x); }
double logFn(double x) { return std::log(x); }
double erfFn(double x) { return std::erf(x); }
double tanhFn(double x) { return std::tanh(x); }
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double softplus(double x) {
  return std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x)));
}
double relu(double x) { return x > 0 ? x : 0; }
double cosFn(double x) { return std::cos(x); }
double sinFn(double x) { return std::sin(x); }
double absFn(double x) { return std::fabs(x); }
double notFn(double x) { return x == 0; }
double floorFn(double x) { return std::floor(x); }
double ceilFn(double x) { return std::ceil(x); }
double isNan(double x) { return std::isnan(x); }
double identity(double x) { return x; }

void inferPredicateUnary(OpContext &ctx) {
  ctx.setOutput(0, DType::Bool, ctx.shape(0));
}

void inferIsInf(OpContext &ctx) { inferPredicateUnary(ctx); }
std::vector<ConstPtr> foldIsInf(OpContext &ctx) {
  ConstPtr a = ctx.in(0).constant;
  bool pos = ctx.node.getInt("detect_positive", 1),
       neg = ctx.node.getInt("detect_negative", 1);
  return {lazyConst(DType::Bool, a->shape, [=](int64_t i) {
    double x = a->at(i);
    return std::isinf(x) && ((x > 0 && pos) || (x < 0 && neg)) ? 1.0 : 0.0;
  })};
}

void inferWhere(OpContext &ctx) {
  ctx.setOutput(0, ctx.in(1).dtype, broadcastAll(ctx));
}

std::vector<ConstPtr> foldWhere(OpContext &ctx) {
  const Value &y = *ctx.node.out();
  ConstPtr c = ctx.in(0).constant, a = ctx.in(1).constant,
           b = ctx.in(2).constant;
  BroadcastIndex ic(y.shape, c->shape), ia(y.shape, a->shape),
      ib(y.shape, b->shape);
  return {lazyConst(y.dtype, y.shape, [=](int64_t i) {
    return c->at(ic(i)) != 0 ? a->at(ia(i)) : b->at(ib(i));
  })};
}

void inferCast(OpContext &ctx) {
  int64_t to = ctx.node.getInt("to", 0);
  DType t = dtypeFromOnnx(static_cast<int>(to));
  if (t == DType::Undefined)
    ctx.error("casts to unsupported ONNX data type {}", to);
  ctx.setOutput(0, t, ctx.shape(0));
}

void inferCastLike(OpContext &ctx) {
  ctx.setOutput(0, ctx.in(1).dtype, ctx.shape(0));
}

std::vector<ConstPtr> foldCast(OpContext &ctx) {
  ConstPtr a = ctx.in(0).constant;
  DType t = ctx.node.out()->dtype;
  return {lazyConst(t, a->shape,
                    [a, t](int64_t i) { return roundTo(t, a->at(i)); })};
}

void inferDropout(OpContext &ctx) {
  // Training exports of dropout would be wrong here; inference mode (the
  // default of torch.onnx.export) makes it the identity.
  if (ctx.hasInput(2) && ctx.in(2).constant &&
      ctx.scalarIn(2, "training_mode") != 0)
    ctx.error("dropout in training mode is not supported; export the model "
              "in eval mode");
  ctx.setOutput(0, ctx.in(0).dtype, ctx.shape(0));
  ctx.setOutput(1, DType::Bool, ctx.shape(0));
}

// Clip (opset 13): x between optional scalar min and max inputs.
std::vector<ConstPtr> foldClip(OpContext &ctx) {
  ConstPtr a = ctx.in(0).constant;
  auto bound = [&](size_t i, double dflt) {
    return ctx.hasInput(i) ? ctx.scalarIn(i, i == 1 ? "min" : "max") : dflt;
  };
  const double lo = bound(1, -INFINITY), hi = bound(2, INFINITY);
  DType t = ctx.node.out()->dtype;
  return {lazyConst(t, a->shape, [a, t, lo, hi](int64_t i) {
    return roundTo(t, std::min(std::max(a->at(i), lo), hi));
  })};
}

std::vector<ConstPtr> foldIdentity(OpContext &ctx) {
  return {ctx.in(0).constant};
}

} // namespace

void addElementwiseHandlers(std::vector<OpHandler> &t) {
  auto bin = [&](const char *op, int since, std::vector<ConstPtr> (*fold)(OpContext &),
                 bool predicate = false) {
    t.push_back({"", op, since,
                 predicate ? inferBinary<true> : inferBinary<false>,
                 fold});
  };
  bin("Add", 13, foldBinary<add>);
  bin("Sub", 13, foldBinary<sub>);
  bin("Mul", 13, foldBinary<mul>);
  bin("Div", 13, foldDiv);
  bin("Pow", 13, foldBinary<power>);
  bin("Mod", 13, foldMod);
  bin("Equal", 13, foldBinary<equal>, true);
  bin("Less", 13, foldBinary<less>, true);
  bin("LessOrEqual", 16, foldBinary<lessEq>, true);
  bin("Greater", 13, foldBinary<greater>, true);
  bin("GreaterOrEqual", 16, foldBinary<greaterEq>, true);
  bin("And", 7, foldBinary<logicAnd>, true);
  bin("Or", 7, foldBinary<logicOr>, true);
  bin("Xor", 7, foldBinary<logicXor>, true);
  bin("Max", 13, foldVariadic<maximum>);
  bin("Min", 13, foldVariadic<minimum>);

  auto un = [&](const char *op, int since, std::vector<ConstPtr> (*fold)(OpContext &)) {
    t.push_back({"", op, since, inferUnary, fold});
  };
  un("Neg", 13, foldUnary<neg>);
  un("Sqrt", 13, foldUnary<sqrtFn>);
  un("Reciprocal", 13, foldUnary<recip>);
  un("Exp", 13, foldUnary<expFn>);
  un("Log", 13, foldUnary<logFn>);
  un("Erf", 13, foldUnary<erfFn>);
  un("Tanh", 13, foldUnary<tanhFn>);
  un("Sigmoid", 13, foldUnary<sigmoid>);
  un("Softplus", 1, foldUnary<softplus>);
  un("Relu", 13, foldUnary<relu>);
  un("Cos", 7, foldUnary<cosFn>);
  un("Sin", 7, foldUnary<sinFn>);
  un("Abs", 13, foldUnary<absFn>);
  un("Floor", 13, foldUnary<floorFn>);
  un("Ceil", 13, foldUnary<ceilFn>);
  un("Identity", 13, foldIdentity);
  un("Clip", 13, foldClip);
  t.push_back({"", "Not", 1, inferPredicateUnary, foldUnary<notFn>});
  t.push_back({"", "IsNaN", 13, inferPredicateUnary, foldUnary<isNan>});
  t.push_back({"", "IsInf", 10, inferIsInf, foldIsInf});
  t.push_back({"", "Where", 9, inferWhere, foldWhere});
  t.push_back({"", "Cast", 13, inferCast, foldCast});
  t.push_back({"", "CastLike", 15, inferCastLike, foldCast});
  t.push_back({"", "Dropout", 13, inferDropout, nullptr});
}

} // namespace mt::onnx_import
