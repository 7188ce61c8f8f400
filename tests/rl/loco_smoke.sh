#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Smoke test of the trainer-to-trainer comparison (examples/rl/loco_run.py --quick): tiny model, 2
# trainer processes, 2 PULSELoCo rounds through a file:// store beside DDP and DiLoCo; the run itself
# asserts that both trainers hold the same theta bits after every round; here: the rounds moved the
# weights and sent a sparse payload, the figures are drawn, and, with the Python bindings, a second
# PULSELoCo run through `pulse loco round` (CLI) ends every round with the same theta bits.
set -euo pipefail
py=/usr/bin/python3
if ! "$py" -c 'import torch, numpy, matplotlib' 2>/dev/null; then
    echo "SKIP: $py cannot import torch, numpy and matplotlib (Debian python3-torch python3-numpy python3-matplotlib)"
    exit 77
fi
src=${PULSE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
build=${PULSE_BUILD:-$src/build}
export PULSE_BIN=${PULSE_BIN:-$build/tools/pulse}
export PULSE_LIB=${PULSE_LIB:-$build/libpulseweights.so}
export PYTHONPATH=$src/python:$src/examples/rl
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$py" "$src/examples/rl/loco_run.py" --out "$tmp/a" --quick
"$py" "$src/examples/rl/loco_plots.py" --out "$tmp/a" --img "$tmp/img" >/dev/null
for f in loco-reward.png loco-sparsity.png loco-bytes.png; do
    [ -s "$tmp/img/$f" ] || { echo "FAIL: $f not drawn"; exit 1; }
done

"$py" - "$tmp/a" <<'EOF'
import json, os, sys
out = sys.argv[1]
runs = {}
for name in os.listdir(os.path.join(out, "runs")):
    with open(os.path.join(out, "runs", name)) as f:
        r = json.load(f)
    runs[(r["method"], r["trainers"])] = r
assert set(runs) == {("ddp", 2), ("diloco", 2), ("loco", 2)}, sorted(runs)
loco, diloco = runs[("loco", 2)], runs[("diloco", 2)]
P = loco["params"]
heads = [json.loads(open(os.path.join(out, "loco-K2", f"trainer-{k}.jsonl")).readline()) for k in (0, 1)]
for e in loco["log"]:
    assert 0 < e["sent_frac_min"] <= e["sent_frac_max"] < 1, e
    assert 0 < e["bytes_up"] < 4 * P, e          # fewer bytes than DiLoCo's dense FP32 pseudo-gradient
    assert e["members_min"] == 2 and e["excluded"] == 0, e
assert loco["log"][-1]["digest"] != heads[0]["digest0"], "the rounds did not move theta"
assert all(e["bytes_up"] == 4 * P for e in diloco["log"])
assert all(e["bytes_up"] == 2 * 4 * P for e in runs[("ddp", 2)]["log"])   # H = 2 dense gradients
print(f"loco: {loco['via']}, sent {[round(e['sent_frac'], 3) for e in loco['log']]}, "
      f"bytes {[int(e['bytes_up']) for e in loco['log']]} of {4 * P} dense")
EOF

via=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["via"])' "$tmp/a/runs/loco-K2.json")
if [ "$via" = bindings ]; then
    # Same init, seeds and data through the CLI: the library must give the same bits either way.
    mkdir -p "$tmp/b"
    cp "$tmp/a/sft.pt" "$tmp/b/sft.pt"
    "$py" "$src/examples/rl/loco_run.py" --out "$tmp/b" --quick --methods loco --via cli >/dev/null
    "$py" - "$tmp/a" "$tmp/b" <<'EOF'
import json, sys
a, b = (json.load(open(d + "/runs/loco-K2.json")) for d in sys.argv[1:3])
assert b["via"] == "cli"
for x, y in zip(a["log"], b["log"], strict=True):
    assert x["digest"] == y["digest"], f"round {x['round']}: bindings and CLI rounds differ"
    assert x["bytes_up"] == y["bytes_up"], (x, y)
print("bindings and CLI rounds: the same theta bits and shard bytes every round")
EOF
else
    echo "note: Python bindings not importable; PULSELoCo rounds ran through the CLI only"
fi
echo "PASS"
