#!/usr/bin/env bash
# bench/gpu_flash_decode.sh — batched decode attention through the flash kernel (QUARREL_CUDA_ATTN_FLASH_DECODE=1)
# against the default flash-decoding kernels, on the GPU machine in one device call (issue 29):
#  1. the lab's attention section (its "decode 64 seqs" / "decode 256 seqs" lines: both forms against the CPU
#     oracle, timed);
#  2. synth mistral-7b Q4_K_M, `quarrel bench --parallel NP -p P -n 256 -r 2 --checksum` both ways (tg medians,
#     step ms; the argmax checksums agree only where no near-tie flips);
#  3. SERVE=1: bench/serve_bench.py at CONC both ways (quarrel only, REPS rounds).
#   carry build-gpu/bundlexz and build-gpu/labxz (lab.xz); then OUT=$OUT bash bench/gpu_flash_decode.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_flash_decode}
mkdir -p "$OUT" build-gpu
log() { echo "[flash_decode $(date +%T)] $*" | tee -a "$OUT/steps.txt" >&2; }
[ -d build-gpu/bundle ] || tar -C build-gpu -xJf build-gpu/bundlexz/bundle.tar.xz
Q=$PWD/build-gpu/bundle/quarrel
if [ "${LAB:-1}" != 0 ] && [ -f build-gpu/labxz/lab.xz ]; then
    xz -dc build-gpu/labxz/lab.xz > /tmp/qr_lab && chmod +x /tmp/qr_lab
    LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} timeout 400 /tmp/qr_lab --only attention > "$OUT/lab_attn.log" 2>&1
    log "lab attention rc $?: $(grep -c FAIL "$OUT/lab_attn.log") FAIL lines"
    grep -E "decode (64|256) seqs|summary" "$OUT/lab_attn.log" | head -6 | tee -a "$OUT/steps.txt"
fi
M=/tmp/qr_models/mistral-7b-Q4_K_M.gguf
mkdir -p /tmp/qr_models
[ -f $M ] || { "$Q" synth --arch llama --preset mistral-7b --type Q4_K_M -t "$(nproc)" -o $M.tmp > "$OUT/synth.log" 2>&1 && mv $M.tmp $M; }
for np in ${NPS:-64 256}; do
    for p in ${PS:-128 512}; do
        for fd in 0 1; do
            QUARREL_CUDA_ATTN_FLASH_DECODE=$fd timeout 150 "$Q" bench -m $M --backend cuda --parallel "$np" -p "$p" -n 256 \
                -r 2 --checksum --json > "$OUT/b_${np}_${p}_$fd.json" 2> "$OUT/b_${np}_${p}_$fd.err"
            log "np $np p $p flash_decode $fd: $(grep -o '"tg_median_tps": [0-9.]*\|"tg_step_median_ms": [0-9.]*' \
                "$OUT/b_${np}_${p}_$fd.json" | tr '\n' ' ') $(grep -o 'checksum [0-9a-f]*' "$OUT/b_${np}_${p}_$fd.err")"
        done
    done
done
if [ "${SERVE:-0}" = 1 ]; then
    for fd in 0 1; do
        mkdir -p "$OUT/logs_$fd"
        QUARREL_CUDA_ATTN_FLASH_DECODE=$fd QUARREL_HOST_PROF=1 timeout 300 python3 bench/serve_bench.py --quarrel "$Q" \
            --model $M --concurrency "${CONC:-64,256}" --prompt-tokens 128 --max-tokens 256 --reps "${REPS:-2}" \
            --backend cuda --json "$OUT/serve_$fd.json" --log-dir "$OUT/logs_$fd" > "$OUT/serve_$fd.md" 2> "$OUT/serve_$fd.err"
        log "serve_bench flash_decode $fd rc $?"
        grep -E "output tok|TPOT ms" "$OUT/serve_$fd.md" | tee -a "$OUT/steps.txt"
    done
fi
