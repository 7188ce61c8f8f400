#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reads meson's testlog JSON files and prints one closing line: "N passed, N failed, N skipped".

Exit status 1 when anything failed (a timeout counts as a failure), when a log is missing,
or when no test ran at all; a skipped test is never counted as passed."""
import json
import sys


def main(argv):
    infra = 0
    paths = []
    it = iter(argv)
    for a in it:
        if a == "--infra-failures":
            infra = int(next(it))
        else:
            paths.append(a)
    passed = failed = skipped = 0
    failures = []
    for path in paths:
        # "build", or "build/avx2" for a rerun's --logbase: says which run a failure was in
        base = path.rsplit("/", 1)[-1].removesuffix(".json")
        run = path.split("/")[0] + ("" if base == "testlog" else f"/{base}")
        try:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    line = line.strip()
                    if not line:
                        continue
                    t = json.loads(line)
                    r = t.get("result")
                    name = f'{run}:{t.get("name")}'
                    if r in ("OK", "EXPECTEDFAIL"):
                        passed += 1
                    elif r == "SKIP":
                        skipped += 1
                    else:
                        failed += 1
                        failures.append(f"{name} ({r})")
        except OSError as e:
            failed += 1
            failures.append(f"missing test log {path}: {e.strerror}")
    failed += infra
    if infra:
        failures.append(f"{infra} infrastructure step(s) failed (see above)")
    for f in failures:
        print(f"FAILED: {f}")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
