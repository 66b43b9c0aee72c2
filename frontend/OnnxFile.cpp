//===- OnnxFile.cpp - an ONNX model on disk, with its external data -------===//
#include "frontend/OnnxFile.h"

#include "frontend/Error.h"

#include <google/protobuf/io/coded_stream.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mt::onnx_import {

std::unique_ptr<MappedFile> MappedFile::open(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    fail("cannot open '{}': {}", path, std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("'{}' is not a regular file", path);
  }
  std::unique_ptr<MappedFile> f(new MappedFile);
  f->size_ = st.st_size;
  if (f->size_ > 0) {
    void *p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      fail("cannot map '{}': {}", path, std::strerror(errno));
    }
    f->data_ = static_cast<const uint8_t *>(p);
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (data_)
    munmap(const_cast<uint8_t *>(data_), size_);
}

std::unique_ptr<OnnxFile> OnnxFile::load(const std::string &path) {
  std::unique_ptr<OnnxFile> f(new OnnxFile);
  f->path_ = path;
  auto slash = path.find_last_of('/');
  f->dir_ = slash == std::string::npos ? "." : path.substr(0, slash);
  f->self_ = MappedFile::open(path);
  if (f->self_->size() == 0)
    fail("'{}' is empty, not an ONNX model", path);
  if (f->self_->size() > INT32_MAX)
    fail("'{}' is over 2 GiB; ONNX keeps weights this large in external "
         "data files",
         path);
  google::protobuf::io::CodedInputStream in(f->self_->data(),
                                            static_cast<int>(f->self_->size()));
  in.SetTotalBytesLimit(INT32_MAX);
  if (!f->model_.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
    fail("'{}' is not a valid ONNX model (the protobuf does not parse: "
         "truncated or not ONNX)",
         path);
  const auto &m = f->model_;
  if (m.ir_version() <= 0 || !m.has_graph() || m.opset_import_size() == 0)
    fail("'{}' is not an ONNX model (no IR version, graph or opset import)",
         path);
  if (m.graph().node_size() == 0 || m.graph().output_size() == 0)
    fail("'{}' has an empty graph (no nodes or no outputs)", path);
  f->checkExternalData();
  return f;
}

int64_t OnnxFile::opset(const std::string &domain) const {
  for (const auto &op : model_.opset_import())
    if (op.domain() == domain || (domain.empty() && op.domain() == "ai.onnx"))
      return op.version();
  return 0;
}

namespace {

struct ExternalRef {
  std::string location;
  int64_t offset = 0, length = -1;
};

ExternalRef externalRef(const onnx::TensorProto &t) {
  ExternalRef r;
  for (const auto &kv : t.external_data()) {
    try {
      if (kv.key() == "location")
        r.location = kv.value();
      else if (kv.key() == "offset")
        r.offset = std::stoll(kv.value());
      else if (kv.key() == "length")
        r.length = std::stoll(kv.value());
    } catch (const std::exception &) {
      fail("initializer '{}' has a malformed external_data {} '{}'", t.name(),
           kv.key(), kv.value());
    }
  }
  if (r.location.empty())
    fail("initializer '{}' has external data without a location", t.name());
  return r;
}

int64_t numelOf(const onnx::TensorProto &t) {
  int64_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0)
      fail("initializer '{}' has a negative dim {}", t.name(), d);
    n *= d;
  }
  return n;
}

} // namespace

const MappedFile &OnnxFile::mapped(const std::string &location) {
  auto &slot = external_[location];
  if (!slot) {
    if (location.empty() || location[0] == '/' ||
        location.find("..") != std::string::npos)
      fail("external data location '{}' must be a relative path inside the "
           "model's folder",
           location);
    slot = MappedFile::open(dir_ + "/" + location);
  }
  return *slot;
}

void OnnxFile::checkExternalData() {
  for (const auto &t : graph().initializer()) {
    if (t.data_location() != onnx::TensorProto::EXTERNAL)
      continue;
    ExternalRef r = externalRef(t);
    const MappedFile *file;
    try {
      file = &mapped(r.location);
    } catch (const ImportError &e) {
      fail("initializer '{}': missing external data file '{}/{}' ({})",
           t.name(), dir_, r.location, e.what());
    }
    int64_t need = numelOf(t) * dtypeSize(dtypeFromOnnx(t.data_type()));
    if (r.length >= 0 && r.length != need)
      fail("initializer '{}': external data length {} does not match its "
           "{} bytes of shape",
           t.name(), r.length, need);
    if (r.offset < 0 || r.offset + need > file->size())
      fail("initializer '{}': external data '{}' is truncated (needs bytes "
           "{}..{}, file has {})",
           t.name(), r.location, r.offset, r.offset + need, file->size());
  }
}

const InitializerBytes &OnnxFile::initializer(const onnx::TensorProto &t) {
  auto it = cache_.find(&t);
  if (it != cache_.end())
    return it->second;
  InitializerBytes &b = cache_[&t];
  b.dtype = dtypeFromOnnx(t.data_type());
  b.dims.assign(t.dims().begin(), t.dims().end());
  b.numel = numelOf(t);
  int64_t esize = dtypeSize(b.dtype);
  if (b.dtype == DType::Undefined)
    return b; // a type we never compute on; its users will report it
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    ExternalRef r = externalRef(t);
    b.bytes = mapped(r.location).data() + r.offset;
    return b;
  }
  if (t.has_raw_data()) {
    if (static_cast<int64_t>(t.raw_data().size()) != b.numel * esize)
      fail("initializer '{}' has {} bytes of raw data, its shape needs {}",
           t.name(), t.raw_data().size(), b.numel * esize);
    b.bytes = reinterpret_cast<const uint8_t *>(t.raw_data().data());
    return b;
  }
  // Typed fields: float_data, int64_data, double_data, or int32_data (which
  // also carries 8/16-bit ints, bool, f16 and bf16 bit patterns).
  int64_t total = t.float_data_size() + t.int64_data_size() +
                  t.double_data_size() + t.int32_data_size();
  if (total == 0)
    return b; // declared without data: a structure-only model
  int64_t have = b.dtype == DType::F32   ? t.float_data_size()
                 : b.dtype == DType::F64 ? t.double_data_size()
                 : b.dtype == DType::I64 ? t.int64_data_size()
                                         : t.int32_data_size();
  if (have != b.numel || total != have)
    fail("initializer '{}' ({}) carries {} values in its typed fields, its "
         "shape needs {}",
         t.name(), dtypeName(b.dtype), total, b.numel);
  b.unpacked.resize(b.numel * esize);
  uint8_t *out = b.unpacked.data();
  for (int64_t i = 0; i < b.numel; ++i) {
    switch (b.dtype) {
    case DType::F32: std::memcpy(out + 4 * i, &t.float_data()[i], 4); break;
    case DType::F64: std::memcpy(out + 8 * i, &t.double_data()[i], 8); break;
    case DType::I64: std::memcpy(out + 8 * i, &t.int64_data()[i], 8); break;
    default: {
      int32_t v = t.int32_data()[i];
      std::memcpy(out + esize * i, &v, esize); // little-endian low bytes
    }
    }
  }
  b.bytes = b.unpacked.data();
  return b;
}

} // namespace mt::onnx_import
