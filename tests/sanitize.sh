#!/usr/bin/env bash
# Builds hakmem and its tests with a clang sanitizer in a separate build tree
# and runs them (the hak_ API variants: the sanitizer runtime keeps the
# standard malloc names).
#   thread:    test_stress_hak (8 threads x 300k ops) and test_threads_hak
#              (200 churn threads, no forks: TSan does not support fork from
#              a multi-threaded process well) under ThreadSanitizer
#   undefined: test_api_hak, test_stress_hak (8 x 500k) and test_threads_hak
#              (full) under UBSan with -fno-sanitize-recover=all
# No suppressions: a finding in hakmem is a failure.
# Usage: sanitize.sh thread|undefined SOURCE_DIR BUILD_DIR [CC]
set -eu
KIND=${1:?kind}
SRC=${2:?source dir}
BUILD=${3:?build dir}
CC=${4:-clang}
JOBS=$(nproc 2>/dev/null || echo 2)

case $KIND in
  thread) EXTRA="" ;;
  undefined) EXTRA="-fno-sanitize-recover=all" ;;
  *) echo "sanitize.sh: unknown kind $KIND"; exit 2 ;;
esac

echo "sanitize: configuring $BUILD ($KIND)"
cmake -S "$SRC" -B "$BUILD" -DCMAKE_C_COMPILER="$CC" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHAKMEM_SANITIZE="$KIND" -DHAKMEM_BUILD_BENCH=OFF -DHAKMEM_BUILD_TESTS=ON \
  -DCMAKE_C_FLAGS="$EXTRA" >"$BUILD.configure.log" 2>&1 || { cat "$BUILD.configure.log"; exit 1; }
echo "sanitize: building"
cmake --build "$BUILD" -j "$JOBS" --target test_api_hak test_stress_hak test_threads_hak >"$BUILD.build.log" 2>&1 ||
  { tail -50 "$BUILD.build.log"; exit 1; }

# ThreadSanitizer needs a memory layout it knows; with high ASLR entropy it
# may fail ("unexpected memory mapping"): retry without randomisation.
run() {
  local out rc=0
  out=$("$@" 2>&1) || rc=$?
  if [ $rc -ne 0 ] && grep -q "unexpected memory mapping\|FATAL: ThreadSanitizer" <<<"$out" && command -v setarch >/dev/null; then
    echo "sanitize: retrying under setarch -R (TSan memory layout)"
    rc=0
    out=$(setarch "$(uname -m)" -R "$@" 2>&1) || rc=$?
  fi
  printf '%s\n' "$out" | tail -40
  if [ $rc -ne 0 ]; then echo "sanitize: $KIND: $(basename "$1") FAILED (rc $rc)"; exit 1; fi
}

export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
if [ -f "$SRC/tests/tsan.supp" ]; then TSAN_OPTIONS="$TSAN_OPTIONS:suppressions=$SRC/tests/tsan.supp"; fi

case $KIND in
  thread)
    run "$BUILD/tests/test_stress_hak" 8 300000 1
    run "$BUILD/tests/test_threads_hak" 200 0
    ;;
  undefined)
    run "$BUILD/tests/test_api_hak"
    run "$BUILD/tests/test_stress_hak" 8 500000 1
    run "$BUILD/tests/test_threads_hak" 1000 50
    ;;
esac
echo "sanitize: $KIND: OK"
