#!/usr/bin/env bash
# bench/gpu.sh — the whole GPU comparison with llama.cpp in one device call (issue 5):
#   1. checks the quarrel bundle (scripts/gpu_bundle.sh) loads: ldd, `quarrel version`;
#   2. measures the device's copy bandwidth (the roofline reference; torch, else a tiny nvcc program);
#   3. builds llama.cpp's llama-bench from build-gpu/llama-src.tar.xz with CUDA for sm_90 (ninja,
#      only that target), in the background while step 4 runs;
#   4. writes the synth models with `quarrel synth` (mistral-7b, tinyllama-1.1b in Q4_K_M, Q4_0,
#      Q8_0, F16) into $MODEL_DIR;
#   5. runs `quarrel bench --backend cuda -p 512 -n 128 -r 3 --json` and
#      `llama-bench -ngl 99 -fa 1 -p 512 -n 128 -r 3 -o json` on each file, and decode at depth
#      (quarrel bench -d N / llama-bench -d N, -p 0 -n 128);
#   6. writes the ratio table (+ % of roofline = t/s * file bytes / copy bandwidth) to $OUT/gpu_bench.md.
# Every step logs to $OUT (step logs *.log, raw results results.jsonl, timings steps.txt); a failed
# step prints ERROR and the script goes on with the next where that makes sense.
#
# Run on the device from the repository root, carrying build-gpu/bundle and build-gpu/llama-src.tar.xz:
#   bench/gpu.sh                                   # everything (may not fit one 10-minute call)
#   bench/gpu.sh --models tinyllama-1.1b           # a subset; options:
#     issue 9's MoE / hybrid presets work too (the arch is looked up from the preset name):
#     --models "granite-4.0-h-tiny gpt-oss-20b nemotron-3-nano-30b-a3b mixtral-8x7b" --types Q4_K_M
#     a model may name its own type: --models "granite-4.0-h-tiny:Q4_K_M mixtral-8x7b:Q4_0"
#     --drop-models  bench each file right after writing it (quarrel, then llama.cpp) and delete it
#                    (the four MoE files take ~60 GB together: more than the device's disk)
#     --models "mistral-7b tinyllama-1.1b"   --types "Q4_K_M Q4_0 Q8_0 F16"
#     --tests "pp tg depth"                  --depth 16384   --reps 3
#     --tests ppdepth   pp512 after each depth of --pp-depths "0 4096 16384 32768" (prefill at depth, issue 29)
#     --tests pplong    one prompt of --long-prompt 30000 tokens from an empty cache (-n 0)
#     --no-llama (skip llama.cpp)            --no-quarrel    --keep-llama-build (copy llama-bench to $OUT)
#     --ab   also run quarrel on each file with each CUDA knob turned off (graphs, flash-decoding, fusions,
#            activation reuse; pp512 + tg128, one repetition each) to see what each one brings
# Environment: OUT (default /tmp/gpu_bench), BUNDLE (build-gpu/bundle), LLAMA_TAR
# (build-gpu/llama-src.tar.xz), LLAMA_BIN (a prebuilt llama-bench, or scripts/llama_bench_build.sh's .xz of
# one: skips the build), MODEL_DIR
# (/tmp/qr_models; existing files are reused, as is a llama-bench built by an earlier call into
# /tmp/llama_build while the machine stays warm), JOBS (nproc), STEP_TIMEOUT (seconds per bench, 400),
# QR_BACKEND (cuda; cpu = a dry run of this script on a machine without a GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-/tmp/gpu_bench}
BUNDLE=${BUNDLE:-$ROOT/build-gpu/bundle}
LLAMA_TAR=${LLAMA_TAR:-$ROOT/build-gpu/llama-src.tar.xz}
MODEL_DIR=${MODEL_DIR:-/tmp/qr_models}
JOBS=${JOBS:-$(nproc)}
STEP_TIMEOUT=${STEP_TIMEOUT:-400}
MODELS="mistral-7b tinyllama-1.1b"
TYPES="Q4_K_M Q4_0 Q8_0 F16"
TESTS="pp tg depth"
DEPTH=16384
PP_DEPTHS="0 4096 16384 32768"
LONG_PROMPT=30000
REPS=3
RUN_LLAMA=1
RUN_QUARREL=1
KEEP_LLAMA=0
AB=0
DROP=0
while [ $# -gt 0 ]; do
    case $1 in
    --models) MODELS=$2; shift ;;
    --types) TYPES=$2; shift ;;
    --tests) TESTS=$2; shift ;;
    --depth) DEPTH=$2; shift ;;
    --pp-depths) PP_DEPTHS=$2; shift ;;
    --long-prompt) LONG_PROMPT=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --no-llama) RUN_LLAMA=0 ;;
    --no-quarrel) RUN_QUARREL=0 ;;
    --keep-llama-build) KEEP_LLAMA=1 ;;
    --ab) AB=1 ;;
    --drop-models) DROP=1 ;;
    -h | --help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
mkdir -p "$OUT" "$MODEL_DIR"
export PATH=/usr/local/cuda/bin:$PATH
T_START=$(date +%s)
log() { echo "[gpu.sh +$(($(date +%s) - T_START))s] $*" | tee -a "$OUT/steps.txt"; }
err() { echo "[gpu.sh +$(($(date +%s) - T_START))s] ERROR: $*" | tee -a "$OUT/steps.txt" "$OUT/errors.txt" >&2; }
has_test() { case " $TESTS " in *" $1 "*) return 0 ;; esac; return 1; }
QR=$BUNDLE/quarrel
RESULTS=$OUT/results.jsonl
touch "$RESULTS"

# ---- 0. the device ----
{
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,clocks.max.sm,clocks.max.mem --format=csv 2>&1
    echo "cores: $(nproc)"; free -g | head -2; df -h /tmp | tail -1
    nvcc --version 2>&1 | tail -1
} > "$OUT/device.txt"
cat "$OUT/device.txt"
# the GPU's name, for the report's per-device baseline (bench/gpu_baseline.json)
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1)
echo "{\"kind\": \"device\", \"name\": \"${GPU_NAME:-unknown}\"}" >> "$RESULTS"
log "models: $MODELS; types: $TYPES; tests: $TESTS; depth $DEPTH; reps $REPS"

# ---- 1. the bundle ----
QR_OK=1
if [ ! -x "$QR" ]; then
    err "no bundle at $BUNDLE (run scripts/gpu_bundle.sh here and carry build-gpu/bundle)"
    QR_OK=0
else
    (export LD_LIBRARY_PATH=$BUNDLE/lib:/usr/local/cuda/lib64; ldd "$BUNDLE/quarrel.bin") > "$OUT/ldd.txt" 2>&1
    if grep -q "not found" "$OUT/ldd.txt"; then
        err "the bundle does not load: $(grep 'not found' "$OUT/ldd.txt" | tr '\n' ' ')"
        QR_OK=0
    elif ! "$QR" version > "$OUT/version.txt" 2>&1; then
        err "quarrel version failed: $(cat "$OUT/version.txt")"
        QR_OK=0
    else
        log "bundle OK: $(cat "$OUT/version.txt"); $(head -2 "$BUNDLE/MANIFEST.txt" | tail -1)"
    fi
fi
[ $QR_OK = 0 ] && RUN_QUARREL=0

# ---- 2. copy bandwidth ----
BW=""
bw_torch() {
    python3 - << 'EOF'
import torch
n = 1 << 30  # 1 GiB
x = torch.empty(n, dtype=torch.uint8, device="cuda"); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
best = 1e9
for _ in range(10):
    s.record(); y.copy_(x); e.record(); e.synchronize(); best = min(best, s.elapsed_time(e) / 1e3)
print(f"{2 * n / best / 1e9:.1f}")  # GB/s, read + write
EOF
}
bw_nvcc() {
    local d
    d=$(mktemp -d)
    cat > "$d/bw.cu" << 'EOF'
#include <cstdio>
int main() {
    size_t n = 1ull << 30; void *a, *b;
    if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess) { fprintf(stderr, "no GPU memory\n"); return 1; }
    cudaEvent_t s, e; cudaEventCreate(&s); cudaEventCreate(&e); float best = 1e9f;
    for (int i = 0; i < 13; i++) { cudaEventRecord(s); cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice); cudaEventRecord(e);
        cudaEventSynchronize(e); float ms; cudaEventElapsedTime(&ms, s, e); if (i >= 3 && ms < best) best = ms; }
    printf("%.1f\n", 2.0 * n / (best / 1e3) / 1e9); return 0; }
EOF
    nvcc -O2 -o "$d/bw" "$d/bw.cu" > /dev/null 2>&1 && "$d/bw"
    rm -rf "$d"
}
BW=$(bw_torch 2> "$OUT/bw.log" | tail -1)
[ -z "$BW" ] && BW=$(bw_nvcc 2>> "$OUT/bw.log" | tail -1)
case $BW in # a number between 100 and 100000 GB/s, else the measurement failed
[0-9]*.[0-9]) awk -v b="$BW" 'BEGIN { exit !(b > 100 && b < 100000) }' || BW="" ;;
*) BW="" ;;
esac
if [ -z "$BW" ]; then
    err "could not measure the copy bandwidth (see bw.log); using 2990 GB/s (docs/cuda-notes.md)"
    BW=2990
fi
log "device-to-device copy bandwidth: $BW GB/s (read + write)"
echo "{\"kind\": \"bandwidth\", \"gbps\": $BW}" >> "$RESULTS"

# ---- 3. llama-bench (background) ----
LB=""
LB_PID=""
LB_DIR=/tmp/llama_build
build_llama() {
    local t0=$(date +%s)
    rm -rf "$LB_DIR" && mkdir -p "$LB_DIR"
    tar -xJf "$LLAMA_TAR" -C "$LB_DIR" || return 1
    local gen=()
    command -v ninja > /dev/null && gen=(-G Ninja)
    cmake -S "$LB_DIR/llama.cpp" -B "$LB_DIR/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
        -DBUILD_SHARED_LIBS=OFF || return 1
    cmake --build "$LB_DIR/build" --target llama-bench -j "$JOBS" || return 1
    touch "$LB_DIR/stamp"
    echo "llama-bench built in $(($(date +%s) - t0)) s"
}
if [ $RUN_LLAMA = 1 ]; then
    if [ -n "${LLAMA_BIN:-}" ] && [ "${LLAMA_BIN%.xz}" != "$LLAMA_BIN" ] && [ -f "$LLAMA_BIN" ]; then
        # scripts/llama_bench_build.sh's compressed binary (built on another machine)
        xz -dc "$LLAMA_BIN" > /tmp/llama-bench.prebuilt && chmod +x /tmp/llama-bench.prebuilt &&
            LLAMA_BIN=/tmp/llama-bench.prebuilt || err "cannot unpack $LLAMA_BIN"
    fi
    if [ -z "${LLAMA_BIN:-}" ] && [ -x "$LB_DIR/build/bin/llama-bench" ] && [ "$LB_DIR/stamp" -nt "$LLAMA_TAR" ]; then
        LLAMA_BIN=$LB_DIR/build/bin/llama-bench # built by an earlier call on this (still warm) machine
    fi
    if [ -n "${LLAMA_BIN:-}" ] && "$LLAMA_BIN" --help > /dev/null 2>&1; then
        LB=$LLAMA_BIN
        log "using the prebuilt llama-bench $LB"
    elif [ ! -f "$LLAMA_TAR" ]; then
        err "no $LLAMA_TAR (run scripts/llama_src_bundle.sh here and carry it); skipping llama.cpp"
        RUN_LLAMA=0
    else
        log "building llama-bench in the background (log: llama_build.log)"
        build_llama > "$OUT/llama_build.log" 2>&1 &
        LB_PID=$!
    fi
fi
wait_llama() { # waits for the background build once; sets LB or RUN_LLAMA=0
    [ -n "$LB" ] || [ $RUN_LLAMA = 0 ] && return
    if [ -n "$LB_PID" ]; then
        log "waiting for the llama-bench build"
        if wait "$LB_PID"; then
            LB=$LB_DIR/build/bin/llama-bench
            log "$(tail -1 "$OUT/llama_build.log")"
            if [ $KEEP_LLAMA = 1 ]; then
                cp "$LB" "$OUT/llama-bench" && strip "$OUT/llama-bench" && log "copied llama-bench to \$OUT"
            fi
        else
            err "llama-bench build failed (tail of llama_build.log below); skipping llama.cpp"
            tail -25 "$OUT/llama_build.log" >&2
            RUN_LLAMA=0
        fi
        LB_PID=""
    fi
}

# ---- 4. models ----
model_file() { echo "$MODEL_DIR/$1-$2.gguf"; }
preset_arch() { # the synth architecture of a preset name
    case $1 in
    granite-4.0-h-tiny) echo granitehybrid ;;
    gpt-oss-20b) echo gpt-oss ;;
    nemotron-3-nano-30b-a3b) echo nemotron_h_moe ;;
    qwen2.5-7b) echo qwen2 ;;
    qwen3-8b) echo qwen3 ;;
    qwen3-30b-a3b) echo qwen3moe ;;
    qwen1.5-moe-a2.7b) echo qwen2moe ;;
    phi-4-mini) echo phi3 ;;
    gemma2-9b) echo gemma2 ;;
    olmo2-7b) echo olmo2 ;;
    granite-3.1-3b-a800m) echo granitemoe ;;
    glm4-9b) echo glm4 ;;
    ministral-3-8b) echo mistral3 ;;
    deepseek-v2-lite) echo deepseek2 ;;
    *) echo llama ;; # mistral-7b, tinyllama-1.1b, mixtral-8x7b (llama + experts), ...
    esac
}
# bytes a decode step reads: every tensor, the expert tensors (*_exps) scaled by used / total experts
active_bytes() { # $1 file -> a results line {"kind": "active", ...}
    "$QR" inspect --json --full "$1" 2> /dev/null | python3 -c "
import json, sys
d = json.load(sys.stdin)
kv = {m['key']: m.get('value') for m in d['metadata']}
arch = kv.get('general.architecture', '')
ne, nu = kv.get(arch + '.expert_count') or 0, kv.get(arch + '.expert_used_count') or 0
tot = sum(t['bytes'] for t in d['tensors'])
act = sum(t['bytes'] * (nu / ne if ne and '_exps' in t['name'] else 1) for t in d['tensors'])
print(json.dumps({'kind': 'active', 'file': '$(basename "$1")', 'tensor_bytes': tot, 'active_bytes': int(act)}))
" >> "$RESULTS" || err "cannot compute the active bytes of $1"
}
make_model() { # $1 preset, $2 type
    local f
    f=$(model_file "$1" "$2")
    if [ -s "$f" ]; then
        log "model $f exists ($(du -h "$f" | cut -f1))"
        return 0
    fi
    local t0=$(date +%s)
    if "$QR" synth --arch "$(preset_arch "$1")" --preset "$1" --type "$2" -t "$(nproc)" -o "$f.tmp" \
        > "$OUT/synth_$1_$2.log" 2>&1; then
        mv "$f.tmp" "$f"
        log "synth $1 $2: $(($(date +%s) - t0)) s, $(du -h "$f" | cut -f1)"
    else
        rm -f "$f.tmp"
        err "synth $1 $2 failed: $(tail -2 "$OUT/synth_$1_$2.log")"
        return 1
    fi
}

# ---- 5. benches ----
run_quarrel() { # $1 file, $2 label, then bench args
    local f=$1 label=$2
    shift 2
    local log_f="$OUT/quarrel_$(basename "$f" .gguf)_$label.log" t0=$(date +%s)
    if timeout "$STEP_TIMEOUT" "$QR" bench -m "$f" --backend "${QR_BACKEND:-cuda}" --json "$@" > "$log_f.json" 2> "$log_f"; then
        local line
        line=$(grep '^{' "$log_f.json" | tail -1)
        echo "{\"kind\": \"quarrel\", \"file\": \"$(basename "$f")\", \"bytes\": $(stat -c %s "$f"), \"label\": \"$label\", \"result\": $line}" >> "$RESULTS"
        log "quarrel $(basename "$f") $label: $(($(date +%s) - t0)) s: $line"
        grep -h "CUDA graphs\|using the CPU" "$log_f" | head -2 | sed 's/^/    /'
    else
        err "quarrel bench $(basename "$f") $label failed (rc $?, $(($(date +%s) - t0)) s): $(tail -3 "$log_f" | tr '\n' ' ')"
    fi
}
run_llama() { # $1 file, $2 label, then llama-bench args
    local f=$1 label=$2
    shift 2
    wait_llama
    [ $RUN_LLAMA = 1 ] || return 0
    local log_f="$OUT/llama_$(basename "$f" .gguf)_$label.log" t0=$(date +%s)
    if timeout "$STEP_TIMEOUT" "$LB" -m "$f" -ngl 99 -fa 1 -o json "$@" > "$log_f.json" 2> "$log_f"; then
        python3 -c "
import json,sys
rows = json.load(open('$log_f.json'))
for r in rows:
    print(json.dumps({'kind': 'llama', 'file': '$(basename "$f")', 'bytes': $(stat -c %s "$f"), 'label': '$label',
                      'n_prompt': r['n_prompt'], 'n_gen': r['n_gen'], 'n_depth': r.get('n_depth', 0),
                      'avg_ts': r['avg_ts'], 'stddev_ts': r['stddev_ts'], 'gpu': r.get('gpu_info', ''),
                      'samples_ts': r.get('samples_ts', [])}))
" >> "$RESULTS" || err "cannot parse $log_f.json"
        log "llama-bench $(basename "$f") $label: $(($(date +%s) - t0)) s"
    else
        err "llama-bench $(basename "$f") $label failed (rc $?, $(($(date +%s) - t0)) s): $(tail -3 "$log_f" | tr '\n' ' ')"
    fi
}

P=0 N=0
has_test pp && P=512
has_test tg && N=128
bench_file() { # $1 file, $2 who
    if [ $P != 0 ] || [ $N != 0 ]; then run_$2 "$1" std -p $P -n $N -r "$REPS"; fi
    if has_test depth; then run_$2 "$1" depth -p 0 -n 128 -d "$DEPTH" -r "$REPS"; fi
    if has_test ppdepth; then
        for d in $PP_DEPTHS; do run_$2 "$1" "ppd$d" -p 512 -n 0 -d "$d" -r "$REPS"; done
    fi
    if has_test pplong; then run_$2 "$1" pplong -p "$LONG_PROMPT" -n 0 -r 2; fi
}
# synth every file first (CPU-bound, overlaps the llama-bench build), then wait for the build so
# that the timed runs do not share the CPU with the compiler, then quarrel, then llama.cpp
# (--drop-models: file by file, each deleted after its runs)
FILES=()
for spec in $MODELS; do
    preset=${spec%%:*}
    types=$TYPES
    [ "$spec" != "$preset" ] && types=${spec#*:} # preset:TYPE overrides --types for that preset
    for type in $types; do
        f=$(model_file "$preset" "$type")
        if [ $QR_OK = 1 ]; then
            make_model "$preset" "$type" || continue
        elif [ ! -s "$f" ]; then
            err "no quarrel to write $f"
            continue
        fi
        [ $QR_OK = 1 ] && active_bytes "$f"
        if [ $DROP = 1 ]; then
            wait_llama # the timed runs must not share the CPU with the llama.cpp build
            [ $RUN_QUARREL = 1 ] && bench_file "$f" quarrel
            [ $RUN_LLAMA = 1 ] && bench_file "$f" llama
            rm -f "$f"
            log "deleted $f"
            continue
        fi
        FILES+=("$f")
    done
done
wait_llama
for who in quarrel llama; do
    [ $who = quarrel ] && [ $RUN_QUARREL = 0 ] && continue
    [ $who = llama ] && [ $RUN_LLAMA = 0 ] && continue
    for f in "${FILES[@]}"; do bench_file "$f" $who; done
done
if [ $AB = 1 ] && [ $RUN_QUARREL = 1 ]; then
    for f in "${FILES[@]}"; do
        QUARREL_CUDA_GRAPH=0 run_quarrel "$f" ab-no-graphs -p 512 -n 128 -r 1
        QUARREL_CUDA_ATTN=old run_quarrel "$f" ab-old-attention -p 512 -n 128 -r 1
        QUARREL_CUDA_ATTN=decode run_quarrel "$f" ab-decode-attention-only -p 512 -n 128 -r 1
        QUARREL_CUDA_ACT_REUSE=0 run_quarrel "$f" ab-no-act-reuse -p 512 -n 128 -r 1
        QUARREL_CUDA_FUSE=0 run_quarrel "$f" ab-no-fuse -p 512 -n 128 -r 1
    done
fi

# ---- 6. the table ----
python3 "$ROOT/bench/gpu_report.py" "$RESULTS" > "$OUT/gpu_bench.md" 2> "$OUT/report.log" ||
    err "gpu_report.py failed: $(tail -3 "$OUT/report.log")"
cat "$OUT/gpu_bench.md"
log "done in $(($(date +%s) - T_START)) s; errors: $(cat "$OUT/errors.txt" 2> /dev/null | wc -l)"
