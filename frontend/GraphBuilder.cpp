//===- GraphBuilder.cpp - ONNX model to the working graph -----------------===//
//
// Binds the token input's dynamic dims to --batch and --seq-len, binds the
// auxiliary inputs exports carry (attention mask, position ids) to the
// constants a training step implies, orders the nodes topologically
// (rejecting cycles), and runs each node's handler to infer static shapes and
// fold constants.
//
//===----------------------------------------------------------------------===//
#include "frontend/GraphBuilder.h"

#include "frontend/ControlFlow.h"
#include "frontend/Error.h"
#include "frontend/OnnxFile.h"
#include "frontend/OpHandler.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <set>

namespace mt::onnx_import {
namespace {

Attr convertAttr(const onnx::AttributeProto &a, OnnxFile &file) {
  using AP = onnx::AttributeProto;
  Attr r;
  switch (a.type()) {
  case AP::INT: r.kind = Attr::Int; r.i = a.i(); break;
  case AP::FLOAT: r.kind = Attr::Float; r.f = a.f(); break;
  case AP::STRING: r.kind = Attr::String; r.s = a.s(); break;
  case AP::INTS:
    r.kind = Attr::Ints;
    r.ints.assign(a.ints().begin(), a.ints().end());
    break;
  case AP::FLOATS:
    r.kind = Attr::Floats;
    r.floats.assign(a.floats().begin(), a.floats().end());
    break;
  case AP::TENSOR:
    r.kind = Attr::Tensor;
    r.tensor = initializerConst(file.initializer(a.t()));
    break;
  case AP::GRAPH:
    r.kind = Attr::Graph;
    r.graph = &a.g();
    break;
  default: r.kind = Attr::Other; break;
  }
  return r;
}

// Whether a node's result depends on the values of input i, not only on its
// shape (Shape, Size) or type (CastLike's second input).
bool readsValues(const Node &n, size_t i) {
  if (n.op == "Shape" || n.op == "Size")
    return false;
  return !(n.op == "CastLike" && i == 1);
}

// The float initializers behind a node's compile-time inputs.
std::vector<Value *> sourcesOf(const Node &n) {
  std::vector<Value *> out;
  auto add = [&](Value *s) {
    if (std::find(out.begin(), out.end(), s) == out.end())
      out.push_back(s);
  };
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    Value *v = n.inputs[i];
    if (!v || !readsValues(n, i))
      continue;
    if (v->initializer && isFloat(v->dtype))
      add(v);
    for (Value *s : v->sources)
      add(s);
  }
  return out;
}

class Builder {
public:
  Builder(OnnxFile &file, const Bindings &bindings)
      : file_(file), bindings_(bindings), g_(std::make_unique<Graph>()) {}

  std::unique_ptr<Graph> run() {
    int64_t opset = file_.opset("");
    if (opset < kMinOpset || opset > kMaxOpset)
      fail("'{}' imports opset {} of the default ONNX domain; supported are "
           "{} to {} (re-export with opset_version in that range)",
           file_.path(), opset, kMinOpset, kMaxOpset);
    addInitializers();
    addInputs();
    addNodes();
    setOutputs();
    return std::move(g_);
  }

private:
  void addInitializers() {
    for (const auto &t : file_.graph().initializer()) {
      if (g_->byName.count(t.name()))
        fail("initializer '{}' is defined twice", t.name());
      const InitializerBytes &b = file_.initializer(t);
      if (b.dtype == DType::Undefined)
        fail("initializer '{}' has an unsupported data type ({})", t.name(),
             t.data_type());
      Value *v = g_->newValue(t.name(), b.dtype, b.dims);
      v->initializer = &t;
      v->constant = initializerConst(b);
      g_->byName[t.name()] = v;
    }
  }

  // The dims of a graph input, with dynamic ones bound.
  Shape bindDims(const onnx::ValueInfoProto &vi, bool isTokens) {
    Shape shape;
    const auto &dims = vi.type().tensor_type().shape().dim();
    for (int k = 0; k < dims.size(); ++k) {
      const auto &d = dims[k];
      std::optional<int64_t> flag;
      const char *flagName = nullptr;
      if (isTokens && k == 0)
        flag = bindings_.batch, flagName = "--batch";
      if (isTokens && k == 1)
        flag = bindings_.seqLen, flagName = "--seq-len";
      if (d.has_dim_value() && d.dim_value() > 0) {
        if (flag && *flag != d.dim_value())
          fail("input '{}' has static dim {} = {}, but {} {} was given; "
               "re-export with a dynamic axis to change it",
               vi.name(), k, d.dim_value(), flagName, *flag);
        shape.push_back(d.dim_value());
        continue;
      }
      std::string sym = d.dim_param().empty() ? "?" : d.dim_param();
      if (flag) {
        if (*flag <= 0)
          fail("{} must be positive, got {}", flagName, *flag);
        symbols_[sym] = *flag;
        shape.push_back(*flag);
        continue;
      }
      auto it = symbols_.find(sym);
      if (it == symbols_.end() || sym == "?")
        fail("dynamic dim '{}' (dim {}) of input '{}' has no binding{}", sym,
             k, vi.name(),
             flagName ? fmt::format("; pass {}", flagName)
                      : std::string("; only batch and sequence length can be "
                                    "bound (--batch, --seq-len)"));
      shape.push_back(it->second);
    }
    return shape;
  }

  static bool isTokenName(const std::string &n) {
    return n == "input_ids" || n == "ids" || n == "tokens" || n == "idx" ||
           n == "input";
  }

  void addInputs() {
    for (const auto &[name, how] : bindings_.inputs) {
      bool exists = false;
      for (const auto &vi : file_.graph().input())
        exists |= vi.name() == name;
      if (!exists)
        fail("--bind {}={}: the model has no graph input named '{}'", name,
             how, name);
      if (how != "ones" && how != "zeros" && how != "arange")
        fail("--bind {}={}: the binding must be ones, zeros or arange", name,
             how);
    }
    std::vector<const onnx::ValueInfoProto *> inputs, free;
    for (const auto &vi : file_.graph().input())
      if (!g_->byName.count(vi.name())) // older exports list initializers too
        inputs.push_back(&vi);
    for (auto *vi : inputs)
      if (!bindings_.inputs.count(vi->name()) && !defaultBinding(vi->name()))
        free.push_back(vi);
    // The primary input is what a step feeds: the token ids of a model
    // (preferring an integer [batch, seq] input named like them), or for a
    // standalone graph the input whose leading dims are dynamic.
    auto rank = [](const onnx::ValueInfoProto *vi) {
      const auto &t = vi->type().tensor_type();
      const auto &dims = t.shape().dim();
      bool ids = isInteger(dtypeFromOnnx(t.elem_type())) && dims.size() == 2;
      bool dynamic = dims.size() >= 2 && !dims[0].has_dim_value() &&
                     !dims[1].has_dim_value();
      return (ids && isTokenName(vi->name()) ? 4 : 0) + (ids ? 2 : 0) +
             (dynamic ? 1 : 0);
    };
    const onnx::ValueInfoProto *tokens = nullptr;
    for (auto *vi : free)
      if (!tokens || rank(vi) > rank(tokens))
        tokens = vi;
    if (!tokens)
      fail("'{}' has no input to feed (token ids [batch, seq])", file_.path());
    // Bind the token input first: its dims name the batch and seq symbols.
    DType tt = dtypeFromOnnx(tokens->type().tensor_type().elem_type());
    if (tt == DType::Undefined)
      fail("graph input '{}' has an unsupported element type", tokens->name());
    Value *tv = g_->newValue(tokens->name(), tt, bindDims(*tokens, true));
    tv->isGraphInput = true;
    tv->fromInput = true;
    g_->byName[tv->name] = tv;
    g_->inputs.push_back(tv);
    for (auto *vi : inputs) {
      if (vi == tokens)
        continue;
      std::string how = bindings_.inputs.count(vi->name())
                            ? bindings_.inputs.at(vi->name())
                            : std::string(defaultBinding(vi->name())
                                              ? defaultBinding(vi->name())
                                              : "");
      if (how.empty())
        fail("graph input '{}' is not the primary input '{}'; the trainer "
             "feeds only token ids (bind it with --bind {}=ones|zeros|arange)",
             vi->name(), tokens->name(), vi->name());
      DType t = dtypeFromOnnx(vi->type().tensor_type().elem_type());
      if (t == DType::Undefined)
        fail("graph input '{}' has an unsupported element type", vi->name());
      Shape shape = bindDims(*vi, false);
      Value *v = g_->newValue(vi->name(), t, shape);
      g_->byName[v->name] = v;
      if (how == "ones" || how == "zeros") {
        double fill = how == "ones" ? 1 : 0;
        v->constant = lazyConst(t, shape, [fill](int64_t) { return fill; });
      } else if (how == "arange") {
        int64_t last = shape.empty() ? 1 : shape.back();
        v->constant = lazyConst(t, shape, [last](int64_t i) {
          return double(i % last);
        });
      } else {
        fail("--bind {}={}: the binding must be ones, zeros or arange",
             vi->name(), how);
      }
    }
  }

  static const char *defaultBinding(const std::string &name) {
    if (name == "attention_mask")
      return "ones";
    if (name == "position_ids")
      return "arange";
    if (name == "token_type_ids")
      return "zeros";
    return nullptr;
  }

  // Kahn's algorithm over value dependencies; leftovers mean a cycle or a
  // value nobody produces.
  std::vector<const onnx::NodeProto *> topologicalOrder() {
    const auto &nodes = file_.graph().node();
    std::map<std::string, int> producer;
    for (int i = 0; i < nodes.size(); ++i)
      for (const auto &o : nodes[i].output()) {
        if (o.empty())
          continue;
        if (g_->byName.count(o) || !producer.emplace(o, i).second)
          fail("value '{}' is produced twice (node '{}' and another "
               "definition); not a valid ONNX graph",
               o, nodes[i].name());
      }
    std::vector<int> pending(nodes.size(), 0);
    std::vector<std::vector<int>> users(nodes.size());
    for (int i = 0; i < nodes.size(); ++i) {
      std::set<int> deps;
      std::set<std::string> reads(nodes[i].input().begin(),
                                  nodes[i].input().end());
      outerReads(nodes[i], reads); // a Loop's body reads the graph's values
      for (const auto &in : reads) {
        if (in.empty() || g_->byName.count(in))
          continue;
        auto it = producer.find(in);
        if (it == producer.end())
          fail("node '{}' ({}) reads '{}', which is no graph input, "
               "initializer or node output",
               nodes[i].name(), nodes[i].op_type(), in);
        deps.insert(it->second);
      }
      pending[i] = deps.size();
      for (int d : deps)
        users[d].push_back(i);
    }
    std::deque<int> ready;
    for (int i = 0; i < nodes.size(); ++i)
      if (pending[i] == 0)
        ready.push_back(i);
    std::vector<const onnx::NodeProto *> order;
    while (!ready.empty()) {
      int i = ready.front();
      ready.pop_front();
      order.push_back(&nodes[i]);
      for (int u : users[i])
        if (--pending[u] == 0)
          ready.push_back(u);
    }
    if (int(order.size()) != nodes.size())
      for (int i = 0; i < nodes.size(); ++i)
        if (pending[i] > 0)
          fail("the graph has a cycle through node '{}' ({})", nodes[i].name(),
               nodes[i].op_type());
    return order;
  }

  // The names a node's subgraphs read from enclosing scopes: used, but
  // neither produced nor taken as inputs inside them.
  static void outerReads(const onnx::NodeProto &node,
                         std::set<std::string> &reads) {
    for (const auto &a : node.attribute()) {
      if (a.type() != onnx::AttributeProto::GRAPH)
        continue;
      std::set<std::string> inner, used;
      for (const auto &i : a.g().input())
        inner.insert(i.name());
      for (const auto &t : a.g().initializer())
        inner.insert(t.name());
      for (const auto &n : a.g().node()) {
        for (const auto &in : n.input())
          used.insert(in);
        outerReads(n, used);
        inner.insert(n.output().begin(), n.output().end());
      }
      for (const auto &o : a.g().output())
        used.insert(o.name());
      for (const auto &u : used)
        if (!u.empty() && !inner.count(u))
          reads.insert(u);
    }
  }

  Node *addNode(Graph &graph, const onnx::NodeProto &np, int64_t index,
                const std::function<Value *(const std::string &)> &lookup) {
    std::vector<Value *> ins;
    for (const auto &in : np.input())
      ins.push_back(in.empty() ? nullptr : lookup(in));
    std::string name = np.name().empty()
                           ? fmt::format("{}_{}", np.op_type(), index)
                           : np.name();
    Node *n = graph.newNode(np.op_type(), name, ins, nullptr);
    n->domain = np.domain() == "ai.onnx" ? "" : np.domain();
    n->opset = file_.opset(n->domain);
    if (n->opset == 0 && !n->domain.empty())
      n->opset = 1; // contrib domains are often used without an import
    for (const auto &a : np.attribute())
      n->attrs[a.name()] = convertAttr(a, file_);
    for (const auto &o : np.output()) {
      Value *v = graph.newValue(o, DType::Undefined, {});
      v->producer = n;
      n->outputs.push_back(v);
    }
    return n;
  }

  // A name as a subgraph node sees it: the innermost scope that has it,
  // then the main graph.
  Value *lookup(const std::string &name, const std::string &reader) {
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope)
      if (auto it = (*scope)->find(name); it != (*scope)->end())
        return it->second;
    auto it = g_->byName.find(name);
    if (it == g_->byName.end())
      fail("{} in a loop body reads '{}', which nothing before it defines",
           reader, name);
    return it->second;
  }

  // ControlFlow.h's SubgraphRunner.
  std::vector<Value *> runSubgraph(Graph &scratch, const onnx::GraphProto &body,
                                   const std::vector<Value *> &inputs) {
    if (body.input_size() != int(inputs.size()))
      fail("a loop body takes {} inputs, the loop gives it {}",
           body.input_size(), inputs.size());
    if (body.initializer_size() > 0)
      fail("a loop body has initializers ('{}'); not supported",
           body.initializer(0).name());
    std::map<std::string, Value *> local;
    for (int i = 0; i < body.input_size(); ++i)
      local[body.input(i).name()] = inputs[size_t(i)];
    scopes_.push_back(&local);
    int64_t index = 0;
    for (const auto &np : body.node()) { // ONNX keeps subgraphs sorted
      Node *n = addNode(scratch, np, index++, [&](const std::string &name) {
        return lookup(name, fmt::format("node '{}' ({})", np.name(),
                                        np.op_type()));
      });
      for (Value *v : n->outputs)
        if (!v->name.empty())
          local[v->name] = v;
      infer(*n);
    }
    std::vector<Value *> outs; // an output may pass an outer value through
    for (const auto &o : body.output())
      outs.push_back(lookup(o.name(), "an output"));
    scopes_.pop_back();
    return outs;
  }

  void addNodes() {
    int64_t index = 0;
    for (const onnx::NodeProto *np : topologicalOrder()) {
      Node *n = addNode(*g_, *np, index++, [&](const std::string &name) {
        return g_->byName.at(name);
      });
      for (Value *v : n->outputs)
        if (!v->name.empty())
          g_->byName[v->name] = v;
      infer(*n);
    }
  }

  void infer(Node &n) {
    // Loop bodies run on constants only.
    if (scopes_.empty() &&
        lowerActivationSequence(*g_, n, [this](Node &m) { infer(m); }))
      return;
    if (isControlFlow(n)) {
      foldControlFlow(n, [this](Graph &scratch, const onnx::GraphProto &body,
                                const std::vector<Value *> &inputs) {
        return runSubgraph(scratch, body, inputs);
      });
      return;
    }
    const OpHandler *h = findHandler(n);
    if (!h)
      fail("{}: unsupported op", n.describe());
    OpContext ctx(n);
    for (Value *v : n.inputs)
      if (v && v->dtype == DType::Undefined)
        ctx.error("input '{}' has an unsupported element type", v->name);
    h->infer(ctx);
    bool allConstant = true, fromInput = false;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      Value *v = n.inputs[i];
      if (!v || !readsValues(n, i))
        continue;
      allConstant &= v->constant != nullptr;
      fromInput |= v->fromInput;
    }
    if (h->fold && allConstant) {
      std::vector<ConstPtr> folded = h->fold(ctx);
      for (size_t i = 0; i < folded.size() && i < n.outputs.size(); ++i)
        n.outputs[i]->constant = folded[i];
    }
    for (Value *v : n.outputs)
      if (v->constant)
        v->sources = sourcesOf(n);
    // Shapes of activations are known at compile time: a folded value is
    // no activation even when computed from one.
    for (Value *v : n.outputs)
      v->fromInput = fromInput && !v->constant;
  }

  void setOutputs() {
    const auto &outs = file_.graph().output();
    const onnx::ValueInfoProto *logits = nullptr;
    if (outs.size() == 1)
      logits = &outs[0];
    for (const auto &o : outs)
      if (o.name() == "logits")
        logits = &o;
    if (!logits)
      fail("'{}' has {} outputs and none is named 'logits'; export only the "
           "logits",
           file_.path(), outs.size());
    auto it = g_->byName.find(logits->name());
    if (it == g_->byName.end() || (!it->second->producer &&
                                   !it->second->isGraphInput))
      fail("graph output '{}' is produced by no node", logits->name());
    Value *v = it->second;
    if (!isFloat(v->dtype) || v->rank() < 2)
      fail("graph output '{}' must be float logits [batch, seq, vocab], got "
           "{} {}",
           v->name, dtypeName(v->dtype), shapeStr(v->shape));
    g_->outputs.push_back(v);
  }

  OnnxFile &file_;
  const Bindings &bindings_;
  std::unique_ptr<Graph> g_;
  std::map<std::string, int64_t> symbols_;
  // The scopes of the loop bodies being run, innermost last.
  std::vector<const std::map<std::string, Value *> *> scopes_;
};

} // namespace

std::unique_ptr<Graph> buildGraph(OnnxFile &file, const Bindings &bindings) {
  return Builder(file, bindings).run();
}

} // namespace mt::onnx_import
