//===- ToyProgram.cpp - a hand-made Program for runtime tests -------------===//

#include "ToyProgram.h"

#include "runtime/exec/DeviceKernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <random>

namespace mtrt::toy {

namespace {

const int64_t kRowsD[2] = {N, D};
const int64_t kD[1] = {D};

Broadcast same_shape() {
  Broadcast bc;
  cpu::make_broadcast(bc, kRowsD, 2, kRowsD, 2);
  return bc;
}
Broadcast rows_by_vector() {
  Broadcast bc;
  cpu::make_broadcast(bc, kRowsD, 2, kD, 1);
  return bc;
}

const int32_t *ids_of(const void *tokens) {
  return static_cast<const int32_t *>(tokens);
}

// x0 = E[ids] ⊙ gain
void embed_fwd(const LaunchArgs &a) {
  void *e = a.workspace; // (N, D)
  a.k->embed_forward(e, ids_of(a.inputs[0]),
                     a.k->at(a.weights, a.param_offsets[0]), N, V, D);
  a.k->mul_forward(a.outputs[0], e, a.k->at(a.weights, a.param_offsets[1]),
                   rows_by_vector());
}

void embed_bwd(const LaunchArgs &a) {
  void *e = a.workspace;                 // (N, D)
  void *de = a.k->at(e, N * D);          // (N, D)
  void *dgain = a.k->at(de, N * D);      // (D) storage scratch
  const void *gain = a.k->at(a.weights, a.param_offsets[1]);
  a.k->embed_forward(e, ids_of(a.inputs[0]),
                     a.k->at(a.weights, a.param_offsets[0]), N, V, D);
  a.k->zero(de, N * D);
  a.k->zero(dgain, D);
  a.k->mul_backward(de, dgain, a.inputs[1], e, gain, rows_by_vector());
  a.k->accumulate_f32(a.grads + a.param_offsets[1], dgain, D);
  a.k->embed_backward(a.grads + a.param_offsets[0], de, ids_of(a.inputs[0]),
                      N, V, D);
}

void layer_fwd(const LaunchArgs &a) {
  void *h = a.workspace; // (N, D)
  a.k->linear_forward(h, a.inputs[0], a.k->at(a.weights, a.param_offsets[0]),
                      a.k->at(a.weights, a.param_offsets[1]), N, D, D, true,
                      /*accumulate=*/false);
  a.k->add_forward(a.outputs[0], a.inputs[0], h, same_shape());
}

void layer_bwd(const LaunchArgs &a) {
  const void *x = a.inputs[0], *dy = a.inputs[1];
  void *dx = a.outputs[0];
  a.k->copy(dx, dy, N * D); // the residual path
  a.k->linear_backward(dx, a.grads + a.param_offsets[0],
                       a.grads + a.param_offsets[1], dy, x,
                       a.k->at(a.weights, a.param_offsets[0]), N, D, D, true,
                       /*accumulate_dx=*/true);
}

// Forward, loss and backward of the head in one launch.
void head_bwd(const LaunchArgs &a) {
  const void *x = a.inputs[0];
  const int32_t *targets = ids_of(a.inputs[1]) + N;
  void *dx = a.outputs[0];
  float *loss = static_cast<float *>(a.outputs[1]);
  const void *w = a.k->at(a.weights, a.param_offsets[0]);
  const void *hb = a.k->at(a.weights, a.param_offsets[1]);
  const void *scale = a.k->at(a.weights, a.param_offsets[2]);
  void *h = a.workspace;                         // (N, D)
  void *logits = a.k->at(h, N * D);              // (N, V)
  void *dlogits = a.k->at(logits, N * V);        // (N, V)
  void *dh = a.k->at(dlogits, N * V);            // (N, D)
  a.k->mul_forward(h, x, scale, rows_by_vector());
  a.k->linear_forward(logits, h, w, hb, N, D, V, true, /*accumulate=*/false);
  a.k->cross_entropy_forward(loss, logits, targets, N, V, N, false);
  a.k->cross_entropy_backward(dlogits, logits, targets, N, V, a.dloss,
                              /*accumulate=*/false);
  a.k->linear_backward(dh, a.grads + a.param_offsets[0],
                       a.grads + a.param_offsets[1], dlogits, h, w, N, D, V,
                       true, /*accumulate_dx=*/false);
  a.k->zero(dx, N * D);
  a.k->mul_backward(dx, nullptr, dh, x, scale, rows_by_vector());
}

enum Template { kEmbedFwd, kEmbedBwd, kLayerFwd, kLayerBwd, kHeadBwd };

} // namespace

ToyProgram::ToyProgram(int64_t micro_batches, const char *plan_hash)
    : M_(micro_batches), plan_hash_(plan_hash) {
  auto param = [&](const char *name, int rank, int64_t d0, int64_t d1,
                   int tie, bool transposed, bool frozen, int owner) {
    ParamDesc d{};
    d.name = name;
    d.rank = rank;
    d.shape[0] = d0;
    d.shape[1] = d1;
    d.numel = rank == 2 ? d0 * d1 : d0;
    d.tie = tie;
    d.tie_transposed = transposed;
    d.frozen = frozen;
    d.owner = owner;
    params_.push_back(d);
  };
  param("embed.weight", 2, V, D, -1, false, false, 0);
  param("layer0.weight", 2, D, D, -1, false, false, 1);
  param("layer0.bias", 1, D, 0, -1, false, false, 1);
  param("layer1.weight", 2, D, D, -1, false, false, 2);
  param("layer1.bias", 1, D, 0, -1, false, false, 2);
  param("head.weight", 2, D, V, kEmbed, true, false, -1);
  param("head.bias", 1, V, 0, -1, false, false, 3);
  param("mt.toy.scale", 1, D, 0, -1, false, true, 3);
  param("embed.gain", 1, D, 0, -1, false, false, 0);

  auto unit = [&](const char *name, const char *kind,
                  std::vector<int> params, std::vector<int64_t> offsets,
                  std::vector<int> owned) {
    int_lists_.push_back(std::move(params));
    const std::vector<int> &p = int_lists_.back();
    offset_lists_.push_back(std::move(offsets));
    int_lists_.push_back(std::move(owned));
    const std::vector<int> &o = int_lists_.back();
    units_.push_back({name, kind, 128, int(p.size()), p.data(),
                      offset_lists_.back().data(), int(o.size()), o.data()});
  };
  unit("u0", "embedding", {kEmbed, kGain}, {0, 96}, {kEmbed, kGain});
  unit("u1", "layer", {kW0, kB0}, {0, 64}, {kW0, kB0});
  unit("u2", "layer", {kW1, kB1}, {0, 64}, {kW1, kB1});
  unit("u3", "head", {kHeadW, kHeadB, kScale}, {0, 96, 112},
       {kHeadB, kScale});

  templates_ = {{"embed", embed_fwd, N * D},
                {"embed", embed_bwd, 2 * N * D + D},
                {"layer", layer_fwd, N * D},
                {"layer", layer_bwd, 0},
                {"head", head_bwd, 2 * N * D + 2 * N * V}};
  build_schedule();
  commit();
}

int ToyProgram::buffer(const char *name, Space space, BufferKind kind,
                       DType dtype, int64_t elems) {
  names_.emplace_back(name);
  int64_t offset = -1;
  if (space == Space::Device) {
    offset = arena_[int(dtype)];
    arena_[int(dtype)] += (elems + 15) / 16 * 16;
  }
  buffers_.push_back(
      {names_.back().c_str(), space, kind, dtype, elems, offset});
  return int(buffers_.size()) - 1;
}

int ToyProgram::event(const std::string &name, EventKind kind, int buf) {
  names_.push_back(name);
  events_.push_back({names_.back().c_str(), kind, buf});
  return int(events_.size()) - 1;
}

void ToyProgram::cmd(Op op, Stream s, int a, int b) {
  commands_.push_back({op, s, a, b});
}

int ToyProgram::launch(int tmpl, int unit, int mb, bool backward, bool fresh,
                       int weights, int grads, std::vector<int> inputs,
                       std::vector<int> outputs) {
  int_lists_.push_back(std::move(inputs));
  const std::vector<int> &in = int_lists_.back();
  int_lists_.push_back(std::move(outputs));
  const std::vector<int> &out = int_lists_.back();
  launches_.push_back({tmpl, unit, 0, mb, backward, fresh, weights, grads,
                       int(in.size()), in.data(), int(out.size()), out.data(),
                       units_[unit].offsets});
  return int(launches_.size()) - 1;
}

void ToyProgram::build_schedule() {
  const int64_t tokens = 2 * M_ * N;
  int wslot[2], gslot[2], stage[2], gstage[2];
  wslot[0] = buffer("wslot0", Space::Device, BufferKind::Weights, DType::Storage, 128);
  wslot[1] = buffer("wslot1", Space::Device, BufferKind::Weights, DType::Storage, 128);
  gslot[0] = buffer("gslot0", Space::Device, BufferKind::Grads, DType::F32, 128);
  gslot[1] = buffer("gslot1", Space::Device, BufferKind::Grads, DType::F32, 128);
  const int tok = buffer("tokens", Space::Device, BufferKind::Tokens, DType::I32, tokens);
  const int loss = buffer("loss", Space::Device, BufferKind::Loss, DType::F32, M_);
  std::vector<int> x[3], dx[3];
  for (int l = 0; l < 3; ++l)
    for (int64_t mb = 0; mb < M_; ++mb) {
      std::string xn = "x" + std::to_string(l) + "." + std::to_string(mb);
      std::string gn = "dx" + std::to_string(l) + "." + std::to_string(mb);
      names_.push_back(xn);
      x[l].push_back(buffer(names_.back().c_str(), Space::Device,
                            BufferKind::Checkpoint, DType::Storage, N * D));
      names_.push_back(gn);
      dx[l].push_back(buffer(names_.back().c_str(), Space::Device,
                             BufferKind::ActGrad, DType::Storage, N * D));
    }
  stage[0] = buffer("stage0", Space::Host, BufferKind::Staging, DType::Storage, 128);
  stage[1] = buffer("stage1", Space::Host, BufferKind::Staging, DType::Storage, 128);
  gstage[0] = buffer("gstage0", Space::Host, BufferKind::GradStaging, DType::F32, 128);
  gstage[1] = buffer("gstage1", Space::Host, BufferKind::GradStaging, DType::F32, 128);
  const int batch = buffer("batch", Space::Host, BufferKind::Batch, DType::I32, tokens);
  const int loss_host = buffer("loss_host", Space::Host, BufferKind::LossHost, DType::F32, M_);

  int stage_ready[2], stage_free[2], slot_ready[2], slot_free[2];
  int grad_ready[2], grad_free[2], landed[2], gstage_free[2];
  for (int s = 0; s < 2; ++s) {
    std::string i = std::to_string(s);
    stage_ready[s] = event("stage" + i + ".ready", EventKind::ParamReady, stage[s]);
    stage_free[s] = event("stage" + i + ".free", EventKind::BufferFree, stage[s]);
    slot_ready[s] = event("wslot" + i + ".ready", EventKind::ParamReady, wslot[s]);
    slot_free[s] = event("wslot" + i + ".free", EventKind::BufferFree, wslot[s]);
    grad_ready[s] = event("gslot" + i + ".ready", EventKind::ComputeDone, gslot[s]);
    grad_free[s] = event("gslot" + i + ".free", EventKind::BufferFree, gslot[s]);
    landed[s] = event("gstage" + i + ".landed", EventKind::GradLanded, gstage[s]);
    gstage_free[s] = event("gstage" + i + ".free", EventKind::BufferFree, gstage[s]);
  }
  const int batch_ready = event("batch.ready", EventKind::ParamReady, batch);
  const int batch_free = event("batch.free", EventKind::BufferFree, batch);
  const int loss_ready = event("loss.ready", EventKind::ComputeDone, loss);

  cmd(Op::LoadBatch, Stream::Host, 0, batch);
  cmd(Op::Record, Stream::Host, batch_ready);
  cmd(Op::Wait, Stream::H2D, batch_ready);
  cmd(Op::H2D, Stream::H2D, batch, tok);
  cmd(Op::Record, Stream::H2D, batch_free);

  struct Visit {
    int unit;
    bool forward, backward, fetch;
    int slot;
    bool free_after;
  };
  const Visit visits[] = {
      {0, true, false, true, 0, true},  {1, true, false, true, 1, true},
      {2, true, false, true, 0, false}, {3, true, true, true, 1, true},
      {2, false, true, false, 0, true}, {1, false, true, true, 1, true},
      {0, false, true, true, 0, true}};
  int fetches = 0, backwards = 0;
  bool updated[4] = {false, false, false, false};
  for (const Visit &v : visits) {
    const int s = v.slot;
    if (v.fetch) {
      const int st = fetches % 2;
      if (fetches >= 2)
        cmd(Op::Wait, Stream::Host, stage_free[st]);
      if (!updated[v.unit]) {
        cmd(Op::AdamW, Stream::Host, v.unit);
        updated[v.unit] = true;
      }
      cmd(Op::Pack, Stream::Host, v.unit, stage[st]);
      cmd(Op::Record, Stream::Host, stage_ready[st]);
      cmd(Op::Wait, Stream::H2D, stage_ready[st]);
      if (fetches >= 2)
        cmd(Op::Wait, Stream::H2D, slot_free[s]);
      cmd(Op::H2D, Stream::H2D, stage[st], wslot[s]);
      cmd(Op::Record, Stream::H2D, stage_free[st]);
      cmd(Op::Record, Stream::H2D, slot_ready[s]);
      cmd(Op::Wait, Stream::Compute, slot_ready[s]);
      ++fetches;
    }
    const int g = backwards % 2;
    if (v.backward && backwards >= 2)
      cmd(Op::Wait, Stream::Compute, grad_free[g]);
    for (int mb = 0; mb < int(M_); ++mb) {
      int l = -1;
      switch (v.unit) {
      case 0:
        l = v.backward ? launch(kEmbedBwd, 0, mb, true, mb == 0, wslot[s],
                                gslot[g], {tok, dx[0][mb]}, {})
                       : launch(kEmbedFwd, 0, mb, false, false, wslot[s], -1,
                                {tok}, {x[0][mb]});
        break;
      case 1:
      case 2: {
        int in = v.unit - 1; // layer u reads x[u-1], writes x[u]
        l = v.backward ? launch(kLayerBwd, v.unit, mb, true, mb == 0,
                                wslot[s], gslot[g], {x[in][mb], dx[v.unit][mb]},
                                {dx[in][mb]})
                       : launch(kLayerFwd, v.unit, mb, false, false, wslot[s],
                                -1, {x[in][mb]}, {x[v.unit][mb]});
        break;
      }
      case 3:
        l = launch(kHeadBwd, 3, mb, true, mb == 0, wslot[s], gslot[g],
                   {x[2][mb], tok}, {dx[2][mb], loss});
        break;
      }
      cmd(Op::Launch, Stream::Compute, l);
    }
    if (v.unit == 3) { // the losses land first
      cmd(Op::Record, Stream::Compute, loss_ready);
      cmd(Op::Wait, Stream::D2H, loss_ready);
      cmd(Op::D2H, Stream::D2H, loss, loss_host);
    }
    if (v.free_after)
      cmd(Op::Record, Stream::Compute, slot_free[s]);
    if (v.backward) {
      cmd(Op::Record, Stream::Compute, grad_ready[g]);
      cmd(Op::Wait, Stream::D2H, grad_ready[g]);
      if (backwards >= 2)
        cmd(Op::Wait, Stream::D2H, gstage_free[g]);
      cmd(Op::D2H, Stream::D2H, gslot[g], gstage[g]);
      cmd(Op::Record, Stream::D2H, grad_free[g]);
      cmd(Op::Record, Stream::D2H, landed[g]);
      cmd(Op::Wait, Stream::Host, landed[g]);
      cmd(Op::Accumulate, Stream::Host, v.unit, gstage[g]);
      cmd(Op::Record, Stream::Host, gstage_free[g]);
      ++backwards;
    }
  }
  cmd(Op::GradNorm, Stream::Host);
}

void ToyProgram::commit() {
  program_.model_name = "toy";
  program_.plan_hash = plan_hash_.c_str();
  program_.batch = B;
  program_.seq_len = S;
  program_.vocab = V;
  program_.micro_batches = M_;
  program_.num_params = int(params_.size());
  program_.params = params_.data();
  program_.num_units = int(units_.size());
  program_.units = units_.data();
  program_.num_buffers = int(buffers_.size());
  program_.buffers = buffers_.data();
  program_.num_templates = int(templates_.size());
  program_.templates = templates_.data();
  program_.num_launches = int(launches_.size());
  program_.launches = launches_.data();
  program_.num_events = int(events_.size());
  program_.events = events_.data();
  program_.num_commands = int(commands_.size());
  program_.commands = commands_.data();
}

std::vector<int> ToyProgram::waits() const {
  std::vector<int> w;
  for (size_t c = 0; c < commands_.size(); ++c)
    if (commands_[c].op == Op::Wait)
      w.push_back(int(c));
  return w;
}

std::vector<int> ToyProgram::necessary_waits() const {
  using Clock = std::array<uint64_t, kNumStreams>;
  Clock clock[kNumStreams] = {};
  std::vector<Clock> record(events_.size(), Clock{});
  std::vector<bool> recorded(events_.size(), false);
  std::vector<int> out;
  for (size_t c = 0; c < commands_.size(); ++c) {
    const Command &cmd = commands_[c];
    Clock &mine = clock[int(cmd.stream)];
    // Only work moves a clock: a wait bound to a later record of the same
    // finished work is implied all the same.
    if (cmd.op != Op::Record && cmd.op != Op::Wait)
      ++mine[int(cmd.stream)];
    if (cmd.op == Op::Record) {
      record[size_t(cmd.a)] = mine;
      recorded[size_t(cmd.a)] = true;
    } else if (cmd.op == Op::Wait && recorded[size_t(cmd.a)]) {
      const Clock &r = record[size_t(cmd.a)];
      bool implied = true;
      for (int s = 0; s < kNumStreams; ++s)
        implied &= mine[s] >= r[s];
      if (!implied)
        out.push_back(int(c));
      for (int s = 0; s < kNumStreams; ++s)
        mine[s] = std::max(mine[s], r[s]);
    }
  }
  return out;
}

std::string ToyProgram::describe(int c) const {
  const Command &cmd = commands_[size_t(c)];
  static const char *streams[] = {"h2d", "compute", "d2h", "host"};
  std::string s = "command " + std::to_string(c) + " on " +
                  streams[int(cmd.stream)];
  if (cmd.op == Op::Wait || cmd.op == Op::Record)
    s += std::string(cmd.op == Op::Wait ? ": wait " : ": record ") +
         events_[size_t(cmd.a)].name;
  return s;
}

void ToyBatches::tokens(int64_t step, int micro, int64_t mb,
                        std::vector<int32_t> &ids,
                        std::vector<int32_t> &targets) const {
  ids.resize(N);
  targets.resize(N);
  for (int64_t i = 0; i <= N; ++i) {
    uint64_t h = uint64_t(step * 1000003 + micro * 10007 + mb * 101 + i) *
                 0x9e3779b97f4a7c15ull;
    int32_t t = int32_t((h >> 33) % uint64_t(V));
    if (i < N)
      ids[size_t(i)] = t;
    if (i > 0)
      targets[size_t(i - 1)] = t;
  }
}

void ToyBatches::fill(int64_t step, int micro, int32_t *batch) {
  std::vector<int32_t> ids, targets;
  for (int64_t mb = 0; mb < M_; ++mb) {
    tokens(step, micro, mb, ids, targets);
    std::copy(ids.begin(), ids.end(), batch + mb * 2 * N);
    std::copy(targets.begin(), targets.end(), batch + mb * 2 * N + N);
  }
}

ToyWeights toy_initial_weights(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-0.5, 0.5);
  ToyWeights w(kNumParams);
  auto fill = [&](int p, int64_t n) {
    w[p].resize(size_t(n));
    for (double &x : w[p])
      x = double(float(u(rng)));
  };
  fill(kEmbed, V * D);
  fill(kW0, D * D);
  fill(kB0, D);
  fill(kW1, D * D);
  fill(kB1, D);
  fill(kHeadB, V);
  fill(kScale, D);
  for (double &x : w[kScale])
    x += 1.0;
  fill(kGain, D);
  for (double &x : w[kGain])
    x = double(float(1.0 + 0.5 * x));
  return w;
}

double toy_loss_and_grads(const ToyWeights &w, const std::vector<int32_t> &ids,
                          const std::vector<int32_t> &targets, double scale,
                          ToyWeights *grads) {
  using Mat = std::vector<double>;
  Mat x0(N * D), x1(N * D), x2(N * D), h(N * D), logits(N * V);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d)
      x0[n * D + d] = w[kEmbed][ids[n] * D + d] * w[kGain][d];
  auto layer = [&](const Mat &x, Mat &y, int W, int b) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < D; ++j) {
        double s = w[b][j];
        for (int64_t k = 0; k < D; ++k)
          s += x[n * D + k] * w[W][k * D + j];
        y[n * D + j] = x[n * D + j] + s;
      }
  };
  layer(x0, x1, kW0, kB0);
  layer(x1, x2, kW1, kB1);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d)
      h[n * D + d] = x2[n * D + d] * w[kScale][d];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < V; ++v) {
      double s = w[kHeadB][v];
      for (int64_t d = 0; d < D; ++d)
        s += h[n * D + d] * w[kEmbed][v * D + d]; // head.weight[d][v] = E[v][d]
      logits[n * V + v] = s;
    }
  double loss = 0;
  Mat dlogits(N * V);
  for (int64_t n = 0; n < N; ++n) {
    double mx = -1e300;
    for (int64_t v = 0; v < V; ++v)
      mx = std::max(mx, logits[n * V + v]);
    double z = 0;
    for (int64_t v = 0; v < V; ++v)
      z += std::exp(logits[n * V + v] - mx);
    loss += std::log(z) + mx - logits[n * V + targets[n]];
    for (int64_t v = 0; v < V; ++v)
      dlogits[n * V + v] = scale * (std::exp(logits[n * V + v] - mx) / z -
                                    (v == targets[n] ? 1.0 : 0.0));
  }
  if (!grads)
    return loss / double(N);
  ToyWeights &g = *grads;
  for (int p = 0; p < kNumParams; ++p)
    g[p].resize(w[p].size(), 0.0);
  Mat dh(N * D, 0.0), dx2(N * D), dx1(N * D), dx0(N * D);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < V; ++v) {
      double gl = dlogits[n * V + v];
      g[kHeadB][v] += gl;
      for (int64_t d = 0; d < D; ++d) {
        g[kEmbed][v * D + d] += h[n * D + d] * gl;
        dh[n * D + d] += gl * w[kEmbed][v * D + d];
      }
    }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d)
      dx2[n * D + d] = dh[n * D + d] * w[kScale][d];
  auto layer_back = [&](const Mat &x, const Mat &dy, Mat &dxo, int W, int b) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < D; ++k) {
        double s = dy[n * D + k];
        for (int64_t j = 0; j < D; ++j) {
          s += dy[n * D + j] * w[W][k * D + j];
          g[W][k * D + j] += x[n * D + k] * dy[n * D + j];
        }
        dxo[n * D + k] = s;
      }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < D; ++j)
        g[b][j] += dy[n * D + j];
  };
  layer_back(x1, dx2, dx1, kW1, kB1);
  layer_back(x0, dx1, dx0, kW0, kB0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) {
      g[kEmbed][ids[n] * D + d] += dx0[n * D + d] * w[kGain][d];
      g[kGain][d] += dx0[n * D + d] * w[kEmbed][ids[n] * D + d];
    }
  return loss / double(N);
}

} // namespace mtrt::toy
