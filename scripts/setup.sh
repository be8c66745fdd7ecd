#!/usr/bin/env bash
# Sets up everything loom needs on Debian 12 and builds it. Safe to run twice:
# packages already installed are skipped, the build is incremental.
#
#   scripts/setup.sh            install packages (needs root or sudo), configure, build,
#                               fetch the corpus and prepare its tokenizer and shards
#   LOOM_SKIP_APT=1 scripts/setup.sh   no package installs
#   LOOM_SKIP_CORPUS=1 scripts/setup.sh  no corpus (tests do not need it)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${LOOM_BUILD_DIR:-$ROOT/build}"

# Build: compiler, CMake, Ninja. Libraries: oneDNN (matmuls), toml++ (config),
# OpenMP, GoogleTest, SentencePiece (tokenizer), OpenMPI (communication),
# nlohmann-json (manifests, metrics), OpenSSL (SHA-256).
# Reference and benchmark: Debian's PyTorch (python3-torch) on OpenBLAS.
# Corpus extraction (tools/extract_corpus.py): groff (man pages), perl (pod2text).
PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libdnnl-dev ocl-icd-opencl-dev   # dnnl-config.cmake requires OpenCL headers
  libtomlplusplus-dev libomp-dev libgtest-dev
  libsentencepiece-dev libopenmpi-dev openmpi-bin
  nlohmann-json3-dev   # JSON: checkpoint manifests, metrics, traces
  libssl-dev           # SHA-256 of checkpoint files (OpenSSL's EVP)
  python3 python3-torch python3-numpy
  libopenblas0   # the BLAS that the PyTorch baseline (tools/bench_pytorch.py) runs on
  groff-base perl
)

if [[ "${LOOM_SKIP_APT:-0}" != 1 ]]; then
  missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    SUDO=""
    if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
    echo "setup: installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    echo "setup: Debian packages already installed"
  fi
fi

cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
echo "setup: built $BUILD_DIR/loom"

# The training corpus from Debian packages, then its tokenizer and token
# shards (.cache/data, what `loom train` reads by default). Both steps skip
# work that is already done.
if [[ "${LOOM_SKIP_CORPUS:-0}" != 1 ]]; then
  "$ROOT/scripts/fetch_corpus.sh"
  "$BUILD_DIR/loom" prepare --input "${LOOM_CORPUS_DIR:-$ROOT/.cache/corpus}/text"
fi
