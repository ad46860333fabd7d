"""Short paths for scalar-loop code (``s = s + x[i] * x[i]``), installed on TrackedArray.

Scalar loops record thousands of ops whose NumPy work is a few nanoseconds, so the tape's own
bookkeeping is the whole cost. For the commonest shapes of such ops (an int read ``x[i]`` of a
float64 ndarray, and ``+ - * /`` between float64 scalars) the methods here record the node
directly, skipping dispatch's search for the innermost wrapper, the rule lookup and the
generic output checks; the sweep (:meth:`Tape._sweep`) adds an :class:`ItemRead`'s cotangent
straight into its array's buffer.

Every shortcut applies only where its result is the one the general path would give: a plain
:class:`Tape` or a :class:`MutatingTape` (no complex values, not closed, not in debug mode),
plain float64 values (duals take mixed/dual_scalars.py's paths), and no other transformation's
values among the operands. Anything else goes the general way. On a MutatingTape a float64
scalar operand needs none of its freshness checks, whenever it was made: a NumPy scalar is
immutable and owns no buffer a write could reach, so ``MutatingTape._fresh`` finds nothing for
it (it was required to be made after the last write; RK4's ``y[i+1, 1] = v + ...`` after
``y[i+1, 0] = ...`` then took the general path for ~6 ops a step). An item read ``x[i]`` /
``x[i, j]`` on a MutatingTape first brings ``x`` up to date as ``MutatingTape.record`` does
(``_fresh``), then records the same ItemRead node.
"""
import operator

import numpy as np

from ..core.array_ops import ArrayOps, buffer_root
from ..rules.derivative_table import TABLE
from ..rules.derivative_table import _div as div
from ..rules.reductions import broadcast_cotangent
from ..rules.registry import RRULES
from . import tape as _tape_module
from .pullbacks import ItemRead, Pass, Quotient
from .tape import _F64_DT, _SWEEPING, MutatingTape, Tape, _Write, begin_writes, remember_read
from .tracked import TrackedArray

_F64 = np.float64


class _NoDuals:
    """The dual type until :func:`install` is given the dual layer's short paths: no value is
    of this type, so every dual check below fails and the general path runs."""


# The short paths of tracked dual scalars (mixed/dual_scalars.py, a layer above this one, which
# hands itself to install()): ``DualArray`` is its dual type, ``dual_scalars`` the module.
DualArray = _NoDuals
dual_scalars = None
_NDARRAY = np.ndarray
_getitem = operator.getitem
_NO_KWARGS = {}
_INT_KEYS = (int, np.intp, np.int64, np.int32)
# The rules the short paths stand for, as registered when they were installed: a rule
# registered later for the same function (mp.rrule(np.sin) by a user) turns its short path off.
_BUILTIN = {}


def _current(h, tape):
    """True, once ``h`` is up to date with its buffer on a MutatingTape (what its ``record``
    does first: a handle older than the last write is viewed again, or MutationError)."""
    if h._node < tape._max_write:
        v = h._value
        if type(v) is DualArray:
            v = v._value  # (its primal: the buffer _fresh looks up)
        # MutatingTape._fresh's first test, without the call: an array that owns its memory
        # and was never written is current (RK4's theta, read 16 times a step after writes)
        if type(v) is not _NDARRAY or v.base is not None or id(v) in tape._last_write:
            tape._fresh(h, "read", _getitem)
    return True


def _int_tuple(key):
    """Whether ``key`` is a tuple of ints (``y[i, j]``: one element of a 2-d array)."""
    for k in key:
        if type(k) is not int and type(k) not in _INT_KEYS:
            return False
    return True


_general_getitem = TrackedArray.__getitem__
_GETITEM_RULE = [None]  # _BUILTIN[operator.getitem], without the dict lookup per read
# TrackedArray(y, tape, node) without the Python-level __init__ call (~60 ns of ~700 per op):
# the hot paths below set the three slots __init__ sets.
_new = object.__new__


def _fast_getitem(self, key):
    tk = type(key)
    if tk is int or tk in _INT_KEYS or (tk is tuple and _int_tuple(key)):
        tape = self._tape
        tt = type(tape)
        # (the tape's checks, made once for both short paths: float64 and dual values)
        if (tt is Tape or (tt is MutatingTape and _current(self, tape))) and \
                not tape._debug and RRULES.get(_getitem) is _GETITEM_RULE[0] and \
                _SWEEPING.get() <= tape._level:
            v = self._value
            tv = type(v)
            if tv is _NDARRAY:
                # The same element read again at the same node (``theta[0]`` in every step of
                # a loop): the first read's node, whose cotangents the sweep then sums as
                # scalars before one add into the array's (see Tape._reads).
                n = self._node
                reads = tape._reads
                seen = None if reads is None else reads.get(n)
                if seen is not None and key in seen:  # (a miss: one lookup, no call)
                    pb = seen[key]
                    tape._read_misses = 0
                    r = _new(TrackedArray)
                    r._value, r._tape, r._node = pb.value, tape, pb.node
                    return r
                y = v[key]
                if type(y) is _F64:
                    node = len(tape._parents)
                    pb = _new(ItemRead)  # (ItemRead(v.shape, key) without the __init__ call)
                    # (pairs: an assignment of four names builds and unpacks a tuple)
                    pb.shape, pb.key = v.shape, key
                    tape._pullbacks.append(pb)
                    tape._parents.append((n, None))
                    tape._fns.append(_getitem)
                    if reads is not None:
                        remember_read(tape, reads, seen, n, key, pb, y, node)
                    r = _new(TrackedArray)
                    r._value, r._tape, r._node = y, tape, node
                    return r
            elif tv is DualArray:
                r = dual_scalars.getitem(self, key, v, tape)
                if r is not None:
                    return r
    return _general_getitem(self, key)


_general_setitem = TrackedArray.__setitem__


def _fast_setitem(self, key, value):
    """``y[i, k] = s``: one element of a float64 buffer (or, in an HVP, of a dual buffer)
    written with a float64 scalar, tracked on this tape or plain.

    The node is the general write's (Tape.write), field for field: a ``_Write`` holding the
    element's old value, the same parents, and the same entries in the write lists, so the
    sweep splits and restores it as it does any write. What is skipped is the general path's
    work that cannot change anything for such a write: the operand's freshness check (a
    float64 scalar owns no buffer a write could reach), is_basic_index, the view chain (none:
    see the ``base`` test below), the region's shape and copy (one immutable scalar) and the
    landing probe (an int key selects one position). Anything else (views written through,
    partial keys, other dtypes, debug mode, recording tapes, whose plans log each write) goes
    the general way."""
    tk = type(key)
    if tk is int or tk in _INT_KEYS or (tk is tuple and _int_tuple(key)):
        tape = self._tape
        tt = type(tape)
        if (tt is MutatingTape or tt is Tape) and not tape._debug and \
                _SWEEPING.get() <= tape._level:
            buf = self._value
            tb = type(buf)
            if tb is _NDARRAY:
                p = buf
            elif tb is DualArray and type(buf._value) is _NDARRAY:
                p = buf._value
            else:
                return _general_setitem(self, key, value)
            tv = type(value)
            # (vshape and vdtype: what Tape.write derives from the value, for these values)
            if tv is TrackedArray:
                vv = value._value
                tw = type(vv)
                if value._tape is not tape or not (tw is _F64 or (
                        tb is DualArray and tw is DualArray and type(vv._value) is _F64)):
                    return _general_setitem(self, key, value)
                vnode, vshape, vdtype = value._node, (), _F64_DT
            elif tv is _F64 or tv is float or tv is int:
                vv, vnode, vshape, vdtype = value, None, None, (_F64_DT if tv is _F64 else None)
            else:
                return _general_setitem(self, key, value)
            # A handle is a view of another (``_view``, walked by the general path) only if
            # its array has a base: an array that owns its memory skips that slot's lookup,
            # which costs ~0.9 us when it is unset (the AttributeError behind getattr).
            if p.base is not None and getattr(self, "_view", None) is not None:
                return _general_setitem(self, key, value)
            if tt is Tape:  # the first write, as Tape.write makes it
                tape.__class__ = MutatingTape
                begin_writes(tape)
            elif self._node < tape._max_write:
                tape._fresh(self, "write into")
            if tb is _NDARRAY:
                old = buf[key]  # (out of range: NumPy's IndexError, nothing recorded)
                if type(old) is not _F64:  # another dtype, or a key of fewer axes
                    return _general_setitem(self, key, value)
                buf[key] = vv
                wn = _Write(buf, key, old, None, True, (), vshape, vdtype)
            else:
                item_write = _tape_module._item_write
                wn = None if item_write is None else item_write(buf, key, vv, vshape, vdtype)
                if wn is None:  # (nothing written)
                    return _general_setitem(self, key, value)
            node = len(tape._parents)
            tape._pullbacks.append(wn)
            tape._parents.append((self._node, vnode))
            tape._fns.append(None)
            tape._writes.append(node)
            tape._splits.append(node)
            tape._last_write[id(p if p.base is None else buffer_root(p))] = node
            tape._max_write = node
            self._node = node
            return None
    return _general_setitem(self, key, value)


# The pullbacks below are the derivative table's formulas (rules/derivative_table.py) written
# out, in the same floating-point operations, for scalar operands (where unbroadcast is the
# identity): the results are bitwise those of the general rules.
# ``which``: 0 both operands tracked, 1 only the first, 2 only the second.
def _pb_add(a, b, y, which):
    return (lambda g: (g, g)) if which == 0 else (lambda g: (g, None)) if which == 1 else \
        (lambda g: (None, g))


def _pb_sub(a, b, y, which):
    return (lambda g: (g, -g)) if which == 0 else (lambda g: (g, None)) if which == 1 else \
        (lambda g: (None, -g))


def _pb_mul(a, b, y, which):
    return (lambda g: (g * b, g * a)) if which == 0 else (lambda g: (g * b, None)) \
        if which == 1 else (lambda g: (None, g * a))


def _pb_div(a, b, y, which):  # (div: NumPy's division also for a Python-number b = 0)
    return (lambda g: (g * div(1, b), g * div(-y, b))) if which == 0 else \
        (lambda g: (g * div(1, b), None)) if which == 1 else (lambda g: (None, g * div(-y, b)))


# The binary methods are generated from one template so that each has its operator inline
# (``v * w``: no operator-function call) and its pullback written in place (no factory call).
# The pullbacks are data the sweep recognises by type and runs inline (tape/pullbacks.py):
# shared Pass objects for + and -, a plain tuple of the two factors for *, a Quotient for /,
# rather than a closure whose cells and function object cost ~180 ns a node to make.
# Each gives what the matching _pb_* factory's pullback computes, operation for operation
# (tests/test_overhead_paths.py checks them bitwise against the general path).
_SHARED = {"pb_gg": Pass(False, 0), "pb_gn": Pass(False, 1), "pb_ng": Pass(False, 2),
           "pb_g_neg": Pass(True, 0), "pb_n_neg": Pass(True, 2)}
# Per operator: y from (a, b), and the pullback for which = 0 (both tracked), 1 (first), 2.
_FORMS = {
    "add": ("a + b", "pb_gg", "pb_gn", "pb_ng"),
    "sub": ("a - b", "pb_g_neg", "pb_gn", "pb_n_neg"),
    "mul": ("a * b", "(b, a)", "(b, None)", "(None, a)"),
    "truediv": ("a / b", "Quotient((b, y, 0))", "Quotient((b, y, 1))", "Quotient((b, y, 2))"),
}
_TEMPLATE = """
def {name}(self, other):
    tape = self._tape
    v = self._value
    tt = type(tape)
    if (tt is Tape or tt is MutatingTape) and type(v) is _F64 and not tape._debug:
        t = type(other)
        if t is TrackedArray:
            w = other._value
            if other._tape is tape and type(w) is _F64 and _SWEEPING.get() <= tape._level \
                    and RRULES.get(ufunc) is builtin:
                {ab}
                y = {y}
                if type(y) is _F64:
                    node = len(tape._parents)
                    tape._pullbacks.append({pb0})
                    tape._parents.append({parents})
                    tape._fns.append(ufunc)
                    r = _new(TrackedArray)
                    r._value, r._tape, r._node = y, tape, node
                    return r
        elif (t is _F64 or t is float or t is int) and _SWEEPING.get() <= tape._level and \
                RRULES.get(ufunc) is builtin:
            {ab_const}
            y = {y}
            if type(y) is _F64:
                node = len(tape._parents)
                tape._pullbacks.append({pb_const})
                tape._parents.append({parents_const})
                tape._fns.append(ufunc)
                r = _new(TrackedArray)
                r._value, r._tape, r._node = y, tape, node
                return r
    if type(v) is DualArray:
        r = dual_binary(self, other)
        if r is not None:
            return r
    return general(self, other)
"""


def _binary(ufunc, opname, reflected):
    name = f"__{'r' if reflected else ''}{opname}__"
    y, pb0, pb1, pb2 = _FORMS[opname]
    src = _TEMPLATE.format(
        name=name, y=y, pb0=pb0, reflected=reflected,
        ab="a, b = w, v" if reflected else "a, b = v, w",
        parents="(other._node, self._node)" if reflected else "(self._node, other._node)",
        ab_const="a, b = other, v" if reflected else "a, b = v, other",
        pb_const=pb2 if reflected else pb1,
        parents_const="(None, self._node)" if reflected else "(self._node, None)")
    ns = dict(_SHARED, Tape=Tape, MutatingTape=MutatingTape, TrackedArray=TrackedArray, _F64=_F64, _SWEEPING=_SWEEPING,
              RRULES=RRULES, ufunc=ufunc, _new=_new, DualArray=DualArray,
              dual_binary=None if dual_scalars is None else
              dual_scalars.binary_method(ufunc, reflected), builtin=_BUILTIN[ufunc],
              Quotient=Quotient,
              general=ArrayOps.__dict__[name])
    exec(compile(src, f"<mooncake_py fastpath {name}>", "exec"), ns)  # noqa: S102  (generated source, compiled here by design)
    return ns[name]


def _inplace_scalar(binary, general):
    """``s += v`` for a float64 scalar ``s``: a scalar has no buffer, so the general in-place
    operator returns NotImplemented and Python then calls ``s + v``; this calls it directly
    (``s += x[i]`` is the suite's scalar loop). A NotImplemented from ``binary`` sends Python
    down the same fallback as before."""
    def method(self, other):
        v = self._value
        if type(v) is _F64 or (type(v) is DualArray and type(v._value) is _F64):
            return binary(self, other)
        return general(self, other)
    method.__name__ = general.__name__
    return method


# Unary ufuncs of scalar-loop code whose derivative-table entry is the rule as registered (not
# np.absolute: rules/complex.py replaces its rule). The pullback evaluates the table's
# derivative at sweep time, as ew_pullback does, so the results are bitwise the same.
_UNARY_NAMES = ("sin", "cos", "tan", "exp", "log", "sqrt", "tanh", "sinh", "cosh", "arctan",
                "log1p", "expm1", "square", "negative")
_UNARY = {}


def _unary_pullback(d1, a, y):
    return lambda g: (g * d1(a, y),)


def _neg_pullback(d1, a, y):
    return lambda g: (-g,)


def _fast_unary(self, ufunc):
    """The node of ``ufunc(self)`` for a float64 scalar on a plain tape, or None."""
    how = _UNARY.get(ufunc)
    if how is None:
        return None
    tape = self._tape
    v = self._value
    tt = type(tape)
    # (a float64 scalar needs none of MutatingTape.record's freshness checks: module docstring)
    if (tt is not Tape and tt is not MutatingTape) or \
            type(v) is not _F64 or tape._debug or _SWEEPING.get() > tape._level:
        return None
    d1, pullback = how
    if RRULES.get(ufunc) is not _BUILTIN[ufunc]:  # a rule registered since: use it
        return None
    y = -v if pullback is _neg_pullback else ufunc(v)
    if type(y) is not _F64:
        return None
    node = len(tape._parents)
    tape._pullbacks.append(pullback(d1, v, y))
    tape._parents.append((self._node,))
    tape._fns.append(ufunc)
    r = _new(TrackedArray)
    r._value, r._tape, r._node = y, tape, node
    return r


_general_ufunc = TrackedArray.__array_ufunc__
_general_neg = ArrayOps.__neg__


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    if method == "__call__" and not kwargs and len(inputs) == 1 and inputs[0] is self:
        r = _fast_unary(self, ufunc)
        if r is None and type(self._value) is DualArray:
            r = dual_scalars.unary(self, ufunc)
        if r is not None:
            return r
    return _general_ufunc(self, ufunc, method, *inputs, **kwargs)


def _neg(self):
    r = _fast_unary(self, np.negative)
    if r is None and type(self._value) is DualArray:
        r = dual_scalars.unary(self, np.negative)
    return _general_neg(self) if r is None else r


_general_array_function = TrackedArray.__array_function__
_SUM = np.sum
_add_reduce = np.add.reduce


def _sum_pullback(shape):
    return lambda g: (broadcast_cotangent(g, shape),)


def _array_function(self, func, types, args, kwargs):
    # np.sum(x) of a float64 array, the usual last op of a loss: np.add.reduce over all axes is
    # what np.sum runs, and the pullback is the sum rule's for axis=None, no dtype, no where=.
    if func is _SUM and not kwargs and len(args) == 1 and args[0] is self:
        tape = self._tape
        v = self._value
        if type(tape) is Tape and type(v) is _NDARRAY and v.dtype.type is _F64 and v.ndim and \
                not tape._debug and RRULES.get(_SUM) is _BUILTIN[_SUM] and \
                _SWEEPING.get() <= tape._level:
            y = _add_reduce(v, axis=None)
            if type(y) is _F64:
                node = len(tape._parents)
                tape._pullbacks.append(_sum_pullback(v.shape))
                tape._parents.append((self._node,))
                tape._fns.append(_SUM)
                return TrackedArray(y, tape, node)
    return _general_array_function(self, func, types, args, kwargs)


def install(duals=None):
    """Put the short paths on TrackedArray (idempotent; mooncake_py/registration.py calls it).

    ``duals``: the module of the tracked-dual-scalar short paths (mixed/dual_scalars.py), which
    take over where the value of a tracked scalar is a dual; without it duals go the general way.
    """
    global DualArray, dual_scalars
    _BUILTIN[_getitem] = _GETITEM_RULE[0] = RRULES.get(_getitem)
    for uf in (np.add, np.subtract, np.multiply, np.true_divide):
        _BUILTIN[uf] = RRULES.get(uf)
    for name in _UNARY_NAMES:
        e = TABLE.get(name)
        if e is not None and e.nin == 1 and not e.constant:
            _UNARY[e.ufunc] = (e.np_d1[0], _neg_pullback if e.d1[0] == "-1" else
                               _unary_pullback)
            _BUILTIN[e.ufunc] = RRULES.get(e.ufunc)
    _BUILTIN[_SUM] = RRULES.get(_SUM)
    # (no short path: the rule the compiled replays' power steps stand for)
    _BUILTIN[np.power] = RRULES.get(np.power)
    if duals is not None:
        DualArray, dual_scalars = duals.DualArray, duals
        duals.install(set(_UNARY))
        _tape_module._scalar_add = duals.add
        _tape_module._SCALAR_DUAL = duals.DualArray
    TrackedArray.__array_function__ = _array_function
    TrackedArray.__array_ufunc__ = _array_ufunc
    TrackedArray.__neg__ = _neg
    TrackedArray.__getitem__ = _fast_getitem
    TrackedArray.__setitem__ = _fast_setitem
    for ufunc, opname in [(np.add, "add"), (np.subtract, "sub"), (np.multiply, "mul"),
                          (np.true_divide, "truediv")]:
        for reflected in (False, True):
            m = _binary(ufunc, opname, reflected)
            setattr(TrackedArray, m.__name__, m)
        setattr(TrackedArray, f"__i{opname}__", _inplace_scalar(
            getattr(TrackedArray, f"__{opname}__"), ArrayOps.__dict__[f"__i{opname}__"]))
