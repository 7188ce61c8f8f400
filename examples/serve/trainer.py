# SPDX-License-Identifier: Apache-2.0
"""The trainer of examples/serve: FP32 master weights moved by small Adam-like steps, published in BF16 through pulse each step, one step at a time once every rank has it."""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "rl"))
import safetensors_io  # noqa: E402  (examples/rl's reader/writer: Debian ships no safetensors)
import llama_tp  # noqa: E402
import pulseweights as pw  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True)
    ap.add_argument("--run", default="serve")
    ap.add_argument("--key", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--work", required=True, help="ref/step-N.safetensors (the ranks' check) and acks")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--chunk", type=int, default=4096, help="elements per patch chunk (0: the library default, 2^20)")
    a = ap.parse_args()
    master = llama_tp.init_state(seed=1)
    g = torch.Generator().manual_seed(2)
    os.makedirs(os.path.join(a.work, "ref"), exist_ok=True)
    # Chunks of 4096 elements (16 rows of this model): the unit a rank holding slices fetches.
    # Real models keep the default 2^20: a 7B layer's q_proj alone is 16 such chunks.
    with pw.Publisher(a.store, a.run, a.key, a.state, chunk_elems=a.chunk) as pub:
        for step in range(a.steps + 1):
            if step:
                # Adam's update is close to lr in size everywhere: a sign step, as at RL learning rates.
                for t in master.values():
                    t.add_(torch.randn(t.shape, generator=g).sign() * a.lr)
            bf16 = {k: v.to(torch.bfloat16) for k, v in master.items()}
            safetensors_io.save(os.path.join(a.work, "ref", "step-%d.safetensors" % step), bf16)
            t0 = time.time()
            info = pub.publish(bf16, step=step)
            print("trainer step %d: %s, %d changes, %d bytes of objects (dense %d), published in %.0f ms"
                  % (step, info.kind, info.changes, info.object_bytes, info.dense_bytes, 1e3 * (time.time() - t0)),
                  flush=True)
            # The next step once every rank has this one: each rank checks every step bit for bit.
            deadline = time.time() + a.timeout
            while not all(os.path.exists(os.path.join(a.work, "ack-%d-%d" % (r, step))) for r in range(a.ranks)):
                if time.time() > deadline:
                    print("trainer: ranks did not reach step %d" % step, file=sys.stderr)
                    return 1
                time.sleep(0.02)
    with open(os.path.join(a.work, "done"), "w") as f:
        f.write(str(a.steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
