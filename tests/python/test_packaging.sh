#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `pip install ./python` offline (--no-build-isolation, into a --target dir and a venv) yields a package that imports from there and finds the library.
set -u
py=${1:?usage: test_packaging.sh PYTHON}
src=${PULSE_SRC:?PULSE_SRC is not set}
build=${PULSE_BUILD:?PULSE_BUILD is not set}
want=${PULSE_PROJECT_VERSION:?PULSE_PROJECT_VERSION is not set}
for m in pip setuptools venv; do
  "$py" -c "import $m" 2>/dev/null || { echo "SKIP: $py has no $m (Debian: python3-pip python3-setuptools python3-venv)"; exit 77; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
so=$(readlink -f "$build/libpulseweights.so")
# pip builds in the source directory (build/, *.egg-info): build from a copy laid out like the
# repository (python/ beside the meson.build that holds the version), never from the checkout.
mkdir -p "$tmp/src"
cp "$src/meson.build" "$tmp/src/"
cp -r "$src/python" "$tmp/src/python"
rm -rf "$tmp/src/python/build" "$tmp/src/python/"*.egg-info "$tmp/src/python/pulseweights/_installed.py"
find "$tmp/src/python" -name __pycache__ -prune -exec rm -rf {} +

# Only what the test sets: no source tree on the path, no PULSE_LIB unless given, no network.
clean=(env -u PYTHONPATH -u PULSE_LIB -u LD_LIBRARY_PATH PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1
       PYTHONDONTWRITEBYTECODE=1)

# check WHERE PYTHON [VAR=VALUE...]: imports pulseweights with PYTHON from WHERE (cwd: $tmp) and checks it.
check() {
  local where=$1 python=$2
  shift 2
  local out
  if ! out=$(cd "$tmp" && "${clean[@]}" "$@" "$python" - "$where" "$want" "$so" 2>&1 <<'PY'
import os, sys
import pulseweights as pw
where, want, so = sys.argv[1:4]
problems = []
if not os.path.abspath(pw.__file__).startswith(os.path.abspath(where) + os.sep):
    problems.append("imported from %s, not %s" % (pw.__file__, where))
if pw.__version__ != want:
    problems.append("__version__ %r, meson's %r" % (pw.__version__, want))
if os.path.realpath(pw.lib_path) != so:
    problems.append("library %s, not %s" % (os.path.realpath(pw.lib_path), so))
if not os.path.isfile(os.path.join(os.path.dirname(pw.__file__), "py.typed")):
    problems.append("no py.typed marker")
import array
a = array.array("f", [1.0, 2.0])
sid = pw.state_id([pw.Tensor("x", a.buffer_info()[0], "F32", (2,), owner=a)])
if len(sid) != 64:
    problems.append("state_id %r" % sid)
print("; ".join(problems) if problems else "ok %s %s" % (pw.__version__, pw.lib_path))
sys.exit(1 if problems else 0)
PY
  ); then
    echo "FAIL: $where with $*: $out"; fail=1
  fi
}

pip_install() {   # pip_install PYTHON ARGS...: offline, the system's setuptools, no dependencies
  local python=$1
  shift
  (cd "$tmp" && "${clean[@]}" "$python" -m pip install --no-build-isolation --no-deps --no-index --quiet \
     "$@" "$tmp/src/python") >"$tmp/pip.log" 2>&1 || { cat "$tmp/pip.log"; echo "FAIL: pip install $*"; return 1; }
}

# 1. --target: a plain directory on PYTHONPATH.
if pip_install "$py" --target "$tmp/site"; then
  [ -f "$tmp/site/pulseweights/_installed.py" ] || { echo "FAIL: --target: no _installed.py (version)"; fail=1; }
  check "$tmp/site" "$py" PYTHONPATH="$tmp/site" LD_LIBRARY_PATH="$build"   # the soname, through the loader's path
  check "$tmp/site" "$py" PYTHONPATH="$tmp/site" PULSE_LIB="$build/libpulseweights.so"
  # Nothing to find: the installed copy has no build tree beside it; the error says what to set.
  if ! ldconfig -p 2>/dev/null | grep -q libpulseweights; then
    out=$(cd "$tmp" && "${clean[@]}" PYTHONPATH="$tmp/site" "$py" -c 'import pulseweights' 2>&1)
    { [ $? -ne 0 ] && grep -q "ImportError: libpulseweights not found: set PULSE_LIB" <<<"$out"; } \
      || { echo "FAIL: no library anywhere: $out"; fail=1; }
  fi
else
  fail=1
fi

# 2. a venv (with the system's site-packages: numpy, torch, setuptools, pip).
if "$py" -m venv --system-site-packages --without-pip "$tmp/venv" >"$tmp/venv.log" 2>&1; then
  if pip_install "$tmp/venv/bin/python"; then
    site=$("$tmp/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    check "$site" "$tmp/venv/bin/python" LD_LIBRARY_PATH="$build"
  else
    fail=1
  fi
else
  cat "$tmp/venv.log"; echo "FAIL: $py -m venv"; fail=1
fi
[ $fail -eq 0 ] && echo "packaging: pip install ./python (offline) into --target and a venv imports and finds the library"
exit $fail
