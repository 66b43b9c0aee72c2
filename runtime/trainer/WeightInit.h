//===- WeightInit.h - the initial weights of a run ---------------*- C++ -*-===//
//
// --init onnx: every untied param (trainable or frozen) from an f32
// safetensors file keyed by param name: weights.safetensors next to the
// trainer, as codegen writes it from the ONNX initializers. --init random:
// trainable params from a seeded normal(0, 0.02) (rank >= 2) or a fill
// (rank < 2: ParamDesc::init, by default 0 for biases, 1 for norm weights);
// frozen tables still come from the file. Random values depend only on the
// seed, the param's index and the element's index, never on the number of
// threads, thread timing or param order.
//
//===----------------------------------------------------------------------===//
#ifndef MEGATRAIN_RUNTIME_TRAINER_WEIGHTINIT_H
#define MEGATRAIN_RUNTIME_TRAINER_WEIGHTINIT_H

#include <cstdint>
#include <string>

namespace mtrt {

class HostStore;
namespace host {
class ThreadPool;
}

/// Loads every untied param from `path`; throws Error naming the file and
/// tensor when one is missing or of another shape or dtype.
void init_from_file(HostStore &store, const std::string &path);
/// Random trainable params, filled on `pool` (null: on the calling thread);
/// frozen ones from `path` (required only when there are frozen params).
void init_random(HostStore &store, uint64_t seed, const std::string &path,
                 host::ThreadPool *pool);

/// Only the frozen params (tables) from `path`; nothing to do and no file
/// needed when there are none. For a resumed run.
void init_frozen(HostStore &store, const std::string &path);

/// The fill a rank < 2 param gets under --init random (ParamInit::Auto).
float default_fill(const char *name);

} // namespace mtrt

#endif // MEGATRAIN_RUNTIME_TRAINER_WEIGHTINIT_H
