#!/usr/bin/env bash
# bench/real.sh (built as build/bench/real) - real programs timed under the
# allocator that LD_PRELOAD names, the way the C workloads are.
#
#   real prog=NAME [scale=full|quick] [prepare=1]
#
# NAME is one of:
#   gcc     gcc -O2 -c on a generated C file (full: 1000 functions)
#   sqlite  sqlite3 on an in-memory database: import a generated CSV
#           (full: 200,000 rows), build two indexes, query, delete a third, query
#   lua     lua5.4 builds a hashed table (full: 1,000,000 entries), thins it
#           by a third, refills it with small tables, walks it
#   perl    perl builds a hash of array records (full: 250,000 keys), an index
#           of lists, deletes a third, sorts the keys, joins strings
#   python  python3 (PYTHONMALLOC=malloc, so the allocator under test sees the
#           interpreter's small objects too) builds a dict of lists (full:
#           400,000 keys), groups, deletes a third, splits, sorts, counts
#   redis   redis-server on a private Unix socket, driven by redis-benchmark
#           (not preloaded): SET, GET, LPUSH, LPOP, full: 150,000 requests each,
#           16 pipelined, 100,000 random keys, 128 B values
#   all     each of them in turn (one line each; a missing program is skipped)
#
# Only the measured program runs under the preload: the script re-executes
# itself without it, and the program's helpers (inputs, the client, checks)
# run without.  Inputs are generated under $BENCH_REAL_DIR (default: a fresh
# temporary directory, removed at exit), once per scale, and each program's
# output is compared with a reference made by the same program without the
# preload: a wrong result fails the run.  prepare=1 only generates them.
#
# Output: bench=real prog=NAME scale=S seconds=T ops_per_sec=R unit=U
#         peak_rss_kib=K check=ok|FAIL
# with unit=run (R = 1 / T: runs per second) or, for redis, unit=request
# (R = requests per second over the four tests together, T = their wall
# time); peak_rss_kib is the measured program's peak resident set (redis: the
# server's).  With BENCH_STRACE=FILE the program runs under
# `strace -f -c -e trace=memory -o FILE` (the syscall pass) instead of
# /usr/bin/time.  Exit status: 0 ok, 1 failed, 2 bad arguments, 3 a program
# is not installed.
set -u -o pipefail

if [ -z "${BENCH_PRELOAD+set}" ]; then
  export BENCH_PRELOAD=${LD_PRELOAD:-}
  unset LD_PRELOAD
  exec bash "$0" "$@"
fi

PROG= SCALE=full PREPARE=0
for a in "$@"; do
  case $a in
    prog=*) PROG=${a#prog=} ;;
    scale=full|scale=quick) SCALE=${a#scale=} ;;
    prepare=1) PREPARE=1 ;;
    *) echo "real: bad argument '$a' (prog=NAME [scale=full|quick] [prepare=1])" >&2; exit 2 ;;
  esac
done
ALL="gcc sqlite lua perl python redis"
case " $ALL all " in *" $PROG "*) ;; *) echo "real: prog= one of: $ALL all" >&2; exit 2 ;; esac

OWN_DIR=
if [ -z "${BENCH_REAL_DIR:-}" ]; then
  BENCH_REAL_DIR=$(mktemp -d) || exit 1
  OWN_DIR=$BENCH_REAL_DIR
fi
# The distribution's interpreter, not a version manager's wrapper script.
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
# -I would ignore PYTHONMALLOC (it implies -E): -s and no PYTHONPATH instead
export PYTHONMALLOC=malloc
unset PYTHONPATH PYTHONHOME

# size <prog>: the one parameter that scales each program
size() {
  case $SCALE:$1 in
    full:gcc) echo 1000 ;; full:sqlite) echo 200000 ;; full:lua) echo 1000000 ;;
    full:perl) echo 250000 ;; full:python) echo 400000 ;; full:redis) echo 150000 ;;
    quick:gcc) echo 40 ;; quick:sqlite) echo 5000 ;; quick:lua) echo 50000 ;;
    quick:perl) echo 20000 ;; quick:python) echo 20000 ;; quick:redis) echo 5000 ;;
  esac
}

tool() {
  case $1 in
    gcc) echo gcc ;; sqlite) echo sqlite3 ;; lua) echo lua5.4 ;; perl) echo perl ;;
    python) echo "$PY" ;; redis) echo "redis-server redis-benchmark redis-cli" ;;
  esac
}

# ---- inputs -----------------------------------------------------------------
gen_c() { # a C file of $1 functions: branches, a static table each, calls to earlier ones
  "$PY" - "$1" <<'EOF'
import sys
n = int(sys.argv[1])
out = ["struct rec { int a, b; const char *s; };", "int f0(int x, int y);"]
for i in range(n):
    call = f" + f{i // 2}(y, x & {i})" if i % 4 == 3 else ""
    w = 2 + i % 6
    out.append(f"""static struct rec t{i}[{w}] = {{ {{ {i}, {i % 9}, "f{i}" }} }};
int f{i}(int x, int y)
{{
    int acc = x * {i % 13 + 1} + y;
    if (acc > {i % 50}) acc ^= t{i}[y & {1 + i % 5}].a;
    else acc -= t{i}[x & {1 + i % 5}].b;
    t{i}[x & {1 + i % 5}].b = acc;
    return acc{call};
}}""")
print("\n".join(out))
EOF
}

gen_rows() { # CSV: id, name, value, category, padding; a fixed seed
  "$PY" - "$1" <<'EOF'
import random, sys
r = random.Random(1)
for i in range(int(sys.argv[1])):
    print(f"{i},name{r.randrange(10**6):06d},{r.randrange(10**6)},cat{r.randrange(100)},{'x' * r.randrange(8, 64)}")
EOF
}

write_scripts() { # the SQL, Lua, Perl and Python programs, into $1
  cat >"$1/load.sql" <<'EOF'
CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, value INTEGER, cat TEXT, pad TEXT);
.mode csv
.import rows.csv t
CREATE INDEX t_name ON t(name);
CREATE INDEX t_cat ON t(cat, value);
SELECT count(*), sum(value), count(DISTINCT cat) FROM t;
SELECT cat, count(*), max(value) FROM t GROUP BY cat ORDER BY cat LIMIT 3;
SELECT name FROM t WHERE name > 'name5' ORDER BY name LIMIT 3;
DELETE FROM t WHERE value % 3 = 0;
SELECT count(*), sum(length(pad)) FROM t;
EOF
  cat >"$1/tables.lua" <<'EOF'
-- a hashed table of n entries and a list of strings; a third thinned out;
-- refilled with small tables; walked
local n = tonumber(arg[1])
local h, strs = {}, {}
for i = 1, n do h[(i * 2654435761) % 4294967296] = i end
for i = 1, n // 4 do strs[i] = "s" .. i end
local removed = 0
for k, v in pairs(h) do if v % 3 == 0 then h[k] = nil; removed = removed + 1 end end
for i = 1, n // 4, 2 do strs[i] = nil end
collectgarbage()
for i = 1, n // 2 do h[i] = { i, "v" .. i } end
local sum, cnt = 0, 0
for _, v in pairs(h) do cnt = cnt + 1; sum = (sum + (type(v) == "table" and v[1] or v)) % 1000000007 end
local len = 0
for i = 2, n // 4, 2 do len = len + #strs[i] end
print(cnt, removed, sum, len)
EOF
  cat >"$1/hashes.pl" <<'EOF'
# a hash of array records, an index of lists, a third deleted, keys sorted, strings joined
use strict; use warnings;
my $n = shift;
my (%h, %idx);
for my $i (1 .. $n) { $h{"key$i"} = [$i, "val" . ($i * 7 % 1000), { n => $i }]; }
for my $i (1 .. $n) { push @{ $idx{$h{"key$i"}[1]} }, $i if $i % 2; }
delete $h{"key$_"} for grep { $_ % 3 == 0 } 1 .. $n;
my ($sum, $len) = (0, 0);
for my $k (sort keys %h) { $sum = ($sum + $h{$k}[0] * length($k)) % 1000000007; }
$len += scalar @{ $idx{$_} } for keys %idx;
my $s = join ",", map { "$_=$h{$_}[2]{n}" } grep { /7$/ } keys %h;
print scalar(keys %h), " $sum $len ", length($s), "\n";
EOF
  cat >"$1/dicts.py" <<'EOF'
# a dict of lists, grouped; a third deleted; joined, split, sorted, counted
import sys
n = int(sys.argv[1])
d = {}
for i in range(n):
    d["k%d" % i] = [i, str(i * 7919 % n), (i, i % 97)]
groups = {}
for k, v in d.items():
    groups.setdefault(v[2][1], []).append(k)
for i in range(0, n, 3):
    del d["k%d" % i]
words = " ".join(v[1] for v in d.values()).split()
words.sort()
counts = {}
for w in words:
    counts[w[-2:]] = counts.get(w[-2:], 0) + 1
print(len(d), len(words), len(counts), sum(len(g) for g in groups.values()),
      sum(int(w) for w in words[:1000]) % 1000003)
EOF
}

# ---- running ----------------------------------------------------------------
# measure <rss file> <stdin> <cmd...>: runs cmd under the preload with stdin,
# its stdout to $W/out; the peak RSS (KiB) to the rss file, or under strace.
measure() {
  local rss=$1 in=$2
  shift 2
  if [ -n "${BENCH_STRACE:-}" ]; then
    strace -f -c -o "$BENCH_STRACE" -e trace=memory ${BENCH_PRELOAD:+-E "LD_PRELOAD=$BENCH_PRELOAD"} "$@" <"$in" >"$W/out" 2>"$W/err"
  else
    /usr/bin/time -f %M -o "$rss" env LD_PRELOAD="$BENCH_PRELOAD" "$@" <"$in" >"$W/out" 2>"$W/err"
  fi
}

# command <prog>: the measured command line, run in $W
command_of() {
  local n
  n=$(size "$1")
  case $1 in
    gcc) echo "gcc -O2 -c gen.c -o out.o" ;;
    sqlite) echo "sqlite3 :memory:" ;;
    lua) echo "lua5.4 tables.lua $n" ;;
    perl) echo "perl hashes.pl $n" ;;
    python) echo "$PY -s dicts.py $n" ;;
  esac
}

stdin_of() { if [ "$1" = sqlite ]; then echo load.sql; else echo /dev/null; fi; }

# result <prog>: what the run's correctness is judged on
result() { if [ "$1" = gcc ]; then cat out.o; else cat "$W/out"; fi; }

prepare() { # inputs and the reference output of prog $1, once per scale
  local p=$1 n
  n=$(size "$p")
  [ -e "$D/ref.$p" ] && return 0
  case $p in
    gcc) gen_c "$n" >"$D/gen.c" || return 1 ;;
    sqlite) gen_rows "$n" >"$D/rows.csv" || return 1 ;;
    redis) return 0 ;;
  esac
  [ -e "$D/load.sql" ] || write_scripts "$D"
  (
    W=$D BENCH_PRELOAD= BENCH_STRACE=
    cd "$D" && measure /dev/null "$(stdin_of "$p")" $(command_of "$p") && result "$p" >"$D/ref.$p.tmp"
  ) && mv "$D/ref.$p.tmp" "$D/ref.$p"
}

run_prog() { # prints the result line of prog $1; returns 0 when it ran right
  local p=$1 t0 t1 ok=ok rss
  (cd "$D" && t0=$EPOCHREALTIME && measure "$W/rss" "$(stdin_of "$p")" $(command_of "$p") && t1=$EPOCHREALTIME &&
    echo "$t0 $t1" >"$W/times" && result "$p" >"$W/result") || ok=FAIL
  [ $ok = ok ] && cmp -s "$W/result" "$D/ref.$p" || ok=FAIL
  rss=$(tail -1 "$W/rss" 2>/dev/null)
  read -r t0 t1 <"$W/times" 2>/dev/null || { t0=0 t1=0; }
  awk -v p="$p" -v s="$SCALE" -v a="$t0" -v b="$t1" -v k="${rss:-}" -v ok=$ok 'BEGIN {
    t = b - a; r = t > 0 ? 1 / t : 0
    printf "bench=real prog=%s scale=%s seconds=%.3f ops_per_sec=%.4f unit=run peak_rss_kib=%s check=%s\n",
      p, s, t, r, k, ok }'
  [ $ok = ok ] || { tail -c 400 "$W/err" >&2; return 1; }
}

# redis: a server per run on a private socket; redis-benchmark and redis-cli
# run without the preload; the figure is the server's.
run_redis() {
  local n sock pid spid hwm t0 t1 ok=ok keys
  n=$(size redis)
  sock=$W/redis.sock
  if [ -n "${BENCH_STRACE:-}" ]; then
    strace -f -c -o "$BENCH_STRACE" -e trace=memory ${BENCH_PRELOAD:+-E "LD_PRELOAD=$BENCH_PRELOAD"} \
      redis-server --port 0 --unixsocket "$sock" --save '' --appendonly no --dir "$W" --logfile "$W/redis.log" &
  else
    env LD_PRELOAD="$BENCH_PRELOAD" redis-server --port 0 --unixsocket "$sock" --save '' --appendonly no \
      --dir "$W" --logfile "$W/redis.log" &
  fi
  pid=$!
  for _ in $(seq 200); do
    [ "$(redis-cli -s "$sock" ping 2>/dev/null)" = PONG ] && break
    sleep 0.05
  done
  spid=$(redis-cli -s "$sock" info server 2>/dev/null | tr -d '\r' | sed -n 's/^process_id://p')
  t0=$EPOCHREALTIME
  redis-benchmark -s "$sock" --csv -n "$n" -P 16 -r 100000 -d 128 -t set,get,lpush,lpop >"$W/out" 2>"$W/err" || ok=FAIL
  t1=$EPOCHREALTIME
  keys=$(redis-cli -s "$sock" dbsize 2>/dev/null)
  [ "$(redis-cli -s "$sock" set bench:check v42 2>/dev/null; redis-cli -s "$sock" get bench:check 2>/dev/null)" = \
    "$(printf 'OK\nv42')" ] || ok=FAIL
  hwm=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/${spid:-0}/status" 2>/dev/null)
  redis-cli -s "$sock" shutdown nosave >/dev/null 2>&1
  wait "$pid" || ok=FAIL
  # distinct random keys set: at least half of the fewer of requests and key range
  [ "${keys:-0}" -ge $(((n < 100000 ? n : 100000) / 2)) ] || ok=FAIL
  awk -F'"' -v n="$n" -v a="$t0" -v b="$t1" -v k="${hwm:-}" -v ok=$ok '
    $2 ~ /^(SET|GET|LPUSH|LPOP)$/ && $4 > 0 { inv += 1 / $4; tests++ }
    END {
      if (tests != 4) ok = "FAIL"
      printf "bench=real prog=redis scale=%s seconds=%.3f ops_per_sec=%.0f unit=request requests=%d peak_rss_kib=%s check=%s\n",
        ENVIRON["SCALE"], b - a, tests == 4 ? 4 / inv : 0, 4 * n, k, ok
    }' "$W/out"
  [ $ok = ok ] && [ "$(grep -c '^"\(SET\|GET\|LPUSH\|LPOP\)"' "$W/out")" = 4 ] || { tail -c 400 "$W/err" >&2; return 1; }
}

export SCALE
D=$BENCH_REAL_DIR/$SCALE
mkdir -p "$D" || exit 1
W=$(mktemp -d "$BENCH_REAL_DIR/run.XXXXXX") || exit 1
trap 'rm -rf "$W" ${OWN_DIR:+"$OWN_DIR"}' EXIT

progs=$PROG
[ "$PROG" = all ] && progs=$ALL
status=0
for p in $progs; do
  missing=
  for t in $(tool "$p"); do command -v "$t" >/dev/null || missing="$missing $t"; done
  if [ -n "$missing" ]; then
    echo "real: $p skipped:$missing not installed" >&2
    [ "$PROG" = all ] && continue
    exit 3
  fi
  prepare "$p" || { echo "real: preparing $p failed" >&2; status=1; continue; }
  [ $PREPARE = 1 ] && continue
  if [ "$p" = redis ]; then run_redis || status=1; else run_prog "$p" || status=1; fi
done
exit $status
