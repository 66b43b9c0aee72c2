#!/usr/bin/env bash
# Writes what bench/device_check.sh needs on the GPU machine, which has no
# MLIR, ONNX or protobuf: compiled plans (megatrain compile ... --no-build),
# a token file, and googletest's sources in case that machine lacks them.
# Run on the CPU machine from the repository root, after the compiler is
# built (tools/build.sh): bash bench/device/make_plans.sh
#
#   bench/device/plans/tiny-llama, tiny-gpt2   parity (real weights)
#   bench/device/plans/tiny-llama-bf16master   parity with bf16 master weights
#   bench/device/plans/tiny-bloom, tiny-window parity of ALiBi and of a sliding
#                                              window (32 of 128 keys)
#   bench/device/plans/tiny-gemma2             parity of soft-capped attention and
#                                              logits, the tied head and scaled
#                                              embedding in 2 vocabulary pieces
#                                              (torch 2.15's exporter: .venv-export)
#   bench/device/plans/tiny-gpt_oss            parity of attention sinks (in a
#                                              sliding window of 5 and in full
#                                              layers) beside experts (.venv-export)
#   bench/device/plans/tiny-mixtral            parity of the mixture of experts'
#                                              grouped tensor-core kernels (4
#                                              experts, 2 per token; .venv-export)
#   bench/device/plans/tiny-llama4             parity of Llama 4's chunked attention
#                                              (chunks of 5 tokens) and its experts
#                                              weighed on their inputs (.venv-export)
#   bench/device/plans/tiny-qwen3_5            parity of gated DeltaNet's scan (128
#                                              positions: two checkpoints) and its
#                                              causal convolution (.venv-export)
#   bench/device/plans/tiny-bamba              parity of Mamba-2's scan (the same
#                                              kernels without the delta rule) and
#                                              the convolution's bias (.venv-export)
#   bench/device/plans/tiny-kimi_linear        parity of Kimi Delta Attention (a
#                                              decay per key channel) (.venv-export)
#   bench/device/plans/tiny-jamba              parity of Mamba-1's selective scan
#                                              (value heads of one column) beside
#                                              attention and experts (.venv-export)
#   bench/device/plans/llama-1b, llama-3b      benchmark table (--init random)
#   bench/device/plans/llama-1b-2l             llama-1b's layer and batches, 2
#                                              layers: the GPU time of each kernel
#                                              in a step, under Nsight Compute
#   bench/device/plans/llama-7b-24g            7B-class under --gpu-mem-limit 24GiB
#   bench/device/plans/llama-1b-32k            long context: 1 x 32768 tokens, the
#                                              MLP and the loss in chunks of tokens
#   bench/device/plans/llama-9b-bf16           the largest that the GPU machine's
#                                              128 GiB of host RAM holds: 9.2B
#                                              with bf16 master weights (102 GiB)
#   bench/device/plans/tokens.u32              byte-level tokens
#   bench/device/third_party/googletest        GoogleTest 1.12 sources
#   bench/device/third_party/cudnn/include     cuDNN's headers (the toolkit's)
#
# Batch 4 x 2048 tokens per micro-batch; micro-batches per fetch as the
# simulator suggests for the h200-pcie5 preset (at least 1), so that the
# weights' transfers and the host's work hide behind compute: for the plans
# the device check also runs on cuDNN (1B, 3B, 7B-class), at cuDNN's
# attention rate, where a layer's compute is shortest. Each of these plans
# also holds prediction-cudnn.json, its prediction with cuDNN's attention.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
MT=${MT:-build/tools/megatrain}
OUT=bench/device/plans
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
[ -x "$MT" ] || { echo "error: $MT not found (build the compiler first)" >&2; exit 1; }
rm -rf "$OUT"
mkdir -p "$OUT"

echo "== parity models"
for m in tiny-llama tiny-gpt2; do
  "$PY" samples/export.py --model $m -o "$TMP/$m.onnx" > /dev/null
  "$MT" compile "$TMP/$m.onnx" --batch 4 --seq-len 128 -o "$OUT/$m" --no-build
done
"$MT" compile "$TMP/tiny-llama.onnx" --batch 4 --seq-len 128 --master-weights bf16 \
  -o "$OUT/tiny-llama-bf16master" --no-build
"$PY" -m tests.e2e.hf_architectures bloom "$TMP/tiny-bloom.onnx" > /dev/null 2>&1
"$PY" samples/structure_model.py --preset tiny --sliding-window 32 --with-data \
  -o "$TMP/tiny-window.onnx"
for m in tiny-bloom tiny-window; do
  "$MT" compile "$TMP/$m.onnx" --batch 4 --seq-len 128 -o "$OUT/$m" --no-build
done
EXPORT_PY=${EXPORT_PY:-.venv-export/bin/python}
"$EXPORT_PY" tests/e2e/dynamo_exports.py gemma2 "$TMP/tiny-gemma2.onnx" > /dev/null 2>&1
"$MT" compile "$TMP/tiny-gemma2.onnx" --batch 4 --seq-len 128 --vocab-pieces 2 \
  -o "$OUT/tiny-gemma2" --no-build
"$EXPORT_PY" tests/e2e/dynamo_exports.py gpt_oss "$TMP/tiny-gpt_oss.onnx" > /dev/null 2>&1
"$MT" compile "$TMP/tiny-gpt_oss.onnx" --batch 4 --seq-len 128 -o "$OUT/tiny-gpt_oss" --no-build
"$EXPORT_PY" tests/e2e/dynamo_exports.py mixtral "$TMP/tiny-mixtral.onnx" > /dev/null 2>&1
"$MT" compile "$TMP/tiny-mixtral.onnx" --batch 4 --seq-len 128 -o "$OUT/tiny-mixtral" --no-build
"$EXPORT_PY" tests/e2e/dynamo_exports.py llama4 "$TMP/tiny-llama4.onnx" > /dev/null 2>&1
"$MT" compile "$TMP/tiny-llama4.onnx" --batch 4 --seq-len 128 -o "$OUT/tiny-llama4" --no-build
"$EXPORT_PY" tests/e2e/dynamo_exports.py qwen3_5 "$TMP/tiny-qwen3_5.onnx" > /dev/null 2>&1
"$MT" compile "$TMP/tiny-qwen3_5.onnx" --batch 4 --seq-len 128 -o "$OUT/tiny-qwen3_5" --no-build
"$EXPORT_PY" tests/e2e/dynamo_exports.py bamba "$TMP/tiny-bamba.onnx" > /dev/null 2>&1
"$MT" compile "$TMP/tiny-bamba.onnx" --batch 4 --seq-len 128 -o "$OUT/tiny-bamba" --no-build
"$EXPORT_PY" tests/e2e/dynamo_exports.py kimi_linear "$TMP/tiny-kimi_linear.onnx" > /dev/null 2>&1
"$MT" compile "$TMP/tiny-kimi_linear.onnx" --batch 4 --seq-len 128 -o "$OUT/tiny-kimi_linear" \
  --no-build
"$EXPORT_PY" tests/e2e/dynamo_exports.py jamba "$TMP/tiny-jamba.onnx" > /dev/null 2>&1
"$MT" compile "$TMP/tiny-jamba.onnx" --batch 4 --seq-len 128 -o "$OUT/tiny-jamba" --no-build

# name, then structure_model.py flags (Llama shapes, vocab 32000).
structure() {
  local name=$1; shift
  "$PY" samples/structure_model.py "$@" -o "$TMP/$name.onnx" > /dev/null
}
suggested() { # the simulator's micro-batches for a compiled plan
  python3 -c "import json,sys; p=json.load(open(sys.argv[1]));
print(max(1, int(p['prediction'].get('suggested_micro_batches') or 1)))" "$1/plan.json"
}
# cuDNN's fused attention taken at torch SDPA's measured rate, about half
# the dense peak (docs/schedule.md); ours is the simulator's default.
# cudnn-frontend's own H200 figures for cuDNN 9.19 (the version PyTorch
# 2.11's wheels bring; benchmark/sdpa_benchmark_training, Llama 3.1's 64
# heads over 8 at D = 128, causal, 2048 tokens: 484 TFLOPS forward, 370
# backward) come to 0.51 of the simulator's 790 TFLOPS at that length; at
# D = 64 (gpt-oss, its window of 1024 in 4096 tokens) to 0.38.
CUDNN_EFFICIENCY=0.5
compile_structure() { # name, attention efficiency to choose micro-batches at
                      # (0: ours), compile flags
  local name=$1 eff=$2 dir=$OUT/$1; shift 2
  local at=(); [ "$eff" != 0 ] && at=(--attention-efficiency "$eff")
  local shape=(--batch 4 --seq-len 2048)
  "$MT" compile "$TMP/$name.onnx" "${shape[@]}" "$@" "${at[@]}" -o "$dir" --no-build > /dev/null
  local m; m=$(suggested "$dir")
  # The same plan predicted with cuDNN's attention, for the +cudnn rows.
  "$MT" compile "$TMP/$name.onnx" "${shape[@]}" --micro-batches "$m" "$@" \
    --attention-efficiency "$CUDNN_EFFICIENCY" -o "$TMP/cudnn-plan" --no-build > /dev/null
  "$MT" compile "$TMP/$name.onnx" "${shape[@]}" --micro-batches "$m" "$@" -o "$dir" --no-build
  python3 -c "import json,sys; json.dump(json.load(open(sys.argv[1]))['prediction'],
open(sys.argv[2], 'w'), indent=1)" "$TMP/cudnn-plan/plan.json" "$dir/prediction-cudnn.json"
  rm -rf "$TMP/cudnn-plan"
}

echo "== structure models"
# ~1.1B (TinyLlama's shape): hidden 2048, 22 layers, 32/4 heads of 64.
structure llama-1b --preset llama-7b --layers 22 --hidden 2048 --ffn 5632 --heads 32 --kv-heads 4 --vocab 32000
compile_structure llama-1b "$CUDNN_EFFICIENCY"
# The same layer, micro-batches and tokens, 2 layers: a step short enough to
# time each of its kernels under Nsight Compute.
structure llama-1b-2l --preset llama-7b --layers 2 --hidden 2048 --ffn 5632 --heads 32 --kv-heads 4 --vocab 32000
"$MT" compile "$TMP/llama-1b-2l.onnx" --batch 4 --seq-len 2048 \
  --micro-batches "$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['micro_batches'])" \
    "$OUT/llama-1b/plan.json")" -o "$OUT/llama-1b-2l" --no-build
# ~3B (Llama 3.2 3B's shape, vocab 32000): hidden 3072, 28 layers, 24/8 heads of 128.
structure llama-3b --preset llama-7b --layers 28 --hidden 3072 --ffn 8192 --heads 24 --kv-heads 8 --vocab 32000
compile_structure llama-3b "$CUDNN_EFFICIENCY"
# 6.7B (Llama 2 7B), planned for a 24 GiB card (the 6 micro-batches that
# suffice for our attention would leave the host's AdamW and packs showing
# between layers at cuDNN's rate; it suggests 8).
structure llama-7b --preset llama-7b
compile_structure llama-7b "$CUDNN_EFFICIENCY" --gpu-mem-limit 24GiB
mv "$OUT/llama-7b" "$OUT/llama-7b-24g"
# 9.2B (Llama 2 7B's layer, 44 of them) with bf16 master weights: 12 B/param
# of host state, where fp32 masters (16 B/param) stop near 7.5B on 128 GiB.
structure llama-9b --preset llama-7b --layers 44
compile_structure llama-9b 0 --master-weights bf16
mv "$OUT/llama-9b" "$OUT/llama-9b-bf16"
# Long context on the ~1.1B shape: one 32K-token sequence per micro-batch.
"$MT" compile "$TMP/llama-1b.onnx" --batch 1 --seq-len 32768 -o "$OUT/llama-1b-32k" --no-build

# The shapes, for the FSDP2 baseline on the GPU machine (batch per micro-batch).
cat > "$OUT/shapes.json" <<'JSON'
{
  "llama-1b": {"hidden": 2048, "ffn": 5632, "layers": 22, "heads": 32, "kv_heads": 4, "vocab": 32000, "batch": 4, "seq": 2048},
  "llama-3b": {"hidden": 3072, "ffn": 8192, "layers": 28, "heads": 24, "kv_heads": 8, "vocab": 32000, "batch": 4, "seq": 2048},
  "llama-7b-24g": {"hidden": 4096, "ffn": 11008, "layers": 32, "heads": 32, "kv_heads": 32, "vocab": 32000, "batch": 4, "seq": 2048}
}
JSON

echo "== tokens"
"$PY" samples/make_tokens.py -o "$OUT/tokens.u32"

if ls /usr/local/cuda/include/cudnn*.h > /dev/null 2>&1; then
  echo "== cuDNN's headers (for a GPU machine whose toolkit has none)"
  rm -rf bench/device/third_party/cudnn
  mkdir -p bench/device/third_party/cudnn/include
  cp /usr/local/cuda/include/cudnn*.h bench/device/third_party/cudnn/include/
fi
if [ -d /usr/src/googletest/googletest ]; then
  echo "== googletest sources (built there only if find_package(GTest) fails)"
  rm -rf bench/device/third_party/googletest
  mkdir -p bench/device/third_party/googletest
  cp -r /usr/src/googletest/CMakeLists.txt /usr/src/googletest/googletest \
    bench/device/third_party/googletest/
fi
du -sh "$OUT" bench/device/third_party 2>/dev/null || true
echo "wrote $OUT"
