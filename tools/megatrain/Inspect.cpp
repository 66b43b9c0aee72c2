//===- Inspect.cpp - megatrain inspect ------------------------------------===//
//
// Prints what plan.json records: the units, the device memory plan, host
// memory per parameter and the simulator's prediction, and says plainly
// whether the plan is link-bound and which micro-batch count would hide the
// link.
//
//===----------------------------------------------------------------------===//
#include "tools/megatrain/Commands.h"
#include "tools/megatrain/Flags.h"

#include "frontend/Error.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

namespace json = llvm::json;

namespace mt::driver {
namespace {

std::string size(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return llvm::formatv("{0:F2} {1}", bytes, units[u]).str();
}

double number(const json::Object &o, llvm::StringRef key) {
  if (const json::Value *v = o.get(key)) {
    if (auto d = v->getAsNumber())
      return *d;
  }
  return 0;
}

} // namespace

int runInspect(const std::vector<std::string> &args) {
  Flags flags(args, {}, {"--help", "--json"});
  if (flags.has("--help")) {
    std::puts("usage: megatrain inspect DIR [--json]\n\n"
              "Describes the plan compiled into DIR (by compile -o DIR).");
    return 0;
  }
  if (flags.positional().size() != 1)
    throw UsageError("inspect takes one output directory");
  std::string path = flags.positional()[0] + "/plan.json";
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    onnx_import::fail("cannot read '{}': {} (compile with -o first)", path,
                      buffer.getError().message());
  llvm::Expected<json::Value> parsed = json::parse((*buffer)->getBuffer());
  if (!parsed)
    onnx_import::fail("'{}' is not valid JSON: {}", path,
                      llvm::toString(parsed.takeError()));
  const json::Object *plan = parsed->getAsObject();
  if (!plan || !plan->get("units"))
    onnx_import::fail("'{}' is not a megatrain plan", path);
  llvm::raw_ostream &os = llvm::outs();
  if (flags.has("--json")) {
    os << llvm::formatv("{0:2}", *parsed) << "\n";
    return 0;
  }

  double trained = number(*plan, "trained_params");
  os << llvm::formatv("model {0}: {1:F3}B trained params, {2} micro-batch(es) "
                      "per step\n",
                      plan->getString("model").value_or("?"), trained / 1e9,
                      static_cast<int64_t>(number(*plan, "micro_batches")));
  // What does not train, so that a frozen parameter cannot go unseen.
  if (const json::Array *buffers = plan->getArray("model_buffers");
      buffers && !buffers->empty()) {
    constexpr size_t kShown = 4;
    os << "model buffers (never trained):";
    for (size_t i = 0; i < buffers->size() && i < kShown; ++i)
      os << (i ? ", " : " ") << (*buffers)[i].getAsString().value_or("?");
    if (buffers->size() > kShown)
      os << llvm::formatv(" and {0} more", buffers->size() - kShown);
    os << "\n";
  }
  os << "\n";
  os << llvm::formatv("{0,-6} {1,-10} {2,-12} {3,14} {4,14}  {5}\n", "unit",
                      "kind", "applies", "params", "bf16 bytes",
                      "weight slot (fwd/bwd)");
  for (const json::Value &u : *plan->getArray("units")) {
    const json::Object &unit = *u.getAsObject();
    std::string applies;
    for (const json::Value &a : *unit.getArray("applies"))
      applies += (applies.empty() ? "" : ",") +
                 std::to_string(static_cast<int64_t>(*a.getAsNumber()));
    if (applies.size() > 12)
      applies = applies.substr(0, 9) + "...";
    std::string slots;
    if (const json::Array *visits = unit.getArray("weight_slots"))
      for (const json::Value &v : *visits)
        slots += (slots.empty() ? "" : " / ") +
                 v.getAsObject()->getString("slot").value_or("").str();
    os << llvm::formatv("{0,-6} {1,-10} {2,-12} {3,14} {4,14}  {5}\n",
                        unit.getString("name").value_or(""),
                        unit.getString("kind").value_or(""), applies,
                        static_cast<int64_t>(number(unit, "params")),
                        size(number(unit, "packed_bf16_bytes")), slots);
  }

  if (const json::Object *dev = plan->getObject("device_memory")) {
    os << llvm::formatv("\ndevice memory (bf16 storage): {0}",
                        size(number(*dev, "bytes")));
    if (double budget = number(*dev, "budget"); budget > 0)
      os << llvm::formatv(" of a budget of {0} (--gpu-mem-limit)",
                          size(budget));
    os << "\n";
    if (const json::Object *parts = dev->getObject("breakdown"))
      for (const auto &kv : *parts)
        os << llvm::formatv("  {0,-16} {1}\n", kv.first.str(),
                            size(*kv.second.getAsNumber()));
  }
  const json::Array *chunks = plan->getArray("token_chunks");
  if (chunks && !chunks->empty())
    os << "in chunks of tokens (scratch holds one chunk):\n";
  if (chunks)
    for (const json::Value &c : *chunks) {
      const json::Object &t = *c.getAsObject();
      const json::Array &ops = *t.getArray("ops");
      os << llvm::formatv("  @{0} runs ops {1}..{2} in {3} chunks of {4} "
                          "tokens\n",
                          t.getString("template").value_or(""),
                          static_cast<int64_t>(*ops[0].getAsNumber()),
                          static_cast<int64_t>(*ops[1].getAsNumber()) - 1,
                          static_cast<int64_t>(number(t, "chunks")),
                          static_cast<int64_t>(number(t, "chunk_tokens")));
    }
  if (const json::Object *host = plan->getObject("host_memory"))
    os << llvm::formatv("host memory: {0} store ({3} master weights) + {1} "
                        "buffers (staging, offloaded checkpoints) = {2:F2} "
                        "bytes per trained param\n",
                        size(number(*host, "store_bytes")),
                        size(number(*host, "buffer_bytes")),
                        number(*host, "bytes_per_param"),
                        host->getString("master_weights").value_or("fp32"));

  const json::Object *pred = plan->getObject("prediction");
  if (!pred) {
    os << "\nno prediction in this plan (mt-simulate did not run)\n";
    return 0;
  }
  // Mixtures of experts: model FLOPs count the params a token uses.
  double active = number(*pred, "active_params");
  if (active > 0 && active < number(*plan, "trained_params"))
    os << llvm::formatv("\n{0:F3}B params active a token (a mixture's experts "
                        "count k of E)",
                        active / 1e9);
  os << llvm::formatv("\npredicted on {0}: step {1:F3} s, {2:F0} tokens/s, "
                      "{3:F1} model TFLOPS, GPU busy {4:F1}%\n",
                      pred->getString("preset").value_or("?"),
                      number(*pred, "step_s"), number(*pred, "tokens_per_s"),
                      number(*pred, "model_tflops"),
                      100 * number(*pred, "compute_busy_fraction"));
  os << llvm::formatv("streams busy: h2d {0:F0}%, compute {1:F0}%, d2h {2:F0}%, "
                      "host {3:F0}%\n",
                      100 * number(*pred, "h2d_busy_fraction"),
                      100 * number(*pred, "compute_busy_fraction"),
                      100 * number(*pred, "d2h_busy_fraction"),
                      100 * number(*pred, "host_busy_fraction"));
  double gemm = number(*pred, "gemm_s"),
         attention = number(*pred, "attention_s"),
         other = number(*pred, "other_kernels_s");
  if (double kernels = gemm + attention + other; kernels > 0)
    os << llvm::formatv("kernels per step: GEMMs {0:F3} s ({1:F0}%), "
                        "attention {2:F3} s ({3:F0}%), other {4:F3} s "
                        "({5:F0}%)\n",
                        gemm, 100 * gemm / kernels, attention,
                        100 * attention / kernels, other,
                        100 * other / kernels);
  if (double eff = number(*pred, "attention_efficiency");
      attention > 0 && eff > 0)
    os << llvm::formatv("attention taken at {0:F0}% of the dense peak "
                        "(compile --attention-efficiency)\n",
                        100 * eff);
  double link = number(*pred, "link_bound_fraction");
  if (link > 0.05) {
    // Weights arrive late because the link is slow, or because the host
    // packs them (and runs the optimizer) slower than compute consumes them.
    bool hostBound = number(*pred, "host_busy_fraction") >
                     number(*pred, "h2d_busy_fraction");
    os << llvm::formatv("the GPU waits for weights {0:F0}% of the step: the "
                        "plan is {1}",
                        100 * link,
                        hostBound ? "host-bound (packing and the optimizer)"
                                  : "link-bound");
    if (double m = number(*pred, "suggested_micro_batches"); m > 0)
      os << llvm::formatv("; --micro-batches {0} would hide it",
                          static_cast<int64_t>(m));
    os << "\n";
  } else {
    os << "the link is hidden behind compute\n";
  }
  return 0;
}

} // namespace mt::driver
