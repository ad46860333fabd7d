"""Reverse mode: TrackedArray values recorded on a Tape, and the reverse sweep."""
from .tracked import TrackedArray
from .tape import Tape
from . import fastpath

fastpath.install()  # scalar-loop short paths on TrackedArray (see fastpath.py)
from . import replay  # noqa: E402

replay.install()  # bool()/int() of tracked values reach a recording PlanTape (see replay.py)

__all__ = ["TrackedArray", "Tape"]
