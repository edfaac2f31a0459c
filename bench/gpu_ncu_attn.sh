#!/usr/bin/env bash
# bench/gpu_ncu_attn.sh — Nsight Compute (full set) on a batched decode attention kernel in the lab's batched decode
# cases alone (QUARREL_LAB_ATTN_BATCHED=1: 64 and 256 sequences, the tensor-core kernel and the flash-decoding one):
# KERNEL (a regex; default attn_dec_fused, the flash-decoding kernel; attn_dec_mma the tensor-core one), SKIP launches
# of it skipped first (default 2: session 36 got the 256-sequence case). carry build-gpu/labxz;
#   OUT=$OUT bash bench/gpu_ncu_attn.sh
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_ncu_attn}; mkdir -p "$OUT"
set -uo pipefail
xz -dc build-gpu/labxz/lab.xz > /tmp/qr_lab && chmod +x /tmp/qr_lab
NCUB=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCUB"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
QUARREL_LAB_ATTN_BATCHED=1 timeout 200 /tmp/qr_lab --only attention 2>&1 | grep -E "seqs|summary"
QUARREL_LAB_ATTN_BATCHED=1 timeout 300 $NCUB --clock-control none -k regex:${KERNEL:-attn_dec_fused} --launch-skip ${SKIP:-2} --launch-count 1 \
  --set full /tmp/qr_lab --only attention > $OUT/ncu64.txt 2>&1
grep -vE "^\s*$|----|^==PROF|^attention" $OUT/ncu64.txt | grep -E "Duration|Throughput|Busy|Hit Rate|Registers|Occupancy|Warp Cycles|Eligible|Issued|Active Warps|Block Limit|L1/TEX|L2|DRAM|Stall|stall|Sectors|Wavefronts|Grid Size|Bandwidth|Pipe" | head -80
grep -iE "^\s+(The|This|On average|Uncoalesced|Est)" $OUT/ncu64.txt | head -30
