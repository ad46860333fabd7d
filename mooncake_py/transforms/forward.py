"""Forward-mode public API: jvp, prepared derivative caches, and jacobian (forward or reverse)."""
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..config import current_config
from ..core import fp_warnings
from ..core.arguments import (
    check_args,
    check_list_argument,
    fname,
    is_float_leaf,
    norm_argnums,
)
from ..core.pytree import flatten, ravel_pytree
from ..dual.seeding import jvp_seeded, lane_count, seed
from ..errors import (
    NonDifferentiableInputError,
    OutputTypeError,
    PreparedCacheSpecError,
    TangentError,
)
from ..replay.forward import DerivativeReplayer
from .caches import CacheSpec, ReplayingCache, debug_checked, expect_cache
from .reverse import vjp
from .transformed import transformed


def jvp(f: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any], *,
        lanes: bool = False, has_aux: bool = False) -> tuple[Any, ...]:
    """``(f(*primals), J·tangents)``: the value of ``f`` and its directional derivative.

    ``primals`` and ``tangents`` are tuples with one entry per positional argument of ``f``;
    arguments may be arrays, floats or nested tuples/lists/dicts of them, each tangent mirroring
    its primal (``None`` for a constant argument or leaf). Tangents must have their primal's
    shape and dtype. With ``lanes=True`` each tangent carries k directions on a leading axis
    (shape ``(k,) + primal.shape``) and ``ẏ`` gets the same leading axis: k Jacobian-vector
    products in one forward sweep. The outputs may be nested containers too; non-float outputs
    get tangent ``None``. With ``has_aux=True``, ``f`` returns ``(y, aux)``; only ``y`` is
    differentiated and the call returns ``(y, ẏ, aux)``, ``aux`` unwrapped to plain arrays.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> y, dy = mp.jvp(lambda x: np.sin(x) * 2.0, (np.array([0.0, 1.0]),), (np.ones(2),))
        >>> dy
        array([2.        , 1.08060461])
        >>> y, dY = mp.jvp(np.exp, (np.zeros(2),), (np.eye(2),), lanes=True)
        >>> dY
        array([[1., 0.],
               [0., 1.]])
    """
    tag, args = seed(f, primals, tangents, lanes)
    # NumPy warnings raised by frules name the user's line inside f, not the library's
    token = fp_warnings.enter()
    try:
        return jvp_seeded(f, tag, args, has_aux)
    except (TypeError, AttributeError) as e:
        check_list_argument(f, primals, [i for i, t in enumerate(tangents)
                                               if t is not None], e)
        raise
    finally:
        fp_warnings.leave(token)


# --- prepared caches --------------------------------------------------------------------------
class DerivativeCache(ReplayingCache):
    """What :func:`prepare_derivative_cache` recorded: the function, the arguments' structure,
    shapes and dtypes, the lane count and the replay state. Use it with
    :func:`value_and_derivative`. Pickles when ``f`` does (the replay plan is not stored: the
    first call after loading records again)."""

    def __init__(self, f, args, lanes, replay=True, argnums=None):
        self.spec, self.lanes = CacheSpec("derivative", f, args, argnums), lanes
        self._start_replay(replay)

    def _new_replay(self):
        return DerivativeReplayer()

    def __repr__(self):
        return (f"DerivativeCache({fname(self.spec.f)}, {len(self.spec.trees)} argument(s), "
                f"lanes={self.lanes})")


def prepare_derivative_cache(f: Callable[..., Any], *args: Any, lanes: int | None = None,
                             replay: bool = True,
                             argnums: int | Sequence[int] | None = None) -> DerivativeCache:
    """Prepare repeated forward-mode derivatives of ``f`` at arguments like ``args``.

    Records the arguments' structure, shapes and dtypes (checked on every call of
    :func:`value_and_derivative`) and runs ``f`` once, so that every fused kernel it needs is
    compiled (or loaded from numba's disk cache) now rather than on the first real call.
    ``lanes=k`` prepares for tangents carrying k directions each.

    With ``replay=True`` (the default) that run records ``f``, and later calls push their
    tangents through the recorded operations' forward rules without running ``f``, as long as
    the guards of :func:`~mooncake_py.prepare_gradient_cache` hold (branches on the inputs'
    values and the constant arguments as recorded; else ``f`` is recorded again). See
    mooncake_py/replay/forward.py for what is replayed. ``replay=False`` runs ``f`` on
    duals every call.

    ``argnums`` (an int or a tuple) names the arguments that get tangents, as for
    :func:`~mooncake_py.prepare_gradient_cache`: :func:`value_and_derivative` then takes the
    one tangent (an int) or a tuple of them in its order, and the other arguments are data,
    read afresh every call.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> f = lambda x: np.sum(np.tanh(x))
        >>> c = mp.prepare_derivative_cache(f, np.zeros(3))
        >>> y, dy = mp.value_and_derivative(c, f, np.ones(3), np.zeros(3))   # tangent, then x
        >>> float(dy)
        3.0
    """
    k = int(lanes) if lanes else 0
    cache = DerivativeCache(f, args, k, replay, argnums)
    nums = cache.spec.float_args
    zeros = tuple(_zero_tangent(a, k) if i in nums else None for i, a in enumerate(args))
    _derivative(cache, f, args, zeros)
    return cache


def _derivative(cache, f, primals, tangents):
    rp = cache.replay_state()

    def fresh():
        return jvp(f, tuple(primals), tuple(tangents), lanes=bool(cache.lanes))
    if rp is None:
        return fresh()
    if current_config().debug_mode:
        return debug_checked(cache, f, lambda r: r.call(f, tuple(primals), tuple(tangents),
                                                        cache.lanes),
                             fresh, ("value", "derivative"))
    return rp.call(f, tuple(primals), tuple(tangents), cache.lanes)


def _zero_tangent(a, k):
    leaves, tree = flatten(a)
    out = []
    for l in leaves:
        if is_float_leaf(l):
            v = np.float64(l) if type(l) is float else l
            out.append(np.zeros(((k,) if k else ()) + tuple(np.shape(v)), dtype=v.dtype))
        else:
            out.append(None)
    return tree.unflatten(out)


def value_and_derivative(cache: DerivativeCache, f: Callable[..., Any],
                         *tangents_and_args: Any) -> tuple[Any, Any]:
    """``(y, ẏ)``: ``value_and_derivative(cache, f, tangents, *args)``.

    ``tangents`` is, like ``v`` of :func:`~mooncake_py.value_and_hvp`, the direction of the one
    argument, or with several arguments a tuple with one tangent (or None) per argument. The
    earlier form ``value_and_derivative(cache, f, *(primal, tangent) pairs)`` is still accepted
    (it has one item per argument, the new form one more).

    Checks on every call that ``f`` is the function the cache was prepared for and that each
    primal has the recorded structure, shape and dtype; raises
    :class:`~mooncake_py.errors.PreparedCacheSpecError` saying what differs.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> f = lambda x: np.sin(x) * x
        >>> c = mp.prepare_derivative_cache(f, np.zeros(2))
        >>> y, dy = mp.value_and_derivative(c, f, np.ones(2), np.array([0.0, np.pi]))
        >>> np.round(dy, 12)
        array([ 0.        , -3.14159265])
    """
    expect_cache(cache, "derivative", "value_and_derivative")
    n = len(cache.spec.trees)
    argnums = getattr(cache.spec, "argnums", None)
    if argnums is not None:  # (tangents for the argnums only: the one form)
        if len(tangents_and_args) != n + 1:
            raise TangentError(
                f"value_and_derivative of {fname(f)} takes (cache, f, tangents, *args): "
                f"{n} argument(s) after the tangents, got {len(tangents_and_args) - 1}.")
        t, *primals = tangents_and_args
        given = _split_tangents(f, argnums, t)
        tangents = [None] * n
        for i, ti in zip(cache.spec.order, given):
            tangents[i] = ti
        cache.spec.check(f, primals)
        if cache.lanes:
            _check_lanes(cache, f, tangents)
        return _derivative(cache, f, primals, tangents)
    if len(tangents_and_args) == n + 1:
        t, *primals = tangents_and_args
        if n == 1:
            tangents = [t]
        elif isinstance(t, (tuple, list)) and len(t) == n:
            tangents = list(t)
        else:
            raise TangentError(
                f"value_and_derivative of {fname(f)}: with {n} arguments the tangents must be "
                f"a tuple of {n} (None for a constant argument); got {type(t).__name__}.")
        cache.spec.check(f, primals)
        if cache.lanes:
            _check_lanes(cache, f, tangents)
        return _derivative(cache, f, primals, tangents)
    pairs = tangents_and_args
    primals, tangents = [], []
    for i, pair in enumerate(pairs):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(
                f"value_and_derivative takes (cache, f, tangents, *args), or the earlier form "
                f"with one (primal, tangent) pair per argument; item {i} after f is a "
                f"{type(pair).__name__}.")
        primals.append(pair[0])
        tangents.append(pair[1])
    cache.spec.check(f, primals)
    if cache.lanes:
        _check_lanes(cache, f, tangents)
    return _derivative(cache, f, primals, tangents)


def _split_tangents(f, argnums, t):
    if not isinstance(argnums, (tuple, list)):
        return (t,)
    if not isinstance(t, (tuple, list)) or len(t) != len(argnums):
        raise TangentError(
            f"value_and_derivative of {fname(f)} with argnums={argnums!r}: the tangents must "
            f"be a tuple with one tangent per position of argnums; got {type(t).__name__}.")
    return tuple(t)


def _check_lanes(cache, f, tangents):
    k = lane_count(tangents)
    if k != cache.lanes:
        raise PreparedCacheSpecError(
            f"value_and_derivative: the tangents carry {k} lanes; the cache for {fname(f)} "
            f"was prepared with lanes={cache.lanes}.")


# --- jacobian ---------------------------------------------------------------------------------
def jacobian(f: Callable[..., Any], mode: str = "auto", chunk_size: int | None = None,
             argnums: int | Sequence[int] = 0) -> Callable[..., Any]:
    """The Jacobian of ``f`` with respect to its argument(s) ``argnums``.

    ``mp.jacobian(f)(x)`` has shape ``y.shape + x.shape``. ``mode="forward"`` pushes the basis
    directions through ``f`` in lanes, ``chunk_size`` of them per sweep (default: the
    ``Config.chunk_size`` in force, else 32); ``mode="reverse"`` records ``f`` once and pulls
    back each output basis vector; ``"auto"`` picks forward when x has no more elements than y.

    Inputs and outputs may be containers (tuples, lists, dicts, dataclasses, registered
    classes), and ``argnums`` may be a tuple. The result nests like JAX's: the output's
    structure outside, and for each float output leaf ``yₒ`` the differentiated argument's
    structure inside (a tuple over ``argnums`` when it is a tuple), each block of shape
    ``yₒ.shape + xₗ.shape``; non-float leaves get ``None``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> mp.jacobian(lambda x: x[:2] * x[1:], mode="forward")(np.array([1.0, 2.0, 3.0]))
        array([[2., 1., 0.],
               [0., 3., 2.]])
        >>> Jx, Jw = mp.jacobian(lambda x, w: x * w, argnums=(0, 1))(np.ones(2), 3.0)
        >>> Jx, Jw
        (array([[3., 0.],
               [0., 3.]]), array([1., 1.]))
        >>> mp.jacobian(lambda x: {"s": np.sum(x), "p": np.prod(x)})(np.array([2.0, 3.0]))
        {'s': array([1., 1.]), 'p': array([3., 2.])}
    """
    if mode not in ("auto", "forward", "reverse"):
        raise ValueError(f"jacobian: mode must be 'auto', 'forward' or 'reverse', not {mode!r}.")

    @functools.wraps(f)
    def jacobian_f(*args):
        check_args(f, args, norm_argnums(argnums, len(args), f))  # named errors, early
        if not isinstance(argnums, int) or not is_float_leaf(args[argnums % len(args)] if args
                                                             else None):
            return _jacobian_tree(f, args, argnums, mode, chunk_size)
        i = argnums % len(args) if args else 0
        x = args[i]
        if not is_float_leaf(x):
            raise NonDifferentiableInputError(
                f"jacobian of {fname(f)}: argument {argnums} is a {type(x).__name__}"
                f"{'' if getattr(x, 'dtype', None) is None else f' of dtype {x.dtype}'}; it must "
                "be one floating-point array or float (for containers use mp.jvp or mp.vjp).")
        x = np.float64(x) if type(x) is float else x
        if getattr(x, "dtype", None) is not None and x.dtype.kind == "c":
            raise NonDifferentiableInputError(
                f"jacobian of {fname(f)}: argument {argnums} is complex; a Jacobian over C "
                "treated as R² has no (y.shape + x.shape) layout unless f is holomorphic. Use "
                "mp.jvp with complex tangents (J·v) or mp.vjp with complex cotangents (the adjoint "
                "for Re Σ conj(a)·b), or differentiate with respect to (np.real(z), np.imag(z)).")

        def fx(xx):
            return f(*args[:i], xx, *args[i + 1:])
        m = mode
        try:
            if m == "auto":
                y = _check_output(f, fx(x))
                m = "forward" if np.size(x) <= np.size(y) else "reverse"
            if m == "forward":
                return _jac_forward(f, fx, x, chunk_size)
            return _jac_reverse(f, fx, x)
        except OutputTypeError:
            # a container output (or none with floats): the general path sorts out which
            return _jacobian_tree(f, args, argnums, mode, chunk_size)
    return transformed(jacobian_f, jacobian, f, mode, chunk_size, argnums)


def _jacobian_tree(f, args, argnums, mode, chunk_size):
    """The Jacobian for container arguments/outputs or several ``argnums``: the differentiated
    float leaves are raveled into one vector, the float outputs into another, and the flat
    Jacobian is cut into blocks in the containers' structures."""
    nums = norm_argnums(argnums, len(args), f)
    flat, unravel = ravel_pytree(tuple(args[i] for i in nums))
    if flat.size == 0 and not any(is_float_leaf(leaf) for i in nums  # empty arrays: J is empty
                                  for leaf in flatten(args[i])[0]):
        raise NonDifferentiableInputError(
            f"jacobian of {fname(f)}: argument(s) {argnums!r} hold no floating-point leaf to "
            "differentiate; make them float arrays or floats (x.astype(float), 2.0 not 2).")

    def call(v):
        full = list(args)
        for i, part in zip(nums, unravel(v)):
            full[i] = part
        return f(*full)
    outs, ytree = flatten(call(flat))
    floats = [j for j, o in enumerate(outs) if is_float_leaf(o)]
    if not floats:
        raise OutputTypeError(
            f"jacobian needs {fname(f)} to return floating-point arrays (or containers of "
            f"them); it returned {ytree!r} with no float leaf.")

    def g(v):
        o = flatten(call(v))[0]
        if len(floats) == 1:
            return np.ravel(o[floats[0]])
        return np.concatenate([np.ravel(o[j]) for j in floats])
    m = sum(int(np.size(outs[j])) for j in floats)
    if mode == "forward" or (mode == "auto" and flat.size <= m):
        J = _jac_forward(f, g, flat, chunk_size)
    else:
        J = _jac_reverse(f, g, flat)
    cols, c = [], 0  # per argument: (treedef, [(shape, start) or None per leaf])
    for i in nums:
        leaves, tree = flatten(args[i])
        spans = []
        for leaf in leaves:
            if is_float_leaf(leaf):
                spans.append((tuple(np.shape(leaf)), c))
                c += int(np.size(leaf))
            else:
                spans.append(None)
        cols.append((tree, spans))
    result, r = [None] * len(outs), 0
    for j in floats:
        yshape = tuple(np.shape(outs[j]))
        rows = J[r:r + int(np.size(outs[j]))]
        r += rows.shape[0]
        per_arg = [tree.unflatten([None if s is None else
                                   rows[:, s[1]:s[1] + int(np.prod(s[0]))].reshape(yshape + s[0])
                                   for s in spans]) for tree, spans in cols]
        result[j] = per_arg[0] if isinstance(argnums, int) else tuple(per_arg)
    return ytree.unflatten(result)


def _check_output(f, y):
    if not is_float_leaf(y):
        raise OutputTypeError(
            f"jacobian needs {fname(f)} to return one floating-point array; it returned "
            f"{type(y).__name__}. For several outputs, take the Jacobian of each, or use mp.jvp / "
            "mp.vjp.")
    return y


def _jac_forward(f, fx, x, chunk_size):
    n = int(np.size(x))
    if n == 0:  # no direction to push: the Jacobian is empty, shaped y.shape + (…, 0, …)
        y = _check_output(f, fx(x))
        return np.zeros(tuple(np.shape(y)) + tuple(np.shape(x)),
                        dtype=np.result_type(getattr(y, "dtype", float), x.dtype))
    c = chunk_size or current_config().chunk_size or 32
    c = max(1, min(int(c), n))
    cols, y = [], None
    eye = np.eye(n, dtype=x.dtype)
    for j0 in range(0, n, c):
        basis = eye[j0:j0 + c].reshape((-1,) + tuple(np.shape(x)))
        y, dy = jvp(fx, (x,), (basis,), lanes=True)
        _check_output(f, y)
        cols.append(np.reshape(dy, (basis.shape[0], -1)))
    J = np.concatenate(cols, axis=0).T
    return J.reshape(tuple(np.shape(y)) + tuple(np.shape(x)))


def _jac_reverse(f, fx, x):
    y, pullback = vjp(fx, x)
    _check_output(f, y)
    m = int(np.size(y))
    rows = []
    for r in range(m):
        e = np.zeros(m, dtype=y.dtype)
        e[r] = 1
        g, = pullback(e.reshape(np.shape(y)) if np.ndim(y) else e[0])
        if e.dtype.kind == "c":  # real x: Re and Im of row r pull back from e_r and i·e_r
            gi, = pullback(1j * e.reshape(np.shape(y)) if np.ndim(y) else 1j * e[0])
            g = g + 1j * gi
        rows.append(np.reshape(g, -1))
    J = np.stack(rows) if rows else np.zeros((0, int(np.size(x))), dtype=x.dtype)
    return J.reshape(tuple(np.shape(y)) + tuple(np.shape(x)))
