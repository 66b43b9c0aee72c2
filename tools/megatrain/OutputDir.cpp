//===- OutputDir.cpp - an output directory that appears whole -------------===//
#include "tools/megatrain/OutputDir.h"

#include "frontend/Error.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Process.h"

namespace fs = llvm::sys::fs;

namespace mt::driver {

OutputDir::OutputDir(std::string path) : path_(std::move(path)) {
  while (path_.size() > 1 && path_.back() == '/')
    path_.pop_back();
  if (fs::exists(path_) && !fs::exists(path_ + "/plan.json"))
    onnx_import::fail("-o {}: the directory exists and is not a megatrain "
                      "output (no plan.json); refusing to overwrite it",
                      path_);
  staging_ = path_ + ".tmp." + std::to_string(llvm::sys::Process::getProcessId());
  fs::remove_directories(staging_);
  if (std::error_code ec = fs::create_directories(staging_))
    onnx_import::fail("-o {}: cannot create '{}': {}", path_, staging_,
                      ec.message());
}

OutputDir::~OutputDir() {
  if (!committed_)
    fs::remove_directories(staging_);
}

void OutputDir::commit() {
  std::string old = path_ + ".old." + std::to_string(llvm::sys::Process::getProcessId());
  bool replacing = fs::exists(path_);
  if (replacing)
    if (std::error_code ec = fs::rename(path_, old))
      onnx_import::fail("-o {}: cannot move the previous output aside: {}",
                        path_, ec.message());
  if (std::error_code ec = fs::rename(staging_, path_)) {
    if (replacing)
      fs::rename(old, path_);
    onnx_import::fail("-o {}: cannot move the new output in place: {}", path_,
                      ec.message());
  }
  committed_ = true;
  if (replacing)
    fs::remove_directories(old);
}

} // namespace mt::driver
