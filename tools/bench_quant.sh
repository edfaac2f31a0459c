#!/usr/bin/env bash
# bench_quant.sh — builds tools/bench_quant.c against libquarrel_dev.so (the quant kernels are internal: the
# public libquarrel.so does not export them) and runs it against ggml's CPU kernels from llama-cpp-python.
#   QUARREL_DEV_LIB=build/libquarrel_dev.so tools/bench_quant.sh [--n 2048] [--mb 16] [--reps 20]
# Prints ns per row and GB/s of weights for each vec_dot, and the speed ratio to ggml (> 1: we are faster).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
lib="${QUARREL_DEV_LIB:-$root/build/libquarrel_dev.so}"
py="${PYTHON:-$root/.venv/bin/python}"
[ -f "$lib" ] || { echo "libquarrel not found at $lib (build the quarrel_dev target)" >&2; exit 1; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
gcc -std=c17 -O2 -D_GNU_SOURCE -I"$root/src" -I"$root/include" "$root/tools/bench_quant.c" -o "$out/bench_quant" \
    "$lib" -Wl,-rpath,"$(dirname "$(readlink -f "$lib")")" -ldl -lm
ggml=""
if libdir="$("$py" -c 'import llama_cpp, pathlib; print(pathlib.Path(llama_cpp.__file__).parent / "lib")' 2>/dev/null)"; then
    [ -f "$libdir/libggml-cpu.so" ] && ggml="$libdir/libggml-cpu.so"
fi
[ -n "$ggml" ] || echo "llama-cpp-python not found: measuring Quarrel only" >&2
exec "$out/bench_quant" $ggml "$@"
