#!/usr/bin/env python3
"""check_layers.py — the #include graph of src/ runs one way: a folder includes only folders of lower layers.

The layers (lowest first; a folder may include its own headers, include/quarrel.h and any lower layer):

  0 util       1 quant      2 gguf
  3 tokenizer, template, sampling, convert, flight, backend (the op-table contract backend/backend.h)
  4 backend/cpu, backend/cuda                                5 kv (paged KV cache, SSM state)
  6 model      7 sched      8 server

app/ sits above everything but includes src/ only through app/internal.h's list (checked by --app once the
public API is the boundary). Exit status 1 and one line per offending #include when an edge goes up or
sideways (two folders of the same layer may not include each other either).

  python3 tools/check_layers.py            check src/
  python3 tools/check_layers.py --selftest check that the checker catches an upward and a sideways edge
"""
import os
import re
import sys

LAYERS = {
    "util": 0, "quant": 1, "gguf": 2,
    "tokenizer": 3, "template": 3, "sampling": 3, "convert": 3, "flight": 3, "backend": 3,
    "backend/cpu": 4, "backend/cuda": 4,
    "kv": 5, "model": 6, "sched": 7, "server": 8,
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_EXT = (".c", ".h", ".cu", ".cuh", ".cpp")


def folder_of(inc, here, root):
    """The src/ folder an #include "..." names, or None for the public header and generated files."""
    if "/" not in inc:
        return here if os.path.exists(os.path.join(root, here, inc)) else None
    return os.path.dirname(inc)


def edge_errors(here, target, where):
    if target is None or target == here:
        return []
    if here not in LAYERS:
        return [f"{where}: folder src/{here} has no layer in tools/check_layers.py"]
    if target not in LAYERS:
        return [f"{where}: includes src/{target}, which has no layer in tools/check_layers.py"]
    if LAYERS[target] >= LAYERS[here]:
        kind = "sideways" if LAYERS[target] == LAYERS[here] else "upward"
        return [f"{where}: {kind} include: src/{here} (layer {LAYERS[here]}) -> src/{target} (layer {LAYERS[target]})"]
    return []


def check(root):
    errors = []
    for dirpath, _, files in os.walk(root):
        here = os.path.relpath(dirpath, root)
        for name in sorted(files):
            if not name.endswith(SOURCE_EXT):
                continue
            path = os.path.join(dirpath, name)
            with open(path, errors="replace") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if m:
                        where = f"{os.path.relpath(path)}:{lineno}"
                        errors += edge_errors(here, folder_of(m.group(1), here, root), where)
    return errors


def selftest():
    bad = edge_errors("kv", "model", "x.c:1") + edge_errors("tokenizer", "template", "y.c:1")
    good = edge_errors("model", "kv", "z.c:1") + edge_errors("model", None, "w.c:1")
    ok = len(bad) == 2 and "upward" in bad[0] and "sideways" in bad[1] and not good
    print("check_layers selftest:", "ok" if ok else f"FAILED {bad} {good}")
    return 0 if ok else 1


def main():
    if "--selftest" in sys.argv:
        return selftest()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    errors = check(os.path.normpath(root))
    for e in errors:
        print(e)
    print(f"check_layers: {len(errors)} edge(s) against the layering" if errors else "check_layers: ok")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
