"""Tensor parallelism and layer split with CPU ranks (issue 37): `quarrel logits --backend cpu --tp N` splits the model into N shards
(attention heads, FFN / expert columns, output vocabulary) on N CPU backends joined by the shared-memory
all-reduce, the same sharding code the CUDA ranks run over NCCL. Teacher-forced logits of 2 and 4 ranks must
equal the one-rank run within float noise: mean KL <= 1e-6 and the same top-1 on >= 98 % of the rows (a random-
weight model has near-ties), for every architecture family we run, on synth models.

F16 weights: the partial sums of the row-parallel matmuls (attention output, FFN down, experts' down) add in a
different order than one rank's dot product, and the next matmul's f16 activations round that noise away most of
the time. With Q8_0 weights the activations are quantized to 8 bits, so one rounding flip moves a value by 1/127:
that case is held to 3e-4 (measured 0 to 9e-5; llama.cpp's own AVX2 and AVX-512 builds differ by ~5e-3 on SmolLM2).

MoE models: the router reads the residual stream, so that float noise can flip a near-tie in the top-k choice of
experts for a row (as any change of summation order does: llama.cpp's CPU and GPU builds flip likewise). Such a
row differs by far more than noise (KL ~1e-2). For MoE cases at most 1 % of rows may flip (KL > 1e-3); the mean KL
of the other rows must still be <= 1e-6, and the mean over all rows is printed. Dense models may flip none.
"""
import json
import pathlib
import random
import subprocess
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

CASES = ["llama:tiny", "gemma3:tiny", "llama:mixtral-tiny", "gpt-oss:tiny", "qwen3moe:tiny", "granitehybrid:tiny",
         "nemotron_h_moe:tiny", "qwen2:tiny", "qwen2moe:tiny", "phi3:tiny", "gemma2:tiny", "glm4:tiny",
         "nemotron:tiny", "granite:tiny"]


def synth(quarrel_bin, path, arch, preset, typ):
    subprocess.run([quarrel_bin, "synth", "--arch", arch, "--preset", preset, "--type", typ, "--seed", "1", "-o",
                    str(path)], check=True, capture_output=True)


def logits(quarrel_bin, model, ids, out, tp, ubatch=64, extra=()):
    r = subprocess.run([quarrel_bin, "logits", "-m", str(model), "--tokens", str(ids), "-o", str(out), "--backend",
                        "cpu", "-t", "2", "--tp", str(tp), "--ubatch", str(ubatch), *extra], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return np.load(out)


def token_file(tmp_path, n, n_vocab=900, seed=7):
    rnd = random.Random(seed)
    p = tmp_path / f"ids{n}.json"
    p.write_text(json.dumps([rnd.randrange(3, n_vocab) for _ in range(n)]))
    return p


def kl_rows(a, b):
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    la = a - a.max(1, keepdims=True)
    la -= np.log(np.exp(la).sum(1, keepdims=True))
    lb = b - b.max(1, keepdims=True)
    lb -= np.log(np.exp(lb).sum(1, keepdims=True))
    return (np.exp(la) * (la - lb)).sum(1)


MOE = {"llama:mixtral-tiny", "gpt-oss:tiny", "qwen3moe:tiny", "nemotron_h_moe:tiny", "qwen2moe:tiny"}


def check(name, ref, got, kl_max, moe=False):
    assert ref.shape == got.shape
    k = kl_rows(ref, got)
    flips = k > 1e-3
    kl_rest = float(k[~flips].mean())
    top1 = float((ref.argmax(1) == got.argmax(1)).mean())
    print(f"{name}: mean KL {k.mean():.3e} ({int(flips.sum())} of {len(k)} rows with an expert flip; the others "
          f"{kl_rest:.3e}), same top-1 {100 * top1:.1f}%")
    assert flips.sum() <= (0.01 * len(k) if moe else 0), f"{name}: {int(flips.sum())} rows differ by KL > 1e-3"
    assert kl_rest <= kl_max, f"{name}: mean KL {kl_rest:.3e} > {kl_max}"
    assert top1 >= 0.98, f"{name}: same top-1 on {100 * top1:.1f}% of rows"


@pytest.mark.parametrize("case", CASES)
def test_tp_matches_one_rank(case, quarrel_bin, tmp_path):
    arch, preset = case.split(":")
    model = tmp_path / "m.gguf"
    synth(quarrel_bin, model, arch, preset, "F16")
    ids = token_file(tmp_path, 256)
    ref = logits(quarrel_bin, model, ids, tmp_path / "tp1.npy", 1)
    for tp in (2, 4):
        check(f"{case} tp{tp}", ref, logits(quarrel_bin, model, ids, tmp_path / f"tp{tp}.npy", tp), 1e-6, case in MOE)


@pytest.mark.parametrize("typ,kl_max", [("F16", 1e-6), ("Q8_0", 3e-4)])
def test_tp_decode_path_and_q8(typ, kl_max, quarrel_bin, tmp_path):
    """Token-by-token passes (the decode path) and Q8_0 weights (8-bit activations)."""
    model = tmp_path / "m.gguf"
    synth(quarrel_bin, model, "llama", "tiny", typ)
    ids = token_file(tmp_path, 96)
    for ub in (1, 64):
        ref = logits(quarrel_bin, model, ids, tmp_path / f"r{ub}.npy", 1, ub)
        for tp in (2, 4):
            check(f"llama {typ} ubatch {ub} tp{tp}", ref,
                  logits(quarrel_bin, model, ids, tmp_path / f"t{ub}_{tp}.npy", tp, ub), kl_max)


@pytest.mark.parametrize("case,tp,split", [("llama:tiny", 2, None), ("gemma3:tiny", 2, "1,3"),
                                           ("granitehybrid:tiny", 4, None), ("nemotron_h_moe:tiny", 3, "2,1,1"),
                                           ("gpt-oss:tiny", 2, None), ("llama:mixtral-tiny", 2, None),
                                           ("deepseek2:tiny", 3, None)])
def test_layer_split_is_exact(case, tp, split, quarrel_bin, tmp_path):
    """--split-mode layer: whole layers a rank, run in turn (x handed on through the host): the same arithmetic as
    one rank, so the same logits bit for bit, at 64-row and 1-row passes."""
    arch, preset = case.split(":")
    model = tmp_path / "m.gguf"
    synth(quarrel_bin, model, arch, preset, "F16")
    ids = token_file(tmp_path, 96)
    extra = ["--split-mode", "layer"] + (["--tensor-split", split] if split else [])
    for ub in (64, 1):
        ref = logits(quarrel_bin, model, ids, tmp_path / f"r{ub}.npy", 1, ub)
        got = logits(quarrel_bin, model, ids, tmp_path / f"l{ub}.npy", tp, ub, extra)
        assert np.array_equal(ref, got), f"{case} layer split over {tp}: max diff {np.abs(ref - got).max()}"


@pytest.mark.parametrize("arch,preset,tp,msg", [
    ("llama", "tiny", 3, "4 attention heads do not split evenly"),
    ("olmo2", "tiny", 2, "normalises q / k over all heads"),
    ("bert", "tiny", 2, "is an encoder"),
    ("deepseek2", "lite-tiny", 2, "multi-head latent attention is not split"),
    ("llama", "tiny", "3 --split-mode layer", "rank 1 gets no layer of 2"),
])
def test_tp_refusals(arch, preset, tp, msg, quarrel_bin, tmp_path):
    model = tmp_path / "m.gguf"
    synth(quarrel_bin, model, arch, preset, "F16")
    ids = token_file(tmp_path, 8, 200)
    r = subprocess.run([quarrel_bin, "logits", "-m", str(model), "--tokens", str(ids), "-o", str(tmp_path / "x.npy"),
                        "--backend", "cpu", "--tp", *str(tp).split()], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and msg in r.stderr, r.stderr
    assert "tensor parallelism" in r.stderr or "layer split" in r.stderr


def test_tp_bad_values(quarrel_bin, tmp_path):
    for opt, bad in (("--tp", "0"), ("--tp", "17"), ("--tp", "x"), ("--split-mode", "rows"), ("--tensor-split", "1,x"),
                     ("--tensor-split", "-1"), ("--tensor-split", ",".join(["1"] * 17))):
        r = subprocess.run([quarrel_bin, "logits", "-m", "none.gguf", "-p", "hi", "-o", str(tmp_path / "x.npy"), opt,
                            bad], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and opt in r.stderr, r.stderr


# ---- ranks as processes (--tp-addr, `quarrel worker`): the same shards, each rank job sent over TCP ----

def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_workers(quarrel_bin, model, tp, port, ranks=None, extra=()):
    return [subprocess.Popen([quarrel_bin, "worker", "-m", str(model), "--backend", "cpu", "-t", "1", "--tp", str(tp),
                              "--tp-rank", str(r), "--tp-addr", f"127.0.0.1:{port}", *extra],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for r in (ranks or range(1, tp))]


def logits_procs(quarrel_bin, model, ids, out, tp, ubatch=64):
    """Rank 0 here, ranks 1..tp-1 as `quarrel worker` processes; every worker must exit 0 after the driver."""
    port = free_port()
    # the driver first: it binds the port at once (the workers retry until it listens)
    d = subprocess.Popen([quarrel_bin, "logits", "-m", str(model), "--tokens", str(ids), "-o", str(out), "--backend",
                          "cpu", "-t", "1", "--tp", str(tp), "--tp-addr", f"127.0.0.1:{port}", "--ubatch", str(ubatch)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ws = start_workers(quarrel_bin, model, tp, port)
    _, derr = d.communicate(timeout=300)
    for w in ws:
        _, err = w.communicate(timeout=60)
        assert w.returncode == 0, err
        assert "the driver left" in err, err
    assert d.returncode == 0, derr
    return np.load(out)


@pytest.mark.parametrize("case,typ,tp", [("llama:tiny", "F16", 2), ("llama:tiny", "Q8_0", 4),
                                         ("llama:mixtral-tiny", "F16", 2), ("gpt-oss:tiny", "F16", 2),
                                         ("granitehybrid:tiny", "F16", 2), ("gemma3:tiny", "Q8_0", 2)])
def test_tp_processes_equal_one_process(case, typ, tp, quarrel_bin, tmp_path):
    """Ranks in tp processes sum in the same rank order as tp ranks of one process: the same logits bit for bit, in
    prompt passes (64 rows) and token-by-token passes (the decode path)."""
    arch, preset = case.split(":")
    model = tmp_path / "m.gguf"
    synth(quarrel_bin, model, arch, preset, typ)
    ids = token_file(tmp_path, 80)
    for ub in (64, 1):
        ref = logits(quarrel_bin, model, ids, tmp_path / f"in{ub}.npy", tp, ub)
        got = logits_procs(quarrel_bin, model, ids, tmp_path / f"pr{ub}.npy", tp, ub)
        assert np.array_equal(ref, got), f"{case} {typ} tp{tp} ubatch {ub}: max diff {np.abs(ref - got).max()}"


def start_driver(quarrel_bin, model, tp, port, env=None):
    import os
    return subprocess.Popen([quarrel_bin, "logits", "-m", str(model), "-p", "hello", "-o", "/dev/null", "--backend", "cpu",
                             "--tp", str(tp), "--tp-addr", f"127.0.0.1:{port}"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


def run_driver(quarrel_bin, model, tp, port, env=None, extra=()):
    import os
    return subprocess.run([quarrel_bin, "logits", "-m", str(model), "-p", "hello", "-o", "/dev/null", "--backend", "cpu",
                           "--tp", str(tp), "--tp-addr", f"127.0.0.1:{port}", *extra], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


def test_tp_processes_refuse_mismatches(quarrel_bin, tmp_path):
    """A worker started with another --tp, another model file or a rank already taken is refused by the driver,
    both sides exit with the reason; a driver whose ranks never come gives up after QUARREL_TP_TIMEOUT naming them."""
    model, other = tmp_path / "m.gguf", tmp_path / "o.gguf"
    synth(quarrel_bin, model, "llama", "tiny", "F16")
    synth(quarrel_bin, other, "llama", "tiny", "Q8_0")
    for wmodel, wtp, ranks, msg in ((model, 4, [1], "it was started with --tp 4, this driver with --tp 2"),
                                    (other, 2, [1], "it loaded a different model file"),
                                    (model, 4, [1, 1], "joined twice")):
        port = free_port()
        d = start_driver(quarrel_bin, model, 4 if len(ranks) == 2 else 2, port, {"QUARREL_TP_TIMEOUT": "20"})
        ws = start_workers(quarrel_bin, wmodel, wtp, port, ranks)
        _, derr = d.communicate(timeout=120)
        assert d.returncode == 1 and msg in derr, derr
        errs = []
        for w in ws:
            _, err = w.communicate(timeout=60)
            errs.append((w.returncode, err))
        assert any(rc == 1 and "refused rank 1" in e and msg in e for rc, e in errs), errs
    r = run_driver(quarrel_bin, model, 3, free_port(), {"QUARREL_TP_TIMEOUT": "1"})
    assert r.returncode == 1 and "waited 1 s" in r.stderr and "for ranks 1, 2" in r.stderr, r.stderr
    w = subprocess.run([quarrel_bin, "worker", "-m", str(model), "--backend", "cpu", "--tp", "2", "--tp-rank", "1",
                        "--tp-addr", f"127.0.0.1:{free_port()}"], capture_output=True, text=True, timeout=60,
                       env={**__import__("os").environ, "QUARREL_TP_TIMEOUT": "1"})
    assert w.returncode == 1 and "no driver at 127.0.0.1" in w.stderr, w.stderr


def test_tp_processes_bad_options(quarrel_bin, tmp_path):
    model = tmp_path / "m.gguf"
    synth(quarrel_bin, model, "llama", "tiny", "F16")
    cases = ((["--tp", "2", "--tp-addr", "127.0.0.1:99999"], 1, "port must be 1..65535"),
             (["--tp", "2", "--tp-addr", "127.0.0.1"], 1, "expected HOST:PORT"),
             (["--tp", "2", "--tp-addr", "no.such.host.invalid:5000", "--tp-rank", "1"], 1, "--tp-addr"),
             (["--tp", "2", "--tp-rank", "1"], 2, "--tp-rank 1 needs --tp N"),
             (["--tp-addr", "127.0.0.1:5000"], 2, "--tp-addr needs --tp N"),
             (["--tp", "2", "--tp-addr", "127.0.0.1:5000", "--split-mode", "layer"], 1, "split by tensor only"),
             (["--tp", "2", "--tp-rank", "2", "--tp-addr", "127.0.0.1:5000"], 1, "--tp-rank 2: outside 0..1"))
    for opts, rc, msg in cases:
        r = subprocess.run([quarrel_bin, "logits", "-m", str(model), "-p", "hi", "-o", "/dev/null", "--backend", "cpu",
                            *opts], capture_output=True, text=True, timeout=60)
        assert r.returncode == rc and msg in r.stderr, (opts, r.stderr)
    r = subprocess.run([quarrel_bin, "worker", "-m", str(model), "--tp", "2", "--tp-addr", "127.0.0.1:5000"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--tp-rank R in 1..N-1" in r.stderr, r.stderr
