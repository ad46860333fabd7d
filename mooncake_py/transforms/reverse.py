"""First-order transforms: grad, value_and_grad, vjp."""
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core import array_module as am
from ..core import fp_warnings
from ..core.arguments import (
    check_args,
    check_list_argument,
    fname,
    gc_paused,
    is_float_leaf,
    norm_argnums,
    plain,
    split_aux,
)
from ..core.pytree import flatten
from ..mixed.tracking import Tracked, as_gradient, check_scalar, check_seeds, unwrap_out
from ..tape import Tape, TrackedArray
from .transformed import SecondOf, inner, transformed


def value_and_grad(f: Callable[..., Any], argnums: int | Sequence[int] = 0,
                   has_aux: bool = False) -> Callable[..., Any]:
    """``f``'s value and gradient with respect to the positional argument(s) ``argnums``.

    Arguments may be float arrays, Python floats, or nested tuples/lists/dicts of them; each
    gradient has its argument's structure and dtype (integer leaves inside containers are
    constants and get ``None``). ``f`` must return a real floating-point scalar.

    With ``has_aux=True``, ``f`` returns ``(value, aux)``: only ``value`` is differentiated, and
    the call returns ``((value, aux), gradient)`` (as JAX does), with every tracked value inside
    ``aux`` unwrapped to a plain array.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> v, g = mp.value_and_grad(lambda x: np.sum(x ** 2))(np.array([1.0, 2.0]))
        >>> float(v), g
        (5.0, array([2., 4.]))
        >>> (v, aux), g = mp.value_and_grad(lambda x: (np.sum(x ** 2), x * 10),
        ...                                 has_aux=True)(np.array([1.0, 2.0]))
        >>> aux
        array([10., 20.])
    """
    single = isinstance(argnums, int)
    what = f"the arguments of {fname(f)}"
    fast = None
    if not has_aux:
        if type(argnums) is int:
            fast = (argnums,)
        elif type(argnums) is tuple and argnums and all(type(i) is int for i in argnums):
            fast = argnums

    @functools.wraps(f)
    def value_and_grad_f(*args, **kwargs):
        # NumPy warnings raised by rules and the sweep name the user's line, not the library's
        # (fp_warnings.enter written out: this is the fixed cost of every gradient)
        seen, ours = fp_warnings.cache
        token = fp_warnings.switch(ours) if fp_warnings.get() is seen and ours is not None \
            else fp_warnings.enter()
        try:
            if fast is not None:
                if single:
                    r = _fast_value_and_grad_one(f, argnums, args, kwargs)
                    if r is not None:
                        return r
                else:
                    r = _fast_value_and_grad(f, fast, args, kwargs)
                    if r is not None:
                        return r[0], tuple(r[1])
            nums = norm_argnums(argnums, len(args), f)
            am.module_of(*[args[i] for i in nums], what=what)
            tape = Tape()
            with gc_paused():
                try:
                    tr = Tracked(f, args, nums, tape)
                    y = f(*tr.args, **kwargs)
                    if has_aux:
                        y, aux = split_aux(f, y)
                    check_scalar(f, y)
                    grads = tr.structure(tape.gradient(y, tr.entry))
                except (TypeError, AttributeError) as e:
                    check_list_argument(f, args, nums, e)
                    raise
                finally:
                    tape.close()  # a tracked value f saved somewhere raises if used later
        finally:
            if token is not None:
                fp_warnings.reset(token)
        if has_aux:
            return (unwrap_out(y), plain(aux)), grads[0] if single else tuple(grads)
        return unwrap_out(y), grads[0] if single else tuple(grads)
    return transformed(value_and_grad_f, value_and_grad, f, argnums, has_aux)


_FAST_LEAVES = (np.ndarray, np.float64, float)


def _fast_value_and_grad_one(f, argnum, args, kwargs):
    """:func:`_fast_value_and_grad` for one int ``argnum``, written out: ``grad(f)(x)`` is the
    call whose per-call cost matters most (``(value, gradient)`` or None)."""
    n = len(args)
    if not -n <= argnum < n:
        return None
    i = argnum % n
    x = args[i]
    tx = type(x)
    if tx not in _FAST_LEAVES or (tx is np.ndarray and x.dtype.type is not np.float64):
        return None
    tape = Tape()
    with gc_paused():
        try:
            t = tape._new(x, None, None) if tx is np.ndarray else tape.track(x)
            entry = TrackedArray(t._value, tape, t._node)
            y = f(*args[:i], t, *args[i + 1:], **kwargs)
            v = y._value if type(y) is TrackedArray else y
            if type(v) is not np.float64 and type(v) is not float:
                check_scalar(f, y)
            g = tape.gradient(y, [entry])[0]
        finally:
            tape.close()
    return unwrap_out(y), as_gradient(g, x)


def _fast_value_and_grad(f, argnums, args, kwargs):
    """``(value, [gradient per argnum])`` for the common call: float64 ndarrays (or floats)
    differentiated, each position once, and a float64 scalar returned, without the general
    path's pytree, argnums and output handling: the same steps, each on the leaves it would
    have found. None when the call is not of that kind (then the general path runs, and raises
    where it should)."""
    n = len(args)
    for i in argnums:
        if not -n <= i < n:
            return None
        x = args[i]
        tx = type(x)
        if tx not in _FAST_LEAVES or (tx is np.ndarray and x.dtype.type is not np.float64):
            return None
    if len(argnums) == 1:
        nums = (argnums[0] % n,)
    else:
        nums = tuple(i % n for i in argnums)
        if len(set(nums)) != len(nums):
            return None
    tape = Tape()
    call = list(args)
    entry = []
    with gc_paused():
        try:
            for i in nums:
                x = args[i]
                t = tape._new(x, None, None) if type(x) is np.ndarray else tape.track(x)
                entry.append(TrackedArray(t._value, tape, t._node))
                call[i] = t
            y = f(*call, **kwargs)
            v = y._value if type(y) is TrackedArray else y
            if type(v) is not np.float64 and type(v) is not float:
                check_scalar(f, y)
            gs = tape.gradient(y, entry)
        finally:
            tape.close()
    return unwrap_out(y), [as_gradient(g, args[i]) for g, i in zip(gs, nums)]


def grad(f: Callable[..., Any], argnums: int | Sequence[int] = 0,
         has_aux: bool = False) -> Callable[..., Any]:
    """The gradient of a scalar function ``f``: ``mp.grad(f)(x)``. See :func:`value_and_grad`.

    With ``has_aux=True``, ``f`` returns ``(value, aux)`` and the call returns
    ``(gradient, aux)``.

    Complex arguments (C treated as R², see docs/complex.md): the gradient with respect to a
    complex ``z`` is ``∂f/∂Re z + i·∂f/∂Im z``, complex of ``z``'s dtype, so that
    ``z -= lr * grad`` descends (PyTorch's convention; JAX returns the complex conjugate).
    ``f`` itself must be real-valued: take ``np.real``, ``np.abs``, ... of a complex result.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> mp.grad(lambda x: np.sum(np.sin(x)))(np.zeros(2))
        array([1., 1.])
        >>> mp.grad(lambda z: np.abs(z) ** 2)(np.complex128(3 + 4j))
        np.complex128(6+8j)
        >>> mp.grad(lambda x: (np.sum(x ** 2), "note"), has_aux=True)(np.ones(2))
        (array([2., 2.]), 'note')
    """
    vg = inner(value_and_grad(f, argnums, has_aux))

    if has_aux:
        def grad_aux_f(*args, **kwargs):
            (_, aux), g = vg(*args, **kwargs)
            return g, aux
        return transformed(grad_aux_f, grad, f, argnums, has_aux)

    return SecondOf(vg, grad, (f, argnums, has_aux), f)  # (vg(*args)[1], called directly)


def vjp(f: Callable[..., Any], *args: Any, has_aux: bool = False,
        **kwargs: Any) -> tuple[Any, ...]:
    """Run ``f(*args)`` recording it; return ``(y, pullback)`` with ``pullback(ȳ)`` giving one
    cotangent per argument (``None`` for non-float arguments), each shaped like its argument.

    ``y`` may be an array or a nested tuple/list/dict of arrays; ``ȳ`` mirrors it. The pullback
    may be called several times. With ``has_aux=True``, ``f`` returns ``(y, aux)``; only ``y``
    is differentiated and the call returns ``(y, pullback, aux)``, with ``aux`` unwrapped to
    plain arrays.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> y, pb = mp.vjp(lambda x, w: x * w, np.array([1.0, 2.0]), 3.0)
        >>> pb(np.ones(2))
        (array([3., 3.]), np.float64(3.0))
    """
    tape = Tape()
    check_args(f, args, range(len(args)))
    nums = tuple(i for i in range(len(args)) if any(map(is_float_leaf, flatten(args[i])[0])))
    tr = Tracked(f, args, nums, tape)
    token = fp_warnings.enter()
    try:
        y = f(*tr.args, **kwargs)
    except (TypeError, AttributeError) as e:
        check_list_argument(f, args, nums, e)
        raise
    finally:
        fp_warnings.leave(token)
    if has_aux:
        y, aux = split_aux(f, y)
    outs, ytree = flatten(y)

    def pullback(ybar):
        seeds, stree = flatten(ybar)
        check_seeds(f, outs, ytree, seeds, stree)
        tape.reopen()
        token = fp_warnings.enter()
        try:
            cots = tr.structure(tape.gradient(outs, tr.entry, seeds=seeds))
        finally:
            fp_warnings.leave(token)
            tape.close()
        full = [None] * len(args)
        for (i, *_), c in zip(tr.slots, cots):
            full[i] = c
        return tuple(full)
    tape.close()  # recording is over: only the pullback's sweep may use the tape again
    if has_aux:
        return ytree.unflatten([unwrap_out(o) for o in outs]), pullback, plain(aux)
    return ytree.unflatten([unwrap_out(o) for o in outs]), pullback
