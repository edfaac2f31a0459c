#!/usr/bin/env bash
# bench/gpu_wg_e2e.sh — one device call: the wgmma batched-decode GEMMs end to end. `quarrel bench --parallel NP` on a
# synth mistral-7b Q4_K_M under each setting of CASES (space-separated; each a comma-separated list of VAR=value, "-"
# for the defaults); then (CHECK=1) bench/gpu_check.py on tiny Q4_K_M / Q6_K models with every batch up to 512 rows
# through the wgmma kernels (prefill included) against the CPU, for QUARREL_CUDA_DQ_WG=rs and =ss.
#   carry build-gpu/bundlexz; OUT=... NPS="12 16 24 32" CASES="QUARREL_CUDA_DQ_WG=1 QUARREL_CUDA_DQ_WG=0" MAXR=32
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_wg_e2e}
mkdir -p "$OUT"
. bench/gpu_unpack.sh
log() { echo "[wg_e2e $(date +%T)] $*" | tee -a "$OUT/steps.txt"; }
# quarrel bench --parallel NP -p 128 -n 128 -r 3 under each case, QUARREL_CUDA_DQ_MAX_ROWS=MAXR for all (gpu_env_ab.sh)
QUARREL_CUDA_DQ_MAX_ROWS=${MAXR:-32} OUT=$OUT NPS="${NPS:-12 16 24 32}" PS=128 N=128 R=3 \
    CASES="${CASES:-QUARREL_CUDA_DQ_WG=1 QUARREL_CUDA_DQ_WG=0}" bash bench/gpu_env_ab.sh
if [ "${CHECK:-1}" = 1 ]; then
    for wg in ${CHECK_WGS:-rs ss}; do
        QUARREL_CUDA_DQ_WG=$wg QUARREL_CUDA_DQ_MAX_ROWS=512 OUT=$OUT/check_$wg timeout 240 python3 bench/gpu_check.py \
            --models llama:tiny,gemma3:tiny --types Q4_K_M,Q6_K --no-gen --no-leak > "$OUT/check_$wg.log" 2>&1
        log "check ($wg) rc $?"
        grep -E "^\|" "$OUT/check_$wg.log" | tee -a "$OUT/steps.txt"
    done
fi
