# SPDX-License-Identifier: Apache-2.0
"""Where a checkpoint tensor's elements live in a serving engine's fused, tensor-parallel parameters: map sparse updates there and apply them in place."""
from __future__ import annotations

import ctypes
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from . import _lib
from .updates import _scatter


class Piece(NamedTuple):
    """The part of checkpoint tensor `name` (2-D, shape `shape`) that one rank holds: the range
    [start, stop) along `dim` (0: rows, 1: columns; the other dimension whole), stored in engine
    parameter `param` (shape `param_shape`) from offset `at` along the same dimension. A 1-D
    tensor is a single row of `shape[0]` elements: (1, n)."""
    name: str
    shape: Tuple[int, int]
    dim: int
    start: int
    stop: int
    param: str
    param_shape: Tuple[int, int]
    at: int


class Mapped(NamedTuple):
    """Updates of one checkpoint tensor that land in one engine parameter: flat positions in the
    parameter (int64, ascending) and `sel`, which of the update's entries they are."""
    piece: Piece
    index: np.ndarray
    sel: np.ndarray


def _as2d(shape: Sequence[int]) -> Tuple[int, int]:
    if len(shape) == 1:
        return (1, int(shape[0]))
    if len(shape) != 2:
        raise ValueError("only 1-D and 2-D tensors are laid out here, not shape %s" % (tuple(shape),))
    return (int(shape[0]), int(shape[1]))


def map_index(piece: Piece, index: np.ndarray) -> Mapped:
    """The entries of `index` (flat positions in the checkpoint tensor) that this rank holds, as
    flat positions in its engine parameter. Pure arithmetic on the positions: O(changes)."""
    rows, cols = piece.shape
    index = np.asarray(index, dtype=np.int64)
    if index.size and (index[0] < 0 or index[-1] >= rows * cols):
        raise ValueError("tensor %s: an index outside its %d elements" % (piece.name, rows * cols))
    r, c = np.divmod(index, cols)
    along = r if piece.dim == 0 else c
    sel = np.nonzero((along >= piece.start) & (along < piece.stop))[0]
    r, c = r[sel], c[sel]
    if piece.dim == 0:
        r = r - piece.start + piece.at
    else:
        c = c - piece.start + piece.at
    return Mapped(piece, r * piece.param_shape[1] + c, sel)


def _split(n: int, tp: int, rank: int, what: str) -> Tuple[int, int]:
    if n % tp:
        raise ValueError("%s of %d does not split over %d tensor-parallel ranks" % (what, n, tp))
    return (rank * n // tp, (rank + 1) * n // tp)


def llama_tp_layout(layers: int, hidden: int, intermediate: int, heads: int, kv_heads: int, vocab: int,
                    tp: int, rank: int, head_dim: Optional[int] = None, prefix: str = "model.",
                    tied_embeddings: bool = False) -> Dict[str, List[Piece]]:
    """The layout vLLM and SGLang give a Llama-family model on `tp` ranks, for rank `rank`:
    q/k/v fused into `self_attn.qkv_proj.weight` (this rank's q rows, then its k rows, then its v
    rows; with fewer KV heads than ranks each rank holds the one KV head it needs), gate/up into
    `mlp.gate_up_proj.weight` (gate rows, then up rows), o_proj and down_proj split by columns,
    embed_tokens and lm_head split by vocabulary rows, norms whole on every rank.
    Returns checkpoint name -> the pieces this rank holds."""
    hd = head_dim or hidden // heads
    q_rows, kv_rows = heads * hd, kv_heads * hd
    q0, q1 = _split(q_rows, tp, rank, "q rows")
    if kv_heads >= tp:
        k0, k1 = _split(kv_rows, tp, rank, "kv rows")
    else:
        if tp % kv_heads:
            raise ValueError("%d KV heads cannot be replicated evenly over %d ranks" % (kv_heads, tp))
        h = rank * kv_heads // tp
        k0, k1 = h * hd, (h + 1) * hd
    g0, g1 = _split(intermediate, tp, rank, "intermediate")
    o0, o1 = _split(q_rows, tp, rank, "o_proj columns")
    v0, v1 = _split(vocab, tp, rank, "vocabulary")
    qn, kn, gn = q1 - q0, k1 - k0, g1 - g0
    out: Dict[str, List[Piece]] = {}

    def add(name, shape, dim, start, stop, param, param_shape, at):
        out.setdefault(name, []).append(Piece(name, _as2d(shape), dim, start, stop, param, _as2d(param_shape), at))

    for i in range(layers):
        p = "%slayers.%d." % (prefix, i)
        qkv = p + "self_attn.qkv_proj.weight"
        qkv_shape = (qn + 2 * kn, hidden)
        add(p + "self_attn.q_proj.weight", (q_rows, hidden), 0, q0, q1, qkv, qkv_shape, 0)
        add(p + "self_attn.k_proj.weight", (kv_rows, hidden), 0, k0, k1, qkv, qkv_shape, qn)
        add(p + "self_attn.v_proj.weight", (kv_rows, hidden), 0, k0, k1, qkv, qkv_shape, qn + kn)
        add(p + "self_attn.o_proj.weight", (hidden, q_rows), 1, o0, o1, p + "self_attn.o_proj.weight",
            (hidden, o1 - o0), 0)
        gu = p + "mlp.gate_up_proj.weight"
        add(p + "mlp.gate_proj.weight", (intermediate, hidden), 0, g0, g1, gu, (2 * gn, hidden), 0)
        add(p + "mlp.up_proj.weight", (intermediate, hidden), 0, g0, g1, gu, (2 * gn, hidden), gn)
        add(p + "mlp.down_proj.weight", (hidden, intermediate), 1, g0, g1, p + "mlp.down_proj.weight",
            (hidden, gn), 0)
        for norm in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            add(p + norm, (hidden,), 0, 0, 1, p + norm, (hidden,), 0)
    add(prefix + "embed_tokens.weight", (vocab, hidden), 0, v0, v1, prefix + "embed_tokens.weight",
        (v1 - v0, hidden), 0)
    add(prefix + "norm.weight", (hidden,), 0, 0, 1, prefix + "norm.weight", (hidden,), 0)
    if not tied_embeddings:
        add("lm_head.weight", (vocab, hidden), 0, v0, v1, "lm_head.weight", (v1 - v0, hidden), 0)
    return out


def slices(layout: Mapping[str, List[Piece]]) -> List[Tuple[str, int, int]]:
    """The flat element ranges of checkpoint tensors this rank's pieces hold, as (name, start,
    stop): what EngineFollower(slices=...) fetches. A row range is one range; a column range is
    one range per row (chunks span rows, so it still costs most of the tensor's chunks)."""
    out: List[Tuple[str, int, int]] = []
    for name, pieces in layout.items():
        for pc in pieces:
            rows, cols = pc.shape
            if pc.dim == 0 or (pc.start == 0 and pc.stop == cols):
                lo, hi = (pc.start * cols, pc.stop * cols) if pc.dim == 0 else (0, rows * cols)
                out.append((name, lo, hi))
            else:
                out.extend((name, r * cols + pc.start, r * cols + pc.stop) for r in range(rows))
    return out


def whole_layout(shapes: Mapping[str, Sequence[int]]) -> Dict[str, List[Piece]]:
    """The layout of an engine that holds every checkpoint tensor whole under its own name
    (shapes: name -> shape, any number of dimensions, each seen as one row of its elements):
    for apply_patch and apply_updates on unfused, unsharded parameters."""
    out: Dict[str, List[Piece]] = {}
    for name, shape in shapes.items():
        n = 1
        for d in shape:
            n *= int(d)
        out[name] = [Piece(name, (1, n), 0, 0, 1, name, (1, n), 0)]
    return out


def shard(tensors: Mapping[str, Any], layout: Mapping[str, List[Piece]]) -> Dict[str, Any]:
    """This rank's engine parameters cut from whole checkpoint tensors (torch or numpy, 1-D or
    2-D): what an engine loads at start, and what a test compares its updated shards with."""
    params: Dict[str, Any] = {}
    for name, pieces in layout.items():
        t = tensors[name]
        for pc in pieces:
            t2 = t.reshape(pc.shape)
            part = t2[pc.start:pc.stop] if pc.dim == 0 else t2[:, pc.start:pc.stop]
            if pc.param not in params:
                params[pc.param] = _zeros_like(t2, pc.param_shape)
            dst = params[pc.param]
            if pc.dim == 0:
                dst[pc.at:pc.at + part.shape[0]] = part
            else:
                dst[:, pc.at:pc.at + part.shape[1]] = part
    for pc_list in layout.values():
        for pc in pc_list:
            if pc.param_shape[0] == 1:
                params[pc.param] = params[pc.param].reshape(pc.param_shape[1])
    return params


def _zeros_like(t: Any, shape: Tuple[int, int]) -> Any:
    if isinstance(t, np.ndarray):
        return np.zeros(shape, dtype=t.dtype)
    return t.new_zeros(shape)


def _int_view(t: Any, width: int) -> Any:
    """A flat integer view of the parameter's bits (torch or numpy), width 1, 2 or 4 bytes."""
    if isinstance(t, np.ndarray):
        return t.reshape(-1).view({1: np.int8, 2: np.int16, 4: np.int32}[width])
    import torch
    return t.view(-1).view({1: torch.int8, 2: torch.int16, 4: torch.int32}[width])


def _width(t: Any) -> int:
    return int(t.itemsize) if isinstance(t, np.ndarray) else int(t.element_size())


def _cpu_ptr(t: Any) -> Optional[int]:
    """The address of a CPU-held parameter's first element (a numpy array, or a torch tensor on
    the CPU), which the C scatter writes through; None for a tensor on another device."""
    if isinstance(t, np.ndarray):
        return int(t.ctypes.data)
    return int(t.data_ptr()) if t.device.type == "cpu" else None


def _contiguous(t: Any) -> bool:
    if isinstance(t, np.ndarray):
        return bool(t.flags["C_CONTIGUOUS"])
    return bool(t.is_contiguous())


def _checked_param(params: Mapping[str, Any], pc: Piece, name: str, width: int, what: str) -> Any:
    """The engine parameter piece pc of tensor `name` lands in, once it is there, of the layout's
    size, `width` bytes an element, contiguous and writable; ValueError by name otherwise."""
    if pc.param not in params:
        raise ValueError("engine parameter %s (for %s) not given" % (pc.param, name))
    t = params[pc.param]
    numel = int(np.prod(t.shape)) if isinstance(t, np.ndarray) else t.numel()
    if numel != pc.param_shape[0] * pc.param_shape[1]:
        raise ValueError("engine parameter %s holds %d elements, the layout says %s" % (pc.param, numel, pc.param_shape))
    if not width or _width(t) != width:
        raise ValueError("tensor %s: %s for %d-byte parameter %s" % (name, what, _width(t), pc.param))
    # A strided view would be written through a copy (numpy) or not at all (torch).
    if not _contiguous(t):
        raise ValueError("engine parameter %s is not contiguous (updates are written in place)" % pc.param)
    if isinstance(t, np.ndarray) and not t.flags["WRITEABLE"]:
        raise ValueError("engine parameter %s is a read-only numpy array" % pc.param)
    return t


def apply_updates(params: Mapping[str, Any], updates: Mapping[str, Any],
                  layout: Mapping[str, List[Piece]]) -> Dict[str, int]:
    """Applies sparse updates of checkpoint tensors (objects with `index` and `deltas` or
    `values`, as pulseweights.Patch.updates gives) to this rank's engine parameters in place
    (contiguous torch tensors on any device, or numpy arrays): `+= delta` on the bits where
    deltas are given, else `= value`. CPU-held parameters are written by the library's scatter
    (pulse_updates_scatter), others by torch indexing on their device. Every update is mapped
    and checked first (a tensor or parameter missing, a shape or element width that differs, a
    parameter not contiguous or read-only: ValueError by name; positions not strictly ascending:
    PulseError), then written, so a mismatch writes nothing. Updates of tensors this rank does not hold are skipped. Returns
    parameter -> elements written."""
    plan: List[Tuple[Mapped, Any, bool, int]] = []
    for name, u in updates.items():
        pieces = layout.get(name)
        if pieces is None:
            raise ValueError("update of tensor %s, which the layout does not place" % name)
        use_delta = getattr(u, "deltas", None) is not None
        src = u.deltas if use_delta else getattr(u, "values", None)
        if src is None:
            raise ValueError("update of tensor %s has neither deltas nor values" % name)
        src = np.asarray(src)
        for pc in pieces:
            t = _checked_param(params, pc, name, src.dtype.itemsize, "%d-byte updates" % src.dtype.itemsize)
            m = map_index(pc, u.index)
            if m.index.size and _cpu_ptr(t) is not None:
                # Checked (in range, strictly ascending) before the first write, as the write
                # itself checks: a step reaches the shards whole or not at all.
                _lib.check(_scatter(None, pc.param_shape[0] * pc.param_shape[1], _width(t), m.index.ctypes.data, None, m.index.size, 0))
            plan.append((m, src, use_delta, _width(t)))
    written: Dict[str, int] = {}
    for m, src, use_delta, width in plan:
        if not m.index.size:
            continue
        t = params[m.piece.param]
        vals = np.ascontiguousarray(src[m.sel]).view({1: np.int8, 2: np.int16, 4: np.int32}[width])
        ptr = _cpu_ptr(t)
        if ptr is not None:
            # In place in C (node/patch/patch_scatter.c): numpy's `flat[idx] += v` gathers, adds
            # and scatters through temporaries and costs several memcpys of the model a step.
            numel = int(np.prod(t.shape)) if isinstance(t, np.ndarray) else t.numel()
            _lib.check(_scatter(ptr, numel, width, m.index.ctypes.data, vals.ctypes.data, m.index.size,
                                1 if use_delta else 0))
        else:
            import torch
            flat = _int_view(t, width)
            idx = torch.from_numpy(m.index).to(t.device)
            v = torch.from_numpy(vals).to(t.device)
            if use_delta:
                flat[idx] += v   # positions are unique: no lost adds; integer adds wrap like the bits
            else:
                flat[idx] = v
        written[m.piece.param] = written.get(m.piece.param, 0) + int(m.index.size)
    return written


class _CPiece(ctypes.Structure):
    """pulse_piece (patch.h)."""
    _fields_ = [("rows", ctypes.c_uint64), ("cols", ctypes.c_uint64), ("dim", ctypes.c_int),
                ("start", ctypes.c_uint64), ("stop", ctypes.c_uint64), ("param_cols", ctypes.c_uint64),
                ("at", ctypes.c_uint64)]


_apply_piece = _lib._proto("pulse_patch_apply_piece", ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
                           ctypes.POINTER(_CPiece), ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int,
                           ctypes.POINTER(ctypes.c_uint64))


def apply_patch(params: Mapping[str, Any], patch: Any, layout: Mapping[str, List[Piece]],
                threads: int = 0) -> Dict[str, int]:
    """Applies a verified patch (pulseweights.Patch, e.g. the one EngineFollower hands to
    on_patch) to this rank's engine parameters in place, tensor by tensor of the layout.
    CPU-held parameters (numpy, torch on the CPU) are written by the library straight from each
    decoded chunk (pulse_patch_apply_piece): no index or delta arrays, memory the chunk size per
    thread whatever the step's changes. Parameters on another device (CUDA) take the same
    changes through patch.updates() and torch indexing (apply_updates). Every piece is checked
    first (a tensor the patch lacks, a parameter missing, a shape or element width that
    differs, a parameter not contiguous or read-only: ValueError by name), then written.
    Returns parameter -> elements written."""
    from .updates import _UNIT
    handle = patch._handle()
    pieces: List[Tuple[Piece, Any, int]] = []
    other: List[str] = []    # tensors with a piece off the CPU: all their pieces through updates()
    for name, pcs in layout.items():
        i = ctypes.c_size_t()
        rc = _lib.patch_tensor_find(handle, _lib.enc(name), ctypes.byref(i))
        if rc:
            raise ValueError("tensor %s of the layout is not in the patch" % name)
        if not _lib.patch_tensor_changes(handle, i.value):
            continue
        info = _lib.PatchTensorInfo()
        _lib.check(_lib.patch_tensor_info_get(handle, i.value, 0, ctypes.byref(info)))
        width = _UNIT.get(int(info.dtype), 0)
        for pc in pcs:
            _checked_param(params, pc, name, width, "%s changes" % info.dtype_name.decode("ascii", "replace"))
        if any(_cpu_ptr(params[pc.param]) is None for pc in pcs):
            other.append(name)
        else:
            pieces.extend((pc, params[pc.param], i.value) for pc in pcs)
    written: Dict[str, int] = {}
    if other:
        # First, so that its own checks refuse before the library writes anything.
        ups = {k: v for k, v in patch.updates(threads=threads).items() if k in other}
        for k, v in apply_updates(params, ups, {k: layout[k] for k in ups}).items():
            written[k] = written.get(k, 0) + v
    for pc, t, i in pieces:
        numel = int(np.prod(t.shape)) if isinstance(t, np.ndarray) else t.numel()
        c = _CPiece(pc.shape[0], pc.shape[1], pc.dim, pc.start, pc.stop, pc.param_shape[1], pc.at)
        n = ctypes.c_uint64(0)
        _lib.check(_apply_piece(handle, i, ctypes.byref(c), _cpu_ptr(t), numel, int(threads), ctypes.byref(n)))
        written[pc.param] = written.get(pc.param, 0) + int(n.value)
    return written
