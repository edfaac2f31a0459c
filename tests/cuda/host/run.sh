#!/usr/bin/env bash
# tests/cuda/host/run.sh — host-side checks of the CUDA backend's device code (no GPU needed): the
# block decoders of quant_dev.cuh (check_quant) and the attention kernels (check_attention), both
# against the CPU scalar oracle. Needs g++ (C++20), the CUDA headers, and a build directory with the
# quant, util and backend_cpu objects (default build-cuda; BUILD=... to change).
#   tests/cuda/host/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
BUILD=${BUILD:-build-cuda}
CUDA=${CUDA_HOME:-/usr/local/cuda}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
python3 - "$T" <<'PY'
import sys
t = sys.argv[1]
s = open('src/backend/cuda/dequant.cu').read()
a, b = s.index('#define PD('), s.index('extern "C" bool qr_cuda_type_supported')
open(t + '/pd.inc', 'w').write(s[a:b].replace('extern "C" cuda_plane_desc', 'cuda_plane_desc'))
s = open('src/backend/cuda/attention.cu').read()
a = s.index('template <bool F16>\nstatic __device__ __forceinline__ float kv_load')
b = s.index('template <int DPL, int GMAX>\nstatic cudaError_t launch_attn')
k = s[a:b].replace('extern __shared__ float smem[];', 'float *smem = smem_buf;').replace('static __global__ void', 'static void')
open(t + '/attn_kernel.inc', 'w').write(k)
PY
objs=$(ls $BUILD/CMakeFiles/qr_quant.dir/src/quant/*.o $BUILD/CMakeFiles/qr_util.dir/src/util/*.o)
cpu=$(ls $BUILD/CMakeFiles/qr_backend_cpu.dir/src/backend/cpu/*.o)
flags="-std=c++20 -O1 -D__device__= -D__global__= -I$T -Itests/cuda/host -I$CUDA/include -Iinclude -Isrc"
g++ $flags -include shim.h tests/cuda/host/check_quant.cpp $objs -lm -lpthread -o "$T/check_quant" 2>&1 | grep -v warning || true
g++ $flags tests/cuda/host/check_attention.cpp $cpu $objs -lm -lpthread -o "$T/check_attention" 2>&1 | grep -v warning || true
"$T/check_quant"
rc=0
for a in "9 3 64 64 16 0 0 1 1" "9 3 64 64 16 0 0 1 3" "4 4 20 12 7 0 5 0 4" "6 2 33 33 5 9 0 1 3" \
         "4 1 256 256 32 20 0 1 2" "8 1 512 512 16 0 0 1 2" "28 4 128 128 16 0 30 1 5"; do
    "$T/check_attention" $a || rc=1
done
LEN=9 "$T/check_attention" 32 8 128 128 16 0 0 1 40 || rc=1
exit $rc
