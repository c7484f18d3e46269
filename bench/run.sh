#!/usr/bin/env bash
# bench/run.sh - run every workload under hakmem and each installed peer
# allocator (glibc, mimalloc, jemalloc, tcmalloc), switched by LD_PRELOAD,
# interleaved (A B C D, A B C D, ...), and write bench/results/latest.{md,csv,png}
# and phases.png.  The phases workload also runs hakmem's learning variants
# (weights 0 and 100, each strategy pinned), set by environment variables.
#
#   bench/run.sh --quick          1 round of each workload's quick form (CMake's list), 0.25 s phases
#   bench/run.sh --full           5 rounds at reference sizes, real programs, syscall counts (appends history.md)
#   bench/run.sh --scale          3 rounds of the threaded workloads at 4, 8 and 16 threads (a many-core machine)
#   options: --rounds N  --build DIR (default: build)  --out DIR (default: bench/results)
#            --only "larson memory ..."  (workload names)   --no-fastpath
#            --syscalls / --no-syscalls  (the strace pass; default: in --full only)
#            --baseline LIB  (also run LIB, an earlier build of hakmem, as hakmem-base: the report
#                             gives its ratio to hakmem on each throughput row)
#            --quiet-wait S  (before a timed run, wait up to a minute for other programs to go
#                             quiet, S s in all; default 900, quick 0; each run's others_pct
#                             is in latest.csv)
#
# The workloads and their quick forms come from the CMake build: BUILD/bench/
# holds the programs and workloads.txt, their list (bench/CMakeLists.txt
# writes it; build with `make`).  Progress goes to stderr, one line per run.
set -u -o pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODE=quick ROUNDS= BUILD=$ROOT/build OUT=$ROOT/bench/results ONLY= FASTPATH=1 SYSCALLS= QUIET_WAIT= BASELINE=
while [ $# -gt 0 ]; do
  case $1 in
    --quick) MODE=quick ;;
    --full) MODE=full ;;
    --scale) MODE=scale ;;
    --rounds) ROUNDS=$2; shift ;;
    --build) BUILD=$(cd "$2" && pwd); shift ;;
    --out) OUT=$2; shift ;;
    --only) ONLY=$2; shift ;;
    --no-fastpath) FASTPATH=0 ;;
    --syscalls) SYSCALLS=1 ;;
    --no-syscalls) SYSCALLS=0 ;;
    --quiet-wait) QUIET_WAIT=$2; shift ;;
    --baseline) BASELINE=$(realpath "$2"); shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$ROUNDS" ] || case $MODE in full) ROUNDS=5 ;; scale) ROUNDS=3 ;; *) ROUNDS=1 ;; esac
[ -n "$SYSCALLS" ] || case $MODE in full) SYSCALLS=1 ;; *) SYSCALLS=0 ;; esac
[ -n "$QUIET_WAIT" ] || case $MODE in quick) QUIET_WAIT=0 ;; *) QUIET_WAIT=900 ;; esac
BIN=$BUILD/bench
LIST=$BIN/workloads.txt
if [ ! -r "$LIST" ]; then
  echo "run.sh: $LIST not found: build the workloads first (make, or cmake -S . -B build && cmake --build build)" >&2
  exit 2
fi
WORKLOADS=$(cut -d'|' -f1 "$LIST" | tr '\n' ' ')
for w in $WORKLOADS; do
  [ -x "$BIN/$w" ] || { echo "run.sh: $BIN/$w missing: rebuild (make)" >&2; exit 2; }
done
mkdir -p "$OUT"
# hakmem's learner reads these; the runner sets them per configuration (below),
# so that plain "hakmem" means the defaults whatever the calling shell exports.
unset HAKMEM_LEARN HAKMEM_LEARN_PIN HAKMEM_LEARN_WEIGHT PHASES_TRIM_IDLE BENCH_PRELOAD BENCH_STRACE

# Snapshot the binaries (and below, libhakmem.so): a rebuild of build/ while
# this runs must neither break the run nor mix two versions in one table.
TMP=$(mktemp -d)
trap '[ -n "${KEEP_TMP:-}" ] || rm -rf "$TMP"' EXIT
mkdir -p "$TMP/bin"
for w in $WORKLOADS; do cp "$BIN/$w" "$TMP/bin/$w" || exit 1; done
BIN=$TMP/bin
HAKMEM_LIB= SECURE_LIB= PROFILE_LIB=
[ -e "$BUILD/libhakmem.so" ] && cp -L "$BUILD/libhakmem.so" "$TMP/libhakmem.so" && HAKMEM_LIB=$TMP/libhakmem.so
[ -e "$BUILD/libhakmem-secure.so" ] && cp -L "$BUILD/libhakmem-secure.so" "$TMP/libhakmem-secure.so" &&
  SECURE_LIB=$TMP/libhakmem-secure.so
[ -e "$BUILD/libhakmem-profile.so" ] && cp -L "$BUILD/libhakmem-profile.so" "$TMP/libhakmem-profile.so" &&
  PROFILE_LIB=$TMP/libhakmem-profile.so

# ---- allocators -----------------------------------------------------------
find_lib() { # soname, then fixed Debian paths
  local so=$1 p
  p=$(ldconfig -p 2>/dev/null | awk -v so="$so" '$1 == so && /x86-64|x86_64|64bit/ {print $NF; exit}')
  [ -z "$p" ] && for d in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib64 /usr/lib /usr/local/lib; do
    [ -e "$d/$so" ] && { p=$d/$so; break; }
  done
  echo "$p"
}
# One configuration per entry: name, LD_PRELOAD, environment (VAR=value words,
# passed through env) and the workloads it runs: all, one workload ("phases"),
# or every workload but those named ("-phases -real").
ALLOCS=() LIBS=() ENVS=() SCOPES=() SKIPPED=()
add_alloc() { # name path-or-empty(glibc) reason-if-missing [env [scope]]
  local name=$1 lib=$2
  if [ "$name" != glibc ]; then
    if [ -z "$lib" ] || [ ! -e "$lib" ]; then SKIPPED+=("$name ($3)"); return; fi
    if LD_PRELOAD=$lib "$BIN/fastpath" size=8 iters=1 2>&1 | grep -q 'cannot be preloaded\|error while loading'; then
      SKIPPED+=("$name ($lib cannot be preloaded)"); return
    fi
  fi
  ALLOCS+=("$name") LIBS+=("$lib") ENVS+=("${4:-}") SCOPES+=("${5:-all}")
}
runs_on() { # allocator index, workload: does that configuration run it?
  case ${SCOPES[$1]} in all) return 0 ;; -*) [[ " ${SCOPES[$1]} " != *" -$2 "* ]] ;; *) [ "$2" = "${SCOPES[$1]}" ] ;; esac
}
add_alloc hakmem "$HAKMEM_LIB" "$BUILD/libhakmem.so not built"
# An earlier build, to tell what a change costs on every row (real programs
# and phases left out: their figures are priced in the rows' own sections).
# It runs next to hakmem in each round, so that their ratio spans seconds of
# the machine's drift, not a round's.
[ -n "$BASELINE" ] && add_alloc hakmem-base "$BASELINE" "$BASELINE not found" "" "-phases -real"
# The scale mode compares hakmem with its peers only: the hardened and the
# profiling builds' prices are measured in the other modes.
if [ $MODE != scale ]; then
  # The hardened build's price is measured on the small-block workloads; the
  # real programs, random_sizes (its time is in hakmem's large-block paths, the
  # same in both builds) and the syscall pass leave it out.
  add_alloc hakmem-secure "$SECURE_LIB" "$BUILD/libhakmem-secure.so not built (-DHAKMEM_SECURE=ON)" "" \
    "-phases -real -random_sizes"
  # The heap profiler's price at its default rate: the profiling library (what
  # `hakmem run --profile` preloads) with HAKMEM_PROFILE set, on the same rows
  # and random_sizes.
  add_alloc hakmem-profile "$PROFILE_LIB" "$BUILD/libhakmem-profile.so not built" "HAKMEM_PROFILE=$TMP/profile.%p.heap" \
    "-phases -real"
fi
# hakmem's learned Large/Huge strategy, for the phases workload only: learning
# with all weight on memory (w0) or on time (w100), and each strategy pinned
# (0 default, 1 speed, 2 lean, 3 memory).  Plain hakmem learns at weight 50;
# hakmem-told learns so too, and the program calls malloc_trim(0) entering
# each idle phase: what knowing the boundary would leave to pay there.
if [ "${ALLOCS[0]:-}" = hakmem ]; then
  for w in 0 100; do add_alloc hakmem-w$w "$HAKMEM_LIB" "" "HAKMEM_LEARN=1 HAKMEM_LEARN_WEIGHT=$w" phases; done
  for k in 0 1 2 3; do add_alloc hakmem-pin$k "$HAKMEM_LIB" "" "HAKMEM_LEARN=0 HAKMEM_LEARN_PIN=$k" phases; done
  add_alloc hakmem-told "$HAKMEM_LIB" "" "PHASES_TRIM_IDLE=1" phases
fi
add_alloc glibc "" ""
add_alloc mimalloc "$(find_lib libmimalloc.so.2)" "apt-get install libmimalloc-dev"
add_alloc jemalloc "$(find_lib libjemalloc.so.2)" "apt-get install libjemalloc-dev"
add_alloc tcmalloc "$(find_lib libtcmalloc_minimal.so.4)" "apt-get install libtcmalloc-minimal4"
echo "run.sh: $MODE mode, $ROUNDS round(s); allocators: ${ALLOCS[*]}" >&2
for s in "${SKIPPED[@]}"; do echo "run.sh: skipped $s" >&2; done

# ---- cases: "workload|case label|arguments[|at most N rounds]" ----------------
# phases: six phases of 1 s under 12 configurations is 72 s a round, so the
# full mode gives it 3 rounds, not 5; so do the slowest of the others (the
# memory cases, which wait a second each, large, the heap sizes, the real
# programs): what they measure varies less from run to run than the time.
# random_sizes cases labelled "heap ..." form the heap-size scaling table:
# the same workload at three live sizes (report.py finds them by that label).
if [ $MODE = full ]; then
  RS="min=16 max=262144 seed=1"
  CASES=(
    "larson|1 thr, 8-1024 B, 1 s|seconds=1 threads=1 min=8 max=1024 chunks=1000 rounds=100 seed=1"
    "larson|2 thr, 8-1024 B, 1 s|seconds=1 threads=2 min=8 max=1024 chunks=1000 rounds=100 seed=1"
    "larson|16 thr, 8-1024 B, 2 s|seconds=2 threads=16 min=8 max=1024 chunks=1000 rounds=100 seed=1"
    "random_mixed|1 thr, 16-1024 B, 2048 slots|threads=1 slots=2048 steps=5000000 min=16 max=1024 seed=1"
    "random_mixed|2 thr, 16-1024 B, 2048 slots|threads=2 slots=2048 steps=5000000 min=16 max=1024 seed=1"
    "mid_large_mt|4 thr, 8-32 KiB, 256 slots, 60k cycles|threads=4 cycles=60000 slots=256 seed=1"
    "mid_large_mt|1 thr, 8-32 KiB, 256 slots, 600k cycles|threads=1 cycles=600000 slots=256 seed=1"
    "mid_large_mt|2 thr, 8-32 KiB, 256 slots, 300k cycles|threads=2 cycles=300000 slots=256 seed=1"
    "mid_large_mt|2 thr, 8-32 KiB, 256 slots, 3M cycles|threads=2 cycles=3000000 slots=256 seed=1"
    "memory|1M x 16 B|count=1000000 size=16 settle_ms=1000|3"
    "memory|10M x 16 B|count=10000000 size=16 settle_ms=1000|3"
    "memory|100k x 1 KiB|count=100000 size=1024 settle_ms=1000|3"
    "memory|churn 5 x 1 GiB, 16 B-4 MiB|size=16 max=4194304 total_mb=1024 rounds=5 settle_ms=1000|3"
    "memory|256 threads x 4 blocks, 16-2000 B|threads=256 count=4 size=16 max=2000 settle_ms=1000|3"
    "cross_thread|1 pair, 16-1024 B|pairs=1 blocks=5000000 min=16 max=1024 ring=1024 seed=1"
    "cross_thread|2 pairs, 16-1024 B|pairs=2 blocks=5000000 min=16 max=1024 ring=1024 seed=1"
    "realloc|8 objects to 1 MiB|objects=8 target=1048576 reps=20 seed=1"
    "realloc|8 objects to 200 KB, 100 rounds|objects=8 target=200000 reps=100 seed=1"
    "large|64 KiB-64 MiB, 8 slots|iters=1000 slots=8 min=65536 max=67108864 seed=1|3"
    "random_sizes|1 thr, 16 B-256 KiB, 2048 slots|threads=1 slots=2048 ops=100000 $RS"
    "random_sizes|2 thr, 16 B-256 KiB, 2048 slots|threads=2 slots=2048 ops=100000 $RS"
    "random_sizes|2 thr, 256-768 KiB, 8 slots|threads=2 slots=8 ops=200000 min=262144 max=786432 seed=1"
    "random_sizes|2 thr, 4-12 MiB, 8 slots|threads=2 slots=8 ops=100000 min=4194304 max=12582912 seed=1"
    "random_sizes|1 thr, one 6 MiB buffer again and again|threads=1 slots=1 ops=300000 min=6291456 max=6291456 seed=1"
    "random_sizes|2 thr, one 5-7 MiB buffer each|threads=2 slots=1 ops=200000 min=5242880 max=7340032 seed=1"
    "random_sizes|1 thr, 4 KiB-aligned 32-64 KiB, 16 slots|threads=1 slots=16 ops=2000000 min=32768 max=65536 align=4096 seed=1"
    "random_sizes|heap 16 MiB, 1 thr|threads=1 live_mb=16 ops=50000 $RS|3"
    "random_sizes|heap 256 MiB, 1 thr|threads=1 live_mb=256 ops=50000 $RS|3"
    "random_sizes|heap 4 GiB, 1 thr|threads=1 live_mb=4096 ops=50000 $RS|3"
    "sparse_burst|64 x 256 KiB-8 MiB, 1/64 used, 200 bursts|bursts=200 blocks=64 min=262144 max=8388608 part=64 seed=1"
    "calloc_reuse|256 KiB-4 MiB, written whole|ops=1000 slots=4 min=262144 max=4194304 part=1 seed=1"
    "calloc_reuse|256 KiB-4 MiB, 1/64 written|ops=1000 slots=4 min=262144 max=4194304 part=64 seed=1"
    "prodcons|1 pair, 16-256 B, 10M blocks|blocks=10000000 min=16 max=256 ring=4096 batch=32 seed=1"
    "handoff|2 pairs, 64 B, 2 x 1000 batches of 4096|pairs=2 batches=1000 per=4096 depth=100 min=64 max=64 seed=1"
    "shared_slots|1 thr, 16-256 B, 65536 slots|threads=1 ops=4000000 slots=65536 min=16 max=256 seed=1"
    "shared_slots|2 thr, 16-256 B, 65536 slots|threads=2 ops=2000000 slots=65536 min=16 max=256 seed=1"
    "shared_slots|8 thr, 32-256 KiB, 512 slots|threads=8 ops=25000 slots=512 min=32768 max=262144 seed=1"
    "exchange|2 thr, 16 B-16 KiB, 1 in 8 traded|threads=2 ops=3000000 window=4000 slots=8192 hand=8 seed=1"
    "false_sharing|scratch, 2 thr, 8 B|mode=scratch threads=2 iters=4000 writes=10000 size=8"
    "false_sharing|thrash, 2 thr, 8 B|mode=thrash threads=2 iters=4000 writes=10000 size=8"
    "bignum|1 thr, 2-64 limbs, 256 live|threads=1 live=256 ops=2000000 seed=1"
    "bignum|2 thr, 2-64 limbs, 256 live|threads=2 live=256 ops=2000000 seed=1"
    "thread_churn|100 rounds x 8 thr|rounds=100 threads=8 blocks=2000 handed=200 min=16 max=1024 seed=1"
    "thread_churn|400 rounds x 2 thr|rounds=400 threads=2 blocks=2000 handed=200 min=16 max=1024 seed=1"
    "thread_churn|30 rounds x 8 thr, 16 B-256 KiB|rounds=30 threads=8 blocks=300 handed=150 min=16 max=262144 seed=1"
    "thread_churn|200 rounds x 4 thr, 16 of 8-512 KiB|rounds=200 threads=4 blocks=16 handed=4 min=8192 max=524288 seed=1"
    "slow_leak|16 B-4 KiB, 1 in 64 kept, 3M ops|ops=3000000 window=4096 keep=64 min=16 max=4096 seed=1"
    "batch|1 thr, 1600 x 64 B|threads=1 count=1600 size=64 batches=20000 seed=1"
    "batch|1 thr, 1600 x 4 KiB|threads=1 count=1600 size=4096 batches=3000 seed=1"
    "batch|2 thr, 1600 x 1 KiB|threads=2 count=1600 size=1024 batches=5000 seed=1"
    "batch|1 thr, 200 x 40000 B|threads=1 count=200 size=40000 batches=10000 seed=1"
    "batch|1 thr, 200 x 1 MiB|threads=1 count=200 size=1048576 batches=500 seed=1"
    "batch|1 thr, 1M x 48 B freed in random order|threads=1 count=1000000 size=48 batches=10 shuffle=1 seed=1"
    "swap_rounds|50 rounds x 2 thr|rounds=50 threads=2 allocs=25000 retains=500 slots=1000 seed=1"
    "swap_rounds|50 rounds x 4 thr|rounds=50 threads=4 allocs=25000 retains=500 slots=1000 seed=1"
    "size_walk|2 thr, 1-4000 B, 90 % handed over|threads=2 rounds=2000 count=1000 min=1 max=4000 step=13 hand=90 seed=1"
    "real|gcc -O2, 1000 functions|prog=gcc|3"
    "real|sqlite3, 200k rows, 2 indexes|prog=sqlite|3"
    "real|lua5.4, 1M-entry table|prog=lua|3"
    "real|perl, 250k-key hash|prog=perl|3"
    "real|python3, 400k-key dict|prog=python|3"
    "real|redis, 4 x 150k requests|prog=redis|3"
    "phases|6 phases x 1 s|phase=1.0 seed=1|3")
  if [[ " $WORKLOADS " == *" cxx_objects "* ]]; then # built where a C++ compiler is installed
    CASES+=("cxx_objects|1 thr, std::map of 4096 records|threads=1 live=4096 ops=2000000 seed=1"
            "cxx_objects|2 thr, std::map of 4096 records|threads=2 live=4096 ops=2000000 seed=1")
  fi
  FP_N1=1000 FP_N2=21000
elif [ $MODE = scale ]; then # the threaded cases at more threads (cross_thread: threads / 2 pairs; mid_large_mt
  # runs 300k cycles, not 60k: on a 16-core VM, 60k-cycle runs spread widely)
  CASES=()
  for t in 4 8 16; do CASES+=("larson|$t thr, 8-1024 B, 1 s|seconds=1 threads=$t min=8 max=1024 chunks=1000 rounds=100 seed=1"); done
  for t in 4 8 16; do CASES+=("random_mixed|$t thr, 16-1024 B, 2048 slots|threads=$t slots=2048 steps=5000000 min=16 max=1024 seed=1"); done
  for t in 4 8 16; do CASES+=("mid_large_mt|$t thr, 8-32 KiB, 256 slots, 300k cycles|threads=$t cycles=300000 slots=256 seed=1"); done
  for t in 4 8 16; do CASES+=("cross_thread|$((t / 2)) pairs, 16-1024 B|pairs=$((t / 2)) blocks=5000000 min=16 max=1024 ring=1024 seed=1"); done
  for t in 4 8 16; do CASES+=("shared_slots|$t thr, 16-256 B, 65536 slots|threads=$t ops=$((4000000 / t)) slots=65536 min=16 max=256 seed=1"); done
  for t in 4 8 16; do CASES+=("exchange|$t thr, 16 B-16 KiB, 1 in 8 traded|threads=$t ops=$((6000000 / t)) window=4000 slots=8192 hand=8 seed=1"); done
  for t in 4 8 16; do CASES+=("bignum|$t thr, 2-64 limbs, 256 live|threads=$t live=256 ops=2000000 seed=1"); done
  for t in 4 8 16; do CASES+=("swap_rounds|50 rounds x $t thr|rounds=50 threads=$t allocs=25000 retains=500 slots=1000 seed=1"); done
  for t in 4 8 16; do CASES+=("thread_churn|100 rounds x $t thr|rounds=100 threads=$t blocks=2000 handed=200 min=16 max=1024 seed=1"); done
  if [[ " $WORKLOADS " == *" cxx_objects "* ]]; then
    for t in 4 8 16; do CASES+=("cxx_objects|$t thr, std::map of 4096 records|threads=$t live=4096 ops=1000000 seed=1"); done
  fi
  FASTPATH=0 SYSCALLS=0
else # quick: each workload's quick form, as CMake lists it (the CTest forms)
  CASES=()
  while IFS='|' read -r w label args; do
    [ -n "$label" ] && CASES+=("$w|$label|$args")
  done <"$LIST"
  FP_N1=200 FP_N2=2200
fi
for c in "${CASES[@]}"; do
  [[ " $WORKLOADS " == *" ${c%%|*} "* ]] || { echo "run.sh: case for ${c%%|*}, which $LIST does not list" >&2; exit 2; }
done
if [ -n "$ONLY" ]; then
  KEEP=()
  for c in "${CASES[@]}"; do [[ " $ONLY " == *" ${c%%|*} "* ]] && KEEP+=("$c"); done
  CASES=("${KEEP[@]}")
  [[ " $ONLY " == *" fastpath "* ]] || FASTPATH=0
fi

# Real programs: inputs and reference outputs made once, outside the timing;
# a program that is not installed drops its case.
export BENCH_REAL_DIR=$TMP/real
KEEP=()
for c in "${CASES[@]}"; do
  IFS='|' read -r w label args maxr <<<"$c"
  if [ "$w" = real ]; then
    # shellcheck disable=SC2086
    "$BIN/real" $args prepare=1 2>"$TMP/err"
    case $? in
      0) ;;
      3) SKIPPED+=("real: $label ($(tail -1 "$TMP/err"))"); echo "run.sh: skipped real: $label" >&2; continue ;;
      *) echo "run.sh: preparing real $args failed: $(tail -3 "$TMP/err")" >&2; exit 1 ;;
    esac
  fi
  KEEP+=("$c")
done
CASES=("${KEEP[@]}")

CSV=$OUT/latest.csv
echo "mode,round,workload,case,allocator,status,exit,peak_rss_kib,wall_s,result,env,others_pct" >"$CSV"
csvq() { printf '"%s"' "${1//\"/\"\"}"; }

# ---- timed runs, interleaved -------------------------------------------------
total=0 n=0
for r in $(seq 1 "$ROUNDS"); do
  for c in "${CASES[@]}"; do
    IFS='|' read -r w label args maxr <<<"$c"
    [ -z "$maxr" ] || [ "$r" -le "$maxr" ] || continue
    for i in "${!ALLOCS[@]}"; do runs_on "$i" "$w" && total=$((total + 1)); done
  done
done
# CPU seconds the whole machine has been busy (all processors, /proc/stat)
busy_s() { awk -v hz="$(getconf CLK_TCK)" '$1 == "cpu" { printf "%.2f\n", ($2 + $3 + $4 + $7 + $8 + $9) / hz; exit }' /proc/stat; }
# CPU seconds of this script's finished children: bash's `times` (second
# line), run in this shell (a command substitution's would count its own)
ours_s() { awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, t, "m"); s += t[1] * 60 + t[2] } printf "%.3f\n", s }' "$TMP/times"; }
# others_pct <busy0> <ours0> <seconds>: what other programs took of all
# processors since then, in %; `times >"$TMP/times"` must have run just before,
# in this shell
others_pct() {
  awk -v b="$(busy_s)" -v b0="$1" -v o="$(ours_s)" -v o0="$2" -v w="$3" -v n="$(nproc)" \
    'BEGIN { x = w > 0 ? 100 * ((b - b0) - (o - o0)) / (w * n) : 0; printf "%.0f", x < 0 ? 0 : x }'
}
# Before a timed run, wait (at most a minute, and QUIET_WAIT seconds over the
# whole run) until other programs leave the processors alone for a moment: a
# run that shares them with a build or a test suite measures that, not the
# allocator.
quiet_gate() {
  local waited=0 b0 o0 l1 l5 l15 run
  # nothing running at this instant but this shell (reading with a builtin):
  # go on without sampling
  read -r l1 l5 l15 run _ </proc/loadavg
  [ "${run%/*}" -le 1 ] && return
  while [ "$waited" -lt 60 ] && [ "$QUIET_WAIT" -gt 0 ]; do
    times >"$TMP/times"
    b0=$(busy_s) o0=$(ours_s)
    sleep 0.3
    times >"$TMP/times"
    [ "$(others_pct "$b0" "$o0" 0.3)" -le 10 ] && return
    [ "$waited" = 0 ] && echo "run.sh: waiting for other programs to leave the processors (${QUIET_WAIT} s left to wait)" >&2
    sleep 2
    waited=$((waited + 3)) QUIET_WAIT=$((QUIET_WAIT - 3))
  done
}
times >"$TMP/times"
T0=$(date +%s) BUSY0=$(busy_s) OURS0=$(ours_s)
# Even rounds run the allocators in reverse order: a place in the order that
# costs (the first run after another workload's, a drift within the round)
# falls on each of them alike.
ORDER=("${!ALLOCS[@]}") REVERSED=()
for ((i = ${#ORDER[@]} - 1; i >= 0; i--)); do REVERSED+=("${ORDER[$i]}"); done
for r in $(seq 1 "$ROUNDS"); do
  for c in "${CASES[@]}"; do
    IFS='|' read -r w label args maxr <<<"$c"
    [ -z "$maxr" ] || [ "$r" -le "$maxr" ] || continue
    if ((r % 2)); then idx=("${ORDER[@]}"); else idx=("${REVERSED[@]}"); fi
    for i in "${idx[@]}"; do
      runs_on "$i" "$w" || continue
      a=${ALLOCS[$i]} lib=${LIBS[$i]} envs=${ENVS[$i]} n=$((n + 1))
      quiet_gate
      times >"$TMP/times"
      b1=$(busy_s) o1=$(ours_s) t1=$(date +%s.%N)
      # shellcheck disable=SC2086
      /usr/bin/time -f %M -o "$TMP/rss" timeout 300 env $envs LD_PRELOAD="$lib" "$BIN/$w" $args >"$TMP/out" 2>"$TMP/err"
      rc=$?
      wall=$(awk -v a="$t1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
      times >"$TMP/times"
      others=$(others_pct "$b1" "$o1" "$wall")
      res=$(grep '^bench=' "$TMP/out" | tail -1)
      rss=$(tail -1 "$TMP/rss" 2>/dev/null)
      [[ $rss =~ ^[0-9]+$ ]] || rss=
      if [ $rc -eq 0 ] && [[ $res == *check=ok* ]]; then st=ok
      elif [ $rc -eq 124 ]; then st=TIMEOUT
      else st=FAIL; fi
      [ $st = ok ] || res="$res $(tail -c 300 "$TMP/err" | tr '\n"' ' _')"
      echo "$MODE,$r,$w,$(csvq "$label"),$a,$st,$rc,$rss,$(printf %.2f "$wall"),$(csvq "$res"),$(csvq "$envs"),$others" >>"$CSV"
      fig=$(grep -o 'ops_per_sec=[0-9.]*\|overhead_pct=[-0-9.]*\|total_sys_ms=[0-9.]*\|total_xs=[-0-9.]*' <<<"$res" | head -2 | tr '\n' ' ')
      printf '[%3d/%d] round %d %-13s %-13s %-7s %s rss=%sK %.1fs others=%s%%\n' $n $total "$r" "$w" "$a" "$st" "$fig" "$rss" "$wall" "$others" >&2
    done
  done
done

# ---- system calls: each case once per allocator under strace, untimed -------
# Counts of the memory-management calls (mmap, munmap, madvise, mremap,
# mprotect, brk), all threads and children together.  --seccomp-bpf stops the
# tracee only at those calls, so yield-heavy workloads are not slowed by the
# others.  Real programs trace only the measured program (real.sh does it);
# phases configurations and hakmem-secure are left out.  Workloads that run
# for a set time (larson, phases) count more calls when they run faster.
SYSCSV=$OUT/latest-syscalls.csv
rm -f "$SYSCSV"
if [ "$SYSCALLS" = 1 ] && [ $MODE != scale ]; then
  if ! command -v strace >/dev/null; then
    echo "run.sh: strace not installed: no syscall counts" >&2
  else
    echo "mode,workload,case,allocator,status,result" >"$SYSCSV"
    sb=
    strace -f --seccomp-bpf -o /dev/null true 2>/dev/null && sb=--seccomp-bpf
    for c in "${CASES[@]}"; do
      IFS='|' read -r w label args maxr <<<"$c"
      for i in "${!ALLOCS[@]}"; do
        a=${ALLOCS[$i]} lib=${LIBS[$i]}
        runs_on "$i" "$w" && [ -z "${ENVS[$i]}" ] && [ "$a" != hakmem-secure ] || continue
        st=$TMP/strace
        rm -f "$st"
        # shellcheck disable=SC2086
        if [ "$w" = real ]; then
          BENCH_STRACE=$st timeout 300 env LD_PRELOAD="$lib" "$BIN/$w" $args >"$TMP/out" 2>"$TMP/err"
        else
          timeout 300 strace -f $sb -c -o "$st" -e trace=memory ${lib:+-E "LD_PRELOAD=$lib"} "$BIN/$w" $args \
            >"$TMP/out" 2>"$TMP/err"
        fi
        rc=$?
        if [ $rc -eq 0 ] && grep -q 'check=ok' "$TMP/out" && [ -s "$st" ]; then
          # strace -c rows: "% time, seconds, usecs/call, calls, [errors,] syscall"
          res=$(awk '$NF ~ /^(mmap|munmap|madvise|mremap|mprotect|brk|mincore)$/ { printf "%s=%s ", $NF, $4 }' "$st")
          stat=ok
        else
          res= stat=FAIL
        fi
        echo "$MODE,$w,$(csvq "$label"),$a,$stat,$(csvq "bench=syscalls $res")" >>"$SYSCSV"
        printf '[syscalls] %-13s %-9s %-40s %s %s\n' "$w" "$a" "$label" "$stat" "$res" >&2
      done
    done
  fi
fi

# ---- fastpath instruction counts under callgrind (deterministic: parallel) ----
if [ $FASTPATH = 1 ]; then
  if ! command -v valgrind >/dev/null; then
    echo "run.sh: valgrind not installed: no fastpath instruction counts" >&2
  else
    : >"$TMP/jobs"
    for i in "${!ALLOCS[@]}"; do
      runs_on "$i" fastpath || continue
      for s in 32 512 8192; do
        for it in $FP_N1 $FP_N2; do echo "$i $s $it" >>"$TMP/jobs"; done
      done
    done
    export BIN TMP
    fp_job() {
      local i=$1 s=$2 it=$3 lib=$4
      local f=$TMP/fp.$i.$s.$it
      LD_PRELOAD="$lib" valgrind --tool=callgrind --trace-children=no --callgrind-out-file="$f.cg" \
        "$BIN/fastpath" size="$s" iters="$it" >"$f" 2>&1
      echo "rc=$?" >>"$f"
      # main's own instructions (the loop, with the PLT jumps callgrind folds
      # into the caller): what is left of the count is the allocator's
      echo "main_ir=$(callgrind_annotate --inclusive=no "$f.cg" 2>/dev/null | awk '/:main \[/ { gsub(",", "", $1); print $1; exit }')" >>"$f"
      rm -f "$f.cg"
    }
    export -f fp_job
    # instructions per pair between the two runs' counts
    per_pair() { awk -v a="$1" -v b="$2" -v n=$((64 * (FP_N2 - FP_N1))) 'BEGIN { printf "%.1f", (b - a) / n }'; }
    while read -r i s it; do printf '%s\0%s\0%s\0%s\0' "$i" "$s" "$it" "${LIBS[$i]}"; done <"$TMP/jobs" |
      xargs -0 -n 4 -P "$(nproc)" bash -c 'fp_job "$@"' _
    for i in "${!ALLOCS[@]}"; do
      runs_on "$i" fastpath || continue
      a=${ALLOCS[$i]}
      for s in 32 512 8192; do
        f1=$TMP/fp.$i.$s.$FP_N1 f2=$TMP/fp.$i.$s.$FP_N2
        c1=$(grep -o 'Collected : [0-9]*' "$f1" | grep -o '[0-9]*$') c2=$(grep -o 'Collected : [0-9]*' "$f2" | grep -o '[0-9]*$')
        if [ -n "$c1" ] && [ -n "$c2" ] && grep -q check=ok "$f1" && grep -q check=ok "$f2"; then
          ipp=$(per_pair "$c1" "$c2") st=ok
          m1=$(sed -n 's/^main_ir=\([0-9][0-9]*\)$/\1/p' "$f1") m2=$(sed -n 's/^main_ir=\([0-9][0-9]*\)$/\1/p' "$f2")
          app=
          [ -n "$m1" ] && [ -n "$m2" ] && app=$(per_pair $((c1 - m1)) $((c2 - m2)))
        else
          ipp= app= st=FAIL
        fi
        # the preload must apply inside valgrind: malloc must resolve into the preloaded library
        lib=${LIBS[$i]}
        if [ $st = ok ] && [ -n "$lib" ] && ! grep -q "malloc_from=$(basename "$lib")" "$f2"; then
          st=FAIL; echo "run.sh: $a: LD_PRELOAD did not apply under valgrind ($(grep -o 'malloc_from=[^ ]*' "$f2"))" >&2
        fi
        res="bench=fastpath-callgrind size=$s iters1=$FP_N1 iters2=$FP_N2 collected1=$c1 collected2=$c2 instr_per_pair=$ipp alloc_per_pair=${app:-n/a} $(grep -o 'malloc_from=[^ ]*' "$f2")"
        echo "$MODE,1,fastpath,$(csvq "$s B"),$a,$st,,,,$(csvq "$res"),," >>"$CSV"
        printf '[fastpath] %-9s %5s B  %s instructions per malloc+free pair, %s in the allocator\n' "$a" "$s" "${ipp:-FAIL}" "${app:-?}" >&2
      done
    done
  fi
fi

# ---- report --------------------------------------------------------------------
# The machine's busy time less this run's own: what other programs took from
# the run, as a share of all processors over its wall time (the date stays
# last: history.md takes it from there).
times >"$TMP/times"
OTHERS=$(others_pct "$BUSY0" "$OURS0" $(( $(date +%s) - T0 )))
MACHINE="nproc $(nproc); $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1); kernel $(uname -r); other programs used $OTHERS % of the processors during the run; $(date -u '+%Y-%m-%d %H:%M UTC')"
VERSIONS="$(dpkg-query -W -f '${Package} ${Version}, ' libc6 libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4 2>/dev/null)hakmem $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet HEAD -- src include 2>/dev/null || echo '+dirty')"
SKIPS=$(IFS=';'; echo "${SKIPPED[*]:-}")
python3 "$ROOT/bench/report.py" --csv "$CSV" --syscalls "$SYSCSV" --out "$OUT" --tmp "$TMP" --mode $MODE --rounds "$ROUNDS" \
  --machine "$MACHINE" --versions "$VERSIONS" --skipped "$SKIPS" --seconds $(( $(date +%s) - T0 )) || exit 1
if command -v gnuplot >/dev/null; then
  gnuplot "$TMP/latest.gp" || echo "run.sh: gnuplot failed" >&2
else
  echo "run.sh: gnuplot not installed: no chart" >&2
fi
echo "run.sh: wrote $OUT/latest.md, latest.csv and its charts (latest.png, phases.png) ($(( $(date +%s) - T0 )) s)" >&2
# A full run into the project's results also refreshes the table in the README.
if [ $MODE = full ] && [ "$OUT" = "$ROOT/bench/results" ]; then
  python3 "$ROOT/bench/report.py" --readme "$ROOT/README.md" --latest "$OUT/latest.md" &&
    echo "run.sh: README.md table updated" >&2
fi
grep -q ',\(FAIL\|TIMEOUT\),' "$CSV" && { echo "run.sh: some runs FAILED (see table)" >&2; exit 1; }
exit 0
