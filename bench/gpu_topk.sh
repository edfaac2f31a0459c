#!/usr/bin/env bash
# bench/gpu_topk.sh — the GPU's top-k rows (topk.cu, issue 29) checked on the GPU machine in one device call:
#  1. the lab's ops section: the CUDA backend's topk_rows against the CPU backend's, bit for bit (ties, signed zeros,
#     -inf halves, NaN / +inf rows, a row of one value; k 1 / 40 / 64 at 5 / 64 / 256 rows of 32,000), timed;
#  2. bench/serve_topk_check.py: the same requests through `quarrel serve` with top-k rows and with full rows
#     (synth mistral-7b Q4_K_M).
#   carry build-gpu/bundlexz (scripts/gpu_bundle.sh) and build-gpu/labxz (lab.xz: quarrel_cuda_lab of the same
#   build tree, xz); then OUT=$OUT bash bench/gpu_topk.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_topk}
mkdir -p "$OUT" build-gpu
log() { echo "[gpu_topk $(date +%T)] $*" | tee -a "$OUT/steps.txt" >&2; }
. bench/gpu_unpack.sh
Q=$PWD/build-gpu/bundle/quarrel
if [ "${LAB:-1}" != 0 ] && [ -f build-gpu/labxz/lab.xz ]; then
    xz -dc build-gpu/labxz/lab.xz > /tmp/qr_lab && chmod +x /tmp/qr_lab
    LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} timeout 300 /tmp/qr_lab --only ops > "$OUT/lab_ops.log" 2>&1
    log "lab ops rc $?: $(grep -c FAIL "$OUT/lab_ops.log") FAIL lines"
    grep -E "topk_rows|FAIL|passed|failed" "$OUT/lab_ops.log" | tail -14 | tee -a "$OUT/steps.txt"
fi
M=/tmp/qr_models/mistral-7b-Q4_K_M.gguf
mkdir -p /tmp/qr_models
[ -f $M ] || { "$Q" synth --arch llama --preset mistral-7b --type Q4_K_M -t "$(nproc)" -o $M.tmp > "$OUT/synth.log" 2>&1 && mv $M.tmp $M; }
if [ "${TOPK:-1}" != 0 ]; then
    timeout 300 python3 bench/serve_topk_check.py --quarrel "$Q" --model $M --backend cuda > "$OUT/topk_check.log" 2>&1
    log "serve_topk_check rc $?: $(tail -1 "$OUT/topk_check.log")"
fi
