//===- TorchSignature.cpp - torch's record of params and buffers ----------===//
#include "frontend/TorchSignature.h"

#include <onnx/onnx_pb.h>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/unknown_field_set.h>

#include <sstream>

namespace mt::onnx_import {
namespace {

constexpr int kMetadataField = 16; // GraphProto.metadata_props
constexpr const char *kSignatureKey =
    "pkg.torch.export.ExportedProgram.graph_signature";

// The value of GraphProto metadata `key`, from the known field where the
// generated code has it, else from the unknown one.
std::string graphMetadata(const onnx::GraphProto &graph,
                          const std::string &key) {
  std::string found;
  auto entry = [&](const std::string &bytes) {
    onnx::StringStringEntryProto e;
    if (e.ParseFromString(bytes) && e.key() == key)
      found = e.value();
  };
  const google::protobuf::Reflection *r = graph.GetReflection();
  if (const auto *f = graph.GetDescriptor()->FindFieldByNumber(kMetadataField);
      f && f->is_repeated() &&
      f->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE)
    for (int i = 0; i < r->FieldSize(graph, f); ++i)
      entry(r->GetRepeatedMessage(graph, f, i).SerializeAsString());
  const google::protobuf::UnknownFieldSet &unknown = r->GetUnknownFields(graph);
  for (int i = 0; i < unknown.field_count(); ++i)
    if (unknown.field(i).number() == kMetadataField &&
        unknown.field(i).type() ==
            google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      entry(unknown.field(i).length_delimited());
  return found;
}

} // namespace

TorchSignature torchSignature(const onnx::GraphProto &graph) {
  TorchSignature sig;
  std::istringstream lines(graphMetadata(graph, kSignatureKey));
  for (std::string line; std::getline(lines, line);) {
    // NAME: KIND target='TARGET' ...
    auto colon = line.find(": ");
    auto target = line.find(" target='");
    if (colon == std::string::npos || target == std::string::npos ||
        target < colon)
      continue;
    std::string kind = line.substr(colon + 2, target - colon - 2);
    auto begin = target + 9, end = line.find('\'', begin);
    if (end == std::string::npos)
      continue;
    std::string name = line.substr(begin, end - begin);
    if (kind == "PARAMETER")
      sig.parameters.insert(name);
    else if (kind == "BUFFER" || kind == "CONSTANT_TENSOR")
      sig.buffers.insert(name);
  }
  return sig;
}

} // namespace mt::onnx_import
