"""Reverse mode: TrackedArray values recorded on a Tape, and the reverse sweep."""
from .tracked import TrackedArray
from .tape import Tape

__all__ = ["TrackedArray", "Tape"]
