"""Forward-mode calls: arguments made duals (:func:`seed`), ``f`` run on them
(:func:`jvp_seeded`), and each output read back as (primal, tangent) (:func:`result`).

Shared by ``mp.jvp`` and the derivative caches' replay, which seed and read a call the same way.
"""
import numpy as np

from ..core import array_module as am
from ..core.arguments import check_leaf_kind, fname, is_float_leaf, plain, split_aux
from ..core.array_ops import has_buffer
from ..core.pytree import flatten, leaf_paths
from ..errors import ArgumentError, TangentError
from .dual_array import DualArray, Tag, _as_value, _validate


def lane_count(tangents):
    for t in tangents:
        for leaf in flatten(t)[0]:
            if leaf is not None:
                if np.ndim(leaf) == 0:
                    raise TangentError(
                        "lanes=True but a tangent is a scalar; with lanes every tangent needs a "
                        "leading lane axis (shape (k,) + primal shape).")
                return np.shape(leaf)[0]
    raise TangentError("lanes=True but every tangent is None: there is no direction to push.")


def _constant_direction(x, v):
    """Whether ``v``, given as the direction of leaf ``x`` of a container, is no direction: ``x``
    is a constant (an integer, boolean or other non-float leaf, as in every transformation) and
    ``v`` is ``x`` itself or not floating point either, as ``unravel(v)`` of
    :func:`mooncake_py.ravel_pytree` gives (it keeps the tree's constant leaves). A float
    direction for such a leaf still raises: it asks for a derivative there."""
    if is_float_leaf(x):
        return False
    if v is x:
        return True
    return not is_float_leaf(v) and type(v) is not int


def seed(f, primals, tangents, lanes, borrow=False):
    """The tag and the arguments of ``f`` with every float leaf that has a tangent made a dual.

    Each dual gets a tangent of its own, so that writes ``f`` makes into its input move it and
    never the caller's direction. With ``borrow`` a NumPy direction is instead lent as a
    read-only view (no copy): for callers that run ``f`` only where nothing writes into its
    inputs and call :func:`own_tangents` on the arguments before anything that might."""
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise ArgumentError(
            f"jvp(f, primals, tangents) takes tuples of positional arguments of {fname(f)}: "
            f"jvp(f, (x,), (v,)); got {type(primals).__name__} and {type(tangents).__name__}. "
            "Wrap a single argument and its tangent in one-element tuples.")
    if len(primals) != len(tangents):
        raise TangentError(f"jvp got {len(primals)} primal(s) but {len(tangents)} tangent(s) for "
                           f"{fname(f)}; give one tangent (or None) per positional argument.")
    k = lane_count(tangents) if lanes else 0
    tag = Tag(k)
    args = []
    for i, (p, t) in enumerate(zip(primals, tangents)):
        if t is None:
            args.append(p)
            continue
        if type(p) is np.ndarray and type(t) is np.ndarray and p.dtype.kind == "f" \
                and t.dtype == p.dtype and t.shape == ((k,) + p.shape if k else p.shape):
            # (a real array and a direction that suits it, the arguments of every prepared HVP
            # call: what the general path below checks holds, so none of its flattening,
            # paths and messages is built)
            args.append(DualArray(p, lent(t) if borrow else t.copy(), tag))
            continue
        pl, ptree = flatten(p)
        tl, ttree = flatten(t)
        if ttree != ptree:
            raise TangentError(f"the tangent of argument {i} of {fname(f)} has structure "
                               f"{ttree!r}; the argument has {ptree!r}.")
        paths = leaf_paths(p)
        new = []
        for x, v, path in zip(pl, tl, paths):
            if v is None or ptree.kind != "leaf" and _constant_direction(x, v):
                new.append(x)
                continue
            if type(x) is not np.ndarray:
                check_leaf_kind(f, i, x, path)
            _validate(x, v, k, what=f"argument {i}{path} of {fname(f)}")
            am.module_of(x, v, what=f"argument {i}{path} of {fname(f)}")
            x = _as_value(x)
            v = _as_value(v, x.dtype)
            if x.dtype.kind == "c":
                tag.complex = True
            new.append(DualArray(x, lent(v) if borrow and type(v) is np.ndarray
                                 else v.copy() if has_buffer(v) else v, tag))
        args.append(ptree.unflatten(new))
    return tag, args


def lent(v):
    """A read-only view of the NumPy direction ``v``: a dual's tangent that costs no copy, and
    that nothing can write into (a write raises; :func:`own_tangents` replaces it first).

    Example:
        >>> v = np.ones(3)
        >>> w = lent(v)
        >>> w.flags.writeable, np.shares_memory(w, v)
        (False, True)
    """
    w = v.view()
    w.flags.writeable = False
    return w


def own_tangents(args):
    """Give every dual leaf of ``args`` whose tangent is a read-only NumPy array (one
    :func:`lent` to it, or a caller's read-only direction) a writeable copy of its own, as
    :func:`seed` without ``borrow`` makes them: before ``f`` runs where it may write into its
    inputs (a recording, a plan with writes).

    Example:
        >>> v = np.ones(2)
        >>> d = DualArray(np.zeros(2), lent(v), Tag(0))
        >>> own_tangents([d])
        >>> d._tangent.flags.writeable, np.shares_memory(d._tangent, v)
        (True, False)
    """
    for a in flatten(args)[0]:
        if type(a) is DualArray:
            t = a._tangent
            if type(t) is np.ndarray and not t.flags.writeable:
                a._tangent = t.copy()


def result(o, tag):
    """(primal, tangent) of one output leaf."""
    if type(o) is DualArray and o._tag is tag:
        t = o._tangent
        if type(t) is np.ndarray and not t.flags.writeable:
            t = t.copy()  # a broadcast view inside the computation: hand out an owned array
        return o._value, t
    if is_float_leaf(o):
        v = np.float64(o) if type(o) is float else o
        shape = ((tag.lanes,) if tag.lanes else ()) + tuple(np.shape(v))
        return v, am.zeros(shape, dtype=v.dtype, like=v)
    return o, None


def jvp_seeded(f, tag, args, has_aux=False):
    """The rest of :func:`jvp` once :func:`seed` has made the arguments."""
    try:
        y = f(*args)
        if has_aux:
            y, aux = split_aux(f, y)
        outs, tree = flatten(y)
        pairs = [result(o, tag) for o in outs]
    finally:
        tag.close()  # a dual f saved somewhere raises if used later
    if has_aux:
        return (tree.unflatten([p for p, _ in pairs]), tree.unflatten([t for _, t in pairs]),
                plain(aux))
    return tree.unflatten([p for p, _ in pairs]), tree.unflatten([t for _, t in pairs])
