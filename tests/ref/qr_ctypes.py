"""qr_ctypes.py — a minimal ctypes binding of quarrel.h (model, context, qr_decode, logits, KV suffix
removal) for tests and tools that must choose the micro-batch freely (`quarrel logits --ubatch` stops at 64
and computes every row's logits; here n_batch is any size and only the rows asked for get logits).

The library comes from $QUARREL_LIB (default build/libquarrel.so). Also the helpers the split sweep's test and
tool share (last_rows, log_softmax, kl_rows, file_sha256).
"""
import ctypes
import hashlib
import os
import pathlib

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]


class ModelParams(ctypes.Structure):
    """qr_model_params, field for field (returned by value: a size that differs from C's breaks the call ABI)."""
    _fields_ = [("n_threads", ctypes.c_int32), ("force_scalar", ctypes.c_bool), ("backend", ctypes.c_int),
                ("gpu", ctypes.c_int32), ("tp", ctypes.c_int32), ("split_mode", ctypes.c_int),
                ("tensor_split", ctypes.c_float * 16), ("tp_addr", ctypes.c_char_p), ("tp_rank", ctypes.c_int32)]


class ContextParams(ctypes.Structure):
    """qr_context_params, field for field (type_k / type_v: 0 = QR_CACHE_F16)."""
    _fields_ = [("n_ctx", ctypes.c_int32), ("n_batch", ctypes.c_int32), ("n_seq_max", ctypes.c_int32),
                ("n_threads", ctypes.c_int32), ("type_k", ctypes.c_int), ("type_v", ctypes.c_int)]


class Batch(ctypes.Structure):
    _fields_ = [("n_tokens", ctypes.c_int32), ("token", ctypes.POINTER(ctypes.c_int32)),
                ("pos", ctypes.POINTER(ctypes.c_int32)), ("seq_id", ctypes.POINTER(ctypes.c_int32)),
                ("logits", ctypes.POINTER(ctypes.c_int8))]


BACKEND_CPU = 1


def load_lib(path=None):
    """The library with the prototypes this module uses declared."""
    lib = ctypes.CDLL(path or os.environ.get("QUARREL_LIB") or str(ROOT / "build" / "libquarrel.so"))
    vp, i32, err = ctypes.c_void_p, ctypes.c_int32, ctypes.c_char_p
    lib.qr_model_default_params.restype = ModelParams
    lib.qr_model_load.argtypes = [ctypes.c_char_p, ctypes.POINTER(ModelParams), ctypes.POINTER(vp), err, ctypes.c_size_t]
    lib.qr_model_free.argtypes = [vp]
    lib.qr_model_n_vocab.argtypes = [vp]
    lib.qr_context_create.argtypes = [vp, ctypes.POINTER(ContextParams), ctypes.POINTER(vp), err, ctypes.c_size_t]
    lib.qr_context_free.argtypes = [vp]
    lib.qr_decode.argtypes = [vp, ctypes.POINTER(Batch), err, ctypes.c_size_t]
    lib.qr_get_logits.argtypes = [vp, i32]
    lib.qr_get_logits.restype = ctypes.POINTER(ctypes.c_float)
    lib.qr_kv_seq_rm.argtypes = [vp, i32, i32, i32]
    lib.qr_kv_seq_rm.restype = ctypes.c_bool
    lib.qr_kv_seq_len.argtypes = [vp, i32]
    lib.qr_kv_seq_len.restype = i32
    return lib


class Session:
    """One model on the CPU backend and one context (sequence 0) of n_ctx tokens and micro-batch n_batch."""

    def __init__(self, lib, model_path, n_ctx, n_batch, n_threads=0):
        self.lib = lib
        self.model = ctypes.c_void_p()
        self.ctx = ctypes.c_void_p()
        self.err = ctypes.create_string_buffer(1024)
        mp = lib.qr_model_default_params()
        mp.backend = BACKEND_CPU
        mp.n_threads = n_threads
        self._check(lib.qr_model_load(str(model_path).encode(), ctypes.byref(mp), ctypes.byref(self.model), self.err,
                                      len(self.err)), "load")
        self.n_vocab = lib.qr_model_n_vocab(self.model)
        cp = ContextParams(n_ctx=n_ctx, n_batch=n_batch, n_seq_max=1, n_threads=0)
        self._check(lib.qr_context_create(self.model, ctypes.byref(cp), ctypes.byref(self.ctx), self.err,
                                          len(self.err)), "context")

    def _check(self, status, what):
        if status != 0:
            raise RuntimeError(f"quarrel {what}: {self.err.value.decode(errors='replace')}")

    def close(self):
        if self.ctx:
            self.lib.qr_context_free(self.ctx)
            self.ctx = ctypes.c_void_p()
        if self.model:
            self.lib.qr_model_free(self.model)
            self.model = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def seq_len(self):
        return self.lib.qr_kv_seq_len(self.ctx, 0)

    def truncate(self, n):
        """Keeps positions [0, n) of sequence 0."""
        if not self.lib.qr_kv_seq_rm(self.ctx, 0, n, -1):
            raise RuntimeError(f"quarrel: cannot cut sequence 0 back to {n}")

    def decode(self, tokens):
        """Appends tokens to sequence 0 (split by the context into passes of n_batch rows); returns the last
        row's logits as float32 [n_vocab] (a copy)."""
        ids = (ctypes.c_int32 * len(tokens))(*[int(t) for t in tokens])
        b = Batch(n_tokens=len(tokens), token=ids, pos=None, seq_id=None, logits=None)
        self._check(self.lib.qr_decode(self.ctx, ctypes.byref(b), self.err, len(self.err)), "decode")
        p = self.lib.qr_get_logits(self.ctx, -1)
        return np.ctypeslib.as_array(p, shape=(self.n_vocab,)).copy()


def last_rows(decode, truncate, tokens, u, lengths):
    """Last-row logits [len(lengths)][n_vocab] of tokens[:L] for each L of `lengths` (ascending), run in passes of
    u rows aligned at position 0 (the last pass holds the remaining 1..u rows), through decode(ids) -> the last
    row's logits and truncate(n) (keep positions [0, n)): the rows before the last pass are computed once and
    kept, the last pass is cut off again. For any engine (this module's Session, llama-cpp-python)."""
    out, have = [], 0
    for L in lengths:
        base = (L - 1) // u * u  # the last pass is rows [base, L)
        if have > base:
            truncate(base)
            have = base
        if have < base:
            decode(tokens[have:base])
            have = base
        out.append(decode(tokens[base:L]))
        truncate(base)
    return np.stack(out)


def log_softmax(x):
    """Row-wise log-softmax in float64."""
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def kl_rows(p_logits, q_logits):
    """KL(P||Q) per row over the whole vocabulary, P and Q the softmax of two logit arrays."""
    lp, lq = log_softmax(p_logits), log_softmax(q_logits)
    return (np.exp(lp) * (lp - lq)).sum(axis=-1)


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
