#!/usr/bin/env python3
"""tools/llama_layer_dump.py — llama.cpp's intermediate tensors of one teacher-forced pass, for finding the
first layer where our engine and llama.cpp part (docs/models.md: how the Mamba2 scan's FMA was found).

llama-cpp-python exposes llama.cpp's graph evaluation callback (`cb_eval` in the context parameters): it is
called after every graph node is computed, and on the CPU backend the node's data is host memory. This
script installs such a callback, evaluates the given tokens in one micro-batch (or --ubatch N) and saves
every contiguous F32 node as an array in an .npz, keyed by its graph name (`attn_norm-0`, `l_out-3`,
`ffn_moe_down-1`, `mamba2_y_add_d-0`, ...; a name seen twice keeps its first value), shaped [.., rows,
width] as ggml's ne reversed.

    .venv/bin/python tools/llama_layer_dump.py MODEL.gguf --tokens ids.json -o llama.npz [--ubatch 64] [--list]

Compare with our side by dumping the matching buffers of the forward pass (a temporary fwrite in the model
file) and diffing row by row: the first tensor whose rows differ names the op.
"""
import argparse
import ctypes
import json
import sys

import numpy as np


def dump(model, ids, ubatch):
    import llama_cpp
    from llama_cpp import llama_cpp as lib

    base = ctypes.CDLL(llama_cpp.__path__[0] + "/lib/libggml-base.so")
    base.ggml_get_name.restype = ctypes.c_char_p
    base.ggml_get_name.argtypes = [ctypes.c_void_p]
    base.ggml_get_data.restype = ctypes.c_void_p
    base.ggml_get_data.argtypes = [ctypes.c_void_p]
    base.ggml_is_contiguous.restype = ctypes.c_bool
    base.ggml_is_contiguous.argtypes = [ctypes.c_void_p]
    base.ggml_nelements.restype = ctypes.c_int64
    base.ggml_nelements.argtypes = [ctypes.c_void_p]
    store = {}
    NE_OFFSET = 16  # struct ggml_tensor: enum type (4 bytes, padded to 8), buffer pointer, then int64 ne[4]

    @lib.ggml_backend_sched_eval_callback
    def on_node(t, ask, _user):
        if ask:
            return True  # observe every node
        name = base.ggml_get_name(t).decode(errors="replace")
        if name in store or ctypes.c_int32.from_address(t).value != 0 or not base.ggml_is_contiguous(t):
            return True  # F32 contiguous nodes only (type 0 = GGML_TYPE_F32)
        p = base.ggml_get_data(t)
        n = base.ggml_nelements(t)
        if p and n > 0:
            ne = [ctypes.c_int64.from_address(t + NE_OFFSET + 8 * i).value for i in range(4)]
            a = np.ctypeslib.as_array((ctypes.c_float * n).from_address(p)).copy()
            store[name] = a.reshape(ne[::-1])
        return True

    default_params = lib.llama_context_default_params

    def params_with_callback():
        p = default_params()
        p.cb_eval = on_node
        return p

    llama_cpp.llama_context_default_params = params_with_callback
    lib.llama_context_default_params = params_with_callback
    try:
        llm = llama_cpp.Llama(model_path=model, n_ctx=max(512, len(ids) + 8), n_batch=max(512, len(ids)),
                              n_ubatch=ubatch or max(512, len(ids)), logits_all=True, n_threads=2, verbose=False,
                              seed=0)
        llm.eval(ids)
        store["result_scores"] = np.array(llm.scores[: len(ids)], dtype=np.float32)
        del llm
    finally:
        llama_cpp.llama_context_default_params = default_params
        lib.llama_context_default_params = default_params
    return store


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--tokens", required=True, help="JSON file with a list of token ids")
    ap.add_argument("-o", "--out", required=True, help="output .npz")
    ap.add_argument("--ubatch", type=int, default=0, help="llama.cpp micro-batch (default: all tokens in one)")
    ap.add_argument("--list", action="store_true", help="print the node names and shapes")
    a = ap.parse_args()
    with open(a.tokens) as f:
        ids = [int(t) for t in json.load(f)]
    if not ids:
        sys.exit("no tokens")
    store = dump(a.model, ids, a.ubatch)
    np.savez(a.out, **store)
    if a.list:
        for k, v in store.items():
            print(k, list(v.shape))
    print(f"wrote {a.out}: {len(store)} tensors", file=sys.stderr)


if __name__ == "__main__":
    main()
