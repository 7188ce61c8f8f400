#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# examples/serve --quick through the real RGW: each rank's slices are ranged GETs of the patch object.
set -euo pipefail
[ -n "${PULSE_RGW_ENV:-}" ] || { echo "serve-rgw: PULSE_RGW_ENV is not set (tests/s3/rgw.sh start), skipping"; exit 77; }
# shellcheck disable=SC1090
. "$PULSE_RGW_ENV"
out=$(bash "$(dirname "$0")/../../examples/serve/run.sh" --quick --store "s3://$PULSE_TEST_BUCKET/serve-$$-$RANDOM")
echo "$out"
# The ranks fetched part of each patch, not all of it.
frac=$(echo "$out" | sed -n 's/.*patch (\([0-9.]*\) of it.*/\1/p')
[ -n "$frac" ] && awk -v f="$frac" 'BEGIN { exit !(f > 0 && f < 0.9) }' || { echo "serve-rgw: FAIL: fraction '$frac'"; exit 1; }
