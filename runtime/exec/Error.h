//===- Error.h - the runtime's one error type --------------------*- C++ -*-===//
//
// Every failure the user can cause (a bad flag, a corrupt file, too little
// memory) is thrown as an Error whose message is the full line to print:
// `error: <what> (<where>)`, with a hint where the fix is obvious. The
// trainer catches it once, prints it and exits non-zero.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_EXEC_ERROR_H
#define MEGATRAIN_RUNTIME_EXEC_ERROR_H

#include <sstream>
#include <stdexcept>
#include <string>

namespace mtrt {

class Error : public std::runtime_error {
public:
  explicit Error(const std::string &line) : std::runtime_error(line) {}
};

/// Throws Error("error: " + the streamed parts).
template <class... Parts> [[noreturn]] void fail(const Parts &...parts) {
  std::ostringstream os;
  os << "error: ";
  (os << ... << parts);
  throw Error(os.str());
}

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_EXEC_ERROR_H
