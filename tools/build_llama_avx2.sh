#!/usr/bin/env bash
# tools/build_llama_avx2.sh — llama.cpp's shared libraries (llama-cpp-python 0.3.36's llama.cpp) built for
# x86 AVX2 only (the default), the build our CPU backend reproduces bit for bit, for the reference tools on a
# machine whose native build would take AVX-512 kernels (other summation orders: logits at llama.cpp's own noise floor from
# the AVX2 build's, docs/performance.md 2026-11-29). llama-cpp-python loads them through LLAMA_CPP_LIB_PATH:
#
#   bash tools/build_llama_avx2.sh
#   LLAMA_CPP_LIB_PATH=/tmp/llama-avx2/bin .venv/bin/python tools/split_sweep.py
#
# ISA=native (OUT default /tmp/llama-native) builds with GGML_NATIVE=ON instead: what llama-bench and a plain
# llama.cpp build run on this host (AVX-512 on an AVX-512 host), the baseline of bench/cpu.py --llama-lib and
# of the AVX-512 golden files (tools/gen_ref_golden.py --isa avx512):
#
#   ISA=native bash tools/build_llama_avx2.sh
#
# Environment: ISA (avx2 | native, default avx2), SDIST (default /tmp/sdist/llama_cpp_python-0.3.36.tar.gz, downloaded with pip when missing),
# OUT (default /tmp/llama-avx2), JOBS (default 2). About 3 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VERSION=0.3.36
SDIST=${SDIST:-/tmp/sdist/llama_cpp_python-$VERSION.tar.gz}
ISA=${ISA:-avx2}
case "$ISA" in
avx2) OUT=${OUT:-/tmp/llama-avx2}
      # GGML_NATIVE=OFF with the AVX2 set spelled out: what -march=native gives on an AVX2-only x86 (the
      # machine the golden files of tests/data/ref were made on), whatever this machine has
      ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
                 -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF) ;;
native) OUT=${OUT:-/tmp/llama-native}
      ISA_FLAGS=(-DGGML_NATIVE=ON) ;;
*) echo "ISA must be avx2 or native" >&2; exit 2 ;;
esac
JOBS=${JOBS:-2}

if [ ! -f "$SDIST" ]; then
    mkdir -p "$(dirname "$SDIST")"
    PIP=pip
    [ -x "$ROOT/.venv/bin/pip" ] && PIP=$ROOT/.venv/bin/pip
    $PIP download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$(dirname "$SDIST")"
fi
SRC=$OUT/src
if [ ! -f "$SRC/llama_cpp_python-$VERSION/vendor/llama.cpp/CMakeLists.txt" ]; then
    mkdir -p "$SRC"
    tar -xzf "$SDIST" -C "$SRC" "llama_cpp_python-$VERSION/vendor/llama.cpp"
fi
cmake -S "$SRC/llama_cpp_python-$VERSION/vendor/llama.cpp" -B "$OUT/build" -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=ON "${ISA_FLAGS[@]}" -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_COMMON=OFF >/dev/null
cmake --build "$OUT/build" --target llama -j "$JOBS" >/dev/null
rm -rf "$OUT/bin"
cp -a "$OUT/build/bin" "$OUT/bin"
LLAMA_CPP_LIB_PATH=$OUT/bin "$ROOT/.venv/bin/python" -c \
    'import llama_cpp; print(llama_cpp.llama_print_system_info().decode())'
echo "LLAMA_CPP_LIB_PATH=$OUT/bin"
