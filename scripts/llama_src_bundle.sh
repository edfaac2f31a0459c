#!/usr/bin/env bash
# scripts/llama_src_bundle.sh — a trimmed llama.cpp source tarball for the GPU machine (no internet
# there): the llama.cpp tree of the llama-cpp-python 0.3.36 sdist, cut down to what
#   cmake -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF ... && cmake --build . --target llama-bench
# needs (CMakeLists, cmake/, ggml/ with the CPU and CUDA backends only, src/, include/, common/,
# vendor/, tools/llama-bench with a tools/CMakeLists.txt that adds only it), written to
# build-gpu/llama-src.tar.xz (well under 20 MiB).
#
#   scripts/llama_src_bundle.sh [--verify]
#
# --verify: configures and builds llama-bench from the trimmed tree on this machine (CPU only,
# GGML_CUDA=OFF, -j2) to prove nothing the build needs was cut; then runs `llama-bench --help`.
#
# Environment: SDIST (default: /tmp/sdist/llama_cpp_python-0.3.36.tar.gz, downloaded with pip when
# missing), OUT_DIR (default build-gpu), JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT_DIR=${OUT_DIR:-build-gpu}
JOBS=${JOBS:-2}
VERSION=0.3.36
SDIST=${SDIST:-/tmp/sdist/llama_cpp_python-$VERSION.tar.gz}
VERIFY=0
[ "${1:-}" = "--verify" ] && VERIFY=1

log() { echo "[llama_src_bundle $(date +%T)] $*"; }

if [ ! -f "$SDIST" ]; then
    log "no sdist at $SDIST: downloading llama-cpp-python==$VERSION with pip"
    mkdir -p "$(dirname "$SDIST")"
    PIP=pip
    [ -x "$ROOT/.venv/bin/pip" ] && PIP=$ROOT/.venv/bin/pip
    $PIP download --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$(dirname "$SDIST")"
    found=$(ls "$(dirname "$SDIST")"/llama_cpp_python-$VERSION.tar.gz 2>/dev/null || true)
    [ -n "$found" ] || { echo "pip download did not produce llama_cpp_python-$VERSION.tar.gz" >&2; exit 1; }
    SDIST=$found
fi

WORK=$(mktemp -d /tmp/llama_src.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
log "unpacking $SDIST"
tar -xzf "$SDIST" -C "$WORK" "llama_cpp_python-$VERSION/vendor/llama.cpp"
SRC=$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp
DST=$WORK/llama.cpp
mkdir -p "$DST"

# top level: the build files and licences
for f in CMakeLists.txt LICENSE; do cp "$SRC/$f" "$DST/"; done
for d in cmake include src common vendor licenses; do
    [ -d "$SRC/$d" ] && cp -a "$SRC/$d" "$DST/"
done
# ggml: everything but the backends we do not build
cp -a "$SRC/ggml" "$DST/"
for b in "$DST"/ggml/src/ggml-*/; do
    case $(basename "$b") in
    ggml-cpu | ggml-cuda) ;;
    *) rm -rf "$b" ;;
    esac
done
# tools: only llama-bench
mkdir -p "$DST/tools"
cp -a "$SRC/tools/llama-bench" "$DST/tools/"
cat > "$DST/tools/CMakeLists.txt" <<'EOF'
# trimmed by quarrel's scripts/llama_src_bundle.sh: llama-bench only
find_package(Threads REQUIRED)
llama_add_compile_flags()
add_subdirectory(llama-bench)
EOF
# documentation inside ggml/ and tests are not needed
rm -rf "$DST/ggml/docs" 2>/dev/null || true
echo "llama.cpp from llama-cpp-python $VERSION ($(basename "$SDIST")), trimmed for llama-bench (CPU + CUDA)" \
    > "$DST/QUARREL_BUNDLE.txt"

mkdir -p "$OUT_DIR"
TAR=$OUT_DIR/llama-src.tar.xz
log "writing $TAR"
tar -C "$WORK" -cf - llama.cpp | xz -T2 -6 > "$TAR.tmp"
mv "$TAR.tmp" "$TAR"
size=$(stat -c %s "$TAR")
log "$TAR: $((size / 1024)) KiB ($(du -sh "$DST" | cut -f1) unpacked)"
if [ "$size" -gt $((20 * 1024 * 1024)) ]; then
    echo "ERROR: $TAR is over 20 MiB" >&2
    exit 1
fi

if [ $VERIFY = 1 ]; then
    V=$WORK/verify
    mkdir -p "$V"
    tar -xJf "$TAR" -C "$V"
    log "verify: configure (CPU only)"
    cmake -S "$V/llama.cpp" -B "$V/build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
        -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF > "$WORK/verify_cfg.log" 2>&1 ||
        { tail -30 "$WORK/verify_cfg.log"; echo "ERROR: configure failed" >&2; exit 1; }
    log "verify: build llama-bench (-j$JOBS)"
    t0=$(date +%s)
    cmake --build "$V/build" --target llama-bench -j "$JOBS" > "$WORK/verify_build.log" 2>&1 ||
        { tail -30 "$WORK/verify_build.log"; echo "ERROR: build failed" >&2; exit 1; }
    log "verify: built in $(($(date +%s) - t0)) s"
    "$V/build/bin/llama-bench" --help > /dev/null 2>&1 || { echo "ERROR: llama-bench --help failed" >&2; exit 1; }
    log "verify: OK (llama-bench runs)"
fi
