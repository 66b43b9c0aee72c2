//===- Error.h - import errors ----------------------------------*- C++ -*-===//
//
// The importer reports every problem with the input as an ImportError whose
// message names the culprit (node, op type and opset; file and offset; flag).
// It is thrown deep inside handlers and caught once at the driver, which
// prints `error: <message>` and exits non-zero: bad input never crashes.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_FRONTEND_ERROR_H
#define MEGATRAIN_FRONTEND_ERROR_H

#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace mt::onnx_import {

struct ImportError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args &&...args) {
  throw ImportError(fmt::format(format, std::forward<Args>(args)...));
}

} // namespace mt::onnx_import

#endif // MEGATRAIN_FRONTEND_ERROR_H
