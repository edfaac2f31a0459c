#!/usr/bin/env python3
"""bench/gpu_check.py — GPU vs CPU backend on the device machine (issue 5, acceptance 1 and 4).

For synth models (llama/gemma3 "tiny" in every weight type, --pure so that every matrix has that
type; smollm2-135m in the four bench types, more with --models) it runs, with the bundle's quarrel:
  - `quarrel logits --tokens P.json --backend cpu` and `--backend cuda` on 8 prompts of 64 random
    token ids: mean KL divergence KL(cpu || gpu) over all positions, share of positions with the same
    top-1 token (targets: mean KLD <= 1e-3, top-1 >= 99.5 %);
  - the same token by token on both backends (`quarrel logits --ubatch 1`: the decode path, its fused
    ops and graphs, against the CPU's decode path): the "decode" columns, same targets;
  - `quarrel run --tokens P.json -n 128 --temp 0 --ignore-eos --ids-only` on both backends: greedy
    generations identical on >= 7 of 8 prompts;
then the leak check (bundle/quarrel_cuda_leak: free GPU memory around model/context cycles and
1,000 generate calls).
Prints a markdown table and writes it to $OUT/gpu_check.md; raw numbers in $OUT/gpu_check.jsonl.

    python3 bench/gpu_check.py [--models llama:tiny,gemma3:tiny,llama:smollm2-135m] [--types F16,Q4_0,...]
                               [--prompts 8] [--gen 128] [--no-gen] [--no-leak] [--calls 1000]
A model may also be `file:PATH`, a GGUF file with real weights (e.g. the default model, SmolLM2-135M Q4_1):
its prompts are --prompts evenly spaced chunks of --prompt-len tokens of real text (--text, default
tests/data/ref/teacher_text.txt), tokenized by the model, instead of random ids.
--exact runs the GPU in its exact mode (QUARREL_CUDA_EXACT=1: the CPU's arithmetic, bit for bit).
--cache-type T gives both backends a KV cache of type T (q8_0, q4_0: the quantized cache of issue 34).
Environment: OUT (default /tmp/gpu_check), BUNDLE (build-gpu/bundle), MODEL_DIR (/tmp/qr_check_models).
Exit status: 0 when every target holds, 1 otherwise.
"""
import argparse
import json
import os
import subprocess
import sys
import time
import zlib

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALL_TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M",
             "Q6_K", "MXFP4"]
BENCH_TYPES = ["Q4_K_M", "Q4_0", "Q8_0", "F16"]
T0 = time.time()


def log(msg):
    print(f"[gpu_check +{time.time() - T0:.0f}s] {msg}", flush=True)


def run(cmd, timeout=600):
    """Runs cmd; returns (rc, stdout, stderr)."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {timeout} s"


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def compare_logits(a, b):
    """Mean KL(a || b) over rows, share of rows with the same argmax, max |a - b|."""
    la, lb = log_softmax(a), log_softmax(b)
    kld = (np.exp(la) * (la - lb)).sum(axis=-1)
    return float(kld.mean()), float((a.argmax(-1) == b.argmax(-1)).mean()), float(np.abs(a - b).max())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="llama:tiny,gemma3:tiny,llama:smollm2-135m",
                    help="arch:preset list, e.g. add llama:tinyllama-1.1b (slower: CPU generations)")
    ap.add_argument("--types", default=None, help="comma list (default: all for tiny, the bench four otherwise)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--no-gen", action="store_true")
    ap.add_argument("--no-leak", action="store_true")
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--text", default=os.path.join(ROOT, "tests", "data", "ref", "teacher_text.txt"),
                    help="file:PATH models (real weights): prompts are chunks of this text, not random ids")
    ap.add_argument("--exact", action="store_true", help="the GPU in exact mode (QUARREL_CUDA_EXACT=1)")
    ap.add_argument("--gpu-backend", default="cuda", help="backend compared with the CPU (cpu: a dry run of this script)")
    ap.add_argument("--cache-type", default=None,
                    help="KV cache type of both backends (--cache-type-k / -v: q8_0, q4_0, ...; default f16)")
    args = ap.parse_args()
    if args.exact:
        os.environ["QUARREL_CUDA_EXACT"] = "1"
    out = os.environ.get("OUT", "/tmp/gpu_check")
    bundle = os.environ.get("BUNDLE", os.path.join(ROOT, "build-gpu", "bundle"))
    model_dir = os.environ.get("MODEL_DIR", "/tmp/qr_check_models")
    os.makedirs(out, exist_ok=True)
    os.makedirs(model_dir, exist_ok=True)
    qr = os.path.join(bundle, "quarrel")
    cache = ["--cache-type-k", args.cache_type, "--cache-type-v", args.cache_type] if args.cache_type else []
    jl = open(os.path.join(out, "gpu_check.jsonl"), "a")
    rows, problems = [], []

    rc, so, se = run([qr, "version"])
    if rc != 0:
        print(f"ERROR: {qr} does not run: {se.strip()}", file=sys.stderr)
        return 1
    log(f"quarrel: {so.strip()}")

    for spec in args.models.split(","):
        arch, preset = spec.split(":", 1) if ":" in spec else ("llama", spec)
        real = arch == "file"  # file:PATH, a model file with real weights, as it is
        types = ["file"] if real else (args.types.split(",") if args.types else
                                       (ALL_TYPES if preset.endswith("tiny") else BENCH_TYPES))
        for typ in types:
            name = os.path.basename(preset).removesuffix(".gguf") if real else f"{arch}-{preset}-{typ}"
            path = preset if real else os.path.join(model_dir, name + ".gguf")
            if real and not os.path.exists(path):
                problems.append(f"{name}: {path} not found")
                log(problems[-1])
                continue
            if not os.path.exists(path):
                t = time.time()
                cmd = [qr, "synth", "--arch", arch, "--preset", preset, "--type", typ, "-o", path]
                if preset.endswith("tiny"):
                    cmd.append("--pure")
                rc, so, se = run(cmd)
                if rc != 0:
                    problems.append(f"{name}: synth failed: {se.strip()[-300:]}")
                    log(problems[-1])
                    continue
                log(f"synth {name}: {time.time() - t:.1f} s")
            klds, top1s, maxabs, same_gen, n_gen = [], [], [], 0, 0
            failed = False
            pfiles = []
            text_ids = []
            if real:  # evenly spaced chunks of real text, tokenized by the model (no BOS: mid-text)
                rc, so, se = run([qr, "tokenize", "-m", path, "-f", args.text, "--ids-only", "--no-special"])
                text_ids = json.loads(so.strip().splitlines()[-1]) if rc == 0 else []
                if len(text_ids) < args.prompt_len:
                    problems.append(f"{name}: tokenizing {args.text} failed: {se.strip()[-300:]}")
                    log(problems[-1])
                    continue
            for i in range(args.prompts):
                pfile = os.path.join(out, f"prompt_{name}_{i}.json" if real else f"prompt_{arch}_{preset}_{i}.json")
                if real:
                    step = (len(text_ids) - args.prompt_len) // max(1, args.prompts - 1)
                    json.dump(text_ids[i * step:i * step + args.prompt_len], open(pfile, "w"))
                elif not os.path.exists(pfile):
                    # the tiny presets' vocabularies (src/convert/synth_presets.c: quarrel synth --list)
                    small = arch in ("gemma3", "gemma2") or preset.endswith("long-tiny")
                    vocab = (1000 if small else 2000) if preset.endswith("tiny") else 32000
                    # seeded by the model and prompt number: the same prompts whatever else the run checks
                    prng = np.random.default_rng(zlib.crc32(f"{arch}:{preset}:{i}".encode()))
                    json.dump(prng.integers(4, vocab, size=args.prompt_len).tolist(), open(pfile, "w"))
                pfiles.append(pfile)
            # logits: the prompts back to back in one teacher-forced pass per backend (one process
            # start each: CUDA and model set-up cost about a second per process)
            allfile = os.path.join(out, f"prompt_{name}_all.json" if real else f"prompt_{arch}_{preset}_all.json")
            json.dump(sum((json.load(open(p)) for p in pfiles), []), open(allfile, "w"))
            res = {}
            for key, be, extra in (("cpu", "cpu", []), ("cuda", args.gpu_backend, []),
                                   ("cpu_decode", "cpu", ["--ubatch", "1"]),
                                   ("decode", args.gpu_backend, ["--ubatch", "1"])):
                npy = os.path.join(out, f"logits_{name}_{key}.npy")
                rc, so, se = run([qr, "logits", "-m", path, "--tokens", allfile, "-o", npy, "--backend", be] + extra + cache)
                if rc != 0:
                    problems.append(f"{name}: logits --backend {be} {' '.join(extra)} failed: {se.strip()[-300:]}")
                    log(problems[-1])
                    failed = True
                    break
                res[key] = np.load(npy)
                os.unlink(npy)
            dec = (None, None, None)
            if not failed:
                k, t1, ma = compare_logits(res["cpu"], res["cuda"])
                klds.append(k), top1s.append(t1), maxabs.append(ma)
                dec = compare_logits(res["cpu_decode"], res["decode"])
            # greedy generations, prompt by prompt (fewer for the tiny presets: many types, small value)
            n_gen_prompts = 0 if args.no_gen else (min(2, len(pfiles)) if preset.endswith("tiny") else len(pfiles))
            for pfile in pfiles[:n_gen_prompts]:
                if failed:
                    break
                gens = {}
                for be in ("cpu", args.gpu_backend):
                    rc, so, se = run([qr, "run", "-m", path, "--tokens", pfile, "-n", str(args.gen), "--temp", "0",
                                      "--ignore-eos", "--ids-only", "-q", "--backend", be] + cache)
                    if rc != 0:
                        problems.append(f"{name} {os.path.basename(pfile)}: run --backend {be} failed: "
                                        f"{se.strip()[-300:]}")
                        log(problems[-1])
                        gens = None
                        break
                    gens["cpu" if not gens else "cuda"] = json.loads(so.strip().splitlines()[-1])
                if gens:
                    n_gen += 1
                    same_gen += gens["cpu"] == gens["cuda"]
            if failed or not klds:
                rows.append((name, None, None, None, None, None, None, None))
                continue
            r = {"model": name, "mean_kld": float(np.mean(klds)), "top1": float(np.mean(top1s)),
                 "max_abs": float(np.max(maxabs)), "decode_kld": dec[0], "decode_top1": dec[1],
                 "same_gen": same_gen, "n_gen": n_gen}
            jl.write(json.dumps(r) + "\n")
            jl.flush()
            rows.append((name, r["mean_kld"], r["top1"], r["max_abs"], dec[0], dec[1], same_gen, n_gen))
            ok = (r["mean_kld"] <= 1e-3 and r["top1"] >= 0.995 and dec[0] <= 1e-3 and dec[1] >= 0.995 and
                  (n_gen == 0 or same_gen >= 7 * n_gen / 8))
            log(f"{name}: mean KLD {r['mean_kld']:.2e}, top-1 {100 * r['top1']:.2f}%, max|d| {r['max_abs']:.3g}, "
                f"decode KLD {dec[0]:.2e} top-1 {100 * dec[1]:.2f}%, "
                f"greedy same {same_gen}/{n_gen} {'ok' if ok else 'MISSED'}")
            if not ok:
                problems.append(f"{name}: target missed")

    lines = ["# GPU vs CPU backend (bench/gpu_check.py" + (", exact mode" if args.exact else "") + ")", "",
             f"{args.prompts} prompts of {args.prompt_len} ids (random for synth models, chunks of real text for file: "
             f"models; logits: back to back); greedy {args.gen} "
             "tokens per prompt (2 prompts for the tiny presets). Targets: mean "
             "KLD <= 1e-3, top-1 >= 99.5 %, greedy identical on >= 7 of 8.", "",
             "| model | mean KLD | top-1 | max abs diff | decode KLD | decode top-1 | greedy same | ok |",
             "|---|---|---|---|---|---|---|---|"]
    for name, k, t1, ma, dk, dt1, sg, ng in rows:
        if k is None:
            lines.append(f"| {name} | failed | | | | | | NO |")
            continue
        ok = k <= 1e-3 and t1 >= 0.995 and dk <= 1e-3 and dt1 >= 0.995 and (ng == 0 or sg >= 7 * ng / 8)
        lines.append(f"| {name} | {k:.2e} | {100 * t1:.2f}% | {ma:.3g} | {dk:.2e} | {100 * dt1:.2f}% | {sg}/{ng} | "
                     f"{'yes' if ok else 'NO'} |")

    for tool, extra in (("quarrel_cuda_leak", ["--calls", str(args.calls)]),):
        if tool == "quarrel_cuda_leak" and args.no_leak:
            continue
        exe = os.path.join(bundle, tool)
        if not os.path.exists(exe):
            problems.append(f"{tool}: not in the bundle")
            continue
        t = time.time()
        rc, so, se = run([exe] + extra, timeout=540)
        lines += ["", f"## {tool} (rc {rc}, {time.time() - t:.0f} s)", "", "```", (so + se).strip()[-3000:], "```"]
        log(f"{tool}: rc {rc}")
        if rc != 0:
            problems.append(f"{tool}: rc {rc}")

    lines += ["", "Problems: " + ("none" if not problems else ""), *[f"- {p}" for p in problems]]
    text = "\n".join(lines) + "\n"
    open(os.path.join(out, "gpu_check.md"), "w").write(text)
    print(text)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
