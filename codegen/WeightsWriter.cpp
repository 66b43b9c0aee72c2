//===- WeightsWriter.cpp - initial weights as safetensors -----------------===//
#include "codegen/WeightsWriter.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace mt {

std::string writeWeights(const std::string &path,
                         const std::vector<WeightsEntry> &entries) {
  // Header: names to dtype, shape and [begin, end) byte offsets.
  std::string header = "{";
  int64_t offset = 0;
  for (const WeightsEntry &e : entries) {
    int64_t n = 1;
    std::string shape = "[";
    for (size_t k = 0; k < e.shape.size(); ++k) {
      n *= e.shape[k];
      shape += (k ? "," : "") + std::to_string(e.shape[k]);
    }
    shape += "]";
    if (header.size() > 1)
      header += ",";
    header += "\"" + e.name + "\":{\"dtype\":\"F32\",\"shape\":" + shape +
              ",\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + 4 * n) + "]}";
    offset += 4 * n;
  }
  header += "}";
  while (header.size() % 8) // keeps the data 8-byte aligned
    header += ' ';

  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    return "cannot write '" + path + "': " + std::strerror(errno);
  uint64_t len = header.size();
  bool ok = std::fwrite(&len, 8, 1, f) == 1 &&
            std::fwrite(header.data(), 1, header.size(), f) == header.size();
  std::vector<float> chunk(1 << 20);
  for (const WeightsEntry &e : entries) {
    int64_t n = 1;
    for (int64_t d : e.shape)
      n *= d;
    for (int64_t at = 0; ok && at < n; at += chunk.size()) {
      int64_t count = std::min<int64_t>(chunk.size(), n - at);
      e.read(at, count, chunk.data());
      ok = std::fwrite(chunk.data(), 4, count, f) == size_t(count);
    }
  }
  ok &= std::fflush(f) == 0;
  ok &= std::fclose(f) == 0;
  if (!ok)
    return "cannot write '" + path + "': " + std::strerror(errno);
  return "";
}

} // namespace mt
