#!/usr/bin/env bash
# bench/gpu_trace_arch.sh — decode-step kernel timelines (CUPTI, bench/cupti_trace.c) of full-shape presets cut to
# LAYERS layers, one per "preset:arch" in MODELS, plus their tg / pp speed (quarrel bench -r REPS). Issue 30's decode
# targets: where a gemma2 / phi3 / qwen step goes next to mistral's.
#   carry build-gpu/bundlexz and build-gpu/trace (bash bench/cupti_trace.sh)
#   OUT=... MODELS="gemma2-9b:gemma2 phi-4-mini:phi3 mistral-7b:llama" LAYERS=8 TYPE=Q4_K_M REPS=3 ENVS="K=V ..."
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_trace_arch}
mkdir -p "$OUT" build-gpu /tmp/qr_models
. bench/gpu_unpack.sh
B=$PWD/build-gpu/bundle
T=$PWD/build-gpu/trace/libqrtrace.so
L=${LAYERS:-8}
TY=${TYPE:-Q4_K_M}
log() { echo "[trace_arch $(date +%T)] $*" | tee -a "$OUT/steps.txt"; }
for spec in ${MODELS:-gemma2-9b:gemma2 phi-4-mini:phi3 mistral-7b:llama}; do
    p=${spec%%:*} a=${spec#*:}
    f=/tmp/qr_models/$p-L$L-$TY.gguf
    [ -f "$f" ] || { "$B/quarrel" synth --arch "$a" --preset "$p" --layers "$L" --type "$TY" -t "$(nproc)" -o "$f" \
        > "$OUT/synth_$p.log" 2>&1 || { log "synth $p failed: $(tail -2 "$OUT/synth_$p.log")"; continue; }; }
    for tag in ${TAGS:-base}; do
        envs=""
        [ "$tag" != base ] && envs=$(echo "$tag" | tr '+' ' ')
        env $envs timeout 200 "$B/quarrel" bench -m "$f" --backend cuda -p 512 -n 128 -r "${REPS:-3}" > "$OUT/bench_${p}_$tag.log" 2>&1
        log "$p [$tag]: $(grep -E 'pp512|tg128' "$OUT/bench_${p}_$tag.log" | tr -s ' ' | tr '\n' ' ')"
        if [ -f "$T" ] && [ -z "${NO_TRACE:-}" ]; then
            env $envs CUDA_INJECTION64_PATH=$T QR_TRACE_OUT=/tmp/tr_$p.csv timeout 120 "$B/quarrel" bench -m "$f" --backend cuda \
                -p 0 -n 64 -r 1 > "$OUT/trbench_${p}_$tag.log" 2>&1
            python3 bench/cupti_trace.py /tmp/tr_$p.csv > "$OUT/trace_${p}_$tag.txt" 2>&1
            head -40 "$OUT/trace_${p}_$tag.txt" >> "$OUT/steps.txt"
        fi
    done
done
