#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Context-coded patches (format 5) through a store: `pulse publish --context`, followers that pull
# every step and one that catches up over several, the audit, all bit for bit.
set -u
P=${PULSE_BIN:?}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
fails=0; n=0
ok()  { n=$((n+1)); if ! "$@" >out 2>err; then echo "FAIL (exit $?): $*"; cat err; fails=$((fails+1)); fi; }
check() { n=$((n+1)); if ! eval "$1"; then echo "FAIL: $1"; fails=$((fails+1)); fi; }
pub() { ok "$P" publish --store "file://$T/store" --run r --key tr.key --state st --context "$@"; }
pull() { ok "$P" pull --store "file://$T/store" --run r --trust tr.pub --state "$1" --weights "$2"; }
id() { "$P" hash "$1"; }

"$P" synth --params 20M --steps 3 --out syn --threads 2 >/dev/null || { echo "FAIL: synth"; exit 1; }
"$P" keygen tr >/dev/null || { echo "FAIL: keygen"; exit 1; }

pub syn/step-000000.safetensors
pull f1 w1.safetensors
for s in 1 2 3; do
  pub syn/step-00000$s.safetensors
  pull f1 w1.safetensors
  check "[ \"\$(id w1.safetensors)\" = \"\$(id syn/step-00000$s.safetensors)\" ]"
done
# The patches in the store are format 5.
vers=$(find store -type f -exec python3 -c 'import sys; b=open(sys.argv[1],"rb").read(12); print(int.from_bytes(b[8:12],"little")) if b[:8]==b"PULSEPCH" else None' {} \; | sort -u | tr '\n' ' ')
check "[ '$vers' = '5 ' ]"
# A follower that starts late: a keyframe, then it catches up through every patch.
cp syn/step-000000.safetensors w2.safetensors
pull f2 w2.safetensors
check "[ \"\$(id w2.safetensors)\" = \"\$(id syn/step-000003.safetensors)\" ]"
# The audit checks every patch without the weights (what needs no base) and passes.
ok "$P" manifest audit --store "file://$T/store" --run r --trust tr.pub

echo "$n passed minus $fails failed"
[ "$fails" -eq 0 ]
