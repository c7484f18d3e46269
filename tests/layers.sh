#!/usr/bin/env bash
# The layer order of src/, written once: a file may include headers of its
# own layer and below, never above. A .c file belongs to the layer of the
# header of the same name (or to the one listed). The compiler then keeps
# calls in order too: the build has -Werror=implicit-function-declaration,
# and no file declares another's functions itself (checked below).
# Usage: layers.sh SOURCE_DIR
set -u
SRC=${1:-src}
LAYERS=(
  "0 base os out options stats policy types stackwalk"
  "1 map run region"
  "2 size_class harden slab"
  "3 heap"
  "4 large huge"
  "5 purge learn prof"
  "6 api alloc override init report"
)
declare -A level
for row in "${LAYERS[@]}"; do
  set -- $row
  n=$1; shift
  for unit in "$@"; do level[$unit]=$n; done
done

fail=0
for f in "$SRC"/*.c "$SRC"/*.h; do
  unit=$(basename "${f%.*}")
  mine=${level[$unit]:-}
  if [ -z "$mine" ]; then
    echo "layers: $f is in no layer (add it to tests/layers.sh)"; fail=1; continue
  fi
  while read -r inc; do
    dep=${inc%.*}
    theirs=${level[$dep]:-}
    if [ -z "$theirs" ]; then
      [ "$inc" = hakmem.h ] || { echo "layers: $f includes $inc, in no layer"; fail=1; }
    elif [ "$theirs" -gt "$mine" ]; then
      echo "layers: $f (layer $mine) includes $inc (layer $theirs)"; fail=1
    fi
  done < <(sed -n 's/^#include "\(.*\)"/\1/p' "$f")
  # a .c file that includes another .c takes on its layer's includes (override.c)
  if grep -nE '^(extern )?[a-z_][a-z_0-9 *]* \**[a-z_][a-z_0-9]*\([^)]*\);' "$f" | grep -v '^[0-9]*:static' |
     grep -qv '\.h:' && [[ $f == *.c ]]; then
    echo "layers: $f declares functions itself (declare them in a header):"
    grep -nE '^(extern )?[a-z_][a-z_0-9 *]* \**[a-z_][a-z_0-9]*\([^)]*\);' "$f" | grep -v '^[0-9]*:static'
    fail=1
  fi
done
if [ $fail = 0 ]; then echo "layers: OK (${#level[@]} units in ${#LAYERS[@]} layers)"; fi
exit $fail
