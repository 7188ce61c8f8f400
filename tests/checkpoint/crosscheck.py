#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# An independent safetensors writer and state-id implementation (stdlib only) checked against `pulse hash`.
import hashlib
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

PULSE = os.environ["PULSE_BIN"]
CHUNK = 1 << 20
WIDTH = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4,
         "U8": 1, "BOOL": 1, "F64": 8, "U16": 2}


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: (dtype, shape, bytes)}. Laid out like Hugging Face's writer:
    keys sorted, data contiguous, header padded with spaces to 8 bytes."""
    header, offset, blobs = {}, 0, []
    if metadata is not None:
        header["__metadata__"] = metadata
    for name in sorted(tensors):
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, ensure_ascii=True).encode()  # \uXXXX escapes for non-ASCII names
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def u64(v):
    return struct.pack("<Q", v)


def lstr(s):
    b = s.encode()
    return u64(len(b)) + b


def tensor_hash(name, dtype, shape, data):
    h = hashlib.sha256(b"pulse-tensor-v1" + lstr(name) + lstr(dtype) + u64(len(shape)))
    for d in shape:
        h.update(u64(d))
    chunks = [data[i:i + CHUNK] for i in range(0, len(data), CHUNK)]
    h.update(u64(len(data)) + u64(len(chunks)))
    for c in chunks:
        h.update(hashlib.sha256(c).digest())
    return h.hexdigest()


def state_id(tensors):
    names = sorted(tensors, key=lambda n: n.encode())
    h = hashlib.sha256(b"pulse-state-v1" + u64(len(names)))
    for n in names:
        h.update(bytes.fromhex(tensor_hash(n, *tensors[n])))
    return h.hexdigest()


def pulse_hash(path, *extra):
    out = subprocess.run([PULSE, "hash", path, *extra], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("pulse hash %s failed: %s" % (path, out.stderr.strip()))
    return out.stdout.splitlines()


def main():
    rng = random.Random(7)
    tensors = {}
    for i, (dtype, shape) in enumerate([("BF16", (64, 32)), ("F32", (300000,)), ("I64", ()),
                                        ("F16", (3, 5, 7)), ("F8_E4M3", (17,)), ("U8", (0,)),
                                        ("BOOL", (9,)), ("F64", (2, 2))]):
        n = 1
        for d in shape:
            n *= d
        name = "layer.%d.%s" % (i, dtype.lower())
        tensors[name] = (dtype, shape, bytes(rng.getrandbits(8) for _ in range(n * WIDTH[dtype])))
    tensors["caf\u00e9.\U0001F600"] = ("BF16", (4,), bytes(range(8)))
    failures = 0
    with tempfile.TemporaryDirectory() as d:
        single = os.path.join(d, "model.safetensors")
        write_safetensors(single, tensors, {"format": "pt", "k\u00e9y": "v\"\\al"})
        want = state_id(tensors)
        lines = pulse_hash(single, "--tensors", "--threads", "3")
        if lines[0] != want:
            print("state id differs: pulse %s, python %s" % (lines[0], want))
            failures += 1
        by_name = {}
        for line in lines[1:]:
            h, dtype, shape, name = line.split(" ", 3) if "  " not in line else \
                (line.split()[0], line.split()[1], line.split()[2], line.split(None, 3)[3])
            by_name[name] = (h, dtype, shape)
        for name, (dtype, shape, data) in tensors.items():
            got = by_name.get(name)
            want_t = (tensor_hash(name, dtype, shape, data), dtype, "[" + ",".join(map(str, shape)) + "]")
            if got != want_t:
                print("tensor %r: pulse %s, python %s" % (name, got, want_t))
                failures += 1

        # The sharded form of the same tensors hashes the same.
        shard_dir = os.path.join(d, "sharded")
        os.mkdir(shard_dir)
        names = sorted(tensors)
        parts = [names[: len(names) // 2], names[len(names) // 2:]]
        weight_map = {}
        for k, part in enumerate(parts):
            fname = "model-%05d-of-%05d.safetensors" % (k + 1, len(parts))
            write_safetensors(os.path.join(shard_dir, fname), {n: tensors[n] for n in part})
            weight_map.update({n: fname for n in part})
        with open(os.path.join(shard_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": sum(len(t[2]) for t in tensors.values())},
                       "weight_map": weight_map}, f, indent=2)
        got = pulse_hash(shard_dir)[0]
        if got != want:
            print("sharded state id differs: pulse %s, python %s" % (got, want))
            failures += 1

        # One changed byte changes the id, in both implementations alike.
        name = "layer.1.f32"
        dtype, shape, data = tensors[name]
        tensors[name] = (dtype, shape, data[:-1] + bytes([data[-1] ^ 1]))
        write_safetensors(single, tensors)
        want2 = state_id(tensors)
        got = pulse_hash(single)[0]
        if got != want2 or want2 == want:
            print("after a flip: pulse %s, python %s (before %s)" % (got, want2, want))
            failures += 1
    print("crosscheck: %d failures" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
