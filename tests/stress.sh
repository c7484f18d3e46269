#!/usr/bin/env bash
# make stress: repeated multi-threaded runs, each one checked; stability is
# counted, not claimed (DESIGN.md, hard rule 6).
#
#   larson       build/bench/larson under LD_PRELOAD=libhakmem.so, 4 threads,
#                seed = run number; passes when it exits 0 and prints check=ok
#   test_stress  build/tests/test_stress (linked with libhakmem), 8 threads x
#                500,000 ops, seed = run number; passes when it exits 0 and
#                its summary line says no case failed ("1 passed, 0 failed")
#
# The two run back to back, STRESS_RUNS (default 20) times each. Each run has a
# time limit (STRESS_TIMEOUT seconds, default 120) so a hang counts as a failure.
# Prints one PASS/FAIL line per run and a final count:
#   stress: larson 20/20 passed, test_stress 20/20 passed
# and exits non-zero if any run failed.
#
# Usage: tests/stress.sh [BUILD_DIR]     (default: build)
# Environment: STRESS_RUNS, STRESS_TIMEOUT, STRESS_LARSON_ARGS, STRESS_TEST_ARGS
set -euo pipefail

BUILD=${1:-build}
RUNS=${STRESS_RUNS:-20}
TMO=${STRESS_TIMEOUT:-120}
LARSON_ARGS=${STRESS_LARSON_ARGS:-seconds=2 threads=4 chunks=1000 rounds=100 min=8 max=1024}
TEST_ARGS=${STRESS_TEST_ARGS:-8 500000}

LIB=$(readlink -f "$BUILD/libhakmem.so" || true)
LARSON=$BUILD/bench/larson
STRESS=$BUILD/tests/test_stress
for f in "$LIB" "$LARSON" "$STRESS"; do
  [ -n "$f" ] && [ -x "$f" -o -f "$f" ] || { echo "stress: FAIL: $f not built (run make first)"; exit 2; }
done
[[ $RUNS =~ ^[0-9]+$ ]] && [ "$RUNS" -gt 0 ] || { echo "stress: FAIL: STRESS_RUNS must be a positive integer"; exit 2; }

LOG=$(mktemp -d "${TMPDIR:-/tmp}/hakmem-stress.XXXXXX")
trap 'rm -rf "$LOG"' EXIT

larson_ok=0
stress_ok=0
t_start=$SECONDS
for ((i = 1; i <= RUNS; i++)); do
  # --- larson ---
  t0=$SECONDS
  rc=0
  # shellcheck disable=SC2086
  timeout -k 5 "$TMO" env LD_PRELOAD="$LIB" "$LARSON" $LARSON_ARGS seed="$i" >"$LOG/larson.out" 2>&1 || rc=$?
  if [ $rc -eq 0 ] && grep -q 'check=ok' "$LOG/larson.out" && ! grep -q 'check=FAIL' "$LOG/larson.out"; then
    larson_ok=$((larson_ok + 1))
    echo "stress: larson run $i/$RUNS PASS ($((SECONDS - t0)) s; $(grep -o 'ops_per_sec=[0-9]*' "$LOG/larson.out" | head -1))"
  else
    [ $rc -eq 124 ] && why="timed out after ${TMO}s" || why="rc $rc"
    echo "stress: larson run $i/$RUNS FAIL ($why); output:"
    tail -20 "$LOG/larson.out" | sed 's/^/    /'
    cp "$LOG/larson.out" "${TMPDIR:-/tmp}/hakmem-stress-larson-$i.log" 2>/dev/null || true
  fi

  # --- test_stress ---
  t0=$SECONDS
  rc=0
  # shellcheck disable=SC2086
  timeout -k 5 "$TMO" "$STRESS" $TEST_ARGS "$i" >"$LOG/stress.out" 2>&1 || rc=$?
  if [ $rc -eq 0 ] && grep -Eq '^[1-9][0-9]* passed, 0 failed$' "$LOG/stress.out"; then
    stress_ok=$((stress_ok + 1))
    echo "stress: test_stress run $i/$RUNS PASS ($((SECONDS - t0)) s)"
  else
    [ $rc -eq 124 ] && why="timed out after ${TMO}s" || why="rc $rc"
    echo "stress: test_stress run $i/$RUNS FAIL ($why); output:"
    tail -20 "$LOG/stress.out" | sed 's/^/    /'
    cp "$LOG/stress.out" "${TMPDIR:-/tmp}/hakmem-stress-test_stress-$i.log" 2>/dev/null || true
  fi
done

echo "stress: total $((SECONDS - t_start)) s"
echo "stress: larson $larson_ok/$RUNS passed, test_stress $stress_ok/$RUNS passed"
if [ $larson_ok -ne "$RUNS" ] || [ $stress_ok -ne "$RUNS" ]; then
  echo "stress: FAIL"
  exit 1
fi
echo "stress: PASS"
