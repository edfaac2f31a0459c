#!/usr/bin/env bash
# Builds every libFuzzer target listed in tests/fuzz/CMakeLists.txt with clang (in build-fuzz) and
# runs each for SECONDS (default 60) on its seed corpus, printing the exec count and crash count.
# Findings go to build-fuzz/artifacts/NAME/, the growing corpus to build-fuzz/corpus/NAME/.
#
# usage: tests/fuzz/run.sh [SECONDS] [TARGET ...]      (exit 1 when any target crashed)
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_EACH=${1:-60}
shift || true
BUILD=${FUZZ_BUILD:-build-fuzz}
JOBS=${JOBS:-2}

cmake -S . -B "$BUILD" -DCMAKE_C_COMPILER=clang -DQUARREL_FUZZ=ON -DQUARREL_TESTS=OFF -DQUARREL_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null

failed=0
while read -r name seeds; do
  [ -n "$name" ] || continue
  if [ $# -gt 0 ] && [[ " $* " != *" $name "* ]]; then continue; fi
  cmake --build "$BUILD" --target "$name" -j "$JOBS" >/dev/null
  corpus="$BUILD/corpus/$name"
  artifacts="$BUILD/artifacts/$name"
  log="$BUILD/$name.log"
  mkdir -p "$corpus" "$artifacts"
  rc=0
  dict=()  # optional token dictionary tests/fuzz/NAME.dict
  if [ -f "tests/fuzz/$name.dict" ]; then dict=(-dict="tests/fuzz/$name.dict"); fi
  # shellcheck disable=SC2086  # seeds is a space-separated list of folders
  "$BUILD/$name" "${dict[@]}" -max_total_time="$SECONDS_EACH" -print_final_stats=1 -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$artifacts/" "$corpus" $seeds >"$log" 2>&1 || rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)
  crashes=$(find "$artifacts" -type f | wc -l)
  printf '%-20s %12s execs in %ss, %s crash file(s), exit %s, corpus %s files (log: %s)\n' \
    "$name" "${execs:-?}" "$SECONDS_EACH" "$crashes" "$rc" "$(find "$corpus" -type f | wc -l)" "$log"
  if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then failed=1; fi
done <"$BUILD/fuzz_targets.txt"
exit $failed
