#!/usr/bin/env bash
# bench/cupti_trace.sh — builds the kernel-timeline injection library (bench/cupti_trace.c) here, into
# build-gpu/trace/ with the CUPTI library it needs (the device's toolkit may lack it). Carry that
# folder to the device; see bench/cupti_trace.c for the use.
set -euo pipefail
cd "$(dirname "$0")/.."
CUDA=${CUDA_HOME:-/usr/local/cuda}
mkdir -p build-gpu/trace
inc=$CUDA/include; lib=$(dirname "$(find "$CUDA"/ -name 'libcupti.so' | head -1)")
gcc -O2 -shared -fPIC -o build-gpu/trace/libqrtrace.so bench/cupti_trace.c -I"$inc" -L"$lib" -lcupti \
    -Wl,-rpath,'$ORIGIN'
cp -L "$lib/libcupti.so.13" build-gpu/trace/ 2>/dev/null || cp -L "$lib"/libcupti.so.* build-gpu/trace/
ls -la build-gpu/trace
