#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `meson install` yields a usable library: headers, pkg-config file, static and shared libraries
# and the CLI; a program built with `pkg-config --cflags --libs pulseweights` runs, linked to the
# shared and (with --static) to the static library; both libraries define as global only the public
# pulse_* API, declared in the installed headers; the Python package lands in python3's purelib.
set -u
build=${PULSE_BUILD:?PULSE_BUILD is not set}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
DESTDIR="$tmp/root" meson install -C "$build" --quiet --no-rebuild >"$tmp/install.log" 2>&1 \
  || { cat "$tmp/install.log"; echo "FAIL: meson install"; exit 1; }
pc=$(find "$tmp/root" -name pulseweights.pc | head -1)
[ -n "$pc" ] || { echo "FAIL: no pulseweights.pc installed"; exit 1; }
prefix=$(sed -n 's/^prefix=//p' "$pc")
for f in bin/pulse include/pulseweights.h include/pulseweights/patch.h; do
  [ -e "$tmp/root$prefix/$f" ] || { echo "FAIL: $prefix/$f not installed"; fail=1; }
done
so=$(find "$tmp/root" -name 'libpulseweights.so*' -type f | head -1)
a=$(find "$tmp/root" -name 'libpulseweights.a' | head -1)
[ -n "$so" ] && [ -n "$a" ] || { echo "FAIL: shared or static library missing"; exit 1; }

# What each library offers the program it is linked into: the shared library's dynamic exports,
# the static archive's global definitions. Internal names there clash with the user's own.
nm -D --defined-only "$so" | awk 'NF == 3 && $2 ~ /^[TDBRVW]$/ {print $3}' | sort -u >"$tmp/so.syms"
nm -g --defined-only "$a" | awk 'NF == 3 {print $3}' | sort -u >"$tmp/a.syms"
for lib in so a; do
  [ -s "$tmp/$lib.syms" ] || { echo "FAIL: libpulseweights.$lib: no global symbols at all"; fail=1; continue; }
  others=$(grep -v '^pulse_' "$tmp/$lib.syms" || true)
  [ -z "$others" ] || { echo "FAIL: libpulseweights.$lib: $(wc -w <<<"$others") global symbols outside pulse_*: $(tr "\n" " " <<<"$others" | head -c 400)"; fail=1; }
  undeclared=$(grep '^pulse_' "$tmp/$lib.syms" | while read -r n; do
    grep -rqw -- "$n" "$tmp/root$prefix/include" || echo "$n"; done)
  [ -z "$undeclared" ] || { echo "FAIL: libpulseweights.$lib: $(wc -w <<<"$undeclared") global pulse_* names not in the installed headers: $(tr "\n" " " <<<"$undeclared" | head -c 400)"; fail=1; }
done
cmp -s "$tmp/so.syms" "$tmp/a.syms" \
  || { echo "FAIL: the static and shared libraries define different global names:"; diff "$tmp/so.syms" "$tmp/a.syms" | head -20; fail=1; }

cat >"$tmp/use.c" <<'C'
#include <pulseweights.h>
#include <stdio.h>
#include <string.h>
int main(void)
{
    pulse_ckpt *c = NULL;
    int r = pulse_ckpt_open(&c, "/nonexistent/model.safetensors", PULSE_CKPT_READ);
    printf("%s | %s\n", pulse_strerror(r), pulse_last_error());
    return r == PULSE_ERR_IO || r == PULSE_ERR_NOTFOUND ? 0 : 1;
}
C
export PKG_CONFIG_SYSROOT_DIR="$tmp/root" PKG_CONFIG_PATH=$(dirname "$pc")
# shellcheck disable=SC2046
if cc -o "$tmp/use" "$tmp/use.c" $(pkg-config --cflags --libs pulseweights) 2>"$tmp/cc.log"; then
  out=$(LD_LIBRARY_PATH=$(dirname "$so") "$tmp/use") || { echo "FAIL: program against the shared library: $out"; fail=1; }
  grep -q nonexistent <<<"$out" || { echo "FAIL: error detail does not name the file: $out"; fail=1; }
else
  cat "$tmp/cc.log"; echo "FAIL: could not build against the installed headers and library"; fail=1
fi
# The static archive alone: -l:libpulseweights.a in place of -lpulseweights (which picks the .so),
# with its Libs.private and the dependencies from --static. Every internal reference must resolve
# inside the archive, and the program must not need libpulseweights.so.
# A sanitized build's archive holds instrumented code: the program links the sanitizer's runtime too.
sanitize=$(meson introspect --buildoptions "$build" | tr -d ' \n' | grep -o '{"name":"b_sanitize","value":"[a-z,]*"' || true)
sanitize=${sanitize##*:}
san_flags=()
if [ -n "$sanitize" ] && [ "$sanitize" != '"none"' ]; then
  san_flags=("-fsanitize=$(tr -d '"' <<<"$sanitize")")
fi
static_link() {  # LIBS...: links $tmp/use-static, -lpulseweights taken from the archive
  local libs=" $* "
  # shellcheck disable=SC2046,SC2086
  cc "${san_flags[@]}" -o "$tmp/use-static" "$tmp/use.c" $(pkg-config --cflags pulseweights) \
    ${libs/ -lpulseweights / -l:libpulseweights.a } 2>"$tmp/cc-static.log"
}
linked=0
# shellcheck disable=SC2046
if static_link $(pkg-config --static --libs pulseweights); then
  linked=1
else
  # A distribution's libcurl.pc may name, for --static, libraries whose development files are
  # not installed. Then link the dependencies shared: the archive and its own Libs.private
  # (pkg-config without traversal, the depth that names the package itself) are what is tested.
  reqs=$(pkg-config --print-requires-private pulseweights)
  echo 'int main(void) { return 0; }' >"$tmp/empty.c"
  # shellcheck disable=SC2046,SC2086
  if ! cc -o "$tmp/empty" "$tmp/empty.c" $(pkg-config --static --libs $reqs) >"$tmp/deps.log" 2>&1; then
    own=
    for depth in 1 2; do
      own=$(pkg-config --static --libs --maximum-traverse-depth=$depth pulseweights)
      [[ " $own " == *" -lpulseweights "* ]] && break
    done
    echo "install: note: the dependencies' own --static libraries do not link here ($(grep -o 'cannot find -l[^:]*' "$tmp/deps.log" | sort -u | sed 's/cannot find //' | tr '\n' ' ')); linking libpulseweights.a with them shared"
    # shellcheck disable=SC2046,SC2086
    static_link $own $(pkg-config --libs $reqs) && linked=1
  fi
fi
if [ $linked -eq 1 ]; then
  if readelf -d "$tmp/use-static" | grep -q 'NEEDED.*libpulseweights'; then
    echo "FAIL: the statically linked program needs libpulseweights.so"; fail=1
  fi
  out=$(env -u LD_LIBRARY_PATH "$tmp/use-static") || { echo "FAIL: program against the static library: $out"; fail=1; }
  grep -q nonexistent <<<"$out" || { echo "FAIL: static: error detail does not name the file: $out"; fail=1; }
else
  cat "$tmp/cc-static.log"; echo "FAIL: could not link a program against the installed libpulseweights.a alone"; fail=1
fi

# The Python bindings (-Dpython, on when meson's python3 is found): the package lands in that
# python's purelib (a directory on its sys.path for this prefix) and, imported from the staged
# copy, reports meson's version and finds the staged library through LD_LIBRARY_PATH.
pyinst=$(find "$tmp/root" -path '*/pulseweights/_installed.py' | head -1)
if [ -z "$pyinst" ]; then
  # meson's own python3 is always found: only -Dpython=disabled leaves the package out.
  pyopt=$(meson introspect --buildoptions "$build" | tr -d ' \n' | grep -o '{"name":"python","value":"[a-z]*"' || true)
  if [ "${pyopt##*:}" = '"disabled"' ]; then
    echo "install: python bindings not installed (-Dpython=disabled)"
  else
    echo "FAIL: the python package was not installed (-Dpython=${pyopt##*:})"; fail=1
  fi
else
  pkgdir=$(dirname "$pyinst")
  purelib=$(dirname "${pkgdir#"$tmp/root"}")
  py=$(sed -n 's/^PYTHON = "\(.*\)"$/\1/p' "$pyinst")
  want=$(meson introspect --projectinfo "$build" | "$py" -c 'import json, sys; print(json.load(sys.stdin)["version"])')
  for f in __init__.py _lib.py _version.py sync.py tensors.py loco.py py.typed; do
    [ -f "$pkgdir/$f" ] || { echo "FAIL: python: $purelib/pulseweights/$f not installed"; fail=1; }
  done
  [ ! -e "$pkgdir/_installed.py.in" ] || { echo "FAIL: python: the template _installed.py.in was installed"; fail=1; }
  if "$py" -c 'import sys; sys.exit(0 if sys.argv[1] in sys.path else 1)' "$purelib"; then
    :
  elif [ "$prefix" = /usr ] || [ "$prefix" = /usr/local ]; then
    echo "FAIL: python: installed into $purelib, not on $py's sys.path"; fail=1
  else
    echo "install: note: $purelib is not on $py's sys.path (prefix $prefix): PYTHONPATH needed"
  fi
  # A sanitized library cannot be loaded into an uninstrumented python3 (its runtime must come
  # first): the import is checked on unsanitized builds only.
  if [ -n "$sanitize" ] && [ "$sanitize" != '"none"' ]; then
    echo "install: python import not checked in a sanitized build ($sanitize)"
  else
  out=$(cd "$tmp" && env -u PYTHONPATH -u PULSE_LIB PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$tmp/root$purelib" \
        LD_LIBRARY_PATH="$(dirname "$so")" "$py" -c '
import os, pulseweights as pw
print(os.path.dirname(os.path.abspath(pw.__file__)), pw.__version__, os.path.realpath(pw.lib_path))' 2>&1)
  [ "$out" = "$pkgdir $want $(readlink -f "$so")" ] \
    || { echo "FAIL: python: the staged package: '$out', wanted '$pkgdir $want $(readlink -f "$so")'"; fail=1; }
  fi
fi
[ $fail -eq 0 ] && echo "install: library (shared and static), headers, pkg-config, CLI and python package usable; only the public pulse_* API global"
exit $fail
