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
# Context-coded chunks (format 5) need chunks large enough to win over format 4: a small
# Llama-shaped step in 64K-element chunks. Without the cache, pass 1 checks such a chunk
# against the base without finding its positions, and pass 2 decodes it.
P synth --out s --params 1M --steps 1 --threads 1 >/dev/null
P diff s/step-000000.safetensors s/step-000001.safetensors -o ctx.patch --context --chunk 64K >/dev/null
nctx=$(python3 -c '
import importlib.util, struct, sys
spec = importlib.util.spec_from_file_location("m", sys.argv[1]); m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
b = open(sys.argv[2], "rb").read(); d0 = 104 + struct.unpack_from("<Q", b, 88)[0] + 32
print(sum(1 for (e, o, pl, vl) in m.parse(b) if pl and 64 <= b[d0 + o] <= 67))' "$here/mutate_patch.py" ctx.patch)
[ "$nctx" -gt 0 ] || fail "the context patch has no context-coded chunk"
total=0 refused=0 changed=0 applied=0
for kind in ulp abs ctx; do
  base=old.safetensors want=new.safetensors
  [ "$kind" = ctx ] && base=s/step-000000.safetensors want=s/step-000001.safetensors
  for cache in 64M 0; do   # the patch as written applies exactly, from the cache and without
    cp "$base" t.safetensors
    PULSE_APPLY_CACHE=$cache P apply --in-place t.safetensors "$kind.patch" --threads 2 >/dev/null \
      || fail "$kind.patch (cache $cache) was refused"
    cmp -s t.safetensors "$want" || fail "$kind.patch (cache $cache) did not make the new checkpoint"
  done
  python3 "$here/mutate_patch.py" "$kind.patch" "v-$kind" "$count" 7
  for cache in 64M 0; do   # pass 2 from pass 1's cache, and every chunk decoded again
    for v in "v-$kind"/*.patch; do
      total=$((total + 1))
      cp "$base" t.safetensors
      if PULSE_APPLY_CACHE=$cache P apply --in-place t.safetensors "$v" --threads 2 >/dev/null 2>err.log; then
        # Accepted: only a patch that still makes exactly the new checkpoint may be.
        cmp -s t.safetensors "$want" || fail "$v ($kind, cache $cache) was accepted and made other bytes"
        applied=$((applied + 1))
        continue
      fi
      refused=$((refused + 1))
      [ "$(wc -l <err.log)" -ge 1 ] || fail "$v refused without a word"
      if ! cmp -s t.safetensors "$base"; then
        changed=$((changed + 1))
        echo "changed: $v ($kind, cache $cache): $(head -c 300 err.log)" >&2
      fi
    done
  done
done
echo "variants $total: refused $refused, accepted $applied, refused but the target changed: $changed"
[ "$refused" -gt $((total / 2)) ] || fail "too few refusals ($refused of $total): the mutations do not bite"
[ "$changed" = 0 ] || fail "$changed refused in-place applies left the target changed"
# A large undo (PULSE_UNDO_MEMORY) lives in a temporary unlinked as soon as it is made.
[ -z "$(ls | grep -F '.undo.')" ] || fail "an undo temporary was left beside the target"
echo "ok   every refused in-place apply left the target byte-identical"
