#!/usr/bin/env bash
# bench/gpu_serve_ab.sh — one device call: bench/serve_bench.py against `quarrel serve` (synth mistral-7b Q4_K_M, 128-token
# prompts, 256 output tokens, ignore EOS) under each setting of CASES (space-separated; each a comma-separated list of
# VAR=value, "-" for the defaults), at CONC (default 64,256), REPS rounds each.
#   carry build-gpu/bundlexz; OUT=$OUT CASES="- QUARREL_CUDA_ATTN_DEC_MMA=0" bash bench/gpu_serve_ab.sh
# An item of a case that starts with -- is a `quarrel serve` argument, `=` joining its value:
#   CASES="- --cache-type-k=q8_0,--cache-type-v=q8_0"
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_serve_ab}
mkdir -p "$OUT"
. bench/gpu_unpack.sh
log() { echo "[serve_ab $(date +%T)] $*" | tee -a "$OUT/steps.txt"; }
qr_gpu_mistral "$OUT/synth.log"
i=0
for c in ${CASES:--}; do
    envs=() qargs=()
    if [ "$c" != - ]; then
        for item in ${c//,/ }; do
            case "$item" in
            --*=*) qargs+=("--quarrel-arg=${item%%=*}" "--quarrel-arg=${item#*=}") ;;
            --*) qargs+=("--quarrel-arg=$item") ;;
            *) envs+=("$item") ;;
            esac
        done
    fi
    i=$((i + 1))
    env "${envs[@]}" timeout 400 python3 bench/serve_bench.py --quarrel "$Q" --model $M --concurrency "${CONC:-64,256}" \
        --prompt-tokens 128 --max-tokens 256 --reps "${REPS:-2}" --backend cuda --json "$OUT/serve_$i.json" "${qargs[@]}" \
        > "$OUT/serve_$i.md" 2> "$OUT/serve_$i.err"
    log "case $c rc $?"
    grep -E "output tok|TPOT|TTFT" "$OUT/serve_$i.md" | tee -a "$OUT/steps.txt"
done
