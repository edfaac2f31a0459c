#!/usr/bin/env bash
# bench/gpu_dq_trace.sh — kernel timelines of batched decode steps (CUPTI, bench/cupti_trace.c) on an 8-layer synth
# mistral-7b Q4_K_M, with the batched-decode K-quant GEMM (QUARREL_CUDA_DQ_MAX_ROWS=256) and without it
# (QUARREL_CUDA_DQ_GEMM=0), at each NP. The kernel lab's timings and the Nsight Compute profile: bench/gpu_dq.sh.
#   carry build-gpu/bundlexz and build-gpu/trace (bash bench/cupti_trace.sh); OUT=... NPS="16 64"
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_dq_trace}
mkdir -p "$OUT" build-gpu
. bench/gpu_unpack.sh
B=$PWD/build-gpu/bundle
log() { echo "[dq_trace $(date +%T)] $*" | tee -a "$OUT/steps.txt"; }
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
