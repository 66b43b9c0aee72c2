//===- Json.h - the little JSON the trainer reads and writes -----*- C++ -*-===//
//
// Safetensors headers and checkpoint manifests: objects, arrays, strings,
// numbers, booleans, null. Numbers keep their text so int64 offsets survive
// exactly. Parse errors throw std::runtime_error with the byte offset; the
// caller wraps them in an Error naming the file.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_TRAINER_JSON_H
#define MEGATRAIN_RUNTIME_TRAINER_JSON_H

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mtrt {

struct JsonValue {
  enum Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Null;
  bool boolean = false;
  std::string text; // String: the value; Number: its literal
  std::vector<JsonValue> items;
  std::vector<std::pair<std::string, JsonValue>> members; // in file order

  const JsonValue *find(const std::string &key) const;
  /// A Number that is an integer in int64 range; throws otherwise.
  int64_t as_int() const;
  double as_double() const;
  const std::string &as_string() const;
};

/// Parses one JSON document (trailing whitespace allowed).
JsonValue parse_json(const std::string &text);

/// "..." with JSON escapes.
std::string json_quote(const std::string &s);
/// Shortest text that reads back as the same double (17 significant digits
/// when needed); non-finite values become null.
std::string json_number(double x);

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_TRAINER_JSON_H
