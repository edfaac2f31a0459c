#!/bin/sh
# check_exports.sh LIB — fails when the shared library LIB defines a name that the C library (or libm)
# defines: such a definition interposes libc for every program that links LIB (issue 32 item 10: a
# pthread_attr_setstacksize that raised every thread's stack to 1 MiB). Compares LIB's defined dynamic
# symbols with those of the libc.so.6 and libm.so.6 it loads (found with ldd), plus a fixed list of common
# libc names in case ldd finds none. Exit 0: clean; 1: a libc name is defined; 77: skipped (no nm).
set -u
lib=${1:?usage: check_exports.sh LIB}
if ! command -v nm >/dev/null 2>&1; then
    echo "SKIP: nm (binutils) not found on PATH; cannot list the symbols of $lib"
    exit 77
fi
[ -f "$lib" ] || { echo "FAIL: $lib does not exist"; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# defined dynamic symbols, version suffix (@@GLIBC_2.34) stripped
defined() { nm -D --defined-only "$1" | awk 'NF >= 3 { sub(/@.*/, "", $3); print $3 }' | sort -u; }
defined "$lib" > "$tmp/lib" || { echo "FAIL: nm cannot read $lib"; exit 1; }
# common libc names, checked even when the libc lookup below finds nothing
cat > "$tmp/libc" <<'NAMES'
pthread_attr_setstacksize
pthread_attr_init
pthread_create
pthread_join
pthread_mutex_lock
pthread_mutex_unlock
pthread_cond_wait
malloc
calloc
realloc
free
aligned_alloc
posix_memalign
memcpy
memset
strlen
printf
fprintf
open
close
read
write
mmap
munmap
dlopen
dlsym
exit
abort
NAMES
if command -v ldd >/dev/null 2>&1; then
    for so in $(ldd "$lib" 2>/dev/null | awk '$1 ~ /^lib(c|m|pthread|dl)\.so/ && $3 ~ /^\// { print $3 }'); do
        echo "checking against $so"
        defined "$so" >> "$tmp/libc"
    done
fi
sort -u "$tmp/libc" -o "$tmp/libc"
comm -12 "$tmp/lib" "$tmp/libc" > "$tmp/both"
if [ -s "$tmp/both" ]; then
    echo "FAIL: $lib defines C library names (it would interpose them for every program that links it):"
    sed 's/^/  /' "$tmp/both"
    exit 1
fi
echo "OK: $lib defines $(wc -l < "$tmp/lib") dynamic symbols, none of them a C library name"
