#!/usr/bin/env bash
# Installs everything MegaTrain needs to build and test, idempotently: a second
# run on a prepared machine only checks and returns within seconds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

apt_packages=(
  cmake ninja-build g++ python3-venv
  llvm-19-dev llvm-19-tools libmlir-19-dev mlir-19-tools    # MLIR 19, FileCheck, lit
  libonnx-dev libprotobuf-dev protobuf-compiler             # ONNX protobuf classes
  libfmt-dev libgtest-dev libopenblas-dev                   # fmt, GoogleTest, BLAS (CPU GEMM)
  python3-torch python3-onnx python3-numpy                  # exporters and the numerical oracle
)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: apt-get install ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Python: Debian's torch and onnx, plus HuggingFace transformers (a version that
# supports Debian's torch 1.13) in a venv that sees the system packages.
venv="$root/.venv"
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
if ! "$venv/bin/python" -c "import transformers, lit, safetensors" 2>/dev/null; then
  echo "install-deps: pip install transformers lit"
  "$venv/bin/pip" install -q --disable-pip-version-check "transformers==4.40.2" "lit==18.1.8" "safetensors>=0.4"
fi
echo "install-deps: ok"
