"""Second order by forward-over-reverse: Hessian-vector products and Hessians.

``hvp`` makes the differentiated arguments dual numbers ``(x, v)`` and runs the ordinary
gradient on them: every pullback is written with ``np.`` calls, so on duals their frules fire
and the gradient comes back as a dual whose tangent is ``H·v``. ``hessian`` does the same with
``k`` basis directions per sweep, carried as lanes of one dual. There is no second set of rules:
if an op fails here, the fix is in its frule or its pullback.
"""
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..config import current_config
from ..core import array_module as am
from ..core import fp_warnings
from ..core.arguments import check_args, fname, gc_paused, is_float_leaf, norm_argnums
from ..core.pytree import flatten
from ..dual.dual_array import DualArray, Tag
from ..dual.seeding import lent, result, seed
from ..errors import ArgumentError, NonDifferentiableInputError, TangentError
from ..mixed.tracking import as_gradient, check_scalar
from ..replay.compiling import (
    CompilingReplayer,
    compile_report,
    direction_cost,
    estimated_direction_cost,
)
from ..replay.one_array import hvp_entry
from ..replay.plans import Replayer
from ..replay.source import SourceReplayer
from ..tape import Tape, TrackedArray
from .caches import CacheSpec, ReplayingCache, debug_checked, expect_cache
from .reverse import value_and_grad
from .transformed import transformed

# Directions per sweep when neither chunk_size nor Config.chunk_size says: large enough that
# the per-op overhead is shared by many directions, small enough that k copies of every
# intermediate stay modest.
DEFAULT_CHUNK = 128
_MEMORY_BUDGET = 1 << 28  # bytes for the k-lane tangent of the inputs (the tape holds a multiple)


def _value_gradient_hvp(f, nums, args, vs, lanes, kwargs, has_aux=False, replayer=None):
    """(value, gradients, Hv) with gradients/Hv per argument in ``nums`` (tuples); with
    ``has_aux`` the value is ``(value, aux)``. A ``replayer`` (prepared caches: no kwargs, no
    aux) replays the tape-level plan of an earlier call on this call's duals."""
    tangents = [None] * len(args)
    for i, v in zip(nums, vs):
        tangents[i] = v
    # (a replayer lends the directions to the duals uncopied and owns them before any run
    # that could write into them)
    tag, dargs = seed(f, tuple(args), tuple(tangents), lanes, borrow=replayer is not None)
    try:
        if replayer is not None:
            y, grads = replayer.call(f, dargs, nums)
        else:
            y, grads = value_and_grad(f, argnums=nums, has_aux=has_aux)(*dargs, **kwargs)
    finally:
        tag.close()  # duals f saved somewhere raise if used later (the results are unwrapped)
    if has_aux:
        y, aux = y
    value = result(y, tag)[0] if is_float_leaf(y) else y
    gs, hvs = [], []
    for g in grads:
        leaves, tree = flatten(g)
        pairs = [(None, None) if leaf is None else result(leaf, tag) for leaf in leaves]
        gs.append(tree.unflatten([p for p, _ in pairs]))
        hvs.append(tree.unflatten([t for _, t in pairs]))
    if has_aux:
        return (value, aux), tuple(gs), tuple(hvs)
    return value, tuple(gs), tuple(hvs)


def _split_v(f, argnums, v, args, nums):
    """One direction per differentiated argument, each float leaf cast to its argument's
    float dtype (:func:`cast_direction`)."""
    if isinstance(argnums, int):
        vs = (v,)
    elif not isinstance(v, (tuple, list)) or len(v) != len(argnums):
        raise TangentError(
            f"hvp of {fname(f)} with argnums={argnums!r}: v must be a tuple with one direction "
            f"per differentiated argument ({len(argnums)}), got {type(v).__name__}.")
    else:
        vs = tuple(v)
    out = []
    for i, d in zip(nums, vs):
        xl, xtree = flatten(args[i])
        dl, dtree = flatten(d)
        if dtree == xtree:  # else seeding names the mismatch
            d = dtree.unflatten([cast_direction(f, x, e) for x, e in zip(xl, dl)])
        out.append(d)
    return tuple(out)


def cast_direction(f, x, d):
    """Direction ``d`` of leaf ``x``, cast to x's dtype when both are real floating point of
    different precisions (a float64 direction for float32 parameters, as SciPy passes them):
    the product is computed in x's precision either way, so float32 stays float32. Anything
    else is returned as it is, for seeding to accept or reject (integer directions are an
    error in ``hvp``; :func:`mooncake_py.hessp` casts them, as SciPy probes with int8).

    Example:
        >>> import numpy as np
        >>> cast_direction(print, np.ones(2, np.float32), np.array([0.1, 2.0])).dtype
        dtype('float32')
        >>> cast_direction(print, np.ones(2, np.float32), np.array([1, 2])).dtype  # unchanged
        dtype('int64')
    """
    xdt, ddt = getattr(x, "dtype", None), getattr(d, "dtype", None)
    if not isinstance(xdt, np.dtype) or not isinstance(ddt, np.dtype) or xdt == ddt \
            or xdt.kind != "f" or ddt.kind != "f" or type(d) is DualArray:
        return d  # (another library's array: seeding names it)
    with np.errstate(over="ignore"):  # an overflow is the error raised below
        c = d.astype(xdt)
    if xdt.itemsize < ddt.itemsize and not np.array_equal(np.isfinite(c), np.isfinite(d)):
        raise TangentError(
            f"the direction given for {fname(f)} has dtype {ddt} and entries beyond the range "
            f"of the argument's dtype {xdt}, to which it is cast; scale it down (the product "
            "is linear in it).")
    return c


def hvp(f: Callable[..., Any], argnums: int | Sequence[int] = 0, lanes: bool = False,
        has_aux: bool = False) -> Callable[..., Any]:
    """Hessian-vector product by forward-over-reverse: ``mp.hvp(f)(*args, v)``.

    ``v`` (the last positional argument) is a direction shaped like the differentiated argument,
    or, for a tuple ``argnums``, a tuple of directions; the result mirrors it:
    ``Σⱼ ∂²f/∂xₖ∂xⱼ · vⱼ`` for each differentiated argument ``xₖ``. With ``lanes=True``, ``v``
    carries k directions on a leading axis and k products come back in one sweep. With
    ``has_aux=True``, ``f`` returns ``(value, aux)`` and the call returns ``(Hv, aux)``.

    The direction comes last; SciPy's ``minimize(..., hessp=)`` calls ``hessp(x, p, *args)``,
    so pass it :func:`mooncake_py.hessp` (or :func:`mooncake_py.hessian_operator`) instead.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> f = lambda x: np.sum(x ** 3)
        >>> mp.hvp(f)(np.array([1.0, 2.0]), np.array([1.0, 1.0]))   # 6 x v
        array([ 6., 12.])
    """
    fast = type(argnums) is int and not lanes and not has_aux

    @functools.wraps(f)
    def hvp_f(*args_and_v, **kwargs):
        if len(args_and_v) < 2:
            raise ArgumentError(
                f"hvp(f)(*args, v) takes the arguments of {fname(f)} and then the direction v "
                f"as the last positional argument; it got {len(args_and_v)} positional "
                "argument(s), so v is missing. Call mp.hvp(f)(x, v) with v shaped like x (or "
                "mp.hessian(f)(x) for the whole matrix).")
        *args, v = args_and_v
        # NumPy warnings raised by rules and the sweep name the user's line, not the library's
        # (fp_warnings.enter written out: the fixed cost of every HVP)
        seen, ours = fp_warnings.cache
        token = fp_warnings.switch(ours) if fp_warnings.get() is seen and ours is not None \
            else fp_warnings.enter()
        try:
            if fast:
                hv = _fast_hvp(f, argnums, args, v, kwargs)
                if hv is not _NOT_FAST:
                    return hv
            nums = norm_argnums(argnums, len(args), f)
            value, _, hv = _value_gradient_hvp(f, nums, args, _split_v(f, argnums, v, args, nums),
                                               lanes, kwargs, has_aux)
        except TangentError as e:
            if len(args) < 2:
                raise
            raise TangentError(
                f"{e} Note: mp.hvp(f)(*args, v) takes the direction v as the LAST positional "
                f"argument (here a {type(v).__name__}). SciPy's minimize(..., hessp=) calls "
                "hessp(x, p, *args) with the direction second: pass hessp=mp.hessp(f) "
                "instead.") from None
        finally:
            if token is not None:
                fp_warnings.reset(token)
        hv = hv[0] if isinstance(argnums, int) else hv
        return (hv, value[1]) if has_aux else hv
    return transformed(hvp_f, hvp, f, argnums, lanes, has_aux)


_NOT_FAST = object()


def _fast_hvp(f, argnum, args, v, kwargs):
    """H·v for the common call, one float64 ndarray differentiated along a float64 ndarray ``v``
    of its shape, with the steps of the general path (seed a dual, track it, record ``f``,
    sweep, take the tangent of the gradient) done on that one leaf: no pytree handling, no
    argnums normalisation, one copy of ``v`` instead of two. ``_NOT_FAST`` when the call is not
    of that kind; the general path then runs and raises where it should."""
    n = len(args)
    if not -n <= argnum < n or type(v) is not np.ndarray:
        return _NOT_FAST
    i = argnum % n
    x = args[i]
    if type(x) is not np.ndarray or x.dtype.type is not np.float64 \
            or v.dtype.type is not np.float64 or v.shape != x.shape:
        return _NOT_FAST
    tag = Tag(0)
    # the dual's own tangent: writes f makes into x move it, never the caller's v
    d = DualArray(x, v.copy(), tag)
    try:
        tape = Tape()
        with gc_paused():
            try:
                t = tape._new(d, None, None)
                entry = TrackedArray(d, tape, t._node)
                y = f(*args[:i], t, *args[i + 1:], **kwargs)
                yv = y._value if type(y) is TrackedArray else y
                # (a dual of a float64 scalar is seeded by the sweep with a float64 one)
                if type(yv) is not DualArray or type(yv._value) is not np.float64:
                    check_scalar(f, y)
                g = tape.gradient(y, [entry])[0]
            finally:
                tape.close()  # a tracked value f saved somewhere raises if used later
    finally:
        tag.close()  # likewise a dual
    if type(g) is DualArray and g._tag is tag:
        hv = g._tangent
        if type(hv) is np.ndarray and not hv.flags.writeable:
            hv = hv.copy()  # a broadcast view inside the computation: hand out an owned array
        return hv
    if type(g) is np.ndarray and g.dtype.type is np.float64:
        return np.zeros(g.shape)  # no dual reached x: a zero H·v, as result gives
    return result(as_gradient(g, d), tag)[1]


def _float_leaves(args, nums):
    """(argnum, leaf index, leaf) for every float leaf of the differentiated arguments."""
    out = []
    for i in nums:
        for j, leaf in enumerate(flatten(args[i])[0]):
            if is_float_leaf(leaf):
                out.append((i, j, leaf))
    return out


def _chunk(n, itemsize, chunk_size):
    k = chunk_size or current_config().chunk_size
    if not k:
        k = min(DEFAULT_CHUNK, max(1, _MEMORY_BUDGET // max(1, n * itemsize)))
    return max(1, min(int(k), n))


def _hessian_rows(f, nums, args, kwargs, chunk_size, replayers=None):
    """Value, gradients and the dense (N, N) Hessian over all float leaves of ``nums``.
    ``replayers`` (a dict, prepared caches) holds one Replayer per lane count."""
    check_args(f, args, nums)
    leaves = _float_leaves(args, nums)
    sizes = [int(np.size(leaf)) for _, _, leaf in leaves]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    n = int(offsets[-1])
    dtype = np.result_type(*[getattr(l, "dtype", np.float64) for _, _, l in leaves]) if leaves \
        else np.float64
    if np.dtype(dtype).kind == "c":
        raise NonDifferentiableInputError(
            f"hessian of {fname(f)}: a complex argument has no Hessian in the (N, N) layout "
            "used here (over C treated as R² it is a 2N x 2N real matrix). Use mp.hvp(f)(z, v) "
            "with complex directions v (it applies that R² Hessian to (Re v, Im v) and returns "
            "the result as a complex array), or take the Hessian of f in (Re z, Im z).")
    xp = am.module_of(*[leaf for _, _, leaf in leaves], what=f"the Hessian of {fname(f)}")
    k = _chunk(n, np.dtype(dtype).itemsize, chunk_size)
    blocks = []  # row blocks, joined at the end: under jvp they are duals, which a plain
    value, grads = None, None  # preallocated H could not hold (jvp(hessian(f)): third order)
    for r0 in range(0, n, k):
        rows = min(k, n - r0)
        basis = xp.eye(rows, n, r0, dtype=dtype)
        vs = []
        for i in nums:
            arg_leaves, tree = flatten(args[i])
            tl = [None] * len(arg_leaves)
            for (ai, j, leaf), a, b in zip(leaves, offsets[:-1], offsets[1:]):
                if ai == i:
                    tl[j] = basis[:, a:b].reshape((rows,) + tuple(np.shape(leaf))).astype(
                        getattr(leaf, "dtype", np.float64), copy=False)
            vs.append(tree.unflatten(tl))
        rp = None
        if replayers is not None:
            # a plan per lane count: the last, shorter chunk must not throw out the plan of
            # the others (nor replay one recorded with other tangent shapes)
            rp = replayers.get(rows)
            if rp is None:
                rp = replayers[rows] = Replayer(dual=True, kind="hessian")
        value, grads, hvs = _value_gradient_hvp(f, nums, args, vs, True, kwargs, replayer=rp)
        cols = []
        for hv in hvs:
            for t in flatten(hv)[0]:
                if t is not None:
                    cols.append(np.reshape(t, (rows, -1)))
        blocks.append(np.concatenate(cols, axis=1) if cols else xp.zeros((rows, n), dtype=dtype))
    if not blocks:
        H = xp.empty((n, n), dtype=dtype)
    else:
        H = blocks[0] if len(blocks) == 1 else np.concatenate(blocks, axis=0)
    return value, grads, H, leaves, offsets


def _hessian_blocks(args, nums, H, leaves, offsets, single):
    """H as the user expects it: ``x.shape + x.shape`` for one array argument, else blocks."""
    if single and len(leaves) == 1 and flatten(args[nums[0]])[1].kind == "leaf":
        shape = tuple(np.shape(leaves[0][2]))
        return H.reshape(shape + shape)
    spans = {}
    for (i, _, leaf), a, b in zip(leaves, offsets[:-1], offsets[1:]):
        lo, hi = spans.get(i, (a, b))
        spans[i] = (min(lo, a), max(hi, b))

    def shape_of_arg(i):
        tree_leaves, tree = flatten(args[i])
        if tree.kind == "leaf":
            return tuple(np.shape(tree_leaves[0]))
        return (spans[i][1] - spans[i][0],)  # containers: their float leaves flattened
    blocks = tuple(tuple(H[slice(*spans[i]), slice(*spans[j])].reshape(
        shape_of_arg(i) + shape_of_arg(j)) for j in nums) for i in nums)
    return blocks[0][0] if single else blocks


def hessian(f: Callable[..., Any], argnums: int | Sequence[int] = 0,
            chunk_size: int | None = None) -> Callable[..., Any]:
    """The Hessian of a scalar function by forward-over-reverse, ``chunk_size`` directions a sweep.

    For one array argument of shape ``s`` the result has shape ``s + s``. For a tuple
    ``argnums`` it is a tuple of tuples of blocks, block ``(i, j)`` shaped
    ``args[i].shape + args[j].shape`` (a container argument counts as its float leaves
    flattened). ``chunk_size`` (default: ``Config.chunk_size``, else up to 128 directions within a
    memory budget) sets how many basis directions ride as lanes of one sweep.

    For a container argument (dict of parameters, dataclass, ...) the Hessian is ``(N, N)`` over
    its N float entries, in the order of ``flat, unravel = mp.ravel_pytree(arg)``:
    ``H @ flat_direction`` is then a flat vector and ``unravel(H @ d)`` puts it back into the
    container's structure; ``unravel(H[:, j])`` is column j as a container.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> mp.hessian(lambda x: x[0] ** 2 * x[1])(np.array([1.0, 3.0]))
        array([[6., 2.],
               [2., 0.]])
    """
    single = isinstance(argnums, int)

    @functools.wraps(f)
    def hessian_f(*args, **kwargs):
        nums = norm_argnums(argnums, len(args), f)
        _, _, H, leaves, offsets = _hessian_rows(f, nums, args, kwargs, chunk_size)
        return _hessian_blocks(args, nums, H, leaves, offsets, single)
    return transformed(hessian_f, hessian, f, argnums, chunk_size)


# --- prepared caches ----------------------------------------------------------------------
class HVPCache(ReplayingCache):
    """Prepared by :func:`prepare_hvp_cache`; used by :func:`value_and_hvp`. Pickles without
    its plan (the next call records again)."""

    _entry = staticmethod(hvp_entry)

    def __init__(self, f, args, replay=True, compile=False, argnums=None):
        self.spec = CacheSpec("hvp", f, args, argnums)
        self._compile = compile
        self._start_replay(replay)

    def _new_replay(self):
        if self._compile:
            return CompilingReplayer(dual=True, kind="hvp")
        return SourceReplayer(dual=True, kind="hvp")


class HessianCache(ReplayingCache):
    """Prepared by :func:`prepare_hessian_cache`; used by :func:`value_gradient_and_hessian`.
    Pickles without its plans."""

    def __init__(self, f, args, chunk_size, replay=True, compile=False, argnums=None):
        self.spec = CacheSpec("hessian", f, args, argnums)
        self.chunk_size = chunk_size
        self._compile = compile
        self._start_replay(replay)

    def _new_replay(self):
        return _HessianReplay(self._compile)

    def compile_report(self):
        """The report of :meth:`ReplayingCache.compile_report` for the one-direction plan that
        serves this cache (its k-lane plans are never compiled: the status says when they
        serve)."""
        rs = getattr(self, "_replay", None)
        r = compile_report(rs.columns if rs is not None else None, "hessian")
        if rs is not None and rs.mode == "lanes":
            r.status = "k-lane plans replayed as rule calls: one direction at a time would " \
                "not pay" + (" (foreseen from the k-lane plan)" if rs.columns.plan is None
                             else f"; the one-direction plan: {r.status}")
        return r


class _HessianReplay(dict):
    """A Hessian cache's replay state: lane count -> Replayer (Python replay of a k-lane plan,
    one plan per lane count), and ``columns``, the replayer of an HVP cache (one direction a
    call: compiled kernel or generated source), which serves the Hessian one basis direction at
    a time when that costs less than the lanes. The first call runs the lanes and foresees
    from their plan what one direction would cost (``mode`` "columns" or "lanes"); the first
    call served by ``columns`` checks that on the plan it made, and a plan that does not pay
    (or a replayer that gives up) moves the cache back to the lanes for good."""

    def __init__(self, compile):
        super().__init__()
        self.compile = compile
        self.columns = CompilingReplayer(dual=True, kind="hessian") if compile else \
            SourceReplayer(dual=True, kind="hessian")
        self.mode = None

    def values(self):  # (every replayer that served: tests count their replays)
        out = list(dict.values(self))
        return out + [self.columns] if self.columns.plan is not None else out

    def foresee(self, n, k, leaves):
        """After the first (lanes) call: whether one-direction replays would pay."""
        rp = dict.get(self, min(k, n))
        if rp is None or rp.plan is None:
            self.mode = "lanes"
            return
        cost = estimated_direction_cost(rp.plan, [x for _, _, x in leaves], self.compile)
        self.mode = "columns" if n * cost <= -(-n // k) * len(rp.plan.steps) else "lanes"

    def columns_pay(self, n, k):
        """Whether ``n`` one-direction replays of the column plan cost less than
        ``ceil(n / k)`` replays of a k-lane plan in Python (None: not known yet)."""
        rp = self.columns
        if rp.disabled or rp.plan is None:
            return False
        cost = direction_cost(rp.plan)
        if cost is None or cost == 0.0:
            return None if cost is None else True  # (not made yet; a compiled kernel)
        return n * cost <= -(-n // k) * len(rp.plan.steps)


def prepare_hvp_cache(f: Callable[..., Any], *args: Any, replay: bool = True,
                      compile: bool = False,
                      argnums: int | Sequence[int] | None = None) -> HVPCache:
    """Prepare Hessian-vector products of ``f`` at arguments shaped like ``args``.

    With ``replay=True`` (the default) the first call records ``f`` on dual numbers and later
    calls re-run that recording's plan on the new duals, under the guards of
    :func:`prepare_gradient_cache` (float64 and float32 NumPy arguments; anything else, and any
    function the gradient replay refuses, is recorded every call). A float argument given no
    direction (``v = (v, None)``) is replayed too, as a plain leaf (its plan as direct rule
    calls only). By default the plan's runs of scalar steps run as generated Python source on
    (value, tangent) pairs (mooncake_py/replay/source.py; one function when the plan is
    nothing else), its other steps as direct rule calls on the duals.
    ``replay=False`` records every call. ``compile=True`` (experimental) runs a plan made only
    of float64 scalar steps in a numba forward-over-reverse kernel, as
    :func:`prepare_gradient_cache` does for gradients (mooncake_py/replay/compiled.py); any
    other plan replays exactly as by default (no compiled segments for HVPs).

    ``argnums`` as for :func:`~mooncake_py.prepare_gradient_cache`: ``v``, the gradient and
    ``Hv`` are then one direction for an int, a tuple in its order for a tuple; the other
    arguments are data (read afresh every call, no derivative computed for them).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> logp = lambda x: -0.5 * np.sum(x ** 2)
        >>> x = np.ones(3, dtype=np.float32)
        >>> c = mp.prepare_hvp_cache(logp, x)
        >>> y, g, Hv = mp.value_and_hvp(c, logp, np.ones(3, dtype=np.float32), x)
        >>> Hv
        array([-1., -1., -1.], dtype=float32)
    """
    return HVPCache(f, args, replay, compile, argnums)


def value_and_hvp(cache: HVPCache, f: Callable[..., Any], v: Any,
                  *args: Any) -> tuple[Any, Any, Any]:
    """``(f(*args), ∇f, ∇²f·v)`` for every float argument.

    With one argument ``v`` is shaped like it; with several, ``v`` is a tuple with one direction
    per argument (``None`` for non-float ones) and the gradient and ``Hv`` are tuples likewise.
    The arguments are checked against the preparation (PreparedCacheSpecError).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> f = lambda x: np.sum(x ** 3)
        >>> c = mp.prepare_hvp_cache(f, np.ones(2))
        >>> y, g, Hv = mp.value_and_hvp(c, f, np.array([1.0, 0.0]), np.array([1.0, 2.0]))
        >>> g, Hv
        (array([ 3., 12.]), array([6., 0.]))
    """
    if type(cache) is HVPCache and len(args) == 1:
        # one float64 array as prepared (the common call): the replay's bound entry checks
        # what the path below would and serves it, or returns None for that path to decide
        fast = cache._fast
        if fast is not None:
            out = fast(cache, f, v, args[0])
            if out is not None:
                return out
        spec = cache.spec
        a = args[0]
        q = getattr(spec, "_quick", None)
        if f is spec.f and q is not None and len(q) == 1 and type(a) is np.ndarray and \
                q[0] is not float and a.shape == q[0][0] and a.dtype == q[0][1] and \
                getattr(spec, "argnums", None) is None and spec.float_args == (0,):
            rp = cache.replay_state()
            if rp is not None and not current_config().debug_mode:
                out = _replayed_hvp_one(rp, f, a, v)
                if out is not None:
                    return out
    expect_cache(cache, "hvp", "value_and_hvp")
    spec = cache.spec
    spec.check(f, args)
    nums = spec.float_args
    rp = cache.replay_state()
    if rp is not None and current_config().debug_mode:
        return debug_checked(cache, f, lambda r: _hvp_call(spec, f, v, args, r),
                             lambda: _hvp_call(spec, f, v, args, None), ("value", "gradient", "Hv"))
    if rp is not None and len(args) == 1 and nums == (0,):
        # one float64 array: the replayer's own short form of the steps below (None otherwise)
        out = _replayed_hvp_one(rp, f, args[0], v)
        if out is not None:
            return out
    return _hvp_call(spec, f, v, args, rp)


def _hvp_call(spec, f, v, args, rp):
    """value_and_hvp's general path, with the replayer ``rp`` (None: recorded)."""
    nums = spec.float_args
    if getattr(spec, "argnums", None) is not None:
        vs = _split_v(f, spec.argnums, v, args, spec.order)
        by_pos = dict(zip(spec.order, vs))
        value, gs, hvs = _value_gradient_hvp(f, nums, args, tuple(by_pos[i] for i in nums),
                                             False, {}, replayer=rp)
        return value, spec.arrange(gs, len(args)), spec.arrange(hvs, len(args))
    if len(args) == 1:
        vs = (v,)
    else:
        if not isinstance(v, (tuple, list)) or len(v) != len(args):
            raise TangentError(f"value_and_hvp of {fname(f)}: with {len(args)} arguments, v must "
                               "be a tuple with one direction per argument (None for constants).")
        vs = tuple(v[i] for i in nums)
    value, gs, hvs = _value_gradient_hvp(f, nums, args, vs, False, {}, replayer=rp)
    if len(args) == 1:
        return value, gs[0] if gs else None, hvs[0] if hvs else None
    return value, _full(len(args), nums, gs), _full(len(args), nums, hvs)


_F64_DT = np.dtype(np.float64)
_F32_DT = np.dtype(np.float32)


def _replayed_hvp_one(replayer, f, x, v):
    """``(f(x), ∇f, H·v)`` from an HVP cache's dual ``replayer`` for one float64 or float32
    ndarray ``x`` and an ndarray ``v`` of its shape and dtype: the steps of
    :func:`value_and_hvp` (seed a dual, replay, take value, gradient and tangent apart) on that
    one leaf, without its pytree and argument handling. None when the call is not of that kind (the general path then runs,
    and raises where it should).

    Example:
        >>> from mooncake_py.replay.plans import Replayer
        >>> r = Replayer(dual=True, kind="hvp")
        >>> f = lambda x: np.sum(x ** 3)
        >>> y, g, hv = _replayed_hvp_one(r, f, np.array([1.0, 2.0]), np.array([1.0, 0.0]))
        >>> float(y), g.tolist(), hv.tolist()
        (9.0, [3.0, 12.0], [6.0, 0.0])
    """
    if type(x) is not np.ndarray or type(v) is not np.ndarray or v.dtype != x.dtype or \
            (x.dtype != _F64_DT and x.dtype != _F32_DT) or v.shape != x.shape:
        return None
    tag = Tag(0)
    try:
        # (v lent as seed(borrow=True) does: the replayer owns it before any write)
        y, grads = replayer.call(f, (DualArray(x, lent(v), tag),), (0,))
    finally:
        tag.close()
    value = result(y, tag)[0] if is_float_leaf(y) else y
    g, = grads
    if g is None:
        return value, None, None
    return (value,) + result(g, tag)


def _full(n, nums, items):
    out = [None] * n
    for i, x in zip(nums, items):
        out[i] = x
    return tuple(out)


def prepare_hessian_cache(f: Callable[..., Any], *args: Any, chunk_size: int | None = None,
                          replay: bool = True, compile: bool = False,
                          argnums: int | Sequence[int] | None = None) -> HessianCache:
    """Prepare Hessians of ``f`` at arguments shaped like ``args``; see :func:`hessian`.

    With ``replay=True`` (the default) the cache replays as an HVP cache does
    (:func:`prepare_hvp_cache`): the Hessian comes one basis direction at a time from the plan
    of a one-direction HVP (generated source by default; with ``compile=True`` the
    forward-over-reverse numba kernel when the plan is all float64 scalar steps) as long as
    that costs less than ``chunk_size`` directions a sweep on a Python-replayed k-lane plan
    (one plan per lane count), which it uses otherwise. The first call measures which.
    ``replay=False`` records every call.

    ``argnums`` as for :func:`hessian`: the Hessian of those arguments only (an int: one
    matrix; a tuple: blocks in its order), the others data, read afresh every call (see
    :func:`~mooncake_py.prepare_gradient_cache`). By default every float argument is
    differentiated: pass ``argnums`` for data, or its blocks are computed too.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> f = lambda x: np.sum(np.sin(x))
        >>> c = mp.prepare_hessian_cache(f, np.zeros(2))
        >>> y, g, H = mp.value_gradient_and_hessian(c, f, np.zeros(2))
        >>> H
        array([[-0., -0.],
               [-0., -0.]])
        >>> def loop(x):                   # a scalar loop: compiled per direction
        ...     s = 0.0
        ...     for i in range(1, x.size):
        ...         s = s + x[i] * x[i - 1]
        ...     return s
        >>> c = mp.prepare_hessian_cache(loop, np.ones(3), compile=True)
        >>> mp.value_gradient_and_hessian(c, loop, np.ones(3))[2]
        array([[0., 1., 0.],
               [1., 0., 1.],
               [0., 1., 0.]])
        >>> nll = lambda w, X, y: np.sum(np.logaddexp(0.0, -y * (X @ w)))
        >>> X, y = np.eye(3, 2), np.ones(3)
        >>> c = mp.prepare_hessian_cache(nll, np.zeros(2), X, y, argnums=0)
        >>> value, g, H = mp.value_gradient_and_hessian(c, nll, np.zeros(2), X, y)
        >>> H                                          # (2, 2): no blocks for X and y
        array([[0.25, 0.  ],
               [0.  , 0.25]])
    """
    return HessianCache(f, args, chunk_size, replay, compile, argnums)


def value_gradient_and_hessian(cache: HessianCache, f: Callable[..., Any],
                               *args: Any) -> tuple[Any, Any, Any]:
    """``(f(*args), ∇f, ∇²f)``; with several float arguments the gradient is a tuple and the
    Hessian a tuple of tuples of blocks, as :func:`hessian` gives for a tuple ``argnums``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> f = lambda x: x[0] ** 2 * x[1]
        >>> c = mp.prepare_hessian_cache(f, np.ones(2))
        >>> y, g, H = mp.value_gradient_and_hessian(c, f, np.array([1.0, 2.0]))
        >>> H
        array([[4., 2.],
               [2., 0.]])
    """
    expect_cache(cache, "hessian", "value_gradient_and_hessian")
    spec = cache.spec
    spec.check(f, args)
    rs = cache.replay_state()
    if rs is not None and current_config().debug_mode:
        return debug_checked(cache, f, lambda r: _hessian_call(cache, f, args, r),
                             lambda: _hessian_call(cache, f, args, None),
                             ("value", "gradient", "Hessian"))
    return _hessian_call(cache, f, args, rs)


def _hessian_call(cache, f, args, rs):
    spec = cache.spec
    nums = spec.float_args
    out = None
    if rs is not None and rs.mode == "columns":
        out = _hessian_columns(f, nums, args, rs, cache.chunk_size)
    if out is None:
        out = _hessian_rows(f, nums, args, {}, cache.chunk_size, rs)
        if rs is not None and rs.mode is None:
            rs.foresee(out[4][-1], _chunk(int(out[4][-1]), 8, cache.chunk_size), out[3])
    value, gs, H, leaves, offsets = out
    argnums = getattr(spec, "argnums", None)
    if argnums is not None:
        single = not isinstance(argnums, (tuple, list))
        blocks = _hessian_blocks(args, spec.order, H, leaves, offsets, single)
        return value, spec.arrange(gs, len(args)), blocks
    single = len(args) == 1
    blocks = _hessian_blocks(args, nums, H, leaves, offsets, single)
    if single:
        return value, gs[0], blocks
    return value, _full(len(args), nums, gs), blocks


def _hessian_columns(f, nums, args, rs, chunk_size):
    """What :func:`_hessian_rows` returns, the Hessian made one basis direction at a time by
    the HVP replayer ``rs.columns``; None (and ``rs.mode`` set to "lanes", for good) when the
    lanes should serve this call. Row j is H·eⱼ (H is symmetric), as a lane gives it."""
    leaves = _float_leaves(args, nums)
    if not leaves or not all(type(x) is np.ndarray and x.dtype == _F64_DT for _, _, x in leaves):
        rs.mode = "lanes"  # (the HVP replay plans float64 NumPy leaves only)
        return None
    sizes = [x.size for _, _, x in leaves]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    n = int(offsets[-1])
    k = _chunk(n, 8, chunk_size)
    if rs.columns_pay(n, k) is False and rs.columns.plan is not None:
        rs.mode = "lanes"  # (the plan changed, or the replayer gave up)
        return None
    one = len(args) == 1 and len(leaves) == 1 and nums == (0,) and type(args[0]) is np.ndarray
    H = np.empty((n, n))
    value = grads = None
    for j in range(n):
        if j == 2 and rs.columns_pay(n, k) is False:
            rs.mode = "lanes"  # (the plan the first two directions made does not pay)
            return None
        if one:
            e = np.zeros(args[0].shape)
            e.flat[j] = 1.0
            y, g, hv = _replayed_hvp_one(rs.columns, f, args[0], e)
            H[j] = 0.0 if hv is None else hv.ravel()
            gs = (g,)
        else:
            y, gs, hvs = _value_gradient_hvp(f, nums, args, _direction(args, nums, leaves,
                                                                       offsets, j),
                                             False, {}, replayer=rs.columns)
            H[j] = np.concatenate([np.ravel(t) for hv in hvs for t in flatten(hv)[0]
                                   if t is not None])
        if j == 0:
            value, grads = y, gs
    if rs.columns_pay(n, k) is False:
        rs.mode = "lanes"
    return value, grads, H, leaves, offsets


def _direction(args, nums, leaves, offsets, j):
    """The basis direction eⱼ over the float leaves of ``nums``, one direction per argument in
    ``nums`` (containers mirrored, None for their non-float leaves)."""
    vs = []
    for i in nums:
        arg_leaves, tree = flatten(args[i])
        tl = [None] * len(arg_leaves)
        for (ai, jl, leaf), a in zip(leaves, offsets[:-1]):
            if ai == i:
                e = np.zeros(leaf.shape)
                if a <= j < a + leaf.size:
                    e.flat[j - a] = 1.0
                tl[jl] = e
        vs.append(tree.unflatten(tl))
    return tuple(vs)
