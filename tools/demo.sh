#!/usr/bin/env bash
# The demo: installs what MegaTrain needs, builds it, exports the tiny
# Llama sample, compiles it into a training plan and trains it on a corpus
# of text that ships with Debian (its license files), on the GPU when the
# trainer has a CUDA backend and a GPU is present, else on the CPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash tools/install-deps.sh
bash tools/build.sh

py=.venv/bin/python
work=${MEGATRAIN_DEMO_DIR:-$root/out/demo}
mkdir -p "$work"
echo "== export the tiny Llama sample (PyTorch -> ONNX)"
$py samples/export.py --model tiny-llama -o "$work/tiny-llama.onnx"
echo "== byte-level tokens from /usr/share/common-licenses"
$py samples/make_tokens.py -o "$work/corpus.u32"
echo "== compile: 4 sequences of 64 tokens per micro-batch, 2 micro-batches per fetch"
build/tools/megatrain compile "$work/tiny-llama.onnx" --batch 4 --seq-len 64 \
  --micro-batches 2 -o "$work/plan"
build/tools/megatrain inspect "$work/plan"

backend=cpu
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 &&
   "$work/plan/trainer" --backend cuda --help >/dev/null 2>&1; then
  backend=cuda
fi
echo "== train on $backend (the loss falls from ~5.5, a uniform guess over 256 bytes)"
"$work/plan/trainer" --data "$work/corpus.u32" --backend "$backend" --steps 300 \
  --lr 3e-3 --warmup 20 --log-jsonl "$work/train.jsonl"
echo "== per-step metrics: $work/train.jsonl"
