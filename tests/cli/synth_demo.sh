#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# pulse synth / demo / bench from the outside: files, determinism, a sane changed fraction, the demo's round trip.
set -euo pipefail
: "${PULSE_BIN:?PULSE_BIN must name the pulse binary}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# --help of every verb built on the trainer: exit 0, usage on stdout.
for verb in synth bench demo; do
    "$PULSE_BIN" "$verb" --help > "$tmp/help" || fail "$verb --help exited non-zero"
    grep -q "usage: pulse $verb" "$tmp/help" || fail "$verb --help printed no usage"
done

# A tiny trajectory: four files, and the same bytes again with the same seed on one thread.
"$PULSE_BIN" synth --out "$tmp/a" --params 1M --steps 3 --seed 7 > "$tmp/a.log"
"$PULSE_BIN" synth --out "$tmp/b" --params 1M --steps 3 --seed 7 --threads 1 > /dev/null
"$PULSE_BIN" synth --out "$tmp/c" --params 1M --steps 1 --seed 8 > /dev/null
for k in 000000 000001 000002 000003; do
    f="$tmp/a/step-$k.safetensors"
    [ -s "$f" ] || fail "missing $f"
    cmp -s "$f" "$tmp/b/step-$k.safetensors" || fail "step $k differs between two runs with seed 7"
done
[ ! -e "$tmp/a/step-000004.safetensors" ] || fail "wrote more steps than asked"
cmp -s "$tmp/a/step-000001.safetensors" "$tmp/c/step-000001.safetensors" && fail "seed 8 gave the bytes of seed 7"
cmp -s "$tmp/a/step-000000.safetensors" "$tmp/a/step-000001.safetensors" && fail "step 1 equals step 0"

# --view fp16: F16 tensors of the same names and shapes, each value within a BF16 cell of the
# BF16 view's, more of them changing a step; deterministic; bf16 is the default byte for byte.
"$PULSE_BIN" synth --out "$tmp/h" --params 1M --steps 1 --seed 8 --view fp16 > "$tmp/h.log" || fail "synth --view fp16 failed"
"$PULSE_BIN" synth --out "$tmp/h2" --params 1M --steps 1 --seed 8 --view fp16 --threads 1 > /dev/null
cmp -s "$tmp/h/step-000001.safetensors" "$tmp/h2/step-000001.safetensors" || fail "--view fp16 is not deterministic"
"$PULSE_BIN" synth --out "$tmp/hb" --params 1M --steps 1 --seed 8 --view bf16 > /dev/null
cmp -s "$tmp/c/step-000001.safetensors" "$tmp/hb/step-000001.safetensors" || fail "--view bf16 is not the default"
grep -q "of FP16 values changed" "$tmp/h.log" || fail "synth --view fp16 does not say FP16"
python3 - "$tmp/c" "$tmp/h" <<'PY' || fail "synth --view fp16: wrong tensors"
import json, struct, sys
def load(d, step):
    b = open('%s/step-%06d.safetensors' % (d, step), 'rb').read(); n = struct.unpack_from('<Q', b)[0]
    return json.loads(b[8:8 + n]), b[8 + n:]
(hb, db), (hh, dh) = load(sys.argv[1], 1), load(sys.argv[2], 1)
db0, dh0 = load(sys.argv[1], 0)[1], load(sys.argv[2], 0)[1]
names = [k for k in hb if k != '__metadata__']
assert sorted(names) == sorted(k for k in hh if k != '__metadata__')
moved = {'BF16': 0, 'F16': 0}
for k in names:
    assert hb[k]['dtype'] == 'BF16' and hh[k]['dtype'] == 'F16' and hb[k]['shape'] == hh[k]['shape'], k
    ob, oh = hb[k]['data_offsets'], hh[k]['data_offsets']
    m = (ob[1] - ob[0]) // 2
    vb, vb0 = (struct.unpack_from('<%dH' % m, d, ob[0]) for d in (db, db0))
    vh, vh0 = (struct.unpack_from('<%dH' % m, d, oh[0]) for d in (dh, dh0))
    for x, y in zip(vb[:4096], struct.unpack_from('<%de' % m, dh, oh[0])[:4096]):
        xf = struct.unpack('<f', struct.pack('<I', x << 16))[0]
        assert abs(xf - y) <= abs(xf) * 2 ** -7 + 2 ** -24, (k, xf, y)   # half a BF16 ulp + half an F16 one
    moved['BF16'] += sum(a != b for a, b in zip(vb0, vb))
    moved['F16'] += sum(a != b for a, b in zip(vh0, vh))
assert moved['F16'] > 2 * moved['BF16'] > 0, moved
PY
if "$PULSE_BIN" synth --out "$tmp/x" --steps 1 --params 1M --view fp8 2> "$tmp/err"; then fail "--view fp8 accepted"; fi
grep -q -- "--view wants bf16 or fp16" "$tmp/err" || fail "--view fp8: the error does not name --view"

# --spread: 0 is the default init byte for byte; B > 0 draws other initial weights, deterministically.
"$PULSE_BIN" synth --out "$tmp/s0" --params 1M --steps 1 --seed 8 --spread 0 > /dev/null
cmp -s "$tmp/c/step-000001.safetensors" "$tmp/s0/step-000001.safetensors" || fail "--spread 0 changed the weights"
"$PULSE_BIN" synth --out "$tmp/s1" --params 1M --steps 1 --seed 8 --spread 16 > /dev/null
"$PULSE_BIN" synth --out "$tmp/s2" --params 1M --steps 1 --seed 8 --spread 16 --threads 1 > /dev/null
cmp -s "$tmp/c/step-000000.safetensors" "$tmp/s1/step-000000.safetensors" && fail "--spread 16 gave the default init"
cmp -s "$tmp/s1/step-000001.safetensors" "$tmp/s2/step-000001.safetensors" || fail "--spread 16 is not deterministic"

# --from: the float tensors of a real checkpoint are the starting weights. A BF16 checkpoint
# comes back as step 0 unchanged (same state id); an F32 one (tfjs_to_safetensors.py's output
# from a TF.js model: float32 kept, a quantized uint8 and an int32 weight left out) is trained
# with its shapes; a checkpoint with no float tensor, or --from with --params, is refused.
"$PULSE_BIN" synth --out "$tmp/f1" --steps 2 --from "$tmp/c/step-000001.safetensors" > "$tmp/f1.log" \
    || fail "synth --from a BF16 checkpoint failed: $(cat "$tmp/f1.log")"
[ "$("$PULSE_BIN" hash "$tmp/f1/step-000000.safetensors")" = "$("$PULSE_BIN" hash "$tmp/c/step-000001.safetensors")" ] \
    || fail "synth --from: step 0 is not the checkpoint it started from"
cmp -s "$tmp/f1/step-000000.safetensors" "$tmp/f1/step-000001.safetensors" && fail "synth --from: step 1 equals step 0"
mkdir -p "$tmp/tfjs"
python3 - "$tmp/tfjs" <<'PY'
import json, struct, sys
d = sys.argv[1]
w = [("conv/kernel", [3, 3, 2, 4], "float32", None), ("q", [5], "float32", {"dtype": "uint8", "scale": 0.1, "min": 0}),
     ("ids", [2], "int32", None), ("dense/bias", [4], "float32", None)]
data = b"".join(struct.pack("<%df" % 72, *[(i - 36) * 1e-3 for i in range(72)]) if n == "conv/kernel"
                else bytes(5) if n == "q" else struct.pack("<2i", 1, 2) if n == "ids" else struct.pack("<4f", 1, -2, 3e-8, 4)
                for n, _, _, _ in w)
man = [{"paths": ["m.bin"], "weights": [dict({"name": n, "shape": s, "dtype": t}, **({"quantization": q} if q else {}))
                                        for n, s, t, q in w]}]
json.dump({"format": "graph-model", "weightsManifest": man}, open(d + "/m.json", "w"))
open(d + "/m.bin", "wb").write(data)
PY
python3 "$PULSE_SRC/tools/bench/tfjs_to_safetensors.py" "$tmp/tfjs/m.safetensors" "$tmp/tfjs/m.json" > "$tmp/tfjs.log" \
    || fail "tfjs_to_safetensors.py failed: $(cat "$tmp/tfjs.log")"
grep -q ": 2 tensors, 76 float32 weights" "$tmp/tfjs.log" || fail "tfjs_to_safetensors.py: $(cat "$tmp/tfjs.log")"
"$PULSE_BIN" synth --out "$tmp/f2" --steps 1 --from "$tmp/tfjs/m.safetensors" --lr 1e-2 > "$tmp/f2.log" \
    || fail "synth --from an F32 checkpoint failed: $(cat "$tmp/f2.log")"
python3 - "$tmp/f2/step-000000.safetensors" "$tmp/f2/step-000001.safetensors" <<'PY' || fail "synth --from F32: wrong tensors"
import json, struct, sys
def hdr(p):
    f = open(p, "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); h.pop("__metadata__", None); return h, f.read()
h0, d0 = hdr(sys.argv[1]); h1, d1 = hdr(sys.argv[2])
assert sorted(h0) == ["m/conv/kernel", "m/dense/bias"], sorted(h0)
assert h0["m/conv/kernel"]["shape"] == [3, 3, 2, 4] and h0["m/conv/kernel"]["dtype"] == "BF16", h0
a, b = h0["m/dense/bias"]["data_offsets"]
assert struct.unpack("<4H", d0[a:b]) == (0x3F80, 0xC000, 0x3301, 0x4080), struct.unpack("<4H", d0[a:b])
assert d0 != d1, "step 1 equals step 0"
PY
python3 -c 'import struct,sys,json; h=json.dumps({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}}).encode(); h+=b" "*(-len(h)%8); open(sys.argv[1],"wb").write(struct.pack("<Q",len(h))+h+bytes(16))' "$tmp/ints.safetensors"
if "$PULSE_BIN" synth --out "$tmp/x" --steps 1 --from "$tmp/ints.safetensors" 2> "$tmp/err"; then fail "--from without float tensors accepted"; fi
grep -q "no F32, BF16 or F16 tensor" "$tmp/err" || fail "--from without float tensors: $(cat "$tmp/err")"
if "$PULSE_BIN" synth --out "$tmp/x" --steps 1 --from "$tmp/tfjs/m.safetensors" --params 1M 2> "$tmp/err"; then fail "--from with --params accepted"; fi
if "$PULSE_BIN" synth --out "$tmp/x" --steps 1 --from "$tmp/nosuch.safetensors" 2> "$tmp/err"; then fail "--from a missing file accepted"; fi
[ "$(wc -l < "$tmp/err")" -eq 1 ] || fail "--from a missing file: expected one line of error, got: $(cat "$tmp/err")"
[ ! -e "$tmp/x" ] || fail "a refused synth --from left its --out behind"

for bad in -1 65 nan x; do
    if "$PULSE_BIN" synth --out "$tmp/x" --steps 1 --params 1M --spread "$bad" 2> "$tmp/err"; then fail "--spread $bad accepted"; fi
    grep -q -- "--spread" "$tmp/err" || fail "--spread $bad: the error does not name --spread"
done

# Every step at lr 3e-6 changes some but not most BF16 values (a sanity bound, 0.1%..50%).
n=0
while read -r pct; do
    n=$((n + 1))
    awk -v p="$pct" 'BEGIN { exit !(p >= 0.1 && p <= 50) }' || fail "step changed $pct% of BF16 values"
done < <(sed -n 's/^step 00000[1-3]: *\([0-9.]*\)% of BF16 values changed.*/\1/p' "$tmp/a.log")
[ "$n" -eq 3 ] || fail "expected 3 per-step change lines, got $n"

# The demo: a trainer node and two follower nodes (child processes) on a file:// store; every step
# (the keyframe 0, then 1 and 2) reaches both followers bit for bit, and the store holds the records.
"$PULSE_BIN" demo --params 1M --steps 2 --dir "$tmp/demo" > "$tmp/demo.log" || fail "demo exited non-zero: $(cat "$tmp/demo.log")"
[ "$(grep -c 'bit-identical: yes' "$tmp/demo.log")" -eq 3 ] || fail "demo: not every step bit-identical"
grep -q "^every follower's state id equals the trainer's (.*): yes$" "$tmp/demo.log" || fail "demo: no final state id match"
compgen -G "$tmp/demo/store/demo/records/sync-patch/000000000002/*" > /dev/null || fail "demo: no record of step 2 in the store"
cmp -s "$tmp/demo/follower2.safetensors" "$tmp/demo/watch/step-000002.safetensors" || fail "demo: follower2 differs"
if pgrep -f "pulse node .*$tmp/demo" > /dev/null; then fail "demo left a node running"; fi
if "$PULSE_BIN" demo --followers 0 2> "$tmp/err"; then fail "demo --followers 0 accepted"; fi

# The codec bench end to end at a toy size: every part of its table, the in-place floor among
# the times (its +1/-1 pass must leave the target in OLD's state, which the bench checks before
# it prints), a verdict on every target. The times themselves are the bench's business, not a test's.
"$PULSE_BIN" bench codec --params 2M --mem-params 1M --repeat 1 --keep "$tmp/bk" > "$tmp/bench.log" 2>&1 \
    || fail "bench codec exited non-zero: $(tail -3 "$tmp/bench.log")"
for row in "order-0 entropy bound" "pulse apply, trusted base id, no result check" \
           "in-place floor: a byte of every target line read+written" "memcpy of the checkpoint file bytes" \
           "peak anonymous memory" "targets (docs/performance.md)" "apply / (in-place floor + check pass)" \
           "same, context-coded diff/apply"; do
    grep -qF -- "$row" "$tmp/bench.log" || fail "bench codec printed no row '$row'"
done
floor=$(sed -n 's/.*in-place floor: a byte of every target line read+written *\([0-9.]*\) .*/\1/p' "$tmp/bench.log")
awk -v f="$floor" 'BEGIN { exit !(f > 0) }' || fail "bench codec: in-place floor '$floor' ms"
[ "$(grep -cE ' (PASS|MISS|noise|n/a|info)$' "$tmp/bench.log")" -ge 12 ] || fail "bench codec: targets without a verdict"
# The memory probe's six columns (the context-coded patch's from a process of its own), each a
# figure above zero for both model sizes.
[ "$(grep -cE '^  [0-9]+ params( +[0-9]+\.[0-9]){6}$' "$tmp/bench.log")" -eq 2 ] \
    || fail "bench codec: the memory table lacks a size or a column"
grep -E '^  [0-9]+ params( +[0-9]+\.[0-9]){6}$' "$tmp/bench.log" | awk '{ for (i = 3; i <= 8; i++) if ($i <= 0) exit 1 }' \
    || fail "bench codec: a peak of zero in the memory table"

# Usage errors: one line naming the problem (plus the hint), non-zero exit, nothing written.
if "$PULSE_BIN" synth --steps 2 2> "$tmp/err"; then fail "synth without --out succeeded"; fi
grep -q -- "--out" "$tmp/err" || fail "synth without --out did not say so"
if "$PULSE_BIN" synth --out "$tmp/x" --steps 1 --params 0 2> "$tmp/err"; then fail "--params 0 accepted"; fi
if "$PULSE_BIN" synth --out "$tmp/x" --steps 1 --lr nan 2> "$tmp/err"; then fail "--lr nan accepted"; fi
if "$PULSE_BIN" bench nosuch 2> "$tmp/err"; then fail "bench nosuch succeeded"; fi
if "$PULSE_BIN" synth --out /proc/no-such-dir --steps 1 --params 1M 2> "$tmp/err"; then fail "unwritable --out accepted"; fi
[ "$(wc -l < "$tmp/err")" -eq 1 ] || fail "unwritable --out: expected one line of error, got: $(cat "$tmp/err")"
echo "ok"
