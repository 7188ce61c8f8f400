# SPDX-License-Identifier: Apache-2.0
# Finds the test RGW for python e2e tests: the AWS_* variables, or the env file named by PULSE_RGW_ENV;
# exits 77 (meson's skip) with a visible message when there is none.
import os
import re
import sys

NEEDED = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "PULSE_TEST_BUCKET")


def load_rgw_env():
    path = os.environ.get("PULSE_RGW_ENV")
    if path and os.path.isfile(path):
        for line in open(path):
            m = re.match(r"\s*export\s+([A-Z0-9_]+)=(\S*)\s*$", line)
            if m:
                os.environ[m.group(1)] = m.group(2)
    if not all(os.environ.get(k) for k in NEEDED):
        print("SKIP: no RGW (run scripts/test.sh)")
        sys.exit(77)
