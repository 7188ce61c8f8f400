#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A trainer in parts, against file:// ('file') or the test RGW ('s3'): three part publishers, each a
# separate process holding only its shard, publish a run; a committer writes each step; a whole
# follower, a slice follower and a part follower end bit-identical. Then the faults: a missing part,
# a forged part record, parts that overlap, a part on another base, a second committer with the same
# key, kill -9 of a part publisher and of the committer: each refused by name with nothing committed,
# or completed once on a re-run. Last the nodes, one committing, and its retention over the run and
# its part runs.
#
# usage: parts.sh file|s3 [slice|noslice]   (noslice: no slice follower, which loads the library into
#        python: not in a sanitizer build)
set -euo pipefail
mode=${1:?usage: parts.sh file|s3 [slice|noslice]}
slice=${2:-slice}
: "${PULSE_BIN:?PULSE_BIN must name the pulse binary (meson test sets it)}"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PULSE_UPLOAD_PART=4096   # patches of several data objects per part, as a large model's are

if [ "$mode" = s3 ]; then
  if [ -z "${PULSE_RGW_ENV:-}" ] || [ ! -f "${PULSE_RGW_ENV:-}" ]; then
    echo "SKIP: PULSE_RGW_ENV is not set to an RGW env file (scripts/test.sh starts one; docs/testing-s3.md)"
    exit 77
  fi
  # shellcheck source=../s3/lib.sh
  . "$here/../s3/lib.sh"
  S="s3://$bucket/$prefix"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-parts.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  S="file://$work/store"
fi
cd "$work"
n=0; fails=0
check() { n=$((n+1)); if eval "$1"; then echo "ok   $2"; else echo "FAIL $2"; fails=$((fails+1)); fi; }
said() { sed 's/^/     says: /' err; }   # the refusal's one line
P() { timeout 120 "$PULSE_BIN" "$@"; }
id() { P hash "$1"; }
shard() { printf 'sh%d/model-%05d-of-00003.safetensors' "$1" $(($2 + 1)); }   # step, part
pub() { P publish --store "$S" --run "$1" --key tr.key --state "st-$1-$3" --part "$3/$4" --step "$2" "$5"; }
commit() { P commit --store "$S" --run "$1" --key tr.key --state "cst-$1" --parts "$2" --step "$3" --wait "${4:-30}"; }
pull() { P pull --store "$S" --run "$1" --trust tr.pub --state "$2" --weights "$3"; }

P keygen tr >/dev/null
P keygen mallory >/dev/null
P synth --params 2M --steps 8 --out syn --threads 2 >/dev/null
for s in 0 1 2 3 4 5 6 7 8; do python3 "$here/shard.py" "syn/step-00000$s.safetensors" 3 "sh$s"; done

# 1. Three part publishers (separate processes, each only its shard), one committer, steps 0..3.
for s in 0 1 2 3; do
  for i in 0 1 2; do pub r "$s" "$i" 3 "$(shard "$s" "$i")" >/dev/null & done
  wait
  commit r 3 "$s" >commit.out
  pull r f w.safetensors >/dev/null
  check "[ \"\$(id w.safetensors)\" = \"\$(id sh$s)\" ]" "step $s: the whole follower holds the sharded checkpoint (pulse hash of its directory)"
done
check "grep -q 'sync-patch records/sync-patch/000000000003/' commit.out" "step 3 committed as one sync-patch record"
pull r.part-1-of-3 pf1 p1.safetensors >/dev/null
check "[ \"\$(id p1.safetensors)\" = \"\$(id "$(shard 3 1)")\" ]" "a part follower holds its shard at step 3"
check "P manifest audit --store '$S' --run r --trust tr.pub >audit.out 2>&1" "the committed run audits clean (no orphans: its records name every object)"
check "P manifest audit --store '$S' --run r.part-2-of-3 --trust tr.pub >audit2.out 2>&1" "a part run audits clean"

# A slice follower: a tensor-parallel rank's rows of one tensor, through the bindings (numpy).
if [ "$slice" = slice ]; then
  check "PULSE_LIB='$PULSE_BUILD/libpulseweights.so' PYTHONPATH='${PULSE_SRC:-$here/../..}/python' /usr/bin/python3 '$here/parts_slice.py' '$S' r tr.pub slice-st sh3/model.safetensors.index.json sh0 >slice.out 2>&1 || { cat slice.out; false; }" \
    "a slice follower's rows equal the trainer's at step 3, fetched by range"
fi

# 2. A missing part: nothing committed, the error names it; once it comes, the step commits.
pub r 4 0 3 "$(shard 4 0)" >/dev/null
pub r 4 1 3 "$(shard 4 1)" >/dev/null
check "! commit r 3 4 1 >out 2>err && grep -q 'part 2 of 3 has no record of step 4' err" "a missing part is named, nothing committed"; said
pull r f w.safetensors >/dev/null
check "[ \"\$(id w.safetensors)\" = \"\$(id sh3)\" ]" "the follower stays at step 3"
pub r 4 2 3 "$(shard 4 2)" >/dev/null
check "commit r 3 4 >/dev/null && pull r f w.safetensors >/dev/null && [ \"\$(id w.safetensors)\" = \"\$(id sh4)\" ]" "the late part comes: step 4 commits and follows"

# 3. A forged part record (signed by another key, put over the part's record): refused by name.
for i in 0 1 2; do pub r 5 "$i" 3 "$(shard 5 "$i")" >/dev/null; done
rel=r.part-1-of-3/records/sync-patch/000000000005/$(P store ls "$S/r.part-1-of-3/records/sync-patch/000000000005/" | head -1 | sed 's|.*/||')
P store get "$S/$rel" -o genuine.rec
python3 -c 'import sys; b=bytearray(open("genuine.rec","rb").read()); b[-1]^=1; open("forged.rec","wb").write(b)'
P store put "$S/$rel" forged.rec
check "! commit r 3 5 2 >out 2>err && grep -q 'part 1 of 3: .* does not verify' err" "a forged part record is refused by name"; said
P store put "$S/$rel" genuine.rec
check "commit r 3 5 >/dev/null && pull r f w.safetensors >/dev/null && [ \"\$(id w.safetensors)\" = \"\$(id sh5)\" ]" "with the genuine record back, step 5 commits"

# 4. Parts that overlap: part 1's shard also holds one of part 0's tensors (run o).
python3 - "$(shard 0 0)" "$(shard 0 1)" overlap.safetensors <<'PY'
import json, struct, sys
def read(p):
    raw = open(p, "rb").read(); n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n]); h.pop("__metadata__", None)
    return {k: (v, raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()}
a, b = read(sys.argv[1]), read(sys.argv[2])
k = sorted(a)[0]; b[k] = a[k]
hdr, off, blobs = {}, 0, []
for name, (v, blob) in sorted(b.items()):
    hdr[name] = {"dtype": v["dtype"], "shape": v["shape"], "data_offsets": [off, off + len(blob)]}; blobs.append(blob); off += len(blob)
t = json.dumps(hdr).encode(); t += b" " * (-(8 + len(t)) % 8)
open(sys.argv[3], "wb").write(struct.pack("<Q", len(t)) + t + b"".join(blobs))
PY
pub o 0 0 2 "$(shard 0 0)" >/dev/null
pub o 0 1 2 overlap.safetensors >/dev/null
check "! commit o 2 0 5 >out 2>err && grep -q 'parts 0 and 1 both hold tensor' err" "overlapping parts are refused by name"; said
check "! P store ls '$S/o/records/' | grep -q ." "nothing committed in run o"

# 5. A part on another base: run b misses the commit of step 1, then parts publish step 2.
python3 "$here/shard.py" syn/step-000000.safetensors 2 b0
python3 "$here/shard.py" syn/step-000001.safetensors 2 b1
python3 "$here/shard.py" syn/step-000002.safetensors 2 b2
for i in 0 1; do pub b 0 "$i" 2 "b0/model-0000$((i + 1))-of-00002.safetensors" >/dev/null; done
commit b 2 0 >/dev/null
for s in 1 2; do for i in 0 1; do pub b "$s" "$i" 2 "b$s/model-0000$((i + 1))-of-00002.safetensors" >/dev/null; done; done
check "! commit b 2 2 5 >out 2>err && grep -q 'built on another base' err" "a part on another base is refused by name"; said
check "commit b 2 1 >/dev/null && commit b 2 2 >/dev/null && pull b fb wb.safetensors >/dev/null && [ \"\$(id wb.safetensors)\" = \"\$(id b2)\" ]" "committing step 1 then 2 mends it"
# A second committer with the same key (another state directory) while the first goes on: its head
# check, made beside the parts' records, refuses it; nothing committed.
python3 "$here/shard.py" syn/step-000003.safetensors 2 b3
for i in 0 1; do
  P publish --store "$S" --run b --key tr.key --state "st-b-$i" --part "$i/2" --step 3 --keyframe \
    "b3/model-0000$((i + 1))-of-00002.safetensors" >/dev/null
done
check "! P commit --store '$S' --run b --key tr.key --state cst-b2 --parts 2 --step 3 --wait 5 >out 2>err && grep -q 'another publisher with the same key' err && ! P store ls '$S/b/records/sync-patch/000000000003/' | grep -q ." "a second committer with the same key is refused, nothing committed"; said
check "commit b 2 3 >/dev/null" "the first committer goes on"

# 6. kill -9 of a part publisher and of the committer at random moments, then re-run: each step
#    completes once, bit-identical.
# killed CMD...: CMD started, killed -9 after 10-90 ms (or finished before), reaped.
killed() {
  "$@" >/dev/null 2>&1 &
  local k=$!
  sleep "0.0$((RANDOM % 9 + 1))"
  kill -9 "$k" 2>/dev/null || true
  { wait "$k"; } 2>/dev/null || true
}
for s in 6 7 8; do
  for i in 0 1 2; do
    killed "$PULSE_BIN" publish --store "$S" --run r --key tr.key --state "st-r-$i" --part "$i/3" --step "$s" \
      "$(shard "$s" "$i")"
    pub r "$s" "$i" 3 "$(shard "$s" "$i")" >/dev/null
  done
  killed "$PULSE_BIN" commit --store "$S" --run r --key tr.key --state cst-r --parts 3 --step "$s" --wait 30
  commit r 3 "$s" >/dev/null
  pull r f w.safetensors >/dev/null
  check "[ \"\$(id w.safetensors)\" = \"\$(id sh$s)\" ] && [ \$(P store ls '$S/r/records/sync-patch/00000000000$s/' | wc -l) = 1 ]" "step $s after kills: one record, the follower bit-identical"
done
# A killed upload may leave data objects no record names (a re-run cuts its parts anew): orphans,
# which retention collects (docs/node.md); anything else the audit finds is a failure.
P manifest audit --store "$S" --run r --trust tr.pub >audit.out 2>audit.err || true
check "! grep '^pulse manifest audit:' audit.err | grep -vq 'orphan: no record names it'" "the run audits clean after the faults, orphans of killed uploads aside"
grep -v 'orphan' audit.err || true

# 7. The nodes: three `pulse node trainer --part I/3`, each watching its own directory of shards, the
#    first also committing each step (run nd).
for i in 0 1 2; do
  mkdir -p "nw$i"
  for s in 0 1 2; do cp "$(shard "$s" "$i")" "nw$i/part-step$s.safetensors"; done
done
for i in 0 1 2; do
  extra=(); [ "$i" = 0 ] && extra=(--commit --commit-wait 60)
  timeout 300 "$PULSE_BIN" node trainer --store "$S" --run nd --key tr.key --state "nst$i" --watch "nw$i" \
    --pattern 'part-step{N}.safetensors' --part "$i/3" --once --poll-ms 200 "${extra[@]}" 2>"node$i.log" &
done
wait
check "[ \$(grep -c '\"committed\"\\|event=committed\\|committed ' node0.log) -ge 3 ]" "the committing node committed steps 0, 1 and 2"
check "pull nd fn wn.safetensors >/dev/null && [ \"\$(id wn.safetensors)\" = \"\$(id sh2)\" ]" "a follower of the nodes' run holds step 2"

# 8. Retention spans the run and its parts' runs, kept by the committing node: keyframes every 2
#    steps, the newest one kept; steps 0..5 (run ndr).
for i in 0 1 2; do
  mkdir -p "rw$i"
  for s in 0 1 2 3 4 5; do cp "$(shard "$s" "$i")" "rw$i/part-step$s.safetensors"; done
done
for i in 0 1 2; do
  extra=(--keep-keyframes 0); [ "$i" = 0 ] && extra=(--commit --commit-wait 60 --keep-keyframes 1)
  timeout 300 "$PULSE_BIN" node trainer --store "$S" --run ndr --key tr.key --state "rst$i" --watch "rw$i" \
    --pattern 'part-step{N}.safetensors' --part "$i/3" --once --poll-ms 200 --keyframe-every 2 \
    "${extra[@]}" 2>"rnode$i.log" &
done
wait
records_at() { local c=0 k; for k in keyframe sync-patch; do c=$((c + $(P store ls "$S/$1/records/$k/$(printf %012d "$2")/" 2>/dev/null | wc -l))); done; echo "$c"; }
check "grep -q 'retained' rnode0.log" "the committing node ran retention over the run in parts"
check "[ \$(( \$(records_at ndr 0) + \$(records_at ndr 1) + \$(records_at ndr 2) + \$(records_at ndr 3) )) = 0 ] && [ \$(records_at ndr 4) = 1 ] && [ \$(records_at ndr 5) = 1 ]" "the run keeps its records from the newest keyframe (step 4) on, and nothing before"
check "[ \$(( \$(records_at ndr.part-1-of-3 0) + \$(records_at ndr.part-1-of-3 3) )) = 0 ] && [ \$(records_at ndr.part-1-of-3 4) = 1 ] && [ \$(records_at ndr.part-1-of-3 5) = 1 ]" "a part run's records before step 4 went with the run's"
check "P manifest audit --store '$S' --run ndr --trust tr.pub >raudit.out 2>&1" "the run audits clean after retention (every object a record names is there, no orphan)"
check "P manifest audit --store '$S' --run ndr.part-0-of-3 --trust tr.pub >raudit0.out 2>&1" "a part run audits clean after retention"
check "pull ndr fr wr.safetensors >/dev/null && [ \"\$(id wr.safetensors)\" = \"\$(id sh5)\" ]" "a new follower of the run holds step 5 (from the kept keyframe)"
check "! P node trainer --store '$S' --run ndr --key tr.key --state x --watch rw1 --part 1/3 --keep-keyframes 2 2>err && grep -q 'committing node' err" "--keep-keyframes on a part that does not commit is refused, naming who keeps the run"
said

echo "$((n - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
