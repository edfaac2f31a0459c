#!/usr/bin/env bash
# bench/gpu_mvd.sh — the dense decode mat-vec probe (bench/mvd_probe.cu) on the GPU machine, at the FFN shapes of
# qwen2.5-7b, gemma2-9b and qwen3-8b, then (NCU=1) Nsight Compute on the engine's fused gate/up kernel and the
# probe's best variants. carry build-gpu/probe (a probe binary built here with the command in mvd_probe.cu's header)
# or let it build. OUT=... SHAPES="3584:18944 ..." NCU=1
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_mvd}
mkdir -p "$OUT"
[ -f build-gpu/probe/mvd_probe.xz ] && xz -dc build-gpu/probe/mvd_probe.xz > /tmp/mvd_probe_c && chmod +x /tmp/mvd_probe_c
P=/tmp/mvd_probe_c
if ! [ -x "$P" ] || ! "$P" 256 256 > /dev/null 2>&1; then
    P=/tmp/mvd_probe
    nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -Isrc -o "$P" bench/mvd_probe.cu 2> "$OUT/build.log" || { tail "$OUT/build.log"; exit 1; }
fi
if [ "${SASS:-0}" = 1 ] && command -v cuobjdump > /dev/null; then # instruction mix of each kernel (SASS lines by opcode)
    cuobjdump -sass "$P" > "$OUT/sass.txt" 2>&1
    python3 - "$OUT/sass.txt" <<'PY' > "$OUT/sass_mix.txt"
import re, sys, collections
fn, cnt = None, collections.OrderedDict()
for line in open(sys.argv[1]):
    m = re.match(r"\s+Function : (\S+)", line)
    if m: fn = m.group(1); cnt[fn] = collections.Counter(); continue
    m = re.match(r"\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", line)
    if m and fn: cnt[fn][m.group(1)] += 1
for f, c in cnt.items():
    if "glu_" in f or "matvec_multi_kernelI6TQ45_KILb0EELi1ELi1ELi0" in f:
        print(sum(c.values()), f, " ".join("%s:%d" % kv for kv in c.most_common(14)))
PY
    cat "$OUT/sass_mix.txt"
fi
for s in ${SHAPES:-3584:18944 3584:14336 4096:12288}; do
    echo "== d_model ${s%%:*} n_ff ${s#*:}"
    "$P" "${s%%:*}" "${s#*:}"
done 2>&1 | tee "$OUT/mvd.txt"
if [ "${NCU:-0}" = 1 ]; then
    NCUB=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
    [ -n "$NCUB" ] || { echo "no ncu"; exit 0; }
    MVD_ONCE=1 timeout 300 "$NCUB" --kernel-name regex:"${NCU_KERNELS:-matvec|glu_}" --launch-count "${NCU_COUNT:-40}" \
        --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
        "$P" 3584 18944 > "$OUT/ncu.txt" 2>&1
    grep -E "matvec|glu_|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers|Stall|Issue Slots|Warp Cycles|ERR|Eligible|No Eligible" "$OUT/ncu.txt" | head -150
fi
