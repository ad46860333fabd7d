"""NumPy's floating-point warnings raised inside the library, pointed at the user's line.

NumPy issues ``RuntimeWarning: divide by zero encountered in log`` from C, against the innermost
Python frame. Inside a transformation that frame is a rule or the reverse sweep, so the warning
would name ``derivative_table.py`` and, shown once per location by Python's default filter,
hide every later one. Around a transformation's call, :func:`enter` switches the error modes the
user set to ``'warn'`` (only those: ``'raise'``, ``'ignore'``, ``'print'`` stay as they are) to
``'log'`` with a writer that re-issues the same message as a ``RuntimeWarning`` whose location
is the first frame outside mooncake_py and NumPy: the user's line inside ``f`` while it is
recorded, the ``mp.grad(f)(x)`` call during the sweep.

Cost: NumPy >= 2 keeps its error state in a context variable; the switched state is built once
per state the user sets and cached by identity, so a call costs one ``ContextVar.get``, ``set``
and ``reset`` (~0.2 µs), nothing per op, and the writer runs only when a warning fires. On older
NumPy the same is done with ``np.errstate`` (~1.5 µs a call).
"""
import os
import sys
import warnings

import numpy as np

try:  # NumPy >= 2: the error state is this context variable's value
    from numpy._core.umath import _extobj_contextvar as _STATE
    from numpy._core.umath import _make_extobj
except ImportError:  # pragma: no cover - NumPy 1.x
    _STATE = _make_extobj = None

_MODES = ("divide", "over", "under", "invalid")
# frames of these files are the library's (or NumPy's Python wrappers around the call)
_SKIP = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
         os.path.dirname(os.path.abspath(np.__file__)) + os.sep,
         "<mooncake_py")


class _Writer:
    """The ``call`` object of the ``'log'`` mode: NumPy calls ``write("Warning: <what>
    encountered in <ufunc>\\n")`` where it would have warned."""
    __slots__ = ()

    def write(self, msg):
        msg = msg.removeprefix("Warning: ").rstrip("\n")
        warnings.warn(msg, RuntimeWarning, stacklevel=_user_level())


_WRITER = _Writer()


def _user_level():
    """``stacklevel`` for ``warnings.warn`` called in ``_Writer.write``: the first frame
    outside mooncake_py and NumPy (1 is write's own frame)."""
    frame = sys._getframe(2)  # write's caller: the innermost frame of the warning ufunc
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(_SKIP):
        frame = frame.f_back
        level += 1
    return level if frame is not None else 2


def _switched_modes():
    """The ``np.errstate`` keywords of the switched state, or None to leave the state alone:
    nothing is ``'warn'``, or the user has a ``call`` object of their own (the ``'call'`` and
    ``'log'`` modes share the one object, so ours would replace theirs)."""
    modes = np.geterr()
    call = np.geterrcall()
    if call is _WRITER or "warn" not in modes.values():
        return None
    if call is not None or any(m in ("call", "log") for m in modes.values()):
        return None
    return {k: ("log" if modes[k] == "warn" else modes[k]) for k in _MODES}


cache = (None, None)  # (the state last seen, its switched state or None); one tuple: threads


def enter():
    """Switch ``'warn'`` to the re-pointing writer; returns the token for :func:`leave`.

    Example:
        >>> import numpy as np, warnings
        >>> token = enter()
        >>> try:
        ...     with warnings.catch_warnings(record=True) as w:
        ...         warnings.simplefilter("always")
        ...         _ = np.log(np.zeros(1))
        ... finally:
        ...     leave(token)
        >>> str(w[0].message), w[0].filename.endswith("fp_warnings.py")
        ('divide by zero encountered in log', False)
    """
    global cache
    if _STATE is None:  # pragma: no cover - NumPy 1.x
        modes = _switched_modes()
        if modes is None:
            return None
        es = np.errstate(call=_WRITER, **modes)
        es.__enter__()
        return es
    cur = _STATE.get()
    seen, ours = cache
    if cur is ours and ours is not None:
        return None  # inside another transformation's call: already switched
    if cur is not seen:
        modes = _switched_modes()
        ours = None if modes is None else _make_extobj(call=_WRITER, **modes)
        cache = (cur, ours)
    return None if ours is None else _STATE.set(ours)


def leave(token):
    """Undo :func:`enter` (``token`` is what it returned)."""
    if token is not None:
        reset(token)


# The hot paths (grad, hvp) write enter/leave out with these: a hit of the cache is then one
# ``get``, ``set`` and ``reset`` of the context variable (~3.7k instructions; calling enter and
# leave adds ~1.8k, 2% of the smallest gradient):
#     seen, ours = fp_warnings.cache
#     token = fp_warnings.switch(ours) if fp_warnings.get() is seen and ours is not None \
#         else fp_warnings.enter()
#     ... finally: if token is not None: fp_warnings.reset(token)
if _STATE is not None:
    get, switch, reset = _STATE.get, _STATE.set, _STATE.reset
else:  # pragma: no cover - NumPy 1.x: the cache never hits, enter() uses np.errstate
    def get():
        return None

    switch = None

    def reset(token):
        token.__exit__(None, None, None)
