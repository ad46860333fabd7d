"""The one place where the layers are joined after import: hooks a lower layer offers and a
higher one fills, and tables that are complete only once every rule is registered.

Every module registers its own rules with decorators when it is imported, in any order. What
depends on all of them, or on a layer above the one it changes, happens here, in this order,
when ``import mooncake_py`` has imported everything (:func:`install`):

1. rules: complex numbers' tables and np.absolute's complex branch (rules/complex.py); the
   rules of BLAS/LAPACK calls run single-threaded on medium-sized matrices
   (core/blas_threads.py); the set of built-in reverse rules, whose cotangents the tape trusts.
2. dual: the short paths of common dual calls (dual/lean.py).
3. tape: the scalar-loop short paths on TrackedArray (tape/fastpath.py), given the tracked-dual
   scalar paths of the layer above (mixed/dual_scalars.py); the tape's split of a dual item
   write and its recording of one (replay/writes.py).
4. replay: ``bool``/``int`` of a tracked value seen by a recording plan (replay/plans.py).
"""
from .core.blas_threads import limit_small_calls
from .dual import lean
from .mixed import dual_scalars
from .replay import plans, writes
from .rules import BUILTIN_RRULES, FRULES, RRULES, complex, derivative_table, linear_algebra
from .tape import fastpath
from .tape import tape as tape_module

_DONE = []


def install():
    """Join the layers (idempotent; ``import mooncake_py`` calls it once)."""
    if _DONE:
        return
    complex.install()
    limit_small_calls(RRULES, FRULES, linear_algebra.blas_functions())
    BUILTIN_RRULES.update(RRULES)
    derivative_table.on_new_entries(lambda entries: BUILTIN_RRULES.update(e.ufunc
                                                                          for e in entries))
    lean.install()
    fastpath.install(dual_scalars)
    tape_module._split_item = writes.split_dual_item
    tape_module._item_add = dual_scalars.item_add
    tape_module._item_write = writes.dual_item_write
    plans.install()
    _DONE.append(True)
