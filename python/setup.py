# SPDX-License-Identifier: Apache-2.0
# setuptools glue for pyproject.toml: the version from ../meson.build, written into the installed package.
import os
import runpy

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
# Run as a file, not imported: importing the package would load the library.
_meta = runpy.run_path(os.path.join(HERE, "pulseweights", "_version.py"))


def _version():
    root = _meta["source_root"]()
    if root:
        return _meta["meson_version"](os.path.join(root, "meson.build"))
    pkg_info = os.path.join(HERE, "PKG-INFO")   # an sdist carries the version it was made with
    if os.path.isfile(pkg_info):
        with open(pkg_info, encoding="utf-8") as f:
            for line in f:
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
    raise SystemExit("pulseweights: ../meson.build not found; install from the repository's python/ directory")


VERSION = _version()


class BuildPy(build_py):
    """Also writes pulseweights/_installed.py (the version; no libdir: the library is found by soname)."""

    def run(self):
        super().run()
        path = os.path.join(self.build_lib, "pulseweights", "_installed.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write('"""Written by pip install (python/setup.py)."""\nVERSION = %r\nLIBDIR = None\nPYTHON = None\n' % VERSION)


setup(version=VERSION, cmdclass={"build_py": BuildPy})
