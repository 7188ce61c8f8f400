# SPDX-License-Identifier: Apache-2.0
"""A follower of weights a serving engine holds: each verified step handed to callbacks (a patch, or a keyframe file), no copy of the model kept."""
from __future__ import annotations

import ctypes
import os
from typing import Any, Callable, Iterable, List, Optional, Tuple, Union

from . import _lib
from .sync import StepInfo, _pull, _step_info
from .updates import Patch

PathLike = Union[str, bytes, "os.PathLike[str]"]

_ON_PATCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_lib.SyncStep), ctypes.c_void_p)
_ON_KEYFRAME = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_lib.SyncStep), ctypes.c_void_p)
_ON_PROGRESS = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64)


class _Slice(ctypes.Structure):
    """pulse_slice (sync.h): flat elements [start, stop) of one tensor."""
    _fields_ = [("tensor", ctypes.c_char_p), ("start", ctypes.c_uint64), ("stop", ctypes.c_uint64)]


class _EngineOpts(ctypes.Structure):
    """pulse_follow_opts (sync.h) through its engine and slice fields, then room for later ones."""
    _fields_ = [("size", ctypes.c_size_t), ("store_url", ctypes.c_char_p), ("run", ctypes.c_char_p),
                ("trust", ctypes.c_void_p), ("state_dir", ctypes.c_char_p), ("weights_path", ctypes.c_char_p),
                ("threads", ctypes.c_int), ("on_step", _lib.ON_STEP), ("ctx", ctypes.c_void_p),
                ("weights", ctypes.c_void_p), ("durable", ctypes.c_int), ("deadline_s", ctypes.c_double),
                ("on_progress", _ON_PROGRESS), ("progress_ctx", ctypes.c_void_p),
                ("on_patch", _ON_PATCH), ("on_keyframe", _ON_KEYFRAME), ("engine_ctx", ctypes.c_void_p),
                ("slices", ctypes.POINTER(_Slice)), ("n_slices", ctypes.c_size_t),
                ("_tail", ctypes.c_uint8 * _lib._TAIL)]


_file_path = _lib._proto("pulse_ckpt_file_path", ctypes.c_char_p, ctypes.c_void_p, ctypes.c_uint)


class _BorrowedPatch(Patch):
    """The follower's open patch, valid during on_patch only: closing it only forgets it."""

    def __init__(self, ptr: int) -> None:   # noqa: super().__init__ opens a file; not wanted here
        self._p = ctypes.c_void_p(ptr)

    def close(self) -> None:
        self._p = None


class EngineFollower(_lib.Closeable):
    """Keeps weights that live in a serving engine (fused, sharded, on a GPU) at the newest
    published step of a run, without holding them: docs/serving.md.

    on_keyframe(step: StepInfo, path: str): the run's state as a checkpoint file, verified
    against the record's state id, deleted after the call; the engine loads its part of it.
    on_patch(step: StepInfo, patch: Patch): a step verified in full; the engine applies
    patch.updates() to its own tensors (pulseweights.fused.apply_updates). The Patch is valid
    during the call only. A callback that raises refuses the step: it must have written
    nothing; pull() raises its exception and the next pull delivers the same step again.
    STATE_DIR holds the index (which step the engine holds); one per engine rank.

    slices: the parts of tensors this rank holds, as (tensor name, start, stop) flat element
    ranges (pulseweights.fused.slices(layout) gives them for a tensor-parallel layout); None:
    every tensor whole. Each patch step then fetches the patch's head (checked against the
    signed record) and only the chunks that hold those elements, by ranged GETs, each checked
    against its digest; on_patch gets a sliced Patch (patch.sliced) whose updates() hold just
    those chunks' changes. A slice the run does not have fails the pull by name (PulseError
    PULSE_ERR_INVALID) before anything is fetched or written. Keyframes are always whole."""

    def __init__(self, store: str, run: str, trust: Union[PathLike, List[PathLike]], state_dir: PathLike,
                 on_patch: Callable[[StepInfo, Patch], Any], on_keyframe: Callable[[StepInfo, str], Any],
                 threads: int = 0, deadline_s: float = 0,
                 slices: Optional[Iterable[Tuple[str, int, int]]] = None) -> None:
        self._f = ctypes.c_void_p()
        self._trust = ctypes.c_void_p()
        self._error: Optional[BaseException] = None
        self._steps: List[StepInfo] = []
        self._user = (on_patch, on_keyframe)
        try:
            _lib.check(_lib.trust_new(ctypes.byref(self._trust)))
            for t in ([trust] if isinstance(trust, (str, bytes, os.PathLike)) else trust):
                _lib.need_file(t, "trusted key")
                _lib.check(_lib.trust_load(self._trust, _lib.enc(t)))
            o = _EngineOpts()
            _lib.follow_opts_default(ctypes.cast(ctypes.pointer(o), ctypes.POINTER(_lib.FollowOpts)))
            if o.size > ctypes.sizeof(o) or o.size < _EngineOpts.engine_ctx.offset + ctypes.sizeof(ctypes.c_void_p):
                raise ImportError("pulse_follow_opts: the library's struct (%d bytes) does not match this package"
                                  % o.size)
            self._keep = [_lib.enc(store), _lib.enc(run), _lib.enc(state_dir)]
            o.store_url, o.run, o.state_dir = self._keep
            o.trust = self._trust
            o.threads = int(threads)
            o.deadline_s = float(deadline_s)
            self._cbs = (_ON_PATCH(self._on_patch), _ON_KEYFRAME(self._on_keyframe))   # live as long as self
            o.on_patch, o.on_keyframe = self._cbs
            if slices is not None:
                sl = [(str(n), int(a), int(b)) for n, a, b in slices]
                for n, a, b in sl:
                    if not 0 <= a < b:
                        raise ValueError("slice of tensor %s: [%d, %d) is not a range of elements" % (n, a, b))
                self._slices = (_Slice * max(1, len(sl)))(*[_Slice(_lib.enc(n), a, b) for n, a, b in sl])
                o.slices, o.n_slices = self._slices, len(sl)   # copied by the library at open
            _lib.check(_lib.follower_open(ctypes.byref(self._f),
                                          ctypes.cast(ctypes.pointer(o), ctypes.POINTER(_lib.FollowOpts))))
        except BaseException:
            self.close()
            raise

    def _deliver(self, fn, step, arg) -> int:
        try:
            info = _step_info(step.contents)
            fn(info, arg)
            self._steps.append(info)
            return 0
        except BaseException as e:   # noqa: a callback's failure refuses the step; pull() re-raises it
            self._error = e
            return 1

    def _on_patch(self, ctx, step, patch) -> int:
        p = _BorrowedPatch(patch)
        try:
            return self._deliver(self._user[0], step, p)
        finally:
            p.close()

    def _on_keyframe(self, ctx, step, ckpt) -> int:
        path = _file_path(ckpt, 0)
        return self._deliver(self._user[1], step, os.fsdecode(path) if path else None)

    def pull(self) -> Tuple[int, Optional[StepInfo]]:
        """Delivers every newer verified step. Returns (steps delivered, StepInfo of the step the
        engine now holds, or None). A refused step raises: PulseError, or the callback's own
        exception (with the PulseError as its cause); .applied says how many went before."""
        if not self._f:
            raise ValueError("follower is closed")
        self._steps, self._error = [], None
        return _pull(self._f, lambda: self._steps, lambda: self._error)

    @property
    def steps(self) -> List[StepInfo]:
        """StepInfo of each step the last pull delivered, in order."""
        return list(self._steps)

    def close(self) -> None:
        if getattr(self, "_f", None):
            _lib.follower_close(ctypes.byref(self._f))
        if getattr(self, "_trust", None):
            _lib.trust_free(ctypes.byref(self._trust))
