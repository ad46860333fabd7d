"""Forward mode: DualArray values and their rules.

Importing this package registers the forward rules of the derivative table's ops, of the
pullback primitive ``ew_pullback`` (fused kernels), and the frules of the few functions the reverse
sweep itself calls on duals (:mod:`.core_rules`). Numba is imported only when a kernel is first used.
"""
from .dual_array import DualArray, Tag, dual, primal, tangent
from . import elementwise, core_rules  # noqa: F401  (registration side effects)

__all__ = ["DualArray", "Tag", "dual", "primal", "tangent"]
