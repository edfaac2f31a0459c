#!/usr/bin/env bash
# bench/gpu_moe_buckets.sh — the bucketed expert GEMM (QUARREL_CUDA_MOE default) against one GEMM per expert
# (QUARREL_CUDA_MOE=nobuckets) on an 8-layer cut of the qwen3-30b-a3b preset (128 experts, top 8; synth routing is
# uneven, so the padded batch does not apply): pp512 / tg128 (quarrel bench -r 3, default, nobuckets, default) and
# the logits of 512 random ids both ways (max abs diff, KLD, top-1). carry build-gpu/bundlexz.
set -uo pipefail
cd "$(dirname "$0")/.."
B=build-gpu/bundle
. bench/gpu_unpack.sh
f=/tmp/q3m.gguf
[ -f $f ] || $B/quarrel synth --arch qwen3moe --preset qwen3-30b-a3b --layers 8 --type Q4_K_M -t "$(nproc)" -o $f > /dev/null 2>&1
for m in default nobuckets default; do
    QUARREL_CUDA_MOE=$m $B/quarrel bench -m $f --backend cuda -p 512 -n 128 -r 3 2>&1 | grep -E "pp512|tg128" | sed "s/^/$m /"
done
python3 -c 'import json,random; r=random.Random(3); json.dump([r.randrange(5,150000) for _ in range(512)], open("/tmp/p512.json","w"))'
for m in default nobuckets; do
    QUARREL_CUDA_MOE=$m $B/quarrel logits -m $f --tokens /tmp/p512.json -o /tmp/l_$m.npy --backend cuda 2> /tmp/l_$m.err ||
        tail -3 /tmp/l_$m.err
done
python3 -c "
import numpy as np
a=np.load('/tmp/l_default.npy'); b=np.load('/tmp/l_nobuckets.npy')
def lsm(x): x=x-x.max(-1,keepdims=True); return x-np.log(np.exp(x).sum(-1,keepdims=True))
pa,pb=lsm(a.astype(np.float64)),lsm(b.astype(np.float64))
kl=(np.exp(pb)*(pb-pa)).sum(-1)
print('buckets vs nobuckets: max abs %.3g, mean KLD %.3g, max KLD %.3g, top1 same %.2f%%' % (np.abs(a-b).max(), kl.mean(), kl.max(), 100*(a.argmax(-1)==b.argmax(-1)).mean()))"
