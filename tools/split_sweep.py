#!/usr/bin/env python3
"""tools/split_sweep.py — last-row logits against the micro-batch split (issue 32): for prompt lengths L and
micro-batch sizes u, the prompt's first L tokens go through the engine in passes of u rows (the last pass
holds the remaining 1..u rows) and only the last row asks for logits, as a generation's prefill does. A
prefix-cache hit is the same thing with another split: the cached blocks' rows were computed in other passes.

Compares, per (L, u), our last-row logits (libquarrel through tests/ref/qr_ctypes.py, CPU backend) with
llama.cpp's on the same split (llama-cpp-python, n_batch = n_ubatch = u, logits of the last row only), and
our rows of one L across the sizes u with each other (the split's own effect: llama.cpp's too, since its
kernels depend on a pass's row count: docs/performance.md, 2026-11-29).

The reference must be llama.cpp's **AVX2** build: our CPU backend reproduces its x86 AVX2 kernels, and a
native build on an AVX-512 machine sums in other orders (other logits at llama.cpp's own noise floor). The
tool refuses another build unless --any-isa; tools/build_llama_avx2.sh makes one, used through
LLAMA_CPP_LIB_PATH:

    bash tools/build_llama_avx2.sh          # once: /tmp/llama-avx2/bin/libllama.so ...
    LLAMA_CPP_LIB_PATH=/tmp/llama-avx2/bin .venv/bin/python tools/split_sweep.py [--lengths all|1-600|5,33,..]
        [--ubatches 1,7,16,33,64,512] [--model PATH] [--golden tests/data/ref/split-sweep-smollm2-q4_1.npz]

Without --golden it prints the live comparison (exit status 1 when any (L, u) differs from llama.cpp); with
--golden it writes the golden file of tests/ref/test_split_sweep.py for the lengths given (default: the
test's sample, GOLDEN_LENGTHS) instead: per (u, L) llama.cpp's top-K token ids and logits and the row's
log-sum-exp, plus the 600 prompt tokens (the SmolLM2 chat prompt "Say hello." followed by
tests/data/ref/teacher_text.txt).
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "ref"))
import qr_ctypes  # noqa: E402

import llama_isa  # noqa: E402  (tools/, the directory of this script)

MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
N_TOKENS = 600
UBATCHES = [1, 7, 16, 33, 64, 512]
# The lengths the CI test checks: the edges of every size's passes (1, u-1, u, u+1, 2u..), the 33-token
# chat prompt, the 256-key block-table class and the 512-row pass limit, plus a few others up to 600.
GOLDEN_LENGTHS = [1, 2, 3, 6, 7, 8, 15, 16, 17, 32, 33, 34, 49, 63, 64, 65, 100, 128, 129, 200, 255, 256, 257,
                  300, 384, 511, 512, 513, 577, 600]
TOP_K = 64


def prompt_tokens(quarrel_bin, model):
    """The chat prompt "Say hello." as SmolLM2's template renders it, then the teacher text, cut to N_TOKENS."""
    run = lambda *a, **kw: subprocess.run([quarrel_bin, *a], check=True, capture_output=True, text=True, **kw).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".json") as msgs:
        json.dump([{"role": "user", "content": "Say hello."}], msgs)
        msgs.flush()
        chat = run("template", "--model", str(model), "--messages", msgs.name)
    ids = json.loads(run("tokenize", "-m", str(model), "-p", chat, "--ids-only"))
    ids += json.loads(run("tokenize", "-m", str(model), "-f", str(ROOT / "tests/data/ref/teacher_text.txt"),
                          "--ids-only", "--no-special"))
    while len(ids) < N_TOKENS:  # the text again if it is short
        ids += ids[33:]
    return ids[:N_TOKENS]


def llama_rows(llama_cpp, model, tokens, u, lengths, n_threads):
    llm = llama_cpp.Llama(model_path=str(model), n_ctx=N_TOKENS + 64, n_batch=u, n_ubatch=u, logits_all=False,
                          n_threads=n_threads, verbose=False, seed=0)
    n_vocab = llm.n_vocab()

    def decode(ids):
        llm.eval(ids)
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1), shape=(n_vocab,)).copy()

    def truncate(n):
        llm.n_tokens = n  # the next eval removes positions >= n from llama.cpp's cache first

    rows = qr_ctypes.last_rows(decode, truncate, tokens, u, lengths)
    del llm
    return rows


def quarrel_rows(lib, model, tokens, u, lengths, n_threads):
    with qr_ctypes.Session(lib, model, n_ctx=N_TOKENS + 64, n_batch=u, n_threads=n_threads) as s:
        return qr_ctypes.last_rows(s.decode, s.truncate, tokens, u, lengths)


def parse_lengths(s):
    if s == "all":
        return list(range(1, N_TOKENS + 1))
    if "-" in s and "," not in s:
        a, b = s.split("-")
        return list(range(int(a), int(b) + 1))
    return sorted({int(x) for x in s.split(",")})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(pathlib.Path(os.environ.get(
        "QUARREL_MODELS_DIR", pathlib.Path.home() / ".cache/quarrel/models")) / MODEL))
    ap.add_argument("--bin", default=str(ROOT / "build" / "quarrel"), help="for the chat template and the tokenizer")
    ap.add_argument("--lengths", default=None, help="all, A-B or a comma list (default: the golden sample)")
    ap.add_argument("--ubatches", default=",".join(map(str, UBATCHES)))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--golden", default=None, help="write the golden file here instead of comparing")
    ap.add_argument("--any-isa", action="store_true", help="accept a llama.cpp that is not the AVX2 build")
    a = ap.parse_args()
    import llama_cpp

    llama_isa.require_avx2_build(llama_cpp, "split_sweep", a.any_isa)
    lengths = parse_lengths(a.lengths) if a.lengths else GOLDEN_LENGTHS
    ubatches = [int(x) for x in a.ubatches.split(",")]
    tokens = prompt_tokens(a.bin, a.model)
    if a.golden:
        ids, vals, lse = [], [], []
        for u in ubatches:
            ref = llama_rows(llama_cpp, a.model, tokens, u, lengths, a.threads)
            top = np.argsort(-ref, axis=-1, kind="stable")[:, :TOP_K]
            ids.append(top.astype(np.int32))
            vals.append(np.take_along_axis(ref, top, axis=-1).astype(np.float32))
            x = ref.astype(np.float64)
            lse.append(x.max(-1) + np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1)))
            print(f"u={u}: {len(lengths)} rows", flush=True)
        np.savez_compressed(a.golden, tokens=np.array(tokens, np.int32), lengths=np.array(lengths, np.int32),
                            ubatches=np.array(ubatches, np.int32), top_ids=np.stack(ids), top_logits=np.stack(vals),
                            lse=np.stack(lse), model_sha256=np.array(qr_ctypes.file_sha256(a.model)),
                            llama_system_info=np.array(llama_cpp.llama_print_system_info().decode()))
        print(f"wrote {a.golden}")
        return 0
    lib = qr_ctypes.load_lib()
    ours_all, bad = {}, False
    for u in ubatches:
        ref = llama_rows(llama_cpp, a.model, tokens, u, lengths, a.threads)
        ours = quarrel_rows(lib, a.model, tokens, u, lengths, a.threads)
        ours_all[u] = ours
        diff = (ours != ref).any(axis=-1)
        k = qr_ctypes.kl_rows(ref, ours)
        bad |= bool(diff.any())
        print(f"u={u:3d}: {int(diff.sum())} of {len(lengths)} last rows differ from llama.cpp"
              f"{' (L ' + str([lengths[i] for i in np.where(diff)[0][:8]]) + ')' if diff.any() else ''}, "
              f"max |diff| {np.abs(ours - ref).max():.3g}, max KL {k.max():.3g}", flush=True)
    us = sorted(ours_all)
    for ua in us:
        for ub in us:
            if ub <= ua:
                continue
            k = qr_ctypes.kl_rows(ours_all[ua], ours_all[ub])  # KL(P_ua || P_ub)
            same = int((ours_all[ua] == ours_all[ub]).all(axis=-1).sum())
            i = int(k.argmax())
            print(f"split u={ua:3d} vs u={ub:3d}: {same} of {len(lengths)} rows identical, KL mean {k.mean():.3g}, "
                  f"p99 {np.quantile(k, 0.99):.3g}, max {k.max():.3g} (L={lengths[i]})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
