#!/usr/bin/env bash
# bench/gpu_kvq.sh — issue 34's quantized KV cache on CUDA, in one device call (carry build-gpu/bundlexz). Logs under
# /tmp/kvq, tables under $OUT.
#   STAGE=check: CUDA against the CPU with the same cache type (bench/gpu_check.py --cache-type T, the default mode)
#                for CTYPES (default "f16 q8_0 q4_0") on MODELS (tiny presets of head sizes 64 / 128, softcap, sliding
#                windows, sinks) in Q8_0; then the exact mode's refusal of a quantized cache (check_T.md, exact.txt);
#   STAGE=speed: synth mistral-7b Q4_K_M, then `quarrel bench -p 512 -n 64 -d D` for D in DEPTHS with each cache type
#                of STYPES (default "f16 q8_0 q4_0") (speed.md);
#   STAGE=serve: `quarrel serve --backend cuda --kv-mem-mb 64` on a tiny model with each cache type: the context and
#                sequences that memory holds, one completion (serve.txt);
#   STAGE=splits: tg64 at depth D with a CT (q8_0) cache for each QUARREL_CUDA_ATTN_SPLITS of SPLITS (splits.txt);
#   STAGE=all (default): check, serve and speed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_kvq}
STAGE=${STAGE:-all}
mkdir -p "$OUT" /tmp/kvq
. bench/gpu_unpack.sh
Q=build-gpu/bundle/quarrel
if [ "$STAGE" = check ] || [ "$STAGE" = all ]; then
    MODELS=${MODELS:-llama:tiny,qwen3:tiny,gemma2:tiny,gpt-oss:tiny,gemma3:tiny}
    for ct in ${CTYPES:-f16 q8_0 q4_0}; do
        OUT=/tmp/kvq/c_$ct MODEL_DIR=/tmp/kvq/models BUNDLE=build-gpu/bundle timeout 240 python3 bench/gpu_check.py \
            --models "$MODELS" --types Q8_0 --cache-type "$ct" --no-leak > /tmp/kvq/c_$ct.log 2>&1
        echo "check $ct rc=$?"
        cp /tmp/kvq/c_$ct/gpu_check.md "$OUT/check_$ct.md" 2>/dev/null
        grep -E '^\| |ERROR|failed' /tmp/kvq/c_$ct.log | head -20
    done
    f=/tmp/kvq/models/llama-tiny-Q8_0.gguf
    QUARREL_CUDA_EXACT=1 $Q run -m "$f" --backend cuda --cache-type-k q8_0 --cache-type-v q8_0 -p hello -n 4 \
        > /tmp/kvq/exact.out 2>&1
    echo "exact mode with a q8_0 cache: rc=$? $(tail -1 /tmp/kvq/exact.out)" | tee "$OUT/exact.txt"
    f=/tmp/kvq/models/deepseek2-tiny-Q8_0.gguf # MLA: heads of 576 / 512 values, which the kernels do not take
    [ -f "$f" ] || $Q synth --arch deepseek2 --preset tiny --type Q8_0 --pure -o "$f" > /dev/null 2>&1
    $Q run -m "$f" --backend cuda --cache-type-k q8_0 --cache-type-v q8_0 -p hello -n 4 > /tmp/kvq/mla.out 2>&1
    echo "deepseek2 (MLA) with a q8_0 cache: rc=$? $(tail -1 /tmp/kvq/mla.out)" | tee -a "$OUT/exact.txt"
fi
if [ "$STAGE" = splits ]; then # tg64 at depth D (default 16384) with a q8_0 cache by key split count (QUARREL_CUDA_ATTN_SPLITS)
    f=/tmp/kvq/mistral-7b-Q4_K_M.gguf
    [ -f "$f" ] || $Q synth --arch llama --preset mistral-7b --type Q4_K_M -t "$(nproc)" -o "$f" > /tmp/kvq/synth.log 2>&1
    for sp in ${SPLITS:-default 16 24 33 66}; do
        r=$(env $( [ "$sp" = default ] || echo "QUARREL_CUDA_ATTN_SPLITS=$sp" ) timeout 120 $Q bench -m "$f" --backend cuda \
            -p 0 -n 64 -d "${D:-16384}" -r 3 --cache-type-k "${CT:-q8_0}" --cache-type-v "${CT:-q8_0}" --json 2> /dev/null |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["tg_median_tps"])')
        echo "splits $sp: tg64 $r t/s" | tee -a "$OUT/splits.txt"
    done
    exit 0
fi
if [ "$STAGE" = serve ] || [ "$STAGE" = all ]; then # quarrel serve on the GPU at the same --kv-mem-mb: f16, q8_0, q4_0
    f=/tmp/kvq/models/llama-tiny-Q8_0.gguf
    [ -f "$f" ] || { mkdir -p /tmp/kvq/models; $Q synth --arch llama --preset tiny --type Q8_0 --pure -o "$f" > /dev/null 2>&1; }
    for ct in f16 q8_0 q4_0; do
        $Q serve -m "$f" --backend "${BACKEND:-cuda}" --kv-mem-mb 64 --cache-type-k $ct --cache-type-v $ct --port 18431 \
            > /tmp/kvq/serve_$ct.log 2>&1 &
        pid=$!
        for _ in $(seq 100); do curl -sf localhost:18431/readyz > /dev/null && break; sleep 0.2; done
        gen=$(curl -s localhost:18431/v1/completions -d '{"prompt": "hello", "max_tokens": 16, "temperature": 0}' |
            python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["usage"]["completion_tokens"], "tokens")')
        curl -s localhost:18431/api/models | python3 -c '
import json, sys
m = json.load(sys.stdin)["models"][0]
print("serve %s/%s: context %d tokens, %d sequences, KV %.1f MiB" % (m["memory"]["kv_cache_type_k"],
      m["memory"]["kv_cache_type_v"], m["context_length"], m["scheduler"]["slots"], m["memory"]["kv_cache_bytes"] / 2**20))' |
            sed "s/\$/, a completion: $gen/" | tee -a "$OUT/serve.txt"
        kill $pid; wait $pid 2> /dev/null
    done
fi
if [ "$STAGE" = speed ] || [ "$STAGE" = all ]; then
    f=/tmp/kvq/mistral-7b-Q4_K_M.gguf
    [ -f "$f" ] || $Q synth --arch llama --preset mistral-7b --type Q4_K_M -t "$(nproc)" -o "$f" > /tmp/kvq/synth.log 2>&1
    echo "| cache | depth | pp512 t/s | tg64 t/s |" > "$OUT/speed.md"
    echo "|---|---|---|---|" >> "$OUT/speed.md"
    for d in ${DEPTHS:-0 4096 16384}; do
        for ct in ${STYPES:-f16 q8_0 q4_0}; do
            r=$(timeout 120 $Q bench -m "$f" --backend cuda -p 512 -n 64 -d "$d" -r "${REPS:-3}" --cache-type-k "$ct" \
                --cache-type-v "$ct" --json 2> /tmp/kvq/bench_${ct}_$d.err |
                python3 -c 'import json,sys; j=json.load(sys.stdin); print(j.get("pp_median_tps"), j.get("tg_median_tps"))')
            echo "| $ct | $d | ${r% *} | ${r#* } |" | tee -a "$OUT/speed.md"
            [ -n "$r" ] || tail -3 /tmp/kvq/bench_${ct}_$d.err
        done
    done
fi
