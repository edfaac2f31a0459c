#!/usr/bin/env bash
# bench/gpu_dq_trace.sh — kernel timelines of batched decode steps (CUPTI, bench/cupti_trace.c) on an 8-layer synth
# mistral-7b Q4_K_M, with the batched-decode K-quant GEMM (QUARREL_CUDA_DQ_MAX_ROWS=256) and without it
# (QUARREL_CUDA_DQ_GEMM=0), at each NP; then, where it builds, the kernel lab's K-quant GEMM cases (timings per
# shape against the f16 cache + cuBLAS; odd shapes against the CPU oracle) and an Nsight Compute profile of the
# ffn_up call at 64 rows.
#   carry build-gpu/bundlexz and build-gpu/trace (bash bench/cupti_trace.sh); OUT=... NPS="16 64" LAB=1 NCU=1
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_dq_trace}
mkdir -p "$OUT" build-gpu
[ -d build-gpu/bundle ] || tar -C build-gpu -xJf build-gpu/bundlexz/bundle.tar.xz
B=$PWD/build-gpu/bundle
log() { echo "[dq_trace $(date +%T)] $*" | tee -a "$OUT/steps.txt"; }
if [ "${LAB:-1}" = 1 ]; then
    (OUT=$OUT/lab SECTIONS=none nice -n 19 timeout 540 bench/cuda_lab.sh > "$OUT/lab_build.log" 2>&1) &
    LABPID=$!
fi
f=/tmp/qr_models/mistral-7b-L8-Q4_K_M.gguf
mkdir -p /tmp/qr_models
[ -f "$f" ] || { "$B/quarrel" synth --arch llama --preset mistral-7b --layers 8 --type Q4_K_M -t 8 -o "$f" > "$OUT/synth.log" 2>&1; log "synth done"; }
T=$PWD/build-gpu/trace/libqrtrace.so
for np in ${NPS:-16 64}; do
    for dq in 1 0; do
        QUARREL_CUDA_DQ_GEMM=$dq QUARREL_CUDA_DQ_MAX_ROWS=256 CUDA_INJECTION64_PATH=$T QR_TRACE_OUT=/tmp/tr_${np}_${dq}.csv \
            timeout 120 "$B/quarrel" bench -m "$f" --backend cuda --parallel "$np" -p 128 -n 64 -r 1 > "$OUT/bench_${np}_$dq.log" 2>&1
        python3 bench/cupti_trace.py /tmp/tr_${np}_${dq}.csv > "$OUT/trace_${np}_$dq.txt" 2>&1
        log "np $np dq $dq"
        head -30 "$OUT/trace_${np}_$dq.txt" | tee -a "$OUT/steps.txt"
    done
done
if [ "${LAB:-1}" = 1 ]; then
    wait $LABPID
    log "lab build: $(grep -E 'built|failed' "$OUT/lab_build.log" | head -2 | tr '\n' ' ')"
    LABB=$(ls build-cuda-lab/tests/cuda/quarrel_cuda_lab build-cuda-direct/quarrel_cuda_lab 2>/dev/null | head -1)
    if [ -n "$LABB" ]; then
        QUARREL_LAB_DQ_ONLY=1 QUARREL_CUDA_DQ_MAX_ROWS=256 timeout 120 "$LABB" --only matmul > "$OUT/lab_dq.log" 2>&1
        log "lab rc $? : $(grep -c FAIL "$OUT/lab_dq.log") FAIL lines"
        grep -E "FAIL|dq|Q4_K|Q6_K" "$OUT/lab_dq.log" | head -70 | tee -a "$OUT/steps.txt"
        NCUB=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
        if [ "${NCU:-1}" = 1 ] && [ -n "$NCUB" ]; then
            QUARREL_LAB_DQ_ONLY=2 QUARREL_CUDA_DQ_MAX_ROWS=256 timeout 100 "$NCUB" --clock-control none -k regex:dq_gemm \
                --launch-skip 1 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section Occupancy \
                --section SchedulerStats --section MemoryWorkloadAnalysis "$LABB" --only matmul > "$OUT/ncu.txt" 2>&1
            grep -vE "^\s*$|----" "$OUT/ncu.txt" | grep -vE "^==PROF|^matmul" | head -150 > "$OUT/ncu_short.txt"
            log "ncu: $(wc -l < "$OUT/ncu_short.txt") lines"
        fi
    fi
fi
