#!/usr/bin/env bash
# bench/gpu_issue29.sh — issue 29's GPU figures (long-context prefill, batched decode) side by side with
# llama.cpp, in two device calls on one warm machine (the bundle and llama-bench do not fit one 64 MiB carry):
#
#   call 1 (carry build/bundle):         bench/gpu_issue29.sh quarrel
#       synth mistral-7b Q4_K_M / F16 / Q4_0 into /tmp/qr_models; pp512 at depths 0/4096/16384/32768 and a
#       30,000-token prompt (Q4_K_M), pp512 (F16, Q4_0); A/B of the flash kernel's m16 tiles a warp at depth
#       16384; batched decode (`quarrel bench --parallel 1/64/256 -p 128 -n 128`) on Q4_K_M and on Q4_0 with the
#       dense int8 mma matmul on and off; GPU vs CPU logits on the tiny synth models (bench/gpu_check.py).
#   call 2 at once (carry build-gpu/llama-bin): bench/gpu_issue29.sh llama
#       llama-bench -fa 1 on the same files and tests; the ratio table (bench/gpu_report.py: llama.cpp's
#       median of samples_ts) over both calls' results.
#
# QUICK=1: only the prefill figures (Q4_K_M depths and long prompt, F16 pp512) and, on quarrel's side, the A/B of the
# flash kernel's pipeline stages at depth 32768 (a shorter pair of calls).
# Results accumulate in $G (default /tmp/g, on the device, kept while the machine stays warm); each call copies
# a tarball of it and the table to $OUT. Environment: BUNDLE (build/bundle), LLAMA_BIN
# (build-gpu/llama-bin/llama-bench.xz), G, REPS (3).
set -uo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-quarrel}
G=${G:-/tmp/g}
B=${BUNDLE:-$PWD/build/bundle}
REPS=${REPS:-3}
OUT=${OUT:-/tmp/gpu_issue29}
mkdir -p "$G" "$OUT"
M=/tmp/qr_models
log() { echo "[issue29 $(date +%T)] $*" | tee -a "$G/steps.txt"; }
gpu() { BUNDLE=$B OUT=$G STEP_TIMEOUT=240 bench/gpu.sh "$@" >> "$G/gpu_sh.log" 2>&1; }
PP_MODELS="mistral-7b:F16 mistral-7b:Q4_0"
[ "${QUICK:-0}" = 1 ] && PP_MODELS="mistral-7b:F16"
if [ "$MODE" = quarrel ]; then
    log "quarrel: depth sweep and long prompt (Q4_K_M)"
    gpu --models "mistral-7b:Q4_K_M" --tests "ppdepth pplong" --reps "$REPS" --no-llama
    log "quarrel: pp512 ($PP_MODELS)"
    gpu --models "$PP_MODELS" --tests pp --reps "$REPS" --no-llama
    if [ "${QUICK:-0}" = 1 ]; then
        log "A/B: flash kernel pipeline stages, pp512 @ d32768"
        BUNDLE=$B OUT=$G/ab timeout 120 bench/gpu_ab.sh --model mistral-7b:Q4_K_M --tests pp --depth 32768 --rounds 2 \
            --reps "$REPS" --set "" --set "QUARREL_CUDA_ATTN_FLASH_STAGES=2" > "$G/ab.log" 2>&1
        tail -4 "$G/ab.log" | tee -a "$G/steps.txt"
        tar czf "$OUT/issue29_$MODE.tgz" -C "$(dirname "$G")" "$(basename "$G")"
        exit 0
    fi
    log "A/B: flash kernel m16 tiles a warp, pp512 @ d16384"
    BUNDLE=$B OUT=$G/ab timeout 120 bench/gpu_ab.sh --model mistral-7b:Q4_K_M --tests pp --depth 16384 --rounds 1 \
        --reps "$REPS" --set "" --set "QUARREL_CUDA_ATTN_FLASH_MT=1" > "$G/ab.log" 2>&1
    tail -5 "$G/ab.log" | tee -a "$G/steps.txt"
    log "batched decode (quarrel bench --parallel N -p 128 -n 128)"
    for spec in "Q4_K_M:" "Q4_0:" "Q4_0:QUARREL_CUDA_MMQ_DENSE=0"; do
        t=${spec%%:*} env_set=${spec#*:}
        for np in 1 64 256; do
            line=$(env $env_set timeout 90 "$B/quarrel" bench -m "$M/mistral-7b-$t.gguf" --backend cuda --parallel "$np" \
                -p 128 -n 128 -r 2 --json 2> "$G/np_${t}_$np.err" | grep '^{' | tail -1)
            echo "{\"kind\": \"batched\", \"type\": \"$t\", \"env\": \"$env_set\", \"np\": $np, \"result\": ${line:-null}}" >> "$G/batched.jsonl"
            log "batched $t ${env_set:-defaults} np $np: $(echo "$line" | grep -o '"tg_median_tps": [0-9.]*\|"tg_step_median_ms": [0-9.]*' | tr '\n' ' ')"
        done
    done
    log "GPU vs CPU logits on the tiny synth models (flash prefill, dense mma)"
    OUT=$G/chk BUNDLE=$B timeout 150 python3 bench/gpu_check.py --models llama:tiny,gemma3:tiny,llama:smollm2-135m \
        --types Q4_0,Q8_0,F16 --no-gen --no-leak --prompt-len 200 > "$G/chk.log" 2>&1
    grep "^|" "$G/chk/gpu_check.md" | tee -a "$G/steps.txt"
else
    LB=${LLAMA_BIN:-$PWD/build-gpu/llama-bin/llama-bench.xz}
    log "llama.cpp: the same files and tests"
    LLAMA_BIN=$LB gpu --models "mistral-7b:Q4_K_M" --tests "ppdepth pplong" --reps "$REPS" --no-quarrel
    LLAMA_BIN=$LB gpu --models "$PP_MODELS" --tests pp --reps "$REPS" --no-quarrel
    python3 bench/gpu_report.py "$G/results.jsonl" > "$G/issue29.md" 2> "$G/report.log"
    cat "$G/issue29.md"
fi
tar czf "$OUT/issue29_$MODE.tgz" -C "$(dirname "$G")" "$(basename "$G")"
