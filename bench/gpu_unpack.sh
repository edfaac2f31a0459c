# bench/gpu_unpack.sh — sourced by the bench/gpu_*.sh device scripts: unpacks the carried build-gpu/bundlexz/bundle.tar.xz
# into build-gpu/bundle unless that is already its contents. A warm device machine keeps the ignored build-gpu/bundle
# of the previous call, so "unpack when missing" ran a stale bundle (session 36: a serving A/B of two identical old
# builds); the xz's checksum is stamped in the unpacked tree instead, and a script that calls another unpacks once.
qr_gpu_unpack() {
    local xz=build-gpu/bundlexz/bundle.tar.xz sum
    [ -f "$xz" ] || { [ -d build-gpu/bundle ] && return 0; echo "gpu_unpack: no $xz (carry build-gpu/bundlexz)" >&2; return 1; }
    sum=$(cksum < "$xz")
    [ -f build-gpu/bundle/.xz_sum ] && [ "$(cat build-gpu/bundle/.xz_sum)" = "$sum" ] && return 0
    rm -rf build-gpu/bundle && mkdir -p build-gpu && tar -C build-gpu -xJf "$xz" && echo "$sum" > build-gpu/bundle/.xz_sum
}
qr_gpu_unpack
Q=$PWD/build-gpu/bundle/quarrel # the unpacked quarrel

# M = the synth mistral-7b Q4_K_M the serving / decode benchmarks share (made once a machine; $1: a log file).
qr_gpu_mistral() {
    M=/tmp/qr_models/mistral-7b-Q4_K_M.gguf
    mkdir -p /tmp/qr_models
    [ -f $M ] || { "$Q" synth --arch llama --preset mistral-7b --type Q4_K_M -t "$(nproc)" -o $M.tmp > "${1:-/dev/null}" 2>&1 &&
        mv $M.tmp $M; }
}
