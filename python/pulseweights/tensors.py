# SPDX-License-Identifier: Apache-2.0
"""Tensors as the library sees them: (name, pointer, dtype, shape) taken from numpy arrays or torch tensors without copying."""
from __future__ import annotations

import ctypes
import sys
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

from . import _lib

# numpy dtype name -> safetensors dtype. uint16 and uint8 are left out on purpose: they are
# how BF16 and FP8 bits are usually held in numpy, so they need an explicit dtype.
_NUMPY = {
    "float32": "F32", "float16": "F16", "float64": "F64",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8",
    "uint64": "U64", "uint32": "U32", "bool": "BOOL",
}
# Element widths in bytes of the dtypes an explicit dtype may name.
_WIDTH = {
    "BF16": 2, "F16": 2, "F32": 4, "F64": 8, "F8_E4M3": 1, "F8_E5M2": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1,
}

# What the public calls take: an array or tensor, optionally with its safetensors dtype named,
# in a mapping name -> value, or an nn.Module (anything with state_dict()).
TensorLike = Union[Any, Tuple[Any, str], "Tensor"]
Tensors = Union[Mapping[str, TensorLike], Sequence["Tensor"], Any]


def _torch_dtypes(torch):
    m = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32", torch.float64: "F64",
         torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
         torch.uint8: "U8", torch.bool: "BOOL"}
    for attr, name in (("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2")):
        if hasattr(torch, attr):
            m[getattr(torch, attr)] = name
    return m


class Tensor:
    """One tensor for the library: name, data pointer (int), safetensors dtype name, shape.
    nbytes defaults to the shape's elements times the dtype's width. `owner` is kept referenced
    so the buffer stays alive as long as this object; `writable` says whether it may be written."""

    __slots__ = ("name", "ptr", "dtype", "shape", "nbytes", "owner", "writable")

    def __init__(self, name: str, ptr: Optional[int], dtype_name: str, shape: Sequence[int],
                 nbytes: Optional[int] = None, owner: Any = None, writable: bool = True) -> None:
        self.name = str(name)
        self.ptr = int(ptr or 0)
        self.dtype = str(dtype_name)
        self.shape = tuple(int(d) for d in shape)
        if nbytes is None:
            n = 1
            for d in self.shape:
                n *= d
            if self.dtype not in _WIDTH:
                raise ValueError("tensor %s: give nbytes for dtype %s" % (self.name, self.dtype))
            nbytes = n * _WIDTH[self.dtype]
        self.nbytes = int(nbytes)
        self.owner = owner
        self.writable = writable

    def __repr__(self) -> str:
        return "Tensor(%r, 0x%x, %r, %r)" % (self.name, self.ptr, self.dtype, self.shape)


def _from_numpy(name, a, dtype, copy):
    if copy and not a.flags["C_CONTIGUOUS"]:
        import numpy
        a = numpy.ascontiguousarray(a)   # read only: a copy is as good, and kept alive by owner=
    if not a.flags["C_CONTIGUOUS"]:
        raise ValueError("tensor %s: numpy array is not C-contiguous (use numpy.ascontiguousarray, "
                         "which copies: then keep and use the copy)" % name)
    if dtype is None:
        dtype = _NUMPY.get(a.dtype.name)
        if dtype is None:
            raise ValueError("tensor %s: numpy dtype %s needs an explicit dtype, e.g. (array, 'BF16')"
                             % (name, a.dtype.name))
    elif _WIDTH.get(dtype) not in (None, a.dtype.itemsize):
        raise ValueError("tensor %s: %s elements are %d bytes, the array's %d"
                         % (name, dtype, _WIDTH[dtype], a.dtype.itemsize))
    return Tensor(name, a.ctypes.data, dtype, a.shape, a.nbytes, owner=a, writable=bool(a.flags["WRITEABLE"]))


def _from_torch(name, t, dtype, copy):
    import torch
    if copy:   # read only: a contiguous CPU copy is as good (kept alive by owner=)
        t = t.detach()
        if t.device.type != "cpu":
            t = t.to("cpu")
        if not t.is_contiguous():
            t = t.contiguous()
    if t.device.type != "cpu":
        raise ValueError("tensor %s: on %s; the library reads host memory (move it with .cpu())" % (name, t.device))
    if not t.is_contiguous():
        raise ValueError("tensor %s: torch tensor is not contiguous (.contiguous() copies: keep the copy)" % name)
    if dtype is None:
        dtype = _torch_dtypes(torch).get(t.dtype)
        if dtype is None:
            raise ValueError("tensor %s: torch dtype %s has no safetensors name here" % (name, t.dtype))
    nbytes = t.numel() * t.element_size()
    return Tensor(name, t.data_ptr() if nbytes else 0, dtype, tuple(t.shape), nbytes, owner=t, writable=True)


def to_tensor(name: str, value: TensorLike, copy: bool = False) -> Tensor:
    """A Tensor from a numpy array, a torch tensor, a Tensor, or (array_or_tensor, dtype_name).
    copy=True (read-only use): a tensor that is not contiguous or not on the CPU becomes a
    contiguous CPU copy instead of a ValueError."""
    dtype = None
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], str):
        value, dtype = value
    if isinstance(value, Tensor):
        return value
    mod = type(value).__module__
    if mod.startswith("torch") or ("torch" in sys.modules and isinstance(value, sys.modules["torch"].Tensor)):
        return _from_torch(name, value, dtype, copy)
    if hasattr(value, "ctypes") and hasattr(value, "flags") and hasattr(value, "dtype"):
        return _from_numpy(name, value, dtype, copy)
    raise TypeError("tensor %s: %s is not a numpy array, a torch tensor or a pulseweights.Tensor"
                    % (name, type(value).__name__))


def as_tensors(mapping: Tensors, copy: bool = False) -> List[Tensor]:
    """list[Tensor] from a mapping name -> tensor (a state_dict, a dict of arrays), a torch
    nn.Module (its state_dict(): parameters and buffers, sharing their storage), or a list of
    Tensor. copy: see to_tensor."""
    if isinstance(mapping, (list, tuple)) and all(isinstance(t, Tensor) for t in mapping):
        return list(mapping)
    if not hasattr(mapping, "items") and callable(getattr(mapping, "state_dict", None)):
        mapping = mapping.state_dict()
    if not hasattr(mapping, "items"):
        raise TypeError("tensors: %s is not a mapping name -> tensor, an nn.Module or a list of Tensor"
                        % type(mapping).__name__)
    return [to_tensor(name, value, copy) for name, value in mapping.items()]


def mem_tensors(tensors: Sequence[Tensor]):
    """The pulse_mem_tensor array of TENSORS, with what keeps its strings alive: (array, n, keep)."""
    n = len(tensors)
    arr = (_lib.MemTensor * max(n, 1))()
    keep = []
    for i, t in enumerate(tensors):
        if len(t.shape) > _lib.MAX_DIMS:
            raise ValueError("tensor %s: %d dimensions (at most %d)" % (t.name, len(t.shape), _lib.MAX_DIMS))
        name = t.name.encode("utf-8")
        keep.append(name)
        m = arr[i]
        m.name = name
        m.dtype_name = t.dtype.encode("ascii")
        m.ndim = len(t.shape)
        for k, d in enumerate(t.shape):
            m.shape[k] = d
        m.data = t.ptr or None
        m.nbytes = t.nbytes
    return arr, n, keep


def resident_tensors(mapping: Tensors) -> Tuple[List[Tensor], int]:
    """The tensors where they are, never copied, and where that is: host memory (numpy arrays,
    CPU torch tensors) or one CUDA device (torch tensors on it, contiguous): (tensors,
    _lib.MEM_HOST or _lib.MEM_CUDA). Tensors on more than one kind of memory are a ValueError."""
    if not hasattr(mapping, "items") and callable(getattr(mapping, "state_dict", None)):
        mapping = mapping.state_dict()
    if not hasattr(mapping, "items"):
        raise TypeError("tensors: %s is not a mapping name -> tensor or an nn.Module" % type(mapping).__name__)
    out, where = [], set()
    for name, value in mapping.items():
        dev = getattr(value, "device", None)
        if getattr(dev, "type", "cpu") == "cuda":
            import torch
            if not value.is_contiguous():
                raise ValueError("tensor %s: not contiguous on %s" % (name, dev))
            dtype = _torch_dtypes(torch).get(value.dtype)
            if dtype is None:
                raise ValueError("tensor %s: torch dtype %s has no safetensors name here" % (name, value.dtype))
            out.append(Tensor(name, value.data_ptr(), dtype, tuple(value.shape), value.numel() * value.element_size(),
                              owner=value, writable=False))
            where.add((_lib.MEM_CUDA, dev.index))
        else:
            out.append(to_tensor(name, value))
            where.add((_lib.MEM_HOST, None))
    if len(where) > 1:
        raise ValueError("tensors on %s: a part's changes are found where all of its tensors are, on one device"
                         % ", ".join(sorted("cpu" if w == _lib.MEM_HOST else "cuda:%s" % d for w, d in where)))
    return out, (where.pop()[0] if where else _lib.MEM_HOST)


class Wrapped(_lib.Closeable):
    """A pulse_ckpt over the tensors' own buffers (pulse_ckpt_wrap). Keeps the tensors (and so
    their buffers) referenced until closed."""

    def __init__(self, tensors, writable):
        self.tensors = list(tensors)
        if writable:
            for t in self.tensors:
                if not t.writable:
                    raise ValueError("tensor %s: the buffer is read-only and would be written" % t.name)
        self._arr, n, self._names = mem_tensors(self.tensors)
        self.ptr = ctypes.c_void_p()
        _lib.check(_lib.ckpt_wrap(ctypes.byref(self.ptr), self._arr, n,
                                  _lib.CKPT_WRITE if writable else _lib.CKPT_READ))

    def close(self):
        if self.ptr:
            _lib.ckpt_close(ctypes.byref(self.ptr))


def state_id(state_dict: Tensors, threads: int = 0) -> str:
    """The state id (hex) of these tensors (a mapping or an nn.Module; tensors not contiguous or
    not on the CPU are read from a copy): what `pulse hash` prints for a safetensors file holding them."""
    with Wrapped(as_tensors(state_dict, copy=True), writable=False) as w:
        out = (ctypes.c_uint8 * 32)()
        _lib.check(_lib.ckpt_state_id(w.ptr, int(threads), out))
        return _lib.hex32(out)
