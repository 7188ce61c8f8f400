# SPDX-License-Identifier: Apache-2.0
"""Low-precision views of FP32 weights in numpy: BF16, FP16, FP8 E4M3 (OCP "fn": no infinities,
max 448) and FP8 E5M2 (max 57344), all round to nearest, ties to even, with subnormals; overflow
saturates to the largest finite value (the "satfinite" cast FP8 kernels use). torch 1.13 has no
float8, so the FP8 casts are written here; they are checked against hand-worked values in
tests/rl/test_views.py. Also the BF16 rounding cell, from which the mechanism's bound follows."""
import numpy as np

# name: (exponent bits, mantissa bits, bias, largest finite value)
FORMATS = {
    "bf16": (8, 7, 127, float.fromhex("0x1.fep127")),
    "fp16": (5, 10, 15, 65504.0),
    "e4m3": (4, 3, 7, 448.0),
    "e5m2": (5, 2, 15, 57344.0),
}


def quantize(x, fmt):
    """x rounded to the format's nearest value (ties to even), as float64 (exact). The sign of
    zero is kept."""
    ebits, mbits, bias, maxf = FORMATS[fmt]
    x = np.asarray(x, dtype=np.float64)
    _, e = np.frexp(np.abs(x))              # |x| = m * 2**e, m in [0.5, 1): exponent is e - 1
    e = np.maximum(e - 1, 1 - bias)          # below the normal range the spacing stays fixed
    q = np.ldexp(1.0, e - mbits)             # spacing of representable values around x
    y = np.round(x / q) * q                  # x / q is exact; np.round ties to even
    y = np.clip(y, -maxf, maxf)
    return np.copysign(y, x)


def to_bits(y, fmt):
    """Bit patterns (uint8 for FP8, uint16 for FP16/BF16) of values already in the format."""
    ebits, mbits, bias, _ = FORMATS[fmt]
    y = np.asarray(y, dtype=np.float64)
    a = np.abs(y)
    _, e = np.frexp(a)
    e = e - 1
    normal = a >= np.ldexp(1.0, 1 - bias)
    exp_field = np.where(normal, e + bias, 0)
    mant = np.where(normal, a / np.ldexp(1.0, np.where(normal, e, 0) - mbits) - (1 << mbits),
                    a / np.ldexp(1.0, 1 - bias - mbits))
    bits = (np.signbit(y).astype(np.int64) << (ebits + mbits)) | (exp_field.astype(np.int64) << mbits) \
        | mant.astype(np.int64)
    return bits.astype(np.uint8 if ebits + mbits == 7 else np.uint16)


def bf16_bits(x):
    """BF16 bit patterns of FP32 values (round to nearest even, as torch's cast), fast path."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_cell(x):
    """Spacing of BF16 values around each |x| (2**(exponent - 7); the subnormal spacing below
    the normal range). An FP32 update smaller than half of it cannot change the BF16 value of
    a weight sitting at a BF16 value; the mechanism's bound counts the updates at least that big."""
    _, e = np.frexp(np.abs(np.asarray(x, dtype=np.float64)))
    return np.ldexp(1.0, np.maximum(e - 1, -126) - 7)


def pow2_scale(amax, fmt):
    """Per-tensor power-of-two scale putting amax at or under the format's largest value (the
    scaled FP8 of inference kernels; a power of two adds no rounding of its own)."""
    maxf = FORMATS[fmt][3]
    if amax <= 0:
        return 1.0
    return float(np.ldexp(1.0, int(np.floor(np.log2(maxf / amax)))))
