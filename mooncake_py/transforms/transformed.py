"""Transformed functions that pickle: ``pickle.dumps(mp.grad(loss))`` sends ``loss`` by reference.

A transform (``grad``, ``hvp``, ``jacobian``, ...) returns a :class:`Transformed`: it calls the
function the transform made, carries ``f``'s metadata (``functools.wraps``: name, docstring,
``__wrapped__``, so ``inspect.signature`` shows ``f``'s) and pickles as the transform and its
arguments, so loading it (in another process, say) makes it again. ``f`` pickles as Python
pickles functions: by module and name, so a module-level function (or any picklable callable)
works, a lambda does not.
"""
import functools
import types


class Transformed:
    """A transformed function: ``self(*args, **kwargs)`` calls ``fn``; pickling stores
    ``transform(*how)`` (the public transform and its arguments, ``f`` among them).

    Example:
        >>> import pickle, numpy as np, mooncake_py as mp
        >>> g = mp.hvp(np.sum)
        >>> type(g).__name__, g.__name__
        ('Transformed', 'sum')
        >>> pickle.loads(pickle.dumps(g))(np.ones(2), np.ones(2))
        array([0., 0.])
    """
    __slots__ = ("__dict__", "__weakref__", "_fn", "_how")

    def __init__(self, fn, transform, how, f):
        self._fn = fn
        self._how = (transform, how)
        functools.update_wrapper(self, f)

    def __call__(self, *args, **kwargs):
        return self._fn(*args, **kwargs)

    def __get__(self, obj, owner=None):
        # (as a function would: a transformed function stored on a class is a method)
        return self if obj is None else types.MethodType(self, obj)

    def __reduce__(self):
        return self._how

    def __repr__(self):
        how = self._how[0]
        name = getattr(getattr(how, "func", how), "__name__", "transform")
        return f"<{name} of {getattr(self, '__qualname__', '?')}>"


class SecondOf(Transformed):
    """A :class:`Transformed` that returns item 1 of what ``fn`` returns (``grad``: the
    gradient of ``value_and_grad``'s pair), with no function call in between.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> type(mp.grad(np.sum)).__name__
        'SecondOf'
    """
    __slots__ = ()

    def __call__(self, *args, **kwargs):
        return self._fn(*args, **kwargs)[1]


def transformed(fn, transform, f, *how):
    """``fn`` (what ``transform(f, *how)`` made) as a :class:`Transformed`."""
    return Transformed(fn, transform, (f, *how), f)


def inner(t):
    """The function a :class:`Transformed` calls (a transform built on another calls it
    directly, with no layer in between); anything else as it is."""
    return t._fn if isinstance(t, Transformed) else t
