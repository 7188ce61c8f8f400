#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's first command: set up, build, and run the demo on the embedded file:// store.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec ./build/tools/pulse demo "$@"
