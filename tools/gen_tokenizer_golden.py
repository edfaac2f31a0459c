#!/usr/bin/env python3
"""Writes golden token ids (and llama.cpp's detokenization) for the tokenizer corpus.

For every string of tests/data/tokenizer/corpus.jsonl and every flag combination
(add_special x parse_special), llama.cpp (through llama-cpp-python, vocab only) gives the ids;
llama_detokenize gives the text back, (a) keeping specials (remove_special=false,
unparse_special=true) and (b) dropping them (remove_special=true, unparse_special=false).

Output tests/data/tokenizer/golden_NAME.jsonl:
  line 1: {"model": file name, "n_vocab", "bos", "eos", "eot", "sep", "pad", "nl", "add_bos", "add_eos",
           "add_sep", "eog": [...], "llama_cpp": version, "corpus_md5": ...}
  then per string: {"id": N, "ids": {"TT": [...], "TF": ..., "FT": ..., "FF": ...},
                    "keep": {...}, "strip": {...}}
  Keys are add_special then parse_special (T/F). A value that equals an earlier key's value is stored
  as that key's name (e.g. "FT": "TT"); a detokenization equal to the input is stored as "=", other
  detokenizations as hex.

Variants (--variants): a real model's tokenizer metadata is copied into vocab-only GGUFs with a
few string keys changed (write_variant, also used by the tests): SmolLM2's byte-level BPE vocabulary
under every tokenizer.ggml.pre we support. tests/data/tokenizer/golden_variants.json records, per variant and corpus string, a short
hash of llama.cpp's ids (add_special and parse_special on). This checks each regex pre-tokenizer
without a model for each.

usage: tools/gen_tokenizer_golden.py [--model PATH=NAME ...] [--variants [LABEL ...]] [--no-models]
  default: SmolLM2-135M-Instruct.Q4_1.gguf=smollm2 and gemma-3-270m-q4_k_m.gguf=gemma3 from
  $QUARREL_MODELS_DIR (default ~/.cache/quarrel/models). Add synth vocabularies with more --model.
"""
import argparse
import ctypes
import hashlib
import json
import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "tests/data/tokenizer"
COMBOS = [("TT", True, True), ("TF", True, False), ("FT", False, True), ("FF", False, False)]
# tokenizer.ggml.pre values checked through SmolLM2's vocabulary (one per pre-tokenizer family).
PRE_VARIANTS = ["default", "gpt-2", "llama-bpe", "dbrx", "glm4", "qwen2", "stablelm2", "qwen35", "gpt-4o", "tekken",
                "falcon", "deepseek-llm", "deepseek-coder", "deepseek-v3", "spark2_5", "bloom", "poro-chat",
                "viking", "seed-coder", "bailingmoe", "chameleon", "granite-docling", "command-r", "ufakzeka",
                "roberta-bpe", "starcoder"]
# label -> (source model fixture name, string keys to override)
VARIANTS = {pre: ("smollm2", {"tokenizer.ggml.pre": pre}) for pre in PRE_VARIANTS}
# (WordPiece is not compared with llama.cpp: its normalizer differs from Hugging Face's BERT tokenizer,
# which is our reference for "bert" vocabularies; tests/ref/test_embed.py checks MiniLM's ids against it.)
# SPM with the Llama-2 style space prefix (Gemma 3 itself has it off)
VARIANTS["gemma3-space-prefix"] = ("gemma3", {"tokenizer.ggml.add_space_prefix": True})

_SCALAR_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def _skip_value(raw, off, vtype):
    """Offset just past a GGUF value of type vtype starting at off."""
    import struct

    if vtype == 8:  # string
        return off + 8 + struct.unpack_from("<Q", raw, off)[0]
    if vtype == 9:  # array
        etype, n = struct.unpack_from("<IQ", raw, off)
        off += 12
        if etype in _SCALAR_SIZE:
            return off + n * _SCALAR_SIZE[etype]
        for _ in range(n):
            off = _skip_value(raw, off, etype)
        return off
    return off + _SCALAR_SIZE[vtype]


def _kv_spans(raw):
    """(version, [(key, start, end)]) of the key/value pairs of a GGUF file's bytes."""
    import struct

    magic, version, _n_tensors, n_kv = struct.unpack_from("<IIQQ", raw, 0)
    if magic != 0x46554747:
        raise ValueError("not a GGUF file")
    off, spans = 24, []
    for _ in range(n_kv):
        start = off
        klen = struct.unpack_from("<Q", raw, off)[0]
        key = raw[off + 8:off + 8 + klen].decode()
        off += 8 + klen
        vtype = struct.unpack_from("<I", raw, off)[0]
        off = _skip_value(raw, off + 4, vtype)
        spans.append((key, start, off))
    return version, spans


def write_variant(src, dst, overrides):
    """Writes a tensor-less GGUF `dst` with the metadata of `src`, keys replaced or added from
    `overrides` ({key: str or bool}); the value "byte->normal" for tokenizer.ggml.token_type instead
    turns BYTE (6) token types into NORMAL (1)."""
    import array
    import struct

    raw = pathlib.Path(src).read_bytes()
    version, spans = _kv_spans(raw)

    def kv_str(key, value):
        k = key.encode()
        if isinstance(value, bool):
            return struct.pack("<Q", len(k)) + k + struct.pack("<IB", 7, int(value))
        v = value.encode()
        return struct.pack("<Q", len(k)) + k + struct.pack("<IQ", 8, len(v)) + v

    body, seen = [], set()
    for key, start, end in spans:
        if key == "tokenizer.ggml.token_type" and overrides.get(key) == "byte->normal":
            head = 8 + len(key) + 4 + 12  # key, value type, element type + count
            types = array.array("i", raw[start + head:end])
            body.append(raw[start:start + head] + array.array("i", [1 if t == 6 else t for t in types]).tobytes())
            seen.add(key)
        elif key in overrides:
            body.append(kv_str(key, overrides[key]))
            seen.add(key)
        else:
            body.append(raw[start:end])
    body += [kv_str(k, v) for k, v in overrides.items() if k not in seen]
    out = struct.pack("<IIQQ", 0x46554747, version, 0, len(body)) + b"".join(body)
    out += b"\0" * (-len(out) % 32)
    pathlib.Path(dst).write_bytes(out)


def ids_hash(ids):
    """Short stable digest of an id list (golden_variants.json stores these)."""
    return hashlib.sha1(json.dumps(list(ids)).encode()).hexdigest()[:10]


def default_models():
    d = pathlib.Path(os.environ.get("QUARREL_MODELS_DIR", pathlib.Path.home() / ".cache/quarrel/models"))
    return [(d / "SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2"), (d / "gemma-3-270m-q4_k_m.gguf", "gemma3")]


def detokenize(vocab, ids, remove_special, unparse_special):
    arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
    cap = 64 + 16 * len(ids)
    while True:
        buf = ctypes.create_string_buffer(cap)
        n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, cap, remove_special, unparse_special)
        if n >= 0:
            return buf.raw[:n]
        cap = -n + 16


def dedup(values):
    """{key: value} -> same, with a repeated value replaced by the first key that had it."""
    out, seen = {}, {}
    for k, v in values.items():
        sig = json.dumps(v)
        if sig in seen:
            out[k] = seen[sig]
        else:
            seen[sig] = k
            out[k] = v
    return out


def model_header(llm, model_path, corpus_md5):
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n = llama_cpp.llama_vocab_n_tokens(vocab)
    return {
        "model": pathlib.Path(model_path).name,
        "n_vocab": n,
        "bos": llama_cpp.llama_vocab_bos(vocab),
        "eos": llama_cpp.llama_vocab_eos(vocab),
        "eot": llama_cpp.llama_vocab_eot(vocab),
        "sep": llama_cpp.llama_vocab_sep(vocab),
        "pad": llama_cpp.llama_vocab_pad(vocab),
        "nl": llama_cpp.llama_vocab_nl(vocab),
        "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
        "add_eos": bool(llama_cpp.llama_vocab_get_add_eos(vocab)),
        "add_sep": bool(llama_cpp.llama_vocab_get_add_sep(vocab)),
        "eog": [i for i in range(n) if llama_cpp.llama_vocab_is_eog(vocab, i)],
        "llama_cpp": llama_cpp.__version__,
        "corpus_md5": corpus_md5,
    }


def generate(model_path, name, corpus_path):
    raw = corpus_path.read_bytes()
    corpus = [json.loads(line) for line in raw.decode().splitlines() if line.strip()]
    llm = llama_cpp.Llama(model_path=str(model_path), vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    out_path = DATA / f"golden_{name}.jsonl"
    with open(out_path, "w") as f:
        f.write(json.dumps(model_header(llm, model_path, hashlib.md5(raw).hexdigest())) + "\n")
        for item in corpus:
            text = bytes.fromhex(item["hex"])
            ids, keep, strip = {}, {}, {}
            for key, add_special, parse_special in COMBOS:
                t = llm.tokenize(text, add_bos=add_special, special=parse_special)
                ids[key] = t
                k = detokenize(vocab, t, False, True)
                s = detokenize(vocab, t, True, False)
                keep[key] = "=" if k == text else k.hex()
                strip[key] = "=" if s == text else s.hex()
            f.write(json.dumps({"id": item["id"], "ids": dedup(ids), "keep": dedup(keep), "strip": dedup(strip)},
                               separators=(",", ":")) + "\n")
    print(f"{name}: {len(corpus)} strings x {len(COMBOS)} flag sets -> {out_path}")


def generate_variants(labels, corpus_path):
    import tempfile

    raw = corpus_path.read_bytes()
    corpus = [bytes.fromhex(json.loads(line)["hex"]) for line in raw.decode().splitlines() if line.strip()]
    dst = DATA / "golden_variants.json"
    out = json.loads(dst.read_text()) if dst.exists() else {}
    if out.get("corpus_md5") != hashlib.md5(raw).hexdigest():
        out = {}
    out.update({"corpus_md5": hashlib.md5(raw).hexdigest(), "flags": "add_special=true parse_special=true"})
    out.setdefault("variants", {})
    sources = dict((name, path) for path, name in default_models())
    with tempfile.TemporaryDirectory() as tmp:
        for label in labels:
            source, overrides = VARIANTS[label]
            path = pathlib.Path(tmp) / f"{label}.gguf"
            write_variant(sources[source], path, overrides)
            llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
            out["variants"][label] = {"source": source, "overrides": overrides,
                                      "hashes": [ids_hash(llm.tokenize(t, add_bos=True, special=True)) for t in corpus]}
            del llm
            print(f"variant {label}: {len(corpus)} strings")
    dst.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"-> {dst}")


def main():
    global llama_cpp
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", default=[], help="PATH=NAME (repeatable)")
    ap.add_argument("--corpus", default=str(DATA / "corpus.jsonl"))
    ap.add_argument("--variants", nargs="*", metavar="LABEL",
                    help="also (re)write golden_variants.json: the listed variants, or all of them")
    ap.add_argument("--no-models", action="store_true", help="skip the per-model golden files")
    a = ap.parse_args()
    import llama_cpp  # noqa: F811 (reference implementation; only needed here)

    models = [(pathlib.Path(m.split("=", 1)[0]), m.split("=", 1)[1]) for m in a.model] or default_models()
    for path, name in models:
        if not path.exists():
            raise SystemExit(f"model not found: {path}")
        if not a.no_models:
            generate(path, name, pathlib.Path(a.corpus))
    if a.variants is not None:
        generate_variants(a.variants or list(VARIANTS), pathlib.Path(a.corpus))


if __name__ == "__main__":
    main()
