#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_changes against the test RGW: every publish from changes, commit and pull through s3://.
#   changes_rgw.sh TEST_CHANGES    (PULSE_RGW_ENV: the env file tests/s3/rgw.sh start wrote)
set -euo pipefail
if [ -z "${PULSE_RGW_ENV:-}" ] || [ ! -f "${PULSE_RGW_ENV:-}" ]; then
  echo "SKIP: PULSE_RGW_ENV is not set to an RGW env file (scripts/test.sh starts one; docs/testing-s3.md)"
  exit 77
fi
# shellcheck disable=SC1090
. "$PULSE_RGW_ENV"
PULSE_TEST_STORE="s3://$PULSE_TEST_BUCKET/changes-$$-$RANDOM" exec "$1"
