"""Forward mode: DualArray values and their rules.

Importing this package registers the forward rules of the derivative table's ops, of the
pullback primitive ``ew_pullback`` (fused kernels), and the frules of the few functions the reverse
sweep itself calls on duals (:mod:`.core_rules`); :func:`lean.install` (called by
mooncake_py/registration.py) then sets the short paths of common dual calls. Numba is imported
only when a kernel is first used.
"""
from . import core_rules, elementwise, lean  # noqa: F401  (each registers its rules)
from .dual_array import DualArray, Tag, dual, primal, tangent

__all__ = ["DualArray", "Tag", "dual", "primal", "tangent"]
