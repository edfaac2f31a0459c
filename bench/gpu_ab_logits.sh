#!/usr/bin/env bash
# bench/gpu_ab_logits.sh — which CUDA knob changes the decode path's logits (device machine):
#   bench/gpu_ab_logits.sh ARCH PRESET TYPE [N_TOKENS]
# Writes a synth model, takes the CPU's teacher-forced logits, then the GPU's token by token
# (`quarrel logits --ubatch 1`) with every knob on and with each one off (QUARREL_CUDA_FUSE,
# _GRAPH, _PDL, _ACT_REUSE, _ATTN=old); prints mean KLD and top-1 agreement against the CPU for each.
set -euo pipefail
cd "$(dirname "$0")/.."
ARCH=$1 PRESET=$2 TYPE=$3 N=${4:-128}
QR=${BUNDLE:-build-gpu/bundle}/quarrel
T=$(mktemp -d)
m=$T/m.gguf
extra=(); [ "$PRESET" = tiny ] && extra=(--pure)
$QR synth --arch "$ARCH" --preset "$PRESET" --type "$TYPE" "${extra[@]}" -o "$m" > /dev/null
python3 -c "import json,random; random.seed(7); json.dump([random.randint(4, 999) for _ in range($N)], open('$T/p.json','w'))"
$QR logits -m "$m" --tokens "$T/p.json" -o "$T/cpu.npy" --backend cpu 2> /dev/null
run() { env "$@" "$QR" logits -m "$m" --tokens "$T/p.json" -o "$T/$1.npy" --backend cuda --ubatch 1 2> /dev/null; }
for v in "DEFAULT=1" QUARREL_CUDA_FUSE=0 QUARREL_CUDA_GRAPH=0 QUARREL_CUDA_PDL=0 QUARREL_CUDA_ACT_REUSE=0 QUARREL_CUDA_ATTN=old; do
    run "$v" || echo "$v: failed"
done
python3 - "$T" <<'PY'
import sys, glob, os, numpy as np
t = sys.argv[1]
def ls(x):
    x = x.astype(np.float64); m = x.max(-1, keepdims=True); return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))
c = np.load(t + "/cpu.npy"); lc = ls(c)
for f in sorted(glob.glob(t + "/*=*.npy")):
    g = np.load(f); lg = ls(g)
    print(f"{os.path.basename(f)[:-4]:28s} KLD {(np.exp(lc) * (lc - lg)).sum(-1).mean():.3e}  top-1 {100 * (c.argmax(-1) == g.argmax(-1)).mean():.2f}%")
PY
rm -rf "$T"
