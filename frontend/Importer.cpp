//===- Importer.cpp - ONNX decoder exports to mt IR -----------------------===//
#include "frontend/Importer.h"

#include "frontend/BlockDiscovery.h"
#include "frontend/DType.h"
#include "frontend/Emit.h"
#include "frontend/Error.h"
#include "frontend/OnnxFile.h"
#include "frontend/Ties.h"
#include "frontend/fusion/Fusion.h"

namespace mt::onnx_import {

namespace {

// torch's exporter fixes the sequence length of token ids whose batch stays
// dynamic when the model's code loops over the sequence: the chunked scans of
// linear attention and state-space layers. Said beside a refusal, that names
// the likely cause, which the refused node alone (a Pad, say) does not.
std::string fixedSequenceNote(const onnx::GraphProto &graph) {
  for (const auto &vi : graph.input()) {
    const auto &t = vi.type().tensor_type();
    const auto &dims = t.shape().dim();
    if (!isInteger(dtypeFromOnnx(t.elem_type())) || dims.size() != 2 ||
        dims[0].has_dim_value() || !dims[1].has_dim_value())
      continue;
    return fmt::format(
        "; note: input '{}' has a dynamic batch but a sequence length fixed "
        "at {}, which torch's exporter does when a layer loops over the "
        "sequence, as the scans of linear attention and state-space layers "
        "do: export gated DeltaNet and Mamba-2 through "
        "tools/gated_delta_node.py and tools/mamba2_node.py, which write each "
        "scan as one node; other such layers are not supported",
        vi.name(), dims[1].dim_value());
  }
  return "";
}

} // namespace

ImportedModel::ImportedModel() = default;
ImportedModel::~ImportedModel() = default;
ImportedModel::ImportedModel(ImportedModel &&) = default;

ImportedModel importOnnx(mlir::MLIRContext &ctx, const std::string &path,
                         const ImportOptions &options) {
  ImportedModel result;
  result.file = OnnxFile::load(path);
  std::unique_ptr<Graph> g;
  try {
    g = buildGraph(*result.file, options.bindings);
    fuseIdioms(*g);
  } catch (const ImportError &e) {
    // Only a node's refusal: a flag's error has its cause in the message.
    std::string what = e.what();
    if (what.rfind("node '", 0) != 0)
      throw;
    throw ImportError(what + fixedSequenceNote(result.file->graph()));
  }

  std::vector<Block> blocks;
  if (options.discoverBlocks)
    blocks = discoverBlocks(*g);
  else
    blocks.push_back(wholeGraph(*g));

  std::vector<Value *> params;
  for (const Block &b : blocks)
    for (Value *p : b.params)
      if (std::find(params.begin(), params.end(), p) == params.end())
        params.push_back(p);
  // Ties follow the graph's initializer order, as the oracle's rule does.
  std::vector<Value *> byInitOrder;
  for (const auto &t : result.file->graph().initializer())
    for (Value *p : params)
      if (p->initializer == &t)
        byInitOrder.push_back(p);
  std::map<Value *, Tie> ties;
  if (options.detectTies)
    ties = findTies(byInitOrder);
  for (Value *p : params)
    if (p->constant)
      result.paramData[p->name] = p->constant;
  for (const auto &t : result.file->graph().initializer()) {
    bool isParam = std::any_of(params.begin(), params.end(),
                               [&](Value *p) { return p->name == t.name(); });
    if (!isParam && isFloat(dtypeFromOnnx(t.data_type())))
      result.constantInitializers.push_back(t.name());
  }
  result.module = emitModule(ctx, blocks, ties, path);
  return result;
}

} // namespace mt::onnx_import
