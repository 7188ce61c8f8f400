# SPDX-License-Identifier: Apache-2.0
"""One tensor-parallel rank of examples/serve's inference service: holds only its fused shards, follows the run with an engine-held follower, checks every step bit for bit, generates."""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "rl"))
import safetensors_io  # noqa: E402
import llama_tp  # noqa: E402
import pulseweights as pw  # noqa: E402
from pulseweights import fused  # noqa: E402
from pulseweights.engine import EngineFollower  # noqa: E402

PROMPT = [1, 17, 42, 7, 99]


def bits(t):
    return t.contiguous().view(torch.int16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True)
    ap.add_argument("--run", default="serve")
    ap.add_argument("--trust", required=True)
    ap.add_argument("--state", required=True, help="this rank's state directory")
    ap.add_argument("--work", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--whole", action="store_true", help="fetch whole patches (no slices), to compare")
    a = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % a.port, rank=a.rank, world_size=a.tp)
    layout = fused.llama_tp_layout(tp=a.tp, rank=a.rank, **llama_tp.CONFIG)
    params = {}              # this rank's engine parameters: fused, sharded, BF16; nothing else is held
    stats = {"applied_ms": 0.0, "changes": 0, "head": 0}

    def on_keyframe(step, path):
        t0 = time.time()
        full = safetensors_io.load(path)   # the verified keyframe, deleted by pulse after this call
        params.clear()
        params.update(fused.shard(full, layout))
        del full
        stats["applied_ms"] = 1e3 * (time.time() - t0)
        stats["changes"] = -1

    def on_patch(step, patch):
        t0 = time.time()
        stats["head"] = patch.head_bytes
        # Each chunk decoded straight into this rank's (CPU) shards: no index arrays. A GPU-held
        # engine gets the same changes through patch.updates() and torch indexing.
        written = fused.apply_patch(params, patch, layout, threads=1)
        stats["applied_ms"] = 1e3 * (time.time() - t0)
        stats["changes"] = sum(written.values())

    # Only this rank's part of each tensor is fetched: the patch's head, then the chunks that hold
    # its rows (its columns of o_proj / down_proj span every chunk of those tensors).
    follower = EngineFollower(a.store, a.run, a.trust, a.state, on_patch=on_patch, on_keyframe=on_keyframe,
                              threads=1, slices=None if a.whole else fused.slices(layout))
    held, fetched, sizes = -1, [], []
    deadline = time.time() + a.timeout
    while True:
        done = os.path.exists(os.path.join(a.work, "done"))
        try:
            n, info = follower.pull()
        except pw.PulseError as e:
            if held >= 0 or e.name != "PULSE_ERR_NOTFOUND":
                raise
            n, info = 0, None          # the trainer has not published its first step yet
        if n:
            step = info.step
            # The check: this rank's shards equal the trainer's BF16 state of this step, cut the same way.
            ref = fused.shard(safetensors_io.load(os.path.join(a.work, "ref", "step-%d.safetensors" % step)), layout)
            bad = [k for k in ref if not torch.equal(bits(params[k]), bits(ref[k]))]
            if bad or set(ref) != set(params):
                print("rank %d step %d: MISMATCH in %s" % (a.rank, step, bad[:3]), file=sys.stderr, flush=True)
                return 1
            moved = sum(s.moved_bytes for s in follower.steps)
            fetched.append((step, moved, info.object_bytes, info.kind))
            patch_size = info.object_bytes - stats["head"]   # the record's objects: the patch and its head
            got = ("%d bytes of a %d-byte patch" % (moved, patch_size) if info.kind == "patch"
                   else "%d bytes (%s)" % (moved, info.kind))
            if info.kind == "patch":
                sizes.append(patch_size)

            dist.barrier()
            tokens = llama_tp.TPModel(params, a.tp, a.rank).generate(PROMPT, 6)
            gathered = [None] * a.tp
            dist.all_gather_object(gathered, tokens)
            if any(g != tokens for g in gathered):
                print("rank %d step %d: ranks generated different tokens %s" % (a.rank, step, gathered),
                      file=sys.stderr, flush=True)
                return 1
            what = ("keyframe loaded" if stats["changes"] < 0 else "%d changes applied" % stats["changes"])
            print("rank %d step %d: fetched %s, %s in %.1f ms, shards bit-identical, generated %s"
                  % (a.rank, step, got, what, stats["applied_ms"], tokens), flush=True)
            held = step
            with open(os.path.join(a.work, "ack-%d-%d" % (a.rank, step)), "w"):
                pass
        if done and held >= int(open(os.path.join(a.work, "done")).read()):
            break
        if time.time() > deadline:
            print("rank %d: timed out at step %d" % (a.rank, held), file=sys.stderr)
            return 1
        if not n:
            time.sleep(0.05)
    follower.close()
    patches = [m for s, m, o, k in fetched if k == "patch"]
    with open(os.path.join(a.work, "rank-%d.json" % a.rank), "w") as f:
        json.dump({"steps": len(fetched), "patch_bytes": patches, "patch_size": sizes,
                   "param_bytes": sum(p.numel() * p.element_size() for p in params.values())}, f)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
