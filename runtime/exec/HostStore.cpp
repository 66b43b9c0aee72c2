//===- HostStore.cpp - model state in host RAM ----------------------------===//

#include "runtime/exec/HostStore.h"

#include "runtime/exec/Error.h"
#include "runtime/host/Bf16.h"
#include "runtime/host/Bf16Convert.h"
#include "runtime/host/GradNorm.h"
#include "runtime/host/ThreadPool.h"
#include "runtime/kernels/Kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

namespace mtrt {

namespace {

// Elements per part when a host task is split over the pool.
constexpr int64_t kGrain = 1 << 15;
// Elements a pack updates and then converts while they stay in cache
// (fp32: 16 B of state and 2-4 B of staging each).
constexpr int64_t kBlock = 1 << 14;

// Waking pool threads costs more than a small sweep; and on a CPU backend
// they compete with the kernels' threads for the same cores.
host::ThreadPool *pool_for(host::ThreadPool *pool, int64_t n) {
  return n > 2 * kGrain ? pool : nullptr;
}

template <class Fn> void parallel(host::ThreadPool *pool, int64_t n,
                                  int64_t grain, Fn &&fn) {
  if (pool && n > grain)
    pool->parallel_for(n, grain, fn);
  else if (n > 0)
    fn(int64_t(0), n);
}

// Zeroes n accumulator entries (0.0f and bf16 +0 are all-zero bits).
template <class T> void zero(T *x, int64_t n, host::ThreadPool *pool) {
  parallel(pool, n, kGrain, [&](int64_t lo, int64_t hi) {
    std::memset(x + lo, 0, size_t(hi - lo) * sizeof(T));
  });
}

// Adds a landed gradient into an accumulator entry of either precision.
inline void add_into(float &acc, float g) { acc += g; }
inline void add_into(uint16_t &acc, float g) {
  acc = bf16_nearest(bf16_widen(acc) + g);
}

// The stochastic-rounding key of an optimizer step: a mix (splitmix64's
// finalizer) of the seed and the step, so each step draws fresh noise and a
// resumed run draws the same.
uint32_t rounding_key(uint64_t seed, int64_t step) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * uint64_t(step + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return uint32_t((z ^ (z >> 31)) >> 32);
}

} // namespace

HostStore::HostStore(const Program &p, StorageFormat format,
                     const OptimizerConfig &config)
    : p_(p), format_(format), config_(config), slot_(size_t(p.num_params), -1),
      constant_(size_t(p.num_params), -1), runs_(size_t(p.num_units)),
      owners_(size_t(p.num_params)), unit_squares_(size_t(p.num_units), 0.0),
      squares_kept_(size_t(p.num_units), 0), pending_(size_t(p.num_units), 0) {
  // Layer-contiguous: each unit's owned params, in its `owned` order. A
  // param split over units (by vocabulary rows) is laid out whole where its
  // first part is owned; each owner updates its own part.
  for (int u = 0; u < p.num_units; ++u) {
    const UnitDesc &unit = p.units[u];
    for (int i = 0; i < unit.num_owned; ++i) {
      int q = unit.owned[i];
      const ParamDesc &d = p.params[q];
      if (d.frozen || d.tie >= 0)
        continue;
      int k = 0;
      while (k < unit.num_params && unit.params[k] != q)
        ++k;
      if (k == unit.num_params)
        fail("program: unit '", unit.name, "' owns param '", d.name,
             "' but does not hold it (plan ", p.plan_hash, ")");
      if (slot_[q] < 0) {
        slot_[q] = trainable_elems_;
        trainable_elems_ += d.numel;
      }
      owners_[q].push_back(u);
      bool decay = d.rank >= 2;
      std::vector<Run> &runs = runs_[u];
      auto add_run = [&](int64_t begin, int64_t n) {
        if (!runs.empty() && runs.back().decay == decay &&
            runs.back().begin + runs.back().n == begin)
          runs.back().n += n;
        else
          runs.push_back({begin, n, decay});
      };
      const int64_t first = part_begin(unit, k), n = part_elems(p, unit, k);
      if (part_kind(unit, k) == PartKind::Columns) {
        // One stretch of the columns per row of the weight.
        const int64_t rows = d.shape[0], cols = d.shape[1];
        for (int64_t r = 0; r < rows; ++r)
          add_run(slot_[q] + r * cols + first, n / rows);
      } else {
        add_run(slot_[q] + first, n);
      }
    }
  }
  int64_t constant_elems = 0;
  for (int q = 0; q < p.num_params; ++q) {
    const ParamDesc &d = p.params[q];
    if (d.tie >= 0)
      continue;
    if (d.frozen) {
      constant_[q] = constant_elems;
      constant_elems += d.numel;
    } else if (slot_[q] < 0) {
      fail("program: param '", d.name,
           "' is trainable but no unit owns it (plan ", p.plan_hash, ")");
    }
  }
  if (bf16_master()) {
    master16_.assign(size_t(trainable_elems_), 0);
    grad16_.assign(size_t(trainable_elems_), 0);
  } else {
    master_.assign(size_t(trainable_elems_), 0.0f);
    grad_.assign(size_t(trainable_elems_), 0.0f);
  }
  m_.assign(size_t(trainable_elems_), 0.0f);
  v_.assign(size_t(trainable_elems_), 0.0f);
  constants_.assign(size_t(constant_elems), 0.0f);
}

float *HostStore::values(int q) {
  if (slot_[q] >= 0)
    return bf16_master() ? nullptr : master_.data() + slot_[q];
  if (constant_[q] >= 0)
    return constants_.data() + constant_[q];
  return nullptr;
}

const float *HostStore::values(int q) const {
  return const_cast<HostStore *>(this)->values(q);
}

uint16_t *HostStore::values_bf16(int q) {
  return bf16_master() && slot_[q] >= 0 ? master16_.data() + slot_[q]
                                        : nullptr;
}

const uint16_t *HostStore::values_bf16(int q) const {
  return const_cast<HostStore *>(this)->values_bf16(q);
}

namespace {

// Where element k of a unit's copy of a param lives in its primary's
// storage (Program.h's PartKind; a whole transposed tie (rows, cols) reads
// its primary (cols, rows)).
struct Layout {
  enum Kind { Contiguous, Transposed, Columns } kind = Contiguous;
  int64_t base = 0, rows = 1, cols = 1;
  int64_t at(int64_t k) const {
    switch (kind) {
    case Contiguous:
      return base + k;
    case Transposed:
      return (k % cols) * rows + k / cols;
    case Columns:
      return (k % rows) * cols + base + k / rows;
    }
    return 0;
  }
};

Layout layout_of(const Program &p, const UnitDesc &unit, int i) {
  const ParamDesc &d = p.params[unit.params[i]];
  const ParamDesc &primary = d.tie >= 0 ? p.params[d.tie] : d;
  Layout l;
  switch (part_kind(unit, i)) {
  case PartKind::Whole:
    if (d.tie >= 0 && d.tie_transposed)
      l = {Layout::Transposed, 0, d.shape[0], d.shape[1]};
    break;
  case PartKind::Range:
    l.base = part_begin(unit, i);
    break;
  case PartKind::Columns:
    l = {Layout::Columns, part_begin(unit, i), primary.shape[0],
         primary.shape[1]};
    break;
  }
  return l;
}

// The part of a param at [offset, offset + numel) of a unit's region that
// falls in the chunk [begin, end), as indices into the param.
struct Overlap {
  int64_t lo, hi;
};
Overlap overlap(int64_t offset, int64_t numel, int64_t begin, int64_t end) {
  return {std::max<int64_t>(0, begin - offset),
          std::min<int64_t>(numel, end - offset)};
}

struct Copy {
  template <class T> T operator()(T x) const { return x; }
};

// dst[k] = convert(src[layout.at(k)]) for k in [lo, hi): a memcpy when
// nothing converts and the layout is contiguous.
template <class Dst, class Src, class Convert = Copy>
void gather(Dst *dst, const Src *src, const Layout &layout, int64_t lo,
            int64_t hi, Convert convert = {}) {
  if constexpr (std::is_same_v<Convert, Copy>)
    if (layout.kind == Layout::Contiguous) {
      std::memcpy(dst + lo, src + layout.base + lo, size_t(hi - lo) * sizeof(Dst));
      return;
    }
  for (int64_t k = lo; k < hi; ++k)
    dst[k] = convert(src[layout.at(k)]);
}

} // namespace

HostStore::Run *HostStore::next_run(int u, int param, int64_t lo, int64_t hi) {
  if (!pending_[u] || !trainable(param))
    return nullptr;
  for (Run &r : runs_[u])
    if (r.begin + r.done == lo && hi <= r.begin + r.n)
      return &r;
  return nullptr;
}

void HostStore::settle(int param, host::ThreadPool *pool) {
  for (int w : owners_[param])
    adamw(w, pool);
}

void HostStore::pack(int u, void *staging, host::ThreadPool *pool,
                     int64_t begin, int64_t count) {
  const UnitDesc &unit = p_.units[u];
  const int64_t end = count < 0 ? unit.elems : begin + count;
  for (int i = 0; i < unit.num_params; ++i) {
    const ParamDesc &d = p_.params[unit.params[i]];
    const Overlap part =
        overlap(unit.offsets[i], part_elems(p_, unit, i), begin, end);
    if (part.lo >= part.hi)
      continue;
    const int primary = d.tie >= 0 ? d.tie : unit.params[i];
    const int64_t at = unit.offsets[i] - begin; // param index 0 in staging
    const Layout layout = layout_of(p_, unit, i);
    const int64_t n = part.hi - part.lo;
    // This unit's own update of a contiguous stretch, next in store order:
    // applied block by block below. Anything else pending is applied first.
    Run *run = nullptr;
    if (layout.kind == Layout::Contiguous && d.tie < 0) {
      const int64_t lo = slot_[primary] + layout.base + part.lo;
      run = next_run(u, primary, lo, lo + n);
    }
    if (!run)
      settle(primary, pool);
    // bf16 masters (src16) or fp32 masters and constants (src32).
    const uint16_t *src16 = values_bf16(primary);
    const float *src32 = values(primary);
    uint16_t *dst16 = static_cast<uint16_t *>(staging) + at;
    float *dst32 = static_cast<float *>(staging) + at;
    const bool bf16_staging = format_ == StorageFormat::Bf16;
    const bool round = format_ == StorageFormat::F32RoundedBf16;
    auto convert = [&](int64_t lo, int64_t hi) {
      if (src16 && bf16_staging)
        gather(dst16, src16, layout, lo, hi);
      else if (src16) // widened exactly: no rounding needed
        gather(dst32, src16, layout, lo, hi, bf16_widen);
      else if (bf16_staging && layout.kind == Layout::Contiguous)
        host::to_bf16_nearest(dst16 + lo, src32 + layout.base + lo, hi - lo);
      else if (bf16_staging)
        gather(dst16, src32, layout, lo, hi, bf16_nearest);
      else
        gather(dst32, src32, layout, lo, hi);
      if (round && !src16)
        cpu::round_to_bf16(dst32 + lo, hi - lo);
    };
    const int64_t store0 = slot_[primary] + layout.base; // param index 0
    parallel(pool, n, kGrain, [&](int64_t lo, int64_t hi) {
      lo += part.lo;
      hi += part.lo;
      if (!run) {
        convert(lo, hi);
        return;
      }
      for (int64_t b = lo; b < hi; b += kBlock) {
        const int64_t e = std::min(hi, b + kBlock);
        update(store0 + b, e - b, run->decay, nullptr);
        convert(b, e);
      }
    });
    if (run) {
      run->done += n;
      squares_kept_[u] = 0;
      pending_[u] = std::any_of(runs_[u].begin(), runs_[u].end(),
                                [](const Run &r) { return r.done < r.n; });
    }
  }
}

void HostStore::accumulate(int u, const float *grads, host::ThreadPool *pool,
                           int64_t begin, int64_t count) {
  const int64_t end = count < 0 ? p_.units[u].elems : begin + count;
  if (bf16_master())
    accumulate_into(grad16_.data(), u, grads, pool, begin, end);
  else
    accumulate_into(grad_.data(), u, grads, pool, begin, end);
}

template <class Acc>
void HostStore::accumulate_into(Acc *accumulators, int u, const float *grads,
                                host::ThreadPool *pool, int64_t begin,
                                int64_t end) {
  const UnitDesc &unit = p_.units[u];
  for (int i = 0; i < unit.num_params; ++i) {
    const ParamDesc &d = p_.params[unit.params[i]];
    const int primary = d.tie >= 0 ? d.tie : unit.params[i];
    if (d.frozen || !trainable(primary))
      continue;
    const Overlap part =
        overlap(unit.offsets[i], part_elems(p_, unit, i), begin, end);
    if (part.lo >= part.hi)
      continue;
    settle(primary, pool);
    for (int w : owners_[primary])
      squares_kept_[w] = 0;
    Acc *acc = accumulators + slot_[primary];
    const float *g = grads + (unit.offsets[i] - begin); // param index 0
    const Layout layout = layout_of(p_, unit, i);
    if (layout.kind == Layout::Columns) {
      // Each element of the part adds into its own accumulator entry.
      parallel(pool, part.hi - part.lo, kGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t k = part.lo + lo; k < part.lo + hi; ++k)
          add_into(acc[layout.at(k)], g[k]);
      });
    } else if (layout.kind == Layout::Transposed) {
      // g is (rows, cols); the accumulator (cols, rows). Threads own
      // accumulator columns of the chunk's rows, so none add into one element.
      const int64_t rows = d.shape[0], cols = d.shape[1];
      const int64_t r0 = part.lo / cols, r1 = (part.hi + cols - 1) / cols;
      parallel(pool, cols, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, r1 - r0)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t c = lo; c < hi; ++c)
                   for (int64_t r = r0; r < r1; ++r) {
                     int64_t k = r * cols + c;
                     if (k >= part.lo && k < part.hi)
                       add_into(acc[c * rows + r], g[k]);
                   }
               });
    } else {
      Acc *a = acc + layout.base;
      parallel(pool, part.hi - part.lo, kGrain, [&](int64_t lo, int64_t hi) {
        lo += part.lo;
        hi += part.lo;
        if constexpr (std::is_same_v<Acc, uint16_t>)
          host::add_to_bf16(a + lo, g + lo, hi - lo);
        else
          for (int64_t k = lo; k < hi; ++k)
            a[k] += g[k];
      });
    }
  }
}

std::vector<int> HostStore::accumulated_owners(int u, int64_t begin,
                                               int64_t count) const {
  const UnitDesc &unit = p_.units[u];
  const int64_t end = count < 0 ? unit.elems : begin + count;
  std::vector<int> owners;
  for (int i = 0; i < unit.num_params; ++i) {
    const ParamDesc &d = p_.params[unit.params[i]];
    const int primary = d.tie >= 0 ? d.tie : unit.params[i];
    if (d.frozen || !trainable(primary))
      continue;
    const Overlap part =
        overlap(unit.offsets[i], part_elems(p_, unit, i), begin, end);
    if (part.lo < part.hi)
      owners.insert(owners.end(), owners_[primary].begin(),
                    owners_[primary].end());
  }
  std::sort(owners.begin(), owners.end());
  owners.erase(std::unique(owners.begin(), owners.end()), owners.end());
  return owners;
}

void HostStore::sum_unit_squares(int u, host::ThreadPool *pool) {
  const std::vector<Run> &runs = runs_[u];
  int64_t n = 0;
  for (const Run &r : runs)
    n += r.n;
  pool = pool_for(pool, n);
  double sum = 0.0;
  if (bf16_master()) {
    std::vector<host::GradSpanBf16> spans;
    for (const Run &r : runs)
      spans.push_back({grad16_.data() + r.begin, r.n});
    sum = host::grad_sum_squares(spans.data(), spans.size(), pool);
  } else {
    std::vector<host::GradSpan> spans;
    for (const Run &r : runs)
      spans.push_back({grad_.data() + r.begin, r.n});
    sum = host::grad_sum_squares(spans.data(), spans.size(), pool);
  }
  unit_squares_[u] = sum;
  squares_kept_[u] = 1;
}

double HostStore::compute_grad_norm(host::ThreadPool *pool) {
  double sum = 0.0;
  for (int u = 0; u < p_.num_units; ++u) {
    if (!squares_kept_[u])
      sum_unit_squares(u, pool);
    sum += unit_squares_[u];
    squares_kept_[u] = 0; // used once: gradients may be written directly
  }
  grad_norm_ = std::sqrt(sum);
  return grad_norm_;
}

double HostStore::clip_scale(double norm) const {
  if (config_.clip_grad <= 0)
    return 1.0;
  return std::min(1.0, config_.clip_grad / (norm + 1e-6));
}

void HostStore::schedule_update(int64_t step_count, double lr) {
  flush(nullptr); // the previous update, if a step left part of it pending
  hyper_.lr = lr;
  hyper_.beta1 = config_.beta1;
  hyper_.beta2 = config_.beta2;
  hyper_.eps = config_.eps;
  hyper_.weight_decay = config_.weight_decay;
  hyper_.step = step_count;
  grad_scale_ = static_cast<float>(clip_scale(grad_norm_));
  rounding_key_ = rounding_key(config_.rounding_seed, step_count);
  for (int u = 0; u < p_.num_units; ++u) {
    for (Run &r : runs_[u])
      r.done = 0;
    pending_[u] = !runs_[u].empty();
  }
}

bool HostStore::any_pending() const {
  return std::any_of(pending_.begin(), pending_.end(),
                     [](char c) { return c != 0; });
}

void HostStore::update(int64_t begin, int64_t n, bool decay,
                       host::ThreadPool *pool) {
  host::AdamWHyper h = hyper_;
  if (!decay)
    h.weight_decay = 0.0;
  if (bf16_master()) {
    // Noise by the element's place in the store: the same for any split.
    host::adamw_update_bf16(master16_.data() + begin, m_.data() + begin,
                            v_.data() + begin, grad16_.data() + begin, n, h,
                            grad_scale_, rounding_key_,
                            static_cast<uint32_t>(begin), pool_for(pool, n));
    zero(grad16_.data() + begin, n, pool);
  } else {
    host::adamw_update(master_.data() + begin, m_.data() + begin,
                       v_.data() + begin, grad_.data() + begin, n, h,
                       grad_scale_, pool_for(pool, n));
    zero(grad_.data() + begin, n, pool);
  }
}

void HostStore::adamw(int u, host::ThreadPool *pool) {
  if (!pending_[u])
    return;
  squares_kept_[u] = 0;
  std::vector<Run> &runs = runs_[u];
  auto rest = [&](Run &r, host::ThreadPool *inner) {
    if (r.done < r.n)
      update(r.begin + r.done, r.n - r.done, r.decay, inner);
    r.done = r.n;
  };
  // Many short runs (a weight's columns, one run per row) are spread over
  // the pool whole; long ones are split inside.
  int64_t total = 0;
  for (const Run &r : runs)
    total += r.n - r.done;
  if (runs.size() > 1 && total / int64_t(runs.size()) < 2 * kGrain) {
    const int64_t per = std::max<int64_t>(1, kGrain / (total / runs.size() + 1));
    parallel(pool_for(pool, total), int64_t(runs.size()), per,
             [&](int64_t lo, int64_t hi) {
               for (int64_t k = lo; k < hi; ++k)
                 rest(runs[size_t(k)], nullptr);
             });
  } else {
    for (Run &r : runs)
      rest(r, pool);
  }
  pending_[u] = 0;
}

void HostStore::flush(host::ThreadPool *pool) {
  for (int u = 0; u < p_.num_units; ++u)
    adamw(u, pool);
}

void HostStore::zero_grads() {
  std::fill(squares_kept_.begin(), squares_kept_.end(), 0);
  std::fill(grad_.begin(), grad_.end(), 0.0f);
  std::fill(grad16_.begin(), grad16_.end(), uint16_t(0));
}

int64_t HostStore::bytes() const {
  return int64_t(sizeof(float)) *
             int64_t(master_.size() + m_.size() + v_.size() + grad_.size() +
                     constants_.size()) +
         int64_t(sizeof(uint16_t)) * int64_t(master16_.size() + grad16_.size());
}

int64_t HostStore::bytes_for(const Program &p) {
  int64_t trainable = 0, constant = 0;
  for (int q = 0; q < p.num_params; ++q) {
    const ParamDesc &d = p.params[q];
    if (d.tie < 0)
      (d.frozen ? constant : trainable) += d.numel;
  }
  const int64_t per_param = p.master == MasterFormat::Bf16 ? 12 : 16;
  return per_param * trainable + int64_t(sizeof(float)) * constant;
}

} // namespace mtrt
