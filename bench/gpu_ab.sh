#!/usr/bin/env bash
# bench/gpu_ab.sh — knob A/B of quarrel's decode (or prefill) on one synth model, in one device call
# (session 16's calls as a script):
#   1. writes the model with `quarrel synth` unless $MODEL_DIR already holds it (gpu.sh's names, so a later
#      gpu.sh call on the same warm machine reuses it);
#   2. for each round, for each setting: `quarrel bench -m FILE --backend cuda -p P -n N -r REPS --json` with
#      the setting's environment (settings interleaved, so drifts hit them alike);
#   3. prints each setting's t/s per round and the mean, its ratio to the first setting, and writes
#      $OUT/ab.txt; with --trace, a kernel timeline of each setting (bench/cupti_trace.sh's library, carried
#      as build-gpu/trace) summarised by bench/cupti_trace.py into $OUT/trace_N.txt.
#
#   OUT=$OUT BUNDLE=$PWD/build-gpu/bundle bench/gpu_ab.sh --model mixtral-8x7b:Q4_0 \
#       --set "" --set "QUARREL_CUDA_GU_PERSIST=7" --set "QUARREL_CUDA_DC_PIPE=0" [--rounds 2] [--tests tg|pp]
#       [--reps 3] [--trace] [--arch ARCH] [--depth D (the tests after D cached tokens: pp at depth)]
# A setting is a space-separated list of VAR=VALUE ("" = the defaults). The architecture comes from the preset
# name as in gpu.sh (granite-4.0-h-tiny, gpt-oss-20b, nemotron-3-nano-30b-a3b; others llama) unless --arch.
# Environment: OUT (/tmp/gpu_ab), BUNDLE (build-gpu/bundle), MODEL_DIR (/tmp/qr_models), QR_BACKEND (cuda;
# cpu = a dry run on a machine without a GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-/tmp/gpu_ab}
BUNDLE=${BUNDLE:-$ROOT/build-gpu/bundle}
MODEL_DIR=${MODEL_DIR:-/tmp/qr_models}
MODEL="" ARCH="" ROUNDS=2 REPS=3 TEST=tg TRACE=0 DEPTH=0
SETS=()
while [ $# -gt 0 ]; do
    case $1 in
    --model) MODEL=$2; shift ;;
    --arch) ARCH=$2; shift ;;
    --set) SETS+=("$2"); shift ;;
    --rounds) ROUNDS=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --tests) TEST=$2; shift ;;
    --trace) TRACE=1 ;;
    --depth) DEPTH=$2; shift ;;
    *) echo "gpu_ab.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
if [ -z "$MODEL" ] || [ ${#SETS[@]} -lt 1 ]; then
    echo "usage: bench/gpu_ab.sh --model PRESET:TYPE --set \"\" --set \"VAR=VALUE ...\" [...]" >&2
    exit 2
fi
case $TEST in
tg) ARGS=(-p 0 -n 128) KEY=tg_tps ;;
pp) ARGS=(-p 512 -n 0) KEY=pp_tps ;;
*) echo "gpu_ab.sh: --tests is tg or pp" >&2; exit 2 ;;
esac
[ "$DEPTH" -gt 0 ] && ARGS+=(-d "$DEPTH")
QR=$BUNDLE/quarrel
mkdir -p "$OUT" "$MODEL_DIR"
T0=$(date +%s)
log() { echo "[gpu_ab +$(($(date +%s) - T0))s] $*"; }
preset=${MODEL%%:*} type=${MODEL#*:}
[ "$type" = "$MODEL" ] && type=Q4_0
if [ -z "$ARCH" ]; then
    case $preset in
    granite-4.0-h-tiny) ARCH=granitehybrid ;;
    gpt-oss-20b) ARCH=gpt-oss ;;
    nemotron-3-nano-30b-a3b) ARCH=nemotron_h_moe ;;
    *) ARCH=llama ;;
    esac
fi
F=$MODEL_DIR/$preset-$type.gguf
if [ ! -s "$F" ]; then
    "$QR" synth --arch "$ARCH" --preset "$preset" --type "$type" -t "$(nproc)" -o "$F.tmp" > "$OUT/synth.log" 2>&1 &&
        mv "$F.tmp" "$F" || { echo "gpu_ab.sh: synth failed: $(tail -2 "$OUT/synth.log")" >&2; exit 1; }
    log "synth $preset $type: $(du -h "$F" | cut -f1)"
fi
: > "$OUT/ab.txt"
for r in $(seq 1 "$ROUNDS"); do
    for i in "${!SETS[@]}"; do
        # shellcheck disable=SC2086
        v=$(env ${SETS[$i]} "$QR" bench -m "$F" --backend "${QR_BACKEND:-cuda}" "${ARGS[@]}" -r "$REPS" --json 2> "$OUT/bench_$i.err" |
            grep '^{' | python3 -c "import json, sys; print(json.load(sys.stdin)['$KEY'])" 2> /dev/null)
        [ -n "$v" ] || { v=nan; log "setting $i failed: $(tail -2 "$OUT/bench_$i.err" | tr '\n' ' ')"; }
        echo "$i $r $v" >> "$OUT/ab.txt"
        log "round $r setting $i [${SETS[$i]:-defaults}]: $v t/s"
    done
done
python3 - "$OUT/ab.txt" "${SETS[@]}" <<'PY'
import math, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
sets = sys.argv[2:]
vals = {i: [float(v) for j, _, v in rows if int(j) == i] for i in range(len(sets))}
mean = {i: (sum(v) / len(v) if v and all(not math.isnan(x) for x in v) else float("nan")) for i, v in vals.items()}
print("| setting | t/s per round | mean | vs first |")
print("|---|---|---|---|")
for i, s in enumerate(sets):
    ratio = mean[i] / mean[0] if mean[0] == mean[0] and mean[0] > 0 else float("nan")
    print(f"| {s or 'defaults'} | {' / '.join(f'{x:.1f}' for x in vals[i])} | {mean[i]:.1f} | {ratio:.3f}x |")
PY
if [ $TRACE = 1 ]; then
    LIB=$ROOT/build-gpu/trace/libqrtrace.so
    if [ ! -f "$LIB" ]; then
        log "no $LIB (run bench/cupti_trace.sh here and carry build-gpu/trace): no traces"
    else
        for i in "${!SETS[@]}"; do
            # shellcheck disable=SC2086
            env ${SETS[$i]} CUDA_INJECTION64_PATH="$LIB" QR_TRACE_OUT=/tmp/gpu_ab_trace.csv "$QR" bench -m "$F" \
                --backend "${QR_BACKEND:-cuda}" -p 0 -n 64 -r 1 > /dev/null 2>&1
            python3 "$ROOT/bench/cupti_trace.py" /tmp/gpu_ab_trace.csv --steps 32 > "$OUT/trace_$i.txt" 2>&1
            rm -f /tmp/gpu_ab_trace.csv
            log "trace of setting $i: $(sed -n 2p "$OUT/trace_$i.txt")"
        done
    fi
fi
log "done"
