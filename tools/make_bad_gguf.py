#!/usr/bin/env python3
"""Generates the malformed GGUF corpus (tests/data/gguf_bad/) and small valid files (tests/data/gguf_good/).

Each bad file has exactly one defect. For each one this script prints the byte offset of the defect
as it computes it from the layout, so that the expectations in tests/unit/test_gguf.c can be checked
against an independent derivation. The files are deterministic: running the script again reproduces
them byte for byte.

usage: tools/make_bad_gguf.py [--out-bad DIR] [--out-good DIR]
"""
import argparse
import os
import pathlib
import struct

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Metadata value types (GGUF spec).
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
# Tensor types used here: (id, block size, bytes per block).
T_F32, T_F16, T_Q4_0, T_F64 = (0, 1, 4), (1, 1, 2), (2, 32, 18), (28, 1, 8)

MAGIC = b"GGUF"


def u32(v):
    return struct.pack("<I", v & 0xFFFFFFFF)


def u64(v):
    return struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return u64(len(b)) + b


def header(n_tensors, n_kv, version=3, magic=MAGIC):
    return magic + u32(version) + u64(n_tensors) + u64(n_kv)


def kv(key, vtype, payload):
    return gstr(key) + u32(vtype) + payload


def tensor_info(name, dims, ttype, offset):
    return gstr(name) + u32(len(dims)) + b"".join(u64(d) for d in dims) + u32(ttype) + u64(offset)


def pad(n, a):
    return (n + a - 1) // a * a


def nbytes(dims, t):
    n = 1
    for d in dims:
        n *= d
    return n // t[1] * t[2]


def assemble(kvs, tensors, version=3, alignment=32, n_tensors=None, n_kv=None, data_fill=0x5A):
    """kvs: list of encoded kv bytes; tensors: list of (name, dims, type tuple).
    Returns (file bytes, offset of each kv, offset of each tensor info, data offset)."""
    out = bytearray(header(len(tensors) if n_tensors is None else n_tensors, len(kvs) if n_kv is None else n_kv, version))
    kv_offs = []
    for k in kvs:
        kv_offs.append(len(out))
        out += k
    ti_offs, off, blobs = [], 0, []
    for name, dims, t in tensors:
        ti_offs.append(len(out))
        out += tensor_info(name, dims, t[0], off)
        nb = nbytes(dims, t)
        blobs.append(bytes([(data_fill + i) & 0xFF for i in range(nb)]) + bytes(pad(nb, alignment) - nb))
        off += pad(nb, alignment)
    data_off = pad(len(out), alignment)
    out += bytes(data_off - len(out))
    for b in blobs:
        out += b
    return bytes(out), kv_offs, ti_offs, data_off


def base_kvs():
    return [kv("general.architecture", STRING, gstr("llama")), kv("general.name", STRING, gstr("tiny"))]


def bad_cases():
    """Yields (file name, bytes, offset of the defect, what the reader should say)."""
    good, kv_offs, ti_offs, _ = assemble(base_kvs(), [("a", [32], T_F32)])

    yield "empty.gguf", b"", 0, "file truncated (magic)"
    yield "truncated_header.gguf", MAGIC + u32(3) + b"\0\0\0\0", 8, "file truncated (tensor count)"
    yield "bad_magic.gguf", b"GGML" + good[4:], 0, "bad magic"
    yield "version1.gguf", good[:4] + u32(1) + good[8:], 4, "version 1 unsupported"
    yield "version99.gguf", good[:4] + u32(99) + good[8:], 4, "unsupported version 99"
    yield "big_endian.gguf", good[:4] + struct.pack(">I", 3) + good[8:], 4, "big-endian version"
    yield "truncated_mid_file.gguf", good[: ti_offs[0] + 10], ti_offs[0] + 9, "truncated inside n_dims of the tensor info"

    # Absurd counts for the file size.
    yield "n_kv_absurd.gguf", header(0, 1 << 40) + good[24:], 16, "key/value count 1099511627776 impossible"
    yield "n_tensors_absurd.gguf", header(1 << 40, 2) + good[24:], 8, "tensor count impossible"
    yield "n_kv_u64max.gguf", header(0, (1 << 64) - 1) + good[24:], 16, "key/value count 2^64-1 impossible"
    small = header(3, 3) + bytes(100)  # 3*13 + 3*32 = 135 > 100, each alone fits
    yield "counts_sum_absurd.gguf", small, 8, "3 tensors and 3 kvs cannot fit"

    # Strings and arrays running past the end.
    f = header(0, 1) + u64((1 << 63) - 1) + b"abc" + bytes(20)
    yield "key_len_past_eof.gguf", f, 24, "key length 2^63-1 past end"
    f = header(0, 1) + u64((1 << 64) - 1) + b"abcdefghijkl"
    yield "key_len_u64max.gguf", f, 24, "key length 2^64-1 past end (no overflow)"
    f = header(0, 1) + gstr("k") + u32(STRING) + u64(1000) + b"short"
    yield "string_len_past_eof.gguf", f, 24 + 9 + 4, "string length 1000 past end"
    f = header(0, 1) + gstr("k") + u32(ARRAY) + u32(U32) + u64((1 << 62) + 1) + bytes(16)
    yield "array_count_overflow.gguf", f, 24 + 9 + 4 + 4, "count*4 wraps to 4: must still be rejected"
    f = header(0, 1) + gstr("k") + u32(ARRAY) + u32(U8) + u64(17) + bytes(16)
    yield "array_count_past_eof.gguf", f, 24 + 9 + 4 + 4, "17 u8 with 16 bytes left"
    f = header(0, 1) + gstr("k") + u32(ARRAY) + u32(STRING) + u64(1 << 61) + bytes(16)
    yield "string_array_count_past_eof.gguf", f, 24 + 9 + 4 + 4, "string array count past end"
    f = header(0, 1) + gstr("k") + u32(ARRAY) + u32(STRING) + u64(2) + gstr("x") + u64(99) + b"yy"
    yield "string_array_elem_past_eof.gguf", f, 24 + 9 + 4 + 4 + 8 + 9, "second string length past end"
    f = header(0, 1) + gstr("k") + u32(ARRAY) + u32(ARRAY) + u64(1 << 40) + bytes(24)
    yield "nested_array_count_past_eof.gguf", f, 24 + 9 + 4 + 4, "array-of-arrays count past end"

    # Types.
    f = header(0, 1) + gstr("k") + u32(13) + u32(0)
    yield "unknown_value_type.gguf", f, 24 + 9, "value type 13"
    f = header(0, 1) + gstr("k") + u32(ARRAY) + u32(99) + u64(0) + bytes(4)
    yield "unknown_array_elem_type.gguf", f, 24 + 9 + 4, "array element type 99"
    f = header(0, 1) + gstr("k") + u32(BOOL) + b"\x02" + bytes(3)
    yield "bad_bool.gguf", f, 24 + 9 + 4, "bool value 2"
    f = header(0, 1) + gstr("k") + u32(ARRAY) + u32(BOOL) + u64(3) + b"\x01\x07\x00"
    yield "bad_bool_array.gguf", f, 24 + 9 + 4 + 4 + 8 + 1, "bool element 1 is 7"
    inner = u32(U8) + u64(0)
    for _ in range(9):  # 9 levels of array-of-arrays around an empty u8 array: 10 arrays in all
        inner = u32(ARRAY) + u64(1) + inner
    f = header(0, 1) + gstr("k") + u32(ARRAY) + inner
    yield "array_nesting_too_deep.gguf", f, 24 + 9 + 4 + 8 * 12, "nesting deeper than 8"

    # Duplicate key.
    kvs = base_kvs() + [kv("general.name", STRING, gstr("again"))]
    f, offs, _, _ = assemble(kvs, [])
    yield "duplicate_key.gguf", f, offs[2], f"duplicate key general.name (first at {offs[1]})"

    # Alignment.
    for name, vtype, val, what in [
        ("alignment_not_pow2.gguf", U32, u32(48), "48 not a power of two"),
        ("alignment_zero.gguf", U32, u32(0), "0 not a power of two"),
        ("alignment_wrong_type.gguf", U64, u64(64), "alignment is uint64"),
    ]:
        kvs = base_kvs() + [kv("general.alignment", vtype, val)]
        f, offs, _, _ = assemble(kvs, [("a", [32], T_F32)])
        at = offs[2] + 8 + len("general.alignment") + (4 if vtype == U32 else 0)
        yield name, f, at, what

    # Tensor infos.
    def with_tensor_info(info, data=b"", extra_infos=b"", n_tensors=1):
        body = header(n_tensors, 1) + kv("general.name", STRING, gstr("t")) + extra_infos + info
        at_info = len(header(0, 0)) + len(kv("general.name", STRING, gstr("t"))) + len(extra_infos)
        return body + bytes(pad(len(body), 32) - len(body)) + data, at_info

    f, at = with_tensor_info(gstr("w") + u32(0) + u32(0) + u64(0), bytes(64))
    yield "tensor_n_dims_zero.gguf", f, at + 9, "n_dims 0"
    f, at = with_tensor_info(gstr("w") + u32(5) + u64(1) * 5 + u32(0) + u64(0), bytes(64))
    yield "tensor_n_dims_five.gguf", f, at + 9, "n_dims 5"
    f, at = with_tensor_info(tensor_info("w", [4, 0], 0, 0), bytes(64))
    yield "tensor_dim_zero.gguf", f, at + 9 + 4 + 8, "dimension 1 is 0"
    f, at = with_tensor_info(tensor_info("w", [-5 & 0xFFFFFFFFFFFFFFFF], 0, 0), bytes(64))
    yield "tensor_dim_negative.gguf", f, at + 9 + 4, "dimension 0 is -5"
    f, at = with_tensor_info(tensor_info("w", [1 << 32, 1 << 32], 0, 0), bytes(64))
    yield "tensor_nelements_overflow.gguf", f, at + 9 + 4 + 8, "2^32 * 2^32 overflows int64"
    f, at = with_tensor_info(tensor_info("w", [1 << 61], T_F64[0], 0), bytes(64))
    yield "tensor_nbytes_overflow.gguf", f, at + 9, "2^61 F64 elements = 2^64 bytes"
    f, at = with_tensor_info(tensor_info("w", [32], 4, 0), bytes(64))
    yield "tensor_type_removed.gguf", f, at + 9 + 4 + 8, "type 4 (removed Q4_2)"
    f, at = with_tensor_info(tensor_info("w", [32], 1000, 0), bytes(64))
    yield "tensor_type_unknown.gguf", f, at + 9 + 4 + 8, "type 1000"
    f, at = with_tensor_info(tensor_info("w", [33, 2], T_Q4_0[0], 0), bytes(128))
    yield "tensor_block_size.gguf", f, at + 9 + 4, "ne[0] 33 not a multiple of 32 (Q4_0)"
    f, at = with_tensor_info(tensor_info("w", [4], 0, 16), bytes(64))
    yield "tensor_offset_misaligned.gguf", f, at + 9 + 4 + 8 + 4, "offset 16 vs alignment 32"
    f, at = with_tensor_info(tensor_info("w", [4], 0, 1 << 40), bytes(64))
    yield "tensor_offset_past_eof.gguf", f, at + 9 + 4 + 8 + 4, "offset 2^40 past end"
    f, at = with_tensor_info(tensor_info("w", [17], 0, 0), bytes(64))
    yield "tensor_size_past_eof.gguf", f, at + 9 + 4 + 8 + 4, "68 bytes with 64 in the data section"
    f, at = with_tensor_info(tensor_info("w", [16], 0, (1 << 64) - 32), bytes(64))
    yield "tensor_offset_wraps.gguf", f, at + 9 + 4 + 8 + 4, "offset 2^64-32: offset+size wraps"
    f, at = with_tensor_info(gstr("w") + u32(2) + u64(4), b"")
    yield "tensor_info_truncated.gguf", f[: at + 9 + 4 + 8], at + 9 + 4 + 8, "truncated before dimension 1"
    f, at = with_tensor_info(u64(1 << 50) + b"w" * 40)
    yield "tensor_name_past_eof.gguf", f, at, "tensor name length past end"
    first = tensor_info("w", [8], 0, 0)
    f, at = with_tensor_info(tensor_info("w", [8], 0, 32), bytes(64), extra_infos=first, n_tensors=2)
    yield "duplicate_tensor_name.gguf", f, at, f"duplicate tensor name w (first at {at - len(first)})"
    # general.alignment 4096 puts the data section past the end of this small file.
    kvs = [kv("general.alignment", U32, u32(4096))]
    f, _, ti, _ = assemble(kvs, [("a", [32], T_F32)], alignment=4096)
    f = f[:200]
    yield "alignment_data_past_eof.gguf", f, ti[0] + 9 + 4 + 8 + 4, "data section at 4096 past end"


def good_cases():
    """Small valid files (seed corpus for the fuzzer; opened by the unit test)."""
    f, _, _, _ = assemble([], [])  # header only, padded to the alignment as ggml writes it
    yield "minimal_v3.gguf", f
    f, _, _, _ = assemble(base_kvs(), [("a", [32], T_F32)], version=2)
    yield "small_v2.gguf", f
    kvs = [
        kv("general.architecture", STRING, gstr("test")),
        kv("general.alignment", U32, u32(64)),
        kv("v.u8", U8, b"\xff"),
        kv("v.i8", I8, b"\x80"),
        kv("v.u16", U16, struct.pack("<H", 65535)),
        kv("v.i16", I16, struct.pack("<h", -32768)),
        kv("v.u32", U32, u32(4000000000)),
        kv("v.i32", I32, struct.pack("<i", -2000000000)),
        kv("v.f32", F32, struct.pack("<f", 0.25)),
        kv("v.bool", BOOL, b"\x01"),
        kv("v.str", STRING, gstr("h\u00e9llo")),
        kv("v.u64", U64, u64((1 << 64) - 1)),
        kv("v.i64", I64, struct.pack("<q", -(1 << 63))),
        kv("v.f64", F64, struct.pack("<d", -1.5)),
        kv("v.arr_i32", ARRAY, u32(I32) + u64(3) + struct.pack("<iii", -1, 0, 7)),
        kv("v.arr_str", ARRAY, u32(STRING) + u64(2) + gstr("a") + gstr("")),
        kv("v.arr_arr", ARRAY, u32(ARRAY) + u64(2) + u32(U8) + u64(2) + b"\x01\x02" + u32(STRING) + u64(1) + gstr("z")),
        kv("v.arr_empty", ARRAY, u32(F32) + u64(0)),
    ]
    f, _, _, _ = assemble(kvs, [("t.f32", [8, 2], T_F32), ("t.f16", [3], T_F16), ("t.q4_0", [64, 1, 2], T_Q4_0)], alignment=64)
    yield "all_types.gguf", f


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-bad", default=str(ROOT / "tests/data/gguf_bad"))
    ap.add_argument("--out-good", default=str(ROOT / "tests/data/gguf_good"))
    args = ap.parse_args()
    os.makedirs(args.out_bad, exist_ok=True)
    os.makedirs(args.out_good, exist_ok=True)
    for name, data, at, what in bad_cases():
        pathlib.Path(args.out_bad, name).write_bytes(data)
        print(f"bad  {name:36s} {len(data):6d} bytes  defect at offset {at}: {what}")
    for name, data in good_cases():
        pathlib.Path(args.out_good, name).write_bytes(data)
        print(f"good {name:36s} {len(data):6d} bytes")


if __name__ == "__main__":
    main()
