"""Reference match vs llama.cpp: teacher-forced logits (KL divergence, top-1) and greedy generations.

Golden files come from tools/gen_ref_golden.py (llama-cpp-python on the very same GGUF files).
Two golden sets: tests/data/ref (llama.cpp's AVX2 build, which our CPU kernels reproduce at every
QUARREL_CPU_ISA level: strict bounds, run everywhere) and tests/data/ref/avx512 (its AVX-512 build, run
where this CPU has AVX-512: our logits are not its bit for bit, the manifest's bounds are the noise
between its two builds, and its greedy generations are not compared; docs/performance.md "AVX-512 kernels").
Case ids of the second set start with "avx512/".
KL(P_ref || Q_ours) is computed over the reference's top-K tokens plus one bucket holding the rest of
the probability mass on each side (a lower bound of the full KL, tight when the top-K carry almost all
of the mass: the manifest records how much they carry).
"""
import hashlib
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest


ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "ref"


def load_manifest(d):
    return json.loads((d / "manifest.json").read_text()) if (d / "manifest.json").exists() else {"cases": {}}


def host_has_avx512():
    """The AVX-512 subset our avx512 kernels need (and llama.cpp's native build on such a host uses)."""
    try:
        flags = next((ln for ln in open("/proc/cpuinfo") if ln.startswith("flags")), "").split()
    except OSError:
        return False
    return all(f in flags for f in ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"))


MANIFEST = load_manifest(DATA)
CASES = sorted(MANIFEST["cases"])
ISA_SETS = {"": (DATA, MANIFEST)}  # id prefix -> (golden directory, manifest)
if host_has_avx512() and (DATA / "avx512" / "manifest.json").exists():
    ISA_SETS["avx512/"] = (DATA / "avx512", load_manifest(DATA / "avx512"))
    CASES += sorted("avx512/" + n for n in ISA_SETS["avx512/"][1]["cases"])


def golden_of(case_id):
    """(golden directory, manifest entry, case name) of a case id ("name" or "avx512/name")."""
    prefix, _, name = case_id.rpartition("/")
    d, manifest = ISA_SETS[prefix + "/" if prefix else ""]
    return d, manifest["cases"][name], name

KL_MAX = 1e-3
TOP1_MIN = 0.995
# A case whose golden file was made at `quarrel logits`'s micro-batch (64 rows: the same kernels in both
# engines) carries stricter bounds in the manifest (issue 30 part 2: kl_max 1e-6, top1_min 0.999).
GREEDY_MIN_MATCH = 8  # of 8 prompts: every generation identical
# A case may carry stricter bounds of its own in the manifest (the Qwen family, issue 30: kl_max 1e-6,
# top1_min 0.999).

# Cases that do not meet a target yet (issue: CPU engine). Each is a strict xfail: it is reported as
# "xfailed", never as passed, and the run fails as soon as the gap closes, so the entry must then be
# removed. The reason states what was measured on 2026-11-22.
KNOWN_GAPS = {"kl": {}, "top1": {}, "greedy": {}}


def cases(kind):
    return [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[kind][n]))
            if n in KNOWN_GAPS[kind] else n for n in CASES]


def models_dir():
    return pathlib.Path(os.environ.get("QUARREL_MODELS_DIR", pathlib.Path.home() / ".cache/quarrel/models"))


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@pytest.fixture(scope="module")
def model_for(quarrel_bin, tmp_path_factory):
    cache = {}
    tmp = tmp_path_factory.mktemp("synth")

    def get(case_id):
        _, c, name = golden_of(case_id)
        if name in cache:
            return cache[name]
        if c["kind"] == "file":
            path = models_dir() / c["file"]
            assert path.exists(), f"missing model {path}: run scripts/setup.sh"
        else:
            path = tmp / f"{name}.gguf"
            subprocess.run([quarrel_bin, "synth", "--arch", c["arch"], "--preset", c["preset"], "--type", c["type"],
                            "--seed", str(c["seed"]), "-o", str(path)], check=True, capture_output=True)
        assert sha256(path) == c["sha256"], f"{name}: the model file differs from the one the golden file was made from"
        cache[name] = path
        return path

    return get


def kl_topk(ref_ids, ref_lp, ours_logits):
    """Mean and per-position KL(P||Q) over the reference top-K plus a rest bucket; top-1 agreement."""
    x = ours_logits.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=-1))
    q_lp = np.take_along_axis(x, ref_ids, axis=-1) - lse[:, None]
    p = np.exp(ref_lp.astype(np.float64))
    q = np.exp(q_lp)
    p_rest = np.clip(1.0 - p.sum(-1), 1e-30, 1.0)
    q_rest = np.clip(1.0 - q.sum(-1), 1e-30, 1.0)
    kl = (p * (ref_lp - q_lp)).sum(-1) + p_rest * (np.log(p_rest) - np.log(q_rest))
    same_top1 = (ref_ids[:, 0] == x.argmax(axis=-1)).mean()
    return kl.mean(), kl.max(), same_top1


_logits_cache = {}


def teacher_forced(name, quarrel_bin, model_for, tmp_path):
    """(mean KL, max KL, same top-1) of our teacher-forced logits vs the golden file; cached per case."""
    if name in _logits_cache:
        return _logits_cache[name]
    gdir, _, base = golden_of(name)
    gold = np.load(gdir / f"{base}.logits.npz")
    ids_path = tmp_path / "ids.json"
    ids_path.write_text(json.dumps(gold["tokens"].tolist()))
    out = tmp_path / "logits.npy"
    r = subprocess.run([quarrel_bin, "logits", "-m", str(model_for(name)), "--tokens", str(ids_path), "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    ours = np.load(out, mmap_mode="r")
    assert ours.shape[0] == len(gold["tokens"])
    res = kl_topk(gold["topk_ids"], gold["topk_logprobs"], np.asarray(ours))
    print(f"{name}: mean KL {res[0]:.3e}, max KL {res[1]:.3e}, same top-1 {100 * res[2]:.2f}%")
    _logits_cache[name] = res
    return res


@pytest.mark.parametrize("name", cases("kl"))
def test_teacher_forced_kl(name, quarrel_bin, model_for, tmp_path):
    mean_kl, _, _ = teacher_forced(name, quarrel_bin, model_for, tmp_path)
    kl_max = golden_of(name)[1].get("kl_max", KL_MAX)
    assert mean_kl <= kl_max, f"mean KL {mean_kl:.3e} > {kl_max}"


@pytest.mark.parametrize("name", cases("top1"))
def test_teacher_forced_top1(name, quarrel_bin, model_for, tmp_path):
    _, _, top1 = teacher_forced(name, quarrel_bin, model_for, tmp_path)
    top1_min = golden_of(name)[1].get("top1_min", TOP1_MIN)
    assert top1 >= top1_min, f"same top-1 {100 * top1:.2f}% < {100 * top1_min}%"


@pytest.mark.parametrize("name", cases("greedy"))
def test_greedy_generation(name, quarrel_bin, model_for, tmp_path):
    c = golden_of(name)[1]
    if not c.get("greedy", True):
        pytest.skip("greedy generations are not compared with this golden set (another llama.cpp build's order)")
    gens = c["generations"]
    matches = 0
    for g in gens:
        ids_path = tmp_path / "prompt.json"
        ids_path.write_text(json.dumps(g["prompt_tokens"]))
        r = subprocess.run([quarrel_bin, "run", "-m", str(model_for(name)), "--tokens", str(ids_path),
                            "-n", str(max(len(g["tokens"]), 1)), "--temp", "0", "--ignore-eos", "--ids-only"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        ours = json.loads(r.stdout)
        matches += ours[: len(g["tokens"])] == g["tokens"]
    print(f"{name}: {matches}/{len(gens)} greedy generations identical")
    assert matches >= min(GREEDY_MIN_MATCH, len(gens))
