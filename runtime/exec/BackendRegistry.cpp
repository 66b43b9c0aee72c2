//===- BackendRegistry.cpp - backends by name -----------------------------===//

#include "runtime/exec/BackendRegistry.h"

#include "runtime/exec/CpuBackend.h"
#include "runtime/exec/Error.h"

#include <mutex>

namespace mtrt {

#ifdef MEGATRAIN_HAVE_CUDA
// Defined by the CUDA backend's library, linked in when it is built.
BackendEntry cuda_backend_entry();
#endif

namespace {

std::unique_ptr<Backend> create_cpu(const BackendOptions &opts) {
  return std::make_unique<CpuBackend>(opts);
}

struct Registry {
  std::mutex mu;
  std::vector<BackendEntry> entries;
  Registry() {
    entries.push_back({"cpu", create_cpu, nullptr, false});
#ifdef MEGATRAIN_HAVE_CUDA
    entries.push_back(cuda_backend_entry());
#endif
  }
};

Registry &registry() {
  static Registry r;
  return r;
}

} // namespace

void register_backend(BackendEntry entry) {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (BackendEntry &e : r.entries)
    if (e.name == entry.name) {
      e = std::move(entry);
      return;
    }
  r.entries.push_back(std::move(entry));
}

std::vector<BackendEntry> backends() {
  Registry &r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.entries;
}

BackendEntry backend_entry(const std::string &name) {
  std::string names;
  for (const BackendEntry &e : backends()) {
    if (e.name == name) {
      std::string why;
      if (e.available && !e.available(&why))
        fail("--backend ", name, ": not available on this machine (", why,
             ")");
      return e;
    }
    names += (names.empty() ? "" : ", ") + e.name;
  }
  if (name == "cuda")
    fail("--backend cuda: this trainer was built without CUDA (backends: ",
         names, "); rebuild where a CUDA toolkit is found, with "
                "-DMEGATRAIN_ENABLE_CUDA=ON");
  fail("--backend ", name, ": unknown backend (backends: ", names, ")");
}

std::unique_ptr<Backend> create_backend(const std::string &name,
                                        const BackendOptions &opts) {
  return backend_entry(name).create(opts);
}

} // namespace mtrt
