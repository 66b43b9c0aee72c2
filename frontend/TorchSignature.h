//===- TorchSignature.h - torch's record of params and buffers -*- C++ -*-===//
//
// ONNX does not say which initializers are trained. torch's dynamo exporter
// records it anyway: the graph's metadata `pkg.torch.export.ExportedProgram.
// graph_signature` lists each input of the exported program with its kind
// and the module attribute behind it, one per line:
//
//   p_fc_weight: PARAMETER target='fc.weight'
//   b_rotary_emb_inv_freq: BUFFER target='rotary_emb.inv_freq' persistent=False
//   c_attn_lifted_tensor_0: CONSTANT_TENSOR target='attn.lifted_tensor_0'
//
// and the exporter names each initializer after its target. (GraphProto's
// metadata is IR version 10; older generated protobuf code keeps it as an
// unknown field, read from there.)
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_FRONTEND_TORCHSIGNATURE_H
#define MEGATRAIN_FRONTEND_TORCHSIGNATURE_H

#include <set>
#include <string>

namespace onnx {
class GraphProto;
} // namespace onnx

namespace mt::onnx_import {

struct TorchSignature {
  std::set<std::string> parameters;
  /// Buffers and constant tensors: never trained.
  std::set<std::string> buffers;
};

/// The signature recorded in `graph`; empty when there is none.
TorchSignature torchSignature(const onnx::GraphProto &graph);

} // namespace mt::onnx_import

#endif // MEGATRAIN_FRONTEND_TORCHSIGNATURE_H
