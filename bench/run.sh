#!/usr/bin/env bash
# bench/run.sh - run every workload under hakmem and each installed peer
# allocator (glibc, mimalloc, jemalloc, tcmalloc), switched by LD_PRELOAD,
# interleaved (A B C D, A B C D, ...), and write bench/results/latest.{md,csv,png}
# and phases.png.  The phases workload also runs hakmem's learning variants
# (weights 0 and 100, each strategy pinned), set by environment variables.
#
#   bench/run.sh --quick          1 round, small sizes, 0.25 s phases (< 1 minute)
#   bench/run.sh --full           5 rounds (phases: 3 rounds of 1 s phases), reference sizes (appends history.md)
#   bench/run.sh --scale          3 rounds of the threaded workloads at 4, 8 and 16 threads (a many-core machine)
#   options: --rounds N  --build DIR (default: build)  --out DIR (default: bench/results)
#            --only "larson memory ..."  (workload names)   --no-fastpath
#
# Workloads come from BUILD/bench/ (built by CMake); if they are missing they
# are compiled here with cc.  Progress goes to stderr, one line per run.
set -u -o pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODE=quick ROUNDS= BUILD=$ROOT/build OUT=$ROOT/bench/results ONLY= FASTPATH=1
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
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$ROUNDS" ] || case $MODE in full) ROUNDS=5 ;; scale) ROUNDS=3 ;; *) ROUNDS=1 ;; esac
BIN=$BUILD/bench
mkdir -p "$OUT"
WORKLOADS="larson random_mixed mid_large_mt memory cross_thread realloc large fastpath phases"
# hakmem's learner reads these; the runner sets them per configuration (below),
# so that plain "hakmem" means the defaults whatever the calling shell exports.
unset HAKMEM_LEARN HAKMEM_LEARN_PIN HAKMEM_LEARN_WEIGHT PHASES_TRIM_IDLE

# ---- workloads: build them with cc if CMake has not -------------------------
for w in $WORKLOADS; do
  if [ ! -x "$BIN/$w" ] || [ "$ROOT/bench/$w.c" -nt "$BIN/$w" ] || [ "$ROOT/bench/bench.h" -nt "$BIN/$w" ]; then
    mkdir -p "$BIN"
    echo "run.sh: compiling $w with cc" >&2
    cc -std=gnu11 -O2 -Wall -fno-builtin-malloc -fno-builtin-free -fno-builtin-realloc -fno-builtin-calloc \
      -o "$BIN/$w" "$ROOT/bench/$w.c" -pthread -ldl -lm || exit 1
  fi
done

# Snapshot the binaries (and below, libhakmem.so): a rebuild of build/ while
# this runs must neither break the run nor mix two versions in one table.
TMP=$(mktemp -d)
trap '[ -n "${KEEP_TMP:-}" ] || rm -rf "$TMP"' EXIT
mkdir -p "$TMP/bin"
for w in $WORKLOADS; do cp "$BIN/$w" "$TMP/bin/$w" || exit 1; done
BIN=$TMP/bin
HAKMEM_LIB= SECURE_LIB=
[ -e "$BUILD/libhakmem.so" ] && cp -L "$BUILD/libhakmem.so" "$TMP/libhakmem.so" && HAKMEM_LIB=$TMP/libhakmem.so
[ -e "$BUILD/libhakmem-secure.so" ] && cp -L "$BUILD/libhakmem-secure.so" "$TMP/libhakmem-secure.so" &&
  SECURE_LIB=$TMP/libhakmem-secure.so

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
# passed through env) and the workloads it runs: all, "phases" only, or every
# workload but phases ("-phases").
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
  case ${SCOPES[$1]} in all) return 0 ;; -*) [ "-$2" != "${SCOPES[$1]}" ] ;; *) [ "$2" = "${SCOPES[$1]}" ] ;; esac
}
add_alloc hakmem "$HAKMEM_LIB" "$BUILD/libhakmem.so not built"
add_alloc hakmem-secure "$SECURE_LIB" "$BUILD/libhakmem-secure.so not built (-DHAKMEM_SECURE=ON)" "" -phases
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
# full mode gives it 3 rounds (about 3.5 minutes), not 5.
if [ $MODE = full ]; then
  CASES=(
    "larson|1 thr, 8-1024 B, 1 s|seconds=1 threads=1 min=8 max=1024 chunks=1000 rounds=100 seed=1"
    "larson|2 thr, 8-1024 B, 1 s|seconds=1 threads=2 min=8 max=1024 chunks=1000 rounds=100 seed=1"
    "random_mixed|1 thr, 16-1024 B, 2048 slots|threads=1 slots=2048 steps=5000000 min=16 max=1024 seed=1"
    "random_mixed|2 thr, 16-1024 B, 2048 slots|threads=2 slots=2048 steps=5000000 min=16 max=1024 seed=1"
    "mid_large_mt|4 thr, 8-32 KiB, 256 slots, 60k cycles|threads=4 cycles=60000 slots=256 seed=1"
    "mid_large_mt|1 thr, 8-32 KiB, 256 slots, 600k cycles|threads=1 cycles=600000 slots=256 seed=1"
    "mid_large_mt|2 thr, 8-32 KiB, 256 slots, 300k cycles|threads=2 cycles=300000 slots=256 seed=1"
    "memory|1M x 16 B|count=1000000 size=16 settle_ms=1000"
    "memory|10M x 16 B|count=10000000 size=16 settle_ms=1000"
    "memory|100k x 1 KiB|count=100000 size=1024 settle_ms=1000"
    "memory|churn 5 x 1 GiB, 16 B-4 MiB|size=16 max=4194304 total_mb=1024 rounds=5 settle_ms=1000"
    "cross_thread|1 pair, 16-1024 B|pairs=1 blocks=5000000 min=16 max=1024 ring=1024 seed=1"
    "cross_thread|2 pairs, 16-1024 B|pairs=2 blocks=5000000 min=16 max=1024 ring=1024 seed=1"
    "realloc|8 objects to 1 MiB|objects=8 target=1048576 reps=20 seed=1"
    "large|64 KiB-64 MiB, 8 slots|iters=1000 slots=8 min=65536 max=67108864 seed=1"
    "phases|6 phases x 1 s|phase=1.0 seed=1|3")
  FP_N1=1000 FP_N2=21000
elif [ $MODE = scale ]; then # the threaded cases at more threads (cross_thread: threads / 2 pairs; mid_large_mt
  # runs 300k cycles, not 60k: on a 16-core VM, 60k-cycle runs (30-50 ms) spread over 3x)
  CASES=()
  for t in 4 8 16; do CASES+=("larson|$t thr, 8-1024 B, 1 s|seconds=1 threads=$t min=8 max=1024 chunks=1000 rounds=100 seed=1"); done
  for t in 4 8 16; do CASES+=("random_mixed|$t thr, 16-1024 B, 2048 slots|threads=$t slots=2048 steps=5000000 min=16 max=1024 seed=1"); done
  for t in 4 8 16; do CASES+=("mid_large_mt|$t thr, 8-32 KiB, 256 slots, 300k cycles|threads=$t cycles=300000 slots=256 seed=1"); done
  for t in 4 8 16; do CASES+=("cross_thread|$((t / 2)) pairs, 16-1024 B|pairs=$((t / 2)) blocks=5000000 min=16 max=1024 ring=1024 seed=1"); done
  FASTPATH=0
else # quick: same shapes, smaller counts (same parameters as the CTest quick forms)
  CASES=(
    "larson|4 thr, 8-1024 B, 0.5 s|seconds=0.5 threads=4 min=8 max=1024 chunks=1000 rounds=100 seed=1"
    "random_mixed|4 thr, 16-1024 B, 2048 slots|threads=4 slots=2048 steps=2000000 min=16 max=1024 seed=1"
    "mid_large_mt|4 thr, 8-32 KiB, 256 slots, 60k cycles|threads=4 cycles=60000 slots=256 seed=1"
    "memory|1M x 16 B|count=1000000 size=16 settle_ms=0"
    "cross_thread|2 pairs, 16-1024 B|pairs=2 blocks=2000000 min=16 max=1024 ring=1024 seed=1"
    "realloc|8 objects to 1 MiB|objects=8 target=1048576 reps=4 seed=1"
    "large|64 KiB-64 MiB, 8 slots|iters=100 slots=8 min=65536 max=67108864 seed=1"
    "phases|6 phases x 0.25 s|phase=0.25 seed=1")
  FP_N1=200 FP_N2=2200
fi
if [ -n "$ONLY" ]; then
  KEEP=()
  for c in "${CASES[@]}"; do [[ " $ONLY " == *" ${c%%|*} "* ]] && KEEP+=("$c"); done
  CASES=("${KEEP[@]}")
  [[ " $ONLY " == *" fastpath "* ]] || FASTPATH=0
fi

CSV=$OUT/latest.csv
echo "mode,round,workload,case,allocator,status,exit,peak_rss_kib,wall_s,result,env" >"$CSV"
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
T0=$(date +%s)
for r in $(seq 1 "$ROUNDS"); do
  for c in "${CASES[@]}"; do
    IFS='|' read -r w label args maxr <<<"$c"
    [ -z "$maxr" ] || [ "$r" -le "$maxr" ] || continue
    for i in "${!ALLOCS[@]}"; do
      runs_on "$i" "$w" || continue
      a=${ALLOCS[$i]} lib=${LIBS[$i]} envs=${ENVS[$i]} n=$((n + 1))
      t1=$(date +%s.%N)
      # shellcheck disable=SC2086
      /usr/bin/time -f %M -o "$TMP/rss" timeout 300 env $envs LD_PRELOAD="$lib" "$BIN/$w" $args >"$TMP/out" 2>"$TMP/err"
      rc=$?
      wall=$(awk -v a="$t1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
      res=$(grep '^bench=' "$TMP/out" | tail -1)
      rss=$(tail -1 "$TMP/rss" 2>/dev/null)
      [[ $rss =~ ^[0-9]+$ ]] || rss=
      if [ $rc -eq 0 ] && [[ $res == *check=ok* ]]; then st=ok
      elif [ $rc -eq 124 ]; then st=TIMEOUT
      else st=FAIL; fi
      [ $st = ok ] || res="$res $(tail -c 300 "$TMP/err" | tr '\n"' ' _')"
      echo "$MODE,$r,$w,$(csvq "$label"),$a,$st,$rc,$rss,$(printf %.2f "$wall"),$(csvq "$res"),$(csvq "$envs")" >>"$CSV"
      fig=$(grep -o 'ops_per_sec=[0-9.]*\|overhead_pct=[-0-9.]*\|total_sys_ms=[0-9.]*\|total_xs=[-0-9.]*' <<<"$res" | head -2 | tr '\n' ' ')
      printf '[%3d/%d] round %d %-13s %-13s %-7s %s rss=%sK %.1fs\n' $n $total "$r" "$w" "$a" "$st" "$fig" "$rss" "$wall" >&2
    done
  done
done

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
        echo "$MODE,1,fastpath,$(csvq "$s B"),$a,$st,,,,$(csvq "$res")," >>"$CSV"
        printf '[fastpath] %-9s %5s B  %s instructions per malloc+free pair, %s in the allocator\n' "$a" "$s" "${ipp:-FAIL}" "${app:-?}" >&2
      done
    done
  fi
fi

# ---- report --------------------------------------------------------------------
MACHINE="nproc $(nproc); $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1); kernel $(uname -r); $(date -u '+%Y-%m-%d %H:%M UTC')"
VERSIONS="$(dpkg-query -W -f '${Package} ${Version}, ' libc6 libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4 2>/dev/null)hakmem $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet HEAD -- src include 2>/dev/null || echo '+dirty')"
SKIPS=$(IFS=';'; echo "${SKIPPED[*]:-}")
python3 "$ROOT/bench/report.py" --csv "$CSV" --out "$OUT" --tmp "$TMP" --mode $MODE --rounds "$ROUNDS" \
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
