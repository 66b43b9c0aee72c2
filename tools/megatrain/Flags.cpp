//===- Flags.cpp - command-line flags of the megatrain driver -------------===//
#include "tools/megatrain/Flags.h"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace mt::driver {

Flags::Flags(const std::vector<std::string> &args,
             const std::vector<std::string> &valued,
             const std::vector<std::string> &switches) {
  auto in = [](const std::vector<std::string> &set, const std::string &s) {
    return std::find(set.begin(), set.end(), s) != set.end();
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    if (a.size() < 2 || a[0] != '-' || a == "-") {
      positional_.push_back(a);
      continue;
    }
    std::string name = a, value;
    bool inlineValue = false;
    if (auto eq = a.find('='); eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      inlineValue = true;
    }
    if (in(switches, name)) {
      if (inlineValue)
        throw UsageError(name + " takes no value");
      values_.emplace(name, "");
    } else if (in(valued, name)) {
      if (!inlineValue) {
        if (i + 1 >= args.size())
          throw UsageError(name + " needs a value");
        value = args[++i];
      }
      values_.emplace(name, value);
    } else {
      throw UsageError("unknown flag '" + name + "' (see --help)");
    }
  }
}

std::optional<std::string> Flags::get(const std::string &name) const {
  auto range = values_.equal_range(name);
  if (range.first == range.second)
    return std::nullopt;
  return std::prev(range.second)->second; // the last one wins
}

std::vector<std::string> Flags::all(const std::string &name) const {
  std::vector<std::string> out;
  auto range = values_.equal_range(name);
  for (auto it = range.first; it != range.second; ++it)
    out.push_back(it->second);
  return out;
}

std::optional<int64_t> Flags::positiveInt(const std::string &name) const {
  auto v = get(name);
  if (!v)
    return std::nullopt;
  size_t used = 0;
  long long n = 0;
  try {
    n = std::stoll(*v, &used);
  } catch (const std::exception &) {
    used = 0;
  }
  if (used != v->size() || n <= 0)
    throw UsageError(name + ": '" + *v + "' is not a positive integer");
  return n;
}

std::optional<double> Flags::fraction(const std::string &name) const {
  auto v = get(name);
  if (!v)
    return std::nullopt;
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(*v, &used);
  } catch (const std::exception &) {
    used = 0;
  }
  if (used == 0 || used != v->size() || !(x > 0 && x <= 1))
    throw UsageError(name + ": '" + *v + "' is not a fraction in (0, 1]");
  return x;
}

std::optional<int64_t> Flags::bytes(const std::string &name) const {
  auto v = get(name);
  if (!v)
    return std::nullopt;
  return parseBytes(name, *v);
}

int64_t parseBytes(const std::string &flag, const std::string &text) {
  size_t used = 0;
  double n = 0;
  try {
    n = std::stod(text, &used);
  } catch (const std::exception &) {
    used = 0;
  }
  std::string unit = text.substr(used);
  static const std::pair<const char *, double> units[] = {
      {"", 1},         {"B", 1},          {"KiB", 1024.0},
      {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1099511627776.0},
      {"KB", 1e3},     {"MB", 1e6},       {"GB", 1e9},
      {"TB", 1e12}};
  for (auto [u, scale] : units)
    if (used > 0 && unit == u && n > 0 && std::isfinite(n))
      return static_cast<int64_t>(n * scale);
  throw UsageError(flag + ": '" + text +
                   "' is not a size (examples: 24GiB, 512MiB, 80GB)");
}

} // namespace mt::driver
