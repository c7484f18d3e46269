#!/usr/bin/env bash
# Builds the libFuzzer target tests/fuzz/fuzz_alloc.c with clang
# (-fsanitize=fuzzer,undefined, no UBSan recovery) together with the library
# sources (HAKMEM_SOURCES + src/alloc.c, read from the top-level
# CMakeLists.txt, so new sources are picked up) and runs it for SECONDS
# seconds, 2 jobs-free threads per input. Corpus in BUILD_DIR/corpus (kept
# between runs); a crash leaves BUILD_DIR/crash-* and fails.
#
# Usage: tests/fuzz/run.sh [SECONDS=60] [BUILD_DIR=build/fuzz] [CLANG=clang]
set -euo pipefail
SECS=${1:-${FUZZ_SECONDS:-60}}
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
OUT=${2:-$SRC/build/fuzz}
CLANG=${3:-${CLANG:-clang}}

command -v "$CLANG" >/dev/null || { echo "fuzz: FAIL: $CLANG not found (install clang and libclang-rt-14-dev)"; exit 1; }
mkdir -p "$OUT/corpus"
OUT=$(cd "$OUT" && pwd)

# HAKMEM_SOURCES from CMakeLists.txt: the words src/*.c between "set(HAKMEM_SOURCES" and ")".
mapfile -t SOURCES < <(awk '/^set\(HAKMEM_SOURCES/{on=1} on{print} on&&/\)/{exit}' "$SRC/CMakeLists.txt" |
  grep -o 'src/[A-Za-z0-9_./-]*\.c')
[ ${#SOURCES[@]} -gt 0 ] || { echo "fuzz: FAIL: could not read HAKMEM_SOURCES from CMakeLists.txt"; exit 1; }
SOURCES+=(src/alloc.c)

BIN=$OUT/fuzz_alloc
echo "fuzz: building $BIN with $CLANG (${#SOURCES[@]} library sources)"
# HAKMEM_DEBUG=1: the allocator's cheap internal assertions are on.
if ! (cd "$SRC" && "$CLANG" -std=gnu11 -O1 -g -fsanitize=fuzzer,undefined -fno-sanitize-recover=undefined \
      -fno-omit-frame-pointer -ftls-model=initial-exec -fno-builtin-malloc -fno-builtin-free \
      -fno-builtin-calloc -fno-builtin-realloc -DHAKMEM_DEBUG=1 -Iinclude -Isrc \
      "${SOURCES[@]}" tests/fuzz/fuzz_alloc.c -lpthread -o "$BIN") >"$OUT/build.log" 2>&1; then
  cat "$OUT/build.log"
  if grep -q 'libclang_rt.fuzzer\|fsanitize=fuzzer' "$OUT/build.log"; then
    echo "fuzz: FAIL: this clang has no libFuzzer runtime (Debian: install libclang-rt-14-dev)"
  fi
  echo "fuzz: FAIL: build failed"
  exit 1
fi

echo "fuzz: running for ${SECS}s (corpus $OUT/corpus)"
rc=0
(cd "$OUT" && UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 "$BIN" -max_total_time="$SECS" -timeout=20 \
  -max_len=2048 -rss_limit_mb=4096 -print_final_stats=1 corpus >"$OUT/fuzz.log" 2>&1) || rc=$?
grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb)' "$OUT/fuzz.log" || true
if [ $rc -ne 0 ]; then
  echo "fuzz: FAIL (rc $rc); log $OUT/fuzz.log:"
  grep -E 'fuzz_alloc:|ERROR|runtime error|SUMMARY|Test unit written|deadly signal' "$OUT/fuzz.log" | head -20
  tail -30 "$OUT/fuzz.log"
  exit 1
fi
echo "fuzz: PASS ($(grep -o 'stat::number_of_executed_units: [0-9]*' "$OUT/fuzz.log" | grep -o '[0-9]*$') inputs in ${SECS}s)"
