"""The lean path of a dual elementwise table op: the common call, with the general path's work
and none of its generality.

Forward-over-reverse turns every elementwise op of the forward pass and of the pullbacks into a
dual op, and at the sizes of a typical HVP (3-vectors to 128×128 matrices) the general dispatch
(``_apply`` → the lane-convention wrapper → the table op's ``native`` → ``_fused_frule`` →
``_run`` → ``wrap_result`` → ``_paired``) costs more than the arithmetic. This module takes the
calls where most of those steps decide nothing:

- one or two operands, each a dual of the calling tag or a plain float array / number;
- no lanes, no keywords (``out=``, ``where=``), debug mode off, an open real-only tag;
- dual values that are float32/float64 NumPy arrays or NumPy scalars;
- the op's registered frule is the table's own (not replaced by the user).

It runs the same programs (the same generated NumPy statements, the same numba kernels with the
same arguments) in the same order, so the numbers are bitwise the general path's; anything it
does not recognise returns None and the caller takes the general path.

Entry points (set into ``dual_array``'s hook lists by :func:`install`, so ``rules/`` stays free of the
dual layer and the plain reverse path pays nothing): :func:`unary` and :func:`binary` (the
operators and ``__array_ufunc__`` of a dual), :func:`pullback` (``ew_pullback`` dispatched to a
dual: the sweep's ``ḡ·f'(x)``), :func:`array_function` (``np.sum``/``np.reshape`` of a dual:
the sweep's broadcast sums). ``DualArray.__getitem__`` has its own short form for basic keys.
tests/test_dual_lean.py compares each with the general dispatch, bitwise.
"""
import math

import numpy as np

from ..config import _CONFIG as _DEBUG
from ..core.array_ops import buffer_root
from ..core.blas_threads import small
from ..rules.derivative_table import Entry as _ENTRY
from ..rules.derivative_table import on_new_entries
from ..rules.elementwise import ew_pullback
from ..rules.linear_algebra import matrix_product_tangent
from ..rules.registry import FRULES
from . import elementwise as ew
from .dual_array import (
    KEPT_PULLBACK,
    LEAN_FUNCTIONS,
    LEAN_OPS,
    DualArray,
    _own_operands,
    fresh,
    wrap_result,
)

_NDARRAY = np.ndarray
_F64 = np.float64
_FLOATS = (np.dtype(np.float64), np.dtype(np.float32))
_F64DT, _F32DT = _FLOATS  # (dtypes of builtin types are singletons: tested by identity)
_DUAL_SCALARS = frozenset([np.float64, np.float32])
_TANGENTS = frozenset([_NDARRAY, np.float64, np.float32])
_PLAIN_SCALARS = frozenset([float, int, np.float64, np.float32, np.int64])
_ONE, _FIRST, _SECOND, _BOTH = (True,), (True, False), (False, True), (True, True)


class _Op:
    """One table op as the lean path needs it: its entry, the frule registered for it (the
    lean path applies only while that is still the registered one), its programs by
    ``(present, const_b)`` and, for a unary op, the derivative-reusing programs."""
    __slots__ = (
        "both",
        "by_exponent",
        "entry",
        "first",
        "power",
        "progs",
        "reuse",
        "rule",
        "second",
        "uf",
    )

    def __init__(self, entry, rule):
        self.entry, self.uf, self.rule = entry, entry.ufunc, rule
        self.progs = {}
        self.reuse = None
        self.power = entry.name in ew._POWERS
        self.first = self.second = self.both = None  # (the programs without a constant b)
        self.by_exponent = {}  # special exponent (a Python number) b -> program of x ** b

    def program(self, present, const_b):
        p = self.progs.get((present, const_b))
        if p is None:
            p = self.progs[(present, const_b)] = ew.program(self.entry, "f", 0, present,
                                                            const_b)
            if const_b is None and len(present) == 2:
                setattr(self, {_FIRST: "first", _SECOND: "second", _BOTH: "both"}[present], p)
        return p


_OPS = {}  # ufunc -> _Op


@on_new_entries
def _register(entries):
    """Make the lean path available for these table entries (ops with a constant input keep
    the general path, which raises for a tangent on it)."""
    for e in entries:
        if e.constant:
            _OPS.pop(e.ufunc, None)
        else:
            _OPS[e.ufunc] = _Op(e, ew.TABLE_RULES[e.ufunc])


def _split(x):
    """``(value, tangent)`` of an operand: a dual (of the calling tag: the caller checked) whose
    value is a float NumPy array or scalar and whose tangent is a NumPy array or scalar (a
    number's tangent may be a 0-d array), or a plain float array or number (tangent None);
    None for anything else."""
    t = type(x)
    if t is DualArray:
        v, dv = x._value, x._tangent
        tv = type(v)
        if tv is _NDARRAY:
            dt = v.dtype
            if dt is not _F64DT and dt is not _F32DT:
                return None
        elif tv not in _DUAL_SCALARS:
            return None
        return (v, dv) if type(dv) in _TANGENTS else None
    if t is _NDARRAY:
        dt = x.dtype
        return (x, None) if dt is _F64DT or dt is _F32DT else None
    return (x, None) if t in _PLAIN_SCALARS else None


def binary(tag, uf, x, z):
    """``uf(x, z)`` for the table's binary op ``uf``, or None where the general path must run.
    ``tag``: the calling tag, open, real, without lanes; ``x``, ``z``: duals of it or plain.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> d = mp.dual(np.array([1.0, 2.0]), np.array([1.0, 0.0]))
        >>> mp.tangent(binary(d._tag, np.multiply, d, d))
        array([2., 0.])
    """
    op = _OPS.get(uf)
    if op is None:
        return matmul(tag, x, z) if uf is _np_matmul else None
    if FRULES.get(uf) is not op.rule or _DEBUG.get().debug_mode:
        return None
    # (_split, written out for x and for z: calling it twice measured +1.6k instructions per
    # op, ~5% of a 3-vector op)
    if type(x) is DualArray:
        a, ta = x._value, x._tangent
        if type(a) is _NDARRAY:
            dt = a.dtype
            if dt is not _F64DT and dt is not _F32DT:
                return None
        elif type(a) not in _DUAL_SCALARS:
            return None
        if type(ta) not in _TANGENTS:
            return None
    else:
        a, ta = x, None
        if type(a) is _NDARRAY:
            dt = a.dtype
            if dt is not _F64DT and dt is not _F32DT:
                return None
        elif type(a) not in _PLAIN_SCALARS:
            return None
    if type(z) is DualArray:
        b, tb = z._value, z._tangent
        if type(b) is _NDARRAY:
            dt = b.dtype
            if dt is not _F64DT and dt is not _F32DT:
                return None
        elif type(b) not in _DUAL_SCALARS:
            return None
        if type(tb) not in _TANGENTS:
            return None
        prog = op.both if ta is not None else op.second
        if prog is None:
            prog = op.program(_BOTH if ta is not None else _SECOND, None)
    else:
        b, tb = z, None
        if type(b) is _NDARRAY:
            dt = b.dtype
            if dt is not _F64DT and dt is not _F32DT:
                return None
        elif type(b) not in _PLAIN_SCALARS:
            return None
        if ta is None:
            return None
        if op.power:
            tb_ = type(b)
            if tb_ is int or tb_ is float:  # (x ** 2: the exponent's program by its value)
                prog = op.by_exponent.get(b)
                if prog is None:
                    e = ew._exponent(op.entry, b)
                    prog = op.program(_FIRST, e)
                    if e is not None:  # (the few special exponents only: a bounded cache)
                        op.by_exponent[b] = prog
            else:
                prog = op.program(_FIRST, ew._exponent(op.entry, b))
        else:
            prog = op.first
            if prog is None:
                prog = op.program(_FIRST, None)
    if not prog.has_tangent:
        return None
    kmin = ew.KERNEL_MIN_SIZE
    if (((type(a) is _NDARRAY and a.size >= kmin) or (type(b) is _NDARRAY and b.size >= kmin))
            and ew.USE_KERNELS and prog.fusible and ew._numba()):
        res = _fused(prog, uf, a, b, ta, tb)
        if res is not None:
            return DualArray(res[0], res[1], tag)
    y = uf(a, b)
    ty, = prog.np_fn(a, b, y, None, ta, tb, None)
    dt = y.dtype
    tdt = getattr(ty, "dtype", None)
    if tdt is not dt and tdt != dt:
        ty = ew._cast(ty, dt)
    # (only the smaller operand moved, c - x with c a matrix: widen its tangent, as native does)
    shape = y.shape
    if getattr(ty, "shape", None) != shape:
        ty = np.broadcast_to(ty, shape).copy()
    if type(y) is _NDARRAY:
        if (ty is ta or ty is tb) and y.base is None and ty.dtype is dt and dt.kind == "f":
            # (x + c: the program's tangent is the input's, which _paired copies, laid out
            # like the result)
            return DualArray(y, np.array(ty, order="C" if y.flags.c_contiguous else "K"), tag)
        # (fresh() and _wrapped(), written out like _split above: this is every binary op)
        if type(ty) is _NDARRAY and y.base is None and ty.base is None and ty.dtype is dt \
                and ty is not ta and ty is not tb and dt.kind == "f":
            tf = ty.flags
            if tf.writeable and (tf.c_contiguous or not y.flags.c_contiguous) and \
                    (ta is None or ta.base is None or buffer_root(ta) is not ty) and \
                    (type(tb) is not _NDARRAY or tb.base is None or buffer_root(tb) is not ty):
                return DualArray(y, ty, tag)
    elif type(y) is _F64 and type(ty) is _F64:
        return DualArray(y, ty, tag)
    return wrap_result(uf, y, ty, [a, b], [ta, tb], tag)


def matmul(tag, x, z):
    """``x @ z`` for two matrices (duals of ``tag``, open, real and without lanes, or plain) as
    the dual matmul's native rule (dual/core_rules.py) computes it, without the dispatch's
    generic argument lists and result checks; None where that dispatch must run."""
    if getattr(FRULES.get(_np_matmul), "_mc_native", None) is not _MATMUL_NATIVE[0] \
            or _DEBUG.get().debug_mode:
        return None
    if type(x) is DualArray:
        a, ta = x._value, x._tangent
        if type(ta) is not _NDARRAY:
            return None
    else:
        a, ta = x, None
    if type(z) is DualArray:
        b, tb = z._value, z._tangent
        if type(tb) is not _NDARRAY:
            return None
    else:
        b, tb = z, None
    if type(a) is not _NDARRAY or type(b) is not _NDARRAY or a.ndim != 2 or b.ndim != 2:
        return None
    with small(a, b):
        y, ty = matrix_product_tangent(a, b, ta, tb)
    dt = y.dtype
    # (three fresh products: what _paired keeps as it is)
    if type(ty) is _NDARRAY and ty.dtype is dt and dt.kind == "f" and y.base is None \
            and ty.base is None and ty.flags.c_contiguous:
        return DualArray(y, ty, tag)
    return wrap_result(_np_matmul, y, ty, [a, b], [ta, tb], tag)


def unary(tag, uf, x):
    """``uf(x)`` for the table's unary op ``uf`` on a dual ``x`` of ``tag`` (open, real, no
    lanes), or None where the general path must run.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> d = mp.dual(np.array([0.0]), np.array([2.0]))
        >>> mp.tangent(unary(d._tag, np.sin, d))
        array([2.])
    """
    op = _OPS.get(uf)
    if op is None or FRULES.get(uf) is not op.rule or _DEBUG.get().debug_mode:
        return None
    if type(x) is not DualArray:
        return None
    a, ta = x._value, x._tangent
    if type(a) is _NDARRAY:
        dt = a.dtype
        if dt is not _F64DT and dt is not _F32DT:
            return None
    elif type(a) not in _DUAL_SCALARS:
        return None
    if type(ta) not in _TANGENTS:
        return None
    big = type(a) is _NDARRAY and a.size >= ew.KERNEL_MIN_SIZE
    if not big and type(a) is _NDARRAY and type(ta) is _NDARRAY:
        # the NumPy path keeping the derivative for the pullback, as native does
        reuse = op.reuse
        if reuse is None:
            reuse = op.reuse = ew.reusing_programs(op.entry)
        fwd, pbs = reuse
        if fwd is not None:
            y = uf(a)
            d0, ty = fwd(a, y, ta)
            dt = y.dtype
            if getattr(ty, "dtype", None) != dt:
                ty = ew._cast(ty, dt)
            if type(y) is _NDARRAY:
                kept = (y, a, d0, pbs)
                if fresh(y, ty, (ta,)):
                    d = DualArray(y, ty, tag)
                    d._kept = kept
                    return d
                return wrap_result(uf, y, ty, [a], [ta], tag, kept)
            return _wrapped(uf, y, ty, a, None, ta, None, tag)
    prog = op.program(_ONE, None)
    if not prog.has_tangent:
        return None
    if big and ew.USE_KERNELS and prog.fusible and ew._numba():
        res = _fused(prog, uf, a, None, ta, None)
        if res is not None:
            return DualArray(res[0], res[1], tag)
    y = uf(a)
    ty, = prog.np_fn(a, None, y, None, ta, None, None)
    dt = y.dtype
    if getattr(ty, "dtype", None) != dt:
        ty = ew._cast(ty, dt)
    return _wrapped(uf, y, ty, a, None, ta, None, tag)


def _wrapped(uf, y, ty, a, b, ta, tb, tag, kept=None):
    """The dual ``wrap_result`` makes of ``(y, ty)`` for the operands ``a``, ``b`` (None for a
    unary op) with tangents ``ta``, ``tb``."""
    if type(y) is _F64 and type(ty) is _F64:
        return DualArray(y, ty, tag)
    if fresh(y, ty, (ta, tb)):
        d = DualArray(y, ty, tag)
        if kept is not None:
            d._kept = kept
        return d
    if b is None:
        return wrap_result(uf, y, ty, [a], [ta], tag, kept)
    return wrap_result(uf, y, ty, [a, b], [ta, tb], tag, kept)


# --- the fused kernels, called as _run calls them (without lanes) ---------------------------
_NAMES = ("a", "b", "g")
_SCALARS = {}  # (scalar a, scalar b, scalar g) -> the frozenset of names _run keys plans by
for _i in range(8):
    _key = tuple(bool(_i >> j & 1) for j in range(3))
    _SCALARS[_key] = frozenset(n for n, sc in zip(_NAMES, _key) if sc)
_LEAN_PLANS = {}  # (program, dtype, scalar a, scalar b, scalar g) -> _LeanPlan


class _LeanPlan:
    """A ``_Plan`` in positions instead of names: which of (a, b, y, g) the kernel takes, which
    tangents of (ta, tb, tg) and whether as numbers, which outputs are tangents."""
    __slots__ = ("hoisted", "inputs", "kernel", "need_y", "outs", "tangents")

    def __init__(self, plan):
        pos = {"a": 0, "b": 1, "y": 2, "g": 3}
        self.kernel = plan.kernel
        self.inputs = tuple(pos[n] for n in plan.inputs)
        self.hoisted = tuple(plan.hoisted)
        self.tangents = tuple((pos[t[1:]] if t != "tg" else 2, scalar)
                              for t, scalar in plan.tangents)
        self.outs = tuple(tangent for _, tangent in plan.outs)
        self.need_y = plan.need_y
        if self.outs.count(True) != 1 or self.outs.count(False) > 1:
            raise ValueError(plan.outs)  # (one value and one tangent: all the table's programs)


def _lean_plan(prog, dt, sa, sb, sg):
    key = (prog, dt, sa, sb, sg)
    lp = _LEAN_PLANS.get(key)
    if lp is None:
        lp = _LEAN_PLANS[key] = _LeanPlan(ew._plan(prog, dt, _SCALARS[(sa, sb, sg)]))
    return lp


def _kernel_call(lp, vals, tans, shape, n, dt, uf, a, b):
    """``(value or None, tangent)`` from ``lp``'s kernel on the operands ``vals`` = (a, b, y, g)
    (kernel arguments: flat arrays or numbers) and raw tangents ``tans`` = (ta, tb, tg), or
    None where ``_run`` returns None. Where the kernel needs y and ``vals`` lacks it, y is
    ``uf(a)`` (``b`` None) or ``uf(a, b)``."""
    targs = []
    for i, scalar in lp.tangents:
        t = tans[i]
        if type(t) is _NDARRAY:
            if t.dtype != dt or not t.flags.c_contiguous or t.size != (1 if scalar else n):
                return None
            targs.append(t.reshape(1) if scalar else t.reshape(1, n))
        elif scalar and isinstance(t, np.generic) and t.dtype == dt:
            targs.append(np.full(1, t, dtype=dt))
        else:
            return None
    y_full = None
    if lp.need_y and vals[2] is None:
        y_full = uf(a) if b is None else uf(a, b)
        if type(y_full) is not _NDARRAY or y_full.dtype != dt or y_full.shape != shape:
            return None
        vals = (vals[0], vals[1], y_full.reshape(-1), vals[3])
    args = [n, 1]
    for i in lp.inputs:
        args.append(vals[i])
    fa, fb, fy = vals[0], vals[1], vals[2]
    for fn, is_scalar in lp.hoisted:
        h = fn(fa, fb, fy)
        args.append(dt.type(h) if is_scalar else np.ascontiguousarray(h, dtype=dt))
    args.extend(targs)
    outs = [np.empty((1, n) if tangent else n, dtype=dt) for tangent in lp.outs]
    lp.kernel(*args, *outs)
    value = y_full
    for o, tangent in zip(outs, lp.outs):
        if tangent:
            tout = o.reshape(shape)
        elif y_full is None:
            value = o.reshape(shape)
    return value, tout


def _fused(prog, uf, a, b, ta, tb):
    """``(y, ty)`` from ``prog``'s kernel, or None where ``_fused_frule`` gives None."""
    if type(a) is _NDARRAY and a.ndim:
        shape, dt = a.shape, a.dtype
        if type(b) is _NDARRAY and b.ndim and (b.shape != shape or b.dtype != dt):
            return None
    elif type(b) is _NDARRAY and b.ndim:
        shape, dt = b.shape, b.dtype
    else:
        return None
    fa = ew._operand(a, shape, dt)
    if fa is None:
        return None
    if b is not None:
        fb = ew._operand(b, shape, dt)
        if fb is None:
            return None
        sb = type(fb) is not _NDARRAY
    else:
        fb, sb = None, False
    lp = _lean_plan(prog, dt, type(fa) is not _NDARRAY, sb, False)
    res = _kernel_call(lp, (fa, fb, None, None), (ta, tb, None), shape, math.prod(shape), dt,
                       uf, a, b)
    if res is None:
        return None
    y, ty = res
    if y is None:
        y = uf(a) if b is None else uf(a, b)
    return y, ty


def _fused_pullback(prog, g, tg, a, ta, b, tb, y):
    """``(r, tr)`` from ``prog``'s kernel, or None where elementwise's ``_fused_pullback``
    gives None."""
    if type(g) is not _NDARRAY or type(y) is not _NDARRAY:
        return None
    shape, dt = g.shape, g.dtype
    if dt not in _FLOATS or y.shape != shape or y.dtype != dt:
        return None
    operand = ew._operand
    fg, fy, fa = operand(g, shape, dt), operand(y, shape, dt), operand(a, shape, dt)
    if fg is None or fy is None or fa is None:
        return None
    if b is not None:
        fb = operand(b, shape, dt)
        if fb is None:
            return None
        sb = type(fb) is not _NDARRAY
    else:
        fb, sb = None, False
    lp = _lean_plan(prog, dt, type(fa) is not _NDARRAY, sb, type(fg) is not _NDARRAY)
    return _kernel_call(lp, (fa, fb, fy, fg), (ta, tb, tg), shape, g.size, dt, None, None,
                        None)


# --- the pullback primitive on duals --------------------------------------------------------
def pullback(tag, args):
    """``ew_pullback(*args)`` = ``ew_pullback(entry, k, g, *xs)`` dispatched to ``tag`` (the
    innermost transformation of its arguments), for a tag that is open, real and without
    lanes and a cotangent and inputs that are duals of it or plain floats, as the dispatch to
    the primitive's frule computes it; None where that dispatch must run.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> from mooncake_py.rules.derivative_table import TABLE
        >>> x = mp.dual(np.array([0.0]), np.array([1.0]))
        >>> g = mp.dual(np.array([2.0]), np.array([0.0]), like=x)
        >>> mp.tangent(pullback(x._tag, (TABLE["sin"], 0, g, x, np.sin(x))))  # g·(-sin(x))·ẋ
        array([0.])
    """
    if len(args) == 5 and type(args[4]) is DualArray and args[4]._kept is not None:
        # (a unary op whose forward kept its derivative: the dispatch's own short path, which
        # checks the rest itself)
        r = ew._kept_pullback(tag, args)
        if r is not None:
            return r
    if len(args) < 4 or tag._watch or tag.lanes or FRULES.get(ew_pullback) is not ew._PB_FRULE \
            or _DEBUG.get().debug_mode:
        return None
    entry, k, g = args[0], args[1], args[2]
    xs = args[3:]
    if not _own_operands(tag, args[2:]):
        return None
    if type(entry) is not _ENTRY:
        return None
    nin = entry.nin
    if type(k) is not int or len(xs) != nin + 1 or not 0 <= k < nin:
        return None
    sg = _split(g)
    if sg is None:
        return None
    gp, tg = sg
    parts = []
    for x in xs:
        sx = _split(x)
        if sx is None:
            return None
        parts.append(sx)
    if nin == 1:
        (a, ta), (y, ty) = parts
        b = tb = None
        present = (tg is not None, ta is not None)
        const_b = None
    else:
        (a, ta), (b, tb), (y, ty) = parts
        present = (tg is not None, ta is not None, tb is not None)
        const_b = None if present[2] else ew._exponent(entry, b)
    key = (id(entry), k, present, const_b)
    prog = ew._PB_PROGRAMS.get(key)
    if prog is None or prog.entry is not entry:
        prog = ew._PB_PROGRAMS[key] = ew.program(entry, "p", k, present, const_b)
    if not prog.has_tangent:
        return None
    dt = ew._result_dtype(gp, y)
    if (ew.USE_KERNELS and type(gp) is _NDARRAY and gp.size >= ew.KERNEL_MIN_SIZE
            and prog.fusible and ew._numba()):
        res = _fused_pullback(prog, gp, tg, a, ta, b, tb, y)
        if res is not None:
            return DualArray(res[0], res[1], tag)
    r, tr = prog.np_fn(a, b, y, gp, ta, tb, tg)
    if getattr(r, "dtype", None) != dt:
        r = ew._cast(r, dt)
    if getattr(tr, "dtype", None) != dt:
        tr = ew._cast(tr, dt)
    if type(r) is _F64 and type(tr) is _F64:
        return DualArray(r, tr, tag)
    if fresh(r, tr, (tg, ta, tb, ty)):
        return DualArray(r, tr, tag)
    if nin == 1:
        return wrap_result(ew_pullback, r, tr, [entry, k, gp, a, y], [None, None, tg, ta, ty],
                           tag)
    return wrap_result(ew_pullback, r, tr, [entry, k, gp, a, b, y],
                       [None, None, tg, ta, tb, ty], tag)


# --- np.sum, np.reshape and np.swapaxes of a dual (a sweep's broadcast sums, the transposes
# of matrix products' pullbacks) ------------------------------------------------------------------
def array_function(d, func, args, kwargs):
    """``func(*args, **kwargs)`` for ``func`` np.sum, np.reshape or np.swapaxes of the dual ``d`` (its first
    argument; its tag open, real and without lanes), as the dispatch to their frules computes
    it; None where that dispatch must run.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> g = mp.dual(np.ones((2, 3)), np.ones((2, 3)))
        >>> mp.tangent(array_function(g, np.sum, (g,), {"axis": 0}))
        array([2., 2., 2.])
    """
    if not args or args[0] is not d or _DEBUG.get().debug_mode:
        return None
    p, t = d._value, d._tangent
    tag = d._tag
    if type(p) is not _NDARRAY or type(t) is not _NDARRAY:
        if func is _np_reshape and len(args) == 2 and type(args[1]) is tuple and \
                args[1] == () and not kwargs and \
                type(p) in _DUAL_SCALARS and type(t) is type(p) and \
                FRULES.get(_np_reshape) is _RESHAPE_RULE:
            return DualArray(p, t, tag)  # (a number reshaped to (): the frule's same numbers)
        return None
    if func is _np_sum:
        if len(args) != 1 or FRULES.get(_np_sum) is not _SUM_RULE or \
                getattr(_SUM_RULE, "_mc_native", None) is not _SUM_NATIVE[0]:
            return None
        axis, keepdims = None, False
        for k, v in kwargs.items():  # (what the sum frule's short forms take)
            if k == "axis":
                if not (v is None or type(v) is int or
                        (type(v) is tuple and all(type(a) is int for a in v))):
                    return None
                axis = v
            elif k == "keepdims" and type(v) is bool:
                keepdims = v
            elif not (v is None and (k == "dtype" or k == "out")):
                return None
        sp = _add_reduce(p, axis=axis, keepdims=keepdims)
        st = _add_reduce(t, axis=axis, keepdims=keepdims)
        if type(sp) is _F64 and type(st) is _F64:
            return DualArray(sp, st, tag)
        if fresh(sp, st, (t,)):
            return DualArray(sp, st, tag)
        return wrap_result(_np_sum, sp, st, [p], [t], tag)
    if func is _np_reshape:
        if len(args) != 2 or kwargs or FRULES.get(_np_reshape) is not _RESHAPE_RULE or \
                getattr(_RESHAPE_RULE, "_mc_native", None) is not _RESHAPE_NATIVE[0]:
            return None
        shape = args[1]
        if not (type(shape) is int or (type(shape) is tuple and
                                       all(type(n) is int for n in shape))):
            return None
        rp, rt = _np_reshape(p, shape), _np_reshape(t, shape)
        # (a view of p whose tangent is the same view of t: what _paired keeps as it is)
        if type(rp) is _NDARRAY and type(rt) is _NDARRAY and rp.base is not None and \
                rt.base is not None and rt.dtype is rp.dtype and rp.dtype.kind == "f" and \
                buffer_root(rp) is buffer_root(p) and buffer_root(rt) is buffer_root(t):
            return DualArray(rp, rt, tag)
        return wrap_result(_np_reshape, rp, rt, [p, shape], [t, None], tag)
    if func is _np_swapaxes:
        if len(args) != 3 or kwargs or type(args[1]) is not int or type(args[2]) is not int \
                or FRULES.get(_np_swapaxes) is not _SWAPAXES_RULE or \
                getattr(_SWAPAXES_RULE, "_mc_native", None) is not _SWAPAXES_NATIVE[0]:
            return None
        rp, rt = _np_swapaxes(p, args[1], args[2]), _np_swapaxes(t, args[1], args[2])
        # (views of p and t, always: the frule's pair, which _paired keeps as it is)
        if rt.dtype is rp.dtype and rp.dtype.kind == "f":
            return DualArray(rp, rt, tag)
        return wrap_result(_np_swapaxes, rp, rt, [p, args[1], args[2]], [t, None, None], tag)
    return None



def sum_all(d):
    """``np.sum(d)`` over every axis, without keywords, of the dual ``d`` (its tag open, real
    and without lanes) as :func:`array_function` computes it, without reading keywords; None
    where the dispatch must run.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> g = mp.dual(np.ones((2, 3)), np.arange(6.0).reshape(2, 3))
        >>> float(mp.primal(sum_all(g))), float(mp.tangent(sum_all(g)))
        (6.0, 15.0)
    """
    p, t = d._value, d._tangent
    if type(p) is not _NDARRAY or type(t) is not _NDARRAY or _DEBUG.get().debug_mode or \
            FRULES.get(_np_sum) is not _SUM_RULE or \
            getattr(_SUM_RULE, "_mc_native", None) is not _SUM_NATIVE[0]:
        return None
    sp = _add_reduce(p, axis=None, keepdims=False)
    st = _add_reduce(t, axis=None, keepdims=False)
    if type(sp) is _F64 and type(st) is _F64:
        return DualArray(sp, st, d._tag)
    if fresh(sp, st, (t,)):
        return DualArray(sp, st, d._tag)
    return wrap_result(_np_sum, sp, st, [p], [t], d._tag)


_add_reduce = np.add.reduce
_np_sum, _np_reshape, _np_swapaxes = np.sum, np.reshape, np.swapaxes
_SUM_RULE = FRULES[np.sum]
_RESHAPE_RULE = FRULES[np.reshape]
_SWAPAXES_RULE = FRULES[np.swapaxes]
# (the natives core_rules.py puts on the registered frules, read by install())
_SUM_NATIVE, _RESHAPE_NATIVE, _SWAPAXES_NATIVE = [object()], [object()], [object()]
_np_matmul = np.matmul
_MATMUL_NATIVE = [object()]


def install():
    """Set this module's entry points into ``dual_array``'s hook lists (idempotent;
    mooncake_py/registration.py calls it once every rule is registered)."""
    _SUM_NATIVE[0] = getattr(_SUM_RULE, "_mc_native", None)
    _RESHAPE_NATIVE[0] = getattr(_RESHAPE_RULE, "_mc_native", None)
    _SWAPAXES_NATIVE[0] = getattr(_SWAPAXES_RULE, "_mc_native", None)
    _MATMUL_NATIVE[0] = getattr(FRULES[np.matmul], "_mc_native", None)
    LEAN_OPS[:] = [unary, binary]
    KEPT_PULLBACK[1] = pullback
    LEAN_FUNCTIONS[:] = [array_function]
