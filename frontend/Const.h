//===- Const.h - compile-time constant tensors ------------------*- C++ -*-===//
//
// Shapes, masks, RoPE tables and scalars that an export computes in-graph are
// folded into Consts. Small ones are materialized; large ones (a causal mask
// at a 32K context is 10^9 elements) stay lazy: each element is computed from
// its inputs when asked, so a mask can be checked row by row without ever
// being built. Values are doubles, exact for every integer an export uses.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_FRONTEND_CONST_H
#define MEGATRAIN_FRONTEND_CONST_H

#include "frontend/DType.h"

#include <functional>
#include <memory>
#include <vector>

namespace mt::onnx_import {

struct InitializerBytes;
using Shape = std::vector<int64_t>;

int64_t numelOf(const Shape &shape);
std::string shapeStr(const Shape &shape);

class Const {
public:
  Const(DType dtype, Shape shape)
      : dtype(dtype), shape(std::move(shape)), numel(numelOf(this->shape)) {}
  virtual ~Const() = default;
  /// The element at row-major flat index i.
  virtual double at(int64_t i) const = 0;

  const DType dtype;
  const Shape shape;
  const int64_t numel;
};
using ConstPtr = std::shared_ptr<const Const>;

/// Constants of up to this many elements are computed eagerly and stored.
constexpr int64_t kMaterializeLimit = int64_t(1) << 22;

ConstPtr denseConst(DType dtype, Shape shape, std::vector<double> values);
ConstPtr scalarConst(DType dtype, double value);
/// A constant whose element i is fn(i); stored at once when small.
ConstPtr lazyConst(DType dtype, Shape shape, std::function<double(int64_t)> fn);
/// The initializer's data as a Const; null when it carries none.
ConstPtr initializerConst(const InitializerBytes &bytes);

/// Whether a and b hold the same elements (of equal counts).
bool sameValues(const Const &a, const Const &b);

/// All elements as integers (for shapes, axes, indices); throws on a
/// non-integral value or a tensor too large to be a shape.
std::vector<int64_t> toInts(const Const &c);
/// Saturating conversion of a folded value to int64.
int64_t toInt(double v);

/// Row-major coordinates of a flat index, and back.
void unravel(int64_t flat, const Shape &shape, std::vector<int64_t> &coord);
int64_t ravel(const std::vector<int64_t> &coord, const Shape &shape);

/// Maps flat indices of a broadcast result to flat indices of one operand
/// (NumPy rules, right-aligned).
class BroadcastIndex {
public:
  BroadcastIndex(const Shape &out, const Shape &in);
  int64_t operator()(int64_t outIndex) const;

private:
  Shape out_;
  std::vector<int64_t> inStride_; // 0 on broadcast dims
};

/// The NumPy broadcast of two shapes; false if they do not broadcast.
bool broadcastShapes(const Shape &a, const Shape &b, Shape &out);

} // namespace mt::onnx_import

#endif // MEGATRAIN_FRONTEND_CONST_H
