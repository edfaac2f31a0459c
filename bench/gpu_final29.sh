#!/usr/bin/env bash
# bench/gpu_final29.sh — issue 29 / 34 figures of one device call (quarrel only; llama.cpp's figures of the same
# tests come from earlier calls, see docs/performance.md): pp512 at depths 0 / 4096 / 16384 / 32768, a speculative
# verification pass of 8 drafted tokens against a decode step (bench --verify 8), and the mixed load (64 streams,
# then the same with a 16,000-token prompt arriving). carry build-gpu/bundlexz. OUT=...
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_final29}
mkdir -p "$OUT/logs" build-gpu
log() { echo "[final29 $(date +%T)] $*" | tee -a "$OUT/steps.txt" >&2; }
. bench/gpu_unpack.sh
Q=$PWD/build-gpu/bundle/quarrel
M=/tmp/qr_models/mistral-7b-Q4_K_M.gguf
mkdir -p /tmp/qr_models
[ -f $M ] || { "$Q" synth --arch llama --preset mistral-7b --type Q4_K_M -t "$(nproc)" -o $M.tmp > "$OUT/synth.log" 2>&1 && mv $M.tmp $M; }
log "model ready"
for d in 256 4096; do
    timeout 60 "$Q" bench -m $M --backend cuda --verify 8 -d $d 2>> "$OUT/logs/verify.err" | tail -1 | tee -a "$OUT/steps.txt"
done
for d in 0 4096 16384 32768; do
    line=$(timeout 120 "$Q" bench -m $M --backend cuda -p 512 -n 0 -d $d -r 3 --json 2>> "$OUT/logs/pp.err" | grep '^{' | tail -1)
    log "pp512 @ d$d: $(echo "$line" | grep -o '"pp_median_tps": [0-9.]*\|"pp_tps": [0-9.]*' | tr '\n' ' ')"
done
timeout 200 python3 bench/serve_bench.py --quarrel "$Q" --model $M --concurrency 64 --prompt-tokens 128 --max-tokens 256 \
    --reps 1 --backend cuda --mixed --mixed-prompt-tokens 16000 --log-dir "$OUT/logs" > "$OUT/mixed.md" 2> "$OUT/mixed.err"
log "mixed rc $?"
cat "$OUT/mixed.md" | tee -a "$OUT/steps.txt"
tail -3 "$OUT/mixed.err"
