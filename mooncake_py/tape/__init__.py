"""Reverse mode: TrackedArray values recorded on a Tape, and the reverse sweep.

``tape.py`` holds the Tape (recording and the sweep), ``tracked.py`` the TrackedArray,
``fastpath.py`` the short paths of scalar-loop code (put on TrackedArray by
mooncake_py/registration.py), ``pullbacks.py`` the sweep's own pullback types.
"""
from .tape import Tape
from .tracked import TrackedArray

__all__ = ["TrackedArray", "Tape"]
