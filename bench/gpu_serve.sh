#!/usr/bin/env bash
# bench/gpu_serve.sh — issue 29's serving figures on the GPU machine in one device call: `quarrel serve` against
# llama.cpp's `llama-server` on the same synth mistral-7b Q4_K_M (bench/serve_bench.py: 128-token prompts, 256
# output tokens, temperature 0, ignore EOS, concurrency 64 and 256), with the scheduler's host profile
# (QUARREL_HOST_PROF=1) kept in $OUT/logs, and `quarrel bench --parallel N -p 128 -n 256` (decode-only steps) for
# comparison.
#
#   carry build-gpu/bundlexz (scripts/gpu_bundle.sh's bundle as bundle.tar.xz) and build-gpu/llama-srv
#   (llama-server.xz from scripts/llama_bench_build.sh's tree, target llama-server); then
#   OUT=$OUT bash bench/gpu_serve.sh
# Environment: CONC (64,256), REPS (2), MAXTOK (256), NO_LLAMA=1 (quarrel only), NO_BENCH=1, QARGS (more quarrel
# serve arguments, space-separated), ENVS (VAR=VALUE ... set for quarrel serve only).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_serve}
CONC=${CONC:-64,256}
REPS=${REPS:-2}
MAXTOK=${MAXTOK:-256}
mkdir -p "$OUT/logs" build-gpu
log() { echo "[gpu_serve $(date +%T)] $*" | tee -a "$OUT/steps.txt" >&2; }
. bench/gpu_unpack.sh
Q=$PWD/build-gpu/bundle/quarrel
LS=/tmp/llama-server
if [ "${NO_LLAMA:-0}" != 1 ] && [ ! -x $LS ] && [ -f build-gpu/llama-srv/llama-server.xz ]; then
    xz -dc build-gpu/llama-srv/llama-server.xz > $LS && chmod +x $LS
fi
M=/tmp/qr_models/mistral-7b-Q4_K_M.gguf
mkdir -p /tmp/qr_models
if [ ! -f $M ]; then
    t0=$(date +%s)
    "$Q" synth --arch llama --preset mistral-7b --type Q4_K_M -t "$(nproc)" -o $M.tmp > "$OUT/synth.log" 2>&1 &&
        mv $M.tmp $M
    log "synth mistral-7b Q4_K_M: $(($(date +%s) - t0)) s"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$OUT/steps.txt"
if [ "${NO_BENCH:-0}" != 1 ]; then
    for np in ${CONC//,/ }; do
        line=$(timeout 120 "$Q" bench -m $M --backend cuda --parallel "$np" -p 128 -n "$MAXTOK" -r 2 --json \
            2> "$OUT/logs/bench_np$np.err" | grep '^{' | tail -1)
        log "bench --parallel $np -p 128 -n $MAXTOK: $(echo "$line" | grep -o '"tg_median_tps": [0-9.]*\|"tg_step_median_ms": [0-9.]*\|"pp_median_tps": [0-9.]*' | tr '\n' ' ')"
    done
fi
largs=()
[ "${NO_LLAMA:-0}" != 1 ] && [ -x $LS ] && largs=(--llama-server $LS)
qargs=()
for q in ${QARGS:-}; do qargs+=("--quarrel-arg=$q"); done
env QUARREL_HOST_PROF=1 ${ENVS:-} timeout 560 python3 bench/serve_bench.py --quarrel "$Q" "${largs[@]}" --model $M \
    --concurrency "$CONC" --prompt-tokens 128 --max-tokens "$MAXTOK" --reps "$REPS" --backend cuda \
    --json "$OUT/serve.json" --log-dir "$OUT/logs" "${qargs[@]}" > "$OUT/serve.md" 2> "$OUT/serve.err"
log "serve_bench rc $?"
cat "$OUT/serve.md" | tee -a "$OUT/steps.txt"
grep -h "scheduler host profile" "$OUT"/logs/quarrel_C*.log | tail -4 | tee -a "$OUT/steps.txt"
tail -5 "$OUT/serve.err"
