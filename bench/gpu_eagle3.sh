#!/usr/bin/env bash
# bench/gpu_eagle3.sh — EAGLE-3 speculative decoding on the GPU (issue 34), in one device call:
#   1. the target side: the captured layer inputs of `quarrel logits --capture-layers` on CUDA against the CPU, at
#      micro-batches of 1, 4 and 64 rows (synth tinyllama-1.1b Q4_K_M);
#   2. the head on CUDA: with QUARREL_SPEC_TRACE=1 every draft is printed; the CUDA run's drafts against the CPU run's
#      (same target, same head: equal tokens up to near ties), and the CUDA speculative output against plain CUDA
#      greedy output (token-identical);
#   3. speed: mistral-7b Q4_K_M decode with and without an EAGLE-3 head (synth, random weights: nothing is accepted,
#      so this is the drafter's overhead under the adaptive draft length), medians of REPS runs.
# Needs the bundle (scripts/gpu_bundle.sh) at $B; writes $OUT/eagle3.txt and the raw logs.
set -uo pipefail
B=${B:-build-gpu/bundle}
Q=$B/quarrel
OUT=${OUT:-$PWD/out}
M=${M:-/tmp/eagle3_models}
REPS=${REPS:-3}
T=$(nproc)
mkdir -p "$OUT" "$M"
R=$OUT/eagle3.txt
log() { echo "[gpu_eagle3 $(date +%T)] $*" | tee -a "$R"; }

synth() { # out args...
    local f=$1
    shift
    [ -f "$f" ] || "$Q" synth "$@" -t "$T" -o "$f" > "$f.log" 2>&1 || { log "synth $* failed: $(tail -2 "$f.log")"; return 1; }
}

log "device: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null)"
synth "$M/tl.gguf" --arch llama --preset tinyllama-1.1b --type Q4_K_M --seed 1 || exit 1
synth "$M/tl-head.gguf" --arch eagle3 --preset tinyllama-1.1b --type Q8_0 --seed 2 || exit 1
PROMPT="Write a short story about a robot that learns to paint. The robot lives in a small town by the sea and"

# 1. capture: layers 2, 11, 19 (the head's [2, L/2, L-3] of 22 layers); CAPTURE=0 skips it
for be in $([ "${CAPTURE:-1}" = 1 ] && echo cpu cuda); do
    for u in 1 4 64; do
        "$Q" logits -m "$M/tl.gguf" -p "$PROMPT" -o "$OUT/l_${be}_$u.npy" --ubatch "$u" --backend "$be" -t "$T" \
            --capture-layers 2,11,19 --capture-out "$OUT/cap_${be}_$u.npy" > "$OUT/logits_${be}_$u.log" 2>&1 ||
            log "logits $be ubatch $u failed: $(tail -2 "$OUT/logits_${be}_$u.log")"
    done
done
[ "${CAPTURE:-1}" = 1 ] && python3 - "$OUT" >> "$R" 2>&1 <<'EOF'
import sys, numpy as np
out = sys.argv[1]
ref = np.load(f"{out}/cap_cpu_64.npy")
for be in ("cpu", "cuda"):
    for u in (1, 4, 64):
        try:
            c = np.load(f"{out}/cap_{be}_{u}.npy")
        except Exception as e:
            print(f"capture {be} ubatch {u}: missing ({e})")
            continue
        w = c.shape[1] // 3
        rel = [float(np.abs(c[:, i*w:(i+1)*w] - ref[:, i*w:(i+1)*w]).max() / np.abs(ref[:, i*w:(i+1)*w]).max()) for i in range(3)]
        print(f"capture {be} ubatch {u}: {c.shape}, max |diff| / max |cpu ubatch 64| per layer: " +
              " ".join(f"{r:.2e}" for r in rel))
EOF

# 2. drafts on CUDA against the CPU's, output against plain greedy
run() { # name backend extra...
    local n=$1 be=$2
    shift 2
    QUARREL_SPEC_TRACE=1 "$Q" run -m "$M/tl.gguf" -p "$PROMPT" -n 96 --temp 0 --ignore-eos --ids-only -q -v \
        --backend "$be" -t "$T" "$@" > "$OUT/run_$n.out" 2> "$OUT/run_$n.err" || log "run $n failed: $(tail -2 "$OUT/run_$n.err")"
}
run plain_cuda cuda
run e3_cuda cuda --spec eagle3 --draft-model "$M/tl-head.gguf" --draft-p-min 0
run e3_cpu cpu --spec eagle3 --draft-model "$M/tl-head.gguf" --draft-p-min 0
if cmp -s <(tail -1 "$OUT/run_plain_cuda.out") <(tail -1 "$OUT/run_e3_cuda.out"); then
    log "CUDA greedy output with the EAGLE-3 head: identical to plain greedy ($(grep -o 'speculative: .*' "$OUT/run_e3_cuda.err"))"
else
    log "CUDA greedy output with the EAGLE-3 head: DIFFERS from plain greedy"
fi
python3 - "$OUT" >> "$R" 2>&1 <<'EOF'
import sys
out = sys.argv[1]
def drafts(n):
    return [l.split(": drafted")[1].split() for l in open(f"{out}/run_{n}.err") if l.startswith("spec: ")]
a, b = drafts("e3_cuda"), drafts("e3_cpu")
same = sum(x == y for x, y in zip(a, b))
first = sum(x[:1] == y[:1] for x, y in zip(a, b))
print(f"drafts: CUDA {len(a)}, CPU {len(b)}; identical drafts {same} of {min(len(a), len(b))}, identical first "
      f"tokens {first}")
EOF

# 2b. the n-gram drafter on CUDA (a repetitive prompt: drafts are accepted), output against plain greedy
REP="one two three four five six seven eight one two three four five six seven eight one two three four five six"
for m in tl; do
    "$Q" run -m "$M/$m.gguf" -p "$REP" -n 128 --temp 0 --ignore-eos --ids-only -q -v --backend cuda -t "$T" \
        > "$OUT/ng_plain.out" 2> "$OUT/ng_plain.err"
    "$Q" run -m "$M/$m.gguf" -p "$REP" -n 128 --temp 0 --ignore-eos --ids-only -q -v --backend cuda -t "$T" \
        --spec ngram --spec-ngram 1:4 > "$OUT/ng_spec.out" 2> "$OUT/ng_spec.err"
    if cmp -s <(tail -1 "$OUT/ng_plain.out") <(tail -1 "$OUT/ng_spec.out"); then
        log "CUDA n-gram speculation on $m: identical to plain greedy ($(grep -o 'speculative: .*' "$OUT/ng_spec.err"))"
    else
        log "CUDA n-gram speculation on $m: DIFFERS from plain greedy ($(grep -o 'speculative: .*' "$OUT/ng_spec.err"))"
    fi
done

# 2c. a draft model on the same GPU: tinyllama Q8_0 as the target, the same weights in Q4_K_M as its draft
synth "$M/tl8.gguf" --arch llama --preset tinyllama-1.1b --type Q8_0 --seed 1 || exit 1
"$Q" run -m "$M/tl8.gguf" -p "$PROMPT" -n 128 --temp 0 --ignore-eos --ids-only -v --backend cuda -t "$T" \
    > "$OUT/dm_plain.out" 2> "$OUT/dm_plain.err"
"$Q" run -m "$M/tl8.gguf" -p "$PROMPT" -n 128 --temp 0 --ignore-eos --ids-only -v --backend cuda -t "$T" \
    --draft-model "$M/tl.gguf" > "$OUT/dm_spec.out" 2> "$OUT/dm_spec.err"
if cmp -s <(tail -1 "$OUT/dm_plain.out") <(tail -1 "$OUT/dm_spec.out"); then
    log "CUDA draft model (tinyllama Q4_K_M for its Q8_0): identical to plain greedy ($(grep -o 'speculative: .*' "$OUT/dm_spec.err"))"
else
    log "CUDA draft model: DIFFERS from plain greedy ($(grep -o 'speculative: .*' "$OUT/dm_spec.err"))"
fi
log "  decode plain: $(grep -o 'decode [0-9]* tok, [0-9.]* t/s' "$OUT/dm_plain.err"); with the draft: $(grep -o 'decode [0-9]* tok, [0-9.]* t/s' "$OUT/dm_spec.err")"

# 3. speed on mistral-7b Q4_K_M
synth "$M/m7.gguf" --arch llama --preset mistral-7b --type Q4_K_M --seed 1 || exit 1
synth "$M/m7-head.gguf" --arch eagle3 --preset mistral-7b --type Q8_0 --seed 2 || exit 1
speed() { # name extra...
    local n=$1
    shift
    for i in $(seq "$REPS"); do
        "$Q" run -m "$M/m7.gguf" -p "$PROMPT" -n 256 --temp 0 --ignore-eos -v --backend cuda "$@" \
            2>&1 >/dev/null | grep -o 'decode [0-9]* tok, [0-9.]* t/s' | awk '{print $4}'
    done | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}' > "$OUT/speed_$n.txt"
    log "mistral-7b Q4_K_M decode $n: median $(cat "$OUT/speed_$n.txt") t/s over $REPS runs"
}
for k in 1 3 7 8 15; do
    "$Q" bench -m "$M/m7.gguf" --backend cuda --verify "$k" -d 256 -r 3 > "$OUT/verify_$k.txt" 2>&1
    log "verify $k drafted (d256): $(tail -1 "$OUT/verify_$k.txt")"
done
REPP="$REP $REP"
for i in $(seq "$REPS"); do
    for mode in plain ngram; do
        extra=()
        [ $mode = ngram ] && extra=(--spec ngram --spec-ngram 1:4)
        "$Q" run -m "$M/m7.gguf" -p "$REPP" -n 256 --temp 0 --ignore-eos -v --backend cuda "${extra[@]}" 2>&1 >/dev/null |
            grep -o 'decode [0-9]* tok, [0-9.]* t/s\|speculative: .*' | tr '\n' ' ' >> "$OUT/ng7_$mode.txt"
        echo >> "$OUT/ng7_$mode.txt"
    done
done
log "mistral-7b n-gram on a repetitive prompt: plain $(cat "$OUT/ng7_plain.txt" | tr '\n' '|') ngram $(cat "$OUT/ng7_ngram.txt" | tr '\n' '|')"
speed plain
speed eagle3 --spec eagle3 --draft-model "$M/m7-head.gguf" --draft-p-min 0
speed eagle3_pmin --spec eagle3 --draft-model "$M/m7-head.gguf"
cat "$R"
