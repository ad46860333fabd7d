"""What a prepared cache's ``f`` reads from outside its arguments, guarded by identity.

A replayed plan does not run ``f``, so a global or a closure variable that ``f`` reads is,
in the plan, whatever it was when ``f`` was recorded. :class:`OutsideGuard` notes, when a
cache records, the object each of those names is bound to, and :meth:`OutsideGuard.holds`
checks on every call that each name is still bound to the same object (``is``): a few
dictionary lookups. A name bound to another object (``s = 10.0`` after preparing with
``s = 1.0``) makes the cache record again.

What is guarded:

- the names ``f``'s code loads (``co_names``, also those of the lambdas and comprehensions
  written inside it) that are globals of ``f``'s module, or builtins a global could later
  shadow;
- the contents of ``f``'s closure cells;
- the same, recursively, for every plain Python function reached that way (a helper ``f``
  calls, a function a closure holds), except functions of NumPy, SciPy and mooncake_py;
- for a bound method, ``functools.partial`` or a callable object, the function behind it.

What identity cannot see: an array (or list, dict, object) refilled in place keeps its
identity, and random numbers drawn inside ``f`` are drawn once, when recording. Pass such
data as a non-differentiated argument (``argnums``), prepare with ``replay=False``, or check
with ``Config(debug_mode=True)``, which compares every replay with a fresh recording.
"""
import builtins
import functools
import types

_MISSING = object()
_BUILTINS = frozenset(vars(builtins))
# Functions of these packages do not change between calls: not looked into.
_LIBRARIES = ("numpy", "scipy", "mooncake_py", "builtins", "functools", "math")


class OutsideGuard:
    """The globals and closure cells ``f`` reads, each with the object it was bound to.

    Example:
        >>> import numpy as np
        >>> def make(s):
        ...     return lambda x: s * np.sum(x)
        >>> g = OutsideGuard(make(2.0))
        >>> g.holds()
        True
    """
    __slots__ = ("cells", "names")

    def __init__(self, f):
        self.names = []  # (globals dict, name, object bound when recorded, or _MISSING)
        self.cells = []  # (cell, contents when recorded)
        _collect(f, self, set(), 0)

    def holds(self):
        """Whether every guarded name and cell is bound to the object it was bound to."""
        for g, name, obj in self.names:
            if g.get(name, _MISSING) is not obj:
                return False
        for cell, obj in self.cells:
            try:
                if cell.cell_contents is not obj:
                    return False
            except ValueError:  # (an emptied cell)
                return False
        return True

    def changed(self):
        """A few words on the first name that no longer holds (for messages), or None."""
        for g, name, obj in self.names:
            if g.get(name, _MISSING) is not obj:
                return f"the global {name!r}"
        for cell, obj in self.cells:
            try:
                same = cell.cell_contents is obj
            except ValueError:
                same = False
            if not same:
                return "a closure variable"
        return None


def _is_library(fn):
    mod = getattr(fn, "__module__", None) or ""
    return mod.split(".", 1)[0] in _LIBRARIES


def _function_of(f):
    """The plain Python function behind ``f`` (a function, bound method, partial or callable
    object), or None."""
    for _ in range(8):  # (a partial of a method of ...: a few levels at most)
        if type(f) is types.FunctionType:
            return f
        if type(f) is types.MethodType:
            f = f.__func__
        elif type(f) is functools.partial:
            f = f.func
        else:
            call = vars(type(f)).get("__call__")  # (a callable object: its class's method)
            return call if type(call) is types.FunctionType else None
    return None


def _code_names(code, out):
    out.update(code.co_names)
    for c in code.co_consts:
        if type(c) is types.CodeType:
            _code_names(c, out)


def _collect(f, guard, seen, depth):
    fn = _function_of(f)
    if fn is None or id(fn) in seen or _is_library(fn) or depth > 16:
        return
    seen.add(id(fn))
    g = fn.__globals__
    names = set()
    _code_names(fn.__code__, names)
    more = []
    for name in sorted(names):
        obj = g.get(name, _MISSING)
        if obj is _MISSING and name not in _BUILTINS:
            continue  # (an attribute name, np.sum's "sum": nothing a global rebinds)
        guard.names.append((g, name, obj))
        if obj is not _MISSING:
            more.append(obj)
    for cell in fn.__closure__ or ():
        try:
            obj = cell.cell_contents
        except ValueError:
            continue
        guard.cells.append((cell, obj))
        more.append(obj)
    for obj in more:
        if type(obj) in (types.FunctionType, types.MethodType, functools.partial):
            _collect(obj, guard, seen, depth + 1)
