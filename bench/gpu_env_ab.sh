#!/usr/bin/env bash
# bench/gpu_env_ab.sh — one device call: `quarrel bench --parallel NP -p P -n N -r R --checksum` on a synth
# mistral-7b Q4_K_M under each setting of CASES (space-separated; each a comma-separated list of VAR=value, "-" for
# the defaults), the cases alternating inside each (NP, P); prints tg medians, step ms and the argmax checksum.
#   carry build-gpu/bundlexz; OUT=$OUT NPS="64 256" PS="128 512" CASES="- QUARREL_CUDA_ATTN_SPLITS=2" bash bench/gpu_env_ab.sh
# LAB=SECTION (with build-gpu/labxz carried) first runs that section of the kernel lab (`--only SECTION`), under LAB_ENV
# (VAR=value ..., e.g. a knob that is off by default) where given. NCU=1: see below. NPS="" skips the benchmark.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_env_ab}
mkdir -p "$OUT"
. bench/gpu_unpack.sh
B=$PWD/build-gpu/bundle
log() { echo "[env_ab $(date +%T)] $*" | tee -a "$OUT/steps.txt"; }
if [ -n "${LAB:-}" ] && [ -f build-gpu/labxz/lab.xz ]; then
    xz -dc build-gpu/labxz/lab.xz > /tmp/qr_lab && chmod +x /tmp/qr_lab
    for sec in $LAB; do
        env ${LAB_ENV:-} LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} timeout 400 /tmp/qr_lab --only "$sec" \
            > "$OUT/lab_$sec.log" 2>&1
        log "lab $sec rc $?: $(grep -c FAIL "$OUT/lab_$sec.log") FAIL lines"
        grep -E "${LAB_GREP:-FAIL|summary|passed}" "$OUT/lab_$sec.log" | head -${LAB_LINES:-30} | tee -a "$OUT/steps.txt"
    done
fi
# NCU=1 (with build-gpu/labxz): Nsight Compute on the lab's one timed batched-decode shape (ffn_up, NCU_ROWS rows,
# default 64) under each setting of NCU_ENVS (space-separated cases as CASES; default "-"): speed of light, memory
# workload (L2 and DRAM throughput), warp states and scheduler statistics of version 6 (KERNEL, default dq_wr_kernel).
if [ "${NCU:-0}" = 1 ] && [ -f build-gpu/labxz/lab.xz ]; then
    [ -x /tmp/qr_lab ] || { xz -dc build-gpu/labxz/lab.xz > /tmp/qr_lab && chmod +x /tmp/qr_lab; }
    NCUB=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    j=0
    for c in ${NCU_ENVS:--}; do
        envs=$([ "$c" = - ] && echo "" || echo "${c//,/ }")
        j=$((j + 1))
        env $envs QUARREL_LAB_DQ_ONLY=2 QUARREL_LAB_DQ_ROWS=${NCU_ROWS:-64} LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} \
            timeout 200 "$NCUB" --clock-control none -k "regex:${KERNEL:-dq_wr_kernel}" --launch-skip 2 --launch-count 1 \
            --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
            /tmp/qr_lab --only matmul > "$OUT/ncu_$j.txt" 2>&1
        log "ncu $c rc $?"
        grep -vE "^\s*$|----|^==PROF|^matmul" "$OUT/ncu_$j.txt" | grep -E "Throughput|Duration|Busy|Stall|Issued|Eligible|Hit|L2|DRAM|Cycles" | head -40 | tee -a "$OUT/steps.txt"
    done
fi
f=/tmp/qr_models/mistral-7b-Q4_K_M.gguf
mkdir -p /tmp/qr_models
[ -f "$f" ] || [ -z "${NPS-64}" ] || "$B/quarrel" synth --arch llama --preset mistral-7b --type Q4_K_M -t "$(nproc)" -o "$f" > "$OUT/synth.log" 2>&1
i=0
for np in ${NPS-64}; do
    for p in ${PS:-128}; do
        for c in ${CASES:--}; do
            envs=$([ "$c" = - ] && echo "" || echo "${c//,/ }")
            i=$((i + 1))
            env $envs timeout 200 "$B/quarrel" bench -m "$f" --backend cuda --parallel "$np" -p "$p" -n "${N:-256}" \
                -r "${R:-2}" --checksum --json > "$OUT/b$i.json" 2> "$OUT/b$i.err"
            log "np $np p $p $c: $(grep -o '"tg_median_tps": [0-9.]*\|"tg_step_median_ms": [0-9.]*' "$OUT/b$i.json" | tr '\n' ' ') $(grep -o 'checksum [0-9a-f]*' "$OUT/b$i.err")"
            # one file for all runs (the device tool brings back a limited number of files)
            { echo "== run $i: np $np p $p $c"; cat "$OUT/b$i.json"; tail -5 "$OUT/b$i.err"; } >> "$OUT/runs.txt"
            rm -f "$OUT/b$i.json" "$OUT/b$i.err"
        done
    done
done
