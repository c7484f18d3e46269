#!/usr/bin/env bash
# bench/phases.sh - the phases workload (bench/phases.c) under hakmem learning
# (at weights 50, 0 and 100), hakmem pinned to each of its four strategies,
# and each installed peer, interleaved, for ROUNDS rounds; writes
# bench/results/phases.{csv,md,png} (bench/phases_report.py) and, in full
# mode, refreshes the README's phases table.
#
#   bench/phases.sh --quick     1 round, 0.25 s phases
#   bench/phases.sh --full      3 rounds, 1 s phases
#   options: --rounds N  --build DIR (default: build)  --out DIR (default: bench/results)
set -u -o pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODE=quick ROUNDS= BUILD=$ROOT/build OUT=$ROOT/bench/results
while [ $# -gt 0 ]; do
  case $1 in
    --quick) MODE=quick ;;
    --full) MODE=full ;;
    --rounds) ROUNDS=$2; shift ;;
    --build) BUILD=$(cd "$2" && pwd); shift ;;
    --out) OUT=$2; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "phases.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$ROUNDS" ] || { [ $MODE = full ] && ROUNDS=3 || ROUNDS=1; }
PHASE=$([ $MODE = full ] && echo 1.0 || echo 0.25)
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cc -std=gnu11 -O2 -Wall -fno-builtin-malloc -fno-builtin-free -o "$TMP/phases" "$ROOT/bench/phases.c" -pthread -lm || exit 1
[ -e "$BUILD/libhakmem.so" ] || { echo "phases.sh: $BUILD/libhakmem.so missing: run make first" >&2; exit 1; }
cp -L "$BUILD/libhakmem.so" "$TMP/libhakmem.so"

# name|LD_PRELOAD|environment
CONFIGS=("hakmem|$TMP/libhakmem.so|HAKMEM_LEARN=1"
         "hakmem-w0|$TMP/libhakmem.so|HAKMEM_LEARN_WEIGHT=0"
         "hakmem-w100|$TMP/libhakmem.so|HAKMEM_LEARN_WEIGHT=100")
for k in 0 1 2 3; do CONFIGS+=("pin$k|$TMP/libhakmem.so|HAKMEM_LEARN=0 HAKMEM_LEARN_PIN=$k"); done
CONFIGS+=("glibc||")
for peer in mimalloc:libmimalloc.so.2 jemalloc:libjemalloc.so.2 tcmalloc:libtcmalloc_minimal.so.4; do
  lib=/usr/lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)/${peer#*:}
  if [ -e "$lib" ]; then CONFIGS+=("${peer%%:*}|$lib|"); else echo "phases.sh: ${peer%%:*} not installed: skipped" >&2; fi
done

CSV=$OUT/phases.csv
echo "round,config,result" >"$CSV"
T0=$(date +%s)
for r in $(seq 1 "$ROUNDS"); do
  for c in "${CONFIGS[@]}"; do
    IFS='|' read -r name lib envs <<<"$c"
    line=$(env $envs LD_PRELOAD="$lib" "$TMP/phases" phase=$PHASE seed=$r 2>/dev/null | tail -1)
    case $line in *check=ok*) ;; *) echo "phases.sh: $name FAILED: $line" >&2; echo "$r,$name,FAIL" >>"$CSV"; continue ;; esac
    echo "$r,$name,\"$line\"" >>"$CSV"
    echo "phases.sh: round $r/$ROUNDS $name ok ($(( $(date +%s) - T0 )) s)" >&2
  done
done
python3 "$ROOT/bench/phases_report.py" "$CSV" "$OUT" "$MODE" "$ROUNDS" || exit 1
if command -v gnuplot >/dev/null; then gnuplot "$OUT/phases.gp" && rm -f "$OUT/phases.gp"; fi
if [ $MODE = full ] && [ "$OUT" = "$ROOT/bench/results" ]; then
  python3 - "$ROOT/README.md" "$OUT/phases.md" <<'EOF'
import sys, re
readme, md = sys.argv[1], open(sys.argv[2]).read()
s = open(readme).read()
s = re.sub(r"<!-- phases:begin -->.*<!-- phases:end -->", lambda m: "<!-- phases:begin -->\n" + md + "<!-- phases:end -->", s, flags=re.S)
open(readme, "w").write(s)
EOF
fi
grep -q ',FAIL$' "$CSV" && exit 1
exit 0
