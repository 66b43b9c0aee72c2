//===- BackendRegistry.h - backends by name ----------------------*- C++ -*-===//
//
// `--backend NAME` picks an entry here. The CPU backend is always present;
// a CUDA build adds "cuda" (BackendRegistry.cpp, under MEGATRAIN_HAVE_CUDA),
// and tests may register fakes. Conformance tests run on every backend whose
// `available` says yes.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_EXEC_BACKENDREGISTRY_H
#define MEGATRAIN_RUNTIME_EXEC_BACKENDREGISTRY_H

#include "runtime/exec/Backend.h"

#include <memory>
#include <string>
#include <vector>

namespace mtrt {

struct BackendEntry {
  std::string name;
  std::unique_ptr<Backend> (*create)(const BackendOptions &);
  /// Whether this machine can run it; sets *why when not. Null: always.
  bool (*available)(std::string *why);
  bool default_bf16; // the precision this backend runs unless told otherwise
};

void register_backend(BackendEntry entry);
/// Every backend compiled in (or registered), in registration order.
std::vector<BackendEntry> backends();
/// The named backend; throws Error when it is unknown, not compiled in or
/// not available on this machine.
std::unique_ptr<Backend> create_backend(const std::string &name,
                                        const BackendOptions &opts);
/// The entry of a backend compiled in; throws Error like create_backend.
BackendEntry backend_entry(const std::string &name);

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_EXEC_BACKENDREGISTRY_H
