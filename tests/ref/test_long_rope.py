"""Long-context rope scaling against llama.cpp (issue 30 part 2): Llama 3.1's rope_freqs, YaRN and phi3's
LongRoPE at positions 8k-32k, beyond the models' original context (4096).

One-layer synth models (presets llama3-long-tiny, yarn-long-tiny, phi3 long-tiny), teacher forced over the
golden file's random tokens with `quarrel logits` (64-row passes, as llama.cpp made the golden file; a context
over 4096 tokens takes LongRoPE's long factors in both engines). The golden file keeps the reference's top-K
log-probs of every 64th row from position 8192 on (tools/gen_ref_golden.py, LONG_CASES). Each case must give
mean KL <= 1e-5 over those rows and the same top-1 on >= 99.9 % of them.

By default the input stops at position 12288 (positions 8192-12287: ~4 s a model on 2 cores; the rows of a
prefix are those of the full run, as the passes are the same); QUARREL_LONG_ROPE=1 runs all 32768 positions
(~30 s a model; the result is in docs/performance.md).
"""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_logits_ref import kl_topk, sha256  # noqa: E402

DATA = HERE.parent / "data" / "ref"
MANIFEST = json.loads((DATA / "manifest.json").read_text()) if (DATA / "manifest.json").exists() else {}
LONG = MANIFEST.get("long_cases", {})
KL_MAX = 1e-5
TOP1_MIN = 0.999
N_DEFAULT = 12288


def test_long_cases_present():
    assert {"long-llama3-q8_0", "long-yarn-q8_0", "long-phi3-q8_0"} <= set(LONG)


@pytest.mark.parametrize("name", sorted(LONG))
def test_long_rope_matches_llamacpp(name, quarrel_bin, tmp_path):
    c = LONG[name]
    model = tmp_path / f"{name}.gguf"
    subprocess.run([quarrel_bin, "synth", "--arch", c["arch"], "--preset", c["preset"], "--type", c["type"],
                    "--seed", str(c["seed"]), "-o", str(model)], check=True, capture_output=True)
    assert sha256(model) == c["sha256"], f"{name}: the model file differs from the one the golden file was made from"
    gold = np.load(DATA / f"{name}.logits.npz")
    n = c["n_tokens"] if os.environ.get("QUARREL_LONG_ROPE") == "1" else min(N_DEFAULT, c["n_tokens"])
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps(gold["tokens"][:n].tolist()))
    out = tmp_path / "logits.npy"
    r = subprocess.run([quarrel_bin, "logits", "-m", str(model), "--tokens", str(ids), "-o", str(out), "--ubatch",
                        str(c["n_ubatch"])], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    keep = gold["rows"] < n
    rows = gold["rows"][keep]
    assert len(rows) >= 64 and rows[0] >= 8192
    mean_kl, max_kl, top1 = kl_topk(gold["topk_ids"][keep], gold["topk_logprobs"][keep],
                                    np.asarray(np.load(out, mmap_mode="r")[rows]))
    print(f"{name}: positions {rows[0]}..{rows[-1]} ({len(rows)} rows): mean KL {mean_kl:.3e}, max {max_kl:.3e}, "
          f"same top-1 {100 * top1:.2f}%")
    assert mean_kl <= KL_MAX, f"mean KL {mean_kl:.3e} > {KL_MAX}"
    assert top1 >= TOP1_MIN, f"same top-1 {100 * top1:.2f}% < {100 * TOP1_MIN}%"
