#!/usr/bin/env python3
"""Embedding speed: `quarrel embed` against sentence-transformers on the same texts, in sentences/s at
batch 32 (issue 35's target: >= 1.5x sentence-transformers, on the CPU at 2 threads and on a GPU).

For each corpus, quarrel embeds the texts with `--batch 32 -t THREADS` and reports its own embedding
time (model load excluded); sentence-transformers runs `encode(batch_size=32)` after a warm-up batch,
with torch limited to THREADS threads (on the CPU) or on CUDA (`--device cuda`), in a separate Python
that has torch + sentence-transformers (`--st-python`). Each side runs `--repeat` times and the best run
counts (the machine is shared: the best is the least disturbed). Corpora: `short` (tests/data/embed/
sentences.jsonl, 220 English sentences, repeated to --n-short lines) and `multilingual` (tests/data/embed/
multilingual.jsonl, 1,200 lines incl. long paragraphs cut at 256 tokens).

usage: bench/embed_speed.py --model MiniLM.gguf --st-model DIR --st-python PY [--device cpu|cuda] [-t 2]
       [--repeat 3] [--n-short 2000] [--corpus short,multilingual] [--json OUT]
  (quarrel picks the GPU itself when one is present: run with --device cuda there)
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "embed"

ST_SCRIPT = r"""
import json, sys, time
import torch
from sentence_transformers import SentenceTransformer
model_dir, path, device, threads, repeat = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
if device == "cpu":
    torch.set_num_threads(threads)
texts = [json.loads(l)["text"] for l in open(path, encoding="utf-8") if l.strip()]
m = SentenceTransformer(model_dir, device=device, local_files_only=True)
m.encode(texts[:32], batch_size=32)
best = None
for _ in range(repeat):
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    m.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    if device == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    best = dt if best is None else min(best, dt)
print(json.dumps({"n": len(texts), "seconds": best, "torch": torch.__version__,
                  "threads": torch.get_num_threads()}))
"""


def corpus_file(name, n_short, tmp):
    if name == "multilingual":
        return DATA / "multilingual.jsonl"
    lines = [line for line in open(DATA / "sentences.jsonl", encoding="utf-8") if line.strip()]
    path = pathlib.Path(tmp) / "short.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n_short):
            f.write(lines[i % len(lines)])
    return path


def run_quarrel(quarrel, model, path, threads, repeat):
    best = None
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run([quarrel, "embed", "-m", model, "-f", str(path), "-o", os.path.join(tmp, "o.npy"),
                                "--batch", "32", "-t", str(threads)], capture_output=True, text=True, timeout=3600)
        if r.returncode != 0:
            sys.exit(f"quarrel embed failed: {r.stderr[-2000:]}")
        m = re.search(r"embed: (\d+) texts, dim \d+, ([0-9.]+) s", r.stderr)
        n, dt = int(m.group(1)), float(m.group(2))
        best = dt if best is None else min(best, dt)
    return n, best


def run_st(st_python, st_model, path, device, threads, repeat):
    r = subprocess.run([st_python, "-c", ST_SCRIPT, st_model, str(path), device, str(threads), str(repeat)],
                       capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        sys.exit(f"sentence-transformers failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quarrel", default=str(ROOT / "build" / "quarrel"))
    ap.add_argument("--model", required=True, help="GGUF (tools/convert_bert.py)")
    ap.add_argument("--st-model", required=True, help="the sentence-transformers model directory")
    ap.add_argument("--st-python", default=sys.executable, help="a Python with torch + sentence-transformers")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--n-short", type=int, default=2000)
    ap.add_argument("--corpus", default="short,multilingual")
    ap.add_argument("--json", help="write the results here too")
    a = ap.parse_args()
    load = os.getloadavg()[0]
    print(f"# device {a.device}, {a.threads} threads, batch 32, best of {a.repeat}; load average {load:.2f} "
          f"on {os.cpu_count()} CPUs (a shared machine: compare ratios, not absolute numbers)")
    print(f"{'corpus':<14}{'n':>6}{'quarrel s/s':>14}{'ST s/s':>10}{'ratio':>8}")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.corpus.split(","):
            path = corpus_file(name, a.n_short, tmp)
            n, q_s = run_quarrel(a.quarrel, a.model, path, a.threads, a.repeat)
            st = run_st(a.st_python, a.st_model, path, a.device, a.threads, a.repeat)
            q_rate, st_rate = n / q_s, st["n"] / st["seconds"]
            results.append({"corpus": name, "n": n, "quarrel_per_s": q_rate, "st_per_s": st_rate,
                            "ratio": q_rate / st_rate, "device": a.device, "threads": a.threads,
                            "torch": st["torch"], "load_avg": load})
            print(f"{name:<14}{n:>6}{q_rate:>14.1f}{st_rate:>10.1f}{q_rate / st_rate:>8.2f}")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
