# SPDX-License-Identifier: Apache-2.0
"""A follower of torch tensors off the host (a GPU): keyframes copied in, verified patches applied on the device with torch ops, no host copy of the model kept."""
from __future__ import annotations

import json
import os
import struct
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from . import fused
from .engine import EngineFollower
from .sync import StepInfo

PathLike = Union[str, bytes, "os.PathLike[str]"]


def off_host(weights: Any) -> Optional[Dict[str, Any]]:
    """name -> tensor when weights (a mapping or an nn.Module) holds a torch tensor that is not
    in host memory, else None (the library then reads and writes the tensors itself)."""
    sd = weights.state_dict() if hasattr(weights, "state_dict") and callable(weights.state_dict) else weights
    if not isinstance(sd, Mapping):
        return None
    found = False
    for v in sd.values():
        dev = getattr(v, "device", None)
        found |= dev is not None and getattr(dev, "type", "cpu") != "cpu"
    return dict(sd) if found else None


def _load_keyframe(path: str, tensors: Mapping[str, Any]) -> None:
    """Copies a verified keyframe (one safetensors file) into the tensors, on their devices.
    Every tensor is checked first (names the run's, element count and width): ValueError by
    name, nothing written."""
    import numpy as np
    import torch
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    n = int(struct.unpack("<Q", bytes(raw[:8]))[0])
    header = json.loads(bytes(raw[8:8 + n]))
    header.pop("__metadata__", None)
    if set(header) != set(tensors):
        missing, extra = sorted(set(header) - set(tensors)), sorted(set(tensors) - set(header))
        raise ValueError("the run's tensors are not these: %s" % "; ".join(
            x for x in (missing and "not given: %s" % ", ".join(missing[:3]),
                        extra and "not in the run: %s" % ", ".join(extra[:3])) if x))
    plan = []
    for name, h in header.items():
        t = tensors[name]
        b0, b1 = h["data_offsets"]
        if t.numel() * t.element_size() != b1 - b0:
            raise ValueError("tensor %s: %d bytes in the run, %d in the given tensor"
                             % (name, b1 - b0, t.numel() * t.element_size()))
        plan.append((t, raw[8 + n + b0:8 + n + b1]))
    with torch.no_grad():
        for t, src in plan:
            host = torch.from_numpy(np.array(src)).view(torch.uint8)
            t.view(-1).view(torch.uint8).copy_(host.to(t.device))


class DeviceFollower:
    """Keeps torch tensors on a GPU (or any device) at the newest published step of a run:
    an engine-held follower (docs/serving.md, docs/trust.md "Engine-held weights") whose
    keyframes are copied into the tensors and whose patches are applied there by
    fused.apply_patch (torch indexing on the device). STATE_DIR holds the index of the state
    the tensors hold; a fresh one starts from a keyframe. pulseweights.Follower(weights=...)
    returns this behaviour for tensors off the host."""

    def __init__(self, store: str, run: str, trust: Union[PathLike, List[PathLike]], state_dir: PathLike,
                 tensors: Mapping[str, Any], threads: int = 0, deadline_s: float = 0) -> None:
        self._t = dict(tensors)
        layout = fused.whole_layout({k: tuple(v.shape) for k, v in self._t.items()})
        self._f = EngineFollower(
            store, run, trust, state_dir,
            on_patch=lambda step, patch: fused.apply_patch(self._t, patch, layout, threads=threads),
            on_keyframe=lambda step, path: _load_keyframe(path, self._t), threads=threads, deadline_s=deadline_s)

    def pull(self) -> Tuple[int, Optional[StepInfo]]:
        return self._f.pull()

    @property
    def steps(self) -> List[StepInfo]:
        return self._f.steps

    def close(self) -> None:
        self._f.close()
