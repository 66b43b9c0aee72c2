//===- PlanJson.cpp - plan.json: what inspect shows -----------------------===//
#include "codegen/PlanJson.h"

#include "codegen/TrainerCodegen.h"
#include "ir/MtOps.h"
#include "passes/ModelInfo.h"
#include "passes/RowChunk.h"

#include "llvm/ADT/StringMap.h"

using namespace mlir;
namespace json = llvm::json;

namespace mt {

json::Object planJson(ModuleOp module, StringRef modelName,
                      const std::vector<std::string> &constantInitializers,
                      const std::vector<std::string> &modelBuffers) {
  json::Object plan;
  plan["model"] = modelName.str();
  plan["constant_initializers"] = json::Array(constantInitializers);
  plan["model_buffers"] = json::Array(modelBuffers);
  plan["plan_hash"] = planHash(module);
  SymbolTable symbols(module);

  int64_t trained = 0, frozen = 0;
  for (ParamOp p : module.getOps<ParamOp>()) {
    if (p.getTie())
      continue;
    (p.getFrozen() ? frozen : trained) += p.getTensorType().getNumElements();
  }
  plan["trained_params"] = trained;
  plan["frozen_params"] = frozen;

  // The weight slot of each visit of a unit (forward, then backward; its
  // micro-batches share the visit).
  llvm::StringMap<std::vector<std::pair<StringRef, StringRef>>> visits;
  module.walk([&](LaunchOp l) {
    if (!l.getWeights())
      return;
    auto &v = visits[l.getUnit()];
    std::pair<StringRef, StringRef> visit{l.getDirection(), *l.getWeights()};
    if (v.empty() || v.back() != visit)
      v.push_back(visit);
  });

  json::Array units;
  for (UnitOp u : module.getOps<UnitOp>()) {
    // The elements the unit holds: a vocabulary piece holds part of its
    // weight.
    int64_t params = 0;
    for (auto [i, ref] : llvm::enumerate(u.getParams()))
      params += u.getParts()
                    ? (*u.getParts())[3 * i + 2]
                    : symbols
                          .lookup<ParamOp>(cast<FlatSymbolRefAttr>(ref).getValue())
                          .getTensorType()
                          .getNumElements();
    json::Array applies;
    for (int64_t a : u.getApplies())
      applies.push_back(a);
    int64_t elems = u.getElems() ? *u.getElems() : 0;
    json::Array slots;
    for (auto [direction, slot] : visits.lookup(u.getSymName()))
      slots.push_back(json::Object{{"direction", direction}, {"slot", slot}});
    units.push_back(json::Object{{"name", u.getSymName()},
                                 {"kind", u.getKind()},
                                 {"applies", std::move(applies)},
                                 {"params", params},
                                 {"packed_bf16_bytes", 2 * elems},
                                 {"weight_slots", std::move(slots)}});
  }
  plan["units"] = std::move(units);

  // Templates that run a stretch of their ops in chunks of token rows.
  json::Array chunked;
  for (TemplateOp t : module.getOps<TemplateOp>())
    if (std::optional<RowChunking> c = rowChunkingOf(t))
      chunked.push_back(json::Object{{"template", t.getSymName()},
                                     {"ops", json::Array{c->begin, c->end}},
                                     {"chunk_tokens", c->chunk},
                                     {"chunks", c->chunks()}});
  plan["token_chunks"] = std::move(chunked);

  for (ScheduleOp step : module.getOps<ScheduleOp>()) {
    plan["micro_batches"] =
        step->getAttrOfType<IntegerAttr>("micro_batches").getInt();
    json::Object device;
    if (auto bytes = step->getAttrOfType<IntegerAttr>("device_bytes"))
      device["bytes"] = bytes.getInt();
    if (auto budget = step->getAttrOfType<IntegerAttr>("device_budget"))
      device["budget"] = budget.getInt();
    if (auto breakdown = step->getAttrOfType<DictionaryAttr>("device_breakdown")) {
      json::Object parts;
      for (NamedAttribute part : breakdown)
        parts[part.getName().getValue()] =
            cast<IntegerAttr>(part.getValue()).getInt();
      device["breakdown"] = std::move(parts);
    }
    plan["device_memory"] = std::move(device);
    if (auto sim = step->getAttrOfType<DictionaryAttr>("prediction")) {
      json::Object pred;
      for (NamedAttribute a : sim) {
        if (auto f = dyn_cast<FloatAttr>(a.getValue()))
          pred[a.getName().getValue()] = f.getValueAsDouble();
        else if (auto i = dyn_cast<IntegerAttr>(a.getValue()))
          pred[a.getName().getValue()] = i.getInt();
        else if (auto s = dyn_cast<StringAttr>(a.getValue()))
          pred[a.getName().getValue()] = s.getValue();
      }
      plan["prediction"] = std::move(pred);
    }
  }

  // Host: the store, plus every host buffer of the schedule (staging and
  // landing slabs, offloaded checkpoints, the batch), with bf16 storage.
  int64_t buffers = 0;
  for (BufferOp b : module.getOps<BufferOp>())
    if (b.getSpace() == "host")
      buffers += b.getElems() * (b.getDtype() == "storage" ? 2 : 4);
  // The store: master weights, Adam m and v, the gradient accumulator.
  FailureOr<HostState> state = hostStateOf(module);
  const int64_t perParam = succeeded(state) ? state->bytesPerParam() : 16;
  json::Object host{{"store_bytes", perParam * trained},
                    {"buffer_bytes", buffers},
                    {"master_weights",
                     succeeded(state) && state->bf16Master ? "bf16" : "fp32"}};
  if (trained > 0)
    host["bytes_per_param"] =
        double(perParam * trained + buffers) / double(trained);
  plan["host_memory"] = std::move(host);
  return plan;
}

} // namespace mt
