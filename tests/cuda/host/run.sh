#!/usr/bin/env bash
# tests/cuda/host/run.sh — host-side checks of the CUDA backend's device code (no GPU needed): the
# block decoders of quant_dev.cuh (check_quant) and the attention kernels (check_attention), both
# against the CPU scalar oracle, and the exact mode's arithmetic (check_exact, bit for bit against the
# AVX2 CPU kernels). Needs g++ (C++20), the CUDA headers, and a build directory with the
# quant, util, backend and backend_cpu objects (default build-cuda; BUILD=... to change).
#   tests/cuda/host/run.sh          # all four (~8 min on 2 cores: the decode and scan checks emulate CTAs with threads)
#   tests/cuda/host/run.sh fast     # check_quant, check_exact, the chunked and the exact scans, the int8 mma expert
#                                   # kernel, the decode expert mat-vecs' forms incl. Q4_K / Q5_K (check_mmv_id), the flash attention,
#                                   # the quantized KV cache's kernels (check_kvq) and the fused norms / mla_prep /
#                                   # GEMM attention softmax against the plain kernels (check_norm) (~2-3 min; `make test`)
#   tests/cuda/host/run.sh quant    # check_quant only (seconds)
#   tests/cuda/host/run.sh decode_mma # check_attention_decode MMA=1 only (the tensor-core batched decode attention)
#   tests/cuda/host/run.sh norm     # check_norm only (fused norms, rope forms, GLUs)
set -euo pipefail
ONLY=${1:-all}
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
try:
    s = open('src/backend/cuda/attention.cu').read()
    a = s.index('template <bool F16>\nstatic __device__ __forceinline__ float kv_load')
    b = s.index('template <int DPL, int GMAX>\nstatic cudaError_t launch_attn')
    k = s[a:b].replace('extern __shared__ float smem[];', 'float *smem = smem_buf;').replace('static __global__ void', 'static void')
    open(t + '/attn_kernel.inc', 'w').write(k)
    s = open('src/backend/cuda/attention_decode.cu').read()
    a = s.index('#include <stdint.h>')
    b = s.index('template <int D, int G>\nstatic cudaError_t launch_dec')
    dev = open('src/backend/cuda/attention_dev.cuh').read()  # the helpers the kernels share (session 5)
    open(t + '/attn_decode_kernel.inc', 'w').write((dev + s[a:b]).replace('static __global__ void', 'static void'))
    s = open('src/backend/cuda/ssm.cu').read()
    a, b = s.index('static __device__ __forceinline__ float softplus_dev'), s.index('/* Thread t = h * head_dim + i')
    c, d = s.index('#define SSD_Q 64'), s.index('template <int N>\nstatic cudaError_t launch_ssd')
    k = (s[a:b] + s[c:d]).replace('extern __shared__ __align__(16) float sm[];', 'float *sm = g_ssd_smem;')
    open(t + '/ssd_kernel.inc', 'w').write(k.replace('static __global__ void', 'static void'))
    s = open('src/backend/cuda/exact.cu').read()  # the exact mode's recurrent scan (check_ssd: bit for bit)
    a, b = s.index('static __global__ void qx_ssm_scan_kernel'), s.index('/* Thread per (row, group): t = silu(z) y')
    open(t + '/exact_scan_kernel.inc', 'w').write(s[a:b].replace('static __global__ void', 'static void'))
    s = open('src/backend/cuda/matmul_mma.cu').read()
    a, b = s.index('#define MMQ_THREADS'), s.index('#define MMQ_TYPES')
    c, d = s.index('/* Shared-memory layout of one stage'), s.index('template <class T, int NT>\nstatic cudaError_t launch_mmq')
    k = (s[a:b] + s[c:d]).replace('extern __shared__ __align__(16) uint8_t sm[];', 'uint8_t *sm = g_mmq_smem;')
    open(t + '/mma_kernel.inc', 'w').write(k.replace('static __global__ void', 'static void'))
    s = open('src/backend/cuda/matmul_q.cu').read()  # the decode expert mat-vecs (check_mmv_id: forms bit for bit)
    cuts = [('template <class T, int NR> struct mmv_unroll', '/* ---- activation quantizers'),
            ('/* The partial dot products of one output row', '/* Writes row `row` of y'),
            ('/* Activation row t of a prepared view', 'template <class T>\nstatic cudaError_t launch_matvec_id('),
            ('/* The down + combine kernels\' epilogue', '/* The types small experts ship in')]
    k = '#define MMV_THREADS 128\n' + ''.join(s[s.index(a):s.index(b, s.index(a))] for a, b in cuts)
    open(t + '/mmv_id_kernel.inc', 'w').write(k.replace('static __global__ void', 'static void'))
    s = open('src/backend/cuda/attention_flash.cu').read()  # the tensor-core flash attention (check_flash)
    a, b = s.index('#define FA_THREADS'), s.index('template <int D, int BN, int MT, int ST, int KQ = 0>\nstatic cudaError_t launch_flash')
    c, d = s.index('extern "C" int32_t qr_cuda_attn_flash_rows'), s.index('extern "C" cudaError_t qr_cuda_attention_flash')
    k = (s[a:b] + s[c:d]).replace('extern __shared__ __align__(16) __half fsm[];', '__half *fsm = g_fa_smem;')
    open(t + '/flash_kernel.inc', 'w').write(k.replace('static __global__ void', 'static void').replace('extern "C" ', ''))
    s = open('src/backend/cuda/attention_decode_mma.cu').read()  # batched decode on tensor cores (check_attention_decode MMA=1)
    a, b = s.index('#define DM_WARPS'), s.index('extern "C" bool qr_cuda_attn_decode_mma_supported')
    k = s[a:b].replace('static __global__ void', 'static void')  # after attn_decode_kernel.inc (its helpers)
    open(t + '/decode_mma_kernel.inc', 'w').write(k.replace('__launch_bounds__(DM_WARPS * 32, 4)', ''))
    s = open('src/backend/cuda/kv_quant.cu').read()  # the quantized KV cache's kernels (check_kvq)
    cuts = [('/* ---- store ---- */', 'extern "C" cudaError_t qr_cuda_kvq_store('),
            ('/* ---- the transform of q', 'extern "C" cudaError_t qr_cuda_fwht('),
            ('/* ---- attention ---- */', 'template <int D, int G>\nstatic cudaError_t launch_kvq')]
    k = ''.join(s[s.index(a):s.index(b, s.index(a))] for a, b in cuts)
    open(t + '/kvq_kernel.inc', 'w').write(k.replace('static __global__ void', 'static void'))
    s = open('src/backend/cuda/norm.cu').read()  # the decode norms (check_norm)
    a, b = s.index('#define NORM_U'), s.index('/* y = (x - mean) / sqrt(var + eps)')
    open(t + '/norm_kernel.inc', 'w').write(s[a:b].replace('static __global__ void', 'static void'))
    s = open('src/backend/cuda/elementwise.cu').read()  # ew_kernel and the GLU that writes f16 activations (check_norm)
    cuts = [('template <int K, bool VEC>', 'template <int K>\nstatic cudaError_t launch_ew'),
            ('/* ---- a GLU that also writes', 'extern "C" cudaError_t qr_cuda_glu_f16')]
    k = ''.join(s[s.index(a):s.index(b, s.index(a))] for a, b in cuts)
    open(t + '/ew_kernel.inc', 'w').write(k.replace('static __global__ void', 'static void'))
    s = open('src/backend/cuda/rope.cu').read()  # rope_kernel and deepseek2's mla_prep (check_norm)
    cuts = [('/* Fills cs[2i], cs[2i + 1]', 'extern "C" bool qr_cuda_rope_qk_norm_supported'),
            ('/* One cache value: f16', 'extern "C" cudaError_t qr_cuda_mla_prep(')]
    k = ''.join(s[s.index(a):s.index(b, s.index(a))] for a, b in cuts)
    k = k.replace('extern __shared__ float cs[];', 'float *cs = g_rope_smem;')
    open(t + '/rope_kernel.inc', 'w').write(k.replace('static __global__ void', 'static void'))
    s = open('src/backend/cuda/attention_gemm.cu').read()  # the GEMM attention's softmax (check_norm)
    a, b = s.index('/* Row i of s ('), s.index('extern "C" cudaError_t qr_cuda_attn_softmax')
    open(t + '/softmax_kernel.inc', 'w').write(s[a:b].replace('static __global__ void', 'static void'))
except ValueError:  # the attention / ssm / mma sources moved on: the extraction below needs updating
    open(t + '/attn_stale', 'w').write('')
PY
objs=$(ls $BUILD/CMakeFiles/qr_quant.dir/src/quant/*.o $BUILD/CMakeFiles/qr_util.dir/src/util/*.o)
cpu=$(ls $BUILD/CMakeFiles/qr_backend.dir/src/backend/*.o $BUILD/CMakeFiles/qr_backend_cpu.dir/src/backend/cpu/*.o)
flags="-std=c++20 -O1 -D__device__= -D__global__= -I$T -Itests/cuda/host -I$CUDA/include -Iinclude -Isrc"
run_decode_mma() { # batched decode on tensor cores (attention_decode_mma.cu): n_head n_head_kv d block_size window softcap 1 rows
    local r=0
    for a in "32 8 128 16 0 0 1 2" "9 3 64 16 0 0 1 3" "64 8 128 16 0 0 1 1" "32 2 64 16 0 0 1 2" "28 4 128 7 40 30 1 2"; do
        MMA=1 LEN=150 "$T/check_attention_decode" $a || r=1
    done
    MMA=1 LEN=5 "$T/check_attention_decode" 32 8 128 16 0 0 1 1 || r=1            # fewer keys than a chunk: idle warps
    MMA=1 SINKS=1 LEN=70 "$T/check_attention_decode" 64 8 64 16 32 0 1 2 || r=1   # gpt-oss: sinks, window
    return $r
}
if [ "$ONLY" = decode_mma ] || [ "$ONLY" = fast ]; then # the tensor-core batched decode attention (run_decode_mma)
    g++ $flags tests/cuda/host/check_attention_decode.cpp $cpu $objs -lm -lpthread -o "$T/check_attention_decode" 2>&1 | grep -v warning || true
fi
g++ $flags -include shim.h tests/cuda/host/check_quant.cpp $objs -lm -lpthread -o "$T/check_quant" 2>&1 | grep -v warning || true
g++ $flags -ffp-contract=off tests/cuda/host/check_exact.cpp $cpu $objs \
    -lm -lpthread -o "$T/check_exact" 2>&1 | grep -v warning || true
if [ "$ONLY" = decode_mma ]; then
    run_decode_mma
    exit $?
fi
if [ "$ONLY" = norm ]; then # the fused norms, rope forms and GLUs only (check_norm)
    g++ $flags tests/cuda/host/check_norm.cpp $objs -lm -lpthread -o "$T/check_norm" 2>&1 | grep -v warning || true
    "$T/check_norm"
    exit $?
fi
if [ "$ONLY" = quant ]; then
    "$T/check_quant" && "$T/check_exact"
    exit $?
fi
run_ssd() { # the chunked scan (ssm.cu): n_head head_dim n_group d_state rows dt_bias_center (45: softplus(dt) ~ 1e2) [runs]
    local r=0
    for a in "4 64 2 128 200 -3" "2 32 1 64 70 -3" "2 64 2 128 130 45" "3 32 3 64 33 0" "2 64 2 128 150 -3 3" \
             "2 32 1 64 9 0 5"; do
        "$T/check_ssd" $a || r=1
    done
    return $r
}
if [ -e "$T/attn_stale" ]; then
    "$T/check_quant" || exit 1
    echo "ERROR: the host checks of the kernels not built: the kernel text run.sh extracts from attention.cu /" \
        "attention_decode.cu / ssm.cu / exact.cu / matmul_mma.cu / matmul_q.cu / attention_flash.cu / kv_quant.cu moved (update the extraction); only check_quant ran" >&2
    exit 2
fi
g++ $flags tests/cuda/host/check_ssd.cpp $cpu $objs -lm -lpthread -o "$T/check_ssd" 2>&1 | grep -v warning || true
g++ $flags tests/cuda/host/check_mma.cpp $objs -lm -lpthread -o "$T/check_mma" 2>&1 | grep -v warning || true
g++ $flags tests/cuda/host/check_mmv_id.cpp $objs -lm -lpthread -o "$T/check_mmv_id" 2>&1 | grep -v warning || true
g++ $flags tests/cuda/host/check_flash.cpp $cpu $objs -lm -lpthread -o "$T/check_flash" 2>&1 | grep -v warning || true
g++ $flags tests/cuda/host/check_kvq.cpp $cpu $objs -lm -lpthread -o "$T/check_kvq" 2>&1 | grep -v warning || true
g++ $flags tests/cuda/host/check_norm.cpp $objs -lm -lpthread -o "$T/check_norm" 2>&1 | grep -v warning || true
run_kvq() { # the quantized KV cache (kv_quant.cu): n_head n_head_kv d block_size window softcap splits rows; KVQ=q8|q4
    local r=0
    for kq in q8 q4; do
        KVQ=$kq LEN=150 "$T/check_kvq" 32 8 128 16 0 0 3 1 || r=1     # mistral's heads, three key splits
        KVQ=$kq LEN=100 "$T/check_kvq" 9 3 64 16 0 0 1 2 || r=1       # smollm2's heads, one split, two rows
        KVQ=$kq LEN=80 "$T/check_kvq" 8 4 256 32 30 50 2 1 || r=1     # head 256, window, softcap
    done
    KVQ=q8 SINKS=1 LEN=70 "$T/check_kvq" 16 2 64 16 32 0 5 2 || r=1   # gpt-oss: sinks, window, G 8
    KVQ=q4 LEN=5 "$T/check_kvq" 32 8 128 16 0 0 9 1 || r=1           # more splits than keys: empty splits
    return $r
}
run_flash() { # the flash attention kernel (attention_flash.cu): n_head n_head_kv d block_size window softcap rows0 rows1
    local r=0
    for a in "8 2 64 16 0 0 40 9" "32 8 128 16 0 0 20 17" "28 4 128 7 0 30 33 2" "4 4 256 32 0 0 70 1" \
             "6 2 64 16 24 0 50 30"; do
        "$T/check_flash" $a || r=1
    done
    SINKS=1 LEN=90 "$T/check_flash" 16 2 64 16 32 0 25 6 || r=1   # gpt-oss: sinks, window
    LEN=300 "$T/check_flash" 8 8 64 16 0 0 130 0 || r=1            # one run, several key blocks and tiles
    SPLITS=3 LEN=300 "$T/check_flash" 32 8 128 16 0 0 40 9 || r=1  # key splits + the combine kernel
    LEN=300 "$T/check_flash" 32 8 128 16 0 0 1 1 || r=1            # decode rows: two sequences, a row each
    SPLITS=2 LEN=200 "$T/check_flash" 32 8 128 16 0 0 1 1 || r=1   # the same with key splits
    SPLITS=7 SINKS=1 LEN=200 "$T/check_flash" 16 2 64 16 0 0 20 3 || r=1   # more splits than some tiles' blocks, sinks
    SPLITS=2 LEN=200 "$T/check_flash" 4 2 256 16 50 20 30 5 || r=1  # head 256, window, softcap
    MT=1 "$T/check_flash" 32 8 128 16 0 0 20 17 || r=1                 # one m16 tile a warp
    MT=1 SPLITS=2 SINKS=1 "$T/check_flash" 6 2 64 16 24 0 50 30 || r=1
    STAGES=2 LEN=300 "$T/check_flash" 32 8 128 16 0 0 40 9 || r=1   # the two-stage pipeline form
    KVQ=q8 "$T/check_flash" 32 8 128 16 0 0 40 9 || r=1                # a quantized cache (kv_quant.cuh)
    KVQ=q4 MT=1 SPLITS=2 LEN=200 "$T/check_flash" 6 2 64 16 24 0 50 30 || r=1
    KVQ=q8 SPLITS=2 LEN=200 "$T/check_flash" 4 2 256 16 50 20 30 5 || r=1
    return $r
}
if [ "$ONLY" = fast ]; then
    "$T/check_quant" && "$T/check_exact" && run_ssd && "$T/check_mma" && "$T/check_mma" 2880 256 && "$T/check_mmv_id" && run_flash &&
        run_kvq && "$T/check_norm" && run_decode_mma
    exit $?
fi
g++ $flags tests/cuda/host/check_attention.cpp $cpu $objs -lm -lpthread -o "$T/check_attention" 2>&1 | grep -v warning || true
[ -x "$T/check_attention_decode" ] || g++ $flags tests/cuda/host/check_attention_decode.cpp $cpu $objs -lm -lpthread \
    -o "$T/check_attention_decode" 2>&1 | grep -v warning || true

"$T/check_quant"
rc=0
"$T/check_exact" || rc=1
for a in "9 3 64 64 16 0 0 1 1" "9 3 64 64 16 0 0 1 3" "4 4 20 12 7 0 5 0 4" "6 2 33 33 5 9 0 1 3" \
         "4 1 256 256 32 20 0 1 2" "8 1 512 512 16 0 0 1 2" "28 4 128 128 16 0 30 1 5"; do
    "$T/check_attention" $a || rc=1
done
LEN=9 "$T/check_attention" 32 8 128 128 16 0 0 1 40 || rc=1
# multi-head latent attention (deepseek2): one kv head of 576 (kv_lora 512 + rope 64), values its first 512, 16 heads
LEN=12 "$T/check_attention" 16 1 576 512 16 0 0 1 1 || rc=1
LEN=12 "$T/check_attention" 16 1 576 512 16 0 0 1 16 || rc=1
LEN=20 "$T/check_attention" 4 1 160 128 16 0 0 1 3 || rc=1
# flash-decoding (attention_decode.cu): n_head n_head_kv d block_size window softcap splits rows
for a in "32 8 128 16 0 0 3 1" "32 8 128 16 0 0 1 2" "9 3 64 16 0 0 5 1" "32 4 64 32 0 0 4 3" \
         "8 4 256 16 100 50 3 1" "4 1 256 32 0 0 2 1" "28 4 128 7 0 30 6 1" "40 8 128 16 0 0 2 1"; do
    "$T/check_attention_decode" $a || rc=1
done
LEN=5 "$T/check_attention_decode" 32 8 128 16 0 0 9 1 || rc=1   # more splits than keys: empty splits
LEN=60 "$T/check_attention_decode" 9 3 64 16 0 0 1 40 || rc=1   # a prefill-like pass (40 rows)
LEN=50 "$T/check_attention_decode" 32 8 128 16 20 0 2 30 || rc=1
SINKS=1 LEN=70 "$T/check_attention_decode" 64 8 64 16 32 0 3 2 || rc=1   # gpt-oss: sinks, window
run_ssd || rc=1
"$T/check_mma" || rc=1
"$T/check_mma" 2880 256 || rc=1   # gpt-oss rows: 90 blocks, a partial last stage
"$T/check_mmv_id" || rc=1
run_flash || rc=1
run_kvq || rc=1
"$T/check_norm" || rc=1
run_decode_mma || rc=1
exit $rc
