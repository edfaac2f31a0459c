#!/usr/bin/env bash
# scripts/gpu_bundle.sh — builds quarrel with the CUDA backend HERE (the GPU machine lacks the build
# dependencies: utf8proc, gRPC, protobuf-c, ... and their headers) and writes a relocatable bundle:
#
#   build-gpu/bundle/quarrel            wrapper: LD_LIBRARY_PATH = bundle/lib + CUDA's lib64, then quarrel.bin
#   build-gpu/bundle/quarrel.bin        the binary (Release, sm_80 + sm_90, static libquarrel, stripped)
#   build-gpu/bundle/quarrel_cuda_leak  wrapper of the GPU leak check (tests/cuda/leak), same layout
#   build-gpu/bundle/lib/               the shared libraries from ldd that are not glibc, libstdc++/libgcc
#                                       or CUDA (those the GPU machine has)
#   build-gpu/bundle/MANIFEST.txt       git revision, build date, sizes, ldd output
#
# Also runs scripts/llama_src_bundle.sh (build-gpu/llama-src.tar.xz) unless NO_LLAMA=1.
# On the device, carry: build-gpu/bundle build-gpu/llama-src.tar.xz  (see bench/gpu.sh).
#
# Environment: BUILD (default build-gpu), ARCHS (default "80;90a"), JOBS (default 2), NO_LLAMA=1.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
ARCHS=${ARCHS:-80;90a}
JOBS=${JOBS:-2}
B=$BUILD/bundle
log() { echo "[gpu_bundle $(date +%T)] $*"; }

command -v nvcc > /dev/null || export PATH=/usr/local/cuda/bin:$PATH
GEN=()
# ninja for a new build tree; an existing one keeps its generator (BUILD=build reuses `make build`'s tree)
[ -f "$BUILD/CMakeCache.txt" ] || { command -v ninja > /dev/null && GEN=(-G Ninja); }
log "configure $BUILD (Release, CUDA on, archs $ARCHS)"
cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DQUARREL_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" -DQUARREL_TESTS=ON > "$BUILD.configure.log" 2>&1 ||
    { tail -20 "$BUILD.configure.log"; exit 1; }
log "build quarrel_dyn and quarrel_cuda_leak (-j$JOBS)"
t0=$(date +%s)
cmake --build "$BUILD" --target quarrel_dyn quarrel_cuda_leak -j "$JOBS" 2>&1 | tail -3
[ -x "$BUILD/quarrel_dyn" ] || { echo "ERROR: $BUILD/quarrel_dyn was not built" >&2; exit 1; }
log "built in $(($(date +%s) - t0)) s"

rm -rf "$B"
mkdir -p "$B/lib"
# libraries the GPU machine has (glibc, the compiler runtime, CUDA, OpenSSL, zlib, PCRE2, jansson:
# probed on the lent machines, Ubuntu 24.04): never bundled
is_system_lib() {
    case $1 in
    linux-vdso* | ld-linux* | libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | libresolv.so* | \
        libstdc++.so* | libgcc_s.so* | libgomp.so* | \
        libssl.so* | libcrypto.so* | libz.so* | libpcre2-8.so* | libjansson.so* | \
        libcuda.so* | libcudart.so* | libcublas.so* | libcublasLt.so* | libnvrtc* | libnvJitLink*)
        return 0 ;;
    esac
    return 1
}
bundle_libs() { # copies the non-system libraries binary $1 needs into $B/lib
    ldd "$1" | awk '/=>/ {print $1, $3}' | while read -r name path; do
        if is_system_lib "$name"; then continue; fi
        if [ ! -f "$path" ]; then
            echo "ERROR: $1 needs $name, which is not found here" >&2
            exit 1
        fi
        cp -L "$path" "$B/lib/$name"
        strip --strip-unneeded "$B/lib/$name" 2> /dev/null || true
    done
}
write_wrapper() { # $1 wrapper name, $2 real binary name
    cat > "$B/$1" << EOF
#!/bin/sh
# wrapper written by scripts/gpu_bundle.sh: the bundled libraries first, then CUDA's
d=\$(cd "\$(dirname "\$0")" && pwd)
cuda=\${CUDA_HOME:-/usr/local/cuda}
LD_LIBRARY_PATH="\$d/lib:\$cuda/lib64:\$cuda/targets/x86_64-linux/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
exec "\$d/$2" "\$@"
EOF
    chmod +x "$B/$1"
}

# the CLI (quarrel_dyn: the quarrel binary against libquarrel_dev.so, the never-installed library that exports
# the internals app/internal.h's tools use) and the GPU leak check, both linked to libquarrel_dev.so (bundled
# in lib/): the kernels travel once. The kernel lab is not bundled (its kernels again):
# bench/cuda_lab.sh builds it on the device with nvcc in ~20 s.
for exe in quarrel_dyn tests/cuda/quarrel_cuda_leak; do
    name=$(basename "$exe")
    [ "$name" = quarrel_dyn ] && name=quarrel
    if [ ! -x "$BUILD/$exe" ]; then
        [ "$name" = quarrel ] && { echo "ERROR: no $BUILD/$exe" >&2; exit 1; }
        log "WARNING: no $BUILD/$exe (left out of the bundle)"
        continue
    fi
    cp "$BUILD/$exe" "$B/$name.bin"
    strip "$B/$name.bin"
    bundle_libs "$BUILD/$exe" # ldd on the build's copy: its RPATH finds libquarrel_dev.so
    write_wrapper "$name" "$name.bin"
done

{
    echo "quarrel GPU bundle"
    echo "git: $(git rev-parse --short HEAD 2> /dev/null || echo '?')$(git diff --quiet 2> /dev/null || echo ' (+ uncommitted changes)')"
    echo "built: $(date -u +%FT%TZ) on $(uname -n), $(nvcc --version | tail -1)"
    echo "CUDA archs: $ARCHS"
    echo
    echo "== sizes"
    (cd "$B" && du -ab . | sort -k2)
    echo
    echo "== ldd quarrel.bin (here)"
    ldd "$B/quarrel.bin"
} > "$B/MANIFEST.txt"

size=$(du -sb "$B" | cut -f1)
log "bundle: $B, $((size / 1024 / 1024)) MiB:"
(cd "$B" && ls -la . lib)
# the device carry is 64 MiB with the tree (~17 MiB) and build-gpu/llama-src.tar.xz (~2 MiB); 45 MiB since
# session 9 (the exact-mode kernels); ~30 MiB since session 14 (the CLI against libquarrel.so: kernels once;
# libquarrel_dev.so since issue 33); 46 MiB since 2026-11-29 (tree ~18 MiB: 64 MiB holds both)
if [ "$size" -gt $((46 * 1024 * 1024)) ]; then
    echo "ERROR: the bundle is $((size / 1024 / 1024)) MiB, over the 46 MiB budget" >&2
    exit 1
fi

# self-check here (no GPU): the wrapper runs, --backend auto falls back to the CPU with one line,
# --backend cuda fails with a clear error
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$B/quarrel" version
"$B/quarrel" synth --arch llama --preset tiny -o "$tmp/tiny.gguf" > /dev/null 2>&1
"$B/quarrel" run -m "$tmp/tiny.gguf" -p "hello" -n 4 --temp 0 --backend auto > /dev/null 2> "$tmp/auto.err" ||
    { cat "$tmp/auto.err"; echo "ERROR: run --backend auto failed" >&2; exit 1; }
log "run --backend auto, stderr: $(grep -c . "$tmp/auto.err") line(s): $(head -1 "$tmp/auto.err")"
if [ -z "$(command -v nvidia-smi)" ] || ! nvidia-smi > /dev/null 2>&1; then
    if "$B/quarrel" run -m "$tmp/tiny.gguf" -p "hello" -n 4 --backend cuda > /dev/null 2> "$tmp/cuda.err"; then
        echo "ERROR: run --backend cuda succeeded without a GPU" >&2
        exit 1
    fi
    log "run --backend cuda without a GPU fails as it should: $(head -1 "$tmp/cuda.err")"
fi

if [ "${NO_LLAMA:-0}" != 1 ]; then
    if [ -f "$BUILD/llama-src.tar.xz" ] && [ "$BUILD/llama-src.tar.xz" -nt scripts/llama_src_bundle.sh ]; then
        log "llama-src.tar.xz is up to date"
    else
        OUT_DIR=$BUILD scripts/llama_src_bundle.sh
    fi
fi
log "carry to the device: $B $BUILD/llama-src.tar.xz"
