#!/usr/bin/env bash
# Sets up everything loom needs on Debian 12 and builds it. Safe to run twice:
# packages already installed are skipped, the build is incremental.
#
#   scripts/setup.sh            install packages (needs root or sudo), the Python
#                               environment .venv, configure, build, fetch the
#                               corpus and prepare its tokenizer and shards
#   scripts/setup.sh venv       only the Python environment .venv
#   LOOM_SKIP_APT=1 scripts/setup.sh   no package installs
#   LOOM_SKIP_VENV=1 scripts/setup.sh  no .venv (the transformers interop tests skip)
#   LOOM_SKIP_CORPUS=1 scripts/setup.sh  no corpus (tests do not need it)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${LOOM_BUILD_DIR:-$ROOT/build}"
VENV="$ROOT/.venv"

# Hugging Face transformers, to load `loom export` folders the way users do
# (tools/check_hf_interop.py, `make interop`), in .venv beside Debian's
# python3-torch 1.13 (--system-site-packages). transformers 4.45.2 is the
# last that runs on torch 1.13 (4.46's generate() imports torch 2's FSDP) and
# has what the checks need (Llama 3.1's llama3 rope scaling came in 4.43);
# every dependency is pinned and installed with --no-deps, so the set is the
# same on every machine. numpy, PyYAML, requests, typing-extensions: Debian's.
PY_PACKAGES=(
  transformers==4.45.2 tokenizers==0.20.3 safetensors==0.4.5 huggingface-hub==0.26.2
  regex==2024.4.28 tqdm==4.66.4 filelock==3.14.0 fsspec==2024.3.1 packaging==24.0
  sentencepiece==0.2.0   # check_hf_interop.py --tokenizer: the run's SentencePiece model
  jinja2==3.1.4 MarkupSafe==2.1.5   # apply_chat_template (tests/data/chat_template_test.cpp)
  # TensorBoard's own reader for tools/check_tensorboard.py (and `tensorboard --logdir runs`).
  tensorboard==2.16.2 protobuf==4.25.3 absl-py==2.1.0 six==1.16.0
  # PEFT's LoRA loader for tools/check_peft.py (the last release on torch 1.13's era).
  peft==0.13.2 accelerate==0.34.2 psutil==6.0.0
)

setup_venv() {
  if [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" - "${PY_PACKAGES[@]}" <<'PY'
import sys
from importlib.metadata import version, PackageNotFoundError
for spec in sys.argv[1:]:
    name, want = spec.split("==")
    try:
        if version(name) != want:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
PY
  then
    echo "setup: $VENV already has transformers ${PY_PACKAGES[0]#*==}"
    return
  fi
  local t0=$SECONDS
  [[ -x "$VENV/bin/python" ]] || /usr/bin/python3 -m venv --system-site-packages "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-cache-dir --no-deps "${PY_PACKAGES[@]}"
  "$VENV/bin/python" -c 'import torch, transformers; from transformers import GPT2LMHeadModel, LlamaForCausalLM'
  "$VENV/bin/python" -c 'from tensorboard.backend.event_processing import event_accumulator'
  echo "setup: $VENV with transformers ${PY_PACKAGES[0]#*==} on torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)') ($((SECONDS - t0)) s)"
}

# Build: compiler, CMake, Ninja. Libraries: oneDNN (matmuls), toml++ (config),
# OpenMP, GoogleTest, SentencePiece (tokenizer), PCRE2 and utf8proc (Hugging
# Face byte-level BPE tokenizers), OpenMPI (communication),
# nlohmann-json (manifests, metrics), OpenSSL (SHA-256).
# Reference and benchmark: Debian's PyTorch (python3-torch) on OpenBLAS.
# Corpus extraction (tools/extract_corpus.py): groff (man pages), perl (pod2text).
PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libdnnl-dev ocl-icd-opencl-dev   # dnnl-config.cmake requires OpenCL headers
  libtomlplusplus-dev libomp-dev libgtest-dev
  libsentencepiece-dev libopenmpi-dev openmpi-bin
  libpcre2-dev libutf8proc-dev   # Hugging Face tokenizers: split regexes, NFC
  nlohmann-json3-dev   # JSON: checkpoint manifests, metrics, traces
  libssl-dev           # SHA-256 of checkpoint files (OpenSSL's EVP)
  python3 python3-torch python3-numpy
  python3-venv   # .venv for transformers (below)
  libopenblas0   # the BLAS that the PyTorch baseline (tools/bench_pytorch.py) runs on
  groff-base perl
  iproute2       # ip / tc: the emulated cluster (scripts/cluster/emulate.sh)
  librsvg2-bin   # rsvg-convert: loom report's PNG charts (report.md embeds them)
)

if [[ "${1:-}" == venv ]]; then
  setup_venv
  exit 0
elif [[ -n "${1:-}" ]]; then
  echo "setup: unknown argument '$1' (none, or venv)" >&2
  exit 2
fi

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

if [[ "${LOOM_SKIP_VENV:-0}" != 1 ]]; then
  setup_venv
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
