//===- Executor.cpp - runs one step of a Program on a Backend -------------===//

#include "runtime/exec/Executor.h"

#include "runtime/exec/DeviceKernels.h"
#include "runtime/exec/Error.h"
#include "runtime/exec/HostStore.h"
#include "runtime/exec/ProgramCheck.h"

#include <algorithm>
#include <cstring>

namespace mtrt {

Executor::Executor(const Program &p, Backend &backend, HostStore &store,
                   BatchSource &batches, host::ThreadPool *pool,
                   const ExecutorOptions &opts)
    : p_(p), backend_(backend), store_(store), batches_(batches), pool_(pool),
      opts_(opts) {
  check_program(p);
  if (opts_.grad_accum < 1)
    fail("--grad-accum must be >= 1 (got ", opts_.grad_accum, ")");
  dloss_ = static_cast<float>(
      1.0 / (double(opts_.grad_accum) * double(p.micro_batches) *
             double(p.batch) * double(p.seq_len)));

  // Arenas: each dtype's extent, the workspace after the storage buffers.
  int64_t arena[kNumDTypes] = {0, 0, 0};
  for (int b = 0; b < p.num_buffers; ++b) {
    const BufferDesc &d = p.buffers[b];
    if (d.space == Space::Device)
      arena[int(d.dtype)] =
          std::max(arena[int(d.dtype)], d.offset + d.elems);
  }
  int64_t workspace_elems = 0;
  for (int t = 0; t < p.num_templates; ++t)
    workspace_elems = std::max(workspace_elems, p.templates[t].workspace_elems);
  const int64_t workspace_offset = arena[int(DType::Storage)];
  arena[int(DType::Storage)] += workspace_elems;
  backend_.allocate_arenas(arena);
  for (int t = 0; t < kNumDTypes; ++t)
    device_bytes_ += arena[t] * backend_.dtype_size(DType(t));
  if (workspace_elems > 0)
    workspace_ = static_cast<char *>(backend_.arena(DType::Storage)) +
                 workspace_offset * backend_.storage_size();

  addr_.assign(size_t(p.num_buffers), nullptr);
  poison_labels_.resize(size_t(p.num_buffers));
  for (int b = 0; b < p.num_buffers; ++b) {
    const BufferDesc &d = p.buffers[b];
    const int64_t bytes = buffer_bytes(b);
    if (d.space == Space::Device) {
      addr_[b] = static_cast<char *>(backend_.arena(d.dtype)) +
                 d.offset * backend_.dtype_size(d.dtype);
    } else {
      host_memory_.push_back(backend_.allocate_host(bytes));
      addr_[b] = host_memory_.back().get();
      host_bytes_ += bytes;
    }
    if (d.kind == BufferKind::LossHost)
      loss_host_ = b;
    poison_labels_[b] = std::string("poison ") + d.name;
  }

  const int64_t tokens_per_mb = p.batch * p.seq_len;
  launches_.resize(size_t(p.num_launches));
  for (int l = 0; l < p.num_launches; ++l) {
    const LaunchDesc &d = p.launches[l];
    ResolvedLaunch &r = launches_[l];
    for (int i = 0; i < d.num_inputs; ++i) {
      const BufferDesc &b = p.buffers[d.inputs[i]];
      char *a = static_cast<char *>(addr_[d.inputs[i]]);
      if (b.kind == BufferKind::Tokens)
        a += 2 * d.mb * tokens_per_mb * sizeof(int32_t);
      r.inputs.push_back(a);
    }
    for (int i = 0; i < d.num_outputs; ++i) {
      const BufferDesc &b = p.buffers[d.outputs[i]];
      char *a = static_cast<char *>(addr_[d.outputs[i]]);
      if (b.kind == BufferKind::Loss)
        a += d.mb * sizeof(float);
      else if (b.kind == BufferKind::Tokens)
        a += 2 * d.mb * tokens_per_mb * sizeof(int32_t);
      r.outputs.push_back(a);
    }
    r.args.k = &backend_.kernels();
    r.args.inputs = r.inputs.data();
    r.args.outputs = r.outputs.data();
    r.args.weights = addr_[d.weights];
    r.args.grads = d.grads >= 0 ? static_cast<float *>(addr_[d.grads]) : nullptr;
    r.args.param_offsets = d.param_offsets;
    r.args.workspace = workspace_;
    r.args.dloss = dloss_;
    r.zero_elems = d.backward && d.fresh ? p.units[d.unit].elems : 0;
  }

  // The step's last Accumulate into each unit's accumulators.
  std::vector<int> last_accumulate(size_t(p.num_units), -1);
  for (int c = 0; c < p.num_commands; ++c) {
    const Command &cmd = p.commands[c];
    if (cmd.op == Op::Accumulate)
      for (int w : store_.accumulated_owners(cmd.a, cmd.begin, cmd.count))
        last_accumulate[w] = c;
  }
  squares_after_.resize(size_t(p.num_commands));
  squares_labels_.resize(size_t(p.num_units));
  for (int u = 0; u < p.num_units; ++u) {
    squares_labels_[u] = std::string("sum_squares ") + p.units[u].name;
    if (last_accumulate[u] >= 0)
      squares_after_[last_accumulate[u]].push_back(u);
  }

  // An AdamW(u) followed, among its stream's host-store commands, by u's
  // first Pack: the packs apply the update block by block.
  auto touches_store = [](Op op) {
    return op == Op::Pack || op == Op::Accumulate || op == Op::AdamW ||
           op == Op::GradNorm;
  };
  left_to_packs_.assign(size_t(p.num_commands), 0);
  std::vector<char> applies_update(size_t(p.num_commands), 0);
  for (int c = 0; c < p.num_commands; ++c) {
    const Command &cmd = p.commands[c];
    if (cmd.op != Op::AdamW)
      continue;
    int next = c + 1;
    while (next < p.num_commands && !(p.commands[next].stream == cmd.stream &&
                                      touches_store(p.commands[next].op)))
      ++next;
    if (next == p.num_commands || p.commands[next].op != Op::Pack ||
        p.commands[next].a != cmd.a || p.commands[next].begin != 0)
      continue;
    left_to_packs_[c] = 1;
    for (int k = next; k < p.num_commands; ++k) {
      const Command &q = p.commands[k];
      if (q.stream != cmd.stream || !touches_store(q.op))
        continue;
      if (q.op != Op::Pack || q.a != cmd.a)
        break;
      applies_update[k] = 1;
    }
  }

  labels_.resize(size_t(p.num_commands));
  for (int c = 0; c < p.num_commands; ++c) {
    const Command &cmd = p.commands[c];
    std::string &s = labels_[c];
    switch (cmd.op) {
    case Op::Launch: {
      const LaunchDesc &d = p.launches[cmd.a];
      s = std::string(p.templates[d.tmpl].name) +
          (d.backward ? " bwd " : " fwd ") + p.units[d.unit].name + " mb" +
          std::to_string(d.mb);
      break;
    }
    case Op::Pack:
    case Op::Accumulate:
    case Op::AdamW:
      s = std::string(applies_update[c] ? "adamw+pack" : op_name(cmd.op)) +
          " " + p.units[cmd.a].name;
      break;
    case Op::H2D:
    case Op::D2H:
      s = std::string(op_name(cmd.op)) + " " + p.buffers[cmd.a].name +
          " -> " + p.buffers[cmd.b].name;
      break;
    case Op::Record:
    case Op::Wait:
      s = std::string(op_name(cmd.op)) + " " + p.events[cmd.a].name;
      break;
    default:
      s = op_name(cmd.op);
    }
  }
}

Executor::~Executor() {
  try {
    backend_.synchronize(); // nothing may still touch our buffers
  } catch (...) {
  }
}

int64_t Executor::buffer_bytes(int b) const {
  const BufferDesc &d = p_.buffers[b];
  return d.elems * backend_.dtype_size(d.dtype);
}

void Executor::issue_poison(Stream s, int b) {
  void *dst = addr_[b];
  int64_t bytes = buffer_bytes(b);
  if (p_.buffers[b].space == Space::Device)
    backend_.fill_device(s, dst, 0xFF, bytes);
  else
    backend_.host_task(s, poison_labels_[b].c_str(), [dst, bytes] {
      std::memset(dst, 0xFF, size_t(bytes));
    });
}

void Executor::issue(int c, int64_t step, int micro) {
  const Command &cmd = p_.commands[c];
  const char *label = labels_[c].c_str();
  switch (cmd.op) {
  case Op::Launch: {
    const ResolvedLaunch *r = &launches_[cmd.a];
    void (*fn)(const LaunchArgs &) = p_.templates[p_.launches[cmd.a].tmpl].fn;
    backend_.launch(cmd.stream, label, [r, fn] {
      if (r->zero_elems > 0)
        r->args.k->zero_f32(r->args.grads, r->zero_elems);
      fn(r->args);
    });
    break;
  }
  case Op::Pack: {
    int unit = cmd.a;
    void *staging = addr_[cmd.b];
    int64_t begin = cmd.begin, count = cmd.count;
    backend_.host_task(cmd.stream, label, [this, unit, staging, begin, count] {
      store_.pack(unit, staging, pool_, begin, count);
    });
    break;
  }
  case Op::H2D:
  case Op::D2H: {
    // A chunk sits at `begin` of the device buffer and at the start of the
    // host slab.
    int device = cmd.op == Op::H2D ? cmd.b : cmd.a;
    int64_t esize = backend_.dtype_size(p_.buffers[cmd.a].dtype);
    char *src = static_cast<char *>(addr_[cmd.a]);
    char *dst = static_cast<char *>(addr_[cmd.b]);
    int64_t bytes = buffer_bytes(cmd.a);
    if (cmd.count >= 0) {
      bytes = cmd.count * esize;
      (device == cmd.a ? src : dst) += cmd.begin * esize;
    }
    backend_.copy(cmd.stream, label, dst, src, bytes);
    break;
  }
  case Op::LoadBatch: {
    int32_t *batch = static_cast<int32_t *>(addr_[cmd.b]);
    backend_.host_task(cmd.stream, label, [this, batch, step, micro] {
      batches_.fill(step, micro, batch);
    });
    break;
  }
  case Op::Accumulate: {
    int unit = cmd.a;
    const float *grads = static_cast<const float *>(addr_[cmd.b]);
    int64_t begin = cmd.begin, count = cmd.count;
    backend_.host_task(cmd.stream, label, [this, unit, grads, begin, count] {
      store_.accumulate(unit, grads, pool_, begin, count);
    });
    if (micro == opts_.grad_accum - 1)
      for (int w : squares_after_[c])
        backend_.host_task(cmd.stream, squares_labels_[w].c_str(),
                           [this, w] { store_.sum_unit_squares(w, pool_); });
    break;
  }
  case Op::GradNorm:
    if (micro == opts_.grad_accum - 1)
      backend_.host_task(cmd.stream, label,
                         [this] { store_.compute_grad_norm(pool_); });
    break;
  case Op::AdamW: {
    if (left_to_packs_[c])
      break;
    int unit = cmd.a;
    backend_.host_task(cmd.stream, label,
                       [this, unit] { store_.adamw(unit, pool_); });
    break;
  }
  case Op::Record: {
    const EventDesc &e = p_.events[cmd.a];
    if (opts_.stress && e.kind == EventKind::BufferFree && e.buffer >= 0)
      issue_poison(cmd.stream, e.buffer);
    backend_.record(cmd.stream, label, cmd.a);
    break;
  }
  case Op::Wait:
    backend_.wait(cmd.stream, label, cmd.a);
    break;
  }
}

void Executor::run(int64_t step, int micro) {
  try {
    for (int c = 0; c < p_.num_commands; ++c)
      issue(c, step, micro);
  } catch (...) {
    try {
      backend_.synchronize();
    } catch (...) {
    }
    throw;
  }
  backend_.synchronize();
}

std::vector<float> Executor::losses() const {
  const float *l = static_cast<const float *>(addr_[loss_host_]);
  return std::vector<float>(l, l + p_.micro_batches);
}

} // namespace mtrt
