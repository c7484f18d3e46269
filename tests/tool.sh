#!/usr/bin/env bash
# The hakmem command (tools/), one case per CTest test:
#   options       `hakmem options` prints what hak_options_print prints
#   run           `hakmem run` sets the options and LD_PRELOAD, passes the
#                 exit status on, honours HAKMEM_LIBRARY
#   stats         `hakmem run --stats -- true` prints the statistics report
#   errors        each error: non-zero exit, one line on stderr, nothing on stdout
#   report        the summary of a synthetic heap profile, google-pprof hidden
#                 (and the google-pprof command line, through a stand-in)
#   report_pprof  the same profile through google-pprof, when it is installed
#
# Usage: tool.sh CASE HAKMEM LIBHAKMEM OPTIONS_HELPER
set -u
CASE=${1:?case}
TOOL=$(readlink -f "${2:?path of the hakmem command}")
LIB=${3:?path of libhakmem.so}
LIB=$(cd "$(dirname "$LIB")" && pwd -P)/$(basename "$LIB")
HELPER=${4:?path of tool_options}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hakmem-tool.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
unset HAKMEM_LIBRARY LD_PRELOAD
failed=0

fail() { echo "tool: $CASE: FAIL: $*"; failed=1; }

# expect_line FILE LINE: FILE holds LINE, whole.
expect_line() { grep -qxF -- "$2" "$1" || { fail "no line '$2' in $(basename "$1"):"; sed 's/^/  | /' "$1" | head -40; }; }

case $CASE in
options)
  export HAKMEM_PURGE_DELAY_MS=7 # values in effect as well as defaults
  "$TOOL" options >"$WORK/tool.out" 2>"$WORK/tool.err" || fail "exit status $?"
  "$HELPER" >"$WORK/api.out" || fail "tool_options: exit status $?"
  [ -s "$WORK/api.out" ] || fail "hak_options_print printed nothing"
  grep -qvE '^HAKMEM_[A-Z0-9_]+=' "$WORK/api.out" && fail "a line of hak_options_print is not HAKMEM_NAME=..."
  diff "$WORK/api.out" "$WORK/tool.out" >"$WORK/diff" || { fail "hakmem options differs from hak_options_print:"; cat "$WORK/diff"; }
  [ -s "$WORK/tool.err" ] && { fail "stderr:"; cat "$WORK/tool.err"; }
  expect_line "$WORK/tool.out" "$(grep '^HAKMEM_PURGE_DELAY_MS=' "$WORK/api.out")"
  grep -q '^HAKMEM_PURGE_DELAY_MS=7 ' "$WORK/tool.out" || fail "the value in effect is not the environment's"
  ;;
run)
  "$TOOL" run --set PURGE_DELAY_MS=0 -- env >"$WORK/env" || fail "exit status $?"
  expect_line "$WORK/env" "HAKMEM_PURGE_DELAY_MS=0"
  expect_line "$WORK/env" "LD_PRELOAD=$LIB"
  # Each option; a relative profile path made absolute; no "--" needed; an
  # LD_PRELOAD already set comes after the library.
  (cd "$WORK" && LD_PRELOAD=libm.so.6 "$TOOL" run --stats=json --profile=p.heap --set LEARN=0 \
    --set=LEARN_PIN=2 --profile q.heap env >"$WORK/env2") || fail "exit status $?"
  expect_line "$WORK/env2" "HAKMEM_STATS=json"
  expect_line "$WORK/env2" "HAKMEM_PROFILE=$WORK/q.heap"
  expect_line "$WORK/env2" "HAKMEM_LEARN=0"
  expect_line "$WORK/env2" "HAKMEM_LEARN_PIN=2"
  # --profile preloads the profiling library beside the default one, when built
  PLIB=$(dirname "$LIB")/libhakmem-profile.so
  [ -e "$PLIB" ] || PLIB=$LIB
  expect_line "$WORK/env2" "LD_PRELOAD=$PLIB:libm.so.6"
  "$TOOL" run --stats env | grep -qx "HAKMEM_STATS=1" || fail "--stats does not set HAKMEM_STATS=1"
  # Inside another run, the library is not preloaded twice.
  "$TOOL" run "$TOOL" run env | grep -qx "LD_PRELOAD=$LIB" || fail "a run inside a run preloads the library twice"
  "$TOOL" run --help | grep -q "^usage: hakmem" || fail "run --help: no help"
  # The library really is in the program: its malloc statistics are there.
  "$TOOL" run --set STATS=1 -- /bin/true 2>"$WORK/err" || fail "exit status $?"
  grep -q "^hakmem statistics" "$WORK/err" || fail "--set STATS=1: no statistics report"
  # The program's exit status and arguments.
  "$TOOL" run -- sh -c 'exit 7' x; rc=$?
  [ $rc -eq 7 ] || fail "exit status $rc, want the program's 7"
  [ "$("$TOOL" run printf '%s|' 'a b' '' c)" = "a b||c|" ] || fail "arguments not passed as given"
  # HAKMEM_LIBRARY names the library, as given.
  cp "$LIB" "$WORK/other.so"
  HAKMEM_LIBRARY=$WORK/other.so "$TOOL" run env | grep -qx "LD_PRELOAD=$WORK/other.so" ||
    fail "HAKMEM_LIBRARY is not the library preloaded"
  (cd "$WORK" && HAKMEM_LIBRARY=other.so "$TOOL" run env 2>/dev/null) | grep -qx "LD_PRELOAD=other.so" ||
    fail "a bare HAKMEM_LIBRARY name is not passed as it is"
  (cd "$WORK" && HAKMEM_LIBRARY=./other.so "$TOOL" run env) | grep -qx "LD_PRELOAD=$WORK/./other.so" ||
    fail "a relative HAKMEM_LIBRARY is not made absolute"
  # The command found through PATH and through a symbolic link.
  ln -s "$TOOL" "$WORK/hakmem"
  PATH=$WORK:$PATH hakmem run env | grep -qx "LD_PRELOAD=$LIB" || fail "through PATH and a link: wrong library"
  ;;
stats)
  "$TOOL" run --stats -- true >"$WORK/out" 2>"$WORK/err" || fail "exit status $?"
  head -1 "$WORK/err" | grep -q "^hakmem statistics" || { fail "stderr does not start with the statistics report:"; head -5 "$WORK/err"; }
  [ -s "$WORK/out" ] && fail "something on stdout"
  ;;
errors)
  printf 'echo never\n' >"$WORK/not-executable"
  printf 'not a heap profile\n' >"$WORK/bad1.heap"
  printf 'heap profile: 1: 10 [1: 10] @ heapprofile\n  1: 10 [ 1: 10] @ 0x12zz\n' >"$WORK/bad2.heap"
  printf 'heap profile: 1: 10 [1: 10] @ heapprofile\n  1: 10 [ 1: 10] @ 0x1234\nMAPPED_LIBRARIES:\nnot a mapping\n' >"$WORK/bad3.heap"
  : >"$WORK/empty.heap"
  printf 'heap profile: 1: 10 [1: 10] @ heapprofile\n' >"$WORK/unreadable.heap"
  chmod 0 "$WORK/unreadable.heap"
  n=0
  while IFS='|' read -r what args; do
    eval "set -- $args"
    "$TOOL" "$@" >"$WORK/out" 2>"$WORK/err"; rc=$?
    lines=$(wc -l <"$WORK/err")
    if [ $rc -eq 0 ]; then fail "$what (hakmem $args): exit status 0"
    elif [ "$lines" -ne 1 ] || ! grep -q '^hakmem: ' "$WORK/err"; then fail "$what (hakmem $args): want one line 'hakmem: ...' on stderr, got:"; cat "$WORK/err"
    elif [ -s "$WORK/out" ]; then fail "$what (hakmem $args): output on stdout"
    else n=$((n + 1)); echo "tool: errors: $what: rc $rc: $(cat "$WORK/err")"; fi
  done <<EOF2
no command|
unknown command|frobnicate
unknown option|--frobnicate
run: unknown option|run --frobnicate -- true
run: --set unknown name|run --set NO_SUCH_OPTION=1 -- true
run: --set with the HAKMEM_ prefix|run --set HAKMEM_STATS=1 -- true
run: --set lowercase name|run --set purge_delay_ms=0 -- true
run: --set without a value|run --set STATS -- true
run: --stats bad value|run --stats=xml -- true
run: --profile without a path|run --profile
run: no program|run --stats --
run: missing program|run -- $WORK/no-such-program
run: missing program in PATH|run -- no-such-program-hakmem-test
run: program not executable|run -- $WORK/not-executable
options: an argument|options extra
report: no path|report
report: missing profile|report $WORK/no-such.heap
report: a directory|report $WORK
report: not a profile|report $WORK/bad1.heap
report: bad address|report $WORK/bad2.heap
report: bad mapping|report $WORK/bad3.heap
report: empty file|report $WORK/empty.heap
EOF2
  # The command moved away from the library, without HAKMEM_LIBRARY.
  mkdir "$WORK/alone" && cp "$TOOL" "$WORK/alone/hakmem"
  "$WORK/alone/hakmem" run -- true >/dev/null 2>"$WORK/err" && fail "run without a library: exit status 0"
  [ "$(wc -l <"$WORK/err")" -eq 1 ] || { fail "run without a library: not one line on stderr:"; cat "$WORK/err"; }
  HAKMEM_LIBRARY=$WORK/no-such.so "$TOOL" options >/dev/null 2>"$WORK/err" && fail "HAKMEM_LIBRARY missing: exit status 0"
  [ "$(wc -l <"$WORK/err")" -eq 1 ] || { fail "HAKMEM_LIBRARY missing: not one line on stderr:"; cat "$WORK/err"; }
  # Root reads a file of mode 0 all the same.
  if [ "$(id -u)" -ne 0 ]; then
    "$TOOL" report "$WORK/unreadable.heap" >/dev/null 2>"$WORK/err" && fail "report: unreadable profile: exit status 0"
    [ "$(wc -l <"$WORK/err")" -eq 1 ] || fail "report: unreadable profile: not one line on stderr"
  fi
  echo "tool: errors: $n cases"
  ;;
report | report_pprof)
  # Sites out of order: C (1000 live bytes), A (4000), D (none live), B
  # (2000), then 20 of one byte each. Addresses in the command's own text
  # (mapped at 0x555555556000 from file offset 0x2000), so that google-pprof
  # finds a program to read; one in a library that is not there.
  P=$WORK/prog.heap
  {
    echo "heap profile:   26:     7020 [   31:     9520] @ heapprofile"
    echo "     2:     1000 [     3:     1000] @ 0x00007ffff7e10010 0x0000555555556100"
    echo "     1:     4000 [     1:     4000] @ 0x0000555555556100 0x0000555555557200"
    echo "     0:        0 [     5:      500] @ 0x0000555555556400"
    echo "     3:     2000 [     5:     4000] @ 0x0000555555556300"
    for i in $(seq 10 29); do echo "     1:        1 [     1:        1] @ 0x00005555555560$i"; done
    echo
    echo "MAPPED_LIBRARIES:"
    echo "555555554000-555555556000 r--p 00000000 08:01 100 $TOOL"
    echo "555555556000-55555555a000 r-xp 00002000 08:01 100 $TOOL"
    echo "7ffff7dd0000-7ffff7f60000 r-xp 00028000 08:01 200 $WORK/gone/libc.so.6"
    echo "7ffffffde000-7ffffffff000 rw-p 00000000 00:00 0                          [stack]"
  } >"$P"
  if [ "$CASE" = report_pprof ]; then
    command -v google-pprof >/dev/null || { echo "tool: report_pprof: google-pprof not installed (Debian: google-perftools), skipped"; exit 77; }
    "$TOOL" report "$P" >"$WORK/out" 2>"$WORK/err" || { fail "exit status $?:"; cat "$WORK/err"; }
    grep -q '^Total:' "$WORK/out" || { fail "no google-pprof report:"; cat "$WORK/out" "$WORK/err"; }
    [ $failed -eq 0 ] && echo "tool: report_pprof: google-pprof --text ran:" && cat "$WORK/out"
    exit $failed
  fi
  mkdir "$WORK/bin"
  PATH=$WORK/bin "$TOOL" report "$P" >"$WORK/out" 2>"$WORK/err" || fail "exit status $?"
  [ -s "$WORK/err" ] && { fail "stderr:"; cat "$WORK/err"; }
  expect_line "$WORK/out" "live: 7020 bytes in 26 blocks (allocated in all: 9520 bytes in 31 blocks)"
  expect_line "$WORK/out" "top 20 of 23 sites holding live memory, by live bytes:"
  grep '^#' "$WORK/out" >"$WORK/ranks"
  [ "$(wc -l <"$WORK/ranks")" -eq 20 ] || fail "want 20 sites, got $(wc -l <"$WORK/ranks")"
  [ "$(head -3 "$WORK/ranks")" = "#1 4000 bytes (57.0%) in 1 blocks
#2 2000 bytes (28.5%) in 3 blocks
#3 1000 bytes (14.2%) in 2 blocks" ] || { fail "top three sites:"; head -3 "$WORK/ranks"; }
  expect_line "$WORK/ranks" "#4 1 bytes (0.0%) in 1 blocks"
  expect_line "$WORK/out" "    0x0000555555557200  $TOOL+0x3200"
  expect_line "$WORK/out" "    0x00007ffff7e10010  $WORK/gone/libc.so.6+0x68010"
  # Sites of one byte keep the file's order: 0x...6010 to 0x...6026 shown.
  expect_line "$WORK/out" "    0x0000555555556026  $TOOL+0x2026"
  grep -q '0x0000555555556027' "$WORK/out" && fail "a site beyond the top 20 is shown"
  grep -q '0x0000555555556400' "$WORK/out" && fail "a site with nothing live is shown"

  # With google-pprof on PATH: its command line (a stand-in records it).
  printf '#!/bin/sh\necho "google-pprof $*"\n' >"$WORK/bin/google-pprof"
  chmod +x "$WORK/bin/google-pprof"
  PATH=$WORK/bin:$PATH "$TOOL" report "$P" >"$WORK/out" 2>&1 || fail "through the stand-in: exit status $?"
  expect_line "$WORK/out" "google-pprof --text $TOOL $P"
  # Where the program is gone, google-pprof could name nothing: the summary.
  sed "s|00 $TOOL|00 $WORK/gone/prog|" "$P" >"$WORK/gone.heap"
  PATH=$WORK/bin:$PATH "$TOOL" report "$WORK/gone.heap" >"$WORK/out" 2>"$WORK/err" || fail "program gone: exit status $?"
  expect_line "$WORK/out" "live: 7020 bytes in 26 blocks (allocated in all: 9520 bytes in 31 blocks)"
  [ "$(wc -l <"$WORK/err")" -eq 1 ] || { fail "program gone: want one line of notice on stderr:"; cat "$WORK/err"; }
  ;;
*)
  echo "tool.sh: unknown case $CASE"; exit 2 ;;
esac
[ $failed -eq 0 ] && echo "tool: $CASE: ok"
exit $failed
