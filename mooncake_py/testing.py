"""Checks for rule authors: ``test_rule`` for one function's rules, ``check_grads`` for a whole
function's gradient. Both compare against central finite differences on random directions.

Example:
    >>> import numpy as np, mooncake_py as mp
    >>> from mooncake_py.testing import test_rule
    >>> test_rule(np.tanh, np.linspace(-1, 1, 5))   # raises AssertionError on a wrong rule
"""
import copy

import numpy as np

from .api import vjp, grad, is_float_leaf
from .pytree import flatten

_STEPS = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7)


def _strided(x):
    """The same values as ``x`` in a non-contiguous array (every other element of a buffer)."""
    if not isinstance(x, np.ndarray) or x.ndim == 0 or x.dtype.kind not in "fc":
        return x
    buf = np.empty(x.shape + (2,), dtype=x.dtype)
    view = buf[..., 0]
    view[...] = x
    return view


def _float_positions(leaves):
    return [i for i, l in enumerate(leaves) if is_float_leaf(l)]


def _perturbed(tree, leaves, pos, dirs, h):
    new = list(leaves)
    for i, d in zip(pos, dirs):
        new[i] = leaves[i] + h * d
    return tree.unflatten(new)


def _inner(a, b):
    return float(np.sum(np.asarray(a, dtype=np.float64) * np.asarray(b, dtype=np.float64)))


def _fd_best(phi, analytic, rtol, atol):
    """Central differences over several steps; the estimate closest to ``analytic``."""
    best = None
    for h in _STEPS:
        est = (phi(h) - phi(-h)) / (2 * h)
        err = abs(est - analytic)
        if best is None or err < best[1]:
            best = (est, err)
    est, err = best
    return est, err <= atol + rtol * max(abs(est), abs(analytic))


def _tolerances(leaves, rtol, atol):
    low = any(getattr(l, "dtype", np.float64) in (np.float32, np.float16) for l in leaves)
    return (rtol if rtol is not None else (2e-2 if low else 1e-5),
            atol if atol is not None else (1e-3 if low else 1e-7))


def _describe(fn):
    return getattr(fn, "__name__", None) or repr(fn)


def _check_rrule(fn, args, kwargs, rtol, atol, ndirs, rng):
    f = (lambda *a: fn(*a, **kwargs))
    leaves, tree = flatten(args)
    pos = _float_positions(leaves)
    if not pos:
        raise AssertionError(f"test_rule({_describe(fn)}): no floating-point argument to check.")
    rtol, atol = _tolerances([leaves[i] for i in pos], rtol, atol)
    before = copy.deepcopy(args)
    y_plain = f(*args)
    y, pullback = vjp(f, *args)
    _assert_same_output(fn, y, y_plain)
    for a, b in zip(flatten(args)[0], flatten(before)[0]):
        if isinstance(a, np.ndarray) and not np.array_equal(a, b, equal_nan=True):
            raise AssertionError(f"test_rule({_describe(fn)}): the rule mutated an input.")
    outs, otree = flatten(y)
    ybar = [rng.standard_normal(np.shape(o)).astype(getattr(o, "dtype", np.float64))
            if is_float_leaf(o) else np.zeros(np.shape(o)) for o in outs]
    if np.ndim(y) == 0 and not isinstance(y, (tuple, list, dict)):
        ybar = [np.asarray(ybar[0]).astype(getattr(outs[0], "dtype", np.float64))[()]]
    cots = pullback(otree.unflatten(ybar))
    cot_leaves = flatten(tuple(cots))[0]
    cot_by_arg = _cotangents_by_leaf(args, cots)
    for _ in range(ndirs):
        dirs = [rng.standard_normal(np.shape(leaves[i])) for i in pos]
        norm = np.sqrt(sum(np.sum(d * d) for d in dirs)) or 1.0
        dirs = [d / norm for d in dirs]
        analytic = sum(_inner(cot_by_arg[i], d) for i, d in zip(pos, dirs)
                       if cot_by_arg[i] is not None)

        def phi(h):
            yh = f(*_perturbed(tree, leaves, pos, dirs, h))
            return sum(_inner(b, o) for b, o in zip(ybar, flatten(yh)[0]) if is_float_leaf(o))
        est, ok = _fd_best(phi, analytic, rtol, atol)
        if not ok:
            raise AssertionError(
                f"test_rule({_describe(fn)}): reverse rule disagrees with finite differences: "
                f"<ȳ, J·ẋ> by finite differences = {est!r}, <Jᵀ·ȳ, ẋ> from the pullback = "
                f"{analytic!r} (rtol={rtol}, atol={atol}).")
    del cot_leaves


def _cotangents_by_leaf(args, cots):
    """Cotangents aligned with ``flatten(args)`` leaves (None where there is none)."""
    out = []
    for a, c in zip(args, cots):
        la = flatten(a)[0]
        lc = [None] * len(la) if c is None else flatten(c)[0]
        if len(lc) != len(la):
            raise AssertionError("the pullback's cotangent structure does not match the arguments")
        out.extend(lc)
    return out


def _assert_same_output(fn, y, y_plain):
    a, ta = flatten(y)
    b, tb = flatten(y_plain)
    if ta != tb:
        raise AssertionError(f"test_rule({_describe(fn)}): output structure {ta!r} differs from "
                             f"NumPy's {tb!r}.")
    for u, v in zip(a, b):
        if np.shape(u) != np.shape(v):
            raise AssertionError(f"test_rule({_describe(fn)}): output shape {np.shape(u)} differs "
                                 f"from NumPy's {np.shape(v)}.")
        du, dv = getattr(u, "dtype", None), getattr(v, "dtype", None)
        if du is not None and dv is not None and du != dv:
            raise AssertionError(f"test_rule({_describe(fn)}): output dtype {du} differs from "
                                 f"NumPy's {dv}.")
        if not np.allclose(u, v, rtol=1e-12, atol=0, equal_nan=True):
            raise AssertionError(f"test_rule({_describe(fn)}): output values differ from NumPy's.")


def test_rule(fn, *args, rtol=None, atol=None, ndirs=3, seed=0, noncontiguous=True, **kwargs):
    """Check ``fn``'s rules on ``args`` (with ``kwargs`` passed through to ``fn``).

    Checks that the primal output equals plain NumPy's (values, shape, dtype), that inputs are
    not mutated, and that the reverse rule agrees with central finite differences:
    ``<ȳ, J·ẋ>`` (finite differences over several step sizes) equals ``<Jᵀ·ȳ, ẋ>`` (pullback) on
    random ``ȳ`` and random unit ``ẋ``. With ``noncontiguous=True`` every array argument is
    also checked as a strided (non-contiguous) copy. Raises AssertionError on a failure.
    Use float64 inputs: float32 gets loose tolerances.

    Example:
        >>> import numpy as np
        >>> from mooncake_py.testing import test_rule
        >>> test_rule(np.multiply, np.ones((2, 3)), np.arange(3.0))   # broadcasting included
    """
    rng = np.random.default_rng(seed)
    _check_rrule(fn, args, kwargs, rtol, atol, ndirs, rng)
    if noncontiguous and any(isinstance(a, np.ndarray) and a.ndim for a in flatten(args)[0]):
        leaves, tree = flatten(args)
        _check_rrule(fn, tree.unflatten([_strided(a) for a in leaves]), kwargs, rtol, atol,
                     ndirs, rng)


test_rule.__test__ = False  # not a pytest test despite its name


def check_grads(f, *args, rtol=None, atol=None, ndirs=3, seed=0):
    """Check ``mp.grad(f)`` with respect to every float argument against finite differences.

    Example:
        >>> import numpy as np
        >>> from mooncake_py.testing import check_grads
        >>> check_grads(lambda x, y: np.sum(np.sin(x) * y), np.ones(3), 2.0)
    """
    rng = np.random.default_rng(seed)
    nums = tuple(i for i, a in enumerate(args) if any(map(is_float_leaf, flatten(a)[0])))
    gs = grad(f, argnums=nums)(*args)
    leaves, tree = flatten(args)
    pos = _float_positions(leaves)
    rtol, atol = _tolerances([leaves[i] for i in pos], rtol, atol)
    full = [None] * len(args)
    for i, g in zip(nums, gs):
        full[i] = g
    g_by_leaf = _cotangents_by_leaf(args, full)
    for _ in range(ndirs):
        dirs = [rng.standard_normal(np.shape(leaves[i])) for i in pos]
        norm = np.sqrt(sum(np.sum(d * d) for d in dirs)) or 1.0
        dirs = [d / norm for d in dirs]
        analytic = sum(_inner(g_by_leaf[i], d) for i, d in zip(pos, dirs)
                       if g_by_leaf[i] is not None)
        est, ok = _fd_best(lambda h: float(f(*_perturbed(tree, leaves, pos, dirs, h))),
                           analytic, rtol, atol)
        if not ok:
            raise AssertionError(
                f"check_grads({_describe(f)}): gradient disagrees with finite differences: "
                f"directional derivative by finite differences = {est!r}, from the gradient = "
                f"{analytic!r} (rtol={rtol}, atol={atol}).")
