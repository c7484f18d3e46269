#!/usr/bin/env bash
# The statistics report and the heap profiler, one case per CTest test,
# through tests/report_probe.c under LD_PRELOAD:
#   stats_json     HAKMEM_STATS=json: one object at exit (to HAKMEM_STATS_FILE,
#                  %p expanded) and from hak_stats_json, read by python3 -m
#                  json.tool; the resident parts add up to the total within
#                  10 %, and the live part holds what the probe holds (with
#                  HAKMEM_STATS and without); the Large and huge rows count
#                  live what the probe holds in such blocks, after threads
#                  in turn allocated and freed others (every free counted)
#   stats_closed   the report at exit reaches stderr when the program closed it
#   stats_file     a HAKMEM_STATS_FILE that cannot be opened: one line, no crash
#   profile_sites  five functions hold 64..4 MiB: the profile ranks them, each
#                  within 10 % of what it holds; the profile at exit is written
#   profile_pprof  the same profile through google-pprof --text
#   profile_off    hak_profile_dump says EINVAL when profiling is off
#   profile_sampled  nearly every block sampled, used and freed every way
#                  (realloc, calloc, aligned, another thread's free): contents
#                  and usable sizes hold, and the profile is empty after
#
# Usage: report.sh CASE REPORT_PROBE LIBHAKMEM (the profile cases also run
# under libhakmem-profile.so, whose sampled blocks lie elsewhere)
set -u
CASE=${1:?case}
PROBE=${2:?path of report_probe}
LIB=${3:?path of libhakmem.so}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hakmem-report.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
unset HAKMEM_STATS HAKMEM_STATS_FILE HAKMEM_PROFILE HAKMEM_PROFILE_RATE
failed=0
fail() { echo "report: $CASE: FAIL: $*"; failed=1; }
run() { LD_PRELOAD=$LIB "$@"; }

# check_json FILE EXPECTED_LIVE [EXPECTED_LARGE EXPECTED_HUGE]: valid JSON
# whose resident parts add up; its Large and huge rows count those live.
check_json() {
  python3 -m json.tool "$1" >/dev/null || { fail "$(basename "$1") is not JSON:"; head -c 600 "$1"; echo; return; }
  python3 - "$1" "$2" "${3:-0}" "${4:-0}" <<'PY' || failed=1
import json, sys
d = json.load(open(sys.argv[1]))
r, live = d["resident"], int(sys.argv[2])
parts = [k for k in r if k not in ("total", "sum")]
s = sum(r[k] for k in parts)
bad = []
if s != r["sum"]: bad.append(f"sum {r['sum']} is not the sum of the parts {s}")
if not 0.9 * r["total"] <= s <= 1.1 * r["total"]: bad.append(f"parts add up to {s}, the total is {r['total']}")
if live and not 0.9 * live <= r["live"] <= 1.1 * live + (4 << 20): bad.append(f"live {r['live']}, the probe holds {live}")
for k in ("counters", "syscalls", "classes", "strategy", "version"):
    if k not in d: bad.append(f"no {k}")
for name, held in (("large", int(sys.argv[3])), ("huge", int(sys.argv[4]))):
    row = [c for c in d.get("classes", []) if c["class"] == name]
    got = row[0]["live_bytes"] if row else 0
    if held and not held <= got <= 1.1 * held: bad.append(f"{name} live {got} counted, the probe holds {held}")
for b in bad: print(f"report: FAIL: {sys.argv[1]}: {b}")
print("  resident: " + ", ".join(f"{k} {r[k] >> 10} KiB" for k in r))
sys.exit(1 if bad else 0)
PY
}

case $CASE in
stats_json)
  HAKMEM_STATS=json HAKMEM_STATS_FILE="$WORK/exit.%p.json" run "$PROBE" json >"$WORK/call.json" 2>"$WORK/err" ||
    fail "exit status $?"
  live=$(sed -n 's/^live //p' "$WORK/err")
  large=$(sed -n 's/^large //p' "$WORK/err")
  huge=$(sed -n 's/^huge //p' "$WORK/err")
  [ -n "$live" ] && [ -n "$large" ] && [ -n "$huge" ] || { fail "no live, large or huge line:"; cat "$WORK/err"; }
  check_json "$WORK/call.json" "${live:-0}" "${large:-0}" "${huge:-0}"
  exits=("$WORK"/exit.*.json)
  [ -f "${exits[0]}" ] || fail "no report at exit in HAKMEM_STATS_FILE"
  [ -f "${exits[0]}" ] && check_json "${exits[0]}" 0 "${large:-0}" "${huge:-0}"
  # without HAKMEM_STATS nothing counts blocks: the live part comes from the slabs
  run "$PROBE" json >"$WORK/call-uncounted.json" 2>"$WORK/err" || fail "exit status $?"
  check_json "$WORK/call-uncounted.json" "${live:-0}"
  ;;
stats_closed)
  HAKMEM_STATS=1 run "$PROBE" closed 2>"$WORK/err" || fail "exit status $?"
  grep -q '^hakmem statistics' "$WORK/err" || fail "no report after the program closed stderr"
  HAKMEM_STATS=json run "$PROBE" closed 2>"$WORK/err.json" || fail "exit status $?"
  check_json "$WORK/err.json" 0
  ;;
stats_file)
  HAKMEM_STATS=1 HAKMEM_STATS_FILE=/nonexistent/dir/stats run "$PROBE" closed 2>"$WORK/err" || fail "exit status $?"
  # stderr is closed by the probe; the line goes nowhere, but nothing breaks
  HAKMEM_STATS=1 HAKMEM_STATS_FILE=/nonexistent/dir/stats run /bin/true 2>"$WORK/err" || fail "exit status $?"
  [ "$(wc -l <"$WORK/err")" -eq 1 ] && grep -q '^hakmem: cannot open HAKMEM_STATS_FILE /nonexistent/dir/stats' "$WORK/err" ||
    { fail "not one line on stderr:"; cat "$WORK/err"; }
  ;;
profile_sites | profile_pprof)
  HAKMEM_PROFILE="$WORK/exit.heap" HAKMEM_PROFILE_RATE=4096 run "$PROBE" sites "$WORK/p.heap" || fail "exit status $?"
  [ -s "$WORK/p.heap" ] && [ -s "$WORK/p.heap.folded" ] || fail "no profile, or no .folded beside it"
  head -1 "$WORK/p.heap" | grep -qE '^heap profile: +[0-9]+: +[0-9]+ \[ *[0-9]+: +[0-9]+\] @ heapprofile$' ||
    fail "not a heap profile: $(head -1 "$WORK/p.heap")"
  grep -q '^MAPPED_LIBRARIES:$' "$WORK/p.heap" || fail "no MAPPED_LIBRARIES"
  [ -s "$WORK/exit.heap" ] || fail "no profile at exit"
  if [ "$CASE" = profile_sites ]; then
    # Per site function: the bytes of the stacks through it (.folded).
    for m in 64 32 16 8 4; do
      awk -v f="site_${m}mib" '{ n = split($0, w, " "); if (index(w[1], f)) b += w[n] } END { print f, b + 0 }' \
        "$WORK/p.heap.folded"
    done >"$WORK/measured"
  else
    command -v google-pprof >/dev/null || { echo "report: google-pprof not installed: skipped"; exit 77; }
    google-pprof --text --nodecount=100 "$PROBE" "$WORK/p.heap" >"$WORK/pprof" 2>"$WORK/pprof.err" ||
      { fail "google-pprof failed:"; cat "$WORK/pprof.err"; }
    # "MB flat% sum% MB cum% name": the cumulative MB of each site function
    awk '$6 ~ /^site_[0-9]+mib$/ { print $6, $4 * 1048576 }' "$WORK/pprof" >"$WORK/measured"
  fi
  # Each holds n blocks of its size and the array of their n pointers.
  python3 - "$WORK/measured" <<'PY' || failed=1
import sys
MiB = 1 << 20
sizes = {64: 1000, 32: 100, 16: 64 * 1024, 8: 48, 4: 4 * MiB}
got = {l.split()[0]: float(l.split()[1]) for l in open(sys.argv[1]) if l.strip()}
bad, order = [], []
for m, size in sizes.items():
    n = m * MiB // size
    want, have = n * size + n * 8, got.get(f"site_{m}mib", 0)
    order.append(have)
    ok = abs(have - want) <= 0.10 * want
    print(f"  site_{m}mib: {have / MiB:7.2f} MiB estimated, {want / MiB:7.2f} MiB held" + ("" if ok else "  <- off by more than 10 %"))
    if not ok: bad.append(f"site_{m}mib")
if order != sorted(order, reverse=True): bad.append("ranking")
if bad: print("report: FAIL: " + ", ".join(bad))
sys.exit(1 if bad else 0)
PY
  ;;
profile_sampled)
  HAKMEM_PROFILE="$WORK/exit.heap" HAKMEM_PROFILE_RATE=64 run "$PROBE" sampled "$WORK/p.heap" || fail "exit status $?"
  grep -q sampled_blocks "$WORK/p.heap.folded" &&
    fail "freed blocks left in the profile: $(grep sampled_blocks "$WORK/p.heap.folded" | head -3)"
  # sampled all the same: the allocated estimate counts the probe's 4,096 blocks and more
  n=$(head -1 "$WORK/p.heap" | sed -n 's/^heap profile: *[0-9]*: *[0-9]* \[ *\([0-9]*\):.*/\1/p')
  [ "${n:-0}" -ge 4096 ] || fail "the profile counts ${n:-no} blocks allocated: $(head -1 "$WORK/p.heap")"
  ;;
profile_off)
  out=$(run "$PROBE" dump) || fail "exit status $?"
  [ "$out" = 22 ] || fail "hak_profile_dump(NULL) without HAKMEM_PROFILE returned $out, not EINVAL (22)"
  ;;
*)
  echo "report.sh: unknown case $CASE"; exit 2 ;;
esac
[ $failed = 0 ] && echo "report: $CASE: ok"
exit $failed
