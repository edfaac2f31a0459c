#!/usr/bin/env bash
# bench/cuda_lab.sh — builds quarrel_cuda_lab for Hopper (sm_90) and runs it on the GPU machine in one
# go: every CUDA op against the CPU scalar oracle, timings as GB/s and % of the measured device-to-
# device copy bandwidth (the roofline reference the lab measures first).
#
#   bench/cuda_lab.sh [lab arguments: --quick, --only SECTION, --reps N, --seed S]
#
# Environment:
#   OUT      where the logs go (default /tmp/cuda_lab): lab.log, build.log, sass.txt, gpu.txt
#   LAB_BIN  a lab binary built elsewhere (same CUDA version, x86-64): used when it loads, else built
#   ARCH     CUDA architecture (default 90a)
#   JOBS     build parallelism (default: nproc)
#   SECTIONS e.g. "matmul ops attention": one lab process (and log lab_SECTION.log) per section
#
# The build tries the project's CMake first (-DQUARREL_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$ARCH); when
# the machine lacks the project's other build dependencies (gRPC, PCRE2, ...) it compiles just the
# lab's sources directly with nvcc and cc (util, quant, backend, backend/cpu, backend/cuda, tests/cuda).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cuda_lab}
ARCH=${ARCH:-90a}
JOBS=${JOBS:-$(nproc)}
mkdir -p "$OUT"
BUILD_LOG=$OUT/build.log
: > "$BUILD_LOG"

{
    echo "== $(date -u +%FT%TZ) $(uname -m)"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit \
        --format=csv 2>&1
    nvcc --version 2>&1 | tail -2
} > "$OUT/gpu.txt"
cat "$OUT/gpu.txt"

lab=""
if [ -n "${LAB_BIN:-}" ] && [ -x "$LAB_BIN" ] && ! ldd "$LAB_BIN" 2>&1 | grep -q "not found"; then
    lab=$LAB_BIN
    echo "using the prebuilt $lab"
fi

build_cmake() {
    local b=build-cuda-lab
    cmake -S . -B $b -DQUARREL_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DCMAKE_BUILD_TYPE=Release \
        >> "$BUILD_LOG" 2>&1 || return 1
    cmake --build $b --target quarrel_cuda_lab -j "$JOBS" >> "$BUILD_LOG" 2>&1 || return 1
    lab=$b/tests/cuda/quarrel_cuda_lab
}

build_direct() {
    local b=build-cuda-direct cuda=${CUDA_HOME:-/usr/local/cuda}
    rm -rf $b && mkdir -p $b
    local cflags="-O2 -std=c17 -D_GNU_SOURCE -DQUARREL_HAVE_CUDA=1 -Iinclude -Isrc -I$cuda/include -Wall -Wextra -Wno-unused-parameter"
    local nvflags="-O3 --use_fast_math -arch=sm_$ARCH -D_GNU_SOURCE -DQUARREL_HAVE_CUDA=1 -Iinclude -Isrc"
    local jobs=() f o
    for f in src/util/*.c src/quant/*.c src/backend/*.c src/backend/cpu/*.c tests/cuda/*.c; do
        o=$b/$(echo "$f" | tr / _).o
        case $f in
        *_avx2.c) jobs+=("cc $cflags -mavx2 -mfma -mf16c -c $f -o $o") ;;
        *_avx512.c) jobs+=("cc $cflags -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c -c $f -o $o") ;;
        *) jobs+=("cc $cflags -c $f -o $o") ;;
        esac
    done
    for f in src/backend/cuda/*.cu tests/cuda/*.cu; do
        o=$b/$(echo "$f" | tr / _).o
        case $f in
        # the exact mode's kernels round as the CPU's C code (CMakeLists.txt sets the same per source)
        */exact.cu) jobs+=("nvcc $nvflags -ftz=false -prec-div=true -prec-sqrt=true -fmad=false -c $f -o $o") ;;
        *) jobs+=("nvcc $nvflags -c $f -o $o") ;;
        esac
    done
    printf '%s\n' "${jobs[@]}" | xargs -P "$JOBS" -I{} sh -c '{}' >> "$BUILD_LOG" 2>&1 || return 1
    nvcc -arch=sm_$ARCH -o $b/quarrel_cuda_lab $b/*.o -lcublas -lpthread -lm >> "$BUILD_LOG" 2>&1 || return 1
    lab=$b/quarrel_cuda_lab
}

if [ -z "$lab" ]; then
    t0=$(date +%s)
    if build_cmake; then
        echo "built with CMake in $(($(date +%s) - t0)) s"
    else
        echo "CMake build failed (tail of $BUILD_LOG below); building the lab directly with nvcc"
        tail -5 "$BUILD_LOG"
        t0=$(date +%s)
        if build_direct; then
            echo "built directly in $(($(date +%s) - t0)) s"
        else
            echo "direct build failed:"
            tail -40 "$BUILD_LOG"
            exit 2
        fi
    fi
fi

# Does the mat-vec issue 16-byte loads? (the Q4_0 one-row kernel's load and dp4a instructions)
if command -v cuobjdump > /dev/null; then
    cuobjdump -sass "$lab" 2>/dev/null | awk '/Function : .*matvec_kernelI5TQ4_0Li1E/{p=1} p&&/Function : /&&!/TQ4_0Li1E/{p=0} p' \
        | grep -E "LDG|IDP|SHFL|STG" > "$OUT/sass.txt"
    echo "sass (Q4_0 mat-vec, 1 row): $(grep -c 'LDG.E.128' "$OUT/sass.txt") LDG.128, $(grep -c LDG "$OUT/sass.txt") LDG, $(grep -c IDP "$OUT/sass.txt") IDP"
fi

# SECTIONS="matmul ops attention" runs each section in its own process (and log), so that a fault in
# one section cannot hide the results of the others; default: one run of everything.
if [ -n "${SECTIONS:-}" ]; then
    rc=0
    for s in $SECTIONS; do
        "$lab" --only "$s" "$@" 2>&1 | tee "$OUT/lab_$s.log"
        r=${PIPESTATUS[0]}
        [ "$r" -ne 0 ] && rc=$r
    done
    exit $rc
fi
"$lab" "$@" 2>&1 | tee "$OUT/lab.log"
exit "${PIPESTATUS[0]}"
