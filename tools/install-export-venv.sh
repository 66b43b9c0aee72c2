#!/usr/bin/env bash
# The exporter users of current PyTorch get: torch 2.15's torch.onnx.export
# (dynamo, opset 20) and a current transformers, in a venv of their own
# (.venv-export, about 4 GB of wheels), for the end-to-end tests of those
# exports (tests/e2e/test_dynamo_exports.py). Idempotent; the test command
# runs it, the demo does not need it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export_venv="$root/.venv-export"
if [ ! -x "$export_venv/bin/python" ]; then
  /usr/bin/python3 -m venv "$export_venv"
fi
if ! "$export_venv/bin/python" -c "import torch, transformers, onnxscript" 2>/dev/null; then
  echo "install-export-venv: pip install torch 2.15 and transformers 5 into .venv-export"
  "$export_venv/bin/pip" install -q --disable-pip-version-check "torch==2.15.0" \
    "transformers==5.24.0" "onnxscript==0.7.2" "onnx==1.23.2"
fi
echo "install-export-venv: ok"
