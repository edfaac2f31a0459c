#!/usr/bin/env python3
"""tools/ref_sweep.py — our logits against llama.cpp's, live, on random token sequences, for every
reference model of tests/data/ref/manifest.json, synth and real (the golden-file tests cover one text;
this looks for the rare rows where the two engines part, e.g. a rounding that flips one activation code
in a few hundred rows).

For each model (a synth one written by `quarrel synth` as the manifest says, a real one from --models):
N random sequences of L tokens, teacher forced through llama-cpp-python and through `quarrel logits` at
the same micro-batch (--ubatch, default 64 as `quarrel logits`: per-expert row counts then match; 1: the
decode path); prints how many rows differ at all, the largest difference and the top-1 flips. 0 rows
everywhere = bit-identical logits.

    .venv/bin/python tools/ref_sweep.py [--bin build/quarrel] [--seed 7] [--seqs 3] [--len 400] [--ubatch 64]
                                        [--only mixtral,gpt-oss]

The reference is llama.cpp's AVX2 build (what our CPU backend reproduces): on an AVX-512 machine run
tools/build_llama_avx2.sh first and set LLAMA_CPP_LIB_PATH (the tool refuses another build unless --any-isa).

Exit status 1 when any row differs (a dev tool, not a CI test: it runs llama.cpp live).
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=str(ROOT / "build" / "quarrel"))
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--seqs", type=int, default=3)
    ap.add_argument("--len", type=int, default=400)
    ap.add_argument("--only", default="", help="comma-separated substrings of case names")
    ap.add_argument("--ubatch", type=int, default=64, choices=range(1, 65), metavar="1..64",
                    help="micro-batch of both engines (1: the decode path, token by token)")
    ap.add_argument("--models", default=os.environ.get("QUARREL_MODELS_DIR", os.path.expanduser("~/.cache/quarrel/models")),
                    help="directory of the real models (the manifest's file cases)")
    ap.add_argument("--any-isa", action="store_true", help="accept a llama.cpp that is not the AVX2 build")
    a = ap.parse_args()
    import llama_cpp

    import llama_isa  # tools/: our reference is llama.cpp's AVX2 build (tools/build_llama_avx2.sh)
    llama_isa.require_avx2_build(llama_cpp, "ref_sweep", a.any_isa)

    cases = json.loads((ROOT / "tests/data/ref/manifest.json").read_text())["cases"]
    only = [o for o in a.only.split(",") if o]
    rng = np.random.default_rng(a.seed)
    any_diff = False
    with tempfile.TemporaryDirectory() as tmp:
        for name, c in sorted(cases.items()):
            if only and not any(o in name for o in only):
                continue
            if c["kind"] == "file":  # a real model, from the models directory (scripts/setup.sh fetches them)
                model = os.path.join(a.models, c["file"])
                if not os.path.exists(model):
                    print(f"{name}: skipped, {model} not found", flush=True)
                    continue
            else:
                model = os.path.join(tmp, f"{name}.gguf")
                subprocess.run([a.bin, "synth", "--arch", c["arch"], "--preset", c["preset"], "--type", c["type"],
                                "--seed", str(c["seed"]), "-o", model], check=True, capture_output=True)
            llm = llama_cpp.Llama(model_path=model, n_ctx=a.len + 64, n_batch=512, n_ubatch=a.ubatch, logits_all=True,
                                  n_threads=os.cpu_count(), verbose=False, seed=0)
            parts = []
            for _ in range(a.seqs):
                ids = [int(t) for t in rng.integers(1, llm.n_vocab(), a.len)]
                llm.reset()
                llm.eval(ids)
                ref = np.array(llm.scores[: len(ids)], dtype=np.float32)
                ids_path, out = os.path.join(tmp, "ids.json"), os.path.join(tmp, "ours.npy")
                with open(ids_path, "w") as f:
                    json.dump(ids, f)
                subprocess.run([a.bin, "logits", "-m", model, "--tokens", ids_path, "-o", out, "--ubatch",
                                str(a.ubatch)], check=True, capture_output=True)
                ours = np.load(out)
                rows = np.where((ours != ref).any(axis=1))[0]
                any_diff |= len(rows) > 0
                flips = int((ours.argmax(1) != ref.argmax(1)).sum())
                parts.append(f"{len(rows)} rows differ{f' (first {rows[:3].tolist()})' if len(rows) else ''}, "
                             f"max {np.abs(ours - ref).max():.2e}, top-1 flips {flips}")
            del llm
            print(f"{name}: " + " | ".join(parts), flush=True)
    return 1 if any_diff else 0


if __name__ == "__main__":
    sys.exit(main())
