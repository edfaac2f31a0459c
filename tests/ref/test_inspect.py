"""`quarrel inspect --json --full` agrees with gguf-py's GGUFReader on both real models: key count,
key order, every value (arrays included), value types, tensor names, types, shapes (ggml order),
offsets and sizes. Also checks abbreviation without --full, the text mode and the exit codes."""
import json
import pathlib
import subprocess

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType

ROOT = pathlib.Path(__file__).resolve().parents[2]
PREVIEW = 8  # array elements shown without --full


def run(quarrel_bin, *args):
    return subprocess.run([quarrel_bin, "inspect", *map(str, args)], capture_output=True, text=True, timeout=300)


def inspect_json(quarrel_bin, path, *flags):
    p = run(quarrel_bin, path, "--json", *flags)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def model(request):
    path = request.getfixturevalue(request.param)
    return path, GGUFReader(path)


@pytest.fixture(scope="module")
def full(model, quarrel_bin):
    path, _ = model
    return inspect_json(quarrel_bin, path, "--full")


def real_fields(reader):
    """The key/value fields, without gguf-py's three pseudo-fields for the header."""
    fields = list(reader.fields.values())
    assert [f.name for f in fields[:3]] == ["GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"]
    return fields[3:]


def type_name(t):
    return GGUFValueType(t).name.lower()


def test_header(model, full):
    path, reader = model
    assert full["version"] == int(reader.fields["GGUF.version"].parts[0][0])
    assert full["alignment"] == reader.alignment
    assert full["data_offset"] == reader.data_offset
    assert full["file_size"] == path.stat().st_size
    assert full["architecture"] == reader.fields["general.architecture"].contents()
    assert full["n_kv"] == len(real_fields(reader)) == int(reader.fields["GGUF.kv_count"].parts[0][0])
    assert full["n_tensors"] == len(reader.tensors)


def test_metadata_equal(model, full):
    _, reader = model
    fields = real_fields(reader)
    ours = full["metadata"]
    assert [m["key"] for m in ours] == [f.name for f in fields]
    n_arrays = 0
    for m, f in zip(ours, fields):
        assert m["offset"] == f.offset, m["key"]
        assert m["type"] == type_name(f.types[0]), m["key"]
        expected = f.contents()
        if f.types[0] == GGUFValueType.ARRAY:
            n_arrays += 1
            assert len(f.types) == 2, f"{m['key']}: nested arrays are not expected in these models"
            assert m["elem_type"] == type_name(f.types[1]), m["key"]
            assert m["count"] == len(f.data) == len(expected), m["key"]
            assert m["truncated"] is False
            assert m["value"] == expected, m["key"]
        else:
            assert m["value"] == expected, m["key"]
            # same Python type: bool stays bool, float stays float, str stays str
            assert type(m["value"]) is type(expected), m["key"]
    assert n_arrays >= 3


def test_tensors_equal(model, full):
    _, reader = model
    ours = full["tensors"]
    assert len(ours) == len(reader.tensors)
    params, nbytes, per_type = 0, 0, {}
    for t, r in zip(ours, reader.tensors):
        assert t["name"] == r.name
        assert t["type"] == r.tensor_type.name
        assert t["type_id"] == int(r.tensor_type)
        assert t["shape"] == [int(d) for d in r.shape]  # ggml order, ne[0] first
        assert t["n_elements"] == r.n_elements
        assert t["bytes"] == r.n_bytes
        assert t["file_offset"] == r.data_offset
        assert t["offset"] + full["data_offset"] == r.data_offset
        params += r.n_elements
        nbytes += r.n_bytes
        e = per_type.setdefault(r.tensor_type.name, {"tensors": 0, "parameters": 0, "bytes": 0})
        e["tensors"] += 1
        e["parameters"] += r.n_elements
        e["bytes"] += r.n_bytes
    assert full["parameters"] == params
    assert full["tensor_bytes"] == nbytes
    assert full["types"] == per_type


def test_tensor_bytes_match_file(model, full):
    """The tensor data quarrel locates is the data gguf-py maps (first and last tensor)."""
    path, reader = model
    raw = np.memmap(path, mode="r")
    for i in (0, -1):
        t, r = full["tensors"][i], reader.tensors[i]
        assert bytes(raw[t["file_offset"] : t["file_offset"] + t["bytes"]]) == r.data.tobytes()


def test_abbreviated_json(model, full, quarrel_bin):
    path, _ = model
    short = inspect_json(quarrel_bin, path)
    assert [m["key"] for m in short["metadata"]] == [m["key"] for m in full["metadata"]]
    for s, f in zip(short["metadata"], full["metadata"]):
        if f["type"] == "array":
            assert s["count"] == f["count"]
            assert s["value"] == f["value"][:PREVIEW]
            assert s["truncated"] == (f["count"] > PREVIEW)
        else:
            assert s == f
    assert short["tensors"] == full["tensors"]


def test_text_mode(model, full, quarrel_bin):
    path, reader = model
    p = run(quarrel_bin, path)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert f"GGUF v{full['version']}" in out
    assert f"metadata ({full['n_kv']} keys)" in out
    assert f"tensors ({full['n_tensors']})" in out
    assert f"parameters:    {full['parameters']} " in out
    tokens = next(m for m in full["metadata"] if m["key"] == "tokenizer.ggml.tokens")
    assert f"[{tokens['count']}]" in out
    assert f"... ({tokens['count'] - PREVIEW} more)]" in out
    for t in reader.tensors:
        assert t.name in out
    # --full prints whole arrays: no "more" marker, and the last token is there (escaped as text mode does)
    p = run(quarrel_bin, path, "--full")
    assert p.returncode == 0
    line = next(l for l in p.stdout.splitlines() if l.lstrip().startswith("tokenizer.ggml.tokens "))
    assert "more)]" not in line
    assert line.endswith(f", {text_quote(reader.fields['tokenizer.ggml.tokens'].contents(-1))}]")


def text_quote(s):
    """A string as inspect's text mode prints it: C-style escapes for quotes, backslash, controls."""
    escapes = {ord('"'): b'\\"', ord("\\"): b"\\\\", ord("\n"): b"\\n", ord("\t"): b"\\t", ord("\r"): b"\\r"}
    out = bytearray()
    for ch in s.encode():
        if ch in escapes:
            out += escapes[ch]
        elif ch < 0x20 or ch == 0x7F:
            out += f"\\x{ch:02x}".encode()
        else:
            out.append(ch)
    return '"' + out.decode() + '"'


def test_exit_codes(quarrel_bin, tmp_path):
    p = subprocess.run([quarrel_bin, "inspect", "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and "usage: quarrel inspect" in p.stdout
    p = subprocess.run([quarrel_bin, "inspect"], capture_output=True, text=True)
    assert p.returncode == 2 and "no file given" in p.stderr
    p = subprocess.run([quarrel_bin, "inspect", "--bogus", "x.gguf"], capture_output=True, text=True)
    assert p.returncode == 2 and "unknown option" in p.stderr
    p = subprocess.run([quarrel_bin, "inspect", "a.gguf", "b.gguf"], capture_output=True, text=True)
    assert p.returncode == 2
    p = run(quarrel_bin, tmp_path / "missing.gguf")
    assert p.returncode == 1 and "cannot open" in p.stderr
    bad = ROOT / "tests/data/gguf_bad/tensor_offset_misaligned.gguf"
    for flags in ([], ["--json"]):
        p = run(quarrel_bin, bad, *flags)
        assert p.returncode == 1
        assert "offset 82: tensor 'w': data offset 16 is not a multiple of the alignment 32" in p.stderr
        assert p.stdout == ""
    p = run(quarrel_bin, ROOT / "tests/data/gguf_bad/version1.gguf")
    assert p.returncode == 1 and "version 1 is not supported" in p.stderr


def test_small_valid_files(quarrel_bin):
    """The generator's all_types.gguf: every value type, a nested array, custom alignment."""
    j = inspect_json(quarrel_bin, ROOT / "tests/data/gguf_good/all_types.gguf", "--full")
    meta = {m["key"]: m for m in j["metadata"]}
    assert j["alignment"] == 64 and j["data_offset"] % 64 == 0
    assert meta["v.u64"]["value"] == str(2**64 - 1)  # above int64: written as a decimal string
    assert meta["v.i64"]["value"] == -(2**63)
    assert meta["v.f32"]["value"] == 0.25 and meta["v.f64"]["value"] == -1.5
    assert meta["v.str"]["value"] == "h\u00e9llo"
    assert meta["v.bool"]["value"] is True
    nested = meta["v.arr_arr"]
    assert nested["elem_type"] == "array" and nested["count"] == 2
    assert nested["value"][0] == {"type": "array", "elem_type": "uint8", "count": 2, "truncated": False, "value": [1, 2]}
    assert nested["value"][1]["value"] == ["z"]
    assert meta["v.arr_empty"]["count"] == 0 and meta["v.arr_empty"]["value"] == []
    assert [t["shape"] for t in j["tensors"]] == [[8, 2], [3], [64, 1, 2]]
