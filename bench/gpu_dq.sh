#!/usr/bin/env bash
# bench/gpu_dq.sh — one device call for the batched-decode K-quant GEMM (src/backend/cuda/matmul_dq.cu):
#  1. the kernel lab's K-quant GEMM cases (built on the device in the background while step 2 runs): odd shapes
#     against the CPU oracle, then per-call timings at the mistral-7b shapes against the f16 cache + cuBLAS;
#     an Nsight Compute profile of the ffn_up call at 64 rows where ncu reads the counters (NCU=1);
#  2. `quarrel bench --parallel NP -p 128 -n 128` on a synth mistral-7b Q4_K_M with the kernel for every batch size
#     (QUARREL_CUDA_DQ_MAX_ROWS=256) and without it (QUARREL_CUDA_DQ_GEMM=0), the checksum of every decode row's
#     argmax printed for both;
#  3. CHECK=1: bench/gpu_check.py on tiny Q4_K_M / Q6_K models with the prompts' prefill through the kernel;
#  4. SERVE=1: bench/gpu_serve.sh (quarrel only, one round) with the kernel up to SERVE_ROWS rows (default 256).
#   carry build-gpu/bundlexz (bundle.tar.xz of scripts/gpu_bundle.sh's bundle) and, to skip the lab's build there,
#   build-gpu/labxz (quarrel_cuda_lab.xz built here); OUT=... NPS="16 64 256" LAB=1 CHECK=1 NCU=1 SERVE=0
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_dq}
NPS=${NPS:-"16 64 256"}
mkdir -p "$OUT" build-gpu
. bench/gpu_unpack.sh
B=$PWD/build-gpu/bundle
log() { echo "[gpu_dq $(date +%T)] $*" | tee -a "$OUT/steps.txt"; }
PRELAB=""
if ls build-gpu/labxz/*.xz > /dev/null 2>&1; then # a lab built here (cmake --build BUILD --target quarrel_cuda_lab)
    xz -dc "$(ls build-gpu/labxz/lab.xz build-gpu/labxz/quarrel_cuda_lab.xz 2>/dev/null | head -1)" > /tmp/quarrel_cuda_lab && chmod +x /tmp/quarrel_cuda_lab && PRELAB=/tmp/quarrel_cuda_lab
fi
if [ "${LAB:-1}" = 1 ] && [ -z "$PRELAB" ]; then
    (OUT=$OUT/lab SECTIONS=none nice -n 19 timeout 500 bench/cuda_lab.sh > "$OUT/lab_build.log" 2>&1) &
    LABPID=$!
fi
M=/tmp/qr_models
mkdir -p $M
f=$M/mistral-7b-Q4_K_M.gguf
if [ ! -f "$f" ]; then
    t0=$(date +%s)
    "$B/quarrel" synth --arch llama --preset mistral-7b --type Q4_K_M -t "$(nproc)" -o "$f" > "$OUT/synth.log" 2>&1
    log "synth: $(($(date +%s) - t0)) s $(du -h "$f" | cut -f1)"
fi
for np in $NPS; do
    for dq in 1 0; do
        line=$(QUARREL_CUDA_DQ_GEMM=$dq QUARREL_CUDA_DQ_MAX_ROWS=256 timeout 150 "$B/quarrel" bench -m "$f" --backend cuda \
            --parallel "$np" -p 128 -n 128 -r 2 --json --checksum 2>> "$OUT/bench_err.log" | grep '^{' | tail -1)
        log "np $np dq $dq: $(echo "$line" | grep -o '"tg_median_tps": [0-9.]*\|"tg_step_median_ms": [0-9.]*\|"checksum": "[0-9a-f]*"' | tr '\n' ' ')"
        echo "$line" >> "$OUT/bench.jsonl"
    done
done
if [ "${CHECK:-1}" = 1 ]; then
    QUARREL_CUDA_DQ_MAX_ROWS=512 OUT=$OUT/check timeout 240 python3 bench/gpu_check.py --models llama:tiny,gemma3:tiny \
        --types Q4_K_M,Q6_K --no-gen --no-leak > "$OUT/check.log" 2>&1
    log "check rc $?"
    grep -E "^\|" "$OUT/check.log" | tee -a "$OUT/steps.txt"
fi
[ "${LAB:-1}" = 1 ] && [ -z "$PRELAB" ] && { wait $LABPID; log "lab build: $(grep -E 'built|failed' "$OUT/lab_build.log" | head -2 | tr '\n' ' ')"; }
LABB=${PRELAB:-$(ls build-cuda-lab/tests/cuda/quarrel_cuda_lab build-cuda-direct/quarrel_cuda_lab 2>/dev/null | head -1)}
if [ "${LAB:-1}" = 1 ] && [ -n "$LABB" ]; then
    log "lab: $LABB"
    QUARREL_LAB_DQ_ONLY=1 QUARREL_CUDA_DQ_MAX_ROWS=256 timeout 200 "$LABB" --only matmul ${LAB_ARGS:-} > "$OUT/lab_dq.log" 2>&1
    log "lab rc $? : $(grep -c FAIL "$OUT/lab_dq.log") FAIL lines"
    grep -E "FAIL|TFLOP|us" "$OUT/lab_dq.log" | head -80 | tee -a "$OUT/steps.txt"
    cuobjdump -res-usage "$LABB" 2>/dev/null | grep -A1 "dq_gemm" | grep -o "REG:[0-9]*\|STACK:[0-9]*\|SHARED:[0-9]*\|LOCAL:[0-9]*" | tr '\n' ' ' | tee -a "$OUT/steps.txt"
    if [ "${NCU:-1}" = 1 ]; then
        NCUB=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
        if [ -n "$NCUB" ]; then
            QUARREL_LAB_DQ_ONLY=2 QUARREL_CUDA_DQ_MAX_ROWS=256 timeout 150 "$NCUB" --clock-control none -k regex:dq_gemm \
                --launch-skip 1 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section Occupancy \
                --section SchedulerStats --section MemoryWorkloadAnalysis "$LABB" --only matmul > "$OUT/ncu.txt" 2>&1
            grep -vE "^\s*$|----" "$OUT/ncu.txt" | grep -vE "^==PROF|^matmul" | head -120 > "$OUT/ncu_short.txt"
            log "ncu: $(wc -l < "$OUT/ncu_short.txt") lines"
        fi
    fi
fi
if [ "${SERVE:-0}" = 1 ]; then # SERVE_ROWS=auto: 256 when the kernel won at 64 rows above, else 16
    rows=${SERVE_ROWS:-auto}
    if [ "$rows" = auto ]; then
        rows=$(python3 -c "
import json
r = {}
for i, l in enumerate(open('$OUT/bench.jsonl')):
    try: r[i] = json.loads(l)['tg_median_tps']
    except Exception: r[i] = 0
print(256 if r.get(2, 0) > r.get(3, 1) else 16)" 2>/dev/null || echo 16)
    fi
    log "serve with QUARREL_CUDA_DQ_MAX_ROWS=$rows"
    OUT=$OUT/serve NO_LLAMA=1 NO_BENCH=1 REPS=1 ENVS="QUARREL_CUDA_DQ_MAX_ROWS=$rows" bash bench/gpu_serve.sh 2>&1 | tail -12
fi
tar czf "$OUT/logs.tgz" -C "$OUT" --exclude=logs.tgz --exclude=lab . 2>/dev/null
