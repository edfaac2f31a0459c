#!/usr/bin/env bash
# bench/gpu_dq.sh — one device call for the batched-decode K-quant GEMM (src/backend/cuda/matmul_dq.cu):
# the kernel lab's matmul section (correctness against the CPU oracle at odd shapes; timings against the f16
# cache + cuBLAS at the mistral-7b shapes), then `quarrel bench --parallel NP` on a synth mistral-7b Q4_K_M with
# the kernel on and off (QUARREL_CUDA_DQ_GEMM=0), the checksum of every decode row's argmax printed for both.
#   carry build-gpu/bundlexz (bundle.tar.xz of scripts/gpu_bundle.sh's bundle); OUT=... NPS="16 64 256" LAB=1
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_dq}
NPS=${NPS:-"1 16 64 128 256"}
mkdir -p "$OUT" build-gpu
[ -d build-gpu/bundle ] || tar -C build-gpu -xJf build-gpu/bundlexz/bundle.tar.xz
B=$PWD/build-gpu/bundle
log() { echo "[gpu_dq $(date +%T)] $*" | tee -a "$OUT/steps.txt"; }
if [ "${LAB:-1}" = 1 ]; then
    log "lab (matmul section)"
    OUT=$OUT/lab SECTIONS=matmul timeout 300 bench/cuda_lab.sh ${LAB_ARGS:---quick} > "$OUT/lab_run.log" 2>&1
    tar czf "$OUT/lab.tgz" -C "$OUT" lab; grep -E "FAIL|dq|Q4_K|Q6_K" "$OUT"/lab/lab*.log | grep -E "r(9|16|23|32|40|64|100|128|256)( |$)|FAIL" | head -120 | tee -a "$OUT/steps.txt"
fi
M=/tmp/qr_m
mkdir -p $M
f=$M/mistral-7b-Q4_K_M.gguf
if [ ! -f "$f" ]; then
    t0=$(date +%s)
    "$B/quarrel" synth --arch llama --preset mistral-7b --type Q4_K_M -t "$(nproc)" -o "$f" > "$OUT/synth.log" 2>&1
    log "synth: $(($(date +%s) - t0)) s $(du -h "$f" | cut -f1)"
fi
for np in $NPS; do
    for dq in 1 0; do
        line=$(QUARREL_CUDA_DQ_GEMM=$dq timeout 120 "$B/quarrel" bench -m "$f" --backend cuda --parallel "$np" -p 128 -n 128 \
            -r 2 --json --checksum 2>> "$OUT/bench_err.log" | grep '^{' | tail -1)
        log "np $np dq $dq: $(echo "$line" | grep -o '"tg_median_tps": [0-9.]*\|"tg_step_median_ms": [0-9.]*\|"checksum": "[0-9a-f]*"' | tr '\n' ' ')"
        echo "$line" >> "$OUT/bench.jsonl"
    done
done
tar czf "$OUT/logs.tgz" -C "$OUT" --exclude=logs.tgz --exclude=lab.tgz . 2>/dev/null
