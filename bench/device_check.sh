#!/usr/bin/env bash
# The device check: one call on the GPU machine (one H200, no network, no
# MLIR/ONNX/protobuf), from the repository root, with $OUT set:
#
#   bash bench/device_check.sh
#
# Stages, each under its own timeout and skipped when the overall budget
# (BUDGET_S, default 470 s) cannot fit it, in priority order:
#   a. configure and build the runtime-only tree for sm_90 (CUDA on)
#   b. the runtime's GPU tests (the CUDA kernel tests, ctest label gpu, and
#      the conformance suite on cuda; the CPU's at the very end, tests-cpu;
#      the emulated CUDA suites nowhere: CPU work that CI runs already)
#   c. build the trainers of bench/device/plans/* (bench/device/make_plans.sh
#      writes them on the CPU machine): tiny-llama from source, the rest
#      against the tree of (a)
#   d. parity: tiny models (one with bf16 master weights, one Gemma 2 with
#      soft caps and vocabulary pieces, one Qwen3.5 with gated DeltaNet
#      layers, one Bamba with Mamba-2 mixers, one Kimi Linear with a decay
#      per key channel, one gpt-oss with sinks; tiny-llama, tiny-window,
#      tiny-gemma2, tiny-gpt_oss, tiny-bloom and tiny-llama4 again with
#      attention on cuDNN), CUDA bf16 vs CPU fp32, one step, --dump-grads;
#      and CUDA --stress against a normal CUDA run, bit for bit
#   attention. the attention kernels' TFLOPS (bench/attention_bench.cpp)
#      beside cuDNN's fused kernels and torch's scaled_dot_product_attention
#      (bench/attention_torch.py)
#   e/g/f. benchmarks (--init random, 3 steps, --trace) and the FSDP2
#      CPUOffloadPolicy baseline on the same shapes (bench/device/peers):
#      llama-1b, FSDP2 llama-1b, the 7B-class llama-7b-24g (planned with
#      --gpu-mem-limit 24GiB), llama-3b, FSDP2 llama-3b, each with our
#      attention and with cuDNN's (NAME+cudnn, its deterministic backward;
#      llama-1b+cudnn-nondeterministic, its other one): the cuDNN runs
#      first where cuDNN passed its kernel tests and parity here, else ours
#      (BENCH_FIRST=cudnn|ours decides instead); after moe,
#      llama-1b-32k (one 32K-token sequence: the MLP and the loss in chunks
#      of tokens) and llama-9b-bf16 (the largest the host holds: bf16
#      master weights)
#   tiles. the tensor-core attention kernels on other tiles beside the
#      runtime's, and the fastest per kernel (bench/attention_tiles_bench.cpp)
#   profile. Nsight Compute on the three tensor-core attention kernels at one
#      shape: throughputs, occupancy, stall reasons, stalls per instruction
#   kernels. one step of llama-1b's layer (2 layers) under Nsight Compute:
#      the GPU time of each kernel
#   host. the host's AdamW, pack and grad norm on all cores
#      (bench/adamw_bench.cpp), and one 7B layer's AdamW then packs beside
#      packs applying the update (bench/host_step_bench.cpp)
#   moe. the mixture-of-experts kernels' TFLOPS (bench/moe_bench.cpp): the
#      grouped tensor-core GEMMs, the reference kernels, a dense GEMM
#   tests-cpu. the runtime's other tests (CPU backend, host code), as CI runs
#      them
# Results: $OUT/summary.md (the tables, and each benchmark run against the
# targets: 2x FSDP2, GPU busy 0.90, 250 TFLOPS at 7B), $OUT/results.json, the logs and
# Chrome traces in $OUT/logs.tar.gz and $OUT/traces.tar.gz, and the dumped
# gradients of the models short of parity's fp32 criterion in
# $OUT/grads.tar.gz.
#
# STAGES (a regex over stage names, whole names) runs only those; a later
# call on a still-warm machine reuses the build and trainers of $WORK, e.g.
#   STAGES='bench llama-3b|fsdp2 llama-3b|bench llama-9b-bf16' bash bench/device_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/device-out}
BUDGET_S=${BUDGET_S:-470}
WORK=${WORK:-/tmp/megatrain-devcheck}
JOBS=$(nproc 2>/dev/null || echo 8)
PLANS=$ROOT/bench/device/plans
DEV=$ROOT/bench/device
T0=$(date +%s)
mkdir -p "$OUT" "$WORK"
# Results of an earlier run must not pass for this one's (builds stay).
find "$WORK" -maxdepth 1 -type f -delete
export PYTHONUNBUFFERED=1

elapsed() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( BUDGET_S - $(elapsed) )); }
log() { echo "[devcheck $(elapsed)s] $*"; }
record() { # name status seconds note
  python3 -c 'import json,sys; print(json.dumps({"name": sys.argv[1], "status": sys.argv[2], "seconds": float(sys.argv[3]), "note": sys.argv[4]}))' \
    "$1" "$2" "$3" "$4" >> "$WORK/stages.jsonl"
}
# stage NAME ESTIMATE_S TIMEOUT_S FUNCTION: runs FUNCTION under a timeout of
# at most TIMEOUT_S and what the budget leaves; skips it when the budget
# left is under ESTIMATE_S.
stage() {
  local name=$1 est=$2 limit=$3 fn=$4 t rc status
  if [ -n "${STAGES:-}" ] && ! [[ $name =~ ^($STAGES)$ ]]; then
    log "stage $name: not selected (STAGES)"
    return 0
  fi
  if (( $(left) < est )); then
    log "stage $name: skipped (needs ~${est}s, $(left)s left)"
    record "$name" skipped 0 "budget: needs ~${est}s, $(left)s left"
    return 1
  fi
  (( limit > $(left) - 5 )) && limit=$(( $(left) - 5 ))
  log "stage $name: start (timeout ${limit}s)"
  t=$(date +%s)
  timeout --kill-after=5 "$limit" bash -c "$(declare -f); $fn" 2>&1 | tee -a "$WORK/devcheck.log"
  rc=${PIPESTATUS[0]}
  t=$(( $(date +%s) - t ))
  case $rc in 0) status=ok ;; 124|137) status=timeout ;; *) status=failed ;; esac
  log "stage $name: $status (${t}s)"
  record "$name" "$status" "$t" "exit $rc"
  return $rc
}
export ROOT OUT WORK JOBS PLANS DEV

# ---- environment ------------------------------------------------------------
log "environment"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  nvcc --version | tail -2 || true
  cmake --version | head -1
  python3 -c 'import torch; print("torch", torch.__version__)' 2>/dev/null || true
} | tee "$WORK/env.txt"
python3 - "$WORK" <<'PY'
import json, os, subprocess, sys
def sh(c):
    try:
        return subprocess.run(c, shell=True, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception:
        return ""
gpu = sh("nvidia-smi --query-gpu=name,driver_version --format=csv,noheader").split(", ")
env = {"gpu": gpu[0] if gpu else "?", "driver": gpu[1] if len(gpu) > 1 else "?",
       "nvcc": sh("nvcc --version | grep -o 'release [0-9.]*'"), "torch": sh("python3 -c 'import torch; print(torch.__version__)'"),
       "cpus": os.cpu_count(), "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30),
       "commit": sh("git rev-parse --short HEAD") or "?"}
json.dump(env, open(os.path.join(sys.argv[1], "env.json"), "w"))
PY

# cuDNN for MEGATRAIN_CUDA_ATTENTION=cudnn: the one PyTorch's wheels bring
# (its folder on the loader's path too, for cuDNN's own libraries), unless
# MEGATRAIN_CUDNN names one already.
if [ -z "${MEGATRAIN_CUDNN:-}" ]; then
  MEGATRAIN_CUDNN=$(python3 -c '
import glob, os, site
for d in site.getsitepackages():
    for p in sorted(glob.glob(os.path.join(d, "nvidia", "**", "libcudnn.so.9"), recursive=True)):
        print(p); raise SystemExit' 2>/dev/null || true)
fi
if [ -n "${MEGATRAIN_CUDNN:-}" ]; then
  export MEGATRAIN_CUDNN
  export LD_LIBRARY_PATH=$(dirname "$MEGATRAIN_CUDNN")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  log "cuDNN: $MEGATRAIN_CUDNN" | tee -a "$WORK/env.txt"
else
  log "cuDNN: none in Python's packages (the loader's search path decides)" | tee -a "$WORK/env.txt"
fi
# cuDNN's runtime-compiled engines (its fused attention among them) load
# NVRTC by name: where the loader's cache has none, the one PyTorch's wheels
# bring (after cuDNN's folder, so a toolkit's own stays first).
if ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so\.'; then
  NVRTC_DIR=$(python3 -c '
import glob, os, site
for d in site.getsitepackages():
    for p in sorted(glob.glob(os.path.join(d, "nvidia", "**", "libnvrtc.so.*"), recursive=True)):
        print(os.path.dirname(p)); raise SystemExit' 2>/dev/null || true)
  if [ -n "$NVRTC_DIR" ]; then
    export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$NVRTC_DIR
    log "NVRTC: $NVRTC_DIR" | tee -a "$WORK/env.txt"
  else
    log "NVRTC: none found (cuDNN's runtime-compiled engines cannot load)" | tee -a "$WORK/env.txt"
  fi
fi

# ---- a. build ----------------------------------------------------------------
build_runtime() {
  set -e
  local B=$WORK/build extra=()
  # cuBLASLt from PyTorch's wheel when the toolkit has none.
  local cuda_home; cuda_home=$(dirname "$(dirname "$(command -v nvcc)")")
  if ! ls "$cuda_home"/lib64/libcublasLt.so* "$cuda_home"/lib/libcublasLt.so* > /dev/null 2>&1; then
    local py; py=$(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__))' 2>/dev/null || true)
    if [ -n "$py" ]; then
      echo "cuBLASLt from $py"
      extra+=("-DCUDA_cublasLt_LIBRARY=$(ls "$py"/lib/libcublasLt.so* | head -1)"
              "-DCMAKE_CUDA_FLAGS=-I$py/include" "-DCMAKE_CXX_FLAGS=-I$py/include")
    fi
  fi
  # cuDNN's headers: the toolkit's, PyTorch's wheel's, or those
  # bench/device/make_plans.sh copied from the CPU machine's toolkit.
  if [ ! -f "$cuda_home/include/cudnn_graph.h" ]; then
    local inc; inc=$(dirname "$(dirname "${MEGATRAIN_CUDNN:-/none/lib/x}")")/include
    [ -f "$inc/cudnn_graph.h" ] || inc=$DEV/third_party/cudnn/include
    [ -f "$inc/cudnn_graph.h" ] && extra+=("-DMEGATRAIN_CUDNN_INCLUDE_DIR=$inc")
  fi
  local gen=(); command -v ninja > /dev/null && gen=(-G Ninja)
  if ! cmake "${gen[@]}" -S "$ROOT" -B "$B" -DMEGATRAIN_RUNTIME_ONLY=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release "${extra[@]}" \
      > "$WORK/configure.log" 2>&1; then
    if grep -q GTest "$WORK/configure.log" && [ -d "$DEV/third_party/googletest" ]; then
      echo "building googletest from bench/device/third_party"
      cmake "${gen[@]}" -S "$DEV/third_party/googletest" -B "$WORK/gtest-build" -DBUILD_GMOCK=OFF \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$WORK/gtest" > "$WORK/gtest.log" 2>&1
      cmake --build "$WORK/gtest-build" -j "$JOBS" --target install >> "$WORK/gtest.log" 2>&1
      rm -rf "$B"
      cmake "${gen[@]}" -S "$ROOT" -B "$B" -DMEGATRAIN_RUNTIME_ONLY=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_PREFIX_PATH="$WORK/gtest" "${extra[@]}" > "$WORK/configure.log" 2>&1 \
        || { tail -30 "$WORK/configure.log"; exit 1; }
    else
      tail -30 "$WORK/configure.log"; exit 1
    fi
  fi
  grep -E "MegaTrain: (CUDA|cuDNN)" "$WORK/configure.log"
  grep -q "CUDA backend on" "$WORK/configure.log" || { echo "error: the CUDA backend is off"; exit 1; }
  cmake --build "$B" -j "$JOBS" > "$WORK/build.log" 2>&1 || { grep -E "error|FAILED" "$WORK/build.log" | head -30; exit 1; }
  echo "built $B"
}
stage build 60 300 build_runtime || { log "no build: nothing else can run"; }

# ---- b. tests ----------------------------------------------------------------
# The GPU's tests here: the CUDA kernel tests (ctest label gpu: against
# naive loops, cuDNN's among them) and the conformance suite's cases on the
# cuda backend. The CPU's (every other runtime test, which CI runs already)
# in the tests-cpu stage at the end, where they cost the benchmarks
# nothing. The emulated CUDA suites (emu.*, cudaemu, CudaBackendEmu) run
# nowhere here: CPU work of about a minute (the emulated MoE test alone)
# that CI does.
EMULATED='^emu[.]|cudaemu|CudaBackendEmu'
run_tests() {
  local rc1 rc2
  {
    ctest --test-dir "$WORK/build" -L gpu -j "$JOBS" --timeout 150
    rc1=$?
    ctest --test-dir "$WORK/build" -R '/cuda$' -j "$JOBS" --timeout 150
    rc2=$?
  } > "$WORK/ctest-cuda.log" 2>&1
  python3 "$DEV/devcheck.py" tests "$WORK"
  grep -E "tests passed|tests failed" "$WORK/ctest-cuda.log"
  [ "$rc1" -eq 0 ] && [ "$rc2" -eq 0 ]
}
run_cpu_tests() {
  ctest --test-dir "$WORK/build" -LE gpu -E "/cuda\$|$EMULATED" -j "$JOBS" \
    --timeout 120 > "$WORK/ctest-cpu.log" 2>&1
  local rc=$?
  python3 "$DEV/devcheck.py" tests "$WORK"
  return $rc
}
export EMULATED
# The attention tests run both layouts since 2026-12-07 (518 GPU cases, 280
# before; the stage took 114 s with the fewer): room for the more.
[ -d "$WORK/build" ] && stage tests 60 240 run_tests

# The tensor-core attention and mixture-of-experts kernels were checked on
# the CPU emulator only before their first GPU run: should a family's
# tensor-core tests fail on the GPU while its CUDA-core ones pass, the later
# stages run it on CUDA cores (the stages table says so) rather than
# produce nothing.
fallback() { # suite prefix, variable
  python3 - "$WORK/tests.json" "$1" <<'PY'
import json, sys
try:
    failed = json.load(open(sys.argv[1])).get("failed_names", [])
except (OSError, ValueError):
    sys.exit(1)
tc = [n for n in failed if n.startswith("TensorCores/" + sys.argv[2])]
cc = [n for n in failed if n.startswith("CudaCores/" + sys.argv[2])]
sys.exit(0 if tc and not cc else 1)
PY
}
for family in "AttentionTest MEGATRAIN_CUDA_ATTENTION attention" "MoeTest MEGATRAIN_CUDA_MOE experts"; do
  read -r suite var what <<< "$family"
  if fallback "$suite"; then
    export "$var=cuda-cores"
    log "tensor-core $what failed its tests: later stages use $var=cuda-cores"
    record "$what on CUDA cores" fallback 0 "TensorCores/$suite failed on the GPU"
  fi
done

# ---- c. trainers ---------------------------------------------------------------
build_trainers() {
  local pids=() names=() rc=0 d n
  mkdir -p "$WORK/plans"
  for d in "$PLANS"/*/; do
    n=$(basename "$d")
    [ -f "$d/trainer.cpp" ] || continue
    # A trainer built by an earlier call on this machine stays.
    if [ -x "$WORK/plans/$n/trainer" ]; then echo "  trainer $n: built earlier"; continue; fi
    rm -rf "$WORK/plans/$n"; cp -r "$d" "$WORK/plans/$n"
    if [ "$n" = tiny-llama ]; then # the generated project's own path: runtime from source
      ( cmake -S "$WORK/plans/$n" -B "$WORK/plans/$n/build" -DMEGATRAIN_SOURCE_DIR="$ROOT" \
          -DMEGATRAIN_BUILD_DIR=/nonexistent -DCMAKE_CUDA_ARCHITECTURES=90 &&
        cmake --build "$WORK/plans/$n/build" -j "$JOBS" ) > "$WORK/trainer-$n.log" 2>&1 &
    else
      ( cmake -S "$WORK/plans/$n" -B "$WORK/plans/$n/build" -DMEGATRAIN_SOURCE_DIR="$ROOT" \
          -DMEGATRAIN_BUILD_DIR="$WORK/build" &&
        cmake --build "$WORK/plans/$n/build" -j 4 ) > "$WORK/trainer-$n.log" 2>&1 &
    fi
    pids+=($!); names+=("$n")
  done
  for i in "${!pids[@]}"; do
    if wait "${pids[$i]}" && [ -x "$WORK/plans/${names[$i]}/trainer" ]; then
      echo "  trainer ${names[$i]}: built"
    else
      echo "  trainer ${names[$i]}: FAILED"; tail -15 "$WORK/trainer-${names[$i]}.log"; rc=1
    fi
  done
  return $rc
}
[ -d "$WORK/build" ] && stage trainers 30 180 build_trainers

# ---- d. parity -----------------------------------------------------------------
parity_runs() { # model: CPU fp32, CPU bf16 and CUDA one step, then two 3-step CUDA runs
  # NAME+cudnn: the plan NAME with the CUDA runs' attention on cuDNN (run in
  # the background: the variable stays in this run's subshell).
  local m=$1 t=$WORK/plans/${1%%+*}/trainer
  [ "$m" != "${m%%+*}" ] && export MEGATRAIN_CUDA_ATTENTION=${m#*+}
  [ -x "$t" ] || { echo "  no trainer for $m"; return 1; }
  local common=(--data "$PLANS/tokens.u32" --steps 1 --seed 3 --threads 4)
  python3 "$DEV/devcheck.py" run $m.cpu "$t" "$WORK" 60 -- "${common[@]}" --backend cpu \
    --precision fp32 --dump-grads "$WORK/$m.cpu.grads.safetensors" --log-jsonl "$WORK/$m.cpu.jsonl"
  python3 "$DEV/devcheck.py" run $m.cpubf16 "$t" "$WORK" 60 -- "${common[@]}" --backend cpu \
    --precision bf16 --dump-grads "$WORK/$m.cpubf16.grads.safetensors"
  python3 "$DEV/devcheck.py" run $m.cuda "$t" "$WORK" 60 -- "${common[@]}" --backend cuda \
    --dump-grads "$WORK/$m.cuda.grads.safetensors" --log-jsonl "$WORK/$m.cuda.jsonl" \
    --trace "$WORK/$m.cuda.trace.json"
  local three=(--data "$PLANS/tokens.u32" --steps 3 --seed 5 --threads 4 --backend cuda)
  python3 "$DEV/devcheck.py" run $m.cuda2 "$t" "$WORK" 60 -- "${three[@]}" --log-jsonl "$WORK/$m.cuda2.jsonl"
  python3 "$DEV/devcheck.py" run $m.stress "$t" "$WORK" 90 -- "${three[@]}" --stress --log-jsonl "$WORK/$m.stress.jsonl"
}
parity() {
  # Four models at a time (4 CPU threads each): each run pays the process's
  # and CUDA context's start, which the GPU machine's cores can overlap.
  local rc=0 m models=(tiny-llama tiny-gpt2 tiny-bloom tiny-window tiny-gemma2 tiny-gpt_oss
                       tiny-mixtral tiny-llama4 tiny-qwen3_5 tiny-bamba tiny-kimi_linear
                       tiny-jamba tiny-llama-bf16master tiny-llama+cudnn tiny-window+cudnn
                       tiny-gemma2+cudnn tiny-gpt_oss+cudnn tiny-bloom+cudnn
                       tiny-llama4+cudnn)
  for m in "${models[@]}"; do
    parity_runs $m > "$WORK/parity-$m.txt" 2>&1 &
    while (( $(jobs -rp | wc -l) >= 4 )); do wait -n; done
  done
  wait
  for m in "${models[@]}"; do
    cat "$WORK/parity-$m.txt"
    python3 "$DEV/devcheck.py" parity $m "$WORK" || rc=1
  done
  return $rc
}
[ -d "$WORK/plans" ] && stage parity 55 200 parity

# ---- attention kernels against cuDNN's and torch's SDPA -------------------------
# Before the benchmarks: the single most telling stage for attention, the
# largest gap to the targets.
attention() {
  # cudnn-device.json: cuDNN's description of this GPU, for planning ahead
  # on the CPU machine (tests/unit/runtime/cuda/CudnnPlanAheadTest.cpp).
  "$WORK/build/bench/attention_bench" --json "$WORK/attention.json" \
    --cudnn-device "$WORK/cudnn-device.json" || return 1
  python3 "$ROOT/bench/attention_torch.py" "$WORK/attention.json" --json "$WORK/attention-torch.json"
}
[ -x "$WORK/build/bench/attention_bench" ] && stage attention 30 120 attention

# ---- e/g. benchmarks, f. FSDP2 ---------------------------------------------------
bench() { # plan name; NAME+cudnn: that plan with attention on cuDNN
  local n=$1 plan=${1%%+*} attention=${MEGATRAIN_CUDA_ATTENTION:-}
  local t=$WORK/plans/$plan/trainer
  [ "$n" != "$plan" ] && attention=${n#*+}
  [ -x "$t" ] || { echo "  no trainer for $plan"; return 1; }
  MEGATRAIN_CUDA_ATTENTION=$attention \
  python3 "$DEV/devcheck.py" run "$n" "$t" "$WORK" 10000 -- --data "$PLANS/tokens.u32" \
    --backend cuda --init random --steps 3 --log-jsonl "$WORK/$n.jsonl" \
    --trace "$WORK/$n.trace.json"
}
fsdp() { # plan name: the same shape, M*B sequences of S tokens per step
  local n=$1
  local args; args=$(python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))[sys.argv[2]]
m = int(json.load(open(sys.argv[3])).get("micro_batches") or 1)
s["batch"] *= m
print(" ".join("--%s %d" % (k.replace("_", "-"), s[k]) for k in
               ("hidden", "ffn", "layers", "heads", "kv_heads", "vocab", "batch", "seq")))
' "$PLANS/shapes.json" "$n" "$PLANS/$n/plan.json") || return 1
  echo "  fsdp2 $n: $args"
  # shellcheck disable=SC2086
  python3 "$DEV/peers/fsdp2_offload.py" --name "$n" $args --steps 2 --warmup 1 \
    --json-out "$WORK/fsdp2-$n.json" > "$WORK/fsdp2-$n.log" 2>&1
  local rc=$?
  tail -3 "$WORK/fsdp2-$n.log"
  return $rc
}
# The order decides what a short budget measures: where cuDNN's kernel
# tests passed on this GPU and tiny-llama+cudnn passed parity on cuDNN, the
# runs on cuDNN's attention come first (the configuration the targets are
# for), ours after; else ours first. BENCH_FIRST=cudnn or ours says so
# instead (a later call on a warm machine has neither result: each call
# starts with a clean work folder).
# 6.7B: --init random fills 6.7e9 normals on every core (268M took 2.8 s on
# 2 cores of the CPU machine), and the host store is 108 GB of the
# machine's 128 GiB; FSDP2 would need as much again, so it runs on the
# smaller shapes only. Estimates: the H200's times of 2026-12-04 with room
# for cuDNN's first plans and FSDP2's larger batches since.
bench_stage() { # "bench PLAN" or "fsdp2 PLAN", estimate, timeout
  case $1 in
    "fsdp2 "*) stage "$1" "$2" "$3" "fsdp ${1#fsdp2 }" ;;
    *) stage "$1" "$2" "$3" "bench ${1#bench }" ;;
  esac
}
ours_runs=("bench llama-1b 30 150" "fsdp2 llama-1b 60 150" "bench llama-7b-24g 110 330"
           "bench llama-3b 50 200" "fsdp2 llama-3b 130 220")
cudnn_runs=("bench llama-1b+cudnn 30 150" "fsdp2 llama-1b 60 150"
            "bench llama-7b-24g+cudnn 110 330" "bench llama-3b+cudnn 50 200"
            "fsdp2 llama-3b 130 220" "bench llama-1b+cudnn-nondeterministic 30 150")
first=${BENCH_FIRST:-}
if [ -z "$first" ]; then
  why=$(python3 "$DEV/devcheck.py" cudnn-ok "$WORK") && first=cudnn || first=ours
  log "benchmarks, $why"
  record "benchmarks: $first first" decided 0 "${why#*: }"
else
  log "benchmarks: $first first (BENCH_FIRST)"
fi
if [ "$first" = cudnn ]; then runs=("${cudnn_runs[@]}" "${ours_runs[@]}")
else runs=("${ours_runs[@]}" "${cudnn_runs[@]}"); fi
declare -A ran=()
if [ -d "$WORK/plans" ]; then
  for r in "${runs[@]}"; do
    read -r kind plan est limit <<< "$r"
    [ -n "${ran[$kind $plan]:-}" ] && continue # FSDP2's runs are in both lists
    ran[$kind $plan]=1
    bench_stage "$kind $plan" "$est" "$limit"
  done
fi

# ---- the tensor-core attention on other tiles ------------------------------------
# Each choice of AttentionTileVariants.h beside the runtime's tiles, and the
# fastest per kernel: what to make the default (Tiles in
# runtime/cuda/AttentionTensorCore.cuh).
tiles() {
  "$WORK/build/bench/attention_tiles_bench" --json "$WORK/attention-tiles.json"
}
[ -x "$WORK/build/bench/attention_tiles_bench" ] && stage tiles 15 60 tiles

# ---- where the attention kernels' time goes: Nsight Compute, one shape ----------
# Each kernel's second launch (the first warms up) on Llama 3 8B's shape at
# 4096 tokens: throughputs, occupancy, warp stall reasons, and the stall
# samples of every SASS instruction, into ncu-*.txt (logs.tar.gz).
profile() {
  command -v ncu > /dev/null || { echo "no ncu on this machine"; return 1; }
  local kernel rc=0
  for kernel in forward_kernel dq_kernel dkdv_kernel; do
    ncu --clock-control none -k "regex:$kernel" --launch-skip 1 --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section WarpStateStats --section SchedulerStats \
      --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section SourceCounters -f -o "$WORK/ncu-$kernel" \
      "$WORK/build/bench/attention_bench" --iters 1 --shape "llama3-8b S4096" \
      --tensor-cores-only > "$WORK/ncu-$kernel.log" 2>&1 || { rc=1; tail -5 "$WORK/ncu-$kernel.log"; continue; }
    ncu --import "$WORK/ncu-$kernel.ncu-rep" --page details > "$WORK/ncu-$kernel.txt" 2>&1
    ncu --import "$WORK/ncu-$kernel.ncu-rep" --page source --print-source sass --csv \
      > "$WORK/ncu-$kernel-sass.txt" 2>&1
    echo "== $kernel"
    grep -E "Duration|Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Issue Slots Busy|Eligible Warps" \
      "$WORK/ncu-$kernel.txt" | head -16
  done
  return $rc
}
[ -x "$WORK/build/bench/attention_bench" ] && stage profile 60 150 profile

# ---- the GPU time of each kernel in a step: llama-1b's layer, 2 layers ----------
# One step under Nsight Compute, each kernel timed alone (serialized): which
# kernels a 1B step spends its GPU time in, embedding and loss overweighted
# (2 layers of 22). Table in kernels-llama-1b-2l.json and the summary.
kernel_times() {
  command -v ncu > /dev/null || { echo "no ncu on this machine"; return 1; }
  local t=$WORK/plans/llama-1b-2l/trainer
  [ -x "$t" ] || { echo "  no trainer for llama-1b-2l"; return 1; }
  ncu --clock-control none --metrics gpu__time_duration.sum --print-units base \
    --csv --page details --launch-count 5000 --log-file "$WORK/ncu-llama-1b-2l.csv" \
    "$t" --data "$PLANS/tokens.u32" --backend cuda --init random --steps 1 \
    > "$WORK/ncu-llama-1b-2l.log" 2>&1 || { tail -5 "$WORK/ncu-llama-1b-2l.log"; return 1; }
  python3 "$DEV/devcheck.py" kernels llama-1b-2l "$WORK/ncu-llama-1b-2l.csv" "$WORK"
}
[ -d "$WORK/plans" ] && stage "kernels llama-1b-2l" 60 150 kernel_times

# ---- the host's optimizer, pack and grad-norm sweeps on this machine's cores -----
host_sweeps() {
  { "$WORK/build/bench/adamw_bench" --params 256M --iters 3 &&
    "$WORK/build/bench/host_step_bench" --iters 3 &&
    "$WORK/build/bench/host_step_bench" --iters 3 --master bf16; } 2>&1 | tee "$WORK/host.txt"
  return "${PIPESTATUS[0]}"
}
[ -x "$WORK/build/bench/host_step_bench" ] && stage host 30 90 host_sweeps

# ---- mixture-of-experts kernels: grouped GEMMs, reference, dense ceiling -------
moe() {
  "$WORK/build/bench/moe_bench" --json "$WORK/moe.json"
}
[ -x "$WORK/build/bench/moe_bench" ] && stage moe 30 120 moe

# ---- the long context and the largest model ------------------------------------
if [ -d "$WORK/plans" ]; then
  stage "bench llama-1b-32k" 40 120 "bench llama-1b-32k"
  stage "bench llama-9b-bf16" 120 330 "bench llama-9b-bf16"
fi
[ -d "$WORK/build" ] && stage tests-cpu 60 180 run_cpu_tests

# ---- report ------------------------------------------------------------------
log "report"
python3 "$DEV/devcheck.py" report "$WORK" "$OUT" > "$WORK/report.log" 2>&1 || cat "$WORK/report.log"
tail -40 "$OUT/summary.md" 2>/dev/null
( cd "$WORK" && tar czf "$OUT/logs.tar.gz" --exclude='*.trace.json' --exclude='*.safetensors' \
    *.log *.json *.jsonl *.txt *.csv 2>/dev/null ) || true
( cd "$WORK" && ls *.trace.json > /dev/null 2>&1 && tar czf "$OUT/traces.tar.gz" *.trace.json ) || true
# The gradients of every model short of the fp32 criterion, to study here.
grads=$(cd "$WORK" && for f in *.parity.json; do
  [ -f "$f" ] || continue
  python3 -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1])).get("ok_fp32") else 1)' "$f" \
    || ls "${f%.parity.json}".*.grads.safetensors 2> /dev/null
done)
# shellcheck disable=SC2086
[ -n "$grads" ] && ( cd "$WORK" && tar czf "$OUT/grads.tar.gz" $grads )
ls -la "$OUT"
log "done"
