#!/usr/bin/env bash
# hakmem does not change what a process is: tests/process_probe.c run without
# and with LD_PRELOAD=libhakmem.so (default options) must see the same process.
#   tasks    no thread the program did not create
#   setuid   after setuid(65534) as root, no thread keeps the old uid
#   unshare  unshare(CLONE_NEWUSER) returns what it returns without hakmem
#   setns    setns() into its own mount namespace, likewise
#   fill     under RLIMIT_AS of 64 and 128 MiB, blocks of 100 B and of 1 MB:
#            hakmem fits at least 90 % of what the C library fits
#   vmsize   the address space after the first malloc: within 4 MiB of the
#            C library's
# Each check prints one line; the script ends with "N passed, M failed".
# Usage: process.sh PROBE LIBHAKMEM
set -u
PROBE=$1 LIB=$2
passed=0 failed=0
ok() { echo "process: $1: ok ($2)"; passed=$((passed + 1)); }
bad() { echo "process: $1: FAILED ($2)"; failed=$((failed + 1)); }

without() { "$PROBE" "$@" 2>&1; }
with() { env -u HAKMEM_BACKGROUND_THREAD LD_PRELOAD="$LIB" "$PROBE" "$@" 2>&1; }

t=$(with tasks)
[ "$t" = "tasks 1" ] && ok tasks "$t" || bad tasks "$t, expected tasks 1"

u=$(with setuid)
case $u in
  skip) ok setuid "skipped: not root" ;;
  uids*) if [ -n "$(tr ' ' '\n' <<<"${u#uids}" | grep -v '^$' | grep -vx 65534)" ]; then bad setuid "$u"; else ok setuid "$u"; fi ;;
  *) bad setuid "$u" ;;
esac

for mode in unshare setns; do
  a=$(without $mode) b=$(with $mode)
  if [ "$a" != "$mode 0" ] && [ "$a" = "$b" ]; then ok $mode "refused without hakmem too: $a"
  elif [ "$a" = "$b" ]; then ok $mode "$b"
  else bad $mode "without: $a, with: $b"; fi
done

for limit in 64 128; do
  for size in 100 1000000; do
    a=$(without fill $limit $size) b=$(with fill $limit $size)
    a=${a#fill } b=${b#fill }
    if [[ $a =~ ^[0-9]+$ && $b =~ ^[0-9]+$ ]] && [ $((b * 10)) -ge $((a * 9)) ]; then
      ok "fill $limit MiB, $size B" "$b MiB, the C library $a MiB"
    else
      bad "fill $limit MiB, $size B" "$b MiB, the C library $a MiB"
    fi
  done
done

a=$(without vmsize) b=$(with vmsize)
a=${a#vmsize } b=${b#vmsize }
if [[ $a =~ ^[0-9]+$ && $b =~ ^[0-9]+$ ]] && [ "$b" -le $((a + 4096)) ]; then ok vmsize "$b KiB, the C library $a KiB"
else bad vmsize "$b KiB, the C library $a KiB"; fi

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
