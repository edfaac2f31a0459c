#!/usr/bin/env bash
# bench/gpu_mixed_ab.sh — issue 29's mixed load (64 streams decoding while a 16,000-token prompt arrives) under several
# settings in one device call: first (with build-gpu/labxz carried) the kernel lab's mixed-step attention case ("decode
# 64 seqs + a 256-row chunk", one pass and split), then bench/serve_bench.py --mixed for each case of CASES
# (space-separated; each a comma-separated list of VAR=value and of quarrel serve arguments each written +ARG, "-" for
# the defaults; +--flag,+value for a flag with a value). Prints the streams' TPOT alone / with the long prompt and their ratio (target <= 2).
#   carry build-gpu/bundlexz (and build-gpu/labxz); OUT=$OUT CASES="- QUARREL_CUDA_ATTN_SPLIT_MIXED=1
#   QUARREL_STEP_TOKENS=2048,+--prefill-chunk,+1024" bash bench/gpu_mixed_ab.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_mixed_ab}
mkdir -p "$OUT"
. bench/gpu_unpack.sh
log() { echo "[mixed_ab $(date +%T)] $*" | tee -a "$OUT/steps.txt"; }
if [ -f build-gpu/labxz/lab.xz ] && [ "${LAB:-1}" != 0 ]; then
    xz -dc build-gpu/labxz/lab.xz > /tmp/qr_lab && chmod +x /tmp/qr_lab
    LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} QUARREL_LAB_ATTN_BATCHED=1 timeout 200 /tmp/qr_lab \
        --only attention > "$OUT/lab_attention.log" 2>&1
    log "lab rc $?: $(grep -c FAIL "$OUT/lab_attention.log") FAIL lines"
    grep -E "chunk|seqs auto" "$OUT/lab_attention.log" | grep -E " us|FAIL" | cut -c1-150 | tee -a "$OUT/steps.txt"
fi
qr_gpu_mistral "$OUT/synth.log"
i=0
for c in ${CASES:--}; do
    i=$((i + 1))
    envs=() qargs=()
    if [ "$c" != - ]; then
        IFS=, read -ra parts <<< "$c"
        for x in "${parts[@]}"; do
            case $x in +*) qargs+=("--quarrel-arg=${x#+}") ;; *) envs+=("$x") ;; esac
        done
    fi
    env "${envs[@]}" timeout 150 python3 bench/serve_bench.py --quarrel "$Q" --model $M --concurrency 64 --prompt-tokens 128 \
        --max-tokens 256 --reps 1 --backend cuda --mixed --mixed-prompt-tokens 16000 "${qargs[@]}" > "$OUT/mixed_$i.md" \
        2> "$OUT/mixed_$i.err"
    log "case $c rc $?: $(grep -E '\| TPOT ms \||with the long prompt \||with / without|long prompt TTFT' "$OUT/mixed_$i.md" | awk -F'|' '{printf "%s=%s; ", $3, $4}')"
done
