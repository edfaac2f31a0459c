#!/usr/bin/env python3
"""Tokenizer speed: ours vs llama.cpp (llama-cpp-python) on 1 MB of English text.

The text is built deterministically from the English prose of tests/data/tokenizer/corpus.jsonl
(shuffled with a fixed seed and repeated to 1 MiB). Both sides tokenize it with add_special and
parse_special off; ours reports the time of qr_tokenize alone (`quarrel tokenize --timing`), llama.cpp's
is the time of one llama_tokenize call (through llama-cpp-python's ctypes binding, into a buffer that is
large enough, so it tokenizes once). Best of --repeat runs each. The ids must be equal.

usage: bench/tokenize.py [--quarrel build/quarrel] [--model PATH] [--repeat 3] [--size 1048576]
prints one line per model and the ratio ours/llama.cpp (lower is better; target <= 1.0).
"""
import argparse
import json
import os
import pathlib
import random
import re
import subprocess
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def english_text(size):
    corpus = [json.loads(line) for line in (ROOT / "tests/data/tokenizer/corpus.jsonl").read_text().splitlines()]
    prose = [bytes.fromhex(c["hex"]).decode() for c in corpus if c["kind"] in ("english", "english_words")]
    r = random.Random(42)
    out, n = [], 0
    while n < size:
        r.shuffle(prose)
        for p in prose:
            s = p.strip() + (" " if r.random() < 0.8 else "\n")
            out.append(s)
            n += len(s.encode())
            if n >= size:
                break
    return "".join(out).encode()[:size]


def ours(quarrel, model, path, repeat):
    best, ids = None, None
    for _ in range(repeat):
        r = subprocess.run([quarrel, "tokenize", "-m", model, "-f", path, "--ids-only", "--no-special",
                            "--no-parse-special", "--timing"], capture_output=True, check=True)
        t = float(re.search(rb"in ([0-9.]+) s", r.stderr).group(1))
        best = t if best is None else min(best, t)
        ids = json.loads(r.stdout)
    return best, ids


def llama(model, text, repeat):
    import llama_cpp

    llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    cap = len(text) + 16
    buf = (llama_cpp.llama_token * cap)()
    best, ids = None, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = llama_cpp.llama_tokenize(vocab, text, len(text), buf, cap, False, False)
        t = time.perf_counter() - t0
        assert n >= 0, n
        best = t if best is None else min(best, t)
        ids = list(buf[:n])
    return best, ids


def main():
    models_dir = pathlib.Path(os.environ.get("QUARREL_MODELS_DIR", pathlib.Path.home() / ".cache/quarrel/models"))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quarrel", default=os.environ.get("QUARREL_BIN", str(ROOT / "build/quarrel")))
    ap.add_argument("--model", action="append", default=[])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--size", type=int, default=1 << 20)
    a = ap.parse_args()
    models = a.model or [str(models_dir / "SmolLM2-135M-Instruct.Q4_1.gguf"), str(models_dir / "gemma-3-270m-q4_k_m.gguf")]
    text = english_text(a.size)
    with tempfile.NamedTemporaryFile(suffix=".txt") as f:
        f.write(text)
        f.flush()
        for model in models:
            t_ours, ids_ours = ours(a.quarrel, model, f.name, a.repeat)
            t_ref, ids_ref = llama(model, text, a.repeat)
            same = "ids equal" if ids_ours == ids_ref else "IDS DIFFER"
            print(f"{pathlib.Path(model).name}: {len(text)} bytes -> {len(ids_ours)} tokens; ours {t_ours * 1e3:.1f} ms, "
                  f"llama.cpp {t_ref * 1e3:.1f} ms; ratio ours/llama.cpp = {t_ours / t_ref:.3f} ({same})")


if __name__ == "__main__":
    main()
