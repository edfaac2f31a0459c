#!/usr/bin/env python3
"""tools/ref_noise_floor.py — how closely llama.cpp agrees with itself on a real quantized model.

The GPU-vs-CPU acceptance (issue 5: mean KLD <= 1e-3, same top-1 >= 99.5 %) compares two backends whose
matmuls both quantize their activations to 8 bits. This script measures, on the CPU of this machine and
on the golden tokens of a tests/data/ref case (teacher-forced, the same 512 tokens as tests/ref):

  1. llama.cpp (llama-cpp-python as installed) evaluating the tokens in one batch vs one token at a time
     (its prefill path vs its decode path);
  2. llama.cpp as installed vs the golden file (llama.cpp as built where the goldens were made);
  3. `quarrel logits` (CPU) vs the golden file.

KL is computed as tests/ref computes it: over the golden's top-K tokens (a lower bound of the full KL).

    .venv/bin/python tools/ref_noise_floor.py [--case smollm2-q4_1] [--quarrel build/quarrel]
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
DATA = ROOT / "tests" / "data" / "ref"


def log_softmax(x):
    x = x.astype(np.float64)
    x = x - x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def vs_topk(lp, ids, ref_lp):
    """Mean KL(ref || lp) over the reference top-K (tests/ref's measure) and top-1 agreement."""
    q = np.take_along_axis(lp, ids, axis=1)
    p = np.exp(ref_lp)
    return float((p * (ref_lp - q)).sum(axis=1).mean()), float((lp.argmax(axis=1) == ids[:, 0]).mean())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="smollm2-q4_1")
    ap.add_argument("--quarrel", default=str(ROOT / "build" / "quarrel"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    import llama_cpp

    case = json.loads((DATA / "manifest.json").read_text())["cases"][args.case]
    if case["kind"] != "file":
        sys.exit(f"{args.case}: a real-model case (kind 'file') is needed")
    models = pathlib.Path(os.environ.get("QUARREL_MODELS_DIR", pathlib.Path.home() / ".cache/quarrel/models"))
    path = str(models / case["file"])
    gold = np.load(DATA / f"{args.case}.logits.npz")
    toks = gold["tokens"].tolist()
    ids, ref_lp = gold["topk_ids"], gold["topk_logprobs"].astype(np.float64)

    out = {}
    for nb in (512, 1):
        llm = llama_cpp.Llama(model_path=path, n_ctx=2048, n_batch=nb, n_ubatch=nb, logits_all=True,
                              n_threads=args.threads, verbose=False, seed=0)
        llm.eval(toks)
        out[nb] = log_softmax(np.array(llm.scores[:len(toks)]))
        del llm
    with tempfile.TemporaryDirectory() as td:
        tf, npy = os.path.join(td, "t.json"), os.path.join(td, "q.npy")
        json.dump(toks, open(tf, "w"))
        subprocess.run([args.quarrel, "logits", "-m", path, "--tokens", tf, "-o", npy, "--backend", "cpu"],
                       check=True, capture_output=True)
        ours = log_softmax(np.load(npy))

    # 1: the batch run's own top-K as the reference
    b_ids = np.argsort(-out[512], axis=1, kind="stable")[:, :ids.shape[1]]
    b_lp = np.take_along_axis(out[512], b_ids, axis=1)
    rows = [("llama.cpp (installed): batch of 512 vs one token at a time", *vs_topk(out[1], b_ids, b_lp)),
            ("llama.cpp (installed, batch) vs the golden file", *vs_topk(out[512], ids, ref_lp)),
            ("quarrel CPU vs the golden file", *vs_topk(ours, ids, ref_lp))]
    print(f"{args.case}: {len(toks)} teacher-forced tokens, llama-cpp-python {llama_cpp.__version__}, "
          f"golden made with {json.loads((DATA / 'manifest.json').read_text()).get('llama_cpp_python')}")
    print(f"system: {llama_cpp.llama_print_system_info().decode().strip()}")
    print("| comparison | mean KL (top-K) | same top-1 |\n|---|---|---|")
    for name, kl, t1 in rows:
        print(f"| {name} | {kl:.2e} | {100 * t1:.2f} % |")


if __name__ == "__main__":
    main()
