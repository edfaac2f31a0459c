#!/usr/bin/env bash
# bench/gpu_session20.sh — the GPU checks of session 20's merges in one device call (carry build-gpu/bundlexz):
# exact-mode GPU vs CPU logits on the new architectures (olmo2, olmo3, granitemoe, glm4, mistral3 tiny presets),
# the clear refusal of a quantized KV cache on the CUDA backend, and speculative decoding's greedy identity on the GPU
# (n-gram drafts, a synth llama tiny model).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_s20}
mkdir -p "$OUT" build-gpu
. bench/gpu_unpack.sh
B=$PWD/build-gpu/bundle
echo "== exact GPU vs CPU, new architectures"
OUT=$OUT/chkx BUNDLE=$B timeout 240 python3 bench/gpu_check.py --exact \
    --models olmo2:tiny,olmo2:olmo3-tiny,granitemoe:tiny,glm4:tiny,mistral3:tiny --types Q8_0 --no-leak > "$OUT/chkx.log" 2>&1
echo "rc $?"; grep "^|" "$OUT/chkx/gpu_check.md" 2>/dev/null | head -20 || tail -20 "$OUT/chkx.log"
echo "== quantized KV on CUDA"
M=/tmp/qr_s20; mkdir -p $M
"$B/quarrel" synth --arch llama --preset tiny -o $M/tiny.gguf > /dev/null 2>&1
"$B/quarrel" run -m $M/tiny.gguf --backend cuda --cache-type-k q8_0 --cache-type-v q8_0 -p "hello" -n 4 2>&1 | tail -2
echo "== speculative greedy identity on CUDA"
P="one two three four five six one two three four five six one two three"
a=$("$B/quarrel" run -m $M/tiny.gguf --backend cuda -p "$P" -n 48 --temp 0 --ids-only -q 2>/dev/null)
b=$("$B/quarrel" run -m $M/tiny.gguf --backend cuda -p "$P" -n 48 --temp 0 --ids-only -q --spec ngram -v 2>"$OUT/spec.err")
echo "plain: $a"; echo "spec:  $b"; tail -1 "$OUT/spec.err"
[ "$a" = "$b" ] && echo "SPEC GREEDY IDENTICAL" || echo "SPEC GREEDY DIFFERS"
tar czf "$OUT/all.tgz" -C "$OUT" --exclude=all.tgz . 2>/dev/null
