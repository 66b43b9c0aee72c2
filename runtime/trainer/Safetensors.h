//===- Safetensors.h - read and write .safetensors files ---------*- C++
//-*-===//
//
// The format: an 8-byte little-endian header length N, N bytes of JSON
// mapping each tensor name to {"dtype", "shape", "data_offsets": [begin,
// end]} (offsets into the data after the header) plus an optional
// "__metadata__" object of strings, then the data. The trainer writes F32
// and BF16; the reader validates the whole header up front (truncation,
// offsets out of range or overlapping, sizes that disagree with shape and
// dtype) and reads F32 and BF16 tensors.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_TRAINER_SAFETENSORS_H
#define MEGATRAIN_RUNTIME_TRAINER_SAFETENSORS_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mtrt {

class Checksum;

struct TensorInfo {
  std::string name;
  std::string dtype; // "F32", "BF16", ...
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0; // byte offsets in the data section
  int64_t numel() const;
};

class SafetensorsReader {
public:
  /// Opens and validates; throws Error naming the file and the problem.
  explicit SafetensorsReader(const std::string &path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader &) = delete;
  SafetensorsReader &operator=(const SafetensorsReader &) = delete;

  const std::string &path() const { return path_; }
  /// In data order.
  const std::vector<TensorInfo> &tensors() const { return tensors_; }
  const TensorInfo *find(const std::string &name) const;
  const std::map<std::string, std::string> &metadata() const {
    return metadata_;
  }
  /// Reads an F32 tensor of exactly `shape` into dst, or a BF16 one widened
  /// (exactly); throws Error when it is missing, of another dtype or shape,
  /// or the read fails. Feeds the file's bytes to `checksum` when given.
  void read_f32(const std::string &name, const std::vector<int64_t> &shape,
                float *dst, Checksum *checksum = nullptr) const;
  /// Reads a BF16 tensor as it is, or an F32 one rounded to nearest even,
  /// into dst as bf16 bits; otherwise as read_f32. The checksum sees the
  /// file's bytes.
  void read_bf16(const std::string &name, const std::vector<int64_t> &shape,
                 uint16_t *dst, Checksum *checksum = nullptr) const;

private:
  /// The tensor `name`, checked to be of `dtype` and `shape`.
  const TensorInfo &expect(const std::string &name,
                           const std::vector<int64_t> &shape,
                           const char *dtype) const;
  [[noreturn]] void fail_read(const std::string &name) const;
  /// Reads tensor t, stored as `Stored`, in blocks (so a tensor read into
  /// another type never needs a full-size buffer of its own), feeding the
  /// file's bytes to `checksum` and each block to take(block, first, count).
  template <class Stored, class Take>
  void read_blocks(const TensorInfo &t, Checksum *checksum, Take take) const;

  std::string path_;
  int fd_ = -1;
  int64_t data_start_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

class SafetensorsWriter {
public:
  /// Adds an F32 tensor; `data` must stay valid until write().
  void add(const std::string &name, std::vector<int64_t> shape,
           const float *data);
  /// Adds a BF16 tensor from bf16 bits.
  void add_bf16(const std::string &name, std::vector<int64_t> shape,
                const uint16_t *data);
  /// Adds an F32 tensor from bf16 bits, widened (exactly) as it is written.
  void add_widened(const std::string &name, std::vector<int64_t> shape,
                   const uint16_t *data);
  void set_metadata(const std::string &key, const std::string &value);
  /// Writes the file atomically (AtomicFile); throws Error. Returns the
  /// Checksum of the data section (tensors in order).
  uint64_t write(const std::string &path) const;

private:
  enum class Kind : uint8_t { F32, Bf16, Bf16AsF32 };
  struct Entry {
    std::string name;
    std::vector<int64_t> shape;
    const void *data;
    Kind kind;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

std::string shape_string(const std::vector<int64_t> &shape);

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_TRAINER_SAFETENSORS_H
