#!/bin/sh
# check_public_exports.sh HEADER LIB — fails unless the shared library LIB exports exactly the functions
# that HEADER (include/quarrel.h) declares with QR_API: `nm -D --defined-only LIB` may list no other name
# of ours or of a library linked in (an internal name exported is a name programs can come to depend on),
# and must list every QR_API name (a public function missing from the library breaks the programs that
# call it). The names are read from the header with sed, independently of the version script CMake
# generates from it. Exit 0: exact; 1: a difference (listed); 77: skipped (no nm).
# (ctest test_public_exports_catches runs it on libquarrel_dev.so, which exports everything, and expects 1.)
set -u
header=${1:?usage: check_public_exports.sh HEADER LIB}
lib=${2:?usage: check_public_exports.sh HEADER LIB}
if ! command -v nm >/dev/null 2>&1; then
    echo "SKIP: nm (binutils) not found on PATH; cannot list the symbols of $lib"
    exit 77
fi
[ -f "$header" ] || { echo "FAIL: $header does not exist"; exit 1; }
[ -f "$lib" ] || { echo "FAIL: $lib does not exist"; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# declared: every line that starts with QR_API, the identifier right before its first '('
sed -n 's/^QR_API [^(;]*[ *]\(qr_[a-z0-9_]*\)(.*/\1/p' "$header" | sort -u > "$tmp/declared"
[ -s "$tmp/declared" ] || { echo "FAIL: no QR_API declaration found in $header"; exit 1; }
# exported: defined dynamic symbols, version suffix stripped; the linker's own markers are not names of ours
nm -D --defined-only "$lib" | awk 'NF >= 3 { sub(/@.*/, "", $3); print $3 }' |
    grep -v -x -e '_init' -e '_fini' -e '_edata' -e '_end' -e '__bss_start' | sort -u > "$tmp/exported" ||
    { echo "FAIL: nm cannot read $lib"; exit 1; }
comm -13 "$tmp/declared" "$tmp/exported" > "$tmp/extra"
comm -23 "$tmp/declared" "$tmp/exported" > "$tmp/missing"
rc=0
if [ -s "$tmp/extra" ]; then
    echo "FAIL: $lib exports $(wc -l < "$tmp/extra") name(s) that $header does not declare QR_API, e.g.:"
    head -20 "$tmp/extra" | sed 's/^/  /'
    rc=1
fi
if [ -s "$tmp/missing" ]; then
    echo "FAIL: $lib does not export these QR_API functions of $header:"
    sed 's/^/  /' "$tmp/missing"
    rc=1
fi
[ $rc = 0 ] && echo "OK: $lib exports exactly the $(wc -l < "$tmp/declared") QR_API functions of $header"
exit $rc
