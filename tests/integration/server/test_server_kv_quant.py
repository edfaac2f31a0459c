"""Quantized KV cache in `quarrel serve` (issue 34 part 2): at the same --kv-mem-mb a q8_0 / q4_0 cache holds
more tokens and more sequences (the context and --parallel default from the memory and the cache's bytes per
token), the sequences really run together, and /metrics reports the cache in bytes."""
import concurrent.futures

import requests

from conftest import MODEL_NAME

# SmolLM2-135M: 30 layers x 3 kv heads x 64 values, K and V: 23,040 bytes a token in f16, so 180 MiB hold
# 8192 f16 tokens = 2 sequences of 4096
KV_MEM_MB = "180"


def sizing(s):
    info = requests.get(s.url + "/api/models/" + MODEL_NAME, timeout=10).json()
    return info["scheduler"]["slots"], info["context_length"], info["memory"]


def test_smaller_cache_fits_more_sequences(make_server, smollm):
    got = {}
    for t in ("f16", "q8_0", "q4_0"):
        s = make_server([smollm], ["--kv-mem-mb", KV_MEM_MB, "--cache-type-k", t, "--cache-type-v", t])
        slots, n_ctx, mem = sizing(s)
        got[t] = slots, n_ctx
        assert mem["kv_cache_type_k"] == t and mem["kv_cache_type_v"] == t
        assert mem["kv_cache_bytes"] <= int(KV_MEM_MB) << 20  # the same memory
        assert mem["kv_cache_bytes"] >= (int(KV_MEM_MB) << 20) * 0.99
        assert s.metric("quarrel_kv_cache_bytes", model=MODEL_NAME) == mem["kv_cache_bytes"]
        assert s.metric("quarrel_kv_bytes_free", model=MODEL_NAME) == mem["kv_cache_bytes"]
    assert got["f16"] == (2, 8192)
    # q8_0: 34 bytes per 32 values (0.53 of f16): 1.88x the tokens; q4_0: 18 bytes (0.28): 3.6x
    assert got["q8_0"][1] >= 1.85 * got["f16"][1] and got["q8_0"][0] == 3
    assert got["q4_0"][1] >= 3.5 * got["f16"][1] and got["q4_0"][0] >= 2 * got["f16"][0]


def test_quantized_sequences_run_together(make_server, smollm):
    """q4_0 at the memory of 2 f16 sequences: 7 sequences decode at once, each answers, the bytes metrics move."""
    s = make_server([smollm], ["--kv-mem-mb", KV_MEM_MB, "--cache-type-k", "q4_0", "--cache-type-v", "q4_0",
                               "--no-prefix-cache"])
    slots, _, mem = sizing(s)
    assert slots == 7

    def one(i):
        r = requests.post(s.url + "/v1/completions", json={"model": MODEL_NAME, "prompt": f"Story {i}: once upon a",
                                                           "max_tokens": 24, "temperature": 0, "ignore_eos": True},
                          timeout=300)
        return r.status_code, r.json()["usage"]["completion_tokens"]

    with concurrent.futures.ThreadPoolExecutor(slots) as ex:
        res = list(ex.map(one, range(slots)))
    assert res == [(200, 24)] * slots
    # every sequence was freed; the bytes metrics are the block metrics at the cache's bytes per block
    m = s.metrics()
    lab = f'{{model="{MODEL_NAME}"}}'
    assert m["quarrel_kv_bytes_free" + lab] == mem["kv_cache_bytes"]
    assert m["quarrel_kv_bytes_used" + lab] == 0


def test_bad_cache_type(make_server, smollm):
    s = make_server([smollm], ["--cache-type-k", "q5_k"], wait=False)
    assert s.proc.wait(timeout=30) == 2
    assert "--cache-type-k: bad value 'q5_k'" in s.logs()
