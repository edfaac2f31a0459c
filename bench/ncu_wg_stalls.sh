#!/usr/bin/env bash
# bench/ncu_wg_stalls.sh — one device call: Nsight Compute's stall reasons (cycles per issued instruction), tensor-pipe
# activity and instruction mix of matmul_dq.cu's wgmma kernel on the lab's ffn_up Q4_K case (14336 x 4096) at ROWS rows.
#   carry build-gpu/labxz (quarrel_cuda_lab built here, xz'd); OUT=... ROWS=64 KERNEL=dq_wg_kernel (or dq_ws_kernel, with
#   QUARREL_CUDA_DQ_WG=ss)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ncu_wg}
mkdir -p "$OUT"
xz -dc "$(ls build-gpu/labxz/lab.xz build-gpu/labxz/quarrel_cuda_lab.xz 2>/dev/null | head -1)" > /tmp/lab && chmod +x /tmp/lab
NCUB=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
r=${ROWS:-64}
QUARREL_LAB_DQ_ROWS=$r QUARREL_LAB_DQ_ONLY=2 QUARREL_CUDA_DQ_MAX_ROWS=256 timeout 200 "$NCUB" --clock-control none \
    -k regex:${KERNEL:-dq_wg_kernel} --launch-skip 1 --launch-count 1 --metrics \
    "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__pipe_tensor.*cycles_active\.avg\.pct_of_peak_sustained_active,regex:smsp__inst_executed_pipe_.*\.sum$,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum" \
    /tmp/lab --only matmul > "$OUT/ncu_m$r.txt" 2>&1
grep -E "stalled|pipe|inst_exec|bank|wavefront" "$OUT/ncu_m$r.txt" | awk '$NF != "0" && $NF != "0.00"' | head -80
