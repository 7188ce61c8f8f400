# SPDX-License-Identifier: Apache-2.0
"""pulseweights: Python bindings (ctypes) of libpulseweights: publish and follow weights in memory, sparse updates of a patch, PULSELoCo rounds.

The shared library is found through $PULSE_LIB, else the installed library (its soname), else the
build directories of the checkout the package sits in. See docs/python.md.
"""
import os

from ._lib import PulseError, PulseNotFound, lib_path
from ._version import VERSION as __version__
from .loco import loco_init, loco_round
from .sync import Changes, Follower, Publisher, StepInfo, keygen
from .tensors import Tensor, as_tensors, state_id
from .updates import Patch, TensorUpdate, apply_updates
from .engine import EngineFollower

__all__ = ["PulseError", "PulseNotFound", "__version__", "version", "keygen", "Tensor", "as_tensors", "state_id",
           "Publisher", "Changes", "Follower", "StepInfo", "loco_init", "loco_round", "lib_path", "Patch", "TensorUpdate",
           "apply_updates", "EngineFollower"]


def version() -> str:
    """The loaded library's version, from its versioned file name (libpulseweights.so.X.Y.Z);
    __version__ is the package's (meson.build's project version)."""
    real = os.path.realpath(lib_path)
    tail = os.path.basename(real).split(".so.", 1)
    return tail[1] if len(tail) == 2 else "unknown"
