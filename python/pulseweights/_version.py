# SPDX-License-Identifier: Apache-2.0
"""The package's version and where meson installed the library: one source, meson.build's project(version:)."""
import os
import re

# project('pulse', 'c', version: '0.1.0', ...): the first version: inside project( ... ).
_PROJECT_VERSION = re.compile(r"\bproject\s*\((?:[^()]|\([^()]*\))*?\bversion\s*:\s*'([^']+)'", re.S)


def meson_version(meson_build: str) -> str:
    """The project version declared in this meson.build."""
    with open(meson_build, encoding="utf-8") as f:
        m = _PROJECT_VERSION.search(f.read())
    if not m:
        raise ValueError("%s: no project(version: '...')" % meson_build)
    return m.group(1)


def source_root():
    """The repository this package sits in (python/pulseweights/ of a checkout), or None."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return root if os.path.isfile(os.path.join(root, "meson.build")) else None


# _installed.py is written where the package is installed (meson install: python/meson.build;
# pip: python/setup.py), never kept in the source tree; a checkout reads its meson.build.
try:
    from ._installed import LIBDIR, VERSION
except ImportError:
    LIBDIR = None
    _root = source_root()
    VERSION = meson_version(os.path.join(_root, "meson.build")) if _root else "0+unknown"
