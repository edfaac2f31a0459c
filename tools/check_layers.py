#!/usr/bin/env python3
"""check_layers.py — the #include graph of src/ runs one way: a folder includes only folders of lower layers.

The layers (lowest first; a folder may include its own headers, include/quarrel.h and any lower layer):

  0 util       1 quant      2 gguf
  3 tokenizer, template, sampling, convert, flight, backend (the op-table contract backend/backend.h)
  4 backend/cpu, backend/cuda                                5 kv (paged KV cache, SSM state)
  6 model      7 sched      8 server

app/ (the CLI) sits above everything and is a client of the public API, include/quarrel.h: an app/ file
includes quarrel.h, other app/ headers and system headers, and reaches a src/ header only through the one
declared internal header, app/internal.h (for the tools that truly need the library's insides). Exit status 1
and one line per offending #include when an edge goes up or sideways (two folders of the same layer may not
include each other either) or an app/ file other than app/internal.h includes a src/ header.

  python3 tools/check_layers.py            check src/ and app/
  python3 tools/check_layers.py --app      check app/ only
  python3 tools/check_layers.py --selftest check that the checker catches an upward and a sideways edge, and
                                           an app/ file that includes a src/ header directly
"""
import os
import re
import sys
import tempfile

LAYERS = {
    "util": 0, "quant": 1, "gguf": 2,
    "tokenizer": 3, "template": 3, "sampling": 3, "convert": 3, "flight": 3, "backend": 3,
    "backend/cpu": 4, "backend/cuda": 4,
    "kv": 5, "model": 6, "sched": 7, "server": 8,
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
ANY_INCLUDE = re.compile(r'^\s*#\s*include\s+["<]([^">]+)[">]')
APP_INTERNAL = "internal.h"  # the one app/ header that may include src/ headers
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


def includes(path, pattern):
    """(line number, included name) of each line of the file at path that matches pattern."""
    with open(path, errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            m = pattern.match(line)
            if m:
                yield lineno, m.group(1)


def check(root):
    errors = []
    for dirpath, _, files in os.walk(root):
        here = os.path.relpath(dirpath, root)
        for name in sorted(files):
            if name.endswith(SOURCE_EXT):
                path = os.path.join(dirpath, name)
                for lineno, inc in includes(path, INCLUDE):
                    errors += edge_errors(here, folder_of(inc, here, root), f"{os.path.relpath(path)}:{lineno}")
    return errors


def check_app(app, src):
    """app/*.c|h: a src/ header (by "..." or <...>) only from app/internal.h; quarrel.h, app/ headers and
    system headers from anywhere."""
    errors = []
    for name in sorted(os.listdir(app)):
        if not name.endswith(SOURCE_EXT) or name == APP_INTERNAL:
            continue
        path = os.path.join(app, name)
        for lineno, inc in includes(path, ANY_INCLUDE):
            if inc != "quarrel.h" and not os.path.exists(os.path.join(app, inc)) and os.path.exists(os.path.join(src, inc)):
                errors.append(f"{os.path.relpath(path)}:{lineno}: app/ includes src/{inc} directly: use the public "
                              f"quarrel.h, or add it to app/{APP_INTERNAL} (the one internal header of app/)")
    return errors


def selftest():
    bad = edge_errors("kv", "model", "x.c:1") + edge_errors("tokenizer", "template", "y.c:1")
    good = edge_errors("model", "kv", "z.c:1") + edge_errors("model", None, "w.c:1")
    ok = len(bad) == 2 and "upward" in bad[0] and "sideways" in bad[1] and not good
    with tempfile.TemporaryDirectory() as d:  # a miniature tree: src/model/model.h, app/ with three files
        os.makedirs(os.path.join(d, "src", "model"))
        os.makedirs(os.path.join(d, "app"))
        files = {"src/model/model.h": "", "app/engine.h": '#include "quarrel.h"\n',
                 "app/internal.h": '#include "model/model.h"\n',
                 "app/cmd_ok.c": '#include <stdio.h>\n#include "engine.h"\n#include "internal.h"\n',
                 "app/cmd_bad.c": '#include "engine.h"\n#include "model/model.h"\n#include <model/model.h>\n'}
        for rel, text in files.items():
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        app_errors = check_app(os.path.join(d, "app"), os.path.join(d, "src"))
    app_ok = len(app_errors) == 2 and all("cmd_bad.c" in e for e in app_errors)
    ok = ok and app_ok
    print("check_layers selftest:", "ok" if ok else f"FAILED {bad} {good} {app_errors}")
    return 0 if ok else 1


def main():
    if "--selftest" in sys.argv:
        return selftest()
    top = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    root = os.path.join(top, "src")
    errors = [] if "--app" in sys.argv else check(root)
    errors += check_app(os.path.join(top, "app"), root)
    for e in errors:
        print(e)
    print(f"check_layers: {len(errors)} edge(s) against the layering" if errors else "check_layers: ok")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
