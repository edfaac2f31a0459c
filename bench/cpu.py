#!/usr/bin/env python3
"""CPU speed vs llama.cpp on the same GGUF, the same machine and thread count (llama-bench method).

  pp N: one batch of N prompt tokens from an empty KV cache, t/s = N / time.
  tg N: N single-token decodes from an empty cache, t/s = N / time.

Ours: `quarrel bench --json`. llama.cpp: the same measurement through llama-cpp-python's low-level
API (llama_decode on the same token batches), n_batch = n_ubatch = N, flash attention at llama.cpp's
default (auto, as llama-bench and llama-cli run it; --flash-attn on|off to force it).
Runs alternate: r rounds, each one process of ours then one of llama.cpp (one warm-up, then one timed
repetition of each test), so that a noisy neighbour on a shared machine hits both alike; the table
shows the medians of the r rounds and the ratio of the medians (use r >= 5).
Peak RSS is that process's ru_maxrss (for llama.cpp minus the RSS of a bare Python that has imported
llama_cpp, measured the same way).

--llama-lib DIR runs llama.cpp from the shared libraries in DIR (LLAMA_CPP_LIB_PATH), e.g. the native
build of tools/build_llama_avx2.sh (ISA=native: AVX-512 on an AVX-512 host) or its AVX2 build; the
default is the llama-cpp-python installed in the venv. --isa sets ours' QUARREL_CPU_ISA.

usage: bench/cpu.py [-t 2] [-p 512] [-n 128] [-r 5] [--llama-lib DIR] [--isa avx2,avx512]
                    [--flash-attn auto|on|off] [--models a.gguf b.gguf ...]
"""
import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODELS = pathlib.Path(os.environ.get("QUARREL_MODELS_DIR", pathlib.Path.home() / ".cache/quarrel/models"))
DEFAULT_MODELS = [MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf", MODELS / "gemma-3-270m-q4_k_m.gguf"]

LLAMA_CHILD = r"""
import json, random, statistics, sys, time, resource
import llama_cpp as L
path, threads, n_p, n_g, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
flash = int(sys.argv[6]) if len(sys.argv) > 6 else -1
if path == "-":
    print(json.dumps({"rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                      "info": L.llama_print_system_info().decode().strip()})); sys.exit()
L.llama_backend_init()
mp = L.llama_model_default_params()
model = L.llama_model_load_from_file(path.encode(), mp)
cp = L.llama_context_default_params()
n = max(n_p, n_g) + 16
cp.n_ctx = n; cp.n_batch = max(n_p, 1); cp.n_ubatch = max(n_p, 1)
cp.n_threads = threads; cp.n_threads_batch = threads
cp.flash_attn_type = flash  # -1 auto (llama.cpp's default), 0 off, 1 on
ctx = L.llama_init_from_model(model, cp)
vocab = L.llama_model_get_vocab(model)
nv = L.llama_vocab_n_tokens(vocab)
rng = random.Random(42)
toks = [rng.randrange(nv) for _ in range(n)]
mem = L.llama_get_memory(ctx)
def decode(ts):
    arr = (L.llama_token * len(ts))(*ts)  # keep alive until llama_decode returns
    b = L.llama_batch_get_one(arr, len(ts))
    if L.llama_decode(ctx, b) != 0: raise SystemExit("llama_decode failed")
def pp():
    L.llama_memory_clear(mem, True); t = time.perf_counter(); decode(toks[:n_p]); L.llama_synchronize(ctx)
    return n_p / (time.perf_counter() - t)
def tg():
    L.llama_memory_clear(mem, True); t = time.perf_counter()
    for i in range(n_g): decode([toks[i]])
    L.llama_synchronize(ctx)
    return n_g / (time.perf_counter() - t)
if n_p: pp()
if n_g: tg()
P = [pp() for _ in range(reps)] if n_p else [0]
G = [tg() for _ in range(reps)] if n_g else [0]
sd = lambda x: statistics.stdev(x) if len(x) > 1 else 0.0
print(json.dumps({"pp_tps": statistics.mean(P), "pp_sd": sd(P), "tg_tps": statistics.mean(G), "tg_sd": sd(G),
                  "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


FLASH = {"auto": -1, "off": 0, "on": 1}


def llama_env(a):
    env = dict(os.environ)
    if a.llama_lib:
        env["LLAMA_CPP_LIB_PATH"] = a.llama_lib
    return env


def ours_env(isa):
    env = dict(os.environ)
    if isa:
        env["QUARREL_CPU_ISA"] = isa
    return env


def run_ours(qbin, model, a, isa, reps=1):
    r = subprocess.run([qbin, "bench", "-m", str(model), "-t", str(a.threads), "-p", str(a.p), "-n", str(a.n),
                        "-r", str(reps), "--json"], capture_output=True, text=True, env=ours_env(isa))
    if r.returncode:
        sys.exit(f"quarrel bench failed: {r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_llama(model, a, reps=1):
    r = subprocess.run([sys.executable, "-c", LLAMA_CHILD, str(model), str(a.threads), str(a.p), str(a.n), str(reps),
                        str(FLASH[a.flash_attn])], capture_output=True, text=True, env=llama_env(a))
    if r.returncode:
        sys.exit(f"llama.cpp bench failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def peak_rss_of(cmd, env=None):
    """Peak RSS (kB) of one child process, via GNU time's %M when available."""
    r = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, text=True, env=env)
    try:
        return int(r.stderr.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", type=int, default=5, help="alternating rounds (medians of these)")
    ap.add_argument("--quarrel", default=str(ROOT / "build" / "quarrel"))
    ap.add_argument("--llama-lib", default=None, help="directory of libllama.so & co (LLAMA_CPP_LIB_PATH)")
    ap.add_argument("--isa", default="", help="ours' QUARREL_CPU_ISA (auto, avx512, avx2, scalar); a comma list "
                    "(avx2,avx512) runs ours once per level in each round, one column each")
    ap.add_argument("--flash-attn", default="auto", choices=sorted(FLASH))
    ap.add_argument("--models", nargs="*", type=pathlib.Path, default=DEFAULT_MODELS)
    a = ap.parse_args()
    isas = a.isa.split(",") if a.isa else [""]
    bare = json.loads(subprocess.run([sys.executable, "-c", LLAMA_CHILD, "-", "0", "0", "0", "0"],
                                     capture_output=True, text=True, env=llama_env(a)).stdout)
    base = bare["rss_kb"]
    rows = []
    for m in a.models:
        ours = [{"pp": [], "tg": []} for _ in isas]
        ref = {"pp": [], "tg": []}
        for _ in range(a.r):
            for j, isa in enumerate(isas):
                o = run_ours(a.quarrel, m, a, isa)
                for k in ("pp", "tg"):
                    ours[j][k].append(o[k + "_tps"])
            lr = run_llama(m, a)
            for k in ("pp", "tg"):
                ref[k].append(lr[k + "_tps"])
        ours_rss = peak_rss_of([a.quarrel, "bench", "-m", str(m), "-t", str(a.threads), "-p", str(a.p), "-n", str(a.n),
                                "-r", "1", "--json"], ours_env(isas[-1]))
        ref_rss = lr["rss_kb"] - base
        rows.append((m.name, ours, ref, ours_rss, ref_rss))
    print(f"\nthreads {a.threads}, pp{a.p}, tg{a.n}; medians of {a.r} alternating rounds (t/s, min..max); "
          f"ratio = quarrel / llama.cpp medians")
    names = [i or os.environ.get("QUARREL_CPU_ISA", "auto") for i in isas]
    print(f"quarrel: {a.quarrel}, QUARREL_CPU_ISA {', '.join(names)}; "
          f"llama.cpp: {a.llama_lib or 'venv llama-cpp-python'}, flash attention {a.flash_attn}")
    print(f"llama.cpp system info: {bare.get('info', '?')}\n")
    span = lambda v: f"{statistics.median(v):.1f} ({min(v):.1f}..{max(v):.1f})"  # noqa: E731
    print("| model | test | " + " | ".join(f"quarrel {n}" for n in names) + " | llama.cpp | " +
          " | ".join(f"ratio {n}" for n in names) + " |")
    print("|---|---|" + "---|" * (2 * len(names) + 1))
    for name, o, r, *_ in rows:
        for k, label in (("pp", f"pp{a.p}"), ("tg", f"tg{a.n}")):
            if not (a.p if k == "pp" else a.n):
                continue
            mr = statistics.median(r[k])
            print(f"| {name} | {label} | " + " | ".join(span(oj[k]) for oj in o) + f" | {span(r[k])} | " +
                  " | ".join(f"{statistics.median(oj[k]) / mr:.2f}" for oj in o) + " |")
    print("\n| model | peak RSS quarrel (MiB) | peak RSS llama.cpp (MiB, minus bare Python) | ratio |\n|---|---|---|---|")
    for name, _, _, orss, rrss in rows:
        if orss and rrss > 0:
            print(f"| {name} | {orss / 1024:.0f} | {rrss / 1024:.0f} | {orss / rrss:.2f} |")


if __name__ == "__main__":
    main()
