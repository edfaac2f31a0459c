#!/usr/bin/env bash
# bench/gpu_side29.sh — issue 29's acceptance, quarrel and llama.cpp side by side in ONE device call (synth mistral-7b
# Q4_K_M): pp512 at depths 0 / 4096 / 16384 / 32768 (quarrel bench medians of 3 against llama-bench -fa 1, the median
# of its samples_ts over 5 repetitions), batch-1 decode (tg128 both), serving (bench/serve_bench.py: 128-token prompts,
# 256 output tokens, temperature 0, ignore EOS; quarrel serve at 64 and 256 streams, llama-server at LLAMA_CONC), and
# the mixed load (64 streams while a 16,000-token prompt arrives; quarrel), one 30,000-token prompt and F16 pp512 (a synth
# F16 mistral-7b). Prints a summary and the ratios.
#   carry build-gpu/bundlexz (scripts/gpu_bundle.sh) and build-gpu/llama-gpu (scripts/llama_gpu_build.sh); then
#   OUT=$OUT bash bench/gpu_side29.sh
# Environment: DEPTHS ("0 4096 16384 32768"), CONC (64,256), LLAMA_CONC (64), REPS (2), SKIP ("": any of pp long f16 tg
# serve mixed).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_side29}
mkdir -p "$OUT/logs"
log() { echo "[side29 $(date +%T)] $*" | tee -a "$OUT/steps.txt"; }
skip() { case " ${SKIP:-} " in *" $1 "*) return 0 ;; esac; return 1; }
. bench/gpu_unpack.sh
L=/tmp/llama_gpu/llama
# the package as one file, or (the tracked tree leaves ~24 MB of a 64 MiB carry) as parts that earlier calls on this warm
# machine left in /tmp/llparts (carry build-gpu/llpa, then build-gpu/llpb: `mkdir -p /tmp/llparts && cp build-gpu/llp?/* /tmp/llparts/`)
if [ ! -x $L/llama-server ]; then
    mkdir -p /tmp/llama_gpu
    if [ -f build-gpu/llama-gpu/llama.tar.xz ]; then xz -dc build-gpu/llama-gpu/llama.tar.xz | tar -C /tmp/llama_gpu -xf -
    else cat /tmp/llparts/llpart.* | xz -dc | tar -C /tmp/llama_gpu -xf -; fi
    [ -x $L/llama-server ] || { log "no llama.cpp package"; exit 1; }
fi
export LD_LIBRARY_PATH=$L:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
qr_gpu_mistral "$OUT/synth.log"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/steps.txt"
med() { python3 -c 'import json,statistics,sys; d=json.load(open(sys.argv[1])); d=d if isinstance(d,list) else [d]; print("%.1f" % statistics.median(d[-1]["samples_ts"]))' "$1" 2> /dev/null || echo nan; }
qv() { grep -o "\"$2\": [0-9.]*" "$1" | head -1 | awk '{print $2}'; }
ratio() { python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print('%.2fx' % (a/b) if b > 0 else '-')" "$1" "$2" 2> /dev/null || echo -; }
if ! skip pp; then
    for d in ${DEPTHS:-0 4096 16384 32768}; do
        timeout 150 "$Q" bench -m $M --backend cuda -p 512 -n 0 -d $d -r 3 --json 2>> "$OUT/logs/q_pp.err" | grep '^{' | tail -1 > "$OUT/q_pp_d$d.json"
        timeout 200 $L/llama-bench -m $M -ngl 99 -fa 1 -p 512 -n 0 -d $d -r ${LREPS:-5} -o json > "$OUT/l_pp_d$d.json" 2>> "$OUT/logs/l_pp.err"
        qt=$(qv "$OUT/q_pp_d$d.json" pp_median_tps); lt=$(med "$OUT/l_pp_d$d.json")
        log "pp512 @ d$d: quarrel $qt t/s, llama.cpp $lt t/s (median of samples_ts): $(ratio "$qt" "$lt")"
    done
fi
if ! skip long; then # one 30,000-token prompt (ubatch 512 both)
    timeout 150 "$Q" bench -m $M --backend cuda -p 30000 -n 0 -r 2 --json 2>> "$OUT/logs/q_long.err" | grep '^{' | tail -1 > "$OUT/q_long.json"
    timeout 200 $L/llama-bench -m $M -ngl 99 -fa 1 -p 30000 -n 0 -ub 512 -r 3 -o json > "$OUT/l_long.json" 2>> "$OUT/logs/l_long.err"
    qt=$(qv "$OUT/q_long.json" pp_median_tps); lt=$(med "$OUT/l_long.json")
    log "pp30000 (one prompt): quarrel $qt t/s, llama.cpp $lt t/s (median of samples_ts): $(ratio "$qt" "$lt")"
fi
if ! skip f16; then # F16 pp512 (a synth mistral-7b F16, 14.5 GB)
    MF=/tmp/qr_models/mistral-7b-F16.gguf
    [ -f $MF ] || timeout 300 "$Q" synth --arch llama --preset mistral-7b --type F16 -t "$(nproc)" -o $MF.tmp > "$OUT/logs/synth_f16.log" 2>&1 && mv $MF.tmp $MF
    timeout 150 "$Q" bench -m $MF --backend cuda -p 512 -n 0 -r 3 --json 2>> "$OUT/logs/q_f16.err" | grep '^{' | tail -1 > "$OUT/q_f16.json"
    timeout 200 $L/llama-bench -m $MF -ngl 99 -fa 1 -p 512 -n 0 -r ${LREPS:-5} -o json > "$OUT/l_f16.json" 2>> "$OUT/logs/l_f16.err"
    qt=$(qv "$OUT/q_f16.json" pp_median_tps); lt=$(med "$OUT/l_f16.json")
    log "F16 pp512: quarrel $qt t/s, llama.cpp $lt t/s (median of samples_ts): $(ratio "$qt" "$lt")"
fi
if ! skip tg; then
    timeout 120 "$Q" bench -m $M --backend cuda -p 0 -n 128 -r 3 --json 2>> "$OUT/logs/q_tg.err" | grep '^{' | tail -1 > "$OUT/q_tg.json"
    timeout 200 $L/llama-bench -m $M -ngl 99 -fa 1 -p 0 -n 128 -r 5 -o json > "$OUT/l_tg.json" 2>> "$OUT/logs/l_tg.err"
    qt=$(qv "$OUT/q_tg.json" tg_median_tps); lt=$(med "$OUT/l_tg.json")
    log "tg128 (batch 1): quarrel $qt t/s, llama.cpp $lt t/s: $(ratio "$qt" "$lt")"
fi
if ! skip serve; then
    timeout 300 python3 bench/serve_bench.py --quarrel "$Q" --model $M --concurrency "${CONC:-64,256}" --prompt-tokens 128 \
        --max-tokens 256 --reps "${REPS:-2}" --backend cuda --json "$OUT/serve_q.json" --log-dir "$OUT/logs" \
        > "$OUT/serve_q.md" 2> "$OUT/serve_q.err"
    log "quarrel serve rc $?"
    grep -E "output tok|TPOT|TTFT" "$OUT/serve_q.md" | tee -a "$OUT/steps.txt"
    timeout 240 python3 bench/serve_bench.py --quarrel "$Q" --llama-server $L/llama-server --model $M \
        --concurrency "${LLAMA_CONC:-64}" --prompt-tokens 128 --max-tokens 256 --reps "${REPS:-2}" --backend cuda \
        --json "$OUT/serve_ql.json" --log-dir "$OUT/logs" > "$OUT/serve_ql.md" 2> "$OUT/serve_ql.err"
    log "quarrel + llama-server at ${LLAMA_CONC:-64} rc $?"
    grep -E "output tok|TPOT|TTFT" "$OUT/serve_ql.md" | tee -a "$OUT/steps.txt"
    tail -3 "$OUT/serve_ql.err"
fi
if ! skip mixed; then
    timeout 200 python3 bench/serve_bench.py --quarrel "$Q" --model $M --concurrency 64 --prompt-tokens 128 --max-tokens 256 \
        --reps 1 --backend cuda --mixed --mixed-prompt-tokens 16000 --log-dir "$OUT/logs" > "$OUT/mixed.md" 2> "$OUT/mixed.err"
    log "mixed rc $?"
    grep -E "TPOT|gap|long prompt" "$OUT/mixed.md" | tee -a "$OUT/steps.txt"
fi
