#!/usr/bin/env bash
# scripts/llama_bench_build.sh — builds llama.cpp's llama-bench with CUDA for sm_90 *here* (no GPU needed; the
# same sdist and cmake flags as bench/gpu.sh's device build), strips it and writes
# build-gpu/llama-bin/llama-bench.xz (~41 MB). A device call then saves gpu.sh's ~270 s build:
#   LLAMA_BIN=$PWD/build-gpu/llama-bin/llama-bench.xz bench/gpu.sh ...
# The .xz and build-gpu/bundle together pass the device tool's 64 MiB limit, so carry them in two calls on one
# warm machine: the first (carry build-gpu/bundle) synthesizes / benches quarrel and leaves the bundle there;
# the second, issued at once (carry build-gpu/llama-bin only), runs gpu.sh with BUNDLE still in place.
# Takes ~45 min on 2 cores (run it in the background early in a session). Needs build-gpu/llama-src.tar.xz
# (scripts/llama_src_bundle.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
TAR=${LLAMA_TAR:-build-gpu/llama-src.tar.xz}
[ -f "$TAR" ] || bash scripts/llama_src_bundle.sh
W=${LLAMA_WORK:-/tmp/llama_bench_build}
rm -rf "$W" && mkdir -p "$W" build-gpu/llama-bin
tar -xJf "$TAR" -C "$W"
gen=()
command -v ninja > /dev/null && gen=(-G Ninja)
cmake -S "$W/llama.cpp" -B "$W/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    -DBUILD_SHARED_LIBS=OFF > "$W/configure.log"
cmake --build "$W/build" --target llama-bench -j "${JOBS:-$(nproc)}"
cp "$W/build/bin/llama-bench" "$W/llama-bench" && strip "$W/llama-bench"
xz -T0 -9e -c "$W/llama-bench" > build-gpu/llama-bin/llama-bench.xz
ls -la build-gpu/llama-bin/llama-bench.xz
