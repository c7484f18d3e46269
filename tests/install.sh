#!/usr/bin/env bash
# The install, as a user of it sees it: `cmake --install BUILD --prefix DIR`
# into a fresh directory, then a small program built against DIR three ways
# (pkg-config; CMake find_package with hakmem::hakmem; hakmem::hakmem_static)
# must get malloc from the installed library, and DIR/bin/hakmem must preload
# the library installed beside it. Without pkg-config the CMake builds still
# run and the test ends as skipped (77).
#
# Usage: install.sh CMAKE BUILD_DIR CC [GENERATOR]
set -u
CMAKE=${1:?cmake}
BUILD=${2:?build dir}
CC=${3:?C compiler}
GENERATOR=${4:-Unix Makefiles}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hakmem-install.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
PREFIX=$WORK/prefix
failed=0
fail() { echo "install: FAIL: $*"; failed=1; }
unset LD_PRELOAD HAKMEM_LIBRARY PKG_CONFIG_PATH

if ! "$CMAKE" --install "$BUILD" --prefix "$PREFIX" >"$WORK/install.log" 2>&1; then
  echo "install: FAIL: cmake --install:"; cat "$WORK/install.log"; exit 1
fi
PC=$(find "$PREFIX" -name hakmem.pc)
[ -n "$PC" ] || { echo "install: FAIL: no hakmem.pc installed"; exit 1; }
LIBDIR=$(dirname "$(dirname "$PC")")
echo "install: installed into $PREFIX (libdir ${LIBDIR#"$PREFIX"/})"
grep -qx "prefix=$PREFIX" "$PC" || { fail "hakmem.pc names another prefix:"; cat "$PC"; }

# Says where malloc came from: nonzero hak_owns, and the file that holds
# hak_owns (the installed library, or the program itself when static).
cat >"$WORK/consumer.c" <<'EOF2'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <hakmem.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  void *p = malloc(10);
  Dl_info info = {0};
  dladdr((void *)hak_owns, &info);
  printf("owned=%d from=%s\n", hak_owns(p) != 0, info.dli_fname ? info.dli_fname : "?");
  free(p);
  return 0;
}
EOF2

# check NAME PROGRAM WANT_FROM: runs PROGRAM, which must own its malloc and
# have hak_owns from WANT_FROM.
check() {
  local out
  out=$("$2" 2>&1) || { fail "$1: exit status $?: $out"; return; }
  case $out in
    "owned=1 from=$3") echo "install: $1: malloc is hakmem's ($3)" ;;
    *) fail "$1: want 'owned=1 from=$3', got '$out'" ;;
  esac
}

pkgconfig=0
if command -v pkg-config >/dev/null; then
  pkgconfig=1
  export PKG_CONFIG_PATH=$LIBDIR/pkgconfig
  libdir=$(pkg-config --variable=libdir hakmem)
  [ "$libdir" = "$LIBDIR" ] || fail "pkg-config libdir is $libdir, want $LIBDIR"
  # shellcheck disable=SC2046
  if "$CC" -o "$WORK/consumer-pc" "$WORK/consumer.c" $(pkg-config --cflags --libs hakmem) \
       -Wl,-rpath,"$libdir" -ldl 2>"$WORK/cc.log"; then
    check pkg-config "$WORK/consumer-pc" "$LIBDIR/libhakmem.so.0"
  else
    fail "cc with pkg-config --cflags --libs hakmem ($(pkg-config --cflags --libs hakmem)):"; cat "$WORK/cc.log"
  fi
  unset PKG_CONFIG_PATH
else
  echo "install: pkg-config not found (Debian: pkg-config), its half skipped"
fi

mkdir "$WORK/project"
cp "$WORK/consumer.c" "$WORK/project/"
cat >"$WORK/project/CMakeLists.txt" <<'EOF2'
cmake_minimum_required(VERSION 3.16)
project(consumer C)
find_package(hakmem REQUIRED)
add_executable(consumer consumer.c)
target_link_libraries(consumer PRIVATE hakmem::hakmem ${CMAKE_DL_LIBS})
add_executable(consumer_static consumer.c)
target_link_libraries(consumer_static PRIVATE hakmem::hakmem_static ${CMAKE_DL_LIBS})
EOF2
if "$CMAKE" -S "$WORK/project" -B "$WORK/project/build" -G "$GENERATOR" -DCMAKE_C_COMPILER="$CC" \
     -DCMAKE_PREFIX_PATH="$PREFIX" >"$WORK/cmake.log" 2>&1 &&
   "$CMAKE" --build "$WORK/project/build" >>"$WORK/cmake.log" 2>&1; then
  check "CMake hakmem::hakmem" "$WORK/project/build/consumer" "$LIBDIR/libhakmem.so.0"
  check "CMake hakmem::hakmem_static" "$WORK/project/build/consumer_static" "$WORK/project/build/consumer_static"
else
  fail "the CMake consumer does not build:"; tail -30 "$WORK/cmake.log"
fi

# The command preloads the library installed beside it, not the build's.
out=$("$PREFIX/bin/hakmem" run -- env 2>&1) || fail "bin/hakmem run: exit status $?: $out"
grep -qx "LD_PRELOAD=$LIBDIR/libhakmem.so" <<<"$out" || fail "bin/hakmem run: want LD_PRELOAD=$LIBDIR/libhakmem.so: $(grep LD_PRELOAD <<<"$out")"
"$PREFIX/bin/hakmem" options | grep -q '^HAKMEM_STATS=' || fail "bin/hakmem options: no HAKMEM_STATS line"

[ $failed -eq 0 ] || exit 1
[ $pkgconfig -eq 1 ] || { echo "install: ok without pkg-config: skipped"; exit 77; }
echo "install: ok"
