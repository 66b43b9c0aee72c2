//===- ExportOnnx.cpp - megatrain export-onnx -----------------------------===//
//
// Writes a copy of the exported model with its initializers replaced by
// trained weights (a trainer's --export safetensors, keyed by initializer
// name), converted back to each initializer's element type. Initializers the
// weights do not name (buffers such as RoPE inv_freq) are kept. Models over
// 1.5 GiB put their data in an external file beside the copy, as ONNX
// requires past 2 GiB.
//
//===----------------------------------------------------------------------===//
#include "tools/megatrain/Commands.h"
#include "tools/megatrain/Flags.h"

#include "frontend/Error.h"
#include "frontend/OnnxFile.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"

#include <cstring>
#include <fstream>
#include <map>

namespace mt::driver {
namespace {

using onnx_import::fail;

struct StoredTensor {
  std::vector<int64_t> shape;
  const float *data = nullptr;
};

std::map<std::string, StoredTensor>
readSafetensors(const onnx_import::MappedFile &file, const std::string &path) {
  if (file.size() < 8)
    fail("'{}' is not a safetensors file (too short)", path);
  uint64_t headerLen;
  std::memcpy(&headerLen, file.data(), 8);
  if (headerLen > uint64_t(file.size() - 8))
    fail("'{}' is truncated (header of {} bytes)", path, headerLen);
  llvm::Expected<llvm::json::Value> header = llvm::json::parse(
      llvm::StringRef(reinterpret_cast<const char *>(file.data() + 8), headerLen));
  if (!header || !header->getAsObject())
    fail("'{}' has a malformed header", path);
  const uint8_t *data = file.data() + 8 + headerLen;
  int64_t dataBytes = file.size() - 8 - int64_t(headerLen);
  std::map<std::string, StoredTensor> out;
  for (const auto &kv : *header->getAsObject()) {
    if (kv.first == "__metadata__")
      continue;
    const llvm::json::Object *t = kv.second.getAsObject();
    const llvm::json::Array *shape = t ? t->getArray("shape") : nullptr;
    const llvm::json::Array *offsets = t ? t->getArray("data_offsets") : nullptr;
    if (!t || t->getString("dtype") != "F32" || !shape || !offsets ||
        offsets->size() != 2)
      fail("'{}': tensor '{}' is not an F32 tensor with shape and offsets",
           path, kv.first.str());
    StoredTensor st;
    int64_t numel = 1;
    for (const llvm::json::Value &d : *shape) {
      st.shape.push_back(d.getAsInteger().value_or(-1));
      numel *= st.shape.back();
    }
    int64_t begin = (*offsets)[0].getAsInteger().value_or(-1),
            end = (*offsets)[1].getAsInteger().value_or(-1);
    if (begin < 0 || end != begin + 4 * numel || end > dataBytes)
      fail("'{}': tensor '{}' has bad data offsets", path, kv.first.str());
    st.data = reinterpret_cast<const float *>(data + begin);
    out[kv.first.str()] = st;
  }
  return out;
}

uint16_t toHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  int32_t exp = int32_t((x >> 23) & 0xff) - 127 + 15;
  uint32_t man = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) // inf or nan
    return uint16_t(sign | 0x7c00u | (man ? 0x200u : 0));
  if (exp >= 31)
    return uint16_t(sign | 0x7c00u);
  if (exp <= 0) { // subnormal or zero
    if (exp < -10)
      return uint16_t(sign);
    man |= 0x800000u;
    uint32_t shift = uint32_t(14 - exp);
    uint32_t half = man >> shift;
    uint32_t rest = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rest > mid || (rest == mid && (half & 1)))
      ++half;
    return uint16_t(sign | half);
  }
  uint32_t half = sign | (uint32_t(exp) << 10) | (man >> 13);
  uint32_t rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1)))
    ++half; // may carry into the exponent, which is right
  return uint16_t(half);
}

uint16_t toBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((x >> 16) | 0x40);
  x += 0x7fffu + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

// The trained values in the initializer's own element type.
std::string encode(const StoredTensor &t, int64_t numel, int dataType,
                   const std::string &name) {
  using TP = onnx::TensorProto;
  std::string bytes;
  switch (dataType) {
  case TP::FLOAT:
    bytes.assign(reinterpret_cast<const char *>(t.data), 4 * numel);
    break;
  case TP::DOUBLE:
    bytes.resize(8 * numel);
    for (int64_t i = 0; i < numel; ++i) {
      double v = t.data[i];
      std::memcpy(&bytes[8 * i], &v, 8);
    }
    break;
  case TP::FLOAT16:
  case TP::BFLOAT16:
    bytes.resize(2 * numel);
    for (int64_t i = 0; i < numel; ++i) {
      uint16_t v = dataType == TP::FLOAT16 ? toHalf(t.data[i]) : toBf16(t.data[i]);
      std::memcpy(&bytes[2 * i], &v, 2);
    }
    break;
  default:
    fail("initializer '{}' has a non-float type; the weights cannot replace it",
         name);
  }
  return bytes;
}

const char *kUsage = R"(usage: megatrain export-onnx MODEL.onnx WEIGHTS.safetensors -o OUT.onnx

Writes a copy of MODEL.onnx whose initializers hold the trained weights a
trainer wrote with --export WEIGHTS.safetensors.
)";

} // namespace

int runExportOnnx(const std::vector<std::string> &args) {
  Flags flags(args, {"-o"}, {"--help"});
  if (flags.has("--help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::optional<std::string> out = flags.get("-o");
  if (flags.positional().size() != 2 || !out)
    throw UsageError("export-onnx takes MODEL.onnx WEIGHTS.safetensors -o OUT.onnx");
  const std::string &modelPath = flags.positional()[0],
                    &weightsPath = flags.positional()[1];
  std::unique_ptr<onnx_import::OnnxFile> file =
      onnx_import::OnnxFile::load(modelPath);
  std::unique_ptr<onnx_import::MappedFile> weightsFile =
      onnx_import::MappedFile::open(weightsPath);
  std::map<std::string, StoredTensor> weights =
      readSafetensors(*weightsFile, weightsPath);

  onnx::ModelProto model = file->model();
  int64_t total = 0, updated = 0;
  for (int i = 0; i < model.graph().initializer_size(); ++i) {
    onnx::TensorProto &init = *model.mutable_graph()->mutable_initializer(i);
    // Every initializer's bytes inline for now, taken from the trained
    // weights or, for the rest, from the original (external data included).
    const onnx_import::InitializerBytes &orig =
        file->initializer(file->graph().initializer(i));
    std::string bytes;
    auto it = weights.find(init.name());
    if (it != weights.end()) {
      if (it->second.shape != orig.dims)
        fail("'{}': tensor '{}' has another shape than the model's "
             "initializer",
             weightsPath, init.name());
      bytes = encode(it->second, orig.numel, init.data_type(), init.name());
      ++updated;
    } else if (orig.bytes) {
      bytes.assign(reinterpret_cast<const char *>(orig.bytes),
                   orig.numel * onnx_import::dtypeSize(orig.dtype));
    } else {
      fail("initializer '{}' of '{}' carries no data and the weights do not "
           "name it",
           init.name(), modelPath);
    }
    init.clear_float_data();
    init.clear_int32_data();
    init.clear_int64_data();
    init.clear_double_data();
    init.clear_external_data();
    init.set_data_location(onnx::TensorProto::DEFAULT);
    init.set_raw_data(std::move(bytes));
    total += init.raw_data().size();
  }
  if (updated == 0)
    fail("'{}' names none of the initializers of '{}'", weightsPath, modelPath);

  // Past 1.5 GiB the data goes to OUT.onnx.data, as ONNX's 2 GiB protobuf
  // limit requires.
  std::string tmp = *out + ".tmp", dataName =
      llvm::sys::path::filename(*out).str() + ".data";
  std::string dataPath = *out + ".data", dataTmp = dataPath + ".tmp";
  bool external = total > (int64_t(3) << 29);
  if (external) {
    std::ofstream data(dataTmp, std::ios::binary);
    int64_t offset = 0;
    for (auto &init : *model.mutable_graph()->mutable_initializer()) {
      const std::string &raw = init.raw_data();
      data.write(raw.data(), raw.size());
      auto add = [&](const char *k, const std::string &v) {
        auto *e = init.add_external_data();
        e->set_key(k);
        e->set_value(v);
      };
      add("location", dataName);
      add("offset", std::to_string(offset));
      add("length", std::to_string(raw.size()));
      offset += raw.size();
      init.clear_raw_data();
      init.set_data_location(onnx::TensorProto::EXTERNAL);
    }
    if (!data.flush())
      fail("cannot write '{}'", dataTmp);
  }
  {
    std::ofstream os(tmp, std::ios::binary);
    if (!model.SerializeToOstream(&os) || !os.flush())
      fail("cannot write '{}'", tmp);
  }
  if (external && llvm::sys::fs::rename(dataTmp, dataPath))
    fail("cannot write '{}'", dataPath);
  if (llvm::sys::fs::rename(tmp, *out))
    fail("cannot write '{}'", *out);
  std::fprintf(stderr, "megatrain: wrote %s (%lld of %d initializers trained)\n",
               out->c_str(), static_cast<long long>(updated),
               model.graph().initializer_size());
  return 0;
}

} // namespace mt::driver
