#!/usr/bin/env bash
# bench/gpu_profile.sh — per-kernel GPU time of a decode step (device machine, Nsight Compute):
#   bench/gpu_profile.sh MODEL.gguf [N_STEPS]
# Runs `quarrel run -n N_STEPS` on the CUDA backend under ncu (graphs off, so every kernel is its own
# launch), skips the prompt's kernels, and prints the kernels of the last decode steps grouped by name:
# calls per step, total and mean microseconds, share of the step. Writes $OUT/profile_*.csv.
# PROMPT=N (e.g. 512): profile the prefill instead: a prompt of N tokens and one generated token; every
# kernel counts (the one decode step is noise).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=$1
STEPS=${2:-8}
OUT=${OUT:-/tmp/gpu_profile}
BUNDLE=${BUNDLE:-build-gpu/bundle}
mkdir -p "$OUT"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || ls /usr/local/cuda/bin/ncu)
name=$(basename "$MODEL" .gguf)
csv=$OUT/profile_$name.csv
PROMPT=${PROMPT:-0}
if [ "$PROMPT" -gt 0 ]; then
    python3 -c "import json; print(json.dumps([1 + (i * 7919) % 997 for i in range($PROMPT)]))" > "$OUT/profile_prompt.json"
    STEPS=1
else
    echo '[1, 2, 3, 4]' > "$OUT/profile_prompt.json"
fi
QUARREL_CUDA_GRAPH=0 "$NCU" --metrics gpu__time_duration.sum --csv --clock-control none --target-processes all \
    "$BUNDLE/quarrel" run -m "$MODEL" --tokens "$OUT/profile_prompt.json" -n "$STEPS" --temp 0 --ignore-eos --ids-only -q \
    --backend cuda > "$csv" 2> "$OUT/profile_$name.err" || { tail -5 "$OUT/profile_$name.err"; exit 1; }
python3 - "$csv" "$STEPS" "$PROMPT" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; rows = rows[1:]
ki, ni, vi, ui = hdr.index("Kernel Name"), hdr.index("Metric Name"), hdr.index("Metric Value"), hdr.index("Metric Unit")
ids = hdr.index("ID")
ks = []
for r in rows:
    if r[ni] != "gpu__time_duration.sum": continue
    v = float(r[vi].replace(",", ""))
    u = r[ui]
    v = v / 1000.0 if u in ("nsecond", "ns") else (v * 1000.0 if u in ("msecond", "ms") else v)
    ks.append((int(r[ids]), r[ki].split("(")[0][:70], v))
ks.sort()
# the last half of the launches: decode steps only
steps = int(sys.argv[2])
tail = ks[len(ks) // 2:]
n_steps = max(1, steps // 2)
if int(sys.argv[3]) > 0:  # prefill: every kernel, one pass
    tail, n_steps = ks, 1
agg = collections.defaultdict(lambda: [0, 0.0])
for _, k, v in tail:
    agg[k][0] += 1; agg[k][1] += v
tot = sum(a[1] for a in agg.values())
print(f"{len(ks)} kernels profiled; last {len(tail)} ~ {n_steps} decode steps; {tot / n_steps:.1f} us of kernel time per step")
print(f"{'kernel':70s} {'calls/step':>10s} {'us/step':>9s} {'us/call':>8s} {'share':>6s}")
for k, (c, t) in sorted(agg.items(), key=lambda x: -x[1][1]):
    print(f"{k:70s} {c / n_steps:10.1f} {t / n_steps:9.1f} {t / c:8.2f} {100 * t / tot:5.1f}%")
PY
