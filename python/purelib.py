# SPDX-License-Identifier: Apache-2.0
# Prints the directory on this python's sys.path where a package under PREFIX belongs (empty: none).
import os
import sys

prefix = os.path.abspath(sys.argv[1])
for entry in sys.path:
    if not entry or not os.path.isabs(entry) or not entry.endswith(("site-packages", "dist-packages")):
        continue
    rel = os.path.relpath(entry, prefix)
    # /usr/local/lib/... is not a /usr package directory: the entry must be PREFIX/lib*/...
    if rel.startswith("lib"):
        print(entry)
        break
