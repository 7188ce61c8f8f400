#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Splits a single-file safetensors checkpoint into N shards in Hugging Face's sharded form.

usage: shard.py IN.safetensors N OUTDIR

Tensors go to shards round-robin in name order, so that every shard's tensors interleave with the
others' in the canonical order (the hard case for a committer merging parts). Writes
OUTDIR/model-0000i-of-0000N.safetensors (i from 1) and OUTDIR/model.safetensors.index.json. The
first shard keeps the input's __metadata__. Standard library only.
"""
import json
import os
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", None)
    return header, data, meta


def write(path, tensors, meta):
    header, blobs, off = {}, [], 0
    if meta is not None:
        header["__metadata__"] = meta
    for name, (info, blob) in tensors:
        header[name] = {"dtype": info["dtype"], "shape": info["shape"], "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def main():
    src, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    header, data, meta = read(src)
    names = sorted(header, key=lambda s: s.encode())
    os.makedirs(out, exist_ok=True)
    shards = [[] for _ in range(n)]
    for k, name in enumerate(names):
        a, b = header[name]["data_offsets"]
        shards[k % n].append((name, (header[name], data[a:b])))
    weight_map = {}
    for i, tensors in enumerate(shards):
        fname = "model-%05d-of-%05d.safetensors" % (i + 1, n)
        write(os.path.join(out, fname), tensors, meta if i == 0 else None)
        for name, _ in tensors:
            weight_map[name] = fname
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


if __name__ == "__main__":
    main()
