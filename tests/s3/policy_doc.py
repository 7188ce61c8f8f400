#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# Checks that the example policy in docs/deploy.md is exactly what scripts/bucket-policy.py prints
# for the example's command, so the page cannot drift from the generator the e2e tests apply.
"""Usage: policy_doc.py DEPLOY_MD BUCKET_POLICY_PY"""
import re
import shlex
import subprocess
import sys


def main():
    if len(sys.argv) != 3:
        sys.stderr.write(__doc__ + "\n")
        return 2
    doc = open(sys.argv[1], encoding="utf-8").read()
    marker = doc.find("<!-- policy-example")
    if marker < 0:
        print(f"FAIL: {sys.argv[1]}: no '<!-- policy-example' marker")
        return 1
    blocks = re.findall(r"```(\w+)\n(.*?)```", doc[marker:], re.S)
    if len(blocks) < 2 or blocks[0][0] != "sh" or blocks[1][0] != "json":
        print("FAIL: the marker is not followed by a ```sh block and a ```json block")
        return 1
    cmd = shlex.split(blocks[0][1].replace("\\\n", " "))
    if not cmd or cmd[0] != "scripts/bucket-policy.py" or ">policy.json" not in cmd:
        print(f"FAIL: the sh block is not 'scripts/bucket-policy.py ... >policy.json': {cmd}")
        return 1
    args = [a for a in cmd[1:] if a != ">policy.json"]
    out = subprocess.run([sys.executable, sys.argv[2]] + args, capture_output=True, text=True)
    if out.returncode != 0:
        print(f"FAIL: bucket-policy.py exited {out.returncode}: {out.stderr.strip()}")
        return 1
    if out.stdout != blocks[1][1]:
        print("FAIL: docs/deploy.md's example policy differs from what bucket-policy.py prints:")
        sys.stdout.write(out.stdout)
        return 1
    print(f"ok   the example policy ({len(out.stdout.splitlines())} lines) is the generator's output")
    return 0


if __name__ == "__main__":
    sys.exit(main())
