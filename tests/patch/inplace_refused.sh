#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# pulse apply --in-place of malformed patches whose digests were made right: every refused apply leaves the target byte-identical.
set -euo pipefail
: "${PULSE_BIN:?PULSE_BIN must name the pulse binary (meson test sets it)}"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-inplace.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
P() { timeout 120 "$PULSE_BIN" "$@"; }
count=${PULSE_INPLACE_VARIANTS:-150}
cd "$work"
# Every coding path (tests/fuzz/patch_seeds.py's checkpoints): BF16 at 2-, 4- and 8-bit ulp
# symbols, F32, F16, F8, an OPAQUE I64 table, in 1K-element chunks; ulp and abs values.
python3 "$here/../fuzz/patch_seeds.py" --checkpoints . >/dev/null
P diff old.safetensors new.safetensors -o ulp.patch --chunk 1K >/dev/null
P diff old.safetensors new.safetensors -o abs.patch --values abs --chunk 1K >/dev/null
total=0 refused=0 changed=0 applied=0
for kind in ulp abs; do
  python3 "$here/mutate_patch.py" "$kind.patch" "v-$kind" "$count" 7
  for cache in 64M 0; do   # pass 2 from pass 1's cache, and every chunk decoded again
    for v in "v-$kind"/*.patch; do
      total=$((total + 1))
      cp old.safetensors t.safetensors
      if PULSE_APPLY_CACHE=$cache P apply --in-place t.safetensors "$v" --threads 2 >/dev/null 2>err.log; then
        # Accepted: only a patch that still makes exactly the new checkpoint may be.
        cmp -s t.safetensors new.safetensors || fail "$v ($kind, cache $cache) was accepted and made other bytes"
        applied=$((applied + 1))
        continue
      fi
      refused=$((refused + 1))
      [ "$(wc -l <err.log)" -ge 1 ] || fail "$v refused without a word"
      if ! cmp -s t.safetensors old.safetensors; then
        changed=$((changed + 1))
        echo "changed: $v ($kind, cache $cache): $(head -c 300 err.log)" >&2
      fi
    done
  done
done
echo "variants $total: refused $refused, accepted $applied, refused but the target changed: $changed"
[ "$refused" -gt $((total / 2)) ] || fail "too few refusals ($refused of $total): the mutations do not bite"
[ "$changed" = 0 ] || fail "$changed refused in-place applies left the target changed"
echo "ok   every refused in-place apply left the target byte-identical"
