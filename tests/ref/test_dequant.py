"""Our quantization formats against the reference implementations, bit for bit.

- to_float (qr_quant_traits_ref(type)->to_float, called through ctypes on libquarrel_dev.so) equals
  gguf-py's `gguf.quants.dequantize` on whole real tensors of both test models (every type present,
  several tensors per type) and on synthetic blocks of every type both sides support.
- from_float equals gguf-py's `gguf.quants.quantize` where gguf-py implements one.
- from_float equals ggml's own quantizer (ggml_quantize_chunk without an importance matrix, i.e.
  what llama-quantize runs) for every type we can quantize, K-quants included, using the ggml
  shared library that llama-cpp-python ships.
- vec_dot agrees with ggml's CPU vec_dot on the same quantized rows.

The library comes from $QUARREL_DEV_LIB (default build/libquarrel_dev.so): the quant traits are internal,
so the installed libquarrel.so does not export them (docs/architecture.md, "The public API").
"""
import ctypes
import os
import pathlib

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader
from gguf import quants as gq
from gguf.constants import GGML_QUANT_SIZES as GGUF_PY_SIZES

ROOT = pathlib.Path(__file__).resolve().parents[2]

TO_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
FROM_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
VEC_DOT = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


# (block size, bytes per block). gguf-py 0.19 still lists Q8_1 with two fp32 scales (40 bytes);
# ggml (and Quarrel) store two fp16 scales: 36 bytes.
GGML_QUANT_SIZES = {**GGUF_PY_SIZES, T.Q8_1: (32, 36)}


class QrQuantTraits(ctypes.Structure):
    """struct qr_quant_traits (src/quant/quant.h)."""
    _fields_ = [
        ("type", ctypes.c_int),
        ("to_float", TO_FLOAT),
        ("from_float", FROM_FLOAT),
        ("vec_dot", VEC_DOT),
        ("vec_dot_type", ctypes.c_int),
    ]


# Every type we implement that gguf-py can dequantize (gguf-py has no Q8_1 / Q8_K).
OUR_TYPES = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K,
             T.Q6_K, T.MXFP4, T.IQ4_NL]
# Types whose gguf-py quantize we compare with our from_float.
GGUF_PY_QUANTIZE = [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.MXFP4]
# Types whose ggml quantizer we compare with our from_float.
GGML_QUANTIZE = [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q8_1, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K,
                 T.Q6_K, T.Q8_K, T.MXFP4, T.IQ4_NL]
# Byte offsets of the fp16 scale fields inside one block (everything else may be random bits).
FP16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0], T.IQ4_NL: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208], T.MXFP4: [],
}


class QuarrelQuant:
    """ctypes wrapper over qr_quant_traits_ref / qr_quant_traits_best."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        for name in ("qr_quant_traits_ref", "qr_quant_traits_best"):
            fn = getattr(self.lib, name)
            fn.restype = ctypes.POINTER(QrQuantTraits)
            fn.argtypes = [ctypes.c_int]

    def traits(self, qtype, best=False):
        fn = self.lib.qr_quant_traits_best if best else self.lib.qr_quant_traits_ref
        p = fn(int(qtype))
        assert p, f"libquarrel has no traits for {qtype.name}"
        return p.contents

    def to_float(self, qtype, raw: np.ndarray, n: int) -> np.ndarray:
        raw = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
        block, size = GGML_QUANT_SIZES[qtype]
        assert raw.size == n // block * size
        out = np.empty(n, dtype=np.float32)
        self.traits(qtype).to_float(raw.ctypes.data, out.ctypes.data, n)
        return out

    def from_float(self, qtype, x: np.ndarray, best=False) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
        block, size = GGML_QUANT_SIZES[qtype]
        out = np.empty(x.size // block * size, dtype=np.uint8)
        self.traits(qtype, best).from_float(x.ctypes.data, out.ctypes.data, x.size)
        return out

    def vec_dot(self, qtype, n, xq: np.ndarray, yq: np.ndarray, best=False) -> float:
        s = ctypes.c_float()
        self.traits(qtype, best).vec_dot(n, ctypes.addressof(s), xq.ctypes.data, yq.ctypes.data)
        return s.value


@pytest.fixture(scope="session")
def qq():
    path = os.environ.get("QUARREL_DEV_LIB") or str(ROOT / "build" / "libquarrel_dev.so")
    if not os.path.exists(path):
        pytest.fail(f"libquarrel_dev not found at {path}: build the quarrel_dev target or set QUARREL_DEV_LIB")
    return QuarrelQuant(path)


class GgmlQuant:
    """The ggml shared libraries of llama-cpp-python: ggml_quantize_chunk and the CPU vec_dot."""

    class TraitsCpu(ctypes.Structure):
        _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p), ("vec_dot_type", ctypes.c_int),
                    ("nrows", ctypes.c_int64)]

    GGML_VEC_DOT = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                    ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)

    def __init__(self, libdir):
        self.base = ctypes.CDLL(str(libdir / "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
        self.cpu = ctypes.CDLL(str(libdir / "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)
        self.base.ggml_quantize_chunk.restype = ctypes.c_size_t
        self.base.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                                  ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
        self.cpu.ggml_cpu_init.restype = None
        self.cpu.ggml_cpu_init()
        self.cpu.ggml_get_type_traits_cpu.restype = ctypes.POINTER(self.TraitsCpu)
        self.cpu.ggml_get_type_traits_cpu.argtypes = [ctypes.c_int]
        for qtype in (T.Q8_1, T.Q8_K):  # quantize_row_*_ref: the reference activation quantizers
            fn = getattr(self.base, f"quantize_row_{qtype.name.lower().replace('_k', '_K')}_ref")
            fn.restype = None
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]

    def quantize(self, qtype, x: np.ndarray, n_per_row: int) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
        block, size = GGML_QUANT_SIZES[qtype]
        out = np.zeros(x.size // block * size, dtype=np.uint8)
        if qtype in (T.Q8_1, T.Q8_K):  # not storage types: ggml_quantize_chunk refuses them
            fn = getattr(self.base, f"quantize_row_{qtype.name.lower().replace('_k', '_K')}_ref")
            fn(x.ctypes.data, out.ctypes.data, x.size)
        else:
            nrows = x.size // n_per_row
            written = self.base.ggml_quantize_chunk(int(qtype), x.ctypes.data, out.ctypes.data, 0, nrows, n_per_row,
                                                    None)
            assert written == out.size
        return out

    def vec_dot(self, qtype, n, xq: np.ndarray, yq: np.ndarray) -> float:
        tr = self.cpu.ggml_get_type_traits_cpu(int(qtype)).contents
        assert tr.vec_dot, f"ggml has no CPU vec_dot for {qtype.name}"
        s = ctypes.c_float()
        self.GGML_VEC_DOT(tr.vec_dot)(n, ctypes.addressof(s), 0, xq.ctypes.data, 0, yq.ctypes.data, 0, 1)
        return s.value

    def vec_dot_type(self, qtype):
        return T(self.cpu.ggml_get_type_traits_cpu(int(qtype)).contents.vec_dot_type)


@pytest.fixture(scope="session")
def ggml():
    try:
        import llama_cpp
    except ImportError:
        pytest.fail("llama-cpp-python is not installed (tools/requirements-ref.txt): ggml's quantizers are needed")
    libdir = pathlib.Path(llama_cpp.__file__).parent / "lib"
    if not (libdir / "libggml-base.so").exists():
        pytest.fail(f"ggml libraries not found in {libdir}")
    return GgmlQuant(libdir)


_readers = {}


def reader_for(path) -> GGUFReader:
    """GGUFReader is slow on large vocabularies: parse each model once per session."""
    key = str(path)
    if key not in _readers:
        _readers[key] = GGUFReader(key)
    return _readers[key]


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a = np.ascontiguousarray(a, dtype=np.float32).reshape(-1)
    b = np.ascontiguousarray(b, dtype=np.float32).reshape(-1)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def first_mismatch(a, b):
    a = np.ascontiguousarray(a, dtype=np.float32).reshape(-1).view(np.uint32)
    b = np.ascontiguousarray(b, dtype=np.float32).reshape(-1).view(np.uint32)
    i = int(np.argmax(a != b))
    return f"first mismatch at {i}: ours {a[i]:#010x} ({a.view(np.float32)[i]!r}) vs {b[i]:#010x} ({b.view(np.float32)[i]!r})"


# ---- real tensors ----------------------------------------------------------------------------------

def sample_tensors(reader, per_type=4):
    """Up to `per_type` tensors of each type: the largest, the smallest and evenly spaced ones between."""
    by_type = {}
    for t in reader.tensors:
        by_type.setdefault(T(t.tensor_type), []).append(t)
    picked = []
    for qtype, ts in sorted(by_type.items()):
        ts = sorted(ts, key=lambda t: (int(t.n_elements), t.name))
        if len(ts) <= per_type:
            picked += ts
        else:
            idx = sorted({round(i * (len(ts) - 1) / (per_type - 1)) for i in range(per_type)})
            picked += [ts[i] for i in idx]
    return by_type.keys(), picked


def check_tensor(qq, t, max_chunk_elems=1 << 22):
    qtype = T(t.tensor_type)
    ne0 = int(t.shape[0])  # the row length (ggml ne[0])
    n = int(t.n_elements)
    block, size = GGML_QUANT_SIZES[qtype]
    raw = np.asarray(t.data).view(np.uint8).reshape(-1)
    row_bytes = ne0 // block * size
    rows = raw.reshape(n // ne0, row_bytes)
    step = max(1, max_chunk_elems // ne0)
    for r0 in range(0, rows.shape[0], step):  # the whole tensor, a few rows at a time (bounded memory)
        chunk = rows[r0:r0 + step]
        theirs = gq.dequantize(chunk, qtype).reshape(-1)
        ours = qq.to_float(qtype, chunk, chunk.shape[0] * ne0)
        assert same_bits(ours, theirs), f"{t.name} ({qtype.name}) rows {r0}..: {first_mismatch(ours, theirs)}"


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_dequantize_real_tensors(qq, model, request):
    reader = reader_for(request.getfixturevalue(model))
    types, picked = sample_tensors(reader)
    for t in picked:
        check_tensor(qq, t)
    checked = sorted({T(t.tensor_type).name for t in picked})
    assert checked == sorted(q.name for q in types)  # every type of the model was covered
    print(f"{model}: {len(picked)} whole tensors, types {checked}")


def test_models_cover_the_hot_types(smollm2, gemma3):
    """The real-tensor test is meaningful only if the models hold the types we decode on the hot path."""
    seen = set()
    for path in (smollm2, gemma3):
        seen |= {T(t.tensor_type) for t in reader_for(path).tensors}
    assert {T.Q4_1, T.Q8_0, T.Q4_K, T.Q6_K, T.Q5_0, T.F32} <= seen


# ---- synthetic blocks ------------------------------------------------------------------------------

def random_blocks(qtype, n_blocks, rng):
    """Random bytes with finite, varied fp16 scales (all bit patterns for F16 and BF16)."""
    block, size = GGML_QUANT_SIZES[qtype]
    if qtype in (T.F16, T.BF16):
        bits = rng.permutation(np.arange(65536, dtype=np.uint16))  # every pattern, NaNs included
        return bits.view(np.uint8), bits.size
    if qtype == T.F32:
        x = rng.standard_normal(n_blocks).astype(np.float32) * np.float32(1e3)
        return x.view(np.uint8), n_blocks
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in FP16_FIELDS[qtype]:
        mag = np.exp(rng.uniform(-12, 4, size=n_blocks)).astype(np.float32)
        val = (mag * rng.choice([-1.0, 1.0], size=n_blocks)).astype(np.float16)
        val[rng.random(n_blocks) < 0.02] = 0  # a few zero scales
        val[:4] = np.array([6e-8, -6e-8, 65504, 2.0 ** -14], dtype=np.float16)[: min(4, n_blocks)]  # extremes
        raw[:, off:off + 2] = val.view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(-1), n_blocks * block


@pytest.mark.parametrize("qtype", OUR_TYPES, ids=lambda q: q.name)
def test_dequantize_synthetic_blocks(qq, qtype):
    rng = np.random.default_rng(1234 + int(qtype))
    raw, n = random_blocks(qtype, 4096, rng)
    with np.errstate(over="ignore"):  # MXFP4 exponents near 255 overflow to inf (on both sides)
        theirs = gq.dequantize(raw.copy(), qtype).reshape(-1)
    ours = qq.to_float(qtype, raw, n)
    assert same_bits(ours, theirs), f"{qtype.name}: {first_mismatch(ours, theirs)}"


@pytest.mark.parametrize("qtype", [q for q in GGUF_PY_QUANTIZE if q not in (T.F16, T.BF16)], ids=lambda q: q.name)
def test_dequantize_gguf_py_quantized_blocks(qq, qtype):
    """Blocks made by gguf-py's own quantizer decode identically."""
    rng = np.random.default_rng(99 + int(qtype))
    x = (rng.standard_normal((64, 256)) * np.exp(rng.uniform(-4, 2, size=(64, 1)))).astype(np.float32)
    q = gq.quantize(x, qtype)
    assert same_bits(qq.to_float(qtype, q, x.size), gq.dequantize(q, qtype))


# ---- quantization -----------------------------------------------------------------------------------

def float_rows(rng, rows=64, cols=512):
    """Weight-like rows: Gaussian with per-row and per-32 scale changes, some zero and constant blocks,
    some values on exact quantization ties."""
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x *= np.exp(rng.uniform(-5, 2, size=(rows, cols // 32, 1))).astype(np.float32).repeat(32, axis=2).reshape(rows, cols)
    specials = [np.zeros(64), np.full(32, -0.3), np.arange(32) - 15.5, np.round(rng.standard_normal(256) * 8) / 2]
    for r, v in enumerate(specials[:rows]):
        x[r, :min(v.size, cols)] = v[:cols]
    return x


@pytest.mark.parametrize("qtype", GGUF_PY_QUANTIZE, ids=lambda q: q.name)
def test_quantize_matches_gguf_py(qq, qtype):
    rng = np.random.default_rng(7 + int(qtype))
    x = float_rows(rng)
    theirs = np.asarray(gq.quantize(x, qtype)).view(np.uint8).reshape(-1)
    for best in (False, True):
        ours = qq.from_float(qtype, x, best=best)
        assert np.array_equal(ours, theirs), f"{qtype.name} (best={best}): first byte mismatch at {int(np.argmax(ours != theirs))}"


@pytest.mark.parametrize("qtype", GGUF_PY_QUANTIZE, ids=lambda q: q.name)
def test_requantize_real_tensor_matches_gguf_py(qq, smollm2, qtype):
    """Re-quantizing real weights (a dequantized Q4_1 tensor of SmolLM2) gives gguf-py's bytes."""
    reader = reader_for(smollm2)
    t = next(t for t in reader.tensors if t.name == "blk.0.ffn_down.weight")
    x = gq.dequantize(np.asarray(t.data), T(t.tensor_type)).reshape(-1, int(t.shape[0]))
    theirs = np.asarray(gq.quantize(x, qtype)).view(np.uint8).reshape(-1)
    assert np.array_equal(qq.from_float(qtype, x), theirs)


@pytest.mark.parametrize("qtype", GGML_QUANTIZE, ids=lambda q: q.name)
def test_quantize_matches_ggml(qq, ggml, gemma3, qtype):
    """Our from_float is byte-identical to ggml's quantizer without an importance matrix (what
    llama-quantize writes), on synthetic rows and on real weights of Gemma-3."""
    rng = np.random.default_rng(11 + int(qtype))
    rows = [float_rows(rng, rows=32, cols=1024)]
    reader = reader_for(gemma3)
    for name in ("blk.0.attn_q.weight", "blk.3.ffn_down.weight"):
        t = next(t for t in reader.tensors if t.name == name)
        rows.append(gq.dequantize(np.asarray(t.data), T(t.tensor_type)).reshape(-1, int(t.shape[0]))[:64])
    for x in rows:
        theirs = ggml.quantize(qtype, x, x.shape[1])
        for best in (False, True):
            ours = qq.from_float(qtype, x, best=best)
            assert np.array_equal(ours, theirs), (
                f"{qtype.name} (best={best}) row length {x.shape[1]}: first byte mismatch at {int(np.argmax(ours != theirs))}")


# ---- dot products ------------------------------------------------------------------------------------

DOT_TYPES = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K,
             T.MXFP4, T.IQ4_NL]


@pytest.mark.parametrize("qtype", DOT_TYPES, ids=lambda q: q.name)
def test_vec_dot_matches_ggml(qq, ggml, qtype):
    """Same vec_dot_type as ggml, and the same dot (scalar and SIMD) on the same quantized rows,
    within 1e-5 of sum |x*y| (different float summation order only)."""
    ours_vdt = T(qq.traits(qtype).vec_dot_type)
    assert ours_vdt == ggml.vec_dot_type(qtype)
    rng = np.random.default_rng(5 + int(qtype))
    n = 4096
    for _ in range(8):
        x = float_rows(rng, rows=1, cols=n)[0] * np.float32(rng.uniform(0.01, 10))
        y = rng.standard_normal(n).astype(np.float32)
        xq = qq.from_float(qtype, x)
        yq = qq.from_float(ours_vdt, y)
        xd = qq.to_float(qtype, xq, n).astype(np.float64)
        yd = qq.to_float(ours_vdt, yq, n).astype(np.float64)
        mag = float(np.sum(np.abs(xd * yd)))
        theirs = ggml.vec_dot(qtype, n, xq, yq)
        for best in (False, True):
            ours = qq.vec_dot(qtype, n, xq, yq, best=best)
            assert abs(ours - theirs) <= 1e-5 * mag, f"{qtype.name} best={best}: ours {ours} ggml {theirs} (mag {mag})"
