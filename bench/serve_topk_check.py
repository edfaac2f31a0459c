#!/usr/bin/env python3
"""bench/serve_topk_check.py — the top-k rows of a batched step (issue 29) give the same tokens as the full logits
rows on a given backend: the same sequential requests (greedy, seeded top-k / top-p / min-p sampling, and requests
that need the whole row) against `quarrel serve --parallel 1` with QUARREL_SAMPLE_TOPK=1 and =0. Standard library
only (the GPU machine). Prints both texts per request; exit status 1 on a difference.

    python3 bench/serve_topk_check.py --quarrel build/quarrel --model M.gguf [--backend cuda] [--port 8097]
"""
import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request

REQUESTS = [
    {"prompt": "The three primary colors are", "temperature": 0},
    {"prompt": "Once upon a time", "temperature": 0.9, "top_k": 40, "top_p": 0.9, "seed": 11},
    {"prompt": "A list of fruits:", "temperature": 1.2, "top_k": 5, "min_p": 0.1, "seed": 12},
    {"prompt": "def fibonacci(n):", "temperature": 0.7, "top_k": 63, "seed": 13},
    {"prompt": "The capital of France", "temperature": 1.0, "top_k": 0, "top_p": 0.95, "seed": 14},
    {"prompt": "Count: one, two,", "temperature": 0, "logprobs": 2},
]


def run(a, topk):
    env = dict(os.environ, QUARREL_SAMPLE_TOPK=topk)
    cmd = [a.quarrel, "serve", "-m", a.model, "--parallel", "1", "--port", str(a.port), "--host", "127.0.0.1",
           "--backend", a.backend]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{a.port}/readyz", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        out = []
        for body in REQUESTS:
            req = urllib.request.Request(f"http://127.0.0.1:{a.port}/v1/completions",
                                         json.dumps(dict(body, max_tokens=a.tokens)).encode(),
                                         {"Content-Type": "application/json"})
            out.append(json.loads(urllib.request.urlopen(req, timeout=300).read())["choices"][0]["text"])
        return out
    finally:
        p.terminate()
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quarrel", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--port", type=int, default=8097)
    ap.add_argument("--tokens", type=int, default=48)
    a = ap.parse_args()
    on, off = run(a, "1"), run(a, "0")
    bad = 0
    for body, x, y in zip(REQUESTS, on, off):
        same = x == y
        bad += not same
        print(f"{'same' if same else 'DIFFERENT'} {json.dumps(body)}\n  top-k rows: {x!r}\n  full rows:  {y!r}")
    print(f"serve_topk_check: {len(REQUESTS) - bad} of {len(REQUESTS)} requests the same")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
