# SPDX-License-Identifier: Apache-2.0
"""Checks examples/rl/views.py's round-to-nearest-even casts against hand-worked values (FP8 E4M3
and E5M2) and against numpy's float16 / torch's bfloat16 casts."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "rl"))
import views as V  # noqa: E402

HAND = {
    # value: (E4M3 value, E4M3 bits, E5M2 value, E5M2 bits)
    1.0: (1.0, 0x38, 1.0, 0x3C),
    -2.0: (-2.0, 0xC0, -2.0, 0xC0),
    1.0625: (1.0, 0x38, 1.0, 0x3C),        # E4M3: tie between 1.0 and 1.125 -> even (1.0)
    1.1875: (1.25, 0x3A, 1.25, 0x3D),      # E4M3: tie between 1.125 and 1.25 -> even (1.25)
    1.125: (1.125, 0x39, 1.0, 0x3C),       # E5M2: tie between 1.0 and 1.25 -> even (1.0)
    1.375: (1.375, 0x3B, 1.5, 0x3E),       # E5M2: tie between 1.25 and 1.5 -> even (1.5)
    0.3: (0.3125, 0x2A, 0.3125, 0x35),     # 0.3 = 1.2 * 2**-2
    448.0: (448.0, 0x7E, 448.0, 0x5F),
    500.0: (448.0, 0x7E, 512.0, 0x60),     # E4M3 saturates
    1e6: (448.0, 0x7E, 57344.0, 0x7B),     # both saturate
    2.0 ** -9: (2.0 ** -9, 0x01, 2.0 ** -9, 0x18),   # E4M3 smallest subnormal; E5M2 normal, exp 6
    2.0 ** -10: (0.0, 0x00, 2.0 ** -10, 0x14),       # E4M3: tie between 0 and 2**-9 -> 0
    3 * 2.0 ** -11: (2.0 ** -9, 0x01, 3 * 2.0 ** -11, 0x16),    # E4M3: 0.75 of its subnormal step -> 2**-9
    2.0 ** -16: (0.0, 0x00, 2.0 ** -16, 0x01),       # E5M2 smallest subnormal
    2.0 ** -17: (0.0, 0x00, 0.0, 0x00),              # E5M2: tie between 0 and 2**-16 -> 0
    3 * 2.0 ** -17: (0.0, 0x00, 2.0 ** -15, 0x02),   # E5M2: tie between 2**-16 and 2**-15 -> even (2**-15)
}


def check_hand():
    for x, (e4, e4b, e5, e5b) in HAND.items():
        for fmt, want, wbits in (("e4m3", e4, e4b), ("e5m2", e5, e5b)):
            got = float(V.quantize(np.float32(x), fmt))
            assert got == want, f"{fmt}({x!r}) = {got!r}, want {want!r}"
            if wbits is not None:
                b = int(V.to_bits(got, fmt))
                assert b == wbits, f"{fmt} bits of {x!r} = {b:#04x}, want {wbits:#04x}"


def check_against_libraries():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal(200000).astype(np.float32) * s
                        for s in (1e-6, 1e-4, 0.02, 1.0, 3e4)])
    x = np.concatenate([x, np.float32([0.0, -0.0, 65504.0, 65520.0, 2.0 ** -24, 2.0 ** -25])])
    x = x[np.abs(x) < 65520.0]   # numpy's cast overflows to inf above; ours saturates (below)
    f16 = x.astype(np.float16)
    q = V.quantize(x, "fp16")
    assert np.array_equal(q, f16.astype(np.float64)), "fp16 view differs from numpy's float16 cast"
    assert np.array_equal(V.to_bits(q, "fp16"), f16.view(np.uint16)), "fp16 bits differ"
    assert float(V.quantize(np.float32(70000.0), "fp16")) == 65504.0, "fp16 does not saturate"
    qb = V.quantize(x, "bf16")
    assert np.array_equal(V.to_bits(qb, "bf16"), V.bf16_bits(x)), "bf16 quantize and bf16_bits disagree"
    try:
        import torch
    except ImportError:
        return
    tb = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(V.bf16_bits(x), tb), "bf16 bits differ from torch's cast"


if __name__ == "__main__":
    check_hand()
    check_against_libraries()
    print("views: hand-checked FP8 values and FP16/BF16 casts all agree")
