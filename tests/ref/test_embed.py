"""Embeddings: `quarrel embed` against golden files of the reference implementations
(tools/gen_embed_golden.py):
  * all-MiniLM-L6-v2 (bert) vs sentence-transformers over tests/data/embed/sentences.jsonl: cosine >= 0.999
    for every sentence;
  * synth nomic-bert, bert and llama (pooling mean/cls/last, normalize on/off) vs llama-cpp-python's
    embeddings: cosine >= 0.999 per text (raw vectors: also the norms within 1%);
  * all-MiniLM-L6-v2 vs sentence-transformers over tests/data/embed/multilingual.jsonl (1,200 lines, many
    scripts, long paragraphs cut at the model's 256 tokens): cosine >= 0.999 for every line, and the
    WordPiece ids equal the model's own tokenizer's (Hugging Face `tokenizers`) on that corpus and the
    tokenizer corpus (tests/data/ref/minilm-*: tools/gen_embed_golden.py);
  * bad input: a clear error and a nonzero exit, no crash.
The MiniLM GGUF comes from $QUARREL_MODELS_DIR/all-MiniLM-L6-v2.f16.gguf (scripts/setup.sh converts it
with tools/convert_bert.py); a missing model fails the test.
"""
import json
import pathlib
import subprocess

import numpy as np
import pytest

from conftest import ROOT, models_dir

DATA = ROOT / "tests" / "data" / "embed"
COS_MIN = 0.999


@pytest.fixture(scope="session")
def minilm():
    p = models_dir() / "all-MiniLM-L6-v2.f16.gguf"
    if not p.exists():
        pytest.fail(f"MiniLM model missing: {p} (run scripts/setup.sh)")
    return p


def embed(quarrel_bin, model, jsonl, tmp_path, *args):
    out = tmp_path / "out.npy"
    r = subprocess.run([quarrel_bin, "embed", "-m", str(model), "-f", str(jsonl), "-o", str(out), "-t", "2", *args],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return np.load(out)


def cosines(a, b):
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_minilm_matches_sentence_transformers(quarrel_bin, minilm, tmp_path):
    want = np.load(DATA / "minilm_st.npy").astype(np.float32)
    n = sum(1 for line in open(DATA / "sentences.jsonl") if line.strip())
    assert want.shape == (n, 384) and n >= 200
    got = embed(quarrel_bin, minilm, DATA / "sentences.jsonl", tmp_path)
    assert got.shape == want.shape and got.dtype == np.float32
    cos = cosines(got, want)
    worst = int(np.argmin(cos))
    assert cos.min() >= COS_MIN, f"sentence {worst}: cosine {cos[worst]:.6f}"
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


REF = ROOT / "tests" / "data" / "ref"


def test_minilm_wordpiece_matches_hf(quarrel_bin, minilm, tmp_path):
    """Hugging Face's BERT normalization (NFD, only Mn marks stripped, jamo kept, CJK split, control
    code points dropped, punctuation split), then WordPiece: the same ids for every string."""
    rows = [json.loads(line) for line in open(REF / "minilm-wordpiece.hf.jsonl", encoding="utf-8")]
    assert len(rows) >= 3000
    inp = tmp_path / "tok.jsonl"
    inp.write_text("".join(json.dumps({"text": r["text"], "add_special": True, "parse_special": False}) + "\n"
                           for r in rows))
    r = subprocess.run([quarrel_bin, "tokenize", "-m", str(minilm), "--jsonl", str(inp)], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    got = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(got) == len(rows)
    bad = [(row["text"], row["ids"], g) for row, g in zip(rows, got) if row["ids"] != g]
    msg = "\n".join(f"  {t[:60]!r}\n    hf   {w[:20]}\n    ours {g[:20]}" for t, w, g in bad[:5])
    assert not bad, f"{len(bad)} of {len(rows)} tokenizations differ from Hugging Face's:\n{msg}"
    # the two examples: 'की' -> क ##ी, '한국' -> 6 jamo pieces
    assert any(row["text"] == "की" and len(row["ids"]) == 4 for row in rows)
    assert any(row["text"] == "한국" and len(row["ids"]) == 8 for row in rows)


def test_minilm_multilingual_matches_sentence_transformers(quarrel_bin, minilm, tmp_path):
    want = np.load(REF / "minilm-multilingual.st.npy")
    rows = [json.loads(line) for line in open(DATA / "multilingual.jsonl", encoding="utf-8")]
    assert want.shape == (len(rows), 384) and len(rows) >= 1000
    out = tmp_path / "ml.npy"
    r = subprocess.run([quarrel_bin, "embed", "-m", str(minilm), "-f", str(DATA / "multilingual.jsonl"), "-o", str(out),
                        "-t", "2"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    assert "truncated to 256" in r.stderr  # the long paragraphs are cut where sentence-transformers cuts them
    got = np.load(out)
    cos = cosines(got, want)
    worst = np.argsort(cos)[:5]
    msg = ", ".join(f"line {i} ({rows[i]['kind']}): {cos[i]:.6f}" for i in worst)
    assert cos.min() >= COS_MIN, msg
    kinds = {row["kind"].split("-")[0] for row in rows}
    for k in ("en", "ru", "el", "ar", "he", "hi", "bn", "th", "zh", "ja", "ko", "emoji", "code"):
        assert k in kinds, k


def test_minilm_context_is_max_seq_length(quarrel_bin, minilm):
    """tools/convert_bert.py writes sentence_bert_config.json's max_seq_length (256), not the 512 rows
    of the position table."""
    r = subprocess.run([quarrel_bin, "inspect", str(minilm)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if "bert.context_length" in ln)
    assert line.split()[-1] == "256", line


def test_minilm_batching_invariant(quarrel_bin, minilm, tmp_path):
    """One text per pass vs many texts per pass: the same vectors (non-causal attention stays within
    each text)."""
    f = tmp_path / "head.jsonl"
    f.write_text("".join(open(DATA / "sentences.jsonl").readlines()[:40]))
    a = embed(quarrel_bin, minilm, f, tmp_path, "--batch", "7")
    b = embed(quarrel_bin, minilm, f, tmp_path, "--batch", "256")
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


SYNTH = {
    "nomic-bert": ["--arch", "nomic-bert", "--preset", "tiny"],
    "bert": ["--arch", "bert", "--preset", "tiny"],
    "llama": ["--arch", "llama", "--preset", "tiny", "--pooling", "mean"],
}


@pytest.fixture(scope="module")
def synth_models(quarrel_bin, tmp_path_factory):
    d = tmp_path_factory.mktemp("synth-embed")
    out = {}
    for name, args in SYNTH.items():
        p = d / f"{name}-tiny.gguf"
        subprocess.run([quarrel_bin, "synth", *args, "--type", "F16", "--seed", "1", "-o", str(p)], check=True,
                       capture_output=True)
        out[name] = p
    return out


GOLDEN_KEYS = sorted(np.load(DATA / "synth_llamacpp.npz").files) if (DATA / "synth_llamacpp.npz").exists() else []


def test_synth_golden_complete():
    assert len(GOLDEN_KEYS) >= 14, "tests/data/embed/synth_llamacpp.npz is missing or incomplete"


@pytest.mark.parametrize("key", GOLDEN_KEYS)
def test_synth_matches_llama_cpp(quarrel_bin, synth_models, tmp_path, key):
    name, pooling, norm = key.split(".")
    want = np.load(DATA / "synth_llamacpp.npz")[key]
    got = embed(quarrel_bin, synth_models[name], DATA / "synth_texts.jsonl", tmp_path, "--pooling", pooling,
                "--normalize" if norm == "norm" else "--no-normalize")
    assert got.shape == want.shape
    cos = cosines(got, want)
    assert cos.min() >= COS_MIN, f"{key}: text {int(np.argmin(cos))}: cosine {cos.min():.6f}"
    ng, nw = np.linalg.norm(got, axis=1), np.linalg.norm(want, axis=1)
    np.testing.assert_allclose(ng, nw, rtol=0.01)


def test_model_pooling_default(quarrel_bin, synth_models, tmp_path):
    """--pooling model (the default) reads <arch>.pooling_type: the llama synth model says mean."""
    a = embed(quarrel_bin, synth_models["llama"], DATA / "synth_texts.jsonl", tmp_path)
    b = embed(quarrel_bin, synth_models["llama"], DATA / "synth_texts.jsonl", tmp_path, "--pooling", "mean")
    c = embed(quarrel_bin, synth_models["llama"], DATA / "synth_texts.jsonl", tmp_path, "--pooling", "last")
    assert np.array_equal(a, b) and not np.allclose(a, c)


def run_embed(quarrel_bin, *args):
    return subprocess.run([quarrel_bin, "embed", *args], capture_output=True, text=True, timeout=120)


def test_jsonl_output_and_ids(quarrel_bin, synth_models, tmp_path):
    f = tmp_path / "in.jsonl"
    f.write_text('{"text": "alpha", "id": 7}\n\n"beta"\n{"text": "gamma", "metadata": {"k": 1}}\n')
    r = run_embed(quarrel_bin, "-m", str(synth_models["bert"]), "-f", str(f), "--jsonl")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["id"] for row in rows] == [7, 3, 4]  # explicit id, else the 1-based line number
    v = np.array([row["embedding"] for row in rows], dtype=np.float32)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    got = embed(quarrel_bin, synth_models["bert"], f, tmp_path)
    assert np.array_equal(got, v)  # %.9g round-trips float32


def test_truncation(quarrel_bin, synth_models, tmp_path):
    f = tmp_path / "long.jsonl"
    f.write_text(json.dumps({"text": "word " * 2000}) + "\n")
    r = run_embed(quarrel_bin, "-m", str(synth_models["bert"]), "-f", str(f), "--no-truncate", "-o", str(tmp_path / "x.npy"))
    assert r.returncode == 1 and "truncation off" in r.stderr
    r = run_embed(quarrel_bin, "-m", str(synth_models["bert"]), "-f", str(f), "-o", str(tmp_path / "x.npy"))
    assert r.returncode == 0 and "truncated" in r.stderr


@pytest.mark.parametrize("content,msg", [
    (None, "cannot open"),
    ("", "holds no texts"),
    ("\n\n", "holds no texts"),
    ('{"text": "ok"}\n{"text": \n', "malformed JSON"),
    ('{"txt": "x"}\n', "\"text\""),
    ('{"text": "x", "id": -3}\n', "\"id\""),
    ("[1, 2]\n", "expected a JSON object"),
])
def test_bad_input(quarrel_bin, synth_models, tmp_path, content, msg):
    f = tmp_path / "bad.jsonl"
    if content is not None:
        f.write_text(content)
    r = run_embed(quarrel_bin, "-m", str(synth_models["bert"]), "-f", str(f))
    assert r.returncode == 1, r.stderr
    assert msg in r.stderr
    assert "Traceback" not in r.stderr and "Sanitizer" not in r.stderr


def test_bad_usage(quarrel_bin, synth_models, tmp_path):
    assert run_embed(quarrel_bin, "-m", str(synth_models["bert"])).returncode == 2
    assert run_embed(quarrel_bin, "-m", str(synth_models["bert"]), "-p", "x", "--pooling", "max").returncode == 2
    r = run_embed(quarrel_bin, "-m", str(tmp_path / "missing.gguf"), "-p", "x")
    assert r.returncode == 1 and r.stderr
    r = run_embed(quarrel_bin, "-m", str(synth_models["bert"]), "-p", "x", "--pooling", "none")
    assert r.returncode == 1 and "one vector per text" in r.stderr
