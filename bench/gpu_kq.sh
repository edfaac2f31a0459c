#!/usr/bin/env bash
# bench/gpu_kq.sh — the int8 K-quant batched-decode GEMM (matmul_kq.cu, issue 29) on the GPU machine:
#   1. the kernel lab's K-quant cases (QUARREL_LAB_DQ_ONLY=1) with QUARREL_CUDA_KQ_GEMM=1: every shape against the CPU
#      oracle (rel. error), timed against the f16 cache + cuBLAS (the "no-dq" lines);
#   2. `quarrel bench --parallel N -p 128 -n 128 --checksum` on a synth mistral-7b Q4_K_M with the kernel on and off.
# carry build-gpu/labkq (lab.xz: the quarrel_cuda_lab binary) and build-gpu/bundlexz. OUT=... NPS="64 256".
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_kq}
mkdir -p "$OUT" build-gpu
log() { echo "[gpu_kq $(date +%T)] $*" | tee -a "$OUT/steps.txt" >&2; }
[ -d build-gpu/bundle ] || tar -C build-gpu -xJf build-gpu/bundlexz/bundle.tar.xz
Q=$PWD/build-gpu/bundle/quarrel
LAB=/tmp/quarrel_cuda_lab
[ -x $LAB ] || { xz -dc build-gpu/labkq/lab.xz > $LAB && chmod +x $LAB; }
if [ "${NO_LAB:-0}" != 1 ]; then
    QUARREL_LAB_DQ_ONLY=1 QUARREL_CUDA_KQ_GEMM=1 timeout 200 $LAB --only matmul > "$OUT/lab.txt" 2>&1
    log "lab rc $?"
    grep -E "matmul" "$OUT/lab.txt" | head -80
fi
M=/tmp/qr_models/mistral-7b-Q4_K_M.gguf
mkdir -p /tmp/qr_models
if [ ! -f $M ]; then
    "$Q" synth --arch llama --preset mistral-7b --type Q4_K_M -t "$(nproc)" -o $M.tmp > "$OUT/synth.log" 2>&1 && mv $M.tmp $M
    log "synth done"
fi
for np in ${NPS:-64 256}; do
    for kq in 1 0; do
        line=$(QUARREL_CUDA_KQ_GEMM=$kq timeout 120 "$Q" bench -m $M --backend cuda --parallel "$np" -p 128 -n 128 -r 2 --json \
            --checksum 2> "$OUT/bench_${np}_$kq.err" | grep '^{' | tail -1)
        log "np $np kq $kq: $(echo "$line" | grep -o '"tg_median_tps": [0-9.]*\|"tg_step_median_ms": [0-9.]*\|"pp_median_tps": [0-9.]*\|"checksum": "[0-9a-f]*"' | tr '\n' ' ')"
    done
done
