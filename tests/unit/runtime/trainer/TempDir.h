//===- TempDir.h - a scratch directory per test ------------------*- C++ -*-===//
#ifndef MEGATRAIN_TESTS_UNIT_RUNTIME_TRAINER_TEMPDIR_H
#define MEGATRAIN_TESTS_UNIT_RUNTIME_TRAINER_TEMPDIR_H

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace mtrt::testing {

/// mkdtemp under gtest's temp dir; removed (recursively) at the end.
class TempDir {
public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "/mtrt_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    const char *d = ::mkdtemp(buf.data());
    EXPECT_NE(d, nullptr);
    path_ = d ? d : "/tmp";
  }
  ~TempDir() {
    std::string cmd = "rm -rf '" + path_ + "'";
    if (std::system(cmd.c_str()) != 0)
      std::fprintf(stderr, "could not remove %s\n", path_.c_str());
  }
  std::string operator/(const std::string &name) const {
    return path_ + "/" + name;
  }
  const std::string &path() const { return path_; }

private:
  std::string path_;
};

inline void write_bytes(const std::string &path, const void *data,
                        size_t bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char *>(data), std::streamsize(bytes));
}

inline std::string read_text(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline bool exists(const std::string &path) {
  std::ifstream f(path);
  return f.good();
}

} // namespace mtrt::testing

#endif
