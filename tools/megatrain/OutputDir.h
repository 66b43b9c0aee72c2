//===- OutputDir.h - an output directory that appears whole -----*- C++ -*-===//
#ifndef MEGATRAIN_TOOLS_OUTPUTDIR_H
#define MEGATRAIN_TOOLS_OUTPUTDIR_H

#include <string>

namespace mt::driver {

/// Files are written into a temporary sibling of `path`; commit() swaps it
/// in, replacing a previous megatrain output there (one holding plan.json)
/// and refusing anything else. Destroyed uncommitted, it removes the
/// temporary, so a failed compile leaves `path` as it was.
class OutputDir {
public:
  explicit OutputDir(std::string path);
  ~OutputDir();
  const std::string &staging() const { return staging_; }
  std::string file(const std::string &name) const { return staging_ + "/" + name; }
  void commit();

private:
  std::string path_, staging_;
  bool committed_ = false;
};

} // namespace mt::driver

#endif // MEGATRAIN_TOOLS_OUTPUTDIR_H
