"""Our Arrow IPC encoder/decoder and C Data Interface export, checked against pyarrow.

* pyarrow's IPC reader accepts every message our encoder writes (flight-tool ipc-sample), and our
  decoder reads what pyarrow writes (flight-tool ipc-roundtrip re-encodes it: pyarrow must read the
  same table back), for every supported type, nulls, slices, empty batches and metadata;
* unsupported or corrupted input gives a clear error and never a crash;
* an embedding batch exported through the C Data Interface is imported by pyarrow without a copy,
  and its memory is released through our release callbacks.
"""
import ctypes
import gc
import json
import subprocess

import numpy as np
import pyarrow as pa
import pytest


def run(tool, *args, check=True):
    p = subprocess.run([tool, *map(str, args)], capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        pytest.fail(f"flight-tool {' '.join(map(str, args))} failed ({p.returncode}): {p.stderr}")
    return p


def roundtrip(tool, tmp_path, table, max_chunksize=None):
    src, dst = tmp_path / "in.arrows", tmp_path / "out.arrows"
    with pa.ipc.new_stream(src, table.schema) as w:
        w.write_table(table, max_chunksize=max_chunksize)
    out = json.loads(run(tool, "ipc-roundtrip", src, dst).stdout)
    back = pa.ipc.open_stream(dst).read_all()
    back.validate(full=True)
    return out, back


def test_pyarrow_reads_our_encoder(flight_tool, tmp_path):
    path = tmp_path / "sample.arrows"
    assert json.loads(run(flight_tool, "ipc-sample", path).stdout) == {"rows": 8, "batches": 2}
    reader = pa.ipc.open_stream(path)
    batches = list(reader)
    assert len(batches) == 2
    t = pa.Table.from_batches(batches)
    t.validate(full=True)
    s = t.schema
    assert s.metadata == {b"longbow.metric": b"euclidean", b"note": b"written by flight-tool"}
    assert s.field("a").metadata == {b"unit": b"count"}
    assert s.field("a").type == pa.int64() and not s.field("a").nullable
    assert s.field("b").type == pa.uint64()
    assert s.field("c").type == pa.float32()
    assert s.field("s").type == pa.string()
    assert s.field("v").type == pa.list_(pa.float32(), 3)
    g = np.arange(8)
    assert t["a"].to_pylist() == (g * 1000000007 - 5).tolist()
    assert t["b"].to_pylist() == [2**63 + int(i) for i in g]
    assert t["c"].to_pylist() == (g / 4 + 0.5).tolist()
    assert t["s"].to_pylist() == [None if i % 3 == 1 else f"row {i} \u2713" for i in g]
    assert t["v"].to_pylist() == [None if i == 2 else [float(i), -float(i), i * 0.25] for i in g]
    assert t["s"].null_count == 3 and t["v"].null_count == 1


def test_our_decoder_reads_pyarrow(flight_tool, tmp_path):
    n = 23
    rng = np.random.default_rng(1)
    vec = rng.standard_normal(n * 4).astype(np.float32)
    vec[5] = np.nan
    valid = np.ones(n, bool)
    valid[[0, 7, 8, 22]] = False
    t = pa.table({
        "id": pa.array(rng.integers(-2**62, 2**62, n), pa.int64()),
        "u64": pa.array(rng.integers(0, 2**63, n, dtype=np.uint64) * 2 + 1, pa.uint64()),
        "f32": pa.array(rng.standard_normal(n).astype(np.float32), mask=~valid),
        "f64": pa.array(rng.standard_normal(n)),
        "f16": pa.array(rng.standard_normal(n).astype(np.float16)),
        "i8": pa.array(rng.integers(-128, 128, n), pa.int8()),
        "u16": pa.array(rng.integers(0, 65536, n), pa.uint16()),
        "i32": pa.array(rng.integers(-2**31, 2**31, n), pa.int32()),
        "u32": pa.array(rng.integers(0, 2**32, n), pa.uint32()),
        "text": pa.array([None if i % 5 == 0 else ("" if i % 7 == 0 else f"t{i} \u00e9\U0001F600" * (i % 4))
                          for i in range(n)]),
        "blob": pa.array([bytes([i, 0, 255]) * (i % 3) for i in range(n)], pa.binary()),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vec), 4, mask=pa.array(~valid)),
    })
    t = t.replace_schema_metadata({"longbow.metric": "cosine", "k": "v"})
    schema = t.schema.set(0, t.schema.field(0).with_metadata({"role": "key"}))
    t = t.cast(schema)
    out, back = roundtrip(flight_tool, tmp_path, t, max_chunksize=5)
    assert out == {"rows": n, "batches": 5}
    assert back.schema.equals(t.schema, check_metadata=True)
    for name in t.column_names:
        if name != "vector":  # holds a NaN, which never compares equal: checked bit by bit below
            assert back[name].equals(t[name]), name
    assert back["vector"].is_null().equals(t["vector"].is_null())
    # bit-exact floats, NaN included
    assert np.array_equal(back["vector"].combine_chunks().flatten().to_numpy().view(np.uint32),
                          t["vector"].combine_chunks().flatten().to_numpy().view(np.uint32))


def test_slices_and_empty_batches(flight_tool, tmp_path):
    base = pa.table({"id": pa.array(range(100), pa.int64()),
                     "s": pa.array([None if i % 3 == 0 else str(i) * (i % 5) for i in range(100)]),
                     "v": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(200, dtype=np.float32)), 2,
                                                           mask=pa.array([i % 4 == 1 for i in range(100)]))})
    src, dst = tmp_path / "in.arrows", tmp_path / "out.arrows"
    parts = [base.slice(3, 17), base.slice(20, 0), base.slice(41, 30), base.slice(99, 1)]
    with pa.ipc.new_stream(src, base.schema) as w:
        for p in parts:
            for b in p.to_batches():
                w.write_batch(b)
        w.write_batch(pa.record_batch([pa.array([], pa.int64()), pa.array([], pa.string()),
                                       pa.FixedSizeListArray.from_arrays(pa.array([], pa.float32()), 2)],
                                      schema=base.schema))
    run(flight_tool, "ipc-roundtrip", src, dst)
    back = pa.ipc.open_stream(dst).read_all()
    assert back.equals(pa.concat_tables(parts))


def test_unsupported_and_corrupt_input(flight_tool, tmp_path):
    src, dst = tmp_path / "in.arrows", tmp_path / "out.arrows"
    # an unsupported type is named in the error
    t = pa.table({"flag": pa.array([True, False])})
    with pa.ipc.new_stream(src, t.schema) as w:
        w.write_table(t)
    p = run(flight_tool, "ipc-roundtrip", src, dst, check=False)
    assert p.returncode == 1 and "unsupported" in p.stderr and "'flag'" in p.stderr
    # dictionary encoding is refused clearly
    t = pa.table({"d": pa.array(["a", "b", "a"]).dictionary_encode()})
    with pa.ipc.new_stream(src, t.schema) as w:
        w.write_table(t)
    p = run(flight_tool, "ipc-roundtrip", src, dst, check=False)
    assert p.returncode == 1 and "dictionary" in p.stderr
    # truncations and byte flips of a valid stream: errors, never a crash
    t = pa.table({"id": pa.array(range(50), pa.int64()), "s": pa.array([str(i) for i in range(50)]),
                  "v": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(100, dtype=np.float32)), 2)})
    with pa.ipc.new_stream(src, t.schema) as w:
        w.write_table(t, max_chunksize=20)
    good = src.read_bytes()
    p = run(flight_tool, "ipc-roundtrip", src, dst, check=False)
    assert p.returncode == 0
    bad = tmp_path / "bad.arrows"
    bad.write_bytes(good[: len(good) // 2])
    p = run(flight_tool, "ipc-roundtrip", bad, dst, check=False)
    assert p.returncode == 1 and "truncated" in p.stderr
    rng = np.random.default_rng(3)
    outcomes = set()
    for _ in range(150):
        data = bytearray(good)
        for pos in rng.integers(0, len(data), 3):
            data[pos] ^= int(rng.integers(1, 256))
        bad.write_bytes(bytes(data))
        p = run(flight_tool, "ipc-roundtrip", bad, dst, check=False)
        assert p.returncode in (0, 1), p.stderr  # a signal (crash) gives a negative code
        if p.returncode == 1:
            assert p.stderr.startswith("flight-tool: ") and len(p.stderr.strip()) > 20
        outcomes.add(p.returncode)
    assert 1 in outcomes


# ---- C Data Interface ----------------------------------------------------------------------------

class ArrowSchema(ctypes.Structure):
    _fields_ = [("format", ctypes.c_char_p), ("name", ctypes.c_char_p), ("metadata", ctypes.c_void_p),
                ("flags", ctypes.c_int64), ("n_children", ctypes.c_int64), ("children", ctypes.c_void_p),
                ("dictionary", ctypes.c_void_p), ("release", ctypes.c_void_p), ("private_data", ctypes.c_void_p)]


class ArrowArray(ctypes.Structure):
    _fields_ = [("length", ctypes.c_int64), ("null_count", ctypes.c_int64), ("offset", ctypes.c_int64),
                ("n_buffers", ctypes.c_int64), ("n_children", ctypes.c_int64), ("buffers", ctypes.c_void_p),
                ("children", ctypes.c_void_p), ("dictionary", ctypes.c_void_p), ("release", ctypes.c_void_p),
                ("private_data", ctypes.c_void_p)]


RELEASE_HOOK = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def load(lib_path):
    lib = ctypes.CDLL(lib_path)
    lib.qr_embed_batch_create.argtypes = [ctypes.c_int32, ctypes.c_int64, ctypes.c_bool, ctypes.c_bool,
                                          ctypes.POINTER(ctypes.c_void_p)]
    lib.qr_embed_batch_create.restype = ctypes.c_int
    lib.qr_embed_batch_append.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_float),
                                          ctypes.c_char_p, ctypes.c_char_p]
    lib.qr_embed_batch_append.restype = ctypes.c_int
    lib.qr_embed_batch_vectors.argtypes = [ctypes.c_void_p]
    lib.qr_embed_batch_vectors.restype = ctypes.c_void_p
    lib.qr_embed_batch_ids.argtypes = [ctypes.c_void_p]
    lib.qr_embed_batch_ids.restype = ctypes.c_void_p
    lib.qr_embed_batch_export.argtypes = [ctypes.c_void_p, ctypes.c_char_p, RELEASE_HOOK, ctypes.c_void_p,
                                          ctypes.POINTER(ArrowSchema), ctypes.POINTER(ArrowArray),
                                          ctypes.c_char_p, ctypes.c_size_t]
    lib.qr_embed_batch_export.restype = ctypes.c_int
    return lib


def test_c_data_export_zero_copy(quarrel_lib):
    lib = load(quarrel_lib)
    n, dim = 1000, 16
    vec = np.random.default_rng(5).standard_normal((n, dim)).astype(np.float32)
    b = ctypes.c_void_p()
    assert lib.qr_embed_batch_create(dim, n, True, False, ctypes.byref(b)) == 0
    for i in range(n):
        row = vec[i].ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        assert lib.qr_embed_batch_append(b, 7 * i, row, f"text {i} \u00fc".encode(), None) == 0
    vectors_at = lib.qr_embed_batch_vectors(b)
    ids_at = lib.qr_embed_batch_ids(b)
    released = []
    hook = RELEASE_HOOK(lambda user: released.append(True))
    schema, array = ArrowSchema(), ArrowArray()
    err = ctypes.create_string_buffer(256)
    assert lib.qr_embed_batch_export(b, b"cosine", hook, None, ctypes.byref(schema), ctypes.byref(array),
                                     err, 256) == 0, err.value
    rb = pa.RecordBatch._import_from_c(ctypes.addressof(array), ctypes.addressof(schema))
    assert array.release is None and schema.release is None  # pyarrow took ownership
    assert rb.schema.names == ["id", "vector", "text"]
    assert rb.schema.field("vector").type == pa.list_(pa.float32(), dim)
    assert rb.schema.metadata[b"longbow.metric"] == b"cosine"
    assert rb.column("id").to_pylist() == [7 * i for i in range(n)]
    assert rb.column("text")[3].as_py() == "text 3 \u00fc"
    flat = rb.column("vector").values
    assert np.array_equal(flat.to_numpy().view(np.uint32), vec.ravel().view(np.uint32))
    # zero copy: pyarrow's buffers are our memory
    assert flat.buffers()[1].address == vectors_at
    assert rb.column("id").buffers()[1].address == ids_at
    rb.validate(full=True)
    # a child kept alive alone keeps the memory alive; releasing the last reference frees it
    col = rb.column("vector")
    del rb, flat
    gc.collect()
    assert released == []
    assert np.array_equal(col.values.to_numpy()[:dim], vec[0])
    del col
    gc.collect()
    assert released == [True]
