#!/usr/bin/env bash
# bench/gpu_tp.sh — tensor parallelism on a machine with 2+ GPUs (issue 37), one device call per STAGE
# (carry build-gpu/bundlexz: bundle.tar.xz of scripts/gpu_bundle.sh's bundle):
#   STAGE=check  GPU topology, NCCL found, tp 1 vs tp N logits on CUDA for the tiny synth models (mean KL, top-1),
#                the refusal of more ranks than GPUs, then mistral-7b Q4_K_M: prefill / decode (-r 5 medians) and
#                batched decode (--parallel 64, 256) at tp 1 and tp N
#   STAGE=procs  ranks as processes (quarrel worker, --tp-addr): logits against one process's ranks and tp 1, and
#                mistral-7b's speed against one process's ranks
#   STAGE=big    llama3-70b Q4_K_M (LAYERS of its 80 layers, default all): decode and prefill at tp 1 and tp N
# OUT=... TP=2 (ranks) LAYERS=80
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_tp}
TP=${TP:-2}
STAGE=${STAGE:-check}
mkdir -p "$OUT/lg" build-gpu
. bench/gpu_unpack.sh
B=$PWD/build-gpu/bundle
Q=$B/quarrel
log() { echo "[gpu_tp $(date +%T)] $*" | tee -a "$OUT/steps.txt" >&2; }
if [ -z "${QUARREL_NCCL_LIB:-}" ]; then
    for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu /usr/local/lib; do
        [ -f $d/libnccl.so.2 ] && { export QUARREL_NCCL_LIB=$d/libnccl.so.2; break; }
    done
    [ -z "${QUARREL_NCCL_LIB:-}" ] && QUARREL_NCCL_LIB=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'))" 2> /dev/null)
    [ -f "${QUARREL_NCCL_LIB:-}" ] || QUARREL_NCCL_LIB=$(find / -xdev -name 'libnccl.so.2' 2> /dev/null | head -1)
    export QUARREL_NCCL_LIB
fi
M=/tmp/qr_tp
mkdir -p $M
bench() { # label, args...: one quarrel bench line per test
    local label=$1
    shift
    timeout 300 "$Q" bench "$@" > "$OUT/b.out" 2> "$OUT/b.err"
    echo "rc $?" >> "$OUT/b.err"
    sed "s/^/$label | /" "$OUT/b.out" | tee -a "$OUT/steps.txt"
    cat "$OUT/b.err" >> "$OUT/bench_stderr.txt"
}
synth() { # preset type [layers]
    local f=$M/$1-$2${3:+-L$3}.gguf
    if [ ! -f "$f" ]; then
        local t0=$(date +%s)
        "$Q" synth --arch llama --preset "$1" --type "$2" ${3:+--layers $3} -t "$(nproc)" -o "$f" > "$OUT/synth.log" 2>&1 ||
            log "synth $1 failed: $(tail -2 "$OUT/synth.log")"
        log "synth $1 $2 ${3:-}: $(($(date +%s) - t0)) s $(du -h "$f" | cut -f1)"
    fi
    echo "$f"
}
if [ "$STAGE" = check ] || [ "$STAGE" = speed ]; then
  if [ "$STAGE" = check ]; then
    nvidia-smi --query-gpu=index,name,memory.total,pcie.link.gen.current --format=csv > "$OUT/gpus.txt" 2>&1
    nvidia-smi topo -m >> "$OUT/gpus.txt" 2>&1
    log "GPUs: $(nvidia-smi -L | wc -l); NCCL: ${QUARREL_NCCL_LIB:-none}"
    python3 - "$M" > "$OUT/ids.json" << 'PY'
import json, random
r = random.Random(7)
print(json.dumps([r.randrange(3, 900) for _ in range(256)]))
PY
    cat > $M/kl.py << 'PY'
import sys
import numpy as np
try:
    a = np.load(sys.argv[1]).astype(np.float64); b = np.load(sys.argv[2]).astype(np.float64)
except Exception as e:
    print(sys.argv[3], "no logits:", e); sys.exit()
la = a - a.max(1, keepdims=True); la -= np.log(np.exp(la).sum(1, keepdims=True))
lb = b - b.max(1, keepdims=True); lb -= np.log(np.exp(lb).sum(1, keepdims=True))
k = (np.exp(la) * (la - lb)).sum(1)
fl = k > 1e-3
print(f"KL {sys.argv[3]}: mean {k.mean():.3e}, rows > 1e-3: {int(fl.sum())}/{len(k)}, others {k[~fl].mean():.3e}, "
      f"top-1 {100 * (a.argmax(1) == b.argmax(1)).mean():.1f}%")
PY
    for ap in ${CHECK_ARCHS:-llama:tiny gemma3:tiny llama:mixtral-tiny gpt-oss:tiny qwen3moe:tiny granitehybrid:tiny \
        nemotron_h_moe:tiny qwen2:tiny phi3:tiny gemma2:tiny}; do
        a=${ap%%:*} p=${ap##*:}
        f=$M/$a-$p.gguf
        "$Q" synth --arch "$a" --preset "$p" --type F16 --seed 1 -o "$f" > /dev/null 2>&1
        for t in 1 "$TP" nccl; do
            [ "$t" = nccl ] && case $ap in llama:tiny | llama:mixtral-tiny) ;; *) continue ;; esac
            P2P=$([ "$t" = nccl ] && echo 0 || echo 1048576)
            QUARREL_CUDA_TP_P2P_MAX=$P2P QUARREL_LOG=info timeout 120 "$Q" logits -m "$f" --tokens "$OUT/ids.json" -o "$M/$a-$p.$t.npy" --backend cuda --tp "${t/nccl/$TP}" \
                > "$OUT/lg/logits.$a-$p.$t.txt" 2>&1 || log "$ap tp $t failed: $(tail -3 "$OUT/lg/logits.$a-$p.$t.txt")"
        done
        python3 $M/kl.py "$M/$a-$p.1.npy" "$M/$a-$p.$TP.npy" "$ap" | tee -a "$OUT/steps.txt"
        [ -f "$M/$a-$p.nccl.npy" ] && python3 $M/kl.py "$M/$a-$p.1.npy" "$M/$a-$p.nccl.npy" "$ap nccl-only" | tee -a "$OUT/steps.txt"
    done
    grep -h "NCCL" "$OUT"/lg/logits.llama-tiny.$TP.txt | head -2 | tee -a "$OUT/steps.txt"
    "$Q" logits -m $M/llama-tiny.gguf -p "hi" -o $M/x.npy --backend cuda --tp 8 2>&1 | tail -1 | tee -a "$OUT/steps.txt"
  fi
    f=$(synth mistral-7b Q4_K_M)
    for t in 1 "$TP"; do bench "mistral-7b tp$t" -m "$f" --backend cuda --tp "$t" -p 512 -n 128 -r 5; done
    QUARREL_CUDA_TP_P2P_MAX=0 bench "mistral-7b tp$TP nccl-only" -m "$f" --backend cuda --tp "$TP" -p 512 -n 128 -r 5
    for np in ${NPS:-64 256}; do
        for t in 1 "$TP"; do bench "mistral-7b np$np tp$t" -m "$f" --backend cuda --tp "$t" --parallel "$np" -p 128 -n 128 -r 2; done
    done
fi
if [ "$STAGE" = big ]; then
    f=$(synth llama3-70b Q4_K_M "${LAYERS:-}")
    for t in "$TP" 1; do bench "llama3-70b${LAYERS:+ L$LAYERS} tp$t" -m "$f" --backend cuda --tp "$t" -p 512 -n 128 -r 3; done
fi
if [ "$STAGE" = batched ]; then # batched decode only, tp 1 and TP
    f=$(synth mistral-7b Q4_K_M)
    for np in ${NPS:-64 256}; do
        for t in 1 "$TP"; do bench "mistral-7b np$np tp$t" -m "$f" --backend cuda --tp "$t" --parallel "$np" -p 128 -n 128 -r 2; done
    done
fi
if [ "$STAGE" = diag ]; then # where a tensor-parallel decode step's time goes: the all-reduce kinds, and none at all
    f=$(synth mistral-7b Q4_K_M)
    bench "mistral-7b tp1" -m "$f" --backend cuda --tp 1 -p 0 -n 128 -r 5
    bench "mistral-7b tp$TP p2p" -m "$f" --backend cuda --tp "$TP" -p 0 -n 128 -r 5
    QUARREL_CUDA_TP_P2P_MAX=0 bench "mistral-7b tp$TP nccl" -m "$f" --backend cuda --tp "$TP" -p 0 -n 128 -r 5
    QUARREL_CUDA_TP_SKIP_REDUCE=1 bench "mistral-7b tp$TP no-reduce (wrong results)" -m "$f" --backend cuda --tp "$TP" -p 0 -n 128 -r 5
fi
if [ "$STAGE" = moe ]; then # mixtral-8x22b Q4_0 (LAYERS of its 56 layers) at tp 1, 2, TP
    f=$M/mixtral-8x22b-Q4_0${LAYERS:+-L$LAYERS}.gguf
    if [ ! -f "$f" ]; then
        t0=$(date +%s)
        "$Q" synth --arch llama --preset mixtral-8x22b --type Q4_0 ${LAYERS:+--layers $LAYERS} -t "$(nproc)" -o "$f" > "$OUT/synth.log" 2>&1
        log "synth mixtral-8x22b Q4_0 ${LAYERS:-}: $(($(date +%s) - t0)) s $(du -h "$f" | cut -f1)"
    fi
    for t in "$TP" 2 1; do bench "mixtral-8x22b${LAYERS:+ L$LAYERS} tp$t" -m "$f" --backend cuda --tp "$t" -p 512 -n 128 -r 5; done
fi
if [ "$STAGE" = llama_moe ]; then
    f=$M/mixtral-8x22b-Q4_0${LAYERS:+-L$LAYERS}.gguf
    cat build-gpu/llama-bin/lb.part* | xz -dc > /tmp/llama-bench && chmod +x /tmp/llama-bench
    timeout 400 /tmp/llama-bench -m "$f" -ngl 99 -fa 1 -sm layer -p 512 -n 128 -r 5 -o json > "$OUT/llama_moe.json" 2> "$OUT/llama_moe.err"
    python3 -c "
import json, statistics
for r in json.load(open('$OUT/llama_moe.json')):
    print('llama.cpp -sm layer mixtral-8x22b', 'pp' if r['n_prompt'] else 'tg', 'median %.2f' % statistics.median(r['samples_ts']))
" 2>&1 | tee -a "$OUT/steps.txt"
fi
if [ "$STAGE" = procs ]; then # ranks as processes (--tp-addr): logits against one process's ranks, then speed
    python3 -c "import json, random; r = random.Random(7); print(json.dumps([r.randrange(3, 900) for _ in range(256)]))" > "$OUT/ids.json"
    cat > $M/kl.py << 'PY'
import sys
import numpy as np
a = np.load(sys.argv[1]).astype(np.float64); b = np.load(sys.argv[2]).astype(np.float64)
la = a - a.max(1, keepdims=True); la -= np.log(np.exp(la).sum(1, keepdims=True))
lb = b - b.max(1, keepdims=True); lb -= np.log(np.exp(lb).sum(1, keepdims=True))
k = (np.exp(la) * (la - lb)).sum(1)
print(f"KL {sys.argv[3]}: mean {k.mean():.3e}, max {k.max():.3e}, top-1 {100 * (a.argmax(1) == b.argmax(1)).mean():.1f}%, "
      f"identical {np.array_equal(a, b)}")
PY
    port=29600
    workers() { # model, extra args: ranks 1..TP-1 as processes on GPUs 1..TP-1
        for r in $(seq 1 $((TP - 1))); do
            timeout 400 "$Q" worker -m "$1" --backend cuda --gpu "$r" --tp "$TP" --tp-rank "$r" --tp-addr 127.0.0.1:$port \
                > "$OUT/lg/worker.$port.$r.txt" 2>&1 &
        done
    }
    for ap in ${CHECK_ARCHS:-llama:tiny llama:mixtral-tiny gpt-oss:tiny granitehybrid:tiny}; do
        a=${ap%%:*} p=${ap##*:}
        f=$M/$a-$p.gguf
        "$Q" synth --arch "$a" --preset "$p" --type F16 --seed 1 -o "$f" > /dev/null 2>&1
        QUARREL_CUDA_TP_P2P_MAX=0 timeout 120 "$Q" logits -m "$f" --tokens "$OUT/ids.json" -o "$M/$a-$p.in.npy" --backend cuda --tp "$TP" > /dev/null 2>&1
        timeout 120 "$Q" logits -m "$f" --tokens "$OUT/ids.json" -o "$M/$a-$p.1.npy" --backend cuda > /dev/null 2>&1
        port=$((port + 1)); workers "$f"
        QUARREL_LOG=info timeout 120 "$Q" logits -m "$f" --tokens "$OUT/ids.json" -o "$M/$a-$p.pr.npy" --backend cuda --gpu 0 --tp "$TP" \
            --tp-addr 127.0.0.1:$port > "$OUT/lg/procs.$a-$p.txt" 2>&1 || log "$ap procs failed: $(tail -3 "$OUT/lg/procs.$a-$p.txt")"
        wait
        python3 $M/kl.py "$M/$a-$p.in.npy" "$M/$a-$p.pr.npy" "$ap procs vs one process (nccl)" | tee -a "$OUT/steps.txt"
        python3 $M/kl.py "$M/$a-$p.1.npy" "$M/$a-$p.pr.npy" "$ap procs vs tp 1" | tee -a "$OUT/steps.txt"
    done
    grep -h "NCCL\|joined" "$OUT"/lg/procs.llama-tiny.txt | head -3 | tee -a "$OUT/steps.txt"
    f=$(synth mistral-7b Q4_K_M)
    port=$((port + 1)); workers "$f"
    bench "mistral-7b tp$TP procs" -m "$f" --backend cuda --gpu 0 --tp "$TP" --tp-addr 127.0.0.1:$port -p 512 -n 128 -r 5
    wait
    if [ -z "${PROCS_ONLY:-}" ]; then
        QUARREL_CUDA_TP_P2P_MAX=0 bench "mistral-7b tp$TP one process, nccl-only" -m "$f" --backend cuda --tp "$TP" -p 512 -n 128 -r 5
        bench "mistral-7b tp$TP one process" -m "$f" --backend cuda --tp "$TP" -p 512 -n 128 -r 5
        bench "mistral-7b tp1" -m "$f" --backend cuda -p 512 -n 128 -r 5
    fi
fi
if [ "$STAGE" = none ]; then :; fi # a call that only carries files (parts of llama-bench.xz) onto the warm machine
if [ "$STAGE" = llama ]; then # llama.cpp's split modes on the same file (carry build-gpu/llama-bin too)
    f=$(synth llama3-70b Q4_K_M "${LAYERS:-}")
    if [ -f build-gpu/llama-bin/llama-bench.xz ]; then xz -dc build-gpu/llama-bin/llama-bench.xz > /tmp/llama-bench
    else cat build-gpu/llama-bin/lb.part* | xz -dc > /tmp/llama-bench; fi # carried in parts (the 64 MiB limit)
    chmod +x /tmp/llama-bench
    for sm in layer row; do
        timeout 400 /tmp/llama-bench -m "$f" -ngl 99 -fa 1 -sm "$sm" -p 512 -n 128 -r 5 -o json > "$OUT/llama_$sm.json" 2> "$OUT/llama_$sm.err"
        python3 - "$OUT/llama_$sm.json" "$sm" << 'PY' | tee -a "$OUT/steps.txt"
import json, statistics, sys
try:
    rows = json.load(open(sys.argv[1]))
except Exception as e:
    print("llama.cpp -sm", sys.argv[2], "failed:", e); sys.exit()
for r in rows:
    test = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
    print(f"llama.cpp -sm {sys.argv[2]} | {test} | median {statistics.median(r['samples_ts']):.2f} t/s | reps {len(r['samples_ts'])}")
PY
    done
    for t in "$TP" 1; do bench "llama3-70b${LAYERS:+ L$LAYERS} tp$t" -m "$f" --backend cuda --tp "$t" -p 512 -n 128 -r 5; done
fi
tar czf "$OUT/all.tgz" -C "$OUT" --exclude=all.tgz . 2> /dev/null
