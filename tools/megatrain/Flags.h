//===- Flags.h - command-line flags of the megatrain driver -----*- C++ -*-===//
//
// `--name value` and `--name=value`, positional arguments, and errors that
// name the flag and the value (`error: --batch: 'x' is not a positive
// integer`). Kept tiny on purpose: the driver has a handful of flags.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_TOOLS_FLAGS_H
#define MEGATRAIN_TOOLS_FLAGS_H

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace mt::driver {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Flags {
public:
  /// `valued` lists flags that take a value, `switches` those that do not;
  /// anything else starting with '-' is an error.
  Flags(const std::vector<std::string> &args,
        const std::vector<std::string> &valued,
        const std::vector<std::string> &switches);

  bool has(const std::string &name) const { return values_.count(name) != 0; }
  std::optional<std::string> get(const std::string &name) const;
  /// Every value of a repeatable flag, in order.
  std::vector<std::string> all(const std::string &name) const;
  std::optional<int64_t> positiveInt(const std::string &name) const;
  /// A number in (0, 1].
  std::optional<double> fraction(const std::string &name) const;
  /// A byte size: a plain number, or with B, KiB, MiB, GiB, TiB, KB, MB, GB.
  std::optional<int64_t> bytes(const std::string &name) const;
  const std::vector<std::string> &positional() const { return positional_; }

private:
  std::multimap<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

/// Parses a byte size like "24GiB"; throws UsageError naming `flag`.
int64_t parseBytes(const std::string &flag, const std::string &text);

} // namespace mt::driver

#endif // MEGATRAIN_TOOLS_FLAGS_H
