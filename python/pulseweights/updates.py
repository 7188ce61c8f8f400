# SPDX-License-Identifier: Apache-2.0
"""A patch's changes as sparse per-tensor updates (index, values, deltas) for an engine that applies a step to its own tensors."""
from __future__ import annotations

import ctypes
import os
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Tuple, Union

from . import _lib
from .tensors import Tensors, Wrapped, as_tensors

PathLike = Union[str, bytes, "os.PathLike[str]"]

# pulse_dtype codes of the element-wise dtypes -> element width in bytes; every other dtype is
# OPAQUE (code 0): its changes are bytes.
_UNIT = {1: 2, 2: 2, 3: 4, 4: 1, 5: 1}
_UNIT_BY_NAME = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "F8_E5M2": 1}
# Bits per element of every safetensors dtype the library knows (node/checkpoint/safetensors.c):
# a tensor's bytes, which an OPAQUE update's byte offsets index.
_BITS = {"BF16": 16, "F16": 16, "F32": 32, "F8_E4M3": 8, "F8_E5M2": 8, "F64": 64, "I64": 64, "I32": 32,
         "I16": 16, "I8": 8, "U64": 64, "U32": 32, "U16": 16, "U8": 8, "BOOL": 8, "F8_E8M0": 8, "C64": 64,
         "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}
_WANT = ("index", "values", "deltas")


class TensorUpdate(NamedTuple):
    name: str
    dtype: str
    index: Any
    values: Any
    deltas: Any
    shape: Tuple[int, ...]
    nbytes: Optional[int]


TensorUpdate.__doc__ = """One tensor's changes in a patch, as numpy arrays filled in place by the library.
dtype is the safetensors dtype name. For an element-wise dtype (BF16, F16, F32, F8_*) index holds
flat element indices (int64, strictly ascending), values the new bit patterns (uint16 for BF16/F16,
uint32 for F32, uint8 for F8) and deltas the bit differences new - old, to be added with
wraparound (int16, int32, int8). For any other dtype (I64, BOOL, U8, ...) index holds byte offsets
into the tensor, values the new bytes (uint8), deltas the byte differences (int8). Each is None when
not asked for or not available (see Patch.updates). shape and nbytes describe the tensor (nbytes
None for a dtype name this package does not know)."""


def _np():
    import numpy
    return numpy


def _dtypes(np, width):
    """(unsigned, signed) numpy dtypes of this width in bytes."""
    return {1: (np.uint8, np.int8), 2: (np.uint16, np.int16), 4: (np.uint32, np.int32)}[width]


class _OpenCkpt(_lib.Closeable):
    """A checkpoint file opened read-only (pulse_ckpt_open), the base of Patch.updates."""

    def __init__(self, path):
        _lib.need_file(path, "base checkpoint")
        self.ptr = ctypes.c_void_p()
        _lib.check(_lib.ckpt_open(ctypes.byref(self.ptr), _lib.enc(path), _lib.CKPT_READ))

    def close(self):
        if self.ptr:
            _lib.ckpt_close(ctypes.byref(self.ptr))


class Patch(_lib.Closeable):
    """An open patch file (pulse_patch_open: header and tensor table checked; chunks are read,
    digest-checked and decoded when used). Patch.from_bytes opens one held in memory. A context
    manager; close() is idempotent."""

    def __init__(self, path: PathLike) -> None:
        self._p = ctypes.c_void_p()
        _lib.need_file(path, "patch")
        _lib.check(_lib.patch_open(ctypes.byref(self._p), _lib.enc(path)))

    @classmethod
    def from_bytes(cls, data: Union[bytes, bytearray, memoryview]) -> "Patch":
        """A patch from its bytes (pulse_patch_open_mem, which copies them)."""
        self = cls.__new__(cls)
        self._p = ctypes.c_void_p()
        buf = bytes(data)
        _lib.check(_lib.patch_open_mem(ctypes.byref(self._p), buf, len(buf)))
        return self

    @classmethod
    def from_head(cls, head: Union[bytes, bytearray, memoryview], patch_bytes: int) -> "Patch":
        """A sliced patch from its head alone (pulse_patch_open_head): the first head_bytes of a
        patch of patch_bytes bytes, e.g. a sync record's "patch-index" object. Mark what you hold
        with want(), fetch the byte ranges missing() lists from the patch (ranged GETs) and hand
        them to supply(); updates() then gives the changes of the chunks supplied."""
        self = cls.__new__(cls)
        self._p = ctypes.c_void_p()
        buf = bytes(head)
        _lib.check(_lib.patch_open_head(ctypes.byref(self._p), buf, len(buf), int(patch_bytes)))
        return self

    @property
    def sliced(self) -> bool:
        """True for a patch that holds only some of its chunks (from_head, or handed over by an
        EngineFollower with slices): updates() gives only theirs."""
        return bool(_lib.patch_is_sliced(self._handle()))

    @property
    def head_bytes(self) -> int:
        """Bytes of the head (header, tensor table, digest): where the chunk data starts."""
        return int(_lib.patch_head_bytes(self._handle()))

    def want(self, tensor: str, start: int, stop: int) -> None:
        """Marks the chunks holding flat elements [start, stop) of tensor as wanted (sliced only)."""
        i = ctypes.c_size_t()
        _lib.check(_lib.patch_tensor_find(self._handle(), _lib.enc(tensor), ctypes.byref(i)))
        _lib.check(_lib.patch_want(self._handle(), i.value, int(start), int(stop)))

    def missing(self, max_bytes: int = 0) -> List[Tuple[int, int]]:
        """(offset, length) byte ranges of the patch holding wanted chunks not yet supplied,
        neighbours merged up to max_bytes (0: 8 MiB)."""
        n = _lib.patch_missing(self._handle(), int(max_bytes), None, 0)
        out = (_lib.PatchRange * max(1, n))()
        _lib.patch_missing(self._handle(), int(max_bytes), out, n)
        return [(int(out[k].offset), int(out[k].length)) for k in range(n)]

    def supply(self, offset: int, data: Union[bytes, bytearray, memoryview]) -> None:
        """Hands in the patch's bytes at offset (whole chunks, e.g. one range missing() listed):
        each chunk is checked against its digest (PulseError PULSE_ERR_CORRUPT naming it) and
        copied; nothing is added on an error."""
        buf = bytes(data)
        _lib.check(_lib.patch_supply(self._handle(), int(offset), buf, len(buf)))

    def close(self) -> None:
        if getattr(self, "_p", None):
            _lib.patch_close(ctypes.byref(self._p))

    def _handle(self):
        if not self._p:
            raise ValueError("patch is closed")
        return self._p

    @property
    def base_id(self) -> str:
        """The state id (hex) of the checkpoint the patch applies to."""
        return ctypes.string_at(_lib.patch_base_id(self._handle()), 32).hex()

    @property
    def result_id(self) -> str:
        """The state id (hex) of the checkpoint the patch makes."""
        return ctypes.string_at(_lib.patch_result_id(self._handle()), 32).hex()

    @property
    def values(self) -> str:
        """How changed values travel: "ulp" (bit differences) or "abs" (new bit patterns)."""
        return "ulp" if _lib.patch_values(self._handle()) == _lib.VALUES_ULP else "abs"

    def _info(self, i):
        info = _lib.PatchTensorInfo()
        _lib.check(_lib.patch_tensor_info_get(self._handle(), i, 0, ctypes.byref(info)))
        return info

    @property
    def tensors(self) -> List[str]:
        """Every tensor's name (changed or not), in the patch's order (bytewise ascending)."""
        return [self._info(i).name.decode("utf-8") for i in range(_lib.patch_tensor_count(self._handle()))]

    def verify(self, threads: int = 0) -> None:
        """Reads, digest-checks and decodes every chunk (pulse_patch_verify); PulseError when one fails."""
        _lib.check(_lib.patch_verify(self._handle(), None, int(threads)))

    def updates(self, base: Union[None, PathLike, Tensors] = None, threads: int = 0,
                want: Iterable[str] = _WANT) -> Dict[str, TensorUpdate]:
        """name -> TensorUpdate for every tensor with changes (pulse_patch_tensor_updates).

        The whole patch is verified first (every chunk's digest and coding, and base's layout):
        if anything fails, PulseError and nothing is returned, so a step reaches an engine whole
        or not at all. A patch in memory that was verified already (as an EngineFollower's is
        before on_patch) is not checked again. A sliced patch gives the changes of the chunks it
        holds. The arrays are numpy, allocated here and written by the library in place.

        base: the checkpoint in the patch's BASE state, as a path (file, index or directory) or a
        mapping name -> numpy array / torch tensor (read from a contiguous CPU copy when not
        contiguous or not on the CPU); its layout must be the patch's (PULSE_ERR_MISMATCH), its
        state is the caller's to vouch for (no state id is computed: compare pw.state_id(base)
        with base_id when unsure). Without base a ulp patch gives index and deltas, an abs
        patch index and values, and changed OPAQUE tensors (I64, BOOL, ...) get None for all
        three (whole-chunk replacements: which bytes changed is known only against base).

        want: which of "index", "values", "deltas" to fill; the others are None."""
        want = tuple(want)
        for w in want:
            if w not in _WANT:
                raise ValueError("want: %r is not one of %s" % (w, ", ".join(_WANT)))
        np = _np()
        p = self._handle()
        ulp = self.values == "ulp"
        held = None
        if base is None:
            bptr = None
        elif isinstance(base, (str, bytes, os.PathLike)):
            held = _OpenCkpt(base)
            bptr = held.ptr
        else:
            held = Wrapped(as_tensors(base, copy=True), writable=False)
            bptr = held.ptr
        try:
            _lib.check(_lib.patch_verify(p, bptr, int(threads)))
            out = {}
            for i in range(_lib.patch_tensor_count(p)):
                n = int(_lib.patch_tensor_changes(p, i))
                if not n:
                    continue
                info = self._info(i)
                name = info.name.decode("utf-8")
                dtype = info.dtype_name.decode("ascii", "replace")
                shape = tuple(int(info.shape[k]) for k in range(info.ndim))
                bits = _BITS.get(dtype)
                nbytes = int(info.nelems) * bits // 8 if bits else None
                unit = _UNIT.get(int(info.dtype), 0)
                has = {"index": bool(unit) or bptr is not None,
                       "values": (bool(unit) and not ulp) or bptr is not None,
                       "deltas": (bool(unit) and ulp) or bptr is not None}
                udt, sdt = _dtypes(np, unit or 1)
                index = np.empty(n, np.int64) if "index" in want and has["index"] else None
                values = np.empty(n, udt) if "values" in want and has["values"] else None
                deltas = np.empty(n, sdt) if "deltas" in want and has["deltas"] else None
                if index is not None or values is not None or deltas is not None:
                    _lib.check(_lib.patch_tensor_updates(
                        p, i, bptr, int(threads), None if index is None else index.ctypes.data,
                        None if values is None else values.ctypes.data,
                        None if deltas is None else deltas.ctypes.data))
                out[name] = TensorUpdate(name, dtype, index, values, deltas, shape, nbytes)
            return out
        finally:
            if held is not None:
                held.close()


def _plan(name, t, u):
    """Checks that update u fits tensor t (nothing written); returns how to write it."""
    np = _np()
    if u.index is None or (u.values is None and u.deltas is None):
        raise ValueError("tensor %s: the update has no %s (an OPAQUE %s tensor needs Patch.updates(base=...))"
                         % (name, "index" if u.index is None else "values or deltas", u.dtype))
    unit = _UNIT_BY_NAME.get(u.dtype, 0)
    numel = 1
    for d in u.shape:
        numel *= d
    is_torch = type(t).__module__.startswith("torch")
    if is_torch:
        width, count, contiguous = t.element_size(), t.numel(), t.is_contiguous()
    elif hasattr(t, "dtype") and hasattr(t, "flags"):
        width, count, contiguous = t.dtype.itemsize, t.size, bool(t.flags["C_CONTIGUOUS"])
        if not t.flags["WRITEABLE"]:
            raise ValueError("tensor %s: the numpy array is read-only" % name)
    else:
        raise TypeError("tensor %s: %s is not a torch tensor or a numpy array" % (name, type(t).__name__))
    if unit:
        if width != unit:
            raise ValueError("tensor %s: %s elements are %d bytes, the tensor's %d" % (name, u.dtype, unit, width))
        if count != numel:
            raise ValueError("tensor %s: %d elements, the patch's %d (shape %s)" % (name, count, numel, list(u.shape)))
    else:
        if u.nbytes is not None and count * width != u.nbytes:
            raise ValueError("tensor %s: %d bytes, the patch's %s tensor has %d (shape %s)"
                             % (name, count * width, u.dtype, u.nbytes, list(u.shape)))
        bits = _BITS.get(u.dtype, 0)
        if bits >= 8 and width != bits // 8:
            raise ValueError("tensor %s: %s elements are %d bytes, the tensor's %d" % (name, u.dtype, bits // 8, width))
        if u.nbytes is None and len(u.index) and int(u.index[-1]) >= count * width:
            raise ValueError("tensor %s: the update writes byte %d of %d" % (name, int(u.index[-1]), count * width))
    if not contiguous:
        raise ValueError("tensor %s: not contiguous (updates are written in place)" % name)
    sdt = _dtypes(np, unit or 1)[1]
    src = u.values.view(sdt) if u.values is not None else u.deltas
    index = u.index
    nelems = count * width // _np().dtype(sdt).itemsize   # OPAQUE: the tensor's bytes
    if not is_torch or t.device.type == "cpu":
        index = np.ascontiguousarray(index, dtype=np.int64)
        src = np.ascontiguousarray(src)
        if len(src) != len(index):
            raise ValueError("tensor %s: %d positions, %d %s" % (name, len(index), len(src),
                                                                   "values" if u.values is not None else "deltas"))
        # The positions of every tensor are checked (in range, strictly ascending: PulseError
        # naming them) before the first write, so a step reaches the tensors whole or not at all.
        _lib.check(_scatter(None, nelems, _np().dtype(sdt).itemsize, index.ctypes.data, None, len(index), 0))
    return (t, is_torch, sdt, index, src, u.values is None, nelems)


# Sparse updates into a CPU tensor in place (node/patch/patch_scatter.c): one pass, no temporaries,
# where numpy's `flat[index] += src` gathers, adds and scatters through index-sized temporaries.
_scatter = _lib._proto("pulse_updates_scatter", ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint,
                       ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int)


def _data_ptr(t, is_torch):
    """The address of a contiguous CPU tensor's first element (numpy arrays are CPU-held), or None."""
    if not is_torch:
        return t.ctypes.data
    return t.data_ptr() if t.device.type == "cpu" else None


def _write(t, is_torch, sdt, index, src, add, nelems):
    ptr = _data_ptr(t, is_torch)
    if ptr is not None:
        _lib.check(_scatter(ptr, nelems, _np().dtype(sdt).itemsize, index.ctypes.data, src.ctypes.data, len(index),
                            1 if add else 0))
        return
    import torch
    tdt = {1: torch.int8, 2: torch.int16, 4: torch.int32}[_np().dtype(sdt).itemsize]
    with torch.no_grad():
        flat = t.view(tdt).view(-1)
        idx = torch.from_numpy(index).to(flat.device)
        v = torch.from_numpy(src).to(flat.device)
        if add:
            flat[idx] += v   # positions are unique: no accumulation needed
        else:
            flat[idx] = v


def apply_updates(tensors: Union[Mapping[str, Any], Any], updates: Mapping[str, TensorUpdate]) -> None:
    """Applies updates (from Patch.updates) to tensors in place: a mapping name -> torch tensor
    (CPU or CUDA, any dtype of the update's element width: bfloat16, int16, ...) or numpy array,
    or an nn.Module (its state_dict). Writes values where the update has them (idempotent),
    else adds deltas (the tensors must then hold the patch's base state). CPU-held tensors
    (numpy, torch on the CPU) are written in place by the library's scatter
    (pulse_updates_scatter), others by torch indexing on their device. Every update is
    checked first (tensor present, element width, element count, contiguous: a ValueError
    naming the tensor; for CPU-held tensors positions in range and strictly ascending: a
    PulseError naming them) before anything is written."""
    if not hasattr(tensors, "items") and callable(getattr(tensors, "state_dict", None)):
        tensors = tensors.state_dict()   # shares the module's storage
    plans = []
    for name, u in updates.items():
        if name not in tensors:
            raise ValueError("tensor %s: not in the tensors given" % name)
        t = tensors[name]
        if isinstance(t, tuple) and len(t) == 2 and isinstance(t[1], str):
            t = t[0]   # (array, "BF16") as the other calls take it
        plans.append(_plan(name, t, u))
    for plan in plans:
        _write(*plan)
