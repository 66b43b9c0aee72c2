//===- OnnxFile.h - an ONNX model on disk, with its external data -*- C++ -*-===//
//
// Parses the protobuf (rejecting empty, truncated and non-ONNX files with a
// clear error), checks that every external-data file an initializer names
// exists and is long enough, and maps those files so initializer bytes are
// read on demand instead of copied.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_FRONTEND_ONNXFILE_H
#define MEGATRAIN_FRONTEND_ONNXFILE_H

#include "frontend/DType.h"

#include <onnx/onnx_pb.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mt::onnx_import {

/// A read-only mapping of a whole file.
class MappedFile {
public:
  static std::unique_ptr<MappedFile> open(const std::string &path);
  ~MappedFile();
  const uint8_t *data() const { return data_; }
  int64_t size() const { return size_; }

private:
  MappedFile() = default;
  const uint8_t *data_ = nullptr;
  int64_t size_ = 0;
};

/// Where an initializer's bytes are; `bytes` is null when it carries none.
struct InitializerBytes {
  DType dtype = DType::Undefined;
  std::vector<int64_t> dims;
  int64_t numel = 0;
  const uint8_t *bytes = nullptr; // little-endian elements of dtype
  std::vector<uint8_t> unpacked;  // typed-field data converted to bytes
};

class OnnxFile {
public:
  /// Loads and validates `path`; throws ImportError naming what is wrong.
  static std::unique_ptr<OnnxFile> load(const std::string &path);

  const onnx::ModelProto &model() const { return model_; }
  const onnx::GraphProto &graph() const { return model_.graph(); }
  const std::string &path() const { return path_; }
  /// The opset the model imports for `domain` ("" is ai.onnx); 0 if none.
  int64_t opset(const std::string &domain) const;

  /// The bytes of an initializer of this model (cached).
  const InitializerBytes &initializer(const onnx::TensorProto &t);

private:
  OnnxFile() = default;
  void checkExternalData();
  const MappedFile &mapped(const std::string &location);

  std::string path_, dir_;
  onnx::ModelProto model_;
  std::unique_ptr<MappedFile> self_;
  std::map<std::string, std::unique_ptr<MappedFile>> external_;
  std::map<const onnx::TensorProto *, InitializerBytes> cache_;
};

} // namespace mt::onnx_import

#endif // MEGATRAIN_FRONTEND_ONNXFILE_H
