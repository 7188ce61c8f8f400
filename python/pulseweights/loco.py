# SPDX-License-Identifier: Apache-2.0
"""PULSELoCo on in-memory FP32 parameters: a trainer state from tensors, and one round with tensors in and out."""
from __future__ import annotations

import ctypes
from typing import Any, Dict, Iterable, Optional, Union

from . import _lib
from .sync import PathLike
from .tensors import Tensors, as_tensors


def _loco_tensors(mapping, what, writable):
    ts = as_tensors(mapping)
    arr = (_lib.LocoTensor * max(len(ts), 1))()
    names = []
    for i, t in enumerate(ts):
        if t.dtype != "F32":
            raise ValueError("%s tensor %s: LoCo works on F32 parameters, not %s" % (what, t.name, t.dtype))
        if writable and not t.writable:
            raise ValueError("%s tensor %s: read-only buffer" % (what, t.name))
        if len(t.shape) > _lib.MAX_DIMS:
            raise ValueError("%s tensor %s: %d dimensions" % (what, t.name, len(t.shape)))
        name = t.name.encode("utf-8")
        names.append(name)
        arr[i].name = name
        arr[i].ndim = len(t.shape)
        for k, d in enumerate(t.shape):
            arr[i].shape[k] = d
        arr[i].data = t.ptr or None
    return arr, len(ts), (ts, names)   # the last keeps buffers and names alive during the call


def _view(view):
    v = _lib.loco_view_from_name(view.encode("ascii"))
    if v < 0:
        raise ValueError("view must be bf16, fp16, e4m3 or e5m2, not %r" % (view,))
    return v


def loco_init(state_dir: PathLike, params: Tensors, view: str = "bf16") -> None:
    """Starts a trainer state in STATE_DIR from PARAMS (name -> float32 array/tensor): theta_0 =
    PARAMS, no error feedback, no momentum, round 0. An existing state is refused (PULSE_ERR_EXISTS)."""
    arr, n, keep = _loco_tensors(params, "params", False)
    _lib.check(_lib.loco_init_tensors(_lib.enc(state_dir), arr, n, _view(view)))
    del keep


def loco_round(store: str, run: str, key: PathLike, state_dir: PathLike,
               trainers: Union[PathLike, Iterable[PathLike]], local: Tensors, out: Optional[Tensors] = None,
               deadline: float = 300.0, quorum: int = 0, outer_lr: float = 1.0, outer_momentum: float = 0.0,
               nesterov: bool = False, values: str = "fp32", threads: int = 0, shard_elems: int = 0,
               verbose: bool = False) -> Dict[str, Any]:
    """One PULSELoCo round (docs/loco.md). LOCAL: theta_local after H local steps (read only);
    OUT (may be LOCAL itself): receives theta_{r+1} in place. TRAINERS: .pub files (or directories
    of them) of the other trainers; this trainer's own key is always one. Returns a dict."""
    if values not in ("fp32", "bf16"):
        raise ValueError("values must be 'fp32' or 'bf16', not %r" % (values,))
    if isinstance(trainers, str):
        trainers = [trainers]
    la, nl, keep_l = _loco_tensors(local, "local", False)
    keep_o = None
    o = _lib.LocoRoundOpts()
    _lib.loco_round_default_opts(ctypes.byref(o))
    _lib.check_size(o, "pulse_loco_round_opts")
    keep = [_lib.enc(store), _lib.enc(run), _lib.enc(key), _lib.enc(state_dir)]
    o.store_url, o.run, o.key_path, o.state_dir = keep
    tp = [_lib.enc(t) for t in trainers]
    tarr = (ctypes.c_char_p * max(len(tp), 1))(*tp)
    o.trust_paths = ctypes.cast(tarr, ctypes.POINTER(ctypes.c_char_p))
    o.n_trust = len(tp)
    o.local_tensors = ctypes.cast(la, ctypes.c_void_p)
    o.n_local = nl
    if out is not None:
        oa, no, keep_o = _loco_tensors(out, "out", True)
        o.out_tensors = ctypes.cast(oa, ctypes.c_void_p)
        o.n_out = no
    o.deadline_s = float(deadline)
    o.quorum = int(quorum)
    o.outer_lr = float(outer_lr)
    o.momentum = float(outer_momentum)
    o.nesterov = 1 if nesterov else 0
    o.threads = int(threads)
    o.verbose = 1 if verbose else 0
    o.shard_elems = int(shard_elems)
    o.bf16_values = 1 if values == "bf16" else 0
    rep = _lib.LocoReport()
    rc = _lib.loco_round_(ctypes.byref(o), ctypes.byref(rep))
    del keep_l, keep_o, keep, tarr
    _lib.check(rc)
    return {
        "round": int(rep.round), "sent": int(rep.sent), "params": int(rep.params),
        "shard_bytes": int(rep.shard_bytes), "bytes_up": int(rep.uploaded), "bytes_down": int(rep.downloaded),
        "trainers": int(rep.trainers), "members": int(rep.included), "self_included": bool(rep.self_included),
        "excluded": int(rep.excluded), "results_compared": int(rep.results_compared),
        "results_mismatched": int(rep.results_mismatched), "adopted": bool(rep.adopted),
        "view_base": _lib.hex32(rep.base), "view_state": _lib.hex32(rep.result),
    }
