//===- Importer.cpp - ONNX decoder exports to mt IR -----------------------===//
#include "frontend/Importer.h"

#include "frontend/BlockDiscovery.h"
#include "frontend/Emit.h"
#include "frontend/OnnxFile.h"
#include "frontend/Ties.h"
#include "frontend/fusion/Fusion.h"

namespace mt::onnx_import {

ImportedModel::ImportedModel() = default;
ImportedModel::~ImportedModel() = default;
ImportedModel::ImportedModel(ImportedModel &&) = default;

ImportedModel importOnnx(mlir::MLIRContext &ctx, const std::string &path,
                         const ImportOptions &options) {
  ImportedModel result;
  result.file = OnnxFile::load(path);
  std::unique_ptr<Graph> g = buildGraph(*result.file, options.bindings);
  fuseIdioms(*g);

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
