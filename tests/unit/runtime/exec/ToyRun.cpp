//===- ToyRun.cpp - train the toy program for a few steps -----------------===//

#include "ToyRun.h"

#include "runtime/exec/BackendRegistry.h"
#include "runtime/exec/Executor.h"
#include "runtime/host/Bf16.h"
#include "runtime/host/ThreadPool.h"

#include <cmath>
#include <cstring>

namespace mtrt::toy {

bool ToyRunResult::finite() const {
  for (float l : losses)
    if (!std::isfinite(l))
      return false;
  for (double n : norms)
    if (!std::isfinite(n))
      return false;
  for (float m : masters)
    if (!std::isfinite(m))
      return false;
  return true;
}

bool ToyRunResult::same_bits(const ToyRunResult &o) const {
  return losses.size() == o.losses.size() && norms.size() == o.norms.size() &&
         masters.size() == o.masters.size() &&
         std::memcmp(losses.data(), o.losses.data(),
                     losses.size() * sizeof(float)) == 0 &&
         std::memcmp(norms.data(), o.norms.data(),
                     norms.size() * sizeof(double)) == 0 &&
         std::memcmp(masters.data(), o.masters.data(),
                     masters.size() * sizeof(float)) == 0;
}

void load_toy_weights(HostStore &store, uint64_t seed) {
  ToyWeights w = toy_initial_weights(seed);
  const Program &p = store.program();
  for (int q = 0; q < p.num_params; ++q) {
    if (uint16_t *bf16 = store.values_bf16(q))
      for (size_t i = 0; i < w[q].size(); ++i)
        bf16[i] = bf16_nearest(float(w[q][i]));
    else if (float *dst = store.values(q))
      for (size_t i = 0; i < w[q].size(); ++i)
        dst[i] = float(w[q][i]);
  }
}

ToyRunResult run_toy(const Program &p, const ToyRunOptions &opts) {
  BackendOptions bo;
  bo.stress = opts.stress;
  bo.stress_seed = opts.seed;
  // A backend that only computes in bf16 (cuda) runs the toy in bf16.
  bo.bf16 = opts.bf16 || backend_entry(opts.backend).default_bf16;
  bo.trace = opts.trace;
  std::unique_ptr<Backend> backend = create_backend(opts.backend, bo);
  HostStore store(p, backend->storage_format(), OptimizerConfig{});
  load_toy_weights(store, 7);
  ToyBatches batches(p.micro_batches);
  host::ThreadPool pool(2);
  ExecutorOptions eo;
  eo.grad_accum = opts.grad_accum;
  eo.stress = opts.stress;
  ToyRunResult r;
  {
    Executor exec(p, *backend, store, batches, &pool, eo);
    for (int t = 0; t < opts.steps; ++t) {
      for (int a = 0; a < opts.grad_accum; ++a) {
        exec.run(t, a);
        for (float l : exec.losses())
          r.losses.push_back(l);
      }
      r.norms.push_back(store.grad_norm());
      store.schedule_update(t + 1, opts.lr);
      if (const ToyRunResult *ref = opts.stop_on_mismatch) {
        bool same = ref->losses.size() >= r.losses.size() &&
                    std::memcmp(ref->losses.data(), r.losses.data(),
                                r.losses.size() * sizeof(float)) == 0;
        if (!same || !r.finite())
          break;
      }
    }
  }
  store.flush(&pool);
  for (int q = 0; q < p.num_params; ++q)
    if (store.trainable(q))
      r.masters.insert(r.masters.end(), store.values(q),
                       store.values(q) + p.params[q].numel);
  return r;
}

} // namespace mtrt::toy
