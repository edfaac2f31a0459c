#!/usr/bin/env bash
# bench/gpu_tp_fail.sh — ranks as processes on 2 GPUs (issue 37): a rank that dies mid-run must not hang the others.
#   1. the worker (rank 1) is killed while the driver decodes: the driver must end with an error, not wait for ever
#   2. the driver is killed while the worker takes part in a pass: the worker must exit
# Carry build-gpu/bundlexz. OUT=...
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_tp_fail}
mkdir -p "$OUT" build-gpu
. bench/gpu_unpack.sh
Q=$PWD/build-gpu/bundle/quarrel
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ -z "${QUARREL_NCCL_LIB:-}" ]; then
    for d in /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu /usr/local/lib; do
        [ -f $d/libnccl.so.2 ] && { export QUARREL_NCCL_LIB=$d/libnccl.so.2; break; }
    done
    [ -z "${QUARREL_NCCL_LIB:-}" ] && QUARREL_NCCL_LIB=$(find / -xdev -name 'libnccl.so.2' 2> /dev/null | head -1)
    export QUARREL_NCCL_LIB
fi
f=/tmp/m4.gguf
[ -f $f ] || "$Q" synth --arch llama --preset mistral-7b --type Q4_K_M --layers 4 -t "$(nproc)" -o $f > /dev/null 2>&1
run_case() { # port, victim (worker | driver)
    local port=$1 victim=$2
    "$Q" worker -m $f --backend cuda --gpu 1 --tp 2 --tp-rank 1 --tp-addr 127.0.0.1:$port > "$OUT/w.$victim.txt" 2>&1 &
    local W=$!
    timeout 120 "$Q" bench -m $f --backend cuda --gpu 0 --tp 2 --tp-addr 127.0.0.1:$port -p 0 -n 20000 -r 3 \
        > "$OUT/d.$victim.txt" 2>&1 &
    local D=$!
    sleep 10
    local t0=$(date +%s.%N)
    if [ "$victim" = worker ]; then
        kill -9 $W; wait $D; local rc=$?
        echo "worker killed: the driver ended $(python3 -c "import time; print(round(time.time() - $t0, 1))") s later, rc $rc (124 = hung until timeout)"
        tail -2 "$OUT/d.$victim.txt"
    else
        kill -9 $D; timeout 60 tail --pid=$W -f /dev/null; local gone=$?
        echo "driver killed: the worker $([ $gone = 0 ] && echo exited || echo 'still ran 60 s later') after $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
        tail -2 "$OUT/w.$victim.txt"; kill -9 $W 2> /dev/null
    fi
}
[ "${CASES:-1}" = 1 ] && run_case 29700 worker
[ "${CASES:-1}" = 1 ] && run_case 29701 driver
# 3. quarrel serve as the driver: a worker killed during a long completion turns /readyz to 503 at once
if [ "${SERVE:-1}" = 1 ]; then
    "$Q" worker -m $f --backend cuda --gpu 1 --tp 2 --tp-rank 1 --tp-addr 127.0.0.1:29702 > "$OUT/w.serve.txt" 2>&1 &
    W=$!
    "$Q" serve -m $f --backend cuda --gpu 0 --tp 2 --tp-addr 127.0.0.1:29702 --port 18181 > "$OUT/serve.txt" 2>&1 &
    S=$!
    for i in $(seq 1 60); do curl -s -m 2 127.0.0.1:18181/readyz | grep -q '"ready"' && break; sleep 0.5; done
    echo "readyz before: $(curl -s -m 5 -o /dev/null -w '%{http_code}' 127.0.0.1:18181/readyz)"
    curl -s -m 100 127.0.0.1:18181/v1/completions -d '{"prompt": "a", "max_tokens": 30000, "ignore_eos": true}' \
        -o "$OUT/completion.txt" -w '%{http_code}\n' > "$OUT/completion.code" &
    sleep 3
    kill -9 $W
    sleep 2
    echo "readyz 2 s after the worker was killed: $(curl -s -m 5 -o /dev/null -w '%{http_code}' 127.0.0.1:18181/readyz)"
    for i in $(seq 1 20); do [ -s "$OUT/completion.code" ] && break; sleep 0.5; done
    echo "the completion in flight ended with HTTP $(cat "$OUT/completion.code" 2> /dev/null || echo 'nothing yet (10 s)'): $(head -c 300 "$OUT/completion.txt" 2> /dev/null)"
    echo "a new completion: HTTP $(curl -s -m 20 -o "$OUT/after.txt" -w '%{http_code}' 127.0.0.1:18181/v1/completions -d '{"prompt": "a", "max_tokens": 4}') $(head -c 300 "$OUT/after.txt")"
    kill -9 $S 2> /dev/null
fi
