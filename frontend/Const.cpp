//===- Const.cpp - compile-time constant tensors --------------------------===//
#include "frontend/Const.h"

#include "frontend/Error.h"
#include "frontend/OnnxFile.h"

#include <cmath>
#include <cstring>

namespace mt::onnx_import {

int64_t numelOf(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string shapeStr(const Shape &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

class DenseConst final : public Const {
public:
  DenseConst(DType dtype, Shape shape, std::vector<double> values)
      : Const(dtype, std::move(shape)), values_(std::move(values)) {}
  double at(int64_t i) const override { return values_[i]; }

private:
  std::vector<double> values_;
};

class LazyConst final : public Const {
public:
  LazyConst(DType dtype, Shape shape, std::function<double(int64_t)> fn)
      : Const(dtype, std::move(shape)), fn_(std::move(fn)) {}
  double at(int64_t i) const override { return fn_(i); }

private:
  std::function<double(int64_t)> fn_;
};

float halfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { // subnormal: renormalize
      exp = 127 - 15 + 1;
      while (!(man & 0x400)) {
        man <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

class InitializerConst final : public Const {
public:
  InitializerConst(const InitializerBytes &b)
      : Const(b.dtype, b.dims), bytes_(b.bytes) {}
  double at(int64_t i) const override {
    const uint8_t *p = bytes_ + i * dtypeSize(dtype);
    switch (dtype) {
    case DType::F32: return load<float>(p);
    case DType::F64: return load<double>(p);
    case DType::F16: return halfToFloat(load<uint16_t>(p));
    case DType::BF16: {
      uint32_t bits = uint32_t(load<uint16_t>(p)) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case DType::I64: return double(load<int64_t>(p));
    case DType::I32: return load<int32_t>(p);
    case DType::I16: return load<int16_t>(p);
    case DType::I8: return load<int8_t>(p);
    case DType::U8: return load<uint8_t>(p);
    case DType::Bool: return *p ? 1.0 : 0.0;
    case DType::Undefined: break;
    }
    return 0;
  }

private:
  template <typename T> static T load(const uint8_t *p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
  }
  const uint8_t *bytes_;
};

} // namespace

ConstPtr denseConst(DType dtype, Shape shape, std::vector<double> values) {
  return std::make_shared<DenseConst>(dtype, std::move(shape),
                                      std::move(values));
}

ConstPtr scalarConst(DType dtype, double value) {
  return denseConst(dtype, {}, {value});
}

ConstPtr lazyConst(DType dtype, Shape shape,
                   std::function<double(int64_t)> fn) {
  int64_t n = numelOf(shape);
  if (n > kMaterializeLimit)
    return std::make_shared<LazyConst>(dtype, std::move(shape), std::move(fn));
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i)
    values[i] = fn(i);
  return denseConst(dtype, std::move(shape), std::move(values));
}

ConstPtr initializerConst(const InitializerBytes &b) {
  if (!b.bytes || b.dtype == DType::Undefined)
    return nullptr;
  return std::make_shared<InitializerConst>(b);
}

int64_t toInt(double v) {
  if (v >= 9.2e18)
    return INT64_MAX;
  if (v <= -9.2e18)
    return INT64_MIN;
  return static_cast<int64_t>(v);
}

bool sameValues(const Const &a, const Const &b) {
  if (a.numel != b.numel)
    return false;
  for (int64_t i = 0; i < a.numel; ++i)
    if (a.at(i) != b.at(i))
      return false;
  return true;
}

std::vector<int64_t> toInts(const Const &c) {
  if (c.numel > (int64_t(1) << 20))
    fail("a {}-element constant is used where a shape or index list is "
         "expected",
         c.numel);
  std::vector<int64_t> out(c.numel);
  for (int64_t i = 0; i < c.numel; ++i) {
    double v = c.at(i);
    if (v != std::floor(v))
      fail("constant value {} is not an integer where one is expected", v);
    out[i] = toInt(v);
  }
  return out;
}

BroadcastIndex::BroadcastIndex(const Shape &out, const Shape &in)
    : out_(out), inStride_(out.size(), 0) {
  int64_t stride = 1;
  size_t offset = out.size() - in.size();
  for (size_t k = in.size(); k-- > 0;) {
    if (in[k] != 1)
      inStride_[k + offset] = stride;
    stride *= in[k];
  }
}

int64_t BroadcastIndex::operator()(int64_t outIndex) const {
  int64_t in = 0;
  for (size_t k = out_.size(); k-- > 0;) {
    int64_t coord = outIndex % out_[k];
    outIndex /= out_[k];
    in += coord * inStride_[k];
  }
  return in;
}

bool broadcastShapes(const Shape &a, const Shape &b, Shape &out) {
  size_t rank = std::max(a.size(), b.size());
  out.assign(rank, 1);
  for (size_t k = 0; k < rank; ++k) {
    int64_t da = k < rank - a.size() ? 1 : a[k - (rank - a.size())];
    int64_t db = k < rank - b.size() ? 1 : b[k - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return false;
    out[k] = da == 1 ? db : da;
  }
  return true;
}

void unravel(int64_t flat, const Shape &shape, std::vector<int64_t> &coord) {
  coord.resize(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    coord[k] = flat % shape[k];
    flat /= shape[k];
  }
}

int64_t ravel(const std::vector<int64_t> &coord, const Shape &shape) {
  int64_t flat = 0;
  for (size_t k = 0; k < shape.size(); ++k)
    flat = flat * shape[k] + coord[k];
  return flat;
}

} // namespace mt::onnx_import
