//===- DType.cpp - element types of ONNX tensors --------------------------===//
#include "frontend/DType.h"

#include <onnx/onnx_pb.h>

namespace mt::onnx_import {

DType dtypeFromOnnx(int t) {
  using TP = onnx::TensorProto;
  switch (t) {
  case TP::FLOAT: return DType::F32;
  case TP::DOUBLE: return DType::F64;
  case TP::FLOAT16: return DType::F16;
  case TP::BFLOAT16: return DType::BF16;
  case TP::INT64: return DType::I64;
  case TP::INT32: return DType::I32;
  case TP::INT16: return DType::I16;
  case TP::INT8: return DType::I8;
  case TP::UINT8: return DType::U8;
  case TP::BOOL: return DType::Bool;
  default: return DType::Undefined;
  }
}

const char *dtypeName(DType t) {
  switch (t) {
  case DType::F32: return "f32";
  case DType::F64: return "f64";
  case DType::F16: return "f16";
  case DType::BF16: return "bf16";
  case DType::I64: return "i64";
  case DType::I32: return "i32";
  case DType::I16: return "i16";
  case DType::I8: return "i8";
  case DType::U8: return "u8";
  case DType::Bool: return "bool";
  case DType::Undefined: break;
  }
  return "undefined";
}

int64_t dtypeSize(DType t) {
  switch (t) {
  case DType::F64: case DType::I64: return 8;
  case DType::F32: case DType::I32: return 4;
  case DType::F16: case DType::BF16: case DType::I16: return 2;
  case DType::I8: case DType::U8: case DType::Bool: return 1;
  case DType::Undefined: break;
  }
  return 0;
}

} // namespace mt::onnx_import
