//===- TrainerFlags.cpp - the trainer's command line ----------------------===//

#include "runtime/trainer/TrainerFlags.h"

#include "runtime/exec/Error.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

namespace mtrt {

namespace {

int64_t to_int(const std::string &flag, const std::string &v) {
  errno = 0;
  char *end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno)
    fail(flag, ": '", v, "' is not an integer");
  return x;
}

double to_double(const std::string &flag, const std::string &v) {
  errno = 0;
  char *end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno || !std::isfinite(x))
    fail(flag, ": '", v, "' is not a number");
  return x;
}

struct Flag {
  const char *name;
  bool takes_value;
  std::function<void(const std::string &)> set;
};

} // namespace

std::string trainer_usage(const char *argv0) {
  return std::string("usage: ") + (argv0 ? argv0 : "trainer") +
         " --data TOKENS.u32 [flags]\n"
         "  --data F               token file: raw little-endian uint32 ids\n"
         "  --backend cpu|cuda     device backend (cpu)\n"
         "  --steps N              optimizer steps (1)\n"
         "  --lr X                 peak learning rate (3e-4)\n"
         "  --warmup W             linear warmup steps (0)\n"
         "  --lr-schedule S        cosine|constant (cosine)\n"
         "  --min-lr-ratio R       cosine floor as a fraction of --lr (0.1)\n"
         "  --weight-decay WD      AdamW decay, params of rank >= 2 (0.1)\n"
         "  --beta1 B --beta2 B    AdamW betas (0.9, 0.95)\n"
         "  --eps E                AdamW eps (1e-8)\n"
         "  --clip-grad C          max global grad norm, 0 disables (1.0)\n"
         "  --grad-accum A         micro-steps per optimizer step (1)\n"
         "  --precision P          fp32|bf16 (fp32 on cpu, bf16 on cuda)\n"
         "  --seed S               random init and stress seed (0)\n"
         "  --init onnx|random     initial weights (onnx: "
         "weights.safetensors)\n"
         "  --weights F            weights file for --init onnx and frozen "
         "tables\n"
         "                         (default: weights.safetensors next to the "
         "trainer)\n"
         "  --log-jsonl F          one JSON object per step\n"
         "  --dump-grads F         step 0's gradients as f32 safetensors\n"
         "  --checkpoint-dir D     write checkpoints into D\n"
         "  --checkpoint-every K   every K steps (default: at the end only)\n"
         "  --resume D             continue from the latest checkpoint in D\n"
         "  --resume-other-plan    also from a checkpoint of another plan of "
         "the same\n"
         "                         params (other batch, sequence, budget or "
         "masters)\n"
         "  --export F             trained weights as f32 safetensors\n"
         "  --trace F              Chrome-trace timeline of the streams\n"
         "  --stress               random stream delays, poisoned buffers\n"
         "  --threads N            host optimizer threads (all cores)\n";
}

TrainerOptions parse_trainer_flags(int argc, char **argv) {
  TrainerOptions o;
  auto text = [](std::string *dst) {
    return [dst](const std::string &v) { *dst = v; };
  };
  auto integer = [](const char *flag, int64_t *dst) {
    return [flag, dst](const std::string &v) { *dst = to_int(flag, v); };
  };
  auto number = [](const char *flag, double *dst) {
    return [flag, dst](const std::string &v) { *dst = to_double(flag, v); };
  };
  int64_t seed = 0;
  const std::vector<Flag> flags = {
      {"--data", true, text(&o.data)},
      {"--backend", true, text(&o.backend)},
      {"--steps", true, integer("--steps", &o.steps)},
      {"--lr", true, number("--lr", &o.lr)},
      {"--warmup", true, integer("--warmup", &o.warmup)},
      {"--lr-schedule", true, text(&o.lr_schedule)},
      {"--min-lr-ratio", true, number("--min-lr-ratio", &o.min_lr_ratio)},
      {"--weight-decay", true, number("--weight-decay", &o.weight_decay)},
      {"--beta1", true, number("--beta1", &o.beta1)},
      {"--beta2", true, number("--beta2", &o.beta2)},
      {"--eps", true, number("--eps", &o.eps)},
      {"--clip-grad", true, number("--clip-grad", &o.clip_grad)},
      {"--grad-accum", true, integer("--grad-accum", &o.grad_accum)},
      {"--precision", true, text(&o.precision)},
      {"--seed", true, integer("--seed", &seed)},
      {"--init", true, text(&o.init)},
      {"--weights", true, text(&o.weights)},
      {"--log-jsonl", true, text(&o.log_jsonl)},
      {"--dump-grads", true, text(&o.dump_grads)},
      {"--checkpoint-dir", true, text(&o.checkpoint_dir)},
      {"--checkpoint-every", true,
       integer("--checkpoint-every", &o.checkpoint_every)},
      {"--resume", true, text(&o.resume)},
      {"--resume-other-plan", false,
       [&o](const std::string &) { o.resume_other_plan = true; }},
      {"--export", true, text(&o.export_path)},
      {"--trace", true, text(&o.trace)},
      {"--stress", false, [&o](const std::string &) { o.stress = true; }},
      {"--threads", true, integer("--threads", &o.threads)},
      {"--help", false, [&o](const std::string &) { o.help = true; }},
      {"-h", false, [&o](const std::string &) { o.help = true; }},
  };

  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string name = arg, value;
    bool inline_value = false;
    size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      inline_value = true;
    }
    const Flag *flag = nullptr;
    for (const Flag &f : flags)
      if (name == f.name)
        flag = &f;
    if (!flag)
      fail("unknown flag '", arg, "' (see --help)");
    if (flag->takes_value && !inline_value) {
      if (i + 1 >= argc)
        fail(name, " needs a value");
      value = argv[++i];
    } else if (!flag->takes_value && inline_value) {
      fail(name, " takes no value (got '", value, "')");
    }
    flag->set(value);
  }
  if (o.help)
    return o;

  if (seed < 0)
    fail("--seed must be >= 0 (got ", seed, ")");
  o.seed = uint64_t(seed);
  if (o.resume_other_plan && o.resume.empty())
    fail("--resume-other-plan needs --resume D");
  if (o.data.empty())
    fail("--data is required (a token file of raw little-endian uint32 ids)");
  if (o.steps < 1)
    fail("--steps must be >= 1 (got ", o.steps, ")");
  if (o.grad_accum < 1 || o.grad_accum > (1 << 20))
    fail("--grad-accum must be in 1..1048576 (got ", o.grad_accum, ")");
  if (o.warmup < 0)
    fail("--warmup must be >= 0 (got ", o.warmup, ")");
  if (o.lr < 0)
    fail("--lr must be >= 0 (got ", o.lr, ")");
  if (o.lr_schedule != "cosine" && o.lr_schedule != "constant")
    fail("--lr-schedule must be cosine or constant (got '", o.lr_schedule,
         "')");
  if (o.min_lr_ratio < 0)
    fail("--min-lr-ratio must be >= 0 (got ", o.min_lr_ratio, ")");
  if (o.weight_decay < 0)
    fail("--weight-decay must be >= 0 (got ", o.weight_decay, ")");
  if (o.beta1 < 0 || o.beta1 >= 1)
    fail("--beta1 must be in [0, 1) (got ", o.beta1, ")");
  if (o.beta2 < 0 || o.beta2 >= 1)
    fail("--beta2 must be in [0, 1) (got ", o.beta2, ")");
  if (o.eps <= 0)
    fail("--eps must be > 0 (got ", o.eps, ")");
  if (o.clip_grad < 0)
    fail("--clip-grad must be >= 0, 0 disables (got ", o.clip_grad, ")");
  if (!o.precision.empty() && o.precision != "fp32" && o.precision != "bf16")
    fail("--precision must be fp32 or bf16 (got '", o.precision, "')");
  if (o.init != "onnx" && o.init != "random")
    fail("--init must be onnx or random (got '", o.init, "')");
  if (o.checkpoint_every < 0)
    fail("--checkpoint-every must be >= 0 (got ", o.checkpoint_every, ")");
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty())
    fail("--checkpoint-every needs --checkpoint-dir");
  if (o.threads < 0 || o.threads > 4096)
    fail("--threads must be in 0..4096 (got ", o.threads, ")");
  return o;
}

} // namespace mtrt
