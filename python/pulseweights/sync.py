# SPDX-License-Identifier: Apache-2.0
"""Publisher and Follower over a store: publish tensors from memory, pull verified steps into tensors in place."""
from __future__ import annotations

import ctypes
import operator
import os
from typing import Callable, Iterable, List, NamedTuple, Optional, Tuple, Union

from . import _lib
from .tensors import Tensors, Wrapped, as_tensors, mem_tensors, resident_tensors

PathLike = Union[str, bytes, "os.PathLike[str]"]


class StepInfo(NamedTuple):
    step: int
    kind: Optional[str]
    base: Optional[str]
    result: str
    changes: int
    dense_bytes: int
    object_bytes: int
    moved_bytes: int
    already: bool
    record_key: str


StepInfo.__doc__ = """What one publish or one applied step did: kind "patch" or "keyframe" (None when only
the state is known), base and result as hex state ids (base all zeros for a keyframe), changes
(changed elements; a keyframe: all), dense_bytes (tensor data), object_bytes (the record's objects),
moved_bytes (bytes that crossed the network), already (the state was already published)."""

_KINDS = {_lib.RECORD_SYNC_PATCH: "patch", _lib.RECORD_KEYFRAME: "keyframe"}
_VALUES = {"ulp": _lib.VALUES_ULP, "abs": _lib.VALUES_ABS}


def _step_info(s):
    return StepInfo(step=int(s.step), kind=_KINDS.get(s.kind), base=_lib.hex32(s.base), result=_lib.hex32(s.result),
                    changes=int(s.changes), dense_bytes=int(s.dense_bytes), object_bytes=int(s.object_bytes),
                    moved_bytes=int(s.moved_bytes), already=bool(s.already),
                    record_key=s.record_key.decode("utf-8", "replace"))


def keygen(path_prefix: PathLike, comment: str = "") -> str:
    """Writes PREFIX.key (mode 0600) and PREFIX.pub; never overwrites either. Returns the node id (hex)."""
    k = ctypes.c_void_p()
    _lib.check(_lib.key_generate(ctypes.byref(k)))
    try:
        _lib.check(_lib.key_save(k, _lib.enc(path_prefix), comment.encode("utf-8") if comment else None))
        pub = (ctypes.c_uint8 * 32)()
        _lib.key_public(k, pub)
        return _lib.hex32(pub)
    finally:
        _lib.key_free(ctypes.byref(k))


def _pull(handle, steps: Callable[[], List[StepInfo]],
          callback_error: Callable[[], Optional[BaseException]] = lambda: None) -> Tuple[int, Optional[StepInfo]]:
    """pulse_follower_pull on handle, for Follower and EngineFollower: (steps applied, StepInfo of
    the state now held or None). steps() gives the StepInfo of each step the pull went through
    (collected by the caller's callback), so the held one carries its base and bytes. A refused
    step raises PulseError, or the exception a callback raised (the PulseError as its cause),
    with .applied (the steps before it) and .steps."""
    n = ctypes.c_size_t(0)
    held = _lib.SyncStep()
    rc = _lib.follower_pull(handle, ctypes.byref(n), ctypes.byref(held))
    if rc:
        try:
            _lib.check(rc)
        except _lib.PulseError as e:
            err = callback_error() or e
            if err is not e:
                err.__cause__ = e
            err.applied = int(n.value)
            err.steps = list(steps())
            raise err
    info = None
    if any(held.result):
        info = _step_info(held)
        done = [s for s in steps() if s.step == info.step and s.result == info.result]
        info = done[-1] if done else info._replace(base=None, already=False)
    return int(n.value), info


_MAX_PARTS = 4096   # PULSE_LAYOUT_MAX_PARTS (manifest/layout.h)


def _as_int(v) -> Optional[int]:
    """V as an int (a Python or numpy integer; not a bool or a float), else None."""
    if isinstance(v, bool):
        return None
    try:
        return operator.index(v)
    except TypeError:
        return None


def _check_part(part) -> Tuple[int, int]:
    """(i, n) with 0 <= i < n <= 4096, else ValueError."""
    try:
        i, n = (_as_int(v) for v in part)
    except (TypeError, ValueError):
        raise ValueError("part must be a pair (i, n), not %r" % (part,)) from None
    if i is None or n is None or not 0 <= i < n <= _MAX_PARTS:
        raise ValueError("part must be (i, n) with ints 0 <= i < n <= %d, not %r" % (_MAX_PARTS, tuple(part)))
    return i, n


def _check_step(step, what) -> Optional[int]:
    """STEP as an int >= 0 (None stays None), else ValueError."""
    if step is None:
        return None
    v = _as_int(step)
    if v is None or v < 0:
        raise ValueError("%s: step must be an int >= 0, not %r" % (what, step))
    return v


class Changes(_lib.Closeable):
    """A part's changes step by step where its tensors live (pulse_changes, docs/sync.md "From
    device memory"): a copy of TENSORS (a mapping name -> tensor, or an nn.Module), the state last
    published, is kept beside them, in host memory for numpy arrays and CPU torch tensors, on the
    GPU for torch tensors on one CUDA device; Publisher.publish_changes compares each step with it
    there and hashes it there, so only the changes cross to the host. Element-wise dtypes only
    (BF16, F16, F32, F8). Open it over the tensors just published from (their first publish, a
    keyframe, goes through publish or publish_part); on a GPU it holds a second copy of them."""

    def __init__(self, tensors: Tensors) -> None:
        self._p = ctypes.c_void_p()
        ts, self.where = resident_tensors(tensors)
        arr, n, keep = mem_tensors(ts)
        _lib.check(_lib.changes_open(ctypes.byref(self._p), arr, n, self.where))

    def close(self) -> None:
        if self._p:
            _lib.changes_close(ctypes.byref(self._p))


class Publisher(_lib.Closeable):
    """Signs and publishes checkpoints of a run (docs/sync.md). One publisher per run and key;
    STATE_DIR keeps its index and the last published state (the next diff's base), synced to disk
    by sync() and close(), or after every publish with durable=True. chunk_elems: elements per
    patch chunk (0: 2^20), the unit a follower holding slices fetches (docs/serving.md).
    context=True: patches are context-coded (format 5, about 0.7x the bytes), which only followers
    holding the weights decode: not EngineFollower or Patch.updates() (docs/patch-format.md).

    part=(i, n): this publisher holds part I (0 .. n-1) of a model published in N parts by as many
    publishers (a trainer's ranks), each a disjoint set of whole tensors: publish_part() publishes
    them as the run "RUN.part-I-of-N", and a Publisher of RUN opened without part, with the same
    key, commit()s each step as one record of the whole model (docs/sync.md, "A trainer in parts").
    Each part's tensor descriptors and hashes travel through the store in its signed records, so
    the trainer needs no collective for them: the committer reads them there."""

    def __init__(self, store: str, run: str, key: PathLike, state_dir: PathLike, values: str = "ulp",
                 threads: int = 0, zstd_level: int = 0, durable: bool = False, chunk_elems: int = 0,
                 context: bool = False, part: Optional[Tuple[int, int]] = None) -> None:
        self._p = ctypes.c_void_p()
        if values not in _VALUES:
            raise ValueError("values must be 'ulp' or 'abs', not %r" % (values,))
        self._part = None if part is None else _check_part(part)
        _lib.need_file(key, "Publisher key file")
        o = _lib.PublishOpts()
        _lib.publish_opts_default(ctypes.byref(o))
        _lib.check_size(o, "pulse_publish_opts")
        self._keep = [_lib.enc(store), _lib.enc(run), _lib.enc(key), _lib.enc(state_dir)]
        o.store_url, o.run, o.key_path, o.state_dir = self._keep
        o.values = _VALUES[values]
        o.threads = int(threads)
        o.zstd_level = int(zstd_level)
        o.durable = 1 if durable else 0
        o.chunk_elems = int(chunk_elems)   # elements per patch chunk, the unit a slice follower fetches; 0: 2^20
        o.context = 1 if context else 0
        if self._part is not None:
            o.part, o.parts = self._part
        _lib.check(_lib.publisher_open(ctypes.byref(self._p), ctypes.byref(o)))

    def _handle(self):
        if not self._p:
            raise ValueError("publisher is closed")
        return self._p

    def publish(self, state_dict: Tensors, step: Optional[int] = None, keyframe: bool = False) -> StepInfo:
        """Publishes the tensors as STEP (None: one more than the last). STATE_DICT: a mapping
        name -> numpy array / torch tensor, or a torch nn.Module (its state_dict()). Tensors are
        read in place (do not change them during the call) in the dtype they hold; one that is not
        contiguous or not on the CPU is read from a contiguous CPU copy. Returns a StepInfo."""
        s = _lib.SyncStep()
        with Wrapped(as_tensors(state_dict, copy=True), writable=False) as w:
            _lib.check(_lib.publisher_publish_ckpt(self._handle(), w.ptr, -1 if step is None else int(step),
                                                   _lib.PUBLISH_KEYFRAME if keyframe else 0, ctypes.byref(s)))
        return _step_info(s)

    def publish_file(self, path: PathLike, step: Optional[int] = None, keyframe: bool = False) -> StepInfo:
        """The same for a safetensors checkpoint on disk (file, index or directory)."""
        _lib.need_file(path, "checkpoint")
        s = _lib.SyncStep()
        _lib.check(_lib.publisher_publish(self._handle(), _lib.enc(path), -1 if step is None else int(step),
                                          _lib.PUBLISH_KEYFRAME if keyframe else 0, ctypes.byref(s)))
        return _step_info(s)

    def publish_part(self, tensors: Tensors, step: int, part: Optional[Tuple[int, int]] = None,
                     keyframe: bool = False) -> StepInfo:
        """Publishes this part's tensors (the forms publish() takes) as STEP of the part's run, with
        their tensor hashes, for commit(). STEP is required (an int >= 0, the step the committer
        will commit): every part publishes every step, a part whose tensors did not change a patch
        of no changes. PART, when given, must be the part this Publisher was opened with (a check
        for the caller's bookkeeping). The first publish is a keyframe; keyframe=True adds one to a
        later step, which the commit makes a keyframe of the whole model when every part has one.
        Nothing is exchanged between ranks: the part's record carries its tensors' names, dtypes,
        shapes and hashes to the committer through the store. Returns the part's StepInfo
        (result: the part's own state id, not the model's)."""
        if self._part is None:
            raise ValueError("open the Publisher with part=(i, n) to publish a part; this one publishes the "
                             "whole model (publish), and commits parts (commit)")
        if part is not None and _check_part(part) != self._part:
            raise ValueError("part %r is not this Publisher's part %r" % (tuple(part), self._part))
        step = _check_step(step, "publish_part")
        if step is None:
            raise ValueError("publish_part needs the step (an int >= 0): every part publishes the step the "
                             "committer commits")
        return self.publish(tensors, step=step, keyframe=keyframe)

    def publish_changes(self, changes: Changes, tensors: Tensors, step: Optional[int] = None) -> StepInfo:
        """Publishes TENSORS (the tensors CHANGES was opened over, updated in place by training, on
        the same device) as STEP from their changes alone (pulse_publisher_publish_changes): found
        by CHANGES where the tensors are, the patch made of them byte for byte as publish would
        make it, no copy of the model read or kept on the host. A part Publisher needs STEP. Once
        the step is published, CHANGES takes it as its base; on an error it keeps the old one, so
        the call can be repeated. A keyframe is cut from the tensors: publish(..., keyframe=True)
        of the same step after this. Returns a StepInfo."""
        if not isinstance(changes, Changes) or not changes._p:
            raise ValueError("publish_changes needs an open pulseweights.Changes")
        step = _check_step(step, "publish_changes")
        if self._part is not None and step is None:
            raise ValueError("publish_changes of a part needs the step (an int >= 0) the committer commits")
        ts, where = resident_tensors(tensors)
        if where != changes.where:
            raise ValueError("tensors on %s, their Changes on %s" % tuple("cuda" if w == _lib.MEM_CUDA else "cpu"
                                                                         for w in (where, changes.where)))
        arr, n, keep = mem_tensors(ts)
        found = ctypes.c_void_p()
        _lib.check(_lib.changes_find(changes._p, arr, n, ctypes.byref(found)))
        s = _lib.SyncStep()
        _lib.check(_lib.publisher_publish_changes(self._handle(), found, n, -1 if step is None else step,
                                                  ctypes.byref(s)))
        _lib.check(_lib.changes_accept(changes._p))
        return _step_info(s)

    def commit(self, step: Optional[int] = None, parts: Optional[int] = None, wait: float = 600.0) -> StepInfo:
        """Commits STEP (None: one more than the last committed, 0 for the first) of the model
        published in PARTS parts (required) by Publishers opened with part=(i, PARTS) on this run
        and this key, as one signed record of this run (pulse_publisher_commit): waits up to WAIT
        seconds for every part's record of the step, checks each (signature, step, its tensor
        hashes, its base against the last commit, no tensor in two parts), then writes one head
        over the parts' patches, which stay where they lie, and the record, whose state ids are
        the whole model's, computed from the parts' tensor hashes without reading a tensor. The
        descriptors come from the parts' signed records in the store, so the committing rank
        needs nothing from the others: it can be any process holding the key (rank 0, or a
        process of its own). Nothing is written unless every part is there and checks: a
        PulseError names the part (a missing one, "part I of N", after WAIT). Idempotent: a step
        already committed returns its StepInfo with already=True. The Publisher must be opened
        without part. Returns the StepInfo of the whole model's step."""
        if self._part is not None:
            raise ValueError("commit on a Publisher opened without part: this one publishes part %d of %d "
                             "(publish_part)" % self._part)
        if parts is None:
            raise ValueError("commit needs parts=N, the number of parts the model is published in")
        n = _as_int(parts)
        if n is None or not 1 <= n <= _MAX_PARTS:
            raise ValueError("parts must be an int in 1 .. %d, not %r" % (_MAX_PARTS, parts))
        step = _check_step(step, "commit")
        wait = float(wait)
        if not wait >= 0:
            raise ValueError("wait must be seconds >= 0, not %r" % (wait,))
        s = _lib.SyncStep()
        _lib.check(_lib.publisher_commit(self._handle(), n, -1 if step is None else step, wait,
                                         ctypes.byref(s)))
        return _step_info(s)

    def sync(self) -> None:
        """Syncs state_dir's copy of the last published state to disk now (pulse_publisher_sync)."""
        _lib.check(_lib.publisher_sync(self._handle()))

    def close(self) -> None:
        if getattr(self, "_p", None):
            _lib.publisher_close(ctypes.byref(self._p))


def _load_trust(trust):
    if isinstance(trust, (str, bytes)) or hasattr(trust, "__fspath__"):
        trust = [trust]
    trust = list(trust)
    for path in trust:
        _lib.need_file(path, "Follower trust file")
    t = ctypes.c_void_p()
    _lib.check(_lib.trust_new(ctypes.byref(t)))
    try:
        for path in trust:
            _lib.check(_lib.trust_load(t, _lib.enc(path)))
    except BaseException:
        _lib.trust_free(ctypes.byref(t))
        raise
    return t


class Follower(_lib.Closeable):
    """Follows a run: each pull() verifies every step (signature, digests, base state, the whole
    patch) before the weights are written. weights=mapping (or an nn.Module: its state_dict(),
    which shares the parameters' storage) updates those tensors IN PLACE (their
    buffers are held from here until close(); names, dtypes and shapes must be the run's);
    weights_path=FILE keeps a safetensors file instead (created from a keyframe when absent),
    synced to disk by sync() and close(), or after every step with durable=True. Torch tensors
    off the host (a GPU) are followed as engine-held weights (pulseweights.device.DeviceFollower:
    keyframes copied in, patches applied on the device by torch ops; docs/python.md)."""

    def __init__(self, store: str, run: str, trust: Union[PathLike, Iterable[PathLike]], state_dir: PathLike,
                 weights: Optional[Tensors] = None, weights_path: Optional[PathLike] = None, threads: int = 0,
                 durable: bool = False) -> None:
        self._f = ctypes.c_void_p()
        self._trust = None
        self._wrapped = None
        self._device = None
        if (weights is None) == (weights_path is None):
            raise ValueError("give exactly one of weights (tensors updated in place) and weights_path")
        from .device import DeviceFollower, off_host
        held = off_host(weights) if weights is not None else None
        if held is not None:
            # Tensors the library cannot address: it verifies, torch writes on their device.
            self._device = DeviceFollower(store, run, trust, state_dir, held, threads=threads)
            self._steps = []
            return
        self._trust = _load_trust(trust)
        self._steps = []
        try:
            if weights is not None:
                self._wrapped = Wrapped(as_tensors(weights), writable=True)
            o = _lib.FollowOpts()
            _lib.follow_opts_default(ctypes.byref(o))
            _lib.check_size(o, "pulse_follow_opts")
            self._keep = [_lib.enc(store), _lib.enc(run), _lib.enc(state_dir), _lib.enc(weights_path)]
            o.store_url, o.run, o.state_dir, o.weights_path = self._keep
            o.trust = self._trust
            o.threads = int(threads)
            o.durable = 1 if durable else 0
            o.weights = self._wrapped.ptr if self._wrapped else None
            self._cb = _lib.ON_STEP(self._on_step)   # referenced as long as the follower
            o.on_step = self._cb
            _lib.check(_lib.follower_open(ctypes.byref(self._f), ctypes.byref(o)))
        except BaseException:
            self.close()
            raise

    def _on_step(self, ctx, step):
        self._steps.append(_step_info(step.contents))
        return 0

    def pull(self) -> Tuple[int, Optional[StepInfo]]:
        """Brings the weights to the newest published state. Returns (applied, held): the number
        of steps applied and the StepInfo of the state now held (None when none). A refused step
        raises PulseError (.applied: the steps applied before it); the weights stay at the last
        good state."""
        if self._device is not None:
            return self._device.pull()
        if not self._f:
            raise ValueError("follower is closed")
        self._steps = []
        return _pull(self._f, lambda: self._steps)

    def sync(self) -> None:
        """Syncs a weights_path file to disk now (pulse_follower_sync); close() does it too."""
        if self._device is not None:
            return
        if not self._f:
            raise ValueError("follower is closed")
        _lib.check(_lib.follower_sync(self._f))

    @property
    def steps(self) -> List[StepInfo]:
        """StepInfo of each step the last pull applied, in order."""
        return self._device.steps if self._device is not None else list(self._steps)

    def close(self) -> None:
        if getattr(self, "_device", None) is not None:
            self._device.close()
        if getattr(self, "_f", None):
            _lib.follower_close(ctypes.byref(self._f))
        if getattr(self, "_wrapped", None):
            self._wrapped.close()
            self._wrapped = None
        if getattr(self, "_trust", None):
            _lib.trust_free(ctypes.byref(self._trust))
