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
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..config import Config, current_config
from ..core.arguments import fname, is_float_leaf, norm_argnums
from ..core.pytree import flatten, leaf_paths
from ..errors import PreparedCacheSpecError, StaleReplayError
from ..replay.compiling import CompilingReplayer, compile_report
from ..replay.one_array import gradient_entry
from ..replay.outside import OutsideGuard
from ..replay.plans import record_pullback
from ..replay.source import SourcePullbackReplayer, SourceReplayer
from ..tape import Tape
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
    """What a prepared cache was prepared for: ``f``, each argument's structure and leaves, and
    which arguments it differentiates.

    ``argnums=None`` (the default) differentiates every argument with a float leaf and gives
    one entry per argument (None for the others); an int ``argnums`` gives that argument's
    derivative alone, a tuple one per position in its order, as ``mp.value_and_grad`` does.
    ``float_args`` is the sorted positions differentiated (what the replayers take)."""

    def __init__(self, kind, f, args, argnums=None):
        self.kind, self.f = kind, f
        self.trees, self.leaves = [], []
        for a in args:
            leaves, tree = flatten(a)
            self.trees.append(tree)
            self.leaves.append([_leaf_spec(x) for x in leaves])
        self.argnums = argnums
        if argnums is None:
            self.float_args = tuple(i for i, a in enumerate(args)
                                    if any(map(is_float_leaf, flatten(a)[0])))
        else:
            self.order = norm_argnums(argnums, len(args), f)
            self.float_args = tuple(sorted(set(self.order)))
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


    def one_array(self):
        """The shape prepared when the cache takes one float64 NumPy array, differentiated
        (``argnums`` not given): the call replay/one_array.py serves. None otherwise."""
        quick = getattr(self, "_quick", None)
        if quick is None or len(quick) != 1 or quick[0] is float or \
                getattr(self, "argnums", None) is not None or self.float_args != (0,) or \
                quick[0][1] != np.float64:
            return None
        return quick[0][0]

    def arrange(self, items, nargs):
        """``items`` (one per :attr:`float_args`) as the caller receives them: with
        ``argnums=None`` one per argument (None where not differentiated), with an int
        ``argnums`` the one item, with a tuple one per position, in its order."""
        argnums = getattr(self, "argnums", None)  # (caches pickled before argnums existed)
        if argnums is None:
            full = [None] * nargs
            for i, g in zip(self.float_args, items):
                full[i] = g
            return tuple(full)
        if not isinstance(argnums, (tuple, list)):
            return items[0]
        where = {i: k for k, i in enumerate(self.float_args)}
        return tuple(items[where[i]] for i in self.order)


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
    ``_transient``, the other attributes it rebuilds on loading (:meth:`_rebuild`).

    :meth:`replay_state` is what a call replays with: it first checks, by identity, the
    globals and closure variables ``f`` reads (replay/outside.py) and starts afresh (records
    again) when one of them is bound to another object."""
    _transient = ("_replay", "_outside", "_fast")
    # what makes the entry of the one-array call (replay/one_array.py): gradient and HVP
    # caches have one, the others None
    _entry = None

    def _new_replay(self):
        raise NotImplementedError

    def _rebuild(self):
        pass

    def _start_replay(self, replay):
        self._replay = self._new_replay() if replay else None
        self._outside = OutsideGuard(self.spec.f) if replay else None
        self._fast = None
        if replay and self._entry is not None:
            one = self.spec.one_array()
            if one is not None:
                self._fast = self._entry(self.spec.f, one)

    def replay_state(self):
        """The replay state for this call (None for ``replay=False``), new when a global or
        closure variable ``f`` reads has been rebound since the recording."""
        rp = self._replay
        if rp is not None and not self._outside.holds():
            self._start_replay(True)
            rp = self._replay
        return rp

    def compile_report(self):
        """What runs this cache's current plan, step by step, for a ``compile=True`` cache: a
        :class:`~mooncake_py.replay.compiling.CompileReport` (``print`` it for a table; its
        ``fallbacks`` name each run of steps that is not compiled and why). See
        docs/caches.md, "What did not compile"."""
        return compile_report(getattr(self, "_replay", None), self.spec.kind)

    def __getstate__(self):
        state = {k: v for k, v in self.__dict__.items() if k not in self._transient}
        state["replay"] = getattr(self, "_replay", None) is not None
        return state

    def __setstate__(self, state):
        state = dict(state)
        replay = state.pop("replay", True)
        self.__dict__.update(state)
        self._rebuild()
        self._start_replay(replay)


def _replays(rp):
    """How many calls ``rp`` (a replayer, or a dict of them per lane count) served by replay."""
    if isinstance(rp, dict):  # (a Hessian cache's lanes, and its one-direction replayer)
        columns = getattr(rp, "columns", None)
        return sum(r.replays for r in rp.values()) + (columns.replays if columns else 0)
    return rp.replays


def debug_checked(cache, f, replayed, fresh, names):
    """Under ``Config(debug_mode=True)``: run ``replayed(rp)`` (the cache's replay, outside
    debug mode, which always records) and ``fresh()`` (a recording, with debug mode's checks);
    when the first was served by replay, raise StaleReplayError at the first part (named by
    ``names``, in order) in which they differ. Returns the fresh result."""
    rp = cache.replay_state()
    cfg = current_config()
    before = _replays(rp)
    with Config(debug_mode=False, chunk_size=cfg.chunk_size):
        got = replayed(rp)
    want = fresh()
    if _replays(rp) != before:
        for name, w, g in zip(names, want, got):
            why = _difference(w, g)
            if why is not None:
                raise StaleReplayError(
                    f"the {cache.spec.kind} cache of {fname(f)} replayed a recording whose "
                    f"{name} differs from a fresh recording ({why}). Something f reads changed "
                    "where the guards cannot see it: an array refilled in place, random "
                    "numbers drawn inside f, a global's contents. Pass such data as an "
                    "argument (not differentiated: argnums=...), or prepare the cache with "
                    "replay=False.")
    return want


def _difference(want, got):
    """Why two results differ (structure, shape, values beyond rounding), or None."""
    wl, wt = flatten(want)
    gl, gt = flatten(got)
    if wt != gt or len(wl) != len(gl):
        return f"structure {gt!r} against {wt!r}"
    for k, (w, g) in enumerate(zip(wl, gl)):
        if w is None or g is None:
            if w is not g:
                return f"leaf {k} is {g!r} against {w!r}"
            continue
        w, g = np.asarray(w), np.asarray(g)
        if w.shape != g.shape:
            return f"leaf {k} has shape {g.shape} against {w.shape}"
        if w.dtype.kind in "fc" or g.dtype.kind in "fc":
            # (replay runs math.sin where NumPy's sin ran: equal to the last bits, not exactly)
            if not np.allclose(g, w, rtol=1e-9, atol=1e-12, equal_nan=True):
                i = np.unravel_index(np.argmax(np.abs(g - w)), w.shape) if w.ndim else ()
                return f"{np.asarray(g)[i]!r} where a fresh recording gives {w[i]!r}"
        elif not np.array_equal(w, g):
            return f"leaf {k} is {g!r} against {w!r}"
    return None


class GradientCache(ReplayingCache):
    """Prepared by :func:`prepare_gradient_cache`; used by :func:`value_and_gradient`.

    Pickles like the other caches (when ``f`` does): the gradient function is rebuilt on
    loading, not stored."""
    _transient = ("_replay", "_outside", "_fast", "_vg")
    _entry = staticmethod(gradient_entry)

    def __init__(self, f, args, replay=True, compile=False, argnums=None):
        self.spec = CacheSpec("gradient", f, args, argnums)
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

    def __init__(self, f, args, replay=True, argnums=None):
        self.spec = CacheSpec("pullback", f, args, argnums)
        y = f(*args)
        self.out_leaves = [_leaf_spec(o) for o in flatten(y)[0]]
        self.out_tree = flatten(y)[1]
        self._start_replay(replay)

    def _new_replay(self):
        return SourcePullbackReplayer()


def prepare_gradient_cache(f: Callable[..., Any], *args: Any, replay: bool = True,
                           compile: bool = False,
                           argnums: int | Sequence[int] | None = None) -> GradientCache:
    """Prepare to compute ``f``'s value and gradient at arguments shaped like ``args``.

    ``argnums`` says which arguments are differentiated, as for :func:`mooncake_py.grad`:
    an int gives that argument's gradient alone, a tuple one gradient per position (in its
    order). By default every argument with a float leaf is, and the gradients are a tuple with
    one entry per argument (None for the others). An argument not differentiated (data: a
    design matrix, observations) is an input of the replayed plan, read afresh on every call
    (a float64 or float32 NumPy array is; other values are compared with the recorded ones, a change
    records again) and checked for shape and dtype like the others; nothing is computed for it.

    With ``replay=True`` (the default) the first call records ``f`` and later calls re-run
    that recording on the new values without running ``f`` again, as long as guards hold: the
    outcomes of comparisons, ``bool``/``int`` of traced values and the non-float arguments must
    be those seen when recording, else ``f`` is recorded afresh (see
    mooncake_py/replay/plans.py for what is replayed and what a replayed function may not do:
    depend on random numbers or side effects). The globals and closure variables ``f`` reads
    are guarded by identity (``s = 10.0`` after preparing with ``s = 1.0`` records again), but
    an array refilled in place, or random numbers drawn inside ``f``, are not seen: pass such
    data as a non-differentiated argument, and check with ``Config(debug_mode=True)`` (every
    call also records, and a replay that differs raises :class:`StaleReplayError`).
    ``replay=False`` records every call.
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
        >>> loss = lambda w, X, y: np.sum((X @ w - y) ** 2)     # data as arguments
        >>> X, y = np.ones((4, 2)), np.zeros(4)
        >>> c = mp.prepare_gradient_cache(loss, np.zeros(2), X, y, argnums=0)
        >>> value, gw = mp.value_and_gradient(c, loss, np.ones(2), X, y)
        >>> gw                                                    # the gradient in w alone
        array([16., 16.])
    """
    return GradientCache(f, args, replay, compile, argnums)


def value_and_gradient(cache: GradientCache, f: Callable[..., Any],
                       *args: Any) -> tuple[Any, Any]:
    """``(f(*args), grads)``: by default one gradient per argument (``None`` for non-float
    arguments); with ``argnums`` as the cache was prepared (see :func:`prepare_gradient_cache`).

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
    if type(cache) is GradientCache and len(args) == 1:
        # one float64 array as prepared (the common call): the replay's bound entry checks
        # what the path below would and serves it, or returns None for that path to decide
        fast = cache._fast
        if fast is not None:
            out = fast(cache, f, args[0])
            if out is not None:
                return out
        spec = cache.spec
        a = args[0]
        q = getattr(spec, "_quick", None)
        if f is spec.f and q is not None and len(q) == 1 and type(a) is np.ndarray and \
                q[0] is not float \
                and a.shape == q[0][0] and a.dtype == q[0][1] and \
                getattr(spec, "argnums", None) is None and spec.float_args == (0,):
            rp = cache.replay_state()
            if rp is not None and not current_config().debug_mode:
                return rp.call(f, args, (0,))
    expect_cache(cache, "gradient", "value_and_gradient")
    spec = cache.spec
    spec.check(f, args)
    rp = cache.replay_state()
    if rp is None:
        y, gs = cache._vg(*args)
    elif current_config().debug_mode:
        y, gs = debug_checked(cache, f, lambda r: r.call(f, args, spec.float_args),
                              lambda: cache._vg(*args), ("value", "gradient"))
    else:
        y, gs = rp.call(f, args, spec.float_args)
    return y, spec.arrange(gs, len(args))


def prepare_pullback_cache(f: Callable[..., Any], *args: Any, replay: bool = True,
                           argnums: int | Sequence[int] | None = None) -> PullbackCache:
    """Prepare to compute ``f``'s value and vector-Jacobian products at arguments like ``args``.

    With ``replay=True`` (the default) the first call records ``f`` and later calls re-run
    that recording on the new arguments and cotangent ``ybar`` without running ``f``, under
    the guards of :func:`prepare_gradient_cache` (branches on traced values and the constant
    arguments must be as recorded, else ``f`` is recorded again). Outputs may be arrays,
    scalars or containers of them. Runs of scalar steps replay as generated Python source,
    the rest as direct rule calls, as in :func:`prepare_gradient_cache`. ``replay=False``
    records every call. ``argnums`` as for :func:`prepare_gradient_cache`.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> f = lambda x: np.sin(x) * 2
        >>> c = mp.prepare_pullback_cache(f, np.zeros(2))
        >>> y, (gx,) = mp.value_and_pullback(c, f, np.ones(2), np.zeros(2))
        >>> gx
        array([2., 2.])
    """
    return PullbackCache(f, args, replay, argnums)


def value_and_pullback(cache: PullbackCache, f: Any, ybar: Any,
                       *args: Any) -> tuple[Any, tuple[Any, ...]]:
    """``(f(*args), cotangents)`` for output cotangent ``ybar``, one entry per argument.

    ``ybar`` must match the output's structure and shapes (checked), as must the arguments.
    The earlier order ``value_and_pullback(cache, ybar, f, *args)`` is still accepted (told
    apart by which of the two is the cache's function).

    Example (a weighted pullback, as a least-squares Jacobian-transpose product):
        >>> import numpy as np, mooncake_py as mp
        >>> r = lambda w: np.stack([w[0] * w[1], w[0] + w[1]])
        >>> c = mp.prepare_pullback_cache(r, np.ones(2))
        >>> y, (wbar,) = mp.value_and_pullback(c, r, np.array([1.0, 0.5]), np.array([2.0, 3.0]))
        >>> y, wbar
        (array([6., 5.]), array([3.5, 2.5]))
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
    spec = cache.spec
    rp = cache.replay_state()
    if rp is not None and not current_config().debug_mode:
        return _replayed_pullback(rp, spec, f, args, ybar)

    def fresh():
        if getattr(spec, "argnums", None) is None:
            y, pullback = vjp(f, *args)
            return y, pullback(ybar)
        y, cots = record_pullback(f, args, spec.float_args, ybar, Tape)[:2]
        return y, spec.arrange(cots, len(args))
    if rp is None:
        return fresh()
    return debug_checked(cache, f, lambda r: _replayed_pullback(r, spec, f, args, ybar),
                         fresh, ("value", "cotangent"))


def _replayed_pullback(rp, spec, f, args, ybar):
    y, cots = rp.call(f, args, spec.float_args, ybar)
    return y, spec.arrange(cots, len(args))
