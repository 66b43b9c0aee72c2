//===- ProgramCheck.cpp - validate a Program before running it ------------===//

#include "runtime/exec/ProgramCheck.h"

#include "runtime/exec/Error.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace mtrt {

const char *op_name(Op op) {
  switch (op) {
  case Op::Launch: return "launch";
  case Op::Pack: return "pack";
  case Op::H2D: return "h2d";
  case Op::D2H: return "d2h";
  case Op::LoadBatch: return "load_batch";
  case Op::Accumulate: return "accumulate";
  case Op::GradNorm: return "grad_norm";
  case Op::AdamW: return "adamw";
  case Op::Record: return "record";
  case Op::Wait: return "wait";
  }
  return "?";
}

const char *stream_name(Stream s) {
  switch (s) {
  case Stream::H2D: return "h2d";
  case Stream::Compute: return "compute";
  case Stream::D2H: return "d2h";
  case Stream::Host: return "host";
  }
  return "?";
}

namespace {

class Checker {
public:
  explicit Checker(const Program &p) : p_(p) {}

  void run() {
    if (!p_.plan_hash || !p_.model_name)
      bad("the program has no model name or plan hash");
    if (p_.batch < 1 || p_.seq_len < 1 || p_.vocab < 1 || p_.micro_batches < 1)
      bad("batch, seq_len, vocab and micro_batches must be >= 1 (got ",
          p_.batch, ", ", p_.seq_len, ", ", p_.vocab, ", ", p_.micro_batches,
          ")");
    if (p_.num_params < 0 || p_.num_units < 0 || p_.num_buffers < 0 ||
        p_.num_templates < 0 || p_.num_launches < 0 || p_.num_events < 0 ||
        p_.num_commands < 0)
      bad("a table has a negative length");
    for (int i = 0; i < p_.num_params; ++i)
      param(i);
    for (int u = 0; u < p_.num_units; ++u)
      unit(u);
    owned_parts();
    for (int b = 0; b < p_.num_buffers; ++b)
      if (p_.buffers[b].elems < 0 ||
          (p_.buffers[b].space == Space::Device && p_.buffers[b].offset < 0))
        bad("buffer ", b, " '", p_.buffers[b].name,
            "' has a negative size or device offset");
    for (int t = 0; t < p_.num_templates; ++t)
      if (!p_.templates[t].fn || p_.templates[t].workspace_elems < 0)
        bad("template ", t, " '", p_.templates[t].name,
            "' has no function or a negative workspace");
    for (int l = 0; l < p_.num_launches; ++l)
      launch(l);
    for (int e = 0; e < p_.num_events; ++e)
      if (p_.events[e].buffer < -1 || p_.events[e].buffer >= p_.num_buffers)
        bad("event ", e, " '", p_.events[e].name, "' names buffer ",
            p_.events[e].buffer, " of ", p_.num_buffers);
    int loss_host = 0;
    for (int b = 0; b < p_.num_buffers; ++b)
      if (p_.buffers[b].kind == BufferKind::LossHost) {
        ++loss_host;
        buffer_is(b, "the loss_host buffer", Space::Host, DType::F32,
                  p_.micro_batches);
      }
    if (loss_host != 1)
      bad("the program needs exactly one loss_host buffer (has ", loss_host,
          ")");
    commands();
  }

private:
  template <class... Parts> [[noreturn]] void bad(const Parts &...parts) {
    fail("invalid program (", p_.model_name ? p_.model_name : "?", ", plan ",
         p_.plan_hash ? p_.plan_hash : "?", "): ", parts...);
  }

  void param(int i) {
    const ParamDesc &d = p_.params[i];
    if (!d.name || d.rank < 0 || d.rank > 4)
      bad("param ", i, " has no name or a rank outside 0..4");
    int64_t n = 1;
    for (int r = 0; r < d.rank; ++r)
      n *= d.shape[r];
    if (n != d.numel || n < 0)
      bad("param '", d.name, "': numel ", d.numel, " is not its shape's ", n);
    if (d.tie >= 0) {
      if (d.tie >= p_.num_params || p_.params[d.tie].tie >= 0)
        bad("param '", d.name, "' ties to ", d.tie,
            ", which is not an untied param");
      const ParamDesc &t = p_.params[d.tie];
      if (d.tie_transposed) {
        if (d.rank != 2 || t.rank != 2 || d.shape[0] != t.shape[1] ||
            d.shape[1] != t.shape[0])
          bad("param '", d.name, "' is tied transposed to '", t.name,
              "' but their shapes are not each other's transpose");
      } else if (d.numel != t.numel) {
        bad("param '", d.name, "' is tied to '", t.name,
            "' of a different size");
      }
      return;
    }
    if (d.frozen)
      return;
    if (d.owner < 0 || d.owner >= p_.num_units)
      bad("param '", d.name, "' has owner ", d.owner, " of ", p_.num_units,
          " units");
    const UnitDesc &u = p_.units[d.owner];
    bool listed = false;
    for (int k = 0; k < u.num_owned; ++k)
      listed |= u.owned[k] == i;
    if (!listed)
      bad("param '", d.name, "' names unit '", u.name,
          "' as its owner, but the unit does not list it as owned");
  }

  void unit(int u) {
    const UnitDesc &d = p_.units[u];
    if (d.elems < 0 || d.num_params < 0 || d.num_owned < 0)
      bad("unit ", u, " has a negative size");
    for (int i = 0; i < d.num_params; ++i) {
      int q = d.params[i];
      if (q < 0 || q >= p_.num_params)
        bad("unit '", d.name, "' lists param ", q, " of ", p_.num_params);
      const ParamDesc &param = p_.params[q];
      const ParamDesc &primary =
          param.tie >= 0 && param.tie < p_.num_params ? p_.params[param.tie]
                                                      : param;
      const int64_t begin = part_begin(d, i), n = part_elems(p_, d, i);
      bool fits = begin >= 0 && n >= 0;
      switch (part_kind(d, i)) {
      case PartKind::Whole:
        fits &= begin == 0 && n == param.numel;
        break;
      case PartKind::Range:
        fits &= begin + n <= primary.numel;
        break;
      case PartKind::Columns:
        fits &= primary.rank == 2 && primary.shape[0] > 0 &&
                n % primary.shape[0] == 0 &&
                begin + n / primary.shape[0] <= primary.shape[1];
        break;
      }
      if (!fits)
        bad("unit '", d.name, "' holds a part [", begin, ", +", n,
            ") of param '", param.name, "' that does not fit in it");
      if (d.offsets[i] < 0 || d.offsets[i] + n > d.elems)
        bad("unit '", d.name, "': param '", param.name, "' at offset ",
            d.offsets[i], " does not fit in ", d.elems, " elements");
    }
    for (int i = 0; i < d.num_owned; ++i)
      if (d.owned[i] < 0 || d.owned[i] >= p_.num_params ||
          p_.params[d.owned[i]].tie >= 0)
        bad("unit '", d.name, "' owns ", d.owned[i],
            ", which is not an untied param");
  }

  // The elements [lo, hi) of param q that unit d holds as its params[i]
  // (q untied: the param itself or the one a tied params[i] names), in q's
  // element order. Columns count in whole columns of R elements, so that
  // they tile [0, numel) as ranges do.
  std::pair<int64_t, int64_t> held_range(const UnitDesc &d, int i) const {
    const ParamDesc &q = p_.params[d.params[i]];
    const int64_t scale =
        part_kind(d, i) == PartKind::Columns ? q.shape[0] : 1;
    const int64_t lo = part_begin(d, i) * scale;
    return {lo, lo + part_elems(p_, d, i)};
  }

  // Every trainable param is updated exactly once per step: its owners'
  // parts tile it without overlap.
  void owned_parts() {
    std::vector<std::vector<std::pair<int64_t, int64_t>>> parts(
        size_t(p_.num_params));
    std::vector<int> kinds(size_t(p_.num_params), -1);
    owner_parts_.assign(size_t(p_.num_params), {});
    for (int u = 0; u < p_.num_units; ++u) {
      const UnitDesc &d = p_.units[u];
      for (int k = 0; k < d.num_owned; ++k) {
        int i = 0;
        while (i < d.num_params && d.params[i] != d.owned[k])
          ++i;
        if (i == d.num_params)
          bad("unit '", d.name, "' owns param ", d.owned[k],
              " but does not hold it");
        // One param's parts are of one kind.
        const ParamDesc &q = p_.params[d.owned[k]];
        const bool columns = part_kind(d, i) == PartKind::Columns;
        const auto [lo, hi] = held_range(d, i);
        parts[size_t(d.owned[k])].push_back({lo, hi});
        owner_parts_[size_t(d.owned[k])].push_back({lo, hi, u});
        auto &kind = kinds[size_t(d.owned[k])];
        if (kind >= 0 && kind != int(columns))
          bad("param '", q.name, "' is owned in parts of different kinds");
        kind = int(columns);
      }
    }
    for (int q = 0; q < p_.num_params; ++q) {
      const ParamDesc &d = p_.params[q];
      if (d.tie >= 0 || d.frozen)
        continue;
      auto &ps = parts[size_t(q)];
      std::sort(ps.begin(), ps.end());
      int64_t at = 0;
      for (auto [lo, hi] : ps) {
        if (lo != at)
          bad("param '", d.name, "': its owners' parts leave a gap or "
              "overlap at element ", std::min(lo, at));
        at = hi;
      }
      if (at != d.numel)
        bad("param '", d.name, "': its owners hold ", at, " of ", d.numel,
            " elements");
    }
  }

  void buffer_is(int b, const char *what, Space space, DType dtype,
                 int64_t min_elems) {
    if (b < 0 || b >= p_.num_buffers)
      bad(what, ": buffer ", b, " of ", p_.num_buffers);
    const BufferDesc &d = p_.buffers[b];
    if (d.space != space || d.dtype != dtype)
      bad(what, ": buffer '", d.name, "' has the wrong space or dtype");
    if (d.elems < min_elems)
      bad(what, ": buffer '", d.name, "' holds ", d.elems,
          " elements, needs ", min_elems);
  }

  void launch(int l) {
    const LaunchDesc &d = p_.launches[l];
    std::string what = "launch " + std::to_string(l);
    if (d.tmpl < 0 || d.tmpl >= p_.num_templates || d.unit < 0 ||
        d.unit >= p_.num_units || d.mb < 0 || d.mb >= p_.micro_batches)
      bad(what, ": template, unit or micro-batch out of range");
    const int64_t unit_elems = p_.units[d.unit].elems;
    buffer_is(d.weights, what.c_str(), Space::Device, DType::Storage,
              unit_elems);
    if (d.backward != (d.grads >= 0))
      bad(what, ": a backward launch needs a gradient slot, a forward none");
    if (d.grads >= 0)
      buffer_is(d.grads, what.c_str(), Space::Device, DType::F32, unit_elems);
    const int64_t tokens = 2 * p_.micro_batches * p_.batch * p_.seq_len;
    auto operand = [&](int b) {
      if (b < 0 || b >= p_.num_buffers || p_.buffers[b].space != Space::Device)
        bad(what, ": operand ", b, " is not a device buffer");
      const BufferDesc &o = p_.buffers[b];
      if (o.kind == BufferKind::Tokens && o.elems < tokens)
        bad(what, ": tokens buffer '", o.name, "' is smaller than ", tokens);
      if (o.kind == BufferKind::Loss && o.elems < p_.micro_batches)
        bad(what, ": loss buffer '", o.name, "' is smaller than ",
            p_.micro_batches);
    };
    for (int i = 0; i < d.num_inputs; ++i)
      operand(d.inputs[i]);
    for (int i = 0; i < d.num_outputs; ++i)
      operand(d.outputs[i]);
    // A layer builds its result in its output buffer while still reading
    // its inputs (TemplateMemory's in-place sum).
    if (std::string_view(p_.units[d.unit].kind) == "layer")
      for (int i = 0; i < d.num_outputs; ++i)
        for (int j = 0; j < d.num_inputs; ++j)
          if (d.outputs[i] == d.inputs[j])
            bad(what, ": layer output buffer '", p_.buffers[d.outputs[i]].name,
                "' is also one of its inputs");
  }

  void commands() {
    std::vector<char> updated(size_t(p_.num_units), 0);
    std::vector<int> adamw_count(size_t(p_.num_units), 0);
    // Units that own something trainable (a whole param or a part of one)
    // need one AdamW before any use.
    std::vector<char> owns_trainable(size_t(p_.num_units), 0);
    for (int q = 0; q < p_.num_params; ++q)
      if (p_.params[q].tie < 0 && !p_.params[q].frozen)
        for (const OwnerPart &o : owner_parts_[size_t(q)])
          owns_trainable[o.unit] = 1;
    // A use of a param's elements needs the AdamW of every unit owning
    // some of them.
    auto check_updated = [&](int c, int u, bool grads_only) {
      const UnitDesc &d = p_.units[u];
      for (int i = 0; i < d.num_params; ++i) {
        const ParamDesc &q = p_.params[d.params[i]];
        if (grads_only && q.frozen)
          continue;
        const int primary = q.tie >= 0 ? q.tie : d.params[i];
        const ParamDesc &prim = p_.params[primary];
        if (prim.frozen)
          continue;
        const auto [lo, hi] = held_range(d, i);
        for (const OwnerPart &o : owner_parts_[size_t(primary)])
          if (o.lo < hi && lo < o.hi && !updated[o.unit])
            bad("command ", c, " (", op_name(p_.commands[c].op), " unit '",
                d.name, "') uses param '", prim.name,
                "' before adamw of unit '", p_.units[o.unit].name,
                "' in the step");
      }
    };
    for (int c = 0; c < p_.num_commands; ++c) {
      const Command &cmd = p_.commands[c];
      std::string what = "command " + std::to_string(c) + " (" +
                         op_name(cmd.op) + ")";
      if (int(cmd.stream) >= kNumStreams)
        bad(what, ": stream ", int(cmd.stream), " does not exist");
      auto unit_ok = [&](int u) {
        if (u < 0 || u >= p_.num_units)
          bad(what, ": unit ", u, " of ", p_.num_units);
      };
      auto chunk_ok = [&](const std::string &what, const Command &cmd,
                          int64_t elems) {
        if (cmd.count >= 0 &&
            (cmd.begin < 0 || cmd.count == 0 || cmd.begin + cmd.count > elems))
          bad(what, ": the chunk [", cmd.begin, ", ", cmd.begin + cmd.count,
              ") is outside the unit's ", elems, " elements");
      };
      bool host_op = cmd.op == Op::Pack || cmd.op == Op::LoadBatch ||
                     cmd.op == Op::Accumulate || cmd.op == Op::GradNorm ||
                     cmd.op == Op::AdamW;
      if (host_op && cmd.stream != Stream::Host)
        bad(what, ": runs on the ", stream_name(cmd.stream),
            " stream; host tasks run on the host stream");
      switch (cmd.op) {
      case Op::Launch:
        if (cmd.a < 0 || cmd.a >= p_.num_launches)
          bad(what, ": launch ", cmd.a, " of ", p_.num_launches);
        if (cmd.stream != Stream::Compute)
          bad(what, ": launches run on the compute stream");
        break;
      case Op::Pack:
        unit_ok(cmd.a);
        chunk_ok(what, cmd, p_.units[cmd.a].elems);
        buffer_is(cmd.b, what.c_str(), Space::Host, DType::Storage,
                  cmd.count >= 0 ? cmd.count : p_.units[cmd.a].elems);
        check_updated(c, cmd.a, false);
        break;
      case Op::H2D:
      case Op::D2H: {
        Space from = cmd.op == Op::H2D ? Space::Host : Space::Device;
        Space into = cmd.op == Op::H2D ? Space::Device : Space::Host;
        if (cmd.a < 0 || cmd.a >= p_.num_buffers)
          bad(what, ": buffer ", cmd.a, " of ", p_.num_buffers);
        const BufferDesc &f = p_.buffers[cmd.a];
        if (f.space != from)
          bad(what, ": copies from '", f.name, "' in the wrong space");
        if (cmd.count < 0) {
          buffer_is(cmd.b, what.c_str(), into, f.dtype, f.elems);
          break;
        }
        // A chunk: [begin, begin + count) of the device buffer, the start
        // of the host one.
        const int64_t host_need = cmd.count,
                      device_need = cmd.begin + cmd.count;
        if (cmd.begin < 0 ||
            f.elems < (cmd.op == Op::H2D ? host_need : device_need))
          bad(what, ": the chunk [", cmd.begin, ", ", cmd.begin + cmd.count,
              ") does not fit in '", f.name, "'");
        buffer_is(cmd.b, what.c_str(), into, f.dtype,
                  cmd.op == Op::H2D ? device_need : host_need);
        break;
      }
      case Op::LoadBatch:
        buffer_is(cmd.b, what.c_str(), Space::Host, DType::I32,
                  2 * p_.micro_batches * p_.batch * p_.seq_len);
        break;
      case Op::Accumulate:
        unit_ok(cmd.a);
        chunk_ok(what, cmd, p_.units[cmd.a].elems);
        buffer_is(cmd.b, what.c_str(), Space::Host, DType::F32,
                  cmd.count >= 0 ? cmd.count : p_.units[cmd.a].elems);
        check_updated(c, cmd.a, true);
        break;
      case Op::GradNorm:
        break;
      case Op::AdamW:
        unit_ok(cmd.a);
        updated[cmd.a] = 1;
        ++adamw_count[cmd.a];
        break;
      case Op::Record:
      case Op::Wait:
        if (cmd.a < 0 || cmd.a >= p_.num_events)
          bad(what, ": event ", cmd.a, " of ", p_.num_events);
        break;
      }
    }
    for (int u = 0; u < p_.num_units; ++u)
      if (owns_trainable[u] && adamw_count[u] != 1)
        bad("unit '", p_.units[u].name, "' owns trainable params but has ",
            adamw_count[u], " adamw commands in the step (needs 1)");
  }

  // The units owning each param, with the elements [lo, hi) they own.
  struct OwnerPart {
    int64_t lo, hi;
    int unit;
  };

  const Program &p_;
  std::vector<std::vector<OwnerPart>> owner_parts_;
};

} // namespace

void check_program(const Program &p) { Checker(p).run(); }

} // namespace mtrt
