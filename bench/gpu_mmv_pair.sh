#!/usr/bin/env bash
# bench/gpu_mmv_pair.sh — the mat-vec's two-rows-a-warp form (QUARREL_CUDA_MMV_PAIR) on and off, in one device call:
# the row-exact verification pass (`quarrel bench --verify K -d 256`, synth mistral-7b Q4_K_M) and batched decode of
# 2..8 sequences (`quarrel bench -np N`), then greedy identity of speculative decoding with it on (n-gram and an
# EAGLE-3 head on synth tinyllama Q4_K_M, against plain greedy), and plain decode's ids with it on and off (the form
# must not change a row's sums). Needs the bundle at $B; writes $OUT/pair.txt.
set -uo pipefail
B=${B:-build-gpu/bundle}
Q=$B/quarrel
OUT=${OUT:-$PWD/out}
M=${M:-/tmp/eagle3_models}
T=$(nproc)
mkdir -p "$OUT" "$M"
R=$OUT/pair.txt
log() { echo "[gpu_mmv_pair $(date +%T)] $*" | tee -a "$R"; }
synth() {
    local f=$1
    shift
    [ -f "$f" ] || "$Q" synth "$@" -t "$T" -o "$f" > "$f.log" 2>&1 || { log "synth $* failed"; return 1; }
}
synth "$M/m7.gguf" --arch llama --preset mistral-7b --type Q4_K_M --seed 1 || exit 1
synth "$M/tl.gguf" --arch llama --preset tinyllama-1.1b --type Q4_K_M --seed 1 || exit 1
synth "$M/tl-head.gguf" --arch eagle3 --preset tinyllama-1.1b --type Q8_0 --seed 2 || exit 1
for rep in 1 2; do
    for pair in 0 1; do
        for k in 1 3 7; do
            QUARREL_CUDA_MMV_PAIR=$pair "$Q" bench -m "$M/m7.gguf" --backend cuda --verify "$k" -d 256 -r 3 \
                > "$OUT/v_${pair}_$k.txt" 2>&1
            log "pair $pair verify $k: $(tail -1 "$OUT/v_${pair}_$k.txt")"
        done
    done
done
for pair in 0 1; do
    for np in 2 4 8; do
        QUARREL_CUDA_MMV_PAIR=$pair "$Q" bench -m "$M/m7.gguf" --backend cuda -p 0 -n 128 -np $np -r 3 \
            > "$OUT/np_${pair}_$np.txt" 2>&1
        log "pair $pair -np $np: $(grep -E '^\|' "$OUT/np_${pair}_$np.txt" | tail -1)"
    done
done
PROMPT="Write a short story about a robot that learns to paint. The robot lives in a small town by the sea and"
REP="one two three four five six seven eight one two three four five six seven eight one two three four five six"
run() { # name prompt extra...
    local n=$1 p=$2
    shift 2
    "$Q" run -m "$M/tl.gguf" -p "$p" -n 128 --temp 0 --ignore-eos --ids-only -q -v --backend cuda -t "$T" "$@" \
        > "$OUT/$n.out" 2> "$OUT/$n.err"
}
QUARREL_CUDA_MMV_PAIR=0 run plain0 "$PROMPT"
run plain1 "$PROMPT"
run e3 "$PROMPT" --spec eagle3 --draft-model "$M/tl-head.gguf" --draft-p-min 0
QUARREL_CUDA_MMV_PAIR=0 run rplain0 "$REP"
run rplain1 "$REP"
run ng "$REP" --spec ngram --spec-ngram 1:4
same() { cmp -s <(tail -1 "$OUT/$1.out") <(tail -1 "$OUT/$2.out") && echo identical || echo DIFFERENT; }
log "plain greedy pair 0 / 1: $(same plain0 plain1); repetitive prompt: $(same rplain0 rplain1)"
log "EAGLE-3 against plain: $(same plain1 e3) ($(grep -o 'speculative: .*' "$OUT/e3.err"))"
log "n-gram against plain: $(same rplain1 ng) ($(grep -o 'speculative: .*' "$OUT/ng.err"))"
