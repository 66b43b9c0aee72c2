//===- Importer.cpp - ONNX decoder exports to mt IR -----------------------===//
#include "frontend/Importer.h"

#include "frontend/BlockDiscovery.h"
#include "frontend/DType.h"
#include "frontend/Emit.h"
#include "frontend/Error.h"
#include "frontend/OnnxFile.h"
#include "frontend/Ties.h"
#include "frontend/TorchSignature.h"
#include "frontend/fusion/Fusion.h"

#include <set>

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
        "do: export gated DeltaNet, Mamba-2 and MiniMax's lightning attention "
        "through tools/gated_delta_node.py, tools/mamba2_node.py and "
        "tools/lightning_node.py, which write each scan as one node; other "
        "such layers are not supported",
        vi.name(), dims[1].dim_value());
  }
  return "";
}

bool contains(const std::vector<Value *> &vs, const Value *v) {
  return std::find(vs.begin(), vs.end(), v) != vs.end();
}

// --buffers names float initializers.
void checkBufferNames(const OnnxFile &file,
                      const std::vector<std::string> &buffers) {
  for (const std::string &b : buffers) {
    auto it = std::find_if(
        file.graph().initializer().begin(), file.graph().initializer().end(),
        [&](const onnx::TensorProto &t) { return t.name() == b; });
    if (it == file.graph().initializer().end() ||
        !isFloat(dtypeFromOnnx(it->data_type())))
      fail("--buffers {}: '{}' has no float initializer of that name", b,
           file.path());
  }
}

// A table the importer computes from initializers at compile time is
// frozen, and so are they: right for a buffer, silently wrong for a
// parameter. Fusion computes a parameter's computations at run time where
// their ops have primitives (Lower.cpp); a table left with one behind it is
// refused, unless declared a buffer (--buffers). With torch's signature,
// the exporter's own initializers (literals, folds of buffers such as
// CTRL's sliced position table) are constants. One that also trains
// directly would lose the table's share of its gradient.
void checkTableSources(const std::vector<Value *> &params) {
  std::vector<std::string> undeclared;
  const Node *first = nullptr;
  for (Value *t : params) {
    if (t->initializer)
      continue;
    auto user = std::find_if(t->users.begin(), t->users.end(),
                             [](const Node *n) { return !n->dead; });
    std::string where = user == t->users.end()
                            ? t->name
                            : fmt::format("node '{}'", (*user)->name);
    for (Value *s : t->sources) {
      if (s->rank() == 0) // the exporter's literals
        continue;
      if (contains(params, s) && !s->buffer)
        fail("initializer '{}' trains as a weight, but {} also applies a "
             "value computed from it at compile time, whose share of its "
             "gradient would be lost: not supported",
             s->name, where);
      if (!s->buffer && !s->exporterConstant &&
          std::find(undeclared.begin(), undeclared.end(), s->name) ==
              undeclared.end()) {
        undeclared.push_back(s->name);
        if (!first && user != t->users.end())
          first = *user;
      }
    }
  }
  if (undeclared.empty())
    return;
  std::string names, list;
  for (const std::string &n : undeclared) {
    names += (names.empty() ? "'" : ", '") + n + "'";
    list += (list.empty() ? "" : ",") + n;
  }
  const bool one = undeclared.size() == 1;
  fail("{} {} {} the model only through {} computed at compile time{}, "
       "which would be frozen: a parameter there would never train. Export "
       "with the ONNX optimizer (torch.onnx.export's default), which folds "
       "such a computation into an initializer of its own that trains; or, "
       "if {} buffers, pass --buffers {}",
       one ? "initializer" : "initializers", names, one ? "reaches" : "reach",
       one ? "a value" : "values",
       first ? fmt::format(" (node '{}' applies {})", first->name,
                           one ? "it" : "the first")
             : "",
       one ? "it is one of the model's" : "they are", list);
}

} // namespace

ImportedModel::ImportedModel() = default;
ImportedModel::~ImportedModel() = default;
ImportedModel::ImportedModel(ImportedModel &&) = default;

ImportedModel importOnnx(mlir::MLIRContext &ctx, const std::string &path,
                         const ImportOptions &options) {
  ImportedModel result;
  result.file = OnnxFile::load(path);
  const TorchSignature signature = torchSignature(result.file->graph());
  const bool signed_ =
      !signature.parameters.empty() || !signature.buffers.empty();
  checkBufferNames(*result.file, options.buffers);
  std::set<std::string> buffers = signature.buffers;
  buffers.insert(options.buffers.begin(), options.buffers.end());
  std::unique_ptr<Graph> g;
  try {
    g = buildGraph(*result.file, options.bindings);
    // Buffers, by torch's signature or --buffers, never train, even read
    // as weights (Falcon-H1's µP vector). Fusion reads this: a parameter
    // computed on is computed at run time, where its gradient flows.
    for (auto &[name, v] : g->byName)
      if (v->initializer) {
        v->buffer = buffers.count(name) != 0;
        v->exporterConstant =
            signed_ && !v->buffer && !signature.parameters.count(name);
      }
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
  checkTableSources(params);
  // Ties follow the graph's initializer order, as the oracle's rule does;
  // a buffer ties to nothing.
  std::vector<Value *> byInitOrder;
  for (const auto &t : result.file->graph().initializer())
    for (Value *p : params)
      if (p->initializer == &t && !p->buffer)
        byInitOrder.push_back(p);
  std::map<Value *, Tie> ties;
  if (options.detectTies)
    ties = findTies(byInitOrder);
  for (Value *p : params)
    if (p->constant)
      result.paramData[p->name] = p->constant;
  for (const auto &t : result.file->graph().initializer()) {
    bool trained = std::any_of(params.begin(), params.end(), [&](Value *p) {
      return p->name == t.name() && !p->buffer;
    });
    if (trained || !isFloat(dtypeFromOnnx(t.data_type())))
      continue;
    result.constantInitializers.push_back(t.name());
    if (t.dims_size() >= 1)
      result.buffers.push_back(t.name());
  }
  result.module = emitModule(ctx, blocks, ties, path);
  return result;
}

} // namespace mt::onnx_import
