"""Last-row logits against the micro-batch split (issue 32), real SmolLM2-135M-Instruct Q4_1 on the CPU backend.

For prompt lengths L (a sample of 1..600: tools/split_sweep.py's GOLDEN_LENGTHS, the pass edges of every size
below, the issue's 33-token chat prompt, 256 and 512) and micro-batch sizes u, the first L prompt tokens go
through qr_decode in passes of u rows (the last pass holds the remaining 1..u rows) with logits for the last
row only, as a generation's prefill, or the suffix after a prefix-cache hit, does. Checks:

  * against llama.cpp's AVX2 build on the same split (tests/data/ref/split-sweep-smollm2-q4_1.npz, written by
    tools/split_sweep.py --golden): KL over llama.cpp's top-64 tokens plus a rest bucket <= 1e-6 and the same
    top-1, for every (u, L) (measured: bit-identical);
  * across splits: our rows of one L at each u within the noise floor of llama.cpp's own split dependence over all
    600 lengths (SPLIT_KL_MAX_*) of the row in one pass of 512 (docs/architecture.md, "Micro-batch splits").

The model runs through libquarrel ($QUARREL_LIB, default build/libquarrel.so) with ctypes: any n_batch, and
only the rows asked for get logits. About 30 s on the 2-core CI machine.
"""
import pathlib
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import qr_ctypes  # noqa: E402

GOLDEN = HERE.parents[1] / "tests" / "data" / "ref" / "split-sweep-smollm2-q4_1.npz"
KL_SAME_SPLIT_MAX = 1e-6
# The noise floor of the split (docs/architecture.md, "Micro-batch splits"): llama.cpp's own last-row KL between two
# sizes over L = 1..600 (ours is the same, bit for bit) is at most 8.6e-3 between prefills (u >= 7) and 5.4e-2
# between the decode path (u = 1) and a prefill.
SPLIT_KL_MAX_PREFILL = 1e-2
SPLIT_KL_MAX_DECODE = 6e-2


@pytest.fixture(scope="module")
def golden():
    with np.load(GOLDEN) as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def ours(smollm2, golden):
    """u -> our last-row logits [len(lengths)][n_vocab], computed on first use."""
    assert qr_ctypes.file_sha256(smollm2) == str(golden["model_sha256"]), "the model file differs from the golden file's"
    lib = qr_ctypes.load_lib()
    tokens = golden["tokens"].tolist()
    lengths = golden["lengths"].tolist()
    cache = {}

    def get(u):
        if u not in cache:
            with qr_ctypes.Session(lib, smollm2, n_ctx=len(tokens) + 64, n_batch=u) as s:
                cache[u] = qr_ctypes.last_rows(s.decode, s.truncate, tokens, u, lengths)
        return cache[u]

    return get


def kl_topk(ref_ids, ref_logits, ref_lse, ours_logits):
    """KL(P_ref || Q_ours) per row over the reference's top-K plus one bucket for the rest of the mass."""
    p = np.exp(ref_logits.astype(np.float64) - ref_lse[:, None])
    q = np.exp(np.take_along_axis(qr_ctypes.log_softmax(ours_logits), ref_ids.astype(np.int64), axis=-1))
    p_rest = np.clip(1.0 - p.sum(-1), 1e-30, None)
    q_rest = np.clip(1.0 - q.sum(-1), 1e-30, None)
    return (p * (np.log(p) - np.log(q))).sum(-1) + p_rest * (np.log(p_rest) - np.log(q_rest))


UBATCHES = [1, 7, 16, 33, 64, 512]


@pytest.mark.parametrize("u", UBATCHES)
def test_same_split_as_llama(golden, ours, u):
    i = golden["ubatches"].tolist().index(u)
    rows = ours(u)
    k = kl_topk(golden["top_ids"][i], golden["top_logits"][i], golden["lse"][i], rows)
    lengths = golden["lengths"]
    worst = int(k.argmax())
    assert k.max() <= KL_SAME_SPLIT_MAX, f"u={u}: KL {k.max():.3g} to llama.cpp at L={lengths[worst]}"
    flips = np.where(rows.argmax(-1) != golden["top_ids"][i][:, 0])[0]
    assert len(flips) == 0, f"u={u}: top-1 differs from llama.cpp at L={lengths[flips].tolist()}"


def test_splits_agree(golden, ours):
    base = ours(512)  # every sampled L up to 512 in one pass
    lengths = golden["lengths"]
    for u in UBATCHES[:-1]:
        k = qr_ctypes.kl_rows(base, ours(u))
        worst = int(k.argmax())
        bound = SPLIT_KL_MAX_DECODE if u == 1 else SPLIT_KL_MAX_PREFILL
        assert k.max() <= bound, f"u={u} vs u=512: KL {k.max():.3g} at L={lengths[worst]} (noise floor {bound})"
