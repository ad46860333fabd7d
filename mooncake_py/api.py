"""First-order public API: grad, value_and_grad, vjp."""
import functools
import gc
import threading
from typing import Any, Callable, Sequence

import numpy as np

from . import array_module as am
from .array_ops import has_buffer
from .dual.dual_array import DualArray
from .errors import ArgumentError, NonDifferentiableInputError, OutputTypeError, TangentError
from .pytree import flatten
from .tape import Tape, TrackedArray
from .arguments import describe_arg
from .dispatch import WRAPPER_TYPES


class _GCPause:
    """The context manager of :func:`gc_paused`: a count of the recordings in progress, in all
    threads, under a lock. The collector is disabled by the first and enabled again by the last
    (if it was enabled before the first), so concurrent gradients never leave it disabled."""
    __slots__ = ()
    _lock = threading.Lock()
    _active = 0
    _was_enabled = False

    def __enter__(self):
        cls = _GCPause
        with cls._lock:
            if cls._active == 0:
                cls._was_enabled = gc.isenabled()
                if cls._was_enabled:
                    gc.disable()
            cls._active += 1
        return self

    def __exit__(self, *exc):
        cls = _GCPause
        with cls._lock:
            cls._active -= 1
            if cls._active == 0 and cls._was_enabled:
                gc.enable()
        return False


_GC_PAUSE = _GCPause()


def gc_paused():
    """Pause the cyclic garbage collector while a tape is recorded and swept.

    Every node stays alive until the sweep, so collections during recording find nothing to
    free, yet their cost grows with the tape (about a quarter of the per-op time on long tapes).
    Safe under threads: the collector runs again once no recording is in progress in any.

    Example:
        >>> import gc
        >>> with gc_paused():
        ...     gc.isenabled()
        False
        >>> gc.isenabled()
        True
    """
    return _GC_PAUSE


def _fname(f):
    return getattr(f, "__qualname__", None) or getattr(f, "__name__", None) or repr(f)


def is_float_leaf(x):
    """Whether a leaf is differentiable: a floating or complex array/number (or a wrapped one)."""
    if type(x) is float or type(x) is complex:
        return True
    dt = getattr(x, "dtype", None)
    return dt is not None and getattr(dt, "kind", None) in ("f", "c")


def _is_foreign_array(x):
    """An array of another library (a torch.Tensor): it converts to NumPy (``__array__`` or
    ``__dlpack__``) but its dtype is no NumPy dtype, so NumPy's protocols on it lead nowhere we
    can record. (Array-likes with NumPy dtypes, a pandas Series, stay ordinary constants.)"""
    if isinstance(x, (np.ndarray, np.generic, type)) or type(x) in WRAPPER_TYPES:
        return False
    if not (hasattr(x, "__array__") or hasattr(x, "__dlpack__")):
        return False
    return not isinstance(getattr(x, "dtype", None), np.dtype) and not am.is_device(x)


def _leaf_error(f, argnum, x, path=""):
    dt = getattr(x, "dtype", None)
    what = f"{type(x).__name__}" + (f" with dtype {dt}" if dt is not None else "")
    hint = ("convert it to floating point (x.astype(float) or 2.0 instead of 2), or leave it "
            "out of argnums so it is treated as a constant")
    if _is_foreign_array(x):
        what = f"{type(x).__module__}.{type(x).__name__}" + (f" of dtype {dt}" if dt else "")
        hint = ("mooncake_py differentiates NumPy code on NumPy (or CuPy) arrays: pass "
                "np.asarray(x) (for a torch tensor, x.detach().cpu().numpy()) instead, or leave "
                "it out of argnums so it is treated as a constant")
    return NonDifferentiableInputError(
        f"argument {argnum}{path} of {_fname(f)} is a {what}, which has no derivative; {hint}.")


class _Tracked:
    """The tracked leaves of one call: which argument/leaf each belongs to.

    ``f`` may write into its array arguments: the tracked handles are the user's arrays (no
    copy), so after the call they hold what ``f`` wrote, as with plain NumPy, while
    ``entry`` keeps a handle on each argument's value at entry, with respect to which the
    gradients are taken. A dual argument (forward-over-reverse) gets its own copy of its
    tangent, so that writes move the tangent of the tracked value, never the caller's
    direction ``v``.
    """

    def __init__(self, f, args, argnums, tape):
        self.args = list(args)
        self.slots = []  # (argnum, treedef, [leaf or tracked], [index of tracked leaf or None])
        self.tracked = []
        self.entry = []
        for i in argnums:
            leaves, tree = flatten(args[i])
            if tree.kind == "leaf" and not is_float_leaf(leaves[0]):
                raise _leaf_error(f, i, leaves[0])
            new, where = [], []
            for j, leaf in enumerate(leaves):
                if type(leaf) is not np.ndarray:
                    check_leaf_kind(f, i, leaf, "" if tree.kind == "leaf" else f" (leaf {j})")
                if is_float_leaf(leaf):
                    where.append(len(self.tracked))
                    if type(leaf) is DualArray and has_buffer(leaf._tangent):
                        leaf = DualArray(leaf._value, np.copy(leaf._tangent), leaf._tag)
                    t = tape.track(leaf)
                    self.tracked.append(t)
                    self.entry.append(TrackedArray(t._value, tape, t._node))
                    new.append(t)
                else:
                    where.append(None)
                    new.append(leaf)
            self.slots.append((i, tree, leaves, where))
            self.args[i] = tree.unflatten(new)

    def structure(self, cotangents):
        """Per differentiated argument, its cotangents in the argument's structure."""
        out = []
        for _, tree, leaves, where in self.slots:
            out.append(tree.unflatten([None if w is None else _as_gradient(cotangents[w], leaf)
                                       for leaf, w in zip(leaves, where)]))
        return out


def _as_gradient(g, leaf):
    """A gradient with the input's dtype, never a read-only view into the tape's buffers."""
    if type(g) is TrackedArray:
        return g
    dt = getattr(leaf, "dtype", None)
    if type(leaf) is float:
        # a dual (grad inside jvp) stays one: float() of it would drop the outer derivative
        return g if type(g) is DualArray else np.float64(g)
    if isinstance(leaf, np.generic) and isinstance(g, np.ndarray) and g.shape == ():
        g = g[()]
    if isinstance(g, np.ndarray):
        if dt is not None and g.dtype != dt:
            g = g.astype(dt)
        elif not g.flags.writeable or g.base is not None:
            g = g.copy()
        return g
    if isinstance(g, np.generic) and dt is not None and g.dtype != dt:
        return g.astype(dt)
    if type(g) is not DualArray and am.is_device(g):
        if dt is not None and g.dtype != dt:
            return g.astype(dt)
        return g.copy() if getattr(g, "base", None) is not None else g
    return g


def _unwrap_out(y):
    return y._value if type(y) is TrackedArray else y


def _check_scalar(f, y):
    v = _unwrap_out(y)
    if type(v) is float:
        return
    shape = getattr(v, "shape", None)
    dt = getattr(v, "dtype", None)
    if shape is None or dt is None:
        raise OutputTypeError(
            f"grad needs {_fname(f)} to return a real floating-point scalar; it returned "
            f"{type(v).__name__}. Return a float array of shape () (e.g. np.sum(...)); for "
            "several outputs use mp.vjp or mp.jacobian.")
    if shape != () or dt.kind != "f":
        raise OutputTypeError(
            f"grad needs {_fname(f)} to return a real floating-point scalar; it returned "
            f"{describe_arg(y)} ({type(v).__name__} of dtype {dt}, shape {tuple(shape)}). "
            + ("Reduce it to a scalar (np.sum, np.mean, x @ w) or use mp.vjp / mp.jacobian for "
               "non-scalar outputs." if dt.kind == "f" else
               "A complex output has no gradient: take a real scalar of it (np.real, np.imag, "
               "np.abs(z)**2, np.angle), or use mp.vjp with a complex cotangent."
               if dt.kind == "c" else "Integer and boolean outputs have no derivative."))


def _check_cotangent_kind(f, o, s):
    """A complex cotangent pairs with a complex output only (the imaginary part would have
    nothing to pair with and be dropped)."""
    sk = "c" if type(s) is complex else getattr(getattr(s, "dtype", None), "kind", "f")
    if sk == "c" and type(o) is TrackedArray and o._value.dtype.kind != "c":
        raise TangentError(
            f"the cotangent given to the pullback of {_fname(f)} is complex but the output it "
            f"belongs to is real ({o._value.dtype}); give a real cotangent (np.real(ybar)).")


def check_leaf_kind(f, argnum, x, path=""):
    """Raise a named error for a differentiated leaf no transformation can take: an
    ``np.matrix`` (its ``*`` is a matrix product and its reductions stay 2-D, so rules written
    for arrays would give wrong shapes) or an array of another library.

    Example:
        >>> import numpy as np, warnings
        >>> check_leaf_kind(print, 0, np.ones(2))  # fine: nothing happens
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore", PendingDeprecationWarning)
        ...     m = np.matrix([[1.0]])
        >>> check_leaf_kind(print, 0, m)
        Traceback (most recent call last):
        ...
        mooncake_py.errors.NonDifferentiableInputError: argument 0 of print is an np.matrix; ...
    """
    if isinstance(x, np.matrix):
        raise NonDifferentiableInputError(
            f"argument {argnum}{path} of {_fname(f)} is an np.matrix; np.matrix is not supported "
            "(its * is a matrix product and its reductions keep two dimensions, so derivatives "
            "would get wrong shapes). Pass np.asarray(x) and write x @ y for matrix products.")
    if _is_foreign_array(x):
        raise _leaf_error(f, argnum, x, path)


def check_args(f, args, nums):
    """:func:`check_leaf_kind` on every leaf of the arguments in ``nums``.

    Example:
        >>> import numpy as np
        >>> check_args(print, ({"w": np.ones(2), "n": 3}, "not differentiated"), (0,))
    """
    for i in nums:
        leaves, tree = flatten(args[i])
        for j, leaf in enumerate(leaves):
            if type(leaf) is not np.ndarray:
                check_leaf_kind(f, i, leaf, "" if tree.kind == "leaf" else f" (leaf {j})")


def _is_index(i):
    return isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_))


def _norm_argnums(argnums, nargs, f):
    if _is_index(argnums):
        nums = (int(argnums),)
    elif isinstance(argnums, (tuple, list)) and all(map(_is_index, argnums)):
        nums = tuple(int(i) for i in argnums)
    else:
        raise ArgumentError(
            f"argnums={argnums!r} ({type(argnums).__name__}) for {_fname(f)}: argnums must be "
            "the position of a positional argument (an int such as 0) or a tuple of them "
            "(argnums=(0, 1)); keyword arguments cannot be differentiated, pass them "
            "positionally.")
    for i in nums:
        if not -nargs <= i < nargs:
            raise ArgumentError(
                f"argnums={argnums!r} but {_fname(f)} was called with {nargs} positional "
                f"argument(s), so valid positions are 0..{nargs - 1} (or negative from the "
                "end). Pass the argument positionally, or fix argnums.")
    return tuple(i % nargs for i in nums)


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
    what = f"the arguments of {_fname(f)}"
    fast = None
    if not has_aux:
        if type(argnums) is int:
            fast = (argnums,)
        elif type(argnums) is tuple and argnums and all(type(i) is int for i in argnums):
            fast = argnums

    @functools.wraps(f)
    def value_and_grad_f(*args, **kwargs):
        if fast is not None:
            if single:
                r = _fast_value_and_grad_one(f, argnums, args, kwargs)
                if r is not None:
                    return r
            else:
                r = _fast_value_and_grad(f, fast, args, kwargs)
                if r is not None:
                    return r[0], tuple(r[1])
        nums = _norm_argnums(argnums, len(args), f)
        am.module_of(*[args[i] for i in nums], what=what)
        tape = Tape()
        with gc_paused():
            try:
                tr = _Tracked(f, args, nums, tape)
                y = f(*tr.args, **kwargs)
                if has_aux:
                    y, aux = split_aux(f, y)
                _check_scalar(f, y)
                grads = tr.structure(tape.gradient(y, tr.entry))
            finally:
                tape.close()  # a tracked value f saved somewhere raises if used later
        if has_aux:
            return (_unwrap_out(y), plain(aux)), grads[0] if single else tuple(grads)
        return _unwrap_out(y), grads[0] if single else tuple(grads)
    return value_and_grad_f


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
                _check_scalar(f, y)
            g = tape.gradient(y, [entry])[0]
        finally:
            tape.close()
    return _unwrap_out(y), _as_gradient(g, x)


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
                _check_scalar(f, y)
            gs = tape.gradient(y, entry)
        finally:
            tape.close()
    return _unwrap_out(y), [_as_gradient(g, args[i]) for g, i in zip(gs, nums)]


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
    vg = value_and_grad(f, argnums, has_aux)

    if has_aux:
        @functools.wraps(f)
        def grad_aux_f(*args, **kwargs):
            (_, aux), g = vg(*args, **kwargs)
            return g, aux
        return grad_aux_f

    @functools.wraps(f)
    def grad_f(*args, **kwargs):
        return vg(*args, **kwargs)[1]
    return grad_f


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
    tr = _Tracked(f, args, nums, tape)
    y = f(*tr.args, **kwargs)
    if has_aux:
        y, aux = split_aux(f, y)
    outs, ytree = flatten(y)

    def pullback(ybar):
        seeds, stree = flatten(ybar)
        if stree != ytree:
            raise TangentError(f"the cotangent given to the pullback of {_fname(f)} has structure "
                               f"{stree!r}; the output has {ytree!r}.")
        for o, s in zip(outs, seeds):
            os_, ss = np.shape(_unwrap_out(o)), np.shape(s)
            if os_ != ss:
                raise TangentError(f"the cotangent given to the pullback of {_fname(f)} has shape "
                                   f"{ss}; the output it belongs to has shape {os_}.")
            _check_cotangent_kind(f, o, s)
        tape.reopen()
        try:
            cots = tr.structure(tape.gradient(outs, tr.entry, seeds=seeds))
        finally:
            tape.close()
        full = [None] * len(args)
        for (i, *_), c in zip(tr.slots, cots):
            full[i] = c
        return tuple(full)
    tape.close()  # recording is over: only the pullback's sweep may use the tape again
    if has_aux:
        return ytree.unflatten([_unwrap_out(o) for o in outs]), pullback, plain(aux)
    return ytree.unflatten([_unwrap_out(o) for o in outs]), pullback


def split_aux(f, out):
    """``(value, aux)`` from the output of a function called with ``has_aux=True``."""
    if type(out) is not tuple or len(out) != 2:
        raise OutputTypeError(
            f"has_aux=True needs {_fname(f)} to return a pair (value, aux); it returned "
            f"{describe_arg(out)}. Return `value, aux` (a 2-tuple), or drop has_aux=True.")
    return out


def plain(tree):
    """``tree`` with every tracked or dual leaf replaced by its plain primal value."""
    leaves, treedef = flatten(tree)
    out = []
    for leaf in leaves:
        while type(leaf) is TrackedArray or type(leaf) is DualArray:
            leaf = leaf._value
        out.append(leaf)
    return treedef.unflatten(out)
