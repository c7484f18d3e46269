#!/usr/bin/env bash
# Real programs under LD_PRELOAD=libhakmem.so: each runs once without hakmem
# (the reference) and once with it, in its own fresh directory on inputs
# generated beforehand, and must give exactly the same stdout (byte for byte;
# stderr too where it is deterministic) and the same exit status; no hakmem
# diagnostic may appear on stderr.
#
#   python-regrtest  CPython's regression tests (test_dict test_list test_set
#                    test_json test_re test_bytes test_collections test_pickle
#                    test_decimal test_unicode test_array test_sort test_gc,
#                    those present), PYTHONMALLOC=malloc, -v; compared: every
#                    test's result line and the summary (not the timings)
#   sqlite3          a 300,000-row database file with 3 indexes: aggregates,
#                    sorts, joins, updates, deletes, VACUUM, integrity_check
#   gcc              gcc -O2 -c and -O2 -g -c of a generated C file of 2,000
#                    functions; object files and objdump -d identical
#   perl             a hash of 2,000,000 entries built, read, half deleted,
#                    copied; 300,000 small hashes; checksums printed
#   lua5.4           2,000,000 table entries and 300,000 small tables
#                    built and dropped; checksums printed
#   git              init, add 3,000 files, commit, modify/rename/delete,
#                    commit, log, diff, gc --aggressive, fsck (fixed names and
#                    dates, so the hashes are identical)
# A program that is not installed is skipped with a SKIP line.
#
# Usage: tests/real/run.sh [path/to/libhakmem.so]   (default: build/libhakmem.so)
# Environment: REAL_ONLY="sqlite3 git" runs only those; REAL_KEEP=1 keeps the
# work directory.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
LIB=${1:-$SRC/build/libhakmem.so}
[ -f "$LIB" ] || { echo "real: FAIL: $LIB not found (build first)"; exit 1; }
LIB=$(readlink -f "$LIB")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hakmem-real.XXXXXX")
if [ "${REAL_KEEP:-0}" = 1 ]; then echo "real: work directory $WORK"; else trap 'rm -rf "$WORK"' EXIT; fi
mkdir -p "$WORK/in"
IN=$WORK/in

export LC_ALL=C TZ=UTC
pass=0 failn=0 skip=0
t_all=$SECONDS

want() { [ -z "${REAL_ONLY:-}" ] || [[ " $REAL_ONLY " == *" $1 "* ]]; }

# check NAME FUNC [stderr]: runs FUNC (a shell function, cwd = a fresh
# directory, inputs in $IN) without and with hakmem; stdout (and stderr when
# the third argument is "stderr") must be identical.
check() {
  local name=$1 func=$2 cmp_err=${3:-}
  local t0=$SECONDS ref=$WORK/$name.ref hak=$WORK/$name.hak rc_ref=0 rc_hak=0
  mkdir -p "$ref.d" "$hak.d"
  (cd "$ref.d" && "$func") >"$ref.out" 2>"$ref.err" || rc_ref=$?
  local t1=$SECONDS
  (cd "$hak.d" && export LD_PRELOAD="$LIB" && "$func") >"$hak.out" 2>"$hak.err" || rc_hak=$?
  local why=""
  if [ $rc_ref -ne $rc_hak ]; then why="exit status $rc_ref without hakmem, $rc_hak with"
  elif ! cmp -s "$ref.out" "$hak.out"; then why="stdout differs"
  elif [ "$cmp_err" = stderr ] && ! cmp -s "$ref.err" "$hak.err"; then why="stderr differs"
  elif grep -qi 'hakmem' "$hak.err" && ! grep -qi 'hakmem' "$ref.err"; then why="hakmem printed a diagnostic"
  fi
  if [ -n "$why" ]; then
    failn=$((failn + 1))
    echo "real: FAIL $name: $why"
    diff "$ref.out" "$hak.out" | head -20 | sed 's/^/    stdout: /' || true
    [ "$cmp_err" = stderr ] && { diff "$ref.err" "$hak.err" | head -10 | sed 's/^/    stderr: /' || true; }
    tail -5 "$hak.err" | sed 's/^/    stderr with hakmem: /'
    return 0
  fi
  if [ $rc_ref -ne 0 ]; then
    # Same failure both ways is still a broken setup: report it.
    failn=$((failn + 1))
    echo "real: FAIL $name: fails without hakmem too (exit $rc_ref):"
    tail -5 "$ref.err" | sed 's/^/    /'
    return 0
  fi
  pass=$((pass + 1))
  echo "real: PASS $name ($(wc -c <"$ref.out") bytes of output identical; $((t1 - t0)) s without, $((SECONDS - t1)) s with hakmem)"
}

skip() { skip=$((skip + 1)); echo "real: SKIP $1: $2"; }

# ---------------------------------------------------------------- python
# A python whose `test` package has the regression tests: /usr/bin/python3
# (Debian: libpython3.X-testsuite), then whatever python3 is in PATH (pyenv
# shims resolved to the real interpreter), then versioned names.
find_python() {
  local c exe
  for c in /usr/bin/python3 python3 python3.13 python3.12 python3.11 python3.10 python3.9; do
    command -v "$c" >/dev/null 2>&1 || continue
    exe=$("$c" -c 'import sys; print(sys.executable)' 2>/dev/null) || continue
    [ -n "$exe" ] || continue
    if "$exe" -c 'import test.libregrtest, test.test_dict' >/dev/null 2>&1; then echo "$exe"; return 0; fi
  done
  return 1
}
PY_TESTS="test_dict test_list test_set test_json test_re test_bytes test_collections test_pickle test_decimal test_unicode test_array test_sort test_gc"
run_python() {
  # -v lists every test with its result; keep those lines (sorted) and the
  # summary, drop timings and the random seed.
  env PYTHONMALLOC=malloc PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1 "$PY" -m test -v $PY_SEL >log.txt 2>&1 || echo "regrtest exit status $?"
  grep -E '^test\S* \(.*\) \.\.\. (ok|FAIL|ERROR|skipped|expected failure|unexpected success)' log.txt | sort
  grep -E '^(All [0-9]+ tests OK|[0-9]+ tests? (failed|skipped|OK)|Total tests:|Total test files:|Result:|== Tests result)' log.txt
}
if want python-regrtest; then
  if PY=$(find_python); then
    PY_SEL=""
    for t in $PY_TESTS; do
      if "$PY" -c "import test.$t" >/dev/null 2>&1; then PY_SEL="$PY_SEL $t"; fi
    done
    echo "real: python-regrtest uses $PY ($("$PY" -c 'import sys; print(sys.version.split()[0])')):$PY_SEL"
    check python-regrtest run_python
  else
    skip python-regrtest "no python3 with its test package (Debian: libpython3.11-testsuite for /usr/bin/python3.11)"
  fi
fi

# ---------------------------------------------------------------- sqlite3
cat >"$IN/sqlite.sql" <<'EOF'
PRAGMA journal_mode = OFF;
PRAGMA cache_size = -65536;
CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, val REAL, blob BLOB);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000)
INSERT INTO t(grp, name, val, blob)
  SELECT x % 997, printf('name-%08d-%s', (x * 7919) % 1000003, hex(x * 31)), (x * 37 % 10007) / 7.0,
         zeroblob(x % 300)
  FROM c;
CREATE INDEX t_name ON t(name);
CREATE INDEX t_grp ON t(grp, val);
CREATE INDEX t_val ON t(val DESC, name);
SELECT grp, count(*), printf('%.3f', sum(val)), min(name), max(name), sum(length(blob)) FROM t GROUP BY grp ORDER BY grp LIMIT 40;
SELECT name, val FROM t WHERE name > 'name-0005' ORDER BY name LIMIT 50;
SELECT id, name FROM t ORDER BY val DESC, name LIMIT 30;
SELECT count(DISTINCT substr(name, 6, 5)), count(DISTINCT val) FROM t;
SELECT substr(name, 6, 3) AS k, count(*), group_concat(id % 10, '') FROM (SELECT * FROM t ORDER BY name DESC LIMIT 20000) GROUP BY k ORDER BY k LIMIT 20;
UPDATE t SET name = name || '-updated', blob = zeroblob(length(blob) * 2) WHERE id % 3 = 0;
DELETE FROM t WHERE id % 5 = 0;
SELECT count(*), max(length(name)), sum(length(blob)) FROM t;
SELECT a.grp, count(*) FROM t a JOIN t b ON a.id = b.id + 1 AND a.grp = b.grp + 1 GROUP BY a.grp ORDER BY 2 DESC, 1 LIMIT 10;
CREATE TABLE s AS SELECT grp, name, val FROM t ORDER BY random() LIMIT 0;
INSERT INTO s SELECT grp, name, val FROM t ORDER BY name DESC;
SELECT count(*), min(name), max(name) FROM s;
SELECT * FROM (SELECT name, row_number() OVER (PARTITION BY grp ORDER BY val, name) AS r FROM t) WHERE r = 7 ORDER BY name LIMIT 20;
VACUUM;
PRAGMA integrity_check;
EOF
run_sqlite() { sqlite3 db.sqlite <"$IN/sqlite.sql"; sqlite3 db.sqlite 'SELECT count(*) FROM t'; }
if want sqlite3; then
  if command -v sqlite3 >/dev/null; then check sqlite3 run_sqlite stderr
  else skip sqlite3 "sqlite3 not installed (Debian: sqlite3)"; fi
fi

# ---------------------------------------------------------------- gcc
gen_c() {
  awk 'BEGIN {
    print "#include <string.h>\n#include <stdlib.h>\n#include <stdio.h>";
    print "struct node { int key; double w; struct node *left, *right; char name[24]; };";
    for (i = 0; i < 2000; i++) {
      k = i % 6;
      if (k == 0) {
        printf "int f%d(int *a, int n) { int s = %d; for (int i = 0; i < n; i++) { if (a[i] %% %d == 0) s += a[i] * %d; else s ^= a[i] << (i %% 7); } return s; }\n", i, i, i % 13 + 2, i % 31 + 1;
      } else if (k == 1) {
        printf "double f%d(const double *x, int n) { double acc = %d.5; for (int i = 1; i < n; i++) acc = acc * 0.5 + x[i] * x[i - 1] / (1.0 + i * %d); return acc; }\n", i, i, i % 17 + 1;
      } else if (k == 2) {
        printf "int f%d(int v) { switch (v & 15) {", i;
        for (c = 0; c < 12; c++) printf " case %d: return v * %d + %d;", c, c + i % 5, c * i;
        printf " default: return -v; } }\n";
      } else if (k == 3) {
        printf "struct node *f%d(struct node *t, int key) { while (t) { if (t->key == key + %d) return t; t = key < t->key ? t->left : t->right; } return 0; }\n", i, i % 19;
      } else if (k == 4) {
        printf "size_t f%d(char *dst, const char *src) { size_t n = strlen(src); char buf[64]; snprintf(buf, sizeof buf, \"%%s-%d-%%zu\", src, n); memcpy(dst, buf, strlen(buf) + 1); return n + %d; }\n", i, i, i % 11;
      } else {
        printf "static int g%d(int x) { return x > %d ? g%d(x - %d) + 1 : x; }\nint f%d(int x) { return g%d(x) * %d + f%d(x + 1); }\n", i, i % 50, i, i % 7 + 1, i, i, i % 9 + 1, i - 3;
      }
    }
    printf "int main(int argc, char **argv) { (void)argv; return f2(argc)";
    for (i = 2; i < 2000; i += 6) printf " + f%d(argc)", i;
    print "; }";
  }'
}
run_gcc() {
  gcc -O2 -c -o big.o "$IN/big.c"
  gcc -O2 -g -fdebug-prefix-map="$PWD"=/build -c -o big-g.o "$IN/big.c"
  sha256sum big.o big-g.o
  objdump -d big.o | sed -n '1,3!p' | sha256sum
}
if want gcc; then
  if command -v gcc >/dev/null && command -v objdump >/dev/null; then
    gen_c >"$IN/big.c"
    before=$failn
    check gcc run_gcc stderr
    if [ $failn -ne $before ]; then
      # Tell a hakmem problem from a gcc that is not deterministic anyway.
      mkdir -p "$WORK/gcc.ref2.d"
      if (cd "$WORK/gcc.ref2.d" && run_gcc) 2>/dev/null | cmp -s - "$WORK/gcc.ref.out"; then
        echo "    (gcc is deterministic without hakmem: a second run gave the same output)"
      else
        echo "    (gcc is NOT deterministic without hakmem either: this comparison is meaningless here)"
      fi
    fi
  else
    skip gcc "gcc or objdump not installed (Debian: gcc, binutils)"
  fi
fi

# ---------------------------------------------------------------- perl
run_perl() {
  # Fixed hash seed: the order of keys (and of any warning) is reproducible.
  PERL_HASH_SEED=0 PERL_PERTURB_KEYS=0 perl -e '
    use strict; use warnings;
    my %h; my $n = 2_000_000; my $sum = 0;
    for my $i (1 .. $n) { $h{"key$i"} = $i * 3 + length($i); }
    $sum += $h{"key$_"} for 1 .. $n;
    for my $i (1 .. $n) { delete $h{"key$i"} if $i % 2; }
    my $left = scalar keys %h;
    my %g; for my $k (keys %h) { my $v = substr($k, 3); $g{$k . "x"} = [$v, "v" x ($v % 17)]; }
    my $c = 0; for my $k (keys %g) { $c = ($c + length($g{$k}[1]) * $g{$k}[0]) % 1_000_000_007; }
    undef %h; undef %g;
    my @arr = map { { id => $_, s => "s" x ($_ % 33) } } 1 .. 300_000;
    my $t = 0; $t += length($_->{s}) + $_->{id} for @arr;
    print "$sum $left $c $t\n";'
}
if want perl; then
  if command -v perl >/dev/null; then check perl run_perl stderr
  else skip perl "perl not installed (Debian: perl)"; fi
fi

# ---------------------------------------------------------------- lua
LUA=$(command -v lua5.4 || true)
run_lua() {
  "$LUA" -e '
    local n = 2000000
    local t = {}
    for i = 1, n do t["k" .. i] = i * 3 end
    local s = 0
    for i = 1, n do s = (s + t["k" .. i]) % 1000000007 end
    for i = 1, n, 2 do t["k" .. i] = nil end
    collectgarbage()
    local c = 0
    for k, v in pairs(t) do c = c + 1 end
    local arr = {}
    for i = 1, 300000 do arr[i] = { id = i, name = string.rep("x", i % 40), sub = { i, i * 2 } } end
    local h = 0
    for i = 1, #arr, 3 do h = (h * 31 + #arr[i].name + arr[i].sub[2]) % 1000000007 end
    arr = nil; t = nil
    collectgarbage(); collectgarbage()
    local words = {}
    for i = 1, 200000 do words[#words + 1] = string.format("%08x", (i * 2654435761) % 4294967296) end
    table.sort(words)
    print(s, c, h, words[1], words[#words], #table.concat(words, ","))'
}
if want lua5.4; then
  if [ -n "$LUA" ]; then check lua5.4 run_lua stderr
  else skip lua5.4 "lua5.4 not installed (Debian: lua5.4)"; fi
fi

# ---------------------------------------------------------------- git
gen_files() {
  awk -v dir="$IN/files" 'BEGIN {
    x = 7;
    for (i = 0; i < 3000; i++) {
      f = sprintf("%s/d%02d/file%04d.txt", dir, i % 40, i);
      if (i % 40 == i) system("mkdir -p " dir sprintf("/d%02d", i % 40));
      n = 5 + i % 60;
      for (l = 0; l < n; l++) { x = (x * 1103515245 + 12345) % 2147483648; printf "line %d of file %d: %x %s\n", l, i, x, substr("the quick brown fox jumps over the lazy dog", 1 + x % 20) > f; }
      close(f);
    }
  }'
}
run_git() {
  export HOME=$PWD GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
  export GIT_AUTHOR_NAME="Hak Mem" GIT_AUTHOR_EMAIL=hak@example.org GIT_COMMITTER_NAME="Hak Mem" GIT_COMMITTER_EMAIL=hak@example.org
  export GIT_AUTHOR_DATE="2024-01-01T00:00:00Z" GIT_COMMITTER_DATE="2024-01-01T00:00:00Z"
  git init -q -b main repo
  cd repo
  cp -r "$IN/files/." .
  git add -A
  git commit -q -m "initial: 3000 files"
  git rev-parse HEAD
  for f in d0*/file*0.txt; do echo "changed $f" >>"$f"; done
  git mv d01 moved01
  git rm -q d02/file0002.txt d02/file0042.txt
  export GIT_AUTHOR_DATE="2024-01-02T00:00:00Z" GIT_COMMITTER_DATE="2024-01-02T00:00:00Z"
  git add -A
  git commit -q -m "second: modify, move, delete"
  git rev-parse HEAD HEAD^{tree}
  git log --stat --format='%H %an %ad %s' --date=iso-strict | head -200
  git diff --stat HEAD~1 HEAD | tail -3
  git diff -M HEAD~1 HEAD | sha256sum
  git branch side HEAD~1
  git checkout -q side
  git ls-files | wc -l
  git checkout -q main
  git gc -q --aggressive
  git count-objects -v | grep -E '^(count|in-pack|packs|garbage)'
  git fsck --full --no-progress --strict 2>&1
  git cat-file --batch-all-objects --batch-check | sort | sha256sum
  git grep -c 'quick brown' HEAD | sort | sha256sum
}
if want git; then
  if command -v git >/dev/null; then
    gen_files
    check git run_git stderr
  else
    skip git "git not installed (Debian: git)"
  fi
fi

# ---------------------------------------------------------------- hakmem used?
# HAKMEM_STATS=1 prints a report at exit: proves the preload took effect.
# The report is captured whole before grep reads it: piped into grep -q, the
# rest of it could meet a closed pipe, and pipefail would fail the check.
report=""
if command -v perl >/dev/null; then
  report=$(HAKMEM_STATS=1 LD_PRELOAD="$LIB" perl -e 'my @a = map { "x" x $_ } 1..1000;' 2>&1 >/dev/null || true)
fi
if [[ "$report" != *hakmem* && -n "$LUA" ]]; then
  report=$(HAKMEM_STATS=1 LD_PRELOAD="$LIB" "$LUA" -e 'local t = {} for i = 1, 1000 do t[i] = {} end' 2>&1 >/dev/null || true)
fi
if [[ "$report" == *hakmem* ]]; then
  :
else
  failn=$((failn + 1))
  echo "real: FAIL preload check: HAKMEM_STATS=1 printed no hakmem report; was $LIB really used?"
fi

echo "real: $pass passed, $failn failed, $skip skipped ($((SECONDS - t_all)) s)"
if [ $failn -ne 0 ]; then echo "real: FAIL"; exit 1; fi
echo "real: PASS"
