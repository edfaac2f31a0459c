#!/usr/bin/env bash
# bench/gpu_wg.sh — one device call for the wgmma version of the batched-decode K-quant GEMM (matmul_dq.cu):
#  1. the kernel lab's K-quant GEMM section (odd shapes against the CPU oracle and, every row, against the mma.sync
#     version; per-call timings at the mistral-7b shapes: wgmma / mma.sync / f16 cache + cuBLAS), again under each
#     LAB_ENVS setting; Nsight Compute on ffn_up at NCU_ROWS rows (NCU=1);
#  2. bench/gpu_dq.sh's end-to-end part (LAB=0): `quarrel bench --parallel NP` with the kernel for every batch size and
#     without, and bench/gpu_check.py on tiny Q4_K_M / Q6_K models with their prompts' prefill through the kernel.
#   carry build-gpu/bundlexz and build-gpu/labxz (quarrel_cuda_lab built here, cmake --build BUILD --target
#   quarrel_cuda_lab, xz'd); OUT=... NPS="16 64 256" E2E=1 SERVE=0
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_wg}
mkdir -p "$OUT"
log() { echo "[gpu_wg $(date +%T)] $*" | tee -a "$OUT/steps.txt"; }
xz -dc "$(ls build-gpu/labxz/lab.xz build-gpu/labxz/quarrel_cuda_lab.xz 2>/dev/null | head -1)" > /tmp/quarrel_cuda_lab && chmod +x /tmp/quarrel_cuda_lab
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee -a "$OUT/steps.txt"
if [ "${LAB_DEFAULT:-1}" = 1 ]; then # the lab at the defaults
    QUARREL_LAB_DQ_ONLY=1 QUARREL_CUDA_DQ_MAX_ROWS=256 timeout 240 /tmp/quarrel_cuda_lab --only matmul > "$OUT/lab.log" 2>&1
    log "lab rc $?: $(grep -c FAIL "$OUT/lab.log") FAIL lines"
    grep -E "FAIL|wg-vs-mma|us" "$OUT/lab.log" | cut -c1-170 | tee -a "$OUT/steps.txt" | head -120
fi
for envs in ${LAB_ENVS:-}; do # more lab passes, e.g. LAB_ENVS="QUARREL_CUDA_DQ_WG_MT=1 A=1,B=2" (commas: several in one pass)
    lf="$OUT/lab_$(echo "$envs" | tr '=,' '__').log"
    env ${envs//,/ } QUARREL_LAB_DQ_ONLY=1 QUARREL_CUDA_DQ_MAX_ROWS=256 timeout 240 /tmp/quarrel_cuda_lab --only matmul > "$lf" 2>&1
    log "lab $envs rc $?: $(grep -c FAIL "$lf") FAIL lines"
    grep -E "FAIL|wg-vs-mma|us" "$lf" | cut -c1-170 | tee -a "$OUT/steps.txt" | head -120
done
NCUB=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ "${NCU:-1}" = 1 ] && [ -n "$NCUB" ]; then # ffn_up Q4_K at NCU_ROWS rows (default "64 256")
    for r in ${NCU_ROWS:-64 256}; do
        QUARREL_LAB_DQ_ROWS=$r QUARREL_LAB_DQ_ONLY=2 QUARREL_CUDA_DQ_MAX_ROWS=256 timeout 120 "$NCUB" --clock-control none \
            -k regex:${KERNEL:-dq_wg_kernel} --launch-skip 1 --launch-count 1 --section SpeedOfLight --section WarpStateStats \
            --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section Occupancy \
            /tmp/quarrel_cuda_lab --only matmul > "$OUT/ncu_r$r.txt" 2>&1
        grep -vE "^\s*$|----" "$OUT/ncu_r$r.txt" | grep -vE "^==PROF|^matmul" | head -150 > "$OUT/ncu_r${r}_short.txt"
        log "ncu r$r: $(wc -l < "$OUT/ncu_r${r}_short.txt") lines"
    done
fi
if [ "${E2E:-1}" = 1 ]; then
    OUT=$OUT/dq LAB=0 NCU=0 CHECK=1 SERVE=${SERVE:-0} NPS="${NPS:-16 64 256}" bash bench/gpu_dq.sh 2>&1 | tail -40
fi
