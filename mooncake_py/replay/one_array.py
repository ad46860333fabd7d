"""The one-array call of a prepared gradient or HVP cache, through one closure per cache.

``value_and_gradient(c, f, x)`` and ``value_and_hvp(c, f, v, x)`` with ``x`` one float64
NumPy array, as prepared, is the call a solver or sampler makes thousands of times; on a plan
that is one kernel or a few array ops most of its time went to the layers between the call
and the plan (the cache's checks, the replayer's dispatch, the dual seeding and reading back,
each re-reading the same attributes and the config). :func:`gradient_entry` and
:func:`hvp_entry` make, when a cache starts replaying, one closure holding the function and
the shape prepared. The closure checks, in this order, everything the general path checks for
that call (``f``, the array's type, shape and dtype, debug mode, the guard on the globals and
closure variables ``f`` reads, that the replayer has a plan and is not disabled, the plan's own
guards and rule checks as its run makes them), and runs the plan's steps as the general path
does, so its results are that path's bit for bit. When any check does not hold it returns
None and the caller takes the general path, which decides as before (records again, counts
the miss, raises the error a wrong argument deserves).

:class:`~.compiled.CompiledPlan` and :class:`~.compiled.CompiledHVPPlan`, and a
:class:`~.fused.FusedPlan` that is one fused kernel and nothing else, take the array straight
to the kernel; an HVP through a kernel makes no dual numbers at all (the kernel reads the value
and the direction and returns the value, gradient and ``H·v`` whose duals the general path
would only take apart again).
"""
import numpy as np

from ..config import _CONFIG
from ..core.arguments import is_float_leaf
from ..dual.dual_array import DualArray, Tag
from ..dual.seeding import lent, result
from .compiled import CompiledHVPPlan, CompiledPlan
from .fused import FusedPlan

_ND = np.ndarray
_F64_DT = np.dtype(np.float64)


def gradient_entry(f, shape):
    """``fast(cache, f, x) -> (value, (gradient,))`` for a gradient cache prepared for ``f`` at
    a float64 array of ``shape``: served by the cache's replayer (``cache._replay``) under its
    outside guard (``cache._outside``); None from ``fast`` where the general path must serve
    the call (module docstring).

    Example:
        >>> import numpy as np
        >>> import mooncake_py as mp
        >>> f = lambda x: np.sum(x * x)
        >>> c = mp.prepare_gradient_cache(f, np.ones(2))
        >>> fast = gradient_entry(f, (2,))
        >>> fast(c, f, np.ones(2)) is None                     # no plan yet
        True
        >>> _ = mp.value_and_gradient(c, f, np.ones(2))        # records, and plans
        >>> y, (g,) = fast(c, f, np.array([1.0, 2.0]))
        >>> float(y), g.tolist(), c._replay.replays
        (5.0, [2.0, 4.0], 1)
    """
    F, dt = f, _F64_DT
    get = _CONFIG.get

    def fast(cache, f, x):
        if f is not F or type(x) is not _ND or x.shape != shape or x.dtype != dt or \
                get().debug_mode:
            return None
        rp = cache._replay
        if rp is None or not cache._outside.holds():
            return None
        plan = rp.plan
        if plan is None or rp.disabled or plan.constants:
            return None
        try:
            t = type(plan)
            if t is CompiledPlan or t is FusedPlan and plan.single() is not None:
                y, g = plan.run_one(x)
            elif getattr(plan, "short", 0):
                # (a lean plan's own generated form of the lines below, when it has one)
                one = getattr(plan.__dict__.get("run"), "one", None)
                if one is not None:
                    out = one(x)
                    if out is None:
                        return None
                    y, g = out
                else:
                    y, cts = plan.run([x])
                    g, = cts
                    # the plan's finish (as_gradient) hands an owned float64 array out as it is
                    if type(g) is not _ND or g.dtype != dt or g.base is not None or \
                            not g.flags.writeable or not getattr(plan.finish, "owned_as_is", 0):
                        g, = plan.finish(cts)
            else:
                return None
        except Exception:  # noqa: BLE001  (a failed guard, or anything else: the general path)
            return None
        rp.failures = 0
        rp.replays += 1
        return y, (g,)
    return fast


def hvp_entry(f, shape):
    """``fast(cache, f, v, x) -> (value, gradient, H·v)`` for an HVP cache prepared for ``f``
    at a float64 array of ``shape``, as :func:`gradient_entry` for a gradient cache.

    Example:
        >>> import numpy as np
        >>> import mooncake_py as mp
        >>> f = lambda x: np.sum(x ** 3)
        >>> x, v = np.array([1.0, 2.0]), np.array([1.0, 0.0])
        >>> c = mp.prepare_hvp_cache(f, x)
        >>> _ = mp.value_and_hvp(c, f, v, x)                   # records, and plans
        >>> y, g, hv = hvp_entry(f, (2,))(c, f, v, x)
        >>> float(y), g.tolist(), hv.tolist()
        (9.0, [3.0, 12.0], [6.0, 0.0])
    """
    F, dt = f, _F64_DT
    get = _CONFIG.get

    def fast(cache, f, v, x):
        if f is not F or type(x) is not _ND or type(v) is not _ND or x.shape != shape or \
                v.shape != shape or x.dtype != dt or v.dtype != dt or get().debug_mode:
            return None
        rp = cache._replay
        if rp is None or not cache._outside.holds():
            return None
        plan = rp.plan
        if plan is None or rp.disabled or plan.constants:
            return None
        t = type(plan)
        if t is CompiledHVPPlan or t is FusedPlan and plan.single() is not None:
            try:
                out = plan.run_one(x, v)
            except Exception:  # noqa: BLE001  (the general path decides)
                return None
        elif getattr(plan, "short", 0):
            # (a lean plan's own generated form of _hvp_plan, when it has one)
            one = getattr(plan.__dict__.get("run"), "one", None)
            out = _hvp_plan(plan, x, v) if one is None else one(x, v)
            if out is None:
                return None
        else:
            return None
        rp.failures = 0
        rp.replays += 1
        return out
    return fast


def _hvp_plan(plan, x, v):
    """(value, gradient, H·v) of ``plan`` (a short dual plan) at ``x`` in direction ``v``, as
    the general path seeds, replays and reads back; None when the plan does not serve."""
    tag = Tag(0)
    try:
        # a plan that writes gets the dual's own tangent, as seed makes it (a step writing into
        # x moves only it); any other reads the caller's direction through a read-only view
        y, cts = plan.run([DualArray(x, v.copy() if getattr(plan, "writes", None) else lent(v),
                                     tag)])
        g, = plan.finish(cts)
    except Exception:  # noqa: BLE001  (the general path decides)
        return None
    finally:
        tag.close()
    if type(y) is DualArray and y._tag is tag:
        value = y._value
    else:
        value = result(y, tag)[0] if is_float_leaf(y) else y
    if g is None:
        return value, None, None
    if type(g) is DualArray and g._tag is tag:
        t = g._tangent
        if type(t) is _ND and not t.flags.writeable:
            t = t.copy()  # (as result: an owned array, never a view into the computation)
        return value, g._value, t
    if type(g) is _ND and g.dtype == _F64_DT:
        # (as result: a gradient the direction does not move has a zero tangent)
        return value, g, np.zeros(g.shape, dtype=_F64_DT)
    return (value,) + result(g, tag)

