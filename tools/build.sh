#!/usr/bin/env bash
# Configures (once) and builds MegaTrain into build/. Extra arguments go to
# the first cmake configure, e.g. -DMEGATRAIN_RUNTIME_ONLY=ON.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if [ ! -f build/build.ninja ]; then
  cmake -G Ninja -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
fi
cmake --build build -j "$(nproc)"
