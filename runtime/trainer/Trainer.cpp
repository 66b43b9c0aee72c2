//===- Trainer.cpp - a training run, start to finish ----------------------===//

#include "runtime/trainer/Trainer.h"

#include "runtime/exec/BackendRegistry.h"
#include "runtime/exec/Error.h"
#include "runtime/exec/Executor.h"
#include "runtime/exec/HostStore.h"
#include "runtime/exec/ProgramCheck.h"
#include "runtime/exec/Trace.h"
#include "runtime/host/Bf16.h"
#include "runtime/host/ThreadPool.h"
#include "runtime/trainer/AtomicFile.h"
#include "runtime/trainer/Checkpoint.h"
#include "runtime/trainer/DataLoader.h"
#include "runtime/trainer/HostMemory.h"
#include "runtime/trainer/Json.h"
#include "runtime/trainer/LrSchedule.h"
#include "runtime/trainer/MetricsLog.h"
#include "runtime/trainer/Progress.h"
#include "runtime/trainer/Safetensors.h"
#include "runtime/trainer/WeightInit.h"

#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <thread>
#include <unistd.h>

namespace mtrt {

namespace {

std::vector<int64_t> shape_of(const ParamDesc &d) {
  return std::vector<int64_t>(d.shape, d.shape + d.rank);
}

/// The flags whose values change the math: recorded in checkpoints and
/// compared on resume.
std::map<std::string, std::string> math_flags(const TrainerOptions &o,
                                              bool bf16, const Program &p) {
  std::map<std::string, std::string> flags = {
      {"lr", json_number(o.lr)},
      {"warmup", std::to_string(o.warmup)},
      {"lr_schedule", o.lr_schedule},
      {"min_lr_ratio", json_number(o.min_lr_ratio)},
      {"weight_decay", json_number(o.weight_decay)},
      {"beta1", json_number(o.beta1)},
      {"beta2", json_number(o.beta2)},
      {"eps", json_number(o.eps)},
      {"clip_grad", json_number(o.clip_grad)},
      {"grad_accum", std::to_string(o.grad_accum)},
      {"precision", bf16 ? "bf16" : "fp32"},
      {"backend", o.backend},
  };
  if (o.lr_schedule == "cosine") // the cosine's length is the run's length
    flags["steps"] = std::to_string(o.steps);
  if (p.master == MasterFormat::Bf16) // it seeds the stochastic rounding
    flags["seed"] = std::to_string(o.seed);
  return flags;
}

/// Untied params (trainable masters and frozen tables) keyed by name.
/// Every param under its own name: a tied one is written out from its
/// primary (transposed where the tie is), so that each ONNX initializer the
/// model trains has its tensor (megatrain export-onnx relies on it).
void write_weights(const HostStore &store, const std::string &path) {
  const Program &p = store.program();
  SafetensorsWriter w;
  std::vector<std::vector<float>> copies; // tied views, alive until write()
  copies.reserve(size_t(p.num_params));
  for (int q = 0; q < p.num_params; ++q) {
    const ParamDesc &d = p.params[q];
    const int primary = d.tie >= 0 ? d.tie : q;
    const uint16_t *bf16 = store.values_bf16(primary);
    if (d.tie < 0) {
      if (bf16)
        w.add_widened(d.name, shape_of(d), bf16);
      else
        w.add(d.name, shape_of(d), store.values(q));
      continue;
    }
    const float *f32 = store.values(primary);
    auto element = [&](int64_t k) {
      return bf16 ? bf16_widen(bf16[k]) : f32[k];
    };
    std::vector<float> &copy = copies.emplace_back(size_t(d.numel));
    if (d.tie_transposed) // this param is (rows, cols); its primary (cols,
                          // rows)
      for (int64_t r = 0; r < d.shape[0]; ++r)
        for (int64_t c = 0; c < d.shape[1]; ++c)
          copy[r * d.shape[1] + c] = element(c * d.shape[0] + r);
    else
      for (int64_t k = 0; k < d.numel; ++k)
        copy[k] = element(k);
    w.add(d.name, shape_of(d), copy.data());
  }
  w.set_metadata("plan_hash", p.plan_hash);
  w.write(path);
}

/// The accumulated (averaged, unclipped) gradients of trainable params; a
/// tie's gradient is already summed into its primary.
void write_grads(const HostStore &store, const std::string &path) {
  const Program &p = store.program();
  SafetensorsWriter w;
  for (int q = 0; q < p.num_params; ++q)
    if (store.trainable(q) && store.bf16_master())
      w.add_widened(p.params[q].name, shape_of(p.params[q]),
                    store.grad_bf16(q));
    else if (store.trainable(q))
      w.add(p.params[q].name, shape_of(p.params[q]), store.grad(q));
  w.set_metadata("plan_hash", p.plan_hash);
  w.write(path);
}

bool has_command(const Program &p, Op op) {
  for (int c = 0; c < p.num_commands; ++c)
    if (p.commands[c].op == op)
      return true;
  return false;
}

} // namespace

Trainer::Trainer(const Program &p, TrainerOptions opts, std::string exe_dir)
    : p_(p), opts_(std::move(opts)), exe_dir_(std::move(exe_dir)) {}

void Trainer::run(std::FILE *out, std::FILE *err) {
  check_program(p_);
  const BackendEntry entry = backend_entry(opts_.backend);
  const bool bf16 =
      opts_.precision.empty() ? entry.default_bf16 : opts_.precision == "bf16";
  const int64_t A = opts_.grad_accum;
  const int64_t tokens_per_step = A * p_.micro_batches * p_.batch * p_.seq_len;

  BatchShape shape;
  shape.batch = p_.batch;
  shape.seq_len = p_.seq_len;
  shape.micro_batches = p_.micro_batches;
  shape.grad_accum = A;
  shape.vocab = p_.vocab;
  DataLoader data(opts_.data, shape);

  std::unique_ptr<Trace> trace;
  if (!opts_.trace.empty())
    trace = std::make_unique<Trace>();
  BackendOptions bopts;
  bopts.bf16 = bf16;
  bopts.stress = opts_.stress;
  bopts.stress_seed = opts_.seed;
  bopts.trace = trace.get();
  bopts.device_budget = p_.device_budget;
  std::unique_ptr<Backend> backend = entry.create(bopts);
  backend->check_supported(p_);

  OptimizerConfig oc;
  oc.beta1 = opts_.beta1;
  oc.beta2 = opts_.beta2;
  oc.eps = opts_.eps;
  oc.weight_decay = opts_.weight_decay;
  oc.clip_grad = opts_.clip_grad;
  oc.rounding_seed = opts_.seed;
  check_host_store_fits(HostStore::bytes_for(p_),
                        p_.master == MasterFormat::Bf16, host_memory_info(),
                        err);
  HostStore store(p_, backend->storage_format(), oc);

  int threads = int(opts_.threads);
  if (threads == 0)
    threads = int(std::max(1u, std::thread::hardware_concurrency()));
  // Before the weights: --init random fills them on it.
  host::ThreadPool pool(threads);

  const std::string weights =
      opts_.weights.empty() ? exe_dir_ + "/weights.safetensors" : opts_.weights;
  int64_t start = 0;
  const auto flags = math_flags(opts_, bf16, p_);
  if (!opts_.resume.empty()) {
    init_frozen(store, weights);
    CheckpointManifest m =
        load_checkpoint(opts_.resume, store, opts_.resume_other_plan);
    start = m.step;
    if (m.plan_hash != p_.plan_hash)
      std::fprintf(err,
                   "warning: the checkpoint is from another plan (plan_hash "
                   "%s): its weights and optimizer state carry over, and "
                   "training continues at step %lld with this plan's "
                   "batches\n",
                   m.plan_hash.c_str(), static_cast<long long>(start));
    for (const auto &kv : flags) {
      auto it = m.flags.find(kv.first);
      if (it != m.flags.end() && it->second != kv.second)
        std::fprintf(err,
                     "warning: --%s %s differs from the checkpoint's %s; the "
                     "run will not match an uninterrupted one\n",
                     kv.first.c_str(), kv.second.c_str(), it->second.c_str());
    }
  } else if (opts_.init == "random") {
    init_random(store, opts_.seed, weights, &pool);
  } else {
    init_from_file(store, weights);
  }
  if (!opts_.dump_grads.empty() && start > 0)
    fail("--dump-grads writes step 0's gradients, but --resume ", opts_.resume,
         " starts at step ", start);

  ExecutorOptions eopts;
  eopts.grad_accum = int(A);
  eopts.stress = opts_.stress;
  Executor exec(p_, *backend, store, data, &pool, eopts);
  const bool program_norms = has_command(p_, Op::GradNorm);

  const int64_t host_bytes = store.bytes() + exec.host_bytes();
  host_bytes_per_param_ =
      store.trainable_params() > 0
          ? double(host_bytes) / double(store.trainable_params())
          : 0.0;
  const std::string details = backend->details();
  std::fprintf(
      out,
      "megatrain: %s (plan %s), backend %s %s%s, %lld trainable "
      "params (%s master weights), host %.1f MiB (%.2f B/param), "
      "device %.1f MiB, %lld tokens/step\n",
      p_.model_name, p_.plan_hash, backend->name(), bf16 ? "bf16" : "fp32",
      details.empty() ? "" : (" (" + details + ")").c_str(),
      static_cast<long long>(store.trainable_params()),
      store.bf16_master() ? "bf16" : "fp32", double(host_bytes) / 1048576.0,
      host_bytes_per_param_, double(exec.device_bytes()) / 1048576.0,
      static_cast<long long>(tokens_per_step));
  std::fflush(out);

  LrSchedule schedule;
  schedule.lr = opts_.lr;
  schedule.warmup = opts_.warmup;
  schedule.cosine = opts_.lr_schedule == "cosine";
  schedule.min_lr_ratio = opts_.min_lr_ratio;
  schedule.steps = opts_.steps;

  std::unique_ptr<MetricsLog> log;
  if (!opts_.log_jsonl.empty())
    log = std::make_unique<MetricsLog>(opts_.log_jsonl);
  Progress progress(start, opts_.steps, ::isatty(::fileno(out)) == 1, out);

  auto checkpoint = [&](int64_t steps_done) {
    store.flush(&pool);
    CheckpointManifest m;
    m.model = p_.model_name;
    m.plan_hash = p_.plan_hash;
    m.step = steps_done;
    m.optimizer_steps = steps_done;
    m.data_position = data.position(steps_done);
    m.seed = opts_.seed;
    m.flags = flags;
    save_checkpoint(opts_.checkpoint_dir, store, m);
  };

  int64_t last_checkpoint = start;
  for (int64_t t = start; t < opts_.steps; ++t) {
    auto t0 = std::chrono::steady_clock::now();
    double loss_sum = 0;
    for (int64_t a = 0; a < A; ++a) {
      exec.run(t, int(a));
      for (float l : exec.losses())
        loss_sum += double(l);
    }
    if (!program_norms)
      store.compute_grad_norm(&pool);
    if (t == 0 && !opts_.dump_grads.empty())
      write_grads(store, opts_.dump_grads);

    StepRecord r;
    r.step = t;
    r.loss = loss_sum / double(A * p_.micro_batches);
    r.lr = schedule.at(t);
    r.grad_norm = store.grad_norm();
    r.tokens = tokens_per_step;
    store.schedule_update(t + 1, r.lr);
    r.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    r.tokens_per_s = r.seconds > 0 ? double(r.tokens) / r.seconds : 0.0;
    progress.step(r);
    if (log)
      log->append(r);
    if (!opts_.checkpoint_dir.empty() && opts_.checkpoint_every > 0 &&
        (t + 1) % opts_.checkpoint_every == 0) {
      checkpoint(t + 1);
      last_checkpoint = t + 1;
    }
  }
  progress.finish();

  store.flush(&pool);
  if (!opts_.checkpoint_dir.empty() && last_checkpoint != opts_.steps &&
      start < opts_.steps)
    checkpoint(opts_.steps);
  if (!opts_.export_path.empty())
    write_weights(store, opts_.export_path);
  if (log)
    log->commit();
  if (trace)
    trace->write(opts_.trace);
}

} // namespace mtrt
