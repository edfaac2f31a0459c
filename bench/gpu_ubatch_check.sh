#!/usr/bin/env bash
# bench/gpu_ubatch_check.sh — the decode mat-vecs of 2..8 rows (the batched-decode sizes: --ubatch 2, 3, 4, 8) against
# the CPU on synth tiny models: mean KLD(cpu || cuda) and top-1 agreement over 64 teacher-forced random ids, per
# ubatch; a broken row of a multi-row kernel shows as a KLD far above the 1e-3 of the default mode.
#   carry build-gpu/bundlexz.  OUT=... MODELS="llama:tiny qwen2:tiny gemma2:tiny" TYPES="Q4_K_M Q4_0"
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_ubatch_check}
mkdir -p "$OUT" /tmp/qr_ub
. bench/gpu_unpack.sh
Q=build-gpu/bundle/quarrel
python3 -c 'import json,random; r=random.Random(11); json.dump([r.randrange(5,250) for _ in range(64)], open("/tmp/qr_ub/p.json","w"))'
for spec in ${MODELS:-llama:tiny qwen2:tiny gemma2:tiny}; do
    for ty in ${TYPES:-Q4_K_M Q4_0}; do
        a=${spec%%:*} p=${spec#*:} f=/tmp/qr_ub/$a-$p-$ty.gguf
        [ -f "$f" ] || "$Q" synth --arch "$a" --preset "$p" --type "$ty" --pure -o "$f" > /dev/null 2>&1
        "$Q" logits -m "$f" --tokens /tmp/qr_ub/p.json -o /tmp/qr_ub/cpu.npy --backend cpu 2> /dev/null || continue
        for ub in 2 3 4 8; do
            "$Q" logits -m "$f" --tokens /tmp/qr_ub/p.json -o /tmp/qr_ub/gpu.npy --backend cuda --ubatch $ub 2> /dev/null ||
                { echo "$spec $ty ubatch $ub: logits failed"; continue; }
            python3 -c "
import numpy as np
a=np.load('/tmp/qr_ub/cpu.npy').astype(np.float64); b=np.load('/tmp/qr_ub/gpu.npy').astype(np.float64)
def lsm(x): x=x-x.max(-1,keepdims=True); return x-np.log(np.exp(x).sum(-1,keepdims=True))
pa,pb=lsm(a),lsm(b); kl=(np.exp(pa)*(pa-pb)).sum(-1)
print('$spec $ty ubatch $ub: mean KLD %.3g, top-1 %.1f%%' % (kl.mean(), 100*(a.argmax(-1)==b.argmax(-1)).mean()))"
        done
    done
done 2>&1 | tee "$OUT/ubatch.txt"
