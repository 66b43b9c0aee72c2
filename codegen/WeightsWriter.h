//===- WeightsWriter.h - initial weights as safetensors ---------*- C++ -*-===//
#ifndef MT_CODEGEN_WEIGHTSWRITER_H
#define MT_CODEGEN_WEIGHTSWRITER_H

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mt {

struct WeightsEntry {
  std::string name;
  std::vector<int64_t> shape;
  /// Writes elements [begin, begin + n) as f32 into out.
  std::function<void(int64_t begin, int64_t n, float *out)> read;
};

/// Streams `entries` into an F32 safetensors file at `path`, converting in
/// chunks so a model larger than memory can be written; returns an error
/// message, empty on success.
std::string writeWeights(const std::string &path,
                         const std::vector<WeightsEntry> &entries);

} // namespace mt

#endif // MT_CODEGEN_WEIGHTSWRITER_H
