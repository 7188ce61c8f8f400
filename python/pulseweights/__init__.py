# SPDX-License-Identifier: Apache-2.0
"""pulseweights: Python bindings (ctypes) of libpulseweights: publish and follow weights in memory, PULSELoCo rounds.

The shared library is found through $PULSE_LIB, else the repository's build*/ directories, else
the system. See docs/python.md.
"""
import os

from ._lib import PulseError, lib_path
from .loco import loco_init, loco_round
from .sync import Follower, Publisher, StepInfo, keygen
from .tensors import Tensor, as_tensors, state_id

__all__ = ["PulseError", "version", "keygen", "Tensor", "as_tensors", "state_id", "Publisher", "Follower",
           "StepInfo", "loco_init", "loco_round", "lib_path"]


def version():
    """The library's version, from the shared object's versioned name (libpulseweights.so.X.Y.Z)."""
    real = os.path.realpath(lib_path)
    tail = os.path.basename(real).split(".so.", 1)
    return tail[1] if len(tail) == 2 else "unknown"
