#!/usr/bin/env bash
# bench/gpu_dq_lab.sh — the K-quant batched-decode GEMM cases of the kernel lab only (QUARREL_LAB_DQ_ONLY), for each
# split-K setting in SPLITS (default "0 1 2 4"), plus an Nsight Compute profile of one launch when ncu exists.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_dq_lab}
mkdir -p "$OUT"
OUT=$OUT/lab SECTIONS=matmul timeout 200 bench/cuda_lab.sh --only none > "$OUT/build_run.log" 2>&1
LAB=$(ls build-cuda-lab/tests/cuda/quarrel_cuda_lab build-cuda-direct/quarrel_cuda_lab 2>/dev/null | head -1)
echo "lab binary: $LAB"
for sp in ${SPLITS:-0 1 2 4}; do
    echo "== splits $sp"
    QUARREL_LAB_DQ_ONLY=1 QUARREL_CUDA_DQ_SPLITS=$sp timeout 100 "$LAB" --only matmul ${LAB_ARGS:-} 2>&1 | grep -E "TFLOP|FAIL" | grep -v "^matmul-gemm .* 0.0 " | grep -E "${KEEP:-.}" | head -40
done
if command -v cuobjdump > /dev/null; then
    cuobjdump -sass "$LAB" 2>/dev/null | awk '/Function : .*dq_gemm_kernel.*14ELi8E/{p=1} p&&/Function : /&&!/14ELi8E/{p=0} p' > "$OUT/dq_sass.txt"
    echo "sass dq_gemm<Q4_K,8>: $(wc -l < "$OUT/dq_sass.txt") lines; HMMA $(grep -c HMMA "$OUT/dq_sass.txt") LDS $(grep -c 'LDS' "$OUT/dq_sass.txt") PRMT $(grep -c PRMT "$OUT/dq_sass.txt") HFMA2 $(grep -c HFMA2 "$OUT/dq_sass.txt") BAR $(grep -c BAR "$OUT/dq_sass.txt") LDGSTS $(grep -c LDGSTS "$OUT/dq_sass.txt")"
fi
if command -v ncu > /dev/null || [ -x /usr/local/cuda/bin/ncu ]; then
    NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    QUARREL_LAB_DQ_ONLY=2 timeout 200 "$NCU" -k regex:dq_gemm --launch-skip 1 --launch-count 1 --section SpeedOfLight \
        --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy --section SchedulerStats \
        --section SourceCounters "$LAB" --only matmul --quick > "$OUT/ncu.txt" 2>&1
    grep -vE "^\s*$|----" "$OUT/ncu.txt" | grep -vE "^==PROF|^matmul" | head -150
else
    echo "no ncu"
fi
