#!/usr/bin/env bash
# bench/serve_prof.sh — where `quarrel serve`'s scheduler spends a step under C concurrent greedy completions
# (QUARREL_HOST_PROF=1: plan, decode, sampling ahead, streaming, printed every 256 steps). Standard library only.
#   bench/serve_prof.sh QUARREL MODEL [C=256] [BACKEND=cuda]
set -uo pipefail
Q=$1 M=$2 C=${3:-256} BK=${4:-cuda}
LOG=${OUT:-/tmp}/serve_prof.log
QUARREL_HOST_PROF=1 "$Q" serve -m "$M" --port 18093 --backend "$BK" --parallel "$C" --ctx $((C * 300)) > "$LOG" 2>&1 &
PID=$!
for _ in $(seq 120); do curl -sf localhost:18093/readyz > /dev/null && break; sleep 0.5; done
python3 - "$C" << 'PY'
import json, sys, threading, time, urllib.request
C = int(sys.argv[1])
def one(i, out):
    body = json.dumps({"prompt": f"Request {i}: " + " ".join(f"w{(i * 7 + j) % 97}" for j in range(100)),
                       "max_tokens": 128, "temperature": 0, "ignore_eos": True}).encode()
    r = urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:18093/v1/completions", body,
                                                      {"Content-Type": "application/json"}), timeout=300)
    out[i] = json.loads(r.read())["usage"]["completion_tokens"]
for rnd in range(2):
    out = [0] * C
    t0 = time.time()
    th = [threading.Thread(target=one, args=(i, out)) for i in range(C)]
    [t.start() for t in th]
    [t.join() for t in th]
    print(f"round {rnd}: {sum(out)} tokens in {time.time() - t0:.2f} s: {sum(out) / (time.time() - t0):.0f} tok/s")
PY
kill $PID; wait $PID 2> /dev/null
grep "scheduler host profile" "$LOG" | tail -2
