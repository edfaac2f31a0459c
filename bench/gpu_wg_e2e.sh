#!/usr/bin/env bash
# bench/gpu_wg_e2e.sh — one device call: the wgmma batched-decode GEMM end to end. `quarrel bench --parallel NP` on a
# synth mistral-7b Q4_K_M with decode batches of 9..MAXR rows through matmul_dq.cu's wgmma version
# (QUARREL_CUDA_DQ_WG=1, the default on sm_90) and its mma.sync version (=0), the argmax checksum of every decode row
# printed for both (the two versions give the same sums, so the same tokens); then bench/gpu_check.py on tiny
# Q4_K_M / Q6_K models with every batch up to 512 rows through the wgmma kernel (prefill included), against the CPU.
#   carry build-gpu/bundlexz; OUT=... NPS="12 16 24 32" MAXR=32
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_wg_e2e}
mkdir -p "$OUT"
[ -d build-gpu/bundle ] || tar -C build-gpu -xJf build-gpu/bundlexz/bundle.tar.xz
B=$PWD/build-gpu/bundle
log() { echo "[wg_e2e $(date +%T)] $*" | tee -a "$OUT/steps.txt"; }
f=/tmp/qr_models/mistral-7b-Q4_K_M.gguf
mkdir -p /tmp/qr_models
[ -f "$f" ] || "$B/quarrel" synth --arch llama --preset mistral-7b --type Q4_K_M -t "$(nproc)" -o "$f" > "$OUT/synth.log" 2>&1
for np in ${NPS:-12 16 24 32}; do
    for wg in 1 0; do
        line=$(QUARREL_CUDA_DQ_WG=$wg QUARREL_CUDA_DQ_MAX_ROWS=${MAXR:-32} timeout 150 "$B/quarrel" bench -m "$f" --backend cuda \
            --parallel "$np" -p 128 -n 128 -r 3 --json --checksum 2>> "$OUT/bench_err.log" | grep '^{' | tail -1)
        log "np $np wg $wg: $(echo "$line" | grep -o '"tg_median_tps": [0-9.]*\|"tg_step_median_ms": [0-9.]*\|"checksum": "[0-9a-f]*"' | tr '\n' ' ')"
    done
done
QUARREL_CUDA_DQ_MAX_ROWS=512 OUT=$OUT/check timeout 240 python3 bench/gpu_check.py --models llama:tiny,gemma3:tiny \
    --types Q4_K_M,Q6_K --no-gen --no-leak > "$OUT/check.log" 2>&1
log "check (wgmma) rc $?"
grep -E "^\|" "$OUT/check.log" | tee -a "$OUT/steps.txt"
QUARREL_CUDA_DQ_WG=0 QUARREL_CUDA_DQ_MAX_ROWS=512 OUT=$OUT/check0 timeout 240 python3 bench/gpu_check.py --models llama:tiny,gemma3:tiny \
    --types Q4_K_M,Q6_K --no-gen --no-leak > "$OUT/check0.log" 2>&1
log "check (mma.sync) rc $?"
grep -E "^\|" "$OUT/check0.log" | tee -a "$OUT/steps.txt"
