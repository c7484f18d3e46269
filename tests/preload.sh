#!/usr/bin/env bash
# Runs real programs with and without LD_PRELOAD=libhakmem.so and requires
# byte-identical stdout: python3 (PYTHONMALLOC=malloc) on a dict/list/str/set
# heavy script, sqlite3 on a generated SQL script, sort on ~500k generated
# lines, perl building a big hash. Also checks that the library was really
# used (HAKMEM_STATS=1 prints a report containing "hakmem" on stderr at exit)
# and that no preloaded run printed a hakmem diagnostic.
#
# Usage: preload.sh /path/to/libhakmem.so
set -u
LIB=${1:?usage: preload.sh /path/to/libhakmem.so}
LIB=$(readlink -f "$LIB")
[ -f "$LIB" ] || { echo "preload: $LIB not found"; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hakmem-preload.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fail=0
ran=0

# run NAME CMD...: runs CMD plain and preloaded, compares stdout.
run() {
  local name=$1; shift
  local t0=$SECONDS
  if ! "$@" >"$WORK/$name.ref" 2>"$WORK/$name.ref.err"; then
    echo "preload: $name: FAILED without hakmem (rc $?):"; head -5 "$WORK/$name.ref.err"; fail=1; return
  fi
  local rc=0
  LD_PRELOAD="$LIB" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
  if [ $rc -ne 0 ]; then
    echo "preload: $name: FAILED with LD_PRELOAD=$LIB (rc $rc); stderr:"; head -20 "$WORK/$name.err"; fail=1; return
  fi
  if ! cmp -s "$WORK/$name.ref" "$WORK/$name.out"; then
    echo "preload: $name: output differs with hakmem:"; diff "$WORK/$name.ref" "$WORK/$name.out" | head -20; fail=1; return
  fi
  if grep -qi hakmem "$WORK/$name.err"; then
    echo "preload: $name: hakmem printed a diagnostic:"; grep -i hakmem "$WORK/$name.err" | head -5; fail=1; return
  fi
  ran=$((ran + 1))
  echo "preload: $name: identical output ($(wc -c <"$WORK/$name.ref") bytes, $((SECONDS - t0)) s)"
}

# --- python3 ---
PY=$(command -v python3 || true)
if [ -n "$PY" ]; then
  # Resolve wrappers (pyenv shims) to the real interpreter.
  PY=$("$PY" -c 'import sys; print(sys.executable)' 2>/dev/null || echo "$PY")
  cat >"$WORK/work.py" <<'PYEOF'
import hashlib
h = hashlib.sha256()
d = {}
for i in range(400000):
    d["key%d" % i] = [i, str(i) * (i % 7), {"a": i}]
for i in range(0, 400000, 3):
    del d["key%d" % i]
lst = []
for i in range(200000):
    lst.append(("x" * (i % 50)) + str(i))
lst.sort(key=lambda s: (len(s), s))
s = set()
for i in range(300000):
    s.add(i * 7919 % 1000003)
    if i % 5 == 0:
        s.discard(i)
words = " ".join(str(i) for i in range(100000)).split(" ")
text = "".join(w[::-1] for w in words)
big = [bytearray(i % 5000) for i in range(20000)]
for k in sorted(d)[:1000]:
    h.update(repr(d[k]).encode())
h.update(repr(lst[:100] + lst[-100:]).encode())
h.update(repr(sorted(s)[:1000]).encode())
h.update(text.encode())
h.update(str(sum(len(b) for b in big)).encode())
print(len(d), len(lst), len(s), len(text))
print(h.hexdigest())
PYEOF
  run python env PYTHONMALLOC=malloc PYTHONHASHSEED=0 "$PY" "$WORK/work.py"
else
  echo "preload: python3 not installed: skipped"
fi

# --- sqlite3 ---
if command -v sqlite3 >/dev/null; then
  cat >"$WORK/work.sql" <<'SQLEOF'
CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, val REAL);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000)
INSERT INTO t(grp, name, val) SELECT x % 97, printf('name-%08d-%s', (x * 7919) % 100003, hex(x)), (x * 31 % 1000) / 7.0 FROM c;
CREATE INDEX t_name ON t(name);
CREATE INDEX t_grp ON t(grp, val);
SELECT grp, count(*), printf('%.3f', sum(val)), min(name), max(name) FROM t GROUP BY grp ORDER BY grp;
SELECT name, val FROM t WHERE name > 'name-0005' ORDER BY name LIMIT 50;
SELECT count(DISTINCT substr(name, 6, 4)) FROM t;
UPDATE t SET name = name || '-updated' WHERE id % 3 = 0;
DELETE FROM t WHERE id % 5 = 0;
SELECT count(*), max(length(name)) FROM t;
SELECT a.grp, count(*) FROM t a JOIN t b ON a.id = b.id + 1 GROUP BY a.grp ORDER BY 2 DESC, 1 LIMIT 10;
SQLEOF
  run sqlite3 sh -c "sqlite3 :memory: < '$WORK/work.sql'"
else
  echo "preload: sqlite3 not installed: skipped (install the sqlite3 package)"
fi

# --- sort ---
awk 'BEGIN { x = 12345; for (i = 0; i < 500000; i++) { x = (x * 1103515245 + 12345) % 2147483648; printf "%d line %x %s\n", x % 100000, x, substr("abcdefghijklmnopqrstuvwxyz", 1 + x % 26) } }' >"$WORK/lines.txt"
run sort env LC_ALL=C sort -S 64M "$WORK/lines.txt"
run sort-k env LC_ALL=C sort -t ' ' -k3,3 -k1,1n "$WORK/lines.txt"

# --- perl ---
if command -v perl >/dev/null; then
  run perl perl -e 'my %h; for my $i (1..500000) { $h{"k$i"} = [$i, "v" x ($i % 20)]; } for my $i (1..500000) { delete $h{"k$i"} if $i % 3 == 0; } my $s = 0; $s += $h{$_}[0] for keys %h; my @k = sort keys %h; print scalar(@k), " $s $k[0] $k[-1]\n"; my $str = join(",", map { $_ * 2 } 1..200000); print length($str), "\n";'
else
  echo "preload: perl not installed: skipped"
fi

# --- the library really was used ---
# (Not with coreutils: they close stderr before the report runs at exit.)
if command -v perl >/dev/null; then
  HAKMEM_STATS=1 LD_PRELOAD="$LIB" perl -e 'my @a = map { "x" x $_ } 1..2000; print scalar(@a), "\n";' \
    >"$WORK/stats.out" 2>"$WORK/stats.err"
else
  HAKMEM_STATS=1 LD_PRELOAD="$LIB" "$PY" -c 'print(len([str(i) for i in range(1000)]))' >"$WORK/stats.out" 2>"$WORK/stats.err"
fi
if ! grep -q hakmem "$WORK/stats.err"; then
  echo "preload: HAKMEM_STATS=1 printed no report containing \"hakmem\" on stderr: was the library used?"
  head -5 "$WORK/stats.err"
  fail=1
fi

if [ $fail -ne 0 ]; then echo "preload: FAILED"; exit 1; fi
echo "preload: $ran programs identical with and without hakmem: OK"
