#!/usr/bin/env bash
# bench/gpu_mla.sh — issue 30 part 4 on the device in one call (carry build-gpu/bundlexz): deepseek2 (multi-head latent
# attention) on CUDA. Logs under /tmp/mla, the tables under $OUT.
#   STAGE=check (default): CUDA against the CPU, exact mode (KLD 0 expected) and the default mode, tiny and lite-tiny
#                          in Q8_0 and Q4_K_M (gpu_check_x.md, gpu_check_d.md);
#   STAGE=speed: the deepseek-v2-lite shape in Q4_K_M: the default mode against the CPU on 2 prompts (gpu_check_lite.md),
#                then pp512 / tg128 against llama-bench (bench/gpu.sh; llama-bench carried in parts into /tmp/lbp first:
#                build-gpu/llama-bin/lb.part00, lb.part01) (gpu_bench.md, results.jsonl). MODELS: more bench/gpu.sh models.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_mla}
STAGE=${STAGE:-check}
mkdir -p "$OUT" /tmp/mla
. bench/gpu_unpack.sh
if [ "$STAGE" = check ]; then
    MODELS=${MODELS:-deepseek2:tiny,deepseek2:lite-tiny}
    TYPES=${TYPES:-Q8_0,Q4_K_M}
    OUT=/tmp/mla/x BUNDLE=build-gpu/bundle python3 bench/gpu_check.py --exact --models "$MODELS" --types "$TYPES" \
        --no-leak > /tmp/mla/x.log 2>&1
    echo "exact rc=$?"; cp /tmp/mla/x/gpu_check.md "$OUT/gpu_check_x.md" 2>/dev/null; tail -15 /tmp/mla/x.log
    OUT=/tmp/mla/d BUNDLE=build-gpu/bundle python3 bench/gpu_check.py --models "$MODELS" --types "$TYPES" --no-leak \
        > /tmp/mla/d.log 2>&1
    echo "default rc=$?"; cp /tmp/mla/d/gpu_check.md "$OUT/gpu_check_d.md" 2>/dev/null; tail -15 /tmp/mla/d.log
    exit 0
fi
if [ "$STAGE" = bisect ]; then # the default mode on the lite shape with the CUDA knobs of $VARIANTS turned on, one by one
    f=/tmp/qr_models_chk/deepseek2-deepseek-v2-lite-Q4_K_M.gguf
    mkdir -p /tmp/qr_models_chk
    [ -f "$f" ] || build-gpu/bundle/quarrel synth --arch deepseek2 --preset deepseek-v2-lite --type Q4_K_M -t "$(nproc)" \
        -o "$f" > /tmp/mla/synth.log 2>&1
    for v in ${VARIANTS:-none QUARREL_CUDA_FUSE=0 QUARREL_CUDA_MOE=old QUARREL_CUDA_ATTN=old QUARREL_CUDA_EXACT=1}; do
        env $( [ "$v" = none ] || echo "$v" ) OUT=/tmp/mla/b MODEL_DIR=/tmp/qr_models_chk BUNDLE=build-gpu/bundle \
            timeout 150 python3 bench/gpu_check.py --models deepseek2:deepseek-v2-lite --types Q4_K_M --prompts 2 \
            --no-gen --no-leak > /tmp/mla/b.log 2>&1
        echo "$v: $(grep '^| deepseek2' /tmp/mla/b.log | head -1)" | tee -a "$OUT/bisect.txt"
    done
    exit 0
fi
if [ "$STAGE" = splits ]; then # decode t/s of the lite shape at each attention split count (QUARREL_CUDA_ATTN_SPLITS)
    f=/tmp/qr_models_chk/deepseek2-deepseek-v2-lite-Q4_K_M.gguf
    mkdir -p /tmp/qr_models_chk
    [ -f "$f" ] || build-gpu/bundle/quarrel synth --arch deepseek2 --preset deepseek-v2-lite --type Q4_K_M -t "$(nproc)" \
        -o "$f" > /tmp/mla/synth.log 2>&1
    for sp in ${SPLITS:-default 1 2 4 8 16 32 nograph}; do
        r=$(env $( [ "$sp" = default ] || { [ "$sp" = nograph ] && echo QUARREL_CUDA_GRAPH=0; } || echo "QUARREL_CUDA_ATTN_SPLITS=$sp" ) build-gpu/bundle/quarrel bench -m "$f" \
            --backend cuda -p 0 -n 64 -r 2 --json 2> /dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["tg_median_tps"])')
        echo "splits $sp: tg64 $r t/s" | tee -a "$OUT/splits.txt"
    done
    exit 0
fi
if [ "$STAGE" = trace ]; then # the default mode on the lite shape, then kernel timelines of decode and prefill
    f=/tmp/qr_models_chk/deepseek2-deepseek-v2-lite-Q4_K_M.gguf
    mkdir -p /tmp/qr_models_chk
    [ -f "$f" ] || build-gpu/bundle/quarrel synth --arch deepseek2 --preset deepseek-v2-lite --type Q4_K_M -t "$(nproc)" \
        -o "$f" > /tmp/mla/synth.log 2>&1
    if [ -z "${NO_CHECK:-}" ]; then # NO_CHECK=1: the timelines only; NO_TG=1: the prefill's only
        OUT=/tmp/mla/l MODEL_DIR=/tmp/qr_models_chk BUNDLE=build-gpu/bundle timeout 240 python3 bench/gpu_check.py \
            --models deepseek2:deepseek-v2-lite --types Q4_K_M --prompts 2 --gen 32 --no-leak > /tmp/mla/l.log 2>&1
        echo "lite check rc=$?"; cp /tmp/mla/l/gpu_check.md "$OUT/gpu_check_lite.md" 2>/dev/null; tail -6 /tmp/mla/l.log
    fi
    T=$PWD/build-gpu/trace/libqrtrace.so
    if [ -z "${NO_TG:-}" ]; then
        CUDA_INJECTION64_PATH=$T QR_TRACE_OUT=/tmp/mla/tg.csv build-gpu/bundle/quarrel bench -m "$f" --backend cuda -p 0 \
            -n 64 -r 1 > /tmp/mla/tg.log 2>&1
        python3 bench/cupti_trace.py /tmp/mla/tg.csv > "$OUT/trace_tg.txt" 2>&1; head -45 "$OUT/trace_tg.txt"
    fi
    CUDA_INJECTION64_PATH=$T QR_TRACE_OUT=/tmp/mla/pp.csv build-gpu/bundle/quarrel bench -m "$f" --backend cuda \
        -p 512 -n 0 -r 2 > /tmp/mla/pp.log 2>&1
    python3 - /tmp/mla/pp.csv > "$OUT/trace_pp.txt" <<'PY'
import collections, csv, sys
rows = list(csv.reader(open(sys.argv[1])))
rows = [r for r in rows if r and r[0].isdigit()]
rows.sort(key=lambda r: int(r[0]))
half = rows[len(rows) // 2:]  # the second repetition
tot = collections.Counter(); cnt = collections.Counter()
for r in half:
    n = ",".join(r[6:])[:90]; tot[n] += int(r[1]) - int(r[0]); cnt[n] += 1
span = (int(half[-1][1]) - int(half[0][0])) / 1e3
print(f"prefill rep: {span:.0f} us wall, kernels {sum(tot.values()) / 1e3:.0f} us")
for n, t in tot.most_common(30): print(f"{t / 1e3:9.1f} us {cnt[n]:6d}  {n}")
gap = collections.Counter(); gcnt = collections.Counter(); end = int(half[0][1]); prev = ",".join(half[0][6:])[:70]
for r in half[1:]:  # idle time before each kernel, by the kernel that ran before it
    g = int(r[0]) - end
    if g > 0:
        gap[prev] += g; gcnt[prev] += 1
    prev = ",".join(r[6:])[:70]; end = max(end, int(r[1]))
print(f"idle between kernels: {sum(gap.values()) / 1e3:.0f} us; by the kernel before the gap:")
for n, t in gap.most_common(12): print(f"{t / 1e3:9.1f} us {gcnt[n]:6d}  {n}")
PY
    head -34 "$OUT/trace_pp.txt"
    exit 0
fi
[ -f /tmp/llama-bench.xz ] || cat /tmp/lbp/lb.part00 /tmp/lbp/lb.part01 > /tmp/llama-bench.xz
if [ "${CHECK_LITE:-1}" = 1 ]; then
    OUT=/tmp/mla/l MODEL_DIR=/tmp/qr_models_chk BUNDLE=build-gpu/bundle timeout 300 python3 bench/gpu_check.py \
        --models deepseek2:deepseek-v2-lite --types Q4_K_M --prompts 2 --gen 32 --no-leak > /tmp/mla/l.log 2>&1
    echo "lite check rc=$?"; cp /tmp/mla/l/gpu_check.md "$OUT/gpu_check_lite.md" 2>/dev/null; tail -8 /tmp/mla/l.log
    mkdir -p /tmp/qr_models
    [ -f /tmp/qr_models_chk/deepseek2-deepseek-v2-lite-Q4_K_M.gguf ] &&
        ln -sf /tmp/qr_models_chk/deepseek2-deepseek-v2-lite-Q4_K_M.gguf /tmp/qr_models/deepseek-v2-lite-Q4_K_M.gguf
fi
LLAMA_BIN=/tmp/llama-bench.xz OUT=/tmp/mla/g STEP_TIMEOUT=200 bash bench/gpu.sh \
    --models "${MODELS:-deepseek-v2-lite:Q4_K_M}" --tests "pp tg" --reps 3 > /tmp/mla/g.log 2>&1
echo "bench rc=$?"; cp /tmp/mla/g/gpu_bench.md /tmp/mla/g/results.jsonl "$OUT/" 2>/dev/null
grep -E 'synth|quarrel .*json|ERROR' /tmp/mla/g.log | cut -c1-400 | tail -20
