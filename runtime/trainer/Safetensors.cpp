//===- Safetensors.cpp - read and write .safetensors files ----------------===//

#include "runtime/trainer/Safetensors.h"

#include "runtime/exec/Error.h"
#include "runtime/host/Bf16.h"
#include "runtime/trainer/AtomicFile.h"
#include "runtime/trainer/Json.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mtrt {

namespace {

// Larger headers are not something this trainer writes or needs.
constexpr uint64_t kMaxHeaderBytes = uint64_t(256) << 20;

int64_t dtype_bytes(const std::string &dtype) {
  static const std::pair<const char *, int64_t> kSizes[] = {
      {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
      {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
      {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (const auto &s : kSizes)
    if (dtype == s.first)
      return s.second;
  return -1;
}

bool read_at(int fd, void *dst, int64_t bytes, int64_t offset) {
  char *p = static_cast<char *>(dst);
  while (bytes > 0) {
    ssize_t n = ::pread(fd, p, size_t(std::min<int64_t>(bytes, 1 << 30)),
                        off_t(offset));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    p += n;
    bytes -= n;
    offset += n;
  }
  return true;
}

} // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string shape_string(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

SafetensorsReader::SafetensorsReader(const std::string &path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0)
    fail("cannot open ", path, " (", std::strerror(errno), ")");
  struct stat st;
  if (::fstat(fd_, &st) != 0)
    fail("cannot stat ", path, " (", std::strerror(errno), ")");
  const int64_t size = st.st_size;
  unsigned char len_bytes[8];
  if (size < 8 || !read_at(fd_, len_bytes, 8, 0))
    fail("truncated safetensors file: ", size,
         " bytes, shorter than the 8-byte header length (", path, ")");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i)
    header_len = (header_len << 8) | len_bytes[i];
  if (header_len > kMaxHeaderBytes || int64_t(header_len) > size - 8)
    fail("corrupt safetensors file: header length ", header_len,
         " does not fit in the file's ", size, " bytes (", path, ")");
  std::string header(size_t(header_len), '\0');
  if (!read_at(fd_, header.data(), int64_t(header_len), 8))
    fail("cannot read the safetensors header (", path, ")");
  data_start_ = 8 + int64_t(header_len);
  const int64_t data_bytes = size - data_start_;

  JsonValue root;
  try {
    root = parse_json(header);
  } catch (const std::exception &e) {
    fail("corrupt safetensors header: ", e.what(), " (", path, ")");
  }
  if (root.kind != JsonValue::Object)
    fail("corrupt safetensors header: not a JSON object (", path, ")");
  for (const auto &m : root.members) {
    const std::string &name = m.first;
    const JsonValue &v = m.second;
    if (name == "__metadata__") {
      if (v.kind != JsonValue::Object)
        fail("corrupt safetensors header: __metadata__ is not an object (",
             path, ")");
      for (const auto &kv : v.members)
        if (kv.second.kind == JsonValue::String)
          metadata_[kv.first] = kv.second.text;
      continue;
    }
    TensorInfo t;
    t.name = name;
    try {
      const JsonValue *dtype = v.find("dtype");
      const JsonValue *shape = v.find("shape");
      const JsonValue *offsets = v.find("data_offsets");
      if (!dtype || !shape || !offsets || shape->kind != JsonValue::Array ||
          offsets->kind != JsonValue::Array || offsets->items.size() != 2)
        throw std::runtime_error("needs dtype, shape and data_offsets");
      t.dtype = dtype->as_string();
      for (const JsonValue &d : shape->items) {
        t.shape.push_back(d.as_int());
        if (t.shape.back() < 0)
          throw std::runtime_error("negative dim");
      }
      t.begin = offsets->items[0].as_int();
      t.end = offsets->items[1].as_int();
    } catch (const std::exception &e) {
      fail("corrupt safetensors header: tensor '", name, "': ", e.what(), " (",
           path, ")");
    }
    int64_t elem = dtype_bytes(t.dtype);
    if (elem < 0)
      fail("safetensors tensor '", name, "' has unknown dtype ", t.dtype, " (",
           path, ")");
    if (t.begin < 0 || t.end < t.begin || t.end > data_bytes)
      fail("truncated or corrupt safetensors file: tensor '", name,
           "' spans bytes [", t.begin, ", ", t.end, ") of a ", data_bytes,
           "-byte data section (", path, ")");
    if (t.end - t.begin != t.numel() * elem)
      fail("corrupt safetensors file: tensor '", name, "' of shape ",
           shape_string(t.shape), " and dtype ", t.dtype, " needs ",
           t.numel() * elem, " bytes, has ", t.end - t.begin, " (", path, ")");
    tensors_.push_back(std::move(t));
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const TensorInfo &a, const TensorInfo &b) {
              return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
            });
  for (size_t i = 1; i < tensors_.size(); ++i)
    if (tensors_[i].begin < tensors_[i - 1].end)
      fail("corrupt safetensors file: tensors '", tensors_[i - 1].name,
           "' and '", tensors_[i].name, "' overlap (", path, ")");
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0)
    ::close(fd_);
}

const TensorInfo *SafetensorsReader::find(const std::string &name) const {
  for (const TensorInfo &t : tensors_)
    if (t.name == name)
      return &t;
  return nullptr;
}

void SafetensorsReader::read_f32(const std::string &name,
                                 const std::vector<int64_t> &shape, float *dst,
                                 Checksum *checksum) const {
  const TensorInfo *found = find(name);
  if (found && found->dtype == "BF16") {
    read_blocks<uint16_t>(expect(name, shape, "BF16"), checksum,
                          [&](const uint16_t *b, int64_t at, int64_t count) {
                            for (int64_t k = 0; k < count; ++k)
                              dst[at + k] = bf16_widen(b[k]);
                          });
    return;
  }
  const TensorInfo &t = expect(name, shape, "F32");
  if (!read_at(fd_, dst, t.end - t.begin, data_start_ + t.begin))
    fail_read(name);
  if (checksum)
    checksum->update(dst, size_t(t.end - t.begin));
}

void SafetensorsReader::read_bf16(const std::string &name,
                                  const std::vector<int64_t> &shape,
                                  uint16_t *dst, Checksum *checksum) const {
  const TensorInfo *found = find(name);
  if (!found || found->dtype != "F32") {
    const TensorInfo &t = expect(name, shape, "BF16");
    if (!read_at(fd_, dst, t.end - t.begin, data_start_ + t.begin))
      fail_read(name);
    if (checksum)
      checksum->update(dst, size_t(t.end - t.begin));
    return;
  }
  read_blocks<float>(expect(name, shape, "F32"), checksum,
                     [&](const float *b, int64_t at, int64_t count) {
                       for (int64_t k = 0; k < count; ++k)
                         dst[at + k] = bf16_nearest(b[k]);
                     });
}

template <class Stored, class Take>
void SafetensorsReader::read_blocks(const TensorInfo &t, Checksum *checksum,
                                    Take take) const {
  std::vector<Stored> block(size_t(1) << 20);
  const int64_t size = int64_t(sizeof(Stored));
  for (int64_t at = 0, n = t.numel(); at < n;) {
    const int64_t count = std::min<int64_t>(n - at, int64_t(block.size()));
    if (!read_at(fd_, block.data(), count * size,
                 data_start_ + t.begin + at * size))
      fail_read(t.name);
    if (checksum)
      checksum->update(block.data(), size_t(count * size));
    take(block.data(), at, count);
    at += count;
  }
}

const TensorInfo &SafetensorsReader::expect(const std::string &name,
                                            const std::vector<int64_t> &shape,
                                            const char *dtype) const {
  const TensorInfo *t = find(name);
  if (!t)
    fail("tensor '", name, "' is missing (", path_, ")");
  if (t->dtype != dtype)
    fail("tensor '", name, "' is ", t->dtype, ", expected ", dtype, " (", path_,
         ")");
  if (t->shape != shape)
    fail("tensor '", name, "' has shape ", shape_string(t->shape),
         ", expected ", shape_string(shape), " (", path_, ")");
  return *t;
}

void SafetensorsReader::fail_read(const std::string &name) const {
  fail("cannot read tensor '", name, "' (", path_, ": ",
       std::strerror(errno ? errno : EIO), ")");
}

void SafetensorsWriter::add(const std::string &name, std::vector<int64_t> shape,
                            const float *data) {
  entries_.push_back({name, std::move(shape), data, Kind::F32});
}

void SafetensorsWriter::add_bf16(const std::string &name,
                                 std::vector<int64_t> shape,
                                 const uint16_t *data) {
  entries_.push_back({name, std::move(shape), data, Kind::Bf16});
}

void SafetensorsWriter::add_widened(const std::string &name,
                                    std::vector<int64_t> shape,
                                    const uint16_t *data) {
  entries_.push_back({name, std::move(shape), data, Kind::Bf16AsF32});
}

void SafetensorsWriter::set_metadata(const std::string &key,
                                     const std::string &value) {
  metadata_[key] = value;
}

uint64_t SafetensorsWriter::write(const std::string &path) const {
  std::string header = "{";
  bool first = true;
  if (!metadata_.empty()) {
    header += "\"__metadata__\":{";
    for (const auto &kv : metadata_) {
      header += (first ? "" : ",") + json_quote(kv.first) + ":" +
                json_quote(kv.second);
      first = false;
    }
    header += "}";
  }
  int64_t offset = 0;
  for (const Entry &e : entries_) {
    int64_t n = 1;
    for (int64_t d : e.shape)
      n *= d;
    const bool bf16 = e.kind == Kind::Bf16;
    int64_t end = offset + n * (bf16 ? 2 : 4);
    header += (header.size() > 1 ? "," : "") + json_quote(e.name) +
              ":{\"dtype\":\"" + (bf16 ? "BF16" : "F32") + "\",\"shape\":[";
    for (size_t i = 0; i < e.shape.size(); ++i)
      header += (i ? "," : "") + std::to_string(e.shape[i]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(end) + "]}";
    offset = end;
  }
  header += "}";
  while (header.size() % 8)
    header += ' '; // the data starts 8-byte aligned
  unsigned char len[8];
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<unsigned char>(n >> (8 * i));

  AtomicFile file(path);
  file.write(len, 8);
  file.write(header);
  Checksum sum;
  for (const Entry &e : entries_) {
    int64_t count = 1;
    for (int64_t d : e.shape)
      count *= d;
    if (e.kind != Kind::Bf16AsF32) {
      const size_t bytes = size_t(count) * (e.kind == Kind::Bf16 ? 2 : 4);
      file.write(e.data, bytes);
      sum.update(e.data, bytes);
      continue;
    }
    const uint16_t *bits = static_cast<const uint16_t *>(e.data);
    std::vector<uint32_t> block(size_t(1) << 20);
    for (int64_t at = 0; at < count;) {
      const int64_t n = std::min<int64_t>(count - at, int64_t(block.size()));
      for (int64_t k = 0; k < n; ++k)
        block[size_t(k)] = uint32_t(bits[at + k]) << 16;
      file.write(block.data(), size_t(n) * 4);
      sum.update(block.data(), size_t(n) * 4);
      at += n;
    }
  }
  file.commit();
  return sum.digest();
}

} // namespace mtrt
