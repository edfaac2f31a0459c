#!/usr/bin/env bash
# scripts/llama_gpu_build.sh — builds llama.cpp's llama-bench AND llama-server with CUDA for sm_90 *here* (no GPU
# needed) from the llama-cpp-python 0.3.36 sdist's full llama.cpp tree, as shared libraries so that both tools share
# one libggml-cuda, and packs bin/ (the two tools, stripped, rpath $ORIGIN) into build-gpu/llama-gpu/llama.tar.xz:
# small enough to go to the device in one call with build-gpu/bundlexz (bench/gpu_side29.sh unpacks it).
# ~45-60 min on 2 cores: start it in the background early in a session.
#   nohup bash scripts/llama_gpu_build.sh > /tmp/llama_gpu_build.log 2>&1 &
# Environment: SDIST (default /tmp/sdist/llama_cpp_python-0.3.36.tar.gz, downloaded with pip when missing), JOBS (2),
# LLAMA_WORK (/tmp/llama_gpu_build).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.3.36
SDIST=${SDIST:-/tmp/sdist/llama_cpp_python-$VERSION.tar.gz}
W=${LLAMA_WORK:-/tmp/llama_gpu_build}
log() { echo "[llama_gpu_build $(date +%T)] $*"; }
if [ ! -f "$SDIST" ]; then
    mkdir -p "$(dirname "$SDIST")"
    pip download --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$(dirname "$SDIST")"
fi
SRC=$W/llama_cpp_python-$VERSION/vendor/llama.cpp
if [ "${REUSE:-0}" != 1 ] || [ ! -d "$SRC" ]; then # REUSE=1: go on with a build a failed run left
    rm -rf "$W" && mkdir -p "$W"
    tar -xzf "$SDIST" -C "$W" "llama_cpp_python-$VERSION/vendor/llama.cpp"
fi
mkdir -p build-gpu/llama-gpu
gen=()
command -v ninja > /dev/null && gen=(-G Ninja)
log "configure"
cmake -S "$SRC" -B "$W/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=ON -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON -DCMAKE_INSTALL_RPATH='$ORIGIN' \
    -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined > "$W/configure.log"
# (--allow-shlib-undefined: libggml-cuda needs the driver's libcuda.so.1, which a machine without a GPU lacks)
log "build (llama-bench llama-server, -j ${JOBS:-2})"
cmake --build "$W/build" --target llama-bench llama-server -j "${JOBS:-2}"
P=$W/pkg/llama
mkdir -p "$P"
cp "$W/build/bin/llama-bench" "$W/build/bin/llama-server" "$P/"
cp -P "$W"/build/bin/*.so* "$P/" 2> /dev/null || true
find "$W/build" -name '*.so*' \( -type f -o -type l \) -exec cp -P {} "$P/" \; 2> /dev/null || true
strip --strip-unneeded "$P"/llama-bench "$P"/llama-server "$P"/*.so* 2> /dev/null || true
ls -la "$P"
tar -C "$W/pkg" -cf - llama | xz -T0 -9e > build-gpu/llama-gpu/llama.tar.xz.tmp
mv build-gpu/llama-gpu/llama.tar.xz.tmp build-gpu/llama-gpu/llama.tar.xz
log "$(ls -la build-gpu/llama-gpu/llama.tar.xz)"
