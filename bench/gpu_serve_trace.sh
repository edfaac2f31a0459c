#!/usr/bin/env bash
# bench/gpu_serve_trace.sh — where a served decode step goes on the GPU machine, in one device call (issue 29):
#  1. `quarrel serve` under bench/serve_bench.py (128-token prompts, 256 output tokens, ignore EOS) at CONC, with
#     the client spread over processes (the default) and, at the first concurrency, over one process (the old
#     client: a Python process parses chunks under one GIL) — the client's share of the figures;
#  2. CUPTI kernel timelines (bench/cupti_trace.c) of `quarrel bench --parallel NP -p 128 -n 64` (decode-only
#     steps) and of `quarrel serve` at the first concurrency: per-kernel time a step and the host gap between
#     replays of the decode graph.
#   carry build-gpu/bundlexz (scripts/gpu_bundle.sh) and build-gpu/trace (bash bench/cupti_trace.sh); then
#   OUT=$OUT bash bench/gpu_serve_trace.sh
# Environment: CONC (64,256), REPS (2), NPS (64 256), TRACE=0 (skip 2), SERVE=0 (skip 1), ENVS (VAR=VALUE ... for
# every quarrel run), NODES=1 (also the first 40 kernels of a bench step, cupti_trace.py --nodes), TRACE_SERVE=0 (no server
# trace).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_serve_trace}
CONC=${CONC:-64,256}
REPS=${REPS:-2}
mkdir -p "$OUT/logs" build-gpu
log() { echo "[serve_trace $(date +%T)] $*" | tee -a "$OUT/steps.txt" >&2; }
. bench/gpu_unpack.sh
Q=$PWD/build-gpu/bundle/quarrel
T=$PWD/build-gpu/trace/libqrtrace.so
M=/tmp/qr_models/mistral-7b-Q4_K_M.gguf
mkdir -p /tmp/qr_models
if [ ! -f $M ]; then
    t0=$(date +%s)
    "$Q" synth --arch llama --preset mistral-7b --type Q4_K_M -t "$(nproc)" -o $M.tmp > "$OUT/synth.log" 2>&1 &&
        mv $M.tmp $M
    log "synth mistral-7b Q4_K_M: $(($(date +%s) - t0)) s"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$OUT/steps.txt"
c1=${CONC%%,*}
if [ "${SERVE:-1}" != 0 ]; then
    env QUARREL_HOST_PROF=1 ${ENVS:-} timeout 300 python3 bench/serve_bench.py --quarrel "$Q" --model $M \
        --concurrency "$CONC" --prompt-tokens 128 --max-tokens 256 --reps "$REPS" --backend cuda \
        --json "$OUT/serve.json" --log-dir "$OUT/logs" > "$OUT/serve.md" 2> "$OUT/serve.err"
    log "serve_bench (client processes: auto) rc $?"
    cat "$OUT/serve.md" | tee -a "$OUT/steps.txt"
    mkdir -p "$OUT/logs1"
    env QUARREL_HOST_PROF=1 ${ENVS:-} timeout 120 python3 bench/serve_bench.py --quarrel "$Q" --model $M \
        --concurrency "$c1" --prompt-tokens 128 --max-tokens 256 --reps "$REPS" --backend cuda --client-procs 1 \
        --json "$OUT/serve1.json" --log-dir "$OUT/logs1" > "$OUT/serve1.md" 2> "$OUT/serve1.err"
    log "serve_bench (one client process) rc $?"
    cat "$OUT/serve1.md" | tee -a "$OUT/steps.txt"
    grep -h "scheduler host profile" "$OUT"/logs/quarrel_C*.log | tail -4 | tee -a "$OUT/steps.txt"
fi
if [ "${TRACE:-1}" != 0 ]; then
    for np in ${NPS:-64 256}; do
        env ${ENVS:-} CUDA_INJECTION64_PATH=$T QR_TRACE_OUT=/tmp/trb_$np.csv timeout 150 "$Q" bench -m $M --backend cuda \
            --parallel "$np" -p 128 -n 64 -r 1 > "$OUT/trace_bench_$np.log" 2>&1
        python3 bench/cupti_trace.py --gaps ${NODES:+--nodes} /tmp/trb_$np.csv > "$OUT/trace_bench_$np.txt" 2>&1
        log "bench trace np $np"
        head -40 "$OUT/trace_bench_$np.txt" | tee -a "$OUT/steps.txt"
    done
    # the server at the first concurrency, one round (TRACE_SERVE=0: skipped)
    [ "${TRACE_SERVE:-1}" = 0 ] && exit 0
    mkdir -p "$OUT/logs_tr"
    env ${ENVS:-} QUARREL_HOST_PROF=1 QR_TRACE_API=1 CUDA_INJECTION64_PATH=$T QR_TRACE_OUT=/tmp/trs.csv timeout 150 python3 bench/serve_bench.py \
        --quarrel "$Q" --model $M --concurrency "$c1" --prompt-tokens 128 --max-tokens 256 --reps 1 --backend cuda \
        --log-dir "$OUT/logs_tr" > "$OUT/serve_tr.md" 2> "$OUT/serve_tr.err"
    python3 bench/cupti_trace.py --gaps /tmp/trs.csv > "$OUT/trace_serve_$c1.txt" 2>&1
    log "serve trace C $c1"
    head -40 "$OUT/trace_serve_$c1.txt" | tee -a "$OUT/steps.txt"
fi
# the host profiles (scheduler and context) of the servers
grep -h "host profile" "$OUT"/logs*/quarrel_C*.log 2>/dev/null | tail -12 | tee -a "$OUT/steps.txt"
