"""Prepared caches: validate that later calls match the preparation, then differentiate.

A cache records ``f`` and the structure, shapes and dtypes of the arguments it was prepared
with; every call checks them and raises :class:`PreparedCacheSpecError` saying what differs,
so a cache can never silently serve a different problem.

Every ``value_and_*`` function takes its arguments in one order: the cache, the function, the
seed the operation needs, if any (``ybar`` for a pullback, ``v`` for an HVP, the tangents for
a derivative), then ``f``'s own arguments::

    value_and_gradient(cache, f, *args)
    value_and_pullback(cache, f, ybar, *args)
    value_and_hvp(cache, f, v, *args)
    value_and_derivative(cache, f, tangents, *args)
    value_gradient_and_hessian(cache, f, *args)

The earlier forms ``value_and_pullback(cache, ybar, f, *args)`` and
``value_and_derivative(cache, f, *(primal, tangent) pairs)`` keep working: the cache knows its
function and its argument count, which tells the two forms apart.
"""
from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.arguments import fname, is_float_leaf
from ..core.pytree import flatten, leaf_paths
from ..errors import PreparedCacheSpecError
from ..replay.compiling import CompilingReplayer, compile_report
from ..replay.source import SourcePullbackReplayer, SourceReplayer
from .reverse import value_and_grad, vjp


def _leaf_spec(x):
    if type(x) is float:
        return ("float", (), np.dtype(np.float64))
    dt = getattr(x, "dtype", None)
    if dt is not None and hasattr(x, "shape"):
        # module-qualified: a NumPy and a CuPy "ndarray" are different arguments
        return (f"{type(x).__module__}.{type(x).__name__}", tuple(x.shape), dt)
    return ("constant", type(x).__name__, None)


class CacheSpec:
    """What a prepared cache was prepared for: ``f`` and each argument's structure and leaves."""

    def __init__(self, kind, f, args):
        self.kind, self.f = kind, f
        self.trees, self.leaves = [], []
        for a in args:
            leaves, tree = flatten(a)
            self.trees.append(tree)
            self.leaves.append([_leaf_spec(x) for x in leaves])
        self.float_args = tuple(i for i, a in enumerate(args)
                                if any(map(is_float_leaf, flatten(a)[0])))
        # the common call (plain arrays and floats, no containers) is checked by type, shape and
        # dtype alone; anything else (or a mismatch, for its message) takes the full check
        self._quick = tuple((a.shape, a.dtype) if type(a) is np.ndarray else float
                            for a in args) \
            if all(type(a) is np.ndarray or type(a) is float for a in args) else None

    def check(self, f, args):
        """Raise PreparedCacheSpecError if ``f`` or ``args`` differ from the preparation."""
        quick = getattr(self, "_quick", None)  # (None in caches pickled before it existed)
        if quick is not None and f is self.f and len(args) == len(quick):
            for a, q in zip(args, quick):
                if q is float:
                    if type(a) is not float:
                        break
                elif type(a) is not np.ndarray or a.shape != q[0] or a.dtype != q[1]:
                    break
            else:
                return
        where = f"the {self.kind} cache prepared for {fname(self.f)}"
        if f is not self.f:
            raise PreparedCacheSpecError(
                f"{where} was called with a different function, {fname(f)}. Prepare a cache "
                f"for each function (mp.prepare_{self.kind}_cache(f, *args)).")
        if len(args) != len(self.trees):
            raise PreparedCacheSpecError(
                f"{where} was prepared with {len(self.trees)} argument(s) and called with "
                f"{len(args)}.")
        for i, a in enumerate(args):
            leaves, tree = flatten(a)
            if tree != self.trees[i]:
                raise PreparedCacheSpecError(
                    f"{where}: argument {i} has structure {tree!r}, prepared with "
                    f"{self.trees[i]!r}.")
            for x, want, path in zip(leaves, self.leaves[i], leaf_paths(a)):
                got = _leaf_spec(x)
                if got != want:
                    leaf = f"argument {i}{path}"
                    raise PreparedCacheSpecError(
                        f"{where}: {leaf} is {_show(got)}, prepared with {_show(want)}. Prepare "
                        "a new cache for new shapes or dtypes.")


def _show(spec):
    kind, shape, dt = spec
    if kind == "constant":
        return f"a constant of type {shape}"
    return f"a {kind} of shape {shape} and dtype {dt}"


def expect_cache(cache, kind, caller):
    """Raise PreparedCacheSpecError unless ``cache`` was prepared by ``prepare_<kind>_cache``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> c = mp.prepare_hvp_cache(np.sum, np.ones(2))
        >>> expect_cache(c, "hvp", "value_and_hvp")
        >>> expect_cache(c, "gradient", "value_and_gradient")
        Traceback (most recent call last):
        ...
        mooncake_py.errors.PreparedCacheSpecError: value_and_gradient takes, as its first ...
    """
    spec = getattr(cache, "spec", None)
    if type(spec) is CacheSpec and spec.kind == kind:
        return
    got = "None" if cache is None else f"a {type(cache).__name__}"
    if type(spec) is CacheSpec:
        got += f" (made by mp.prepare_{spec.kind}_cache)"
    raise PreparedCacheSpecError(
        f"{caller} takes, as its first argument, the cache that mp.prepare_{kind}_cache(f, "
        f"*args) returns; it got {got}. Prepare one with c = mp.prepare_{kind}_cache(f, *args) "
        f"and call {caller}(c, f, ...).")


class ReplayingCache:
    """What the prepared caches that replay share: pickling keeps what the cache was prepared
    for and whether it replays, never its plans (the first call after loading records again).
    A subclass says how to make its replay state (:meth:`_new_replay`) and names, in
    ``_transient``, the other attributes it rebuilds on loading (:meth:`_rebuild`)."""
    _transient = ("_replay",)

    def _new_replay(self):
        raise NotImplementedError

    def _rebuild(self):
        pass

    def _start_replay(self, replay):
        self._replay = self._new_replay() if replay else None

    def compile_report(self):
        """What runs this cache's current plan, step by step, for a ``compile=True`` cache: a
        :class:`~mooncake_py.replay.compiling.CompileReport` (``print`` it for a table; its
        ``fallbacks`` name each run of steps that is not compiled and why). See
        docs/caches.md, "What did not compile"."""
        return compile_report(getattr(self, "_replay", None), self.spec.kind)

    def __getstate__(self):
        state = {k: v for k, v in self.__dict__.items() if k not in self._transient}
        state["replay"] = self._replay is not None
        return state

    def __setstate__(self, state):
        state = dict(state)
        replay = state.pop("replay", True)
        self.__dict__.update(state)
        self._rebuild()
        self._start_replay(replay)


class GradientCache(ReplayingCache):
    """Prepared by :func:`prepare_gradient_cache`; used by :func:`value_and_gradient`.

    Pickles like the other caches (when ``f`` does): the gradient function is rebuilt on
    loading, not stored."""
    _transient = ("_replay", "_vg")

    def __init__(self, f, args, replay=True, compile=False):
        self.spec = CacheSpec("gradient", f, args)
        self._compile = compile
        self._rebuild()
        self._start_replay(replay)

    def _rebuild(self):
        self._vg = value_and_grad(self.spec.f, argnums=self.spec.float_args)

    def _new_replay(self):
        if self._compile:
            return CompilingReplayer()
        return SourceReplayer()


class PullbackCache(ReplayingCache):
    """Prepared by :func:`prepare_pullback_cache`; used by :func:`value_and_pullback`.

    Pickles when ``f`` does; the replay plan is not stored (the first call after loading
    records again)."""

    def __init__(self, f, args, replay=True):
        self.spec = CacheSpec("pullback", f, args)
        y = f(*args)
        self.out_leaves = [_leaf_spec(o) for o in flatten(y)[0]]
        self.out_tree = flatten(y)[1]
        self._start_replay(replay)

    def _new_replay(self):
        return SourcePullbackReplayer()


def prepare_gradient_cache(f: Callable[..., Any], *args: Any,
                           replay: bool = True, compile: bool = False) -> GradientCache:
    """Prepare to compute ``f``'s value and gradient at arguments shaped like ``args``.

    With ``replay=True`` (the default) the first call records ``f`` and later calls re-run
    that recording on the new values without running ``f`` again, as long as guards hold: the
    outcomes of comparisons, ``bool``/``int`` of traced values and the non-float arguments must
    be those seen when recording, else ``f`` is recorded afresh (see
    mooncake_py/replay/plans.py for what is replayed and what a replayed function may not do:
    depend on globals, random numbers or side effects). ``replay=False`` records every call.
    The default replay runs the plan's runs of scalar steps (``s = s + x[i] * x[i]`` loops) as
    generated Python source (mooncake_py/replay/source.py) and its other steps (array
    ops, BLAS) as direct rule calls: equal to the recording up to the last bit of
    transcendental functions (``math.sin`` against NumPy's).

    ``compile=True`` (experimental) runs a plan made only of float64 scalar steps (``x[i]``,
    ``+ - * /``, unary functions such as ``np.sin``, comparisons branched on) in one numba
    kernel, compiled once and cached on disk (mooncake_py/replay/compiled.py); in other plans
    each run of at least 16 such steps becomes a compiled segment and the rest replays as by
    default (shorter scalar runs as generated source). A plan the kernels take no part of
    replays exactly as by default.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> f = lambda x, w: np.sum(np.tanh(x * w))
        >>> c = mp.prepare_gradient_cache(f, np.ones(3), 2.0)
        >>> y, (gx, gw) = mp.value_and_gradient(c, f, np.zeros(3), 2.0)
        >>> gx
        array([2., 2., 2.])
    """
    return GradientCache(f, args, replay, compile)


def value_and_gradient(cache: GradientCache, f: Callable[..., Any],
                       *args: Any) -> tuple[Any, tuple[Any, ...]]:
    """``(f(*args), grads)``, one gradient per argument (``None`` for non-float arguments).

    Raises PreparedCacheSpecError when ``f`` or the arguments' structure, shapes or dtypes
    differ from those the cache was prepared with.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> f = lambda x: np.sum(x ** 3)
        >>> c = mp.prepare_gradient_cache(f, np.ones(2))
        >>> y, (g,) = mp.value_and_gradient(c, f, np.array([1.0, 2.0]))
        >>> float(y), g
        (9.0, array([ 3., 12.]))
    """
    expect_cache(cache, "gradient", "value_and_gradient")
    cache.spec.check(f, args)
    rp = getattr(cache, "_replay", None)
    y, gs = rp.call(f, args, cache.spec.float_args) if rp is not None else cache._vg(*args)
    full = [None] * len(args)
    for i, g in zip(cache.spec.float_args, gs):
        full[i] = g
    return y, tuple(full)


def prepare_pullback_cache(f: Callable[..., Any], *args: Any,
                           replay: bool = True) -> PullbackCache:
    """Prepare to compute ``f``'s value and vector-Jacobian products at arguments like ``args``.

    With ``replay=True`` (the default) the first call records ``f`` and later calls re-run
    that recording on the new arguments and cotangent ``ybar`` without running ``f``, under
    the guards of :func:`prepare_gradient_cache` (branches on traced values and the constant
    arguments must be as recorded, else ``f`` is recorded again). Outputs may be arrays,
    scalars or containers of them. Runs of scalar steps replay as generated Python source,
    the rest as direct rule calls, as in :func:`prepare_gradient_cache`. ``replay=False``
    records every call.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> f = lambda x: np.sin(x) * 2
        >>> c = mp.prepare_pullback_cache(f, np.zeros(2))
        >>> y, (gx,) = mp.value_and_pullback(c, f, np.ones(2), np.zeros(2))
        >>> gx
        array([2., 2.])
    """
    return PullbackCache(f, args, replay)


def value_and_pullback(cache: PullbackCache, f: Any, ybar: Any,
                       *args: Any) -> tuple[Any, tuple[Any, ...]]:
    """``(f(*args), cotangents)`` for output cotangent ``ybar``, one entry per argument.

    ``ybar`` must match the output's structure and shapes (checked), as must the arguments.
    The earlier order ``value_and_pullback(cache, ybar, f, *args)`` is still accepted (told
    apart by which of the two is the cache's function).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> f = lambda x: np.sin(x) * 2.0
        >>> c = mp.prepare_pullback_cache(f, np.zeros(2))
        >>> y, (xbar,) = mp.value_and_pullback(c, f, np.ones(2), np.zeros(2))
        >>> xbar
        array([2., 2.])
    """
    expect_cache(cache, "pullback", "value_and_pullback")
    if f is not cache.spec.f and ybar is cache.spec.f:
        f, ybar = ybar, f
    cache.spec.check(f, args)
    seeds, stree = flatten(ybar)
    if stree != cache.out_tree or len(seeds) != len(cache.out_leaves) or any(
            np.shape(s) != spec[1] for s, spec in zip(seeds, cache.out_leaves)
            if spec[0] != "constant"):
        raise PreparedCacheSpecError(
            f"the pullback cache prepared for {fname(f)}: the cotangent ybar has structure "
            f"{stree!r} with shapes {[np.shape(s) for s in seeds]}; the output has "
            f"{cache.out_tree!r} with shapes {[s[1] for s in cache.out_leaves]}.")
    rp = getattr(cache, "_replay", None)
    if rp is None:
        y, pullback = vjp(f, *args)
        return y, pullback(ybar)
    nums = cache.spec.float_args
    y, cots = rp.call(f, args, nums, ybar)
    full = [None] * len(args)
    for i, c in zip(nums, cots):
        full[i] = c
    return y, tuple(full)
