#!/usr/bin/env bash
# bench/gpu_ab_logits2.sh — bit-identity of CUDA logits with a knob on and off (a fused op against the plain ops it
# stands for): for each "arch:preset" in MODELS (synth, TYPE), `quarrel logits` of 64 random ids teacher-forced and
# token by token (--ubatch 1: the decode graphs), default against KNOB (e.g. QUARREL_CUDA_POST_NORM=0); prints
# equal / the max abs diff. carry build-gpu/bundlexz.  OUT=... MODELS="gemma2:tiny" TYPE=Q8_0 KNOB=...
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_ab_logits2}
mkdir -p "$OUT" /tmp/qr_ab
. bench/gpu_unpack.sh
Q=build-gpu/bundle/quarrel
python3 -c 'import json,random; r=random.Random(7); json.dump([r.randrange(5,250) for _ in range(64)], open("/tmp/qr_ab/p.json","w"))'
for spec in ${MODELS:-gemma2:tiny}; do
    a=${spec%%:*} p=${spec#*:}
    f=/tmp/qr_ab/$a-$p-${TYPE:-Q8_0}.gguf
    [ -f "$f" ] || "$Q" synth --arch "$a" --preset "$p" --type "${TYPE:-Q8_0}" --pure -o "$f" > /dev/null 2>&1
    for ub in 64 1; do
        rm -f /tmp/qr_ab/a.npy /tmp/qr_ab/b.npy
        "$Q" logits -m "$f" --tokens /tmp/qr_ab/p.json -o /tmp/qr_ab/a.npy --backend cuda --ubatch $ub 2> /tmp/qr_ab/a.err ||
            { echo "$spec ubatch $ub: logits failed: $(tail -3 /tmp/qr_ab/a.err)" | tee -a "$OUT/ab.txt"; continue; }
        env ${KNOB:-QUARREL_CUDA_FUSE=0} "$Q" logits -m "$f" --tokens /tmp/qr_ab/p.json -o /tmp/qr_ab/b.npy --backend cuda \
            --ubatch $ub 2> /tmp/qr_ab/b.err ||
            { echo "$spec ubatch $ub ${KNOB:-}: logits failed: $(tail -3 /tmp/qr_ab/b.err)" | tee -a "$OUT/ab.txt"; continue; }
        python3 -c "
import numpy as np; a=np.load('/tmp/qr_ab/a.npy'); b=np.load('/tmp/qr_ab/b.npy')
print('$spec ubatch $ub ${KNOB:-}:', 'equal' if np.array_equal(a,b) else 'max abs diff %.3g' % np.abs(a-b).max())" \
            | tee -a "$OUT/ab.txt"
    done
done
