#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, and runs every
# test through ctest (GoogleTest suites, the lit/FileCheck suite and the
# end-to-end comparisons with the PyTorch float64 oracle).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash tools/install-deps.sh
bash tools/install-export-venv.sh
bash tools/build.sh
ctest --test-dir build --output-on-failure -j 2 "$@"
