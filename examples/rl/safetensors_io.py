# SPDX-License-Identifier: Apache-2.0
"""Minimal safetensors reader/writer for torch tensors (BF16, F16, F32; numpy has no bfloat16 and
Debian ships no safetensors package): what the CLI path of the example hands to `pulse`."""
import json
import os
import struct

import numpy as np
import torch

_DTYPES = {torch.bfloat16: ("BF16", np.uint16), torch.float16: ("F16", np.float16),
           torch.float32: ("F32", np.float32)}
_BY_NAME = {v[0]: (k, v[1]) for k, v in _DTYPES.items()}


def _raw(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def save(path, tensors):
    """Writes name -> tensor to path (temporary name, then rename: never a partial file)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        raw = _raw(t)
        header[name] = {"dtype": _DTYPES[t.dtype][0], "shape": list(t.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def load(path):
    """name -> torch tensor (a copy) from a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        dtype, np_dtype = _BY_NAME[h["dtype"]]
        a, b = h["data_offsets"]
        arr = np.frombuffer(data[base + a:base + b], dtype=np_dtype).copy()
        t = torch.from_numpy(arr.view(np.int16) if dtype == torch.bfloat16 else arr)
        if dtype == torch.bfloat16:
            t = t.view(torch.bfloat16)
        out[name] = t.reshape(h["shape"])
    return out
