//===- Simulate.cpp - predicted step time on a cost model -----------------===//
//
// Replays mt.schedule for four consecutive steps on a model of the machine
// and reports the last one, the steady state. Each stream runs its commands
// in order; a wait holds its stream until the latest record of its event
// issued before it (in issue order, across steps) has run; a record runs
// when its stream reaches it. With no resource shared between streams, one
// pass over the commands in issue order computes every start time exactly.
//
// Costs (docs/schedule.md has the details and the presets' sources):
//   launch       Σ over the template's ops of
//                max(FLOPs / (peak · eff), bytes / HBM) + launch overhead
//   h2d / d2h    bytes / link GB/s + a fixed latency (weights bf16: 2 B per
//                packed element; gradients f32: 4 B)
//   pack         6 B per packed element (read f32 master, write bf16); a
//                pack right after its unit's adamw applies the update as it
//                goes (the runtime's HostStore::pack) and reads the masters
//                from cache: 2 B
//   accumulate   12 B per element (read landed, read and write accumulator)
//   adamw        28 B per owned trained param
//   a unit's last accumulate also sums its gradients' squares: 4 B per
//   owned trained param (the runtime's sum_unit_squares); grad_norm then
//   only adds one number per unit
// With bf16 master weights and accumulators (mt.master_weights = "bf16"):
// pack 4 B, accumulate 8 B, adamw 22 B, sum of squares 2 B.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "ir/AttentionLayout.h"
#include "ir/MtOps.h"
#include "passes/Accesses.h"
#include "passes/ModelInfo.h"
#include "passes/RowChunk.h"
#include "passes/TemplateMemory.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <array>
#include <cmath>

namespace mt {
#define GEN_PASS_DEF_SIMULATE
#include "passes/Passes.h.inc"
} // namespace mt

using namespace mlir;
using namespace mt;

namespace {

// Fused attention: ours (mma.sync tiles) measured on an H200 by the device
// check (docs/benchmarks.md, 2026-12-04) at 42-57 TFLOPS forward and 37-50
// backward on Llama-shaped heads of 4K-16K tokens, 5-7% of the dense peak
// (torch's SDPA reached 490-650 forward there). The model takes ours as it
// is, with the GEMMs' knee over the sequence (a flash kernel tiles over it,
// not over the head dim); the attention-efficiency option stands in for
// another kernel (cuDNN's) or a faster one of ours.
constexpr double kAttentionEffMax = 0.06;

// The attention backward holds dSᵀ whole for its dQ GEMM up to this many
// bytes (runtime/cuda/AttentionKernels.cu, the bound of cuDNN's
// deterministic backward).
constexpr double kScoresBound = double(int64_t(2) << 30);

/// What the cost model knows about a machine. Bandwidths in bytes/s,
/// compute in FLOP/s, times in seconds; `attention` is the fraction of the
/// dense peak fused attention reaches on long sequences.
struct Machine {
  const char *name;
  double h2d, d2h, flops, hbm, host, launch, copyLatency;
  double attention = kAttentionEffMax;
};

constexpr double G = 1e9, T = 1e12, us = 1e-6;

// Sources: docs/schedule.md. Link numbers are practical DMA rates, FLOP/s
// measured dense bf16 where we have it, host rates what a tuned multi-
// threaded AdamW sustains (below the DRAM's peak).
const Machine kPresets[] = {
    {"h200-pcie5", 50 * G, 50 * G, 790 * T, 4800 * G, 125 * G, 5 * us, 10 * us},
    {"gh200", 350 * G, 300 * G, 750 * T, 4000 * G, 400 * G, 5 * us, 10 * us},
    {"a100-pcie4", 25 * G, 25 * G, 250 * T, 1900 * G, 100 * G, 5 * us, 10 * us},
    {"rtx3090-pcie4", 24 * G, 24 * G, 71 * T, 900 * G, 50 * G, 5 * us, 10 * us},
};

// GEMM efficiency: cuBLAS reaches ~75% of dense peak on large bf16 GEMMs and
// falls off when any dim is small (tiles go unfilled, too few waves).
constexpr double kGemmEffMax = 0.75;
constexpr double kGemmKnee = 512;
constexpr int kSteps = 4;
// Above this the compute stream is called link-bound (as inspect does).
constexpr double kLinkBoundThreshold = 0.05;

double gemmEfficiency(double m, double n, double k) {
  return kGemmEffMax * (1 - std::exp(-std::min({m, n, k}) / kGemmKnee));
}

double attentionEfficiency(const Machine &m, double s) {
  return m.attention * (1 - std::exp(-s / kGemmKnee));
}

// The mixture of experts' products run as grouped GEMMs of our own on
// mma.sync (runtime/cuda/GroupedGemm.cuh), without asynchronous copies or
// wgmma: taken at 35% of the dense peak, what mma.sync kernels reach on an
// H100 by FlashAttention 3's account, falling off as the rows an expert
// gets per call shrink. A guess until the device check's moe stage
// measures them (its first run ran out of time).
constexpr double kGroupedGemmEffMax = 0.35;

double groupedGemmEfficiency(double rowsPerExpert, double h, double i) {
  return kGroupedGemmEffMax *
         (1 - std::exp(-std::min({rowsPerExpert, h, i}) / kGemmKnee));
}

/// Seconds one primitive takes on the device, over the rows of one chunk
/// when it runs in chunks of token rows.
double opSeconds(Operation *op, const Machine &m, const RowChunking *chunk) {
  auto numel = [&](Value v) -> double {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    if (!t)
      return 0;
    return chunk ? chunk->callElements(v) : t.getNumElements();
  };
  double flops = 0, eff = 1;
  if (auto l = dyn_cast<LinearOp>(op)) {
    auto x = cast<RankedTensorType>(l.getX().getType());
    double k = x.getShape().back(), rows = numel(l.getX()) / k;
    double n = cast<RankedTensorType>(l.getY().getType()).getShape().back();
    flops = 2 * rows * k * n;
    eff = gemmEfficiency(rows, n, k);
  } else if (auto g = dyn_cast<LinearGradOp>(op)) {
    auto x = cast<RankedTensorType>(g.getX().getType());
    double k = x.getShape().back(), rows = numel(g.getX()) / k;
    double n = cast<RankedTensorType>(g.getDy().getType()).getShape().back();
    flops = 4 * rows * k * n; // dx and dw
    eff = gemmEfficiency(rows, n, k);
  } else if (isa<AttentionOp, AttentionGradOp>(op)) {
    // q is [B, H, S, D] (or [B, S, H, D]): QKᵀ and PV cost 4·D per visible
    // (query, key) pair: S·(S+1)/2 of them when causal, fewer under a
    // sliding window W or chunks of C (the keys j of query i, i − W < j,
    // i − i mod C <= j).
    Value q = op->getOperand(isa<AttentionOp>(op) ? 0 : 1);
    auto shape = cast<RankedTensorType>(q.getType()).getShape();
    auto layoutAttr = op->getAttrOfType<StringAttr>("layout");
    StringRef layout = layoutAttr ? layoutAttr.getValue() : "bhsd";
    auto rows = attentionRows(shape, layout);
    double d = shape[3], bh = rows[0] * rows[1];
    int64_t s = rows[2];
    auto bound = [&](StringRef name) {
      auto a = op->getAttrOfType<IntegerAttr>(name);
      return a ? a.getInt() : s;
    };
    int64_t w = bound("window"), c = bound("chunk");
    double pairs = 0;
    for (int64_t i = 0; i < s; ++i)
      pairs += double(std::min(w, i % c + 1));
    flops = 4 * bh * pairs * d;
    eff = attentionEfficiency(m, double(s));
    if (isa<AttentionGradOp>(op)) {
      // The backward (runtime/cuda/AttentionTensorCore.cuh): the dK/dV pass
      // makes QKᵀ, dY·Vᵀ, Pᵀ·dY and dSᵀ·Q, twice the forward's products.
      // Where dSᵀ (B·H·S² bf16) fits its 2 GiB it writes dSᵀ, zeroed
      // first, and dQ = dS·K is one dense GEMM over it; else the dQ pass
      // makes QKᵀ, dY·Vᵀ and dS·K again (7 products to the forward's 2).
      // (The runtime also keeps dSᵀ within the room a plan's budget leaves
      // its kernels, which this does not see.) Sequence-major, the GEMM is
      // one a query head of a group, batched over sequences or KV heads and
      // looped over the other (attention_dq_gemms).
      const double scores = bh * double(s) * double(s) * 2;
      double dqGemms = 1;
      if (isSeqMajor(layout)) {
        const double kvHeads =
            cast<RankedTensorType>(op->getOperand(2).getType())
                .getDimSize(headsAxis(layout)); // k
        dqGemms = rows[1] / kvHeads * std::min(double(rows[0]), kvHeads);
      }
      if (scores <= kScoresBound)
        return flops * 2 / (m.flops * eff) + 2 * scores / m.hbm +
               std::max(scores * d / (m.flops * kGemmEffMax), scores / m.hbm) +
               (2 + dqGemms) * m.launch;
      flops *= 3.5;
    }
  } else if (isa<MoeOp, MoeGradOp>(op)) {
    // Per token: the router (E·H) and k experts' 3·I·H multiply-adds; the
    // backward recomputes the forward and then does twice its work.
    Value x = op->getOperand(isa<MoeOp>(op) ? 0 : 1);
    Value down =
        op->getOperand(isa<MoeOp>(op) ? 3 : 4); // [E, H, I] or [E, I, H]
    double e = cast<RankedTensorType>(down.getType()).getDimSize(0),
           h = cast<RankedTensorType>(x.getType()).getShape().back(),
           i = numel(down) / (e * h), tokens = numel(x) / h;
    double k = op->getAttrOfType<IntegerAttr>("top_k").getInt();
    flops =
        2 * tokens * (e * h + k * 3 * i * h) * (isa<MoeGradOp>(op) ? 3.0 : 1.0);
    eff = groupedGemmEfficiency(tokens * k / e, h, i);
  } else if (isa<GatedDeltaOp, GatedDeltaGradOp, GatedLinearOp,
                 GatedLinearGradOp>(op)) {
    // Per position and value head: decay, Mᵀk, the rank-1 update and Mᵀq,
    // 8·Dk·Dv in all (the kernels take the same steps without the delta
    // rule); the backward replays the forward from checkpoints and does
    // twice its work. The scan runs on CUDA cores in f32, about a fifteenth
    // of the tensor cores' bf16 rate, and half that again for its
    // sequential steps. A block's 32 lanes hold columns of value heads: a
    // head narrower than 32 columns takes Dv's power of 2 of them, a wider
    // one whole tiles of 32.
    const bool forward = isa<GatedDeltaOp, GatedLinearOp>(op);
    Value v = op->getOperand(forward ? 2 : 3);
    Value q = op->getOperand(forward ? 0 : 1);
    double dk = cast<RankedTensorType>(q.getType()).getShape().back();
    double dv = cast<RankedTensorType>(v.getType()).getShape().back();
    double lanes =
        dv > 32 ? 32 * std::ceil(dv / 32) : std::exp2(std::ceil(std::log2(dv)));
    flops = 8 * numel(v) / dv * lanes * dk * (forward ? 1.0 : 3.0);
    eff = 1.0 / 30;
  }
  double elems = 0;
  for (Value v : op->getOperands())
    elems += numel(v);
  for (Value v : op->getResults())
    elems += numel(v);
  double seconds = 2 * elems / m.hbm; // bf16 activations and weights
  if (flops > 0)
    seconds = std::max(seconds, flops / (m.flops * eff));
  return seconds + m.launch;
}

/// Device seconds by kind of work: what a long context shifts to attention.
struct ComputeSplit {
  double gemm = 0, attention = 0, other = 0;
  double total() const { return gemm + attention + other; }
  ComputeSplit &operator+=(const ComputeSplit &o) {
    gemm += o.gemm;
    attention += o.attention;
    other += o.other;
    return *this;
  }
};

ComputeSplit templateSeconds(TemplateOp t, const Machine &m) {
  std::optional<RowChunking> chunking = rowChunkingOf(t);
  const TemplatePlan memory = planTemplate(t);
  ComputeSplit split;
  int64_t position = 0;
  for (Operation &op : t.getBlock()) {
    bool chunked = chunking && chunking->contains(position++);
    if (isa<YieldOp>(op))
      continue;
    if (op.getNumResults() == 1 &&
        (memory.views.count(op.getResult(0)) ||
         memory.summedInPlace.count(op.getResult(0))))
      continue; // no kernel: a view, or a sum its operands' kernels made
    // Each chunk reads and writes the param gradients again.
    double s = chunked ? opSeconds(&op, m, &*chunking) * chunking->chunks()
                       : opSeconds(&op, m, nullptr);
    if (isa<LinearOp, LinearGradOp, MoeOp, MoeGradOp>(op)) // grouped GEMMs
      split.gemm += s;
    else if (isa<AttentionOp, AttentionGradOp>(op))
      split.attention += s;
    else
      split.other += s;
  }
  return split;
}

int64_t bytesPer(StringRef dtype) { return dtype == "storage" ? 2 : 4; }

// Params the optimizer updates: not frozen, a tied one counted once.
double trainedParams(ModuleOp module) {
  double n = 0;
  for (ParamOp p : module.getOps<ParamOp>())
    if (!p.getTie() && !p.getFrozen())
      n += p.getTensorType().getNumElements();
  return n;
}

// Params the average token uses, for model FLOPs (6 · params · tokens): a
// mixture's expert weights count k of E (top_k of the router's rows), as
// the FLOPs of mixtures of experts are conventionally counted.
double activeParams(ModuleOp module, double trained) {
  if (module.getOps<ModelOp>().empty())
    return trained; // a hand-written schedule: nothing to resolve
  auto apps = applicationsOf(module);
  if (failed(apps))
    return trained;
  double idle = 0;
  for (Application &a : *apps) {
    const unsigned first = a.op->getNumOperands(); // params follow the inputs
    a.tmpl.walk([&](MoeOp m) {
      const double E =
          cast<RankedTensorType>(m.getRouter().getType()).getDimSize(0);
      const double unused = 1 - double(m.getTopK()) / E;
      for (Value w : {m.getGateUp(), m.getDown()}) {
        auto arg = dyn_cast<BlockArgument>(w);
        if (!arg || arg.getArgNumber() < first ||
            arg.getArgNumber() - first >= a.params.size())
          continue;
        ParamOp p = a.params[arg.getArgNumber() - first];
        if (!p.getTie() && !p.getFrozen())
          idle += unused * double(p.getTensorType().getNumElements());
      }
    });
  }
  return trained - idle;
}

/// One command of the body with its cost.
struct Command {
  Operation *op;
  int stream;
  double seconds = 0;
  ComputeSplit split; // a launch's seconds by kind
  bool isWait = false, isRecord = false;
  StringRef event;
  bool waitsForParams = false; // a compute wait on a param_ready event
  StringRef unit; // the unit a launch runs, a copy moves or a host task serves
  std::string label;
};

struct SimulatePass : public mt::impl::SimulateBase<SimulatePass> {
  using SimulateBase::SimulateBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    const Machine *base = nullptr;
    for (const Machine &p : kPresets)
      if (preset == p.name)
        base = &p;
    if (!base) {
      std::string names;
      for (const Machine &p : kPresets)
        names += (names.empty() ? "" : ", ") + std::string(p.name);
      module.emitError("mt-simulate: unknown preset '")
          << preset << "' (presets: " << names << ")";
      return signalPassFailure();
    }
    Machine m = *base;
    auto replace = [](double &field, double value, double scale) {
      if (value > 0)
        field = value * scale;
    };
    replace(m.h2d, h2dGBps, G);
    replace(m.d2h, d2hGBps, G);
    replace(m.flops, deviceTflops, T);
    replace(m.hbm, hbmGBps, G);
    replace(m.host, hostGBps, G);
    if (launchUs >= 0)
      m.launch = launchUs * us;
    if (copyLatencyUs >= 0)
      m.copyLatency = copyLatencyUs * us;
    if (attentionEff != 0) {
      if (!(attentionEff > 0 && attentionEff <= 1)) {
        module.emitError("mt-simulate: attention-efficiency ")
            << attentionEff << " is not a fraction of the peak in (0, 1]";
        return signalPassFailure();
      }
      m.attention = attentionEff;
    }

    auto schedules = llvm::to_vector(module.getOps<ScheduleOp>());
    if (schedules.size() != 1) {
      module.emitError("mt-simulate needs one mt.schedule: run the pipeline "
                       "through mt-insert-events first");
      return signalPassFailure();
    }
    ScheduleOp step = schedules[0];
    SymbolTable symbols(module);
    FailureOr<HostState> host = hostStateOf(module);
    if (failed(host))
      return signalPassFailure();
    FailureOr<std::vector<Command>> commands =
        costCommands(step, symbols, m, *host);
    if (failed(commands))
      return signalPassFailure();
    replay(module, step, *commands, symbols, m);
  }

  // Each command of the body with its duration (waits and records: 0).
  FailureOr<std::vector<Command>>
  costCommands(ScheduleOp step, SymbolTable &symbols, const Machine &m,
               const HostState &host) {
    // Host traffic per element (the header's table).
    const double packBytes = host.masterBytes + 2;
    const double accumulateBytes = 4 + 2 * host.gradBytes;
    const double adamwBytes = 2 * host.masterBytes + host.gradBytes + 16;
    llvm::StringMap<ComputeSplit> templates;
    llvm::StringMap<UnitOp> unitIn; // the unit whose data a buffer holds
    auto unitElems = [&](StringRef buffer) -> std::optional<double> {
      auto it = unitIn.find(buffer);
      if (it == unitIn.end() || !it->second.getElems())
        return std::nullopt;
      return double(*it->second.getElems());
    };
    auto bufferBytes = [&](StringRef name) {
      auto b = symbols.lookup<BufferOp>(name);
      return b ? double(b.getElems() * bytesPer(b.getDtype())) : 0.0;
    };
    auto unitOf = [&](StringRef name) { return symbols.lookup<UnitOp>(name); };
    llvm::StringMap<Operation *> lastAccumulate; // per unit
    for (Operation &op : step.getBody().front())
      if (auto a = dyn_cast<AccumulateOp>(op))
        lastAccumulate[a.getUnit()] = &op;

    std::vector<Command> out;
    StringRef updatedByPacks; // the unit whose adamw its packs carry on
    for (Operation &op : step.getBody().front()) {
      if (isa<PackOp, AccumulateOp, AdamWOp, GradNormOp>(op)) {
        auto p = dyn_cast<PackOp>(op);
        if (!p || p.getUnit() != updatedByPacks)
          updatedByPacks = "";
      }
      Command c{&op, static_cast<int>(streamOf(&op))};
      if (auto r = dyn_cast<RecordOp>(op)) {
        c.isRecord = true;
        c.event = r.getEvent();
        c.label = ("record @" + r.getEvent()).str();
      } else if (auto w = dyn_cast<WaitOp>(op)) {
        c.isWait = true;
        c.event = w.getEvent();
        auto ev = symbols.lookup<EventOp>(w.getEvent());
        c.waitsForParams = streamOf(&op) == StreamId::Compute && ev &&
                           ev.getKind() == "param_ready";
        c.label = ("wait @" + w.getEvent()).str();
      } else if (auto l = dyn_cast<LaunchOp>(op)) {
        auto it = templates.find(l.getCallee());
        if (it == templates.end()) {
          auto t = symbols.lookup<TemplateOp>(l.getCallee());
          if (!t)
            return l.emitError("mt-simulate: launches unknown template @")
                   << l.getCallee();
          it = templates.insert({l.getCallee(), templateSeconds(t, m)}).first;
        }
        c.split = it->second;
        c.seconds = c.split.total();
        c.unit = l.getUnit();
        if (auto g = l.getGradsAttr())
          unitIn[g.getValue()] = unitOf(l.getUnit());
        c.label = llvm::formatv("{0} {1} mb {2}", l.getCallee(), l.getUnit(),
                                l.getMb())
                      .str();
      } else if (auto p = dyn_cast<PackOp>(op)) {
        UnitOp u = unitOf(p.getUnit());
        unitIn[p.getInto()] = u;
        c.unit = p.getUnit();
        double elems = p.getRange() ? (*p.getRange())[1]
                       : u && u.getElems() ? double(*u.getElems())
                                           : 0.0;
        c.seconds =
            (p.getUnit() == updatedByPacks ? 2 : packBytes) * elems / m.host;
        c.label = ("pack @" + p.getUnit()).str();
      } else if (auto h = dyn_cast<H2DOp>(op)) {
        std::optional<double> elems = unitElems(h.getFrom());
        if (h.getRange())
          elems = (*h.getRange())[1];
        if (elems) {
          unitIn[h.getInto()] = unitIn[h.getFrom()];
          c.unit = unitIn[h.getFrom()].getSymName();
        }
        double bytes = elems ? 2 * *elems : bufferBytes(h.getFrom());
        c.seconds = bytes / m.h2d + m.copyLatency;
        c.label = ("h2d @" + h.getFrom() + " -> @" + h.getInto()).str();
      } else if (auto d = dyn_cast<D2HOp>(op)) {
        std::optional<double> elems = unitElems(d.getFrom());
        if (d.getRange())
          elems = (*d.getRange())[1];
        if (elems) {
          unitIn[d.getInto()] = unitIn[d.getFrom()];
          c.unit = unitIn[d.getFrom()].getSymName();
        }
        double bytes = elems ? 4 * *elems : bufferBytes(d.getFrom());
        c.seconds = bytes / m.d2h + m.copyLatency;
        c.label = ("d2h @" + d.getFrom() + " -> @" + d.getInto()).str();
      } else if (auto a = dyn_cast<AccumulateOp>(op)) {
        UnitOp u = unitOf(a.getUnit());
        double elems = a.getRange() ? (*a.getRange())[1]
                       : u && u.getElems() ? double(*u.getElems())
                                           : 0.0;
        c.seconds = accumulateBytes * elems / m.host;
        if (lastAccumulate.lookup(a.getUnit()) == &op)
          c.seconds += host.gradBytes * ownedTrained(u, symbols) / m.host;
        c.unit = a.getUnit();
        c.label = ("accumulate @" + a.getUnit()).str();
      } else if (auto a = dyn_cast<AdamWOp>(op)) {
        c.seconds =
            adamwBytes * ownedTrained(unitOf(a.getUnit()), symbols) / m.host;
        updatedByPacks = a.getUnit();
        c.unit = a.getUnit();
        c.label = ("adamw @" + a.getUnit()).str();
      } else if (isa<GradNormOp>(op)) {
        c.label = "grad_norm";
      } else if (auto lb = dyn_cast<LoadBatchOp>(op)) {
        c.seconds = bufferBytes(lb.getInto()) / m.host;
        c.label = "load_batch";
      } else {
        return op.emitError("mt-simulate: no cost for this command");
      }
      out.push_back(std::move(c));
    }
    return out;
  }

  // Params a unit updates: the trained ones it owns.
  static double ownedTrained(UnitOp u, SymbolTable &symbols) {
    if (!u)
      return 0;
    ArrayAttr refs = u.getOwnsAttr() ? u.getOwnsAttr() : u.getParams();
    double n = 0;
    for (Attribute ref : refs) {
      auto p = symbols.lookup<ParamOp>(cast<FlatSymbolRefAttr>(ref).getValue());
      if (p && !p.getFrozen() && !p.getTie())
        n += p.getTensorType().getNumElements();
    }
    return n;
  }

  void replay(ModuleOp module, ScheduleOp step,
              const std::vector<Command> &commands, SymbolTable &symbols,
              const Machine &m) {
    std::array<double, kNumStreams> ready{}, busy{};
    llvm::StringMap<double> recorded; // event -> time of its latest record
    std::array<double, kSteps> stepEnd{};
    double paramStall = 0;
    llvm::json::Array trace;
    bool tracing = !tracePath.empty();
    for (int s = 0; s < kNumStreams; ++s)
      trace.push_back(llvm::json::Object{
          {"ph", "M"},
          {"pid", 0},
          {"tid", s},
          {"name", "thread_name"},
          {"args", llvm::json::Object{{"name", streamName(StreamId(s))}}}});
    auto emit = [&](const Command &c, double start, double dur, int k,
                    StringRef cat) {
      if (tracing && dur > 0)
        trace.push_back(
            llvm::json::Object{{"ph", "X"},
                               {"pid", 0},
                               {"tid", c.stream},
                               {"cat", cat},
                               {"name", c.label},
                               {"ts", start / us},
                               {"dur", dur / us},
                               {"args", llvm::json::Object{{"step", k}}}});
    };
    for (int k = 0; k < kSteps; ++k) {
      bool last = k + 1 == kSteps;
      if (last)
        busy = {};
      for (const Command &c : commands) {
        double &t = ready[c.stream];
        if (c.isRecord) {
          recorded[c.event] = t;
        } else if (c.isWait) {
          auto it = recorded.find(c.event);
          if (it != recorded.end() && it->second > t) {
            emit(c, t, it->second - t, k, "wait");
            if (last && c.waitsForParams)
              paramStall += it->second - t;
            t = it->second;
          }
        } else {
          emit(c, t, c.seconds, k, "run");
          t += c.seconds;
          busy[c.stream] += c.seconds;
        }
      }
      stepEnd[k] = *std::max_element(ready.begin(), ready.end());
    }
    double stepS = stepEnd[kSteps - 1] - stepEnd[kSteps - 2];

    // Tokens per step: M micro-batches of the model's [B, S] token input.
    int64_t M = step->getAttrOfType<IntegerAttr>("micro_batches")
                    ? step->getAttrOfType<IntegerAttr>("micro_batches").getInt()
                    : 1;
    double tokens = 0;
    for (ModelOp model : module.getOps<ModelOp>())
      tokens = double(M) * elementsOf(model.getFunctionType().getInput(0));
    // Without the model (a hand-written schedule): the token buffer holds
    // ids and targets of every micro-batch.
    if (auto ids = symbols.lookup<BufferOp>("tokens"); ids && tokens == 0)
      tokens = ids.getElems() / 2.0;
    double active = activeParams(module, trainedParams(module));
    auto fraction = [&](double x) {
      return stepS > 0 ? std::min(1.0, x / stepS) : 0.0;
    };
    double link = fraction(paramStall);
    ComputeSplit launched;
    for (const Command &c : commands)
      launched += c.split;

    Builder b(module.getContext());
    auto f = [&](double x) { return b.getF64FloatAttr(x); };
    SmallVector<NamedAttribute> pred = {
        b.getNamedAttr("preset", b.getStringAttr(preset)),
        b.getNamedAttr("attention_efficiency", f(m.attention)),
        b.getNamedAttr("step_s", f(stepS)),
        b.getNamedAttr("tokens_per_s", f(stepS > 0 ? tokens / stepS : 0)),
        b.getNamedAttr("active_params", f(active)),
        b.getNamedAttr("model_tflops",
                       f(stepS > 0 ? 6 * active * tokens / stepS / T : 0)),
        b.getNamedAttr("compute_busy_fraction",
                       f(fraction(busy[int(StreamId::Compute)]))),
        b.getNamedAttr("h2d_busy_fraction",
                       f(fraction(busy[int(StreamId::H2D)]))),
        b.getNamedAttr("d2h_busy_fraction",
                       f(fraction(busy[int(StreamId::D2H)]))),
        b.getNamedAttr("host_busy_fraction",
                       f(fraction(busy[int(StreamId::Host)]))),
        b.getNamedAttr("link_bound_fraction", f(link)),
        b.getNamedAttr("gemm_s", f(launched.gemm)),
        b.getNamedAttr("attention_s", f(launched.attention)),
        b.getNamedAttr("other_kernels_s", f(launched.other)),
        b.getNamedAttr(
            "suggested_micro_batches",
            b.getI64IntegerAttr(link > kLinkBoundThreshold
                                    ? suggestMicroBatches(commands, M, symbols)
                                    : 0)),
    };
    step->setAttr("prediction", b.getDictionaryAttr(pred));

    if (tracing) {
      std::error_code ec;
      llvm::raw_fd_ostream os(tracePath, ec, llvm::sys::fs::OF_Text);
      if (ec) {
        module.emitError("mt-simulate: cannot write the trace '")
            << tracePath << "': " << ec.message();
        return signalPassFailure();
      }
      os << llvm::json::Value(llvm::json::Object{
                {"traceEvents", std::move(trace)}, {"displayTimeUnit", "ms"}})
         << "\n";
    }
  }

  // The smallest M at which, for every unit, each stream's share of a visit
  // fits under the visit's compute (M micro-batches): the h2d fetch, the
  // host work that feeds it (AdamW and pack before the forward visit; pack
  // and accumulate around the backward one) and the gradient drain. Layers
  // decide it when the model has any: a lone embedding or head fetch is a
  // bubble no M removes. 0 when the current M already suffices (the stall
  // is elsewhere) or when no reasonable M does.
  static int64_t suggestMicroBatches(const std::vector<Command> &commands,
                                     int64_t M, SymbolTable &symbols) {
    struct PerUnit {
      double fwd = 0, bwd = 0;         // compute per micro-batch
      double fetchFwd = 0, fetchBwd = 0, drain = 0; // copies of one visit
      double hostFwd = 0, hostBwd = 0; // host work feeding each visit
      int packVisits = 0, fetchVisits = 0;
    };
    llvm::StringMap<PerUnit> units;
    for (const Command &c : commands)
      if (auto l = dyn_cast<LaunchOp>(c.op); l && l.getMb() == 0)
        (l.getDirection() == "fwd" ? units[c.unit].fwd : units[c.unit].bwd) +=
            c.seconds;
    // A unit's visit moves in staging chunks: a chunk at element 0 starts
    // the next visit. The first visit is the forward one when there is one.
    auto startsVisit = [](Operation *op) {
      auto range = op->getAttrOfType<DenseI64ArrayAttr>("range");
      return !range || range[0] == 0;
    };
    for (const Command &c : commands) {
      if (c.unit.empty())
        continue;
      PerUnit &u = units[c.unit];
      auto forward = [&](int visit) { return u.fwd > 0 && visit == 1; };
      if (isa<H2DOp>(c.op)) {
        u.fetchVisits += startsVisit(c.op);
        (forward(u.fetchVisits) ? u.fetchFwd : u.fetchBwd) += c.seconds;
      } else if (isa<PackOp>(c.op)) {
        u.packVisits += startsVisit(c.op);
        (forward(u.packVisits) ? u.hostFwd : u.hostBwd) += c.seconds;
      } else if (isa<AdamWOp>(c.op)) { // runs before its visit's first pack
        (forward(u.packVisits + 1) ? u.hostFwd : u.hostBwd) += c.seconds;
      } else if (isa<D2HOp>(c.op)) {
        u.drain += c.seconds;
      } else if (isa<AccumulateOp>(c.op)) {
        u.hostBwd += c.seconds;
      }
    }
    auto isLayer = [&](StringRef name) {
      auto u = symbols.lookup<UnitOp>(name);
      return u && u.getKind() == "layer";
    };
    bool anyLayer = llvm::any_of(units.keys(), isLayer);
    double need = 0;
    for (auto &e : units) {
      if (anyLayer && !isLayer(e.getKey()))
        continue;
      const PerUnit &u = e.getValue();
      for (auto [work, compute] :
           {std::pair{u.fetchFwd, u.fwd}, std::pair{u.hostFwd, u.fwd},
            std::pair{u.fetchBwd, u.bwd}, std::pair{u.hostBwd, u.bwd},
            std::pair{u.drain, u.bwd}})
        if (work > 0 && compute > 0) // a head has no forward visit
          need = std::max(need, work / compute);
    }
    int64_t suggested = static_cast<int64_t>(std::ceil(need - 1e-9));
    return suggested > M && suggested <= 4096 ? suggested : 0;
  }
};

} // namespace
