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
"""
import math

import numpy as np

from ..config import _CONFIG as _DEBUG
from ..array_ops import buffer_root
from ..rules.derivative_table import on_new_entries
from ..rules.registry import FRULES
from . import elementwise as ew
from .dual_array import DualArray, LEAN_OPS, wrap_result

_NDARRAY = np.ndarray
_F64 = np.float64
_FLOATS = (np.dtype(np.float64), np.dtype(np.float32))
_DUAL_SCALARS = (np.float64, np.float32)
_PLAIN_SCALARS = frozenset([float, int, np.float64, np.float32, np.int64])
_ONE, _FIRST, _SECOND, _BOTH = (True,), (True, False), (False, True), (True, True)


class _Op:
    """One table op as the lean path needs it: its entry, the frule registered for it (the
    lean path applies only while that is still the registered one), its programs by
    ``(present, const_b)`` and, for a unary op, the derivative-reusing programs."""
    __slots__ = ("entry", "uf", "rule", "progs", "reuse", "power")

    def __init__(self, entry, rule):
        self.entry, self.uf, self.rule = entry, entry.ufunc, rule
        self.progs = {}
        self.reuse = None
        self.power = entry.name in ew._POWERS

    def program(self, present, const_b):
        p = self.progs.get((present, const_b))
        if p is None:
            p = self.progs[(present, const_b)] = ew.program(self.entry, "f", 0, present,
                                                            const_b)
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
    value is a float NumPy array or scalar, or a plain float array or number (tangent None);
    None for anything else."""
    t = type(x)
    if t is DualArray:
        v, dv = x._value, x._tangent
        tv = type(v)
        if tv is _NDARRAY:
            if v.dtype in _FLOATS and type(dv) is _NDARRAY:
                return v, dv
            return None
        if (tv is _F64 or tv is np.float32) and type(dv) in _DUAL_SCALARS:
            return v, dv
        return None
    if t is _NDARRAY:
        return (x, None) if x.dtype in _FLOATS else None
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
    if op is None or FRULES.get(uf) is not op.rule or _DEBUG.get().debug_mode:
        return None
    sx = _split(x)
    if sx is None:
        return None
    sz = _split(z)
    if sz is None:
        return None
    a, ta = sx
    b, tb = sz
    if tb is None:
        if ta is None:
            return None
        prog = op.program(_FIRST, ew._exponent(op.entry, b) if op.power else None)
    else:
        prog = op.program(_BOTH if ta is not None else _SECOND, None)
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
    if getattr(ty, "dtype", None) != dt:
        ty = ew._cast(ty, dt)
    # (only the smaller operand moved, c - x with c a matrix: widen its tangent, as native does)
    if getattr(ty, "shape", None) != y.shape:
        ty = np.broadcast_to(ty, y.shape).copy()
    return _wrapped(uf, y, ty, a, b, ta, tb, tag)


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
    sx = _split(x)
    if sx is None or sx[1] is None:
        return None
    a, ta = sx
    big = type(a) is _NDARRAY and a.size >= ew.KERNEL_MIN_SIZE
    if not big and type(a) is _NDARRAY:
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
                return _wrapped(uf, y, ty, a, None, ta, None, tag, (y, a, d0, pbs))
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
    """The dual ``wrap_result`` makes of ``(y, ty)``: a fresh result with a fresh tangent that
    is no input's tangent (nor the buffer under one) is paired as it is, laid out C-first;
    everything else goes through ``wrap_result``."""
    if type(y) is _F64 and type(ty) is _F64:
        return DualArray(y, ty, tag)
    if type(y) is _NDARRAY and type(ty) is _NDARRAY and y.base is None and ty.base is None \
            and ty is not ta and ty is not tb and ty.dtype is y.dtype \
            and y.dtype.kind == "f":
        tf = ty.flags
        if tf.writeable and (tf.c_contiguous or not y.flags.c_contiguous):
            for t in (ta, tb):
                if type(t) is _NDARRAY and t.base is not None and buffer_root(t) is ty:
                    break
            else:
                d = DualArray(y, ty, tag)
                if kept is not None:
                    d._kept = kept
                return d
    if b is None:
        return wrap_result(uf, y, ty, [a], [ta], tag, kept)
    return wrap_result(uf, y, ty, [a, b], [ta, tb], tag, kept)


# --- the fused kernels, called as _fused_frule and _run call them (without lanes) -----------
_SCALARS = {(False, False): frozenset(), (True, False): frozenset(["a"]),
            (False, True): frozenset(["b"]), (True, True): frozenset(["a", "b"])}
_LEAN_PLANS = {}  # (program, dtype, scalar a, scalar b) -> _LeanPlan


class _LeanPlan:
    """A ``_Plan`` in positions instead of names: which of (a, b, y) the kernel takes, which
    tangent (0: ta, 1: tb) and whether as a number, which outputs are tangents."""
    __slots__ = ("kernel", "inputs", "hoisted", "tangents", "outs", "need_y", "y_out")

    def __init__(self, plan):
        pos = {"a": 0, "b": 1, "y": 2}
        self.kernel = plan.kernel
        self.inputs = tuple(pos[n] for n in plan.inputs)
        self.hoisted = tuple(plan.hoisted)
        self.tangents = tuple((0 if t == "ta" else 1, scalar) for t, scalar in plan.tangents)
        self.outs = tuple(tangent for _, tangent in plan.outs)
        names = [name for name, _ in plan.outs]
        self.need_y = plan.need_y
        self.y_out = names.index("y") if "y" in names else -1
        if names.count("ty") != 1 or any(n not in ("y", "ty") for n in names):
            raise ValueError(names)  # (not a frule's kernel: never built by the callers)


def _lean_plan(prog, dt, sa, sb):
    key = (prog, dt, sa, sb)
    lp = _LEAN_PLANS.get(key)
    if lp is None:
        lp = _LEAN_PLANS[key] = _LeanPlan(ew._plan(prog, dt, _SCALARS[(sa, sb)]))
    return lp


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
    lp = _lean_plan(prog, dt, type(fa) is not _NDARRAY, sb)
    n = math.prod(shape)
    targs = []
    for i, scalar in lp.tangents:
        t = tb if i else ta
        if type(t) is _NDARRAY:
            if t.dtype != dt or not t.flags.c_contiguous or t.size != (1 if scalar else n):
                return None
            targs.append(t.reshape(1) if scalar else t.reshape(1, n))
        elif scalar and isinstance(t, np.generic) and t.dtype == dt:
            targs.append(np.full(1, t, dtype=dt))
        else:
            return None
    y_full = fy = None
    if lp.need_y:
        y_full = uf(a) if b is None else uf(a, b)
        if type(y_full) is not _NDARRAY or y_full.dtype != dt or y_full.shape != shape:
            return None
        fy = y_full.reshape(-1)
    vals = (fa, fb, fy)
    args = [n, 1]
    for i in lp.inputs:
        args.append(vals[i])
    for fn, is_scalar in lp.hoisted:
        h = fn(fa, fb, fy)
        args.append(dt.type(h) if is_scalar else np.ascontiguousarray(h, dtype=dt))
    args.extend(targs)
    outs = [np.empty((1, n) if tangent else n, dtype=dt) for tangent in lp.outs]
    lp.kernel(*args, *outs)
    ty = None
    y = y_full
    for o, tangent in zip(outs, lp.outs):
        if tangent:
            ty = o.reshape(shape)
        elif y_full is None:
            y = o.reshape(shape)
    if y is None:
        y = uf(a) if b is None else uf(a, b)
    return y, ty


LEAN_OPS[:] = [unary, binary]
