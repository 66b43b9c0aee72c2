//===- Ties.cpp - tied weights across initializers ------------------------===//
#include "frontend/Ties.h"

#include <cstring>
#include <optional>

namespace mt::onnx_import {
namespace {

bool sameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Element-by-element bitwise equality, stopping at the first difference
// (random weights differ at once; only real ties are read in full).
bool sameData(const Const &a, const Const &b, bool transposed) {
  if (!transposed) {
    for (int64_t i = 0; i < a.numel; ++i)
      if (!sameBits(a.at(i), b.at(i)))
        return false;
    return true;
  }
  int64_t rows = a.shape[0], cols = a.shape[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      if (!sameBits(a.at(r * cols + c), b.at(c * rows + r)))
        return false;
  return true;
}

// A tensor whose elements are all equal (ones, zeros) matches every other
// one of its shape; equality says nothing about ties then.
bool uniform(const Const &c) {
  for (int64_t i = 1; i < c.numel; ++i)
    if (!sameBits(c.at(i), c.at(0)))
      return false;
  return true;
}

} // namespace

std::map<Value *, Tie> findTies(const std::vector<Value *> &params) {
  std::map<Value *, Tie> ties;
  for (size_t j = 0; j < params.size(); ++j) {
    Value *later = params[j];
    if (!later->constant)
      continue;
    for (size_t i = 0; i < j; ++i) {
      Value *earlier = params[i];
      if (!earlier->constant || ties.count(earlier) ||
          earlier->dtype != later->dtype)
        continue;
      const Shape &a = earlier->shape, &b = later->shape;
      std::optional<bool> transposed;
      if (a == b && sameData(*earlier->constant, *later->constant, false))
        transposed = false;
      else if (a.size() == 2 && b == Shape{a[1], a[0]} &&
               sameData(*earlier->constant, *later->constant, true))
        transposed = true;
      if (transposed && !uniform(*later->constant)) {
        ties[later] = {earlier, *transposed};
        break;
      }
    }
  }
  return ties;
}

} // namespace mt::onnx_import
