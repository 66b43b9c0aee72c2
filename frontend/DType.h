//===- DType.h - element types of ONNX tensors ------------------*- C++ -*-===//
#ifndef MEGATRAIN_FRONTEND_DTYPE_H
#define MEGATRAIN_FRONTEND_DTYPE_H

#include <cstdint>
#include <string>

namespace mt::onnx_import {

enum class DType { Undefined, F32, F64, F16, BF16, I64, I32, I16, I8, U8, Bool };

/// Maps onnx::TensorProto::DataType; Undefined for types we never compute on.
DType dtypeFromOnnx(int onnxType);
const char *dtypeName(DType t);
int64_t dtypeSize(DType t);
inline bool isFloat(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::F16 ||
         t == DType::BF16;
}
inline bool isInteger(DType t) {
  return t == DType::I64 || t == DType::I32 || t == DType::I16 ||
         t == DType::I8 || t == DType::U8;
}

} // namespace mt::onnx_import

#endif // MEGATRAIN_FRONTEND_DTYPE_H
