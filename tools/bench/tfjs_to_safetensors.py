#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Writes the unquantized float32 weights of TensorFlow.js models (model.json + .bin shards, as npm
# packages ship them) to one F32 safetensors file: real trained weights for `pulse synth --from`.
# Usage: tfjs_to_safetensors.py OUT.safetensors MODEL.json... (tensors named MODEL/weight).
import json, os, struct, sys

SIZES = {"float32": 4, "int32": 4, "uint8": 1, "uint16": 2, "bool": 1}


def weights_of(model_json):
    """(name, shape, raw float32 bytes) of each unquantized float32 weight of one model."""
    with open(model_json) as f:
        d = json.load(f)
    base = os.path.dirname(model_json)
    prefix = os.path.splitext(os.path.basename(model_json))[0]
    out = []
    for group in d.get("weightsManifest", []):
        data = b"".join(open(os.path.join(base, p), "rb").read() for p in group["paths"])
        at = 0
        for w in group["weights"]:
            n = 1
            for dim in w["shape"]:
                n *= dim
            q = w.get("quantization")
            size = n * SIZES[q["dtype"] if q else w["dtype"]]
            if w["dtype"] == "float32" and not q and n:
                out.append((prefix + "/" + w["name"], w["shape"], data[at:at + size]))
            at += size
        if at != len(data):
            sys.exit(f"{model_json}: the manifest names {at} bytes, its shards hold {len(data)}")
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: tfjs_to_safetensors.py OUT.safetensors MODEL.json...")
    tensors = [t for m in sys.argv[2:] for t in weights_of(m)]
    if not tensors:
        sys.exit("no unquantized float32 weights in those models")
    header, at = {}, 0
    for name, shape, raw in tensors:
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [at, at + len(raw)]}
        at += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(sys.argv[1], "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _, _, raw in tensors:
            f.write(raw)
    print(f"{sys.argv[1]}: {len(tensors)} tensors, {at // 4} float32 weights")


if __name__ == "__main__":
    main()
