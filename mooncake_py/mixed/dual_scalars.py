"""Short paths for scalar loops under forward-over-reverse (``mp.hvp`` of ``s += np.sin(x[i])``).

An HVP records the reverse tape on dual numbers, so in a scalar loop every recorded op is a
TrackedArray holding a DualArray of one float64 primal and one float64 tangent. The general path
for such an op passes through the tape's ``record``, the op's rrule, the dual dispatch, the dual
frule's lane wrapper and two rounds of output checks; in the reverse sweep each pullback goes
through the same layers again, on dual cotangents. For ``x[i]`` (an int key), ``+ - * /`` and
fastpath.py's unary ufuncs this module records the node directly and sweeps it directly.

Bitwise equality with the general path holds by construction, not by transcription: the forward
tangent and the pullbacks call the very functions the general path ends in, the dual layer's
generated programs (``dual.elementwise.program(...).np_fn``) with the same arguments, followed by
the same casts; the pullback a node keeps holds the same operands (DualArrays or constants) as
the general rule's closure. For ``+ - * /`` and the unary ufuncs the methods, pullbacks and
the sweep's sum are generated (see the end of this module) with those programs' statements written inline, the text
codegen gives for them, so they compute the same operations without the call. Anything
unusual at sweep time (a cotangent that is not a scalar of this tag, a tag that has turned
complex) is handed to the general rule's own partial derivative functions.

Conditions (else the general path runs): a plain :class:`~mooncake_py.tape.tape.Tape` or
:class:`~mooncake_py.tape.tape.MutatingTape` not in debug mode and not sweeping, the built-in rule of the function, duals of one tag without lanes
that is neither closed nor complex, float64 NumPy scalars for primal and tangent, and
constants that are float64, float, or ints of at most 2**53 in magnitude.
"""
import operator
import re

import numpy as np

from ..dual.codegen import numpy_source, numpy_source_given
from ..dual.dual_array import DualArray
from ..dual.elementwise import _cast, _result_dtype, program, reusing_programs
from ..rules.broadcasting import shape_of, unbroadcast
from ..rules.cotangents import IndexedCotangent
from ..rules.derivative_table import NP_VOCABULARY, TABLE
from ..rules.elementwise import _partial
from ..rules.registry import RRULES
from ..tape.pullbacks import ItemRead
from ..tape.tape import _SWEEPING, MutatingTape, Tape, remember_read
from ..tape.tracked import TrackedArray

_F64 = np.float64
_F64_DT = np.dtype(np.float64)
_NDARRAY = np.ndarray
_MAX_INT = 2 ** 53
_new = object.__new__
getitem_fn = operator.getitem
# The tapes these paths record on: Tape and MutatingTape (tested with `is`, cheaper than a set
# lookup on every op). On a MutatingTape (one that has recorded a write) a dual
# scalar needs none of its freshness checks: its primal and tangent are NumPy scalars, which no
# write can reach; an item read brings its array up to date first, as MutatingTape.record does.
# (Without MutatingTape every op of an HVP of RK4's `y[i + 1, 0] = ...` loop took the general
# path.)


class _Op:
    """One elementwise op of the derivative table: its rule as registered at install time, the
    general rule's partial-derivative functions, and the dual layer's programs (memoised here by
    ``present``, without hashing the table entry on every call)."""
    __slots__ = (
        "_frules",
        "_pbs",
        "builtin",
        "entry",
        "forward_d",
        "nin",
        "partials",
        "pullbacks_d",
        "ufunc",
        "unit",
    )

    def __init__(self, entry):
        self.ufunc, self.entry, self.nin = entry.ufunc, entry, entry.nin
        self.builtin = RRULES.get(entry.ufunc)
        # "1" / "-1": the general rule returns g / -g without calling ew_pullback
        self.unit = tuple(d if d in ("1", "-1") else None for d in entry.d1)
        self.partials = tuple(_partial(entry, k) for k in range(entry.nin))
        self._frules = {}
        self._pbs = {}
        # made on first use (import stays fast): False until then
        self.forward_d, self.pullbacks_d = (False, None) if self.nin == 1 else (None, None)

    def reusing(self):
        """:attr:`forward_d`, made now if not yet (see
        :func:`~mooncake_py.dual.elementwise.reusing_programs`)."""
        if self.forward_d is False:
            self.forward_d, self.pullbacks_d = reusing_programs(self.entry)
        return self.forward_d

    def frule(self, present):
        p = self._frules.get(present)
        if p is None:
            p = self._frules[present] = program(self.entry, "f", 0, present, None)
        return p

    def pullback(self, k, present):
        key = (k, present)
        p = self._pbs.get(key)
        if p is None:
            p = self._pbs[key] = program(self.entry, "p", k, present, None)
        return p


_OPS = {}  # ufunc -> _Op, filled by install()
_NEGATIVE = []  # [the _Op of np.negative]: -g of a dual cotangent


def _scalar_dual(d, tag):
    """Whether ``d`` is a DualArray of ``tag`` holding a float64 scalar and its tangent."""
    return type(d) is DualArray and d._tag is tag and type(d._value) is _F64 and \
        type(d._tangent) is _F64


def _tangent_of(op, present, pa, pb, y, ta, tb):
    """The dual frule's tangent of ``op`` at float64 scalars, as ``elementwise._op_frule``'s
    ``native`` computes and casts it; None when its program has no tangent."""
    prog = op._frules.get(present) or op.frule(present)
    if not prog.has_tangent:
        return None
    ty, = prog.np_fn(pa, pb, y, None, ta, tb, None)
    # (not getattr(ty, "dtype", None) == float64: np.dtype(float64) == None holds, so a Python
    # 0 from select(ta == 0, 0, ...) kept its type where the general path gives float64 0.0)
    return ty if type(ty) is _F64 else _cast(ty, _F64_DT)


def _recordable(tape, op):
    tt = type(tape)
    return (tt is Tape or tt is MutatingTape) and not tape._debug and _SWEEPING.get() <= tape._level and \
        RRULES.get(op.ufunc) is op.builtin


def _record(tape, value, pullback, parents, fn):
    node = len(tape._parents)
    tape._pullbacks.append(pullback)
    tape._parents.append(parents)
    tape._fns.append(fn)
    r = _new(TrackedArray)  # (TrackedArray's three slots, as in fastpath.py)
    r._value, r._tape, r._node = value, tape, node
    return r


def binary(self, other, ufunc, reflected):
    """``self (op) other`` (``other (op) self`` if reflected) for a TrackedArray ``self`` holding
    a dual scalar, recorded directly; None when the general path must run."""
    op = _OPS.get(ufunc)
    d = self._value
    tape = self._tape
    # (the checks of _recordable and _scalar_dual, inline: this runs once per recorded op)
    tt = type(tape)
    if op is None or (tt is not Tape and tt is not MutatingTape) or tape._debug or \
            _SWEEPING.get() > tape._level or RRULES.get(ufunc) is not op.builtin:
        return None
    tag = d._tag
    if tag._watch or type(d._value) is not _F64 or type(d._tangent) is not _F64:
        return None
    t = type(other)
    if t is TrackedArray:
        e = other._value
        if other._tape is not tape or type(e) is not DualArray or e._tag is not tag or \
                type(e._value) is not _F64 or type(e._tangent) is not _F64:
            return None
        a, b = (e, d) if reflected else (d, e)
        pa, ta, pb, tb = a._value, a._tangent, b._value, b._tangent
        present = (True, True)
        parents = (other._node, self._node) if reflected else (self._node, other._node)
    elif t is _F64 or t is float or (t is int and -_MAX_INT <= other <= _MAX_INT):
        if reflected:
            a, b = other, d
            pa, ta, pb, tb = other, None, d._value, d._tangent
            present, parents = (False, True), (None, self._node)
        else:
            a, b = d, other
            pa, ta, pb, tb = d._value, d._tangent, other, None
            present, parents = (True, False), (self._node, None)
    else:
        return None
    made = _binary_node(op, ufunc, a, b, pa, ta, pb, tb, present, tag)
    if made is None:
        return None
    node = len(tape._parents)
    tape._pullbacks.append(made[1])
    tape._parents.append(parents)
    tape._fns.append(ufunc)
    r = _new(TrackedArray)
    r._value, r._tape, r._node = made[0], tape, node
    return r


def _binary_node(op, ufunc, a, b, pa, ta, pb, tb, present, tag):
    # The primal as the frule computes it (np.add(a, b) and a + b are the same IEEE operation)
    if ufunc is np.add:
        y = pa + pb
    elif ufunc is np.subtract:
        y = pa - pb
    elif ufunc is np.multiply:
        y = pa * pb
    else:
        y = ufunc(pa, pb)
    if type(y) is not _F64:
        return None
    ty = _tangent_of(op, present, pa, pb, y, ta, tb)
    if ty is None:
        return None
    yd = DualArray(y, ty, tag)
    return yd, _PULLBACKS.get((ufunc, present), DualPullback)(op, a, b, yd, present)


def _operand(x, tag):
    """(primal, tangent, is a dual) of a binary operand, or None if it is neither a dual
    scalar of ``tag`` (any tag if None) nor a number constant; the tag found."""
    if type(x) is DualArray:
        if (tag is not None and x._tag is not tag) or type(x._value) is not _F64 or \
                type(x._tangent) is not _F64:
            return None
        return x._value, x._tangent, True
    t = type(x)
    if t is _F64 or t is float or (t is int and -_MAX_INT <= x <= _MAX_INT):
        return x, None, False
    return None


def binary_node(ufunc, a, b):
    """``(y, pullback)`` for ``ufunc(a, b)`` (``ufunc`` one of np.add, np.subtract,
    np.multiply, np.true_divide) with the built-in rule: ``y`` the DualArray the general path
    gives, ``pullback`` computing what the general rule's pullback computes (a
    :class:`DualPullback`); None where the general path must run. ``a`` and ``b`` are dual
    scalars of one tag (see the module docstring) or numbers, at least one of them dual: the
    values of a recorded node, for callers that hold values rather than TrackedArrays (a
    replayed plan).

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> x = mp.dual(np.float64(3.0), np.float64(1.0))
        >>> y, pb = binary_node(np.multiply, x, 2.0)
        >>> float(mp.primal(y)), float(mp.tangent(y))
        (6.0, 2.0)
        >>> g, _ = pb(np.float64(1.0))
        >>> float(g)
        2.0
    """
    op = _OPS.get(ufunc)
    if op is None or op.nin != 2 or RRULES.get(ufunc) is not op.builtin:
        return None
    tag = a._tag if type(a) is DualArray else b._tag if type(b) is DualArray else None
    if tag is None or tag._watch or tag.lanes:
        return None
    oa, ob = _operand(a, tag), _operand(b, tag)
    if oa is None or ob is None:
        return None
    return _binary_node(op, ufunc, a, b, oa[0], oa[1], ob[0], ob[1], (oa[2], ob[2]), tag)


def unary_node(ufunc, d):
    """``(y, pullback)`` for ``ufunc(d)``, ``d`` a dual scalar and ``ufunc`` one of
    fastpath.py's unary ufuncs with its built-in rule; None where the general path must run.
    See :func:`binary_node`.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> y, pb = unary_node(np.exp, mp.dual(np.float64(0.0), np.float64(2.0)))
        >>> float(mp.tangent(y))
        2.0
    """
    op = _OPS.get(ufunc)
    if op is None or op.nin != 1 or RRULES.get(ufunc) is not op.builtin or \
            type(d) is not DualArray:
        return None
    tag = d._tag
    if tag._watch or tag.lanes or type(d._value) is not _F64 or type(d._tangent) is not _F64:
        return None
    return _unary_node(op, ufunc, d, tag)


def _unary_node(op, ufunc, d, tag):
    pa, ta = d._value, d._tangent
    y = ufunc(pa)
    if type(y) is not _F64:
        return None
    fwd = op.forward_d
    if fwd is False:
        fwd = op.reusing()
    if fwd is not None:  # (_tangent_of's program and cast, keeping the derivative)
        d1, ty = fwd(pa, y, ta)
        if type(ty) is not _F64:  # (see _tangent_of)
            ty = _cast(ty, _F64_DT)
        yd = DualArray(y, ty, tag)
        return yd, DualPullback(op, d, None, yd, (True,), d1)
    ty = _tangent_of(op, (True,), pa, None, y, ta, None)
    if ty is None:
        return None
    yd = DualArray(y, ty, tag)
    return yd, DualPullback(op, d, None, yd, (True,))


def unary(self, ufunc):
    """``ufunc(self)`` for a TrackedArray holding a dual scalar (fastpath.py's unary ufuncs),
    recorded directly; None when the general path must run."""
    m = _UNARY_METHODS.get(ufunc)
    return _unary_general(self, ufunc) if m is None else m(self)


def _unary_general(self, ufunc):
    """:func:`unary` by the op's program calls (what the generated methods fall back on)."""
    op = _OPS.get(ufunc)
    if op is None or op.nin != 1:
        return None
    tape = self._tape
    d = self._value
    if not _recordable(tape, op):
        return None
    tag = d._tag
    if tag._watch or not _scalar_dual(d, tag):
        return None
    made = _unary_node(op, ufunc, d, tag)
    if made is None:
        return None
    return _record(tape, made[0], made[1], (self._node,), ufunc)


def getitem(self, key, d, tape):
    """``self[key]``, an int key into a float64 array of duals ``d`` (``self``'s value) without
    lanes: the node the general getitem rule records (its pullback is ItemRead's), with the
    tangent the getitem frule reads; None when the general path must run. The caller
    (fastpath.py's ``__getitem__``) has made the checks of ``tape`` (``self``'s): a plain Tape
    or MutatingTape (where ``self`` is brought up to date first, as MutatingTape.record does),
    not in debug mode, not sweeping, the built-in getitem rule. The same element read again at
    the same node is the first read's node and dual (see Tape._reads)."""
    tag = d._tag
    p, t = d._value, d._tangent
    if tag._watch or tag.lanes or type(p) is not _NDARRAY or type(t) is not _NDARRAY:
        return None
    n = self._node
    reads = tape._reads
    seen = None if reads is None else reads.get(n)
    if seen is not None and key in seen:  # (a miss: one lookup, no call)
        pb = seen[key]
        tape._read_misses = 0
        r = _new(TrackedArray)
        r._value, r._tape, r._node = pb.value, tape, pb.node
        return r
    y = p[key]
    if type(y) is not _F64:
        return None
    ty = t[key]
    if type(ty) is not _F64:
        return None
    # (_record and DualArray(y, ty, tag) written out: RK4 reads theta[k] a dozen times a step)
    yd = _new(DualArray)
    # (pairs: an assignment of four names builds and unpacks a tuple)
    yd._value, yd._tangent = y, ty
    yd._tag, yd._kept = tag, None
    node = len(tape._parents)
    pb = _new(ItemRead)
    pb.shape, pb.key = p.shape, key
    tape._pullbacks.append(pb)
    tape._parents.append((n, None))
    tape._fns.append(getitem_fn)
    if reads is not None:
        remember_read(tape, reads, seen, n, key, pb, yd, node)
    r = _new(TrackedArray)
    r._value, r._tape, r._node = yd, tape, node
    return r


class DualPullback:
    """The pullback of an elementwise op recorded by this module: what the general rule's
    pullback returns (``unbroadcast(partial_k(g, a, b, y), shape_of(a_k))`` per tracked
    operand), computed directly for a scalar cotangent (plain float64, or a dual of the same
    tag) and by the general rule's own partials for anything else.

    ``a``, ``b``: the operands as the general rule saw them (DualArrays, or constants); ``y``:
    the DualArray output; ``present``: which operands are tracked duals.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> mp.hvp(lambda x: x[0] * x[1])(np.array([2.0, 3.0]), np.array([1.0, 0.0]))
        array([0., 1.])
    """
    __slots__ = ("a", "b", "d1", "op", "present", "y")

    def __init__(self, op, a, b, y, present, d1=None):
        self.op, self.a, self.b, self.y, self.present = op, a, b, y, present
        self.d1 = d1  # the forward's first derivative (unary ops with reusing programs)

    def __call__(self, g):
        present = self.present
        tag = self.y._tag
        tg = type(g)
        if tg is DualArray:  # a dual cotangent: of this tag, scalar, tag still real and open
            if g._tag is not tag or tag._watch or type(g._value) is not _F64 or \
                    type(g._tangent) is not _F64:
                return self._all_general(g)
            gp, gt = g._value, g._tangent
        elif tg is _F64 or (tg is _NDARRAY and g.shape == () and g.dtype == _F64_DT):
            gp, gt = g, None
        else:
            return self._all_general(g)
        if len(present) == 1:
            return (self._partial(0, g, gp, gt),)
        return (self._partial(0, g, gp, gt) if present[0] else None,
                self._partial(1, g, gp, gt) if present[1] else None)

    def _all_general(self, g):
        present = self.present
        if len(present) == 1:
            return (self._general(0, g),)
        return (self._general(0, g) if present[0] else None,
                self._general(1, g) if present[1] else None)

    def _partial(self, k, g, gp, gt):
        """Partial ``k`` for a scalar cotangent ``g`` (primal ``gp``, tangent ``gt`` or None)."""
        op, y = self.op, self.y
        unit = op.unit[k]
        if unit == "1":
            return g
        if unit == "-1":
            if gt is None:
                return -g
            y0 = np.negative(gp)
            return DualArray(y0, _tangent_of(_NEGATIVE[0], (True,), gp, None, y0, gt, None),
                             y._tag)
        a = self.a
        d1 = self.d1
        if d1 is not None:  # a unary node of a dual scalar: its derivative is known
            fn, has_tangent = op.pullbacks_d[gt is not None]
            out = fn(d1, a._value, y._value, gp, a._tangent, gt)
            r = out[0]
            if type(gp) is _F64 and type(r) is _F64:  # (the casts below leave these alone)
                if not has_tangent:
                    return r
                if type(out[1]) is _F64:
                    return DualArray(r, out[1], y._tag)
            dt = _F64_DT if type(gp) is _F64 else _result_dtype(gp, y._value)
            r = _cast(out[0], dt)
            if not has_tangent:
                return r
            tr = _cast(out[1], dt)
            if type(r) is _NDARRAY or getattr(r, "dtype", None) != _F64_DT or \
                    tr.dtype != _F64_DT:
                return self._general(k, g)
            return DualArray(r, tr, y._tag)
        ad = type(a) is DualArray
        pa, ta = (a._value, a._tangent) if ad else (a, None)
        if op.nin == 1:
            pb = tb = None
            present = (gt is not None, ad)
        else:
            b = self.b
            bd = type(b) is DualArray
            pb, tb = (b._value, b._tangent) if bd else (b, None)
            present = (gt is not None, ad, bd)
        prog = op._pbs.get((k, present)) or op.pullback(k, present)
        dt = _F64_DT if type(gp) is _F64 else _result_dtype(gp, y._value)
        out = prog.np_fn(pa, pb, y._value, gp, ta, tb, gt)
        r = _cast(out[0], dt)
        if not prog.has_tangent:
            return r
        tr = _cast(out[1], dt)
        if type(r) is _NDARRAY or getattr(r, "dtype", None) != _F64_DT or tr.dtype != _F64_DT:
            return self._general(k, g)  # (the dual layer would pair or convert these)
        return DualArray(r, tr, y._tag)

    def _general(self, k, g):
        op = self.op
        if op.nin == 1:
            return op.partials[0](g, self.a, self.y)
        a, b = self.a, self.b
        return unbroadcast(op.partials[k](g, a, b, self.y), shape_of(a if k == 0 else b))


def _add_general(cur, g):
    """``cur + g`` for two cotangent contributions to one node when one of them is a dual
    scalar (the other a dual scalar of its tag or a float64 scalar): the add frule's result,
    computed directly; None for anything else (the sweep then adds them the general way)."""
    tc, tg = type(cur), type(g)
    if tc is DualArray:
        tag = cur._tag
        if tag._watch or not _scalar_dual(cur, tag):
            return None
        if tg is DualArray:
            if not _scalar_dual(g, tag):
                return None
            present, pa, ta, pb, tb = (True, True), cur._value, cur._tangent, g._value, g._tangent
        elif tg is _F64:
            present, pa, ta, pb, tb = (True, False), cur._value, cur._tangent, g, None
        else:
            return None
    elif tc is _F64 and tg is DualArray:
        tag = g._tag
        if tag._watch or not _scalar_dual(g, tag):
            return None
        present, pa, ta, pb, tb = (False, True), cur, None, g._value, g._tangent
    else:
        return None
    op = _OPS[np.add]
    y = pa + pb
    if type(y) is not _F64:
        return None
    ty = _tangent_of(op, present, pa, pb, y, ta, tb)
    return None if ty is None else DualArray(y, ty, tag)


def item_add(cts, owned, p, key, shape, G):
    """The tape's hook (``tape._item_add``): the cotangent ``G`` of a read ``x[key]`` (``x`` a
    float64 array of ``shape``, ``key`` ints selecting one element), added into node ``p``'s
    cotangent in place when that is a dense dual buffer the sweep owns; on the second read of
    ``x`` that buffer is made from the first read's sparse contribution. Whether it did; False
    (nothing changed) where the general path must run.

    The general path collects every read in an IndexedCotangentList and scatters it at the end
    with ``np.add.at`` from zeros, or (into an owned buffer) adds through DualArray's getitem,
    add and write: in both the primal and the tangent of each element receive the reads' parts
    one ``+`` at a time, in sweep order, which is what the two ``+=`` below do (the add frule's
    tangent is ``ta + tb``): bitwise the same, without a node object, a list entry and a dual
    scalar per read, nor the stacking of all of them at the end.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> f = lambda x: x[0] * x[0] * x[1] + x[0]
        >>> mp.hvp(f)(np.array([2.0, 3.0]), np.array([1.0, 0.0]))
        array([6., 4.])
    """
    tag = G._tag
    gp, gt = G._value, G._tangent
    if tag._watch or type(gp) is not _F64 or type(gt) is not _F64:
        return False
    cur = cts[p]
    tc = type(cur)
    if tc is DualArray:
        if cur._tag is not tag or p not in owned:
            return False
        bp, bt = cur._value, cur._tangent
        if type(bp) is not _NDARRAY or type(bt) is not _NDARRAY or bp.dtype.type is not _F64 \
                or bt.dtype.type is not _F64 or not bp.flags.writeable or \
                not bt.flags.writeable:
            return False
        bp[key] += gp
        bt[key] += gt
        return True
    if tc is not IndexedCotangent or not cur.basic or cur.shape != shape:
        return False  # (None: the first read stays sparse, as the float64 sweep keeps it)
    v = cur.values
    if type(v) is not DualArray or v._tag is not tag or type(v._value) is not _F64 or \
            type(v._tangent) is not _F64 or not _one_element(cur.index, len(shape)):
        return False
    bp, bt = np.zeros(shape), np.zeros(shape)
    k = cur.index
    bp[k] += v._value
    bt[k] += v._tangent
    bp[key] += gp
    bt[key] += gt
    r = _new(DualArray)
    r._value, r._tangent, r._tag, r._kept = bp, bt, tag, None
    cts[p] = r
    owned.add(p)
    return True


def _one_element(index, ndim):
    """Whether ``index`` is ints, one per axis of ``ndim`` (an item read's key)."""
    if type(index) is not tuple:
        index = (index,)
    return len(index) == ndim and all(isinstance(k, (int, np.integer)) and
                                      not isinstance(k, bool) for k in index)


def install(unary_ufuncs):
    """Build the op table for ``+ - * /`` and ``unary_ufuncs`` (fastpath.py's list) from the
    rules registered now (a rule registered later turns that op's short path off)."""
    _OPS.clear()
    for e in TABLE.values():
        if (e.ufunc in (np.add, np.subtract, np.multiply, np.true_divide) or \
                e.ufunc in unary_ufuncs) and not e.constant and e.ufunc not in _OPS:
            _OPS[e.ufunc] = _Op(e)
    _NEGATIVE[:] = [_OPS[np.negative]]
    _PULLBACKS.clear()
    for uf in (np.add, np.subtract, np.multiply, np.true_divide):
        for present in ((True, True), (True, False), (False, True)):
            _PULLBACKS[uf, present] = _pullback_class(_OPS[uf], present)
    global add
    add = _generated_add(_OPS[np.add])
    _UNARY_METHODS.clear()
    for uf, op in _OPS.items():
        if op.nin == 1:
            _UNARY_METHODS[uf] = unary_method(op)


# --- generated short paths ------------------------------------------------------------------
# binary() and DualPullback above look up the op's program and call it per op, then cast and
# check its outputs; in a scalar loop that bookkeeping is most of an HVP's cost. The functions
# below are generated once per (op, which operands are duals) with the statements of those very
# programs inline (the text codegen.numpy_source gives them, so every value is computed by the
# same operations in the same order as the general path: bitwise the same), and hand anything
# they cannot finish as float64 scalars to the functions above.
_PULLBACKS = {}  # (ufunc, present) -> DualPullback subclass with a generated __call__


def _statements(prog, given=()):
    """(source lines, names returned) of a program's NumPy function, without its def line."""
    lines = numpy_source(prog.ir, "f", given=given).split("\n")
    ret = lines[-1].strip()
    if not (ret.startswith("return (") and ret.endswith(")")):
        raise AssertionError(f"not a program's return: {ret}")
    names = [n.strip() for n in ret[len("return ("):-1].split(",") if n.strip()]
    return [ln.strip() for ln in lines[1:-1]], names


def _indent(lines, n):
    return "\n".join(" " * n + ln for ln in lines)


def _exec(src, name, ns):
    env = dict(NP_VOCABULARY)
    env.update(ns)
    exec(compile(src, f"<mooncake_py dual_scalars {name}>", "exec"), env)  # noqa: S102  (generated source, compiled here by design)
    return env[name]


# (The templates assign one name a line, or two: a tuple assignment of four or more names builds
# and unpacks a tuple on every call, and these run once per recorded op or pulled-back node.)


def _dual(name, r, tr, fallback, indent):
    """Lines making DualArray(r, tr, _tag) into ``name`` (its four slots, no __init__ call), or
    ``fallback`` when a value is not a float64 scalar (the general code then casts it)."""
    return _indent([f"if type({r}) is not _F64 or type({tr}) is not _F64:",
                    f"    return {fallback}",
                    f"{name} = _new(DualArray)",
                    f"{name}._value = {r}", f"{name}._tangent = {tr}",
                    f"{name}._tag = _tag", f"{name}._kept = None"], indent)


# the start of every generated dual pullback's __call__: a dual cotangent of another tag, a
# watched tag or non-float64 parts go the general way (_slow)
_PB_PRELUDE = """
def __call__(self, G):
    Y = self.y
    _tag = Y._tag
    _k = type(G)
    if _k is DualArray:
        if G._tag is not _tag or _tag._watch:
            return _slow(self, G)
        g, tg = G._value, G._tangent
        if type(g) is not _F64 or type(tg) is not _F64:
            return _slow(self, G)
"""


_PB_TEMPLATE = _PB_PRELUDE + """{operands}
{y_dual}{dual_blocks}
        return ({rets})
    if _k is _F64:
        g, tg = G, None
{operands}
{y_plain}{plain_blocks}
        return ({rets})
    return _slow(self, G)
"""


def _primal_line(block):
    """``y = Y._value`` (a line of _PB_TEMPLATE) if ``block`` reads ``y``, else nothing."""
    return "        y = Y._value\n" if re.search(r"\by\b", block) else ""


def _pullback_class(op, present):
    """A DualPullback for ``op`` with operands ``present`` whose call does the work of
    DualPullback.__call__ inline for a float64 or dual scalar cotangent."""
    operands = []
    for k, (v, t) in enumerate((("a", "ta"), ("b", "tb"))):
        src = "self." + v
        operands.append(f"{v}, {t} = {src}._value, {src}._tangent" if present[k] else
                        f"{v}, {t} = {src}, None")
    blocks = {}
    for gdual in (True, False):
        lines = []
        for k in range(2):
            if not present[k]:
                continue
            if op.unit[k] == "1":  # (as DualPullback: the cotangent itself)
                lines.append(f"R{k} = G")
                continue
            body, names = _statements(op.pullback(k, (gdual,) + tuple(present)))
            lines += body
            if names == ["r", "tr"]:
                lines.append(_dual(f"R{k}", "r", "tr", "_slow(self, G)", 0))
            elif names == ["r"]:
                lines += ["if type(r) is not _F64:", "    return _slow(self, G)", f"R{k} = r"]
            else:
                return DualPullback
        blocks[gdual] = _indent("\n".join(lines).split("\n"), 8)
    rets = ", ".join(f"R{k}" if present[k] else "None" for k in range(2))
    # (the output's primal only where a partial reads it: `*`, `+` and `-` do not, and a
    # pullback call is a few dozen bytecodes, of which this would be two)
    src = _PB_TEMPLATE.format(operands=_indent(operands, 8), dual_blocks=blocks[True],
                              plain_blocks=blocks[False], rets=rets,
                              y_dual=_primal_line(blocks[True]),
                              y_plain=_primal_line(blocks[False]))
    call = _exec(src, "__call__", {"DualArray": DualArray, "_F64": _F64, "_new": _new,
                                   "_slow": DualPullback.__call__})
    return type(f"DualPullback_{op.ufunc.__name__}_{int(present[0])}{int(present[1])}",
                (DualPullback,), {"__slots__": (), "__call__": call,
                                  "__doc__": DualPullback.__doc__})


# The checks of a generated method, before any work: a plain Tape or MutatingTape of this
# value, not in debug mode, not sweeping, the ufunc's built-in rule (not a user's).
_METHOD_CHECKS = """
    tape = self._tape
    tt = type(tape)
    if (tt is not Tape and tt is not MutatingTape) or tape._debug or \\
            _SWEEPING.get() > tape._level or RRULES.get(ufunc) is not builtin:
        return None
"""

_BINARY_TEMPLATE = """
def method(self, other):""" + _METHOD_CHECKS + """    d = self._value
    _tag = d._tag
    p, t = d._value, d._tangent
    if _tag._watch or type(p) is not _F64 or type(t) is not _F64:
        return None
    _k = type(other)
    if _k is TrackedArray:
        e = other._value
        if other._tape is not tape or type(e) is not DualArray or e._tag is not _tag:
            return None
        q, s = e._value, e._tangent
        if type(q) is not _F64 or type(s) is not _F64:
            return None
        {ab_tracked}
        y = {y}
        if type(y) is not _F64:
            return None
{body_tracked}
        if type(ty) is not _F64:
            return binary(self, other, ufunc, {reflected})
        pb = _new(PB_TRACKED)
        pb.a, pb.b = {AB_tracked}
        pb.present = {present_tracked}
        parents = {parents_tracked}
    elif _k is _F64 or _k is float or (_k is int and -_MAX_INT <= other <= _MAX_INT):
        {ab_const}
        y = {y}
        if type(y) is not _F64:
            return None
{body_const}
        if type(ty) is not _F64:
            return binary(self, other, ufunc, {reflected})
        pb = _new(PB_CONST)
        pb.a, pb.b = {AB_const}
        pb.present = {present_const}
        parents = {parents_const}
    else:
        return None
    yd = _new(DualArray)
    yd._value = y
    yd._tangent = ty
    yd._tag = _tag
    yd._kept = None
    pb.op = op
    pb.y = yd
    pb.d1 = None
    node = len(tape._parents)
    tape._pullbacks.append(pb)
    tape._parents.append(parents)
    tape._fns.append(ufunc)
    r = _new(TrackedArray)
    r._value = yd
    r._tape = tape
    r._node = node
    return r
"""


def binary_method(ufunc, reflected):
    """:func:`binary` for ``ufunc`` (one of ``+ - * /``) and ``reflected``, generated with the
    op's frule statements inline: ``method(self, other)``, the node, or None when the general
    path must run."""
    op = _OPS.get(ufunc)
    if op is None:
        return lambda self, other: binary(self, other, ufunc, reflected)
    present_tracked = (True, True)
    present_const = (False, True) if reflected else (True, False)
    bodies = []
    for present in (present_tracked, present_const):
        body, names = _statements(op.frule(present), given=("y",))
        if names != ["ty"]:
            return lambda self, other: binary(self, other, ufunc, reflected)
        bodies.append(_indent(body, 8))
    y = {np.add: "a + b", np.subtract: "a - b", np.multiply: "a * b"}.get(ufunc, "ufunc(a, b)")
    src = _BINARY_TEMPLATE.format(
        y=y, reflected=reflected, body_tracked=bodies[0], body_const=bodies[1],
        ab_tracked="a, ta = q, s\n        b, tb = p, t" if reflected else
        "a, ta = p, t\n        b, tb = q, s",
        AB_tracked="e, d" if reflected else "d, e", present_tracked=present_tracked,
        parents_tracked="(other._node, self._node)" if reflected else "(self._node, other._node)",
        ab_const="a, ta = other, None\n        b, tb = p, t" if reflected else
        "a, ta = p, t\n        b, tb = other, None",
        AB_const="other, d" if reflected else "d, other", present_const=present_const,
        parents_const="(None, self._node)" if reflected else "(self._node, None)")
    return _exec(src, "method", {
        "Tape": Tape, "MutatingTape": MutatingTape, "TrackedArray": TrackedArray,
        "DualArray": DualArray, "_F64": _F64, "_SWEEPING": _SWEEPING, "RRULES": RRULES,
        "ufunc": ufunc, "builtin": op.builtin, "op": op, "_new": _new, "_MAX_INT": _MAX_INT,
        "binary": binary, "PB_TRACKED": _PULLBACKS.get((ufunc, present_tracked), DualPullback),
        "PB_CONST": _PULLBACKS.get((ufunc, present_const), DualPullback)})


_ADD_TEMPLATE = """
def add(cur, G):
    _c, _k = type(cur), type(G)
    if _c is DualArray:
        _tag = cur._tag
        a, ta = cur._value, cur._tangent
        if _tag._watch or type(a) is not _F64 or type(ta) is not _F64:
            return None
        if _k is DualArray:
            b, tb = G._value, G._tangent
            if G._tag is not _tag or type(b) is not _F64 or type(tb) is not _F64:
                return None
            y = a + b
{body_tt}
        elif _k is _F64:
            b, tb = G, None
            y = a + b
{body_tf}
        else:
            return None
    elif _c is _F64 and _k is DualArray:
        _tag = G._tag
        b, tb = G._value, G._tangent
        if _tag._watch or type(b) is not _F64 or type(tb) is not _F64:
            return None
        a, ta = cur, None
        y = a + b
{body_ft}
    else:
        return None
    if type(y) is not _F64 or type(ty) is not _F64:
        return _add_general(cur, G)
    r = _new(DualArray)
    r._value = y
    r._tangent = ty
    r._tag = _tag
    r._kept = None
    return r
"""


def _generated_add(op):
    """:func:`_add_general` with the add frule's statements inline (same contract)."""
    bodies = {}
    for key, present in (("tt", (True, True)), ("tf", (True, False)), ("ft", (False, True))):
        body, names = _statements(op.frule(present), given=("y",))
        if names != ["ty"]:
            return _add_general
        bodies["body_" + key] = _indent(body, 12 if key != "ft" else 8)
    return _exec(_ADD_TEMPLATE.format(**bodies), "add", {
        "DualArray": DualArray, "_F64": _F64, "_new": _new, "_add_general": _add_general})


add = _add_general  # (install() puts the generated one here)


# --- generated unary steps ------------------------------------------------------------------
# unary() above checks, looks up the op's reusing programs, calls the forward, casts, builds
# the node; its DualPullback then picks a program by the cotangent's kind, calls it and checks
# its outputs. As for + - * /, the method and pullback below are generated once per ufunc with
# those programs' statements inline (the text codegen gives, in its order: bitwise the same),
# and hand whatever is not a float64 scalar to the code above.
_UNARY_METHODS = {}  # ufunc -> generated method(self), filled by install()


def _given_statements(ir, given, returns):
    """Source lines of :func:`~mooncake_py.dual.codegen.numpy_source_given` for ``ir`` (the
    function reusing_programs runs), without its def and return lines."""
    lines = numpy_source_given(ir, "f", (), given, returns).split("\n")
    return [ln.strip() for ln in lines[1:-1]]


_UNARY_PB_TEMPLATE = _PB_PRELUDE + """        _A = self.a
        a, ta = _A._value, _A._tangent
        y = Y._value
{dual_block}
        return (R0,)
    if _k is _F64:
        g, tg = G, None
        _A = self.a
        a, ta = _A._value, _A._tangent
        y = Y._value
{plain_block}
        return (R0,)
    return _slow(self, G)
"""


def _result_lines(names):
    """Lines binding R0 to a program's outputs ``names`` (r, or r and tr), or None."""
    if names == ["r", "tr"]:
        return _dual("R0", "r", "tr", "_slow(self, G)", 0).split("\n")
    if names == ["r"]:
        return ["if type(r) is not _F64:", "    return _slow(self, G)", "R0 = r"]
    return None


def _unary_pullback_class(op):
    """A DualPullback for the unary ``op`` whose call does DualPullback._partial's work inline
    for a float64 or dual scalar cotangent; DualPullback itself where the programs have an
    unexpected form."""
    blocks = {}
    reusing = op.reusing() is not None
    for gdual in (True, False):
        present = (gdual, True)
        if op.unit[0] == "-1":  # (as DualPullback: -g, or the negative's frule on g)
            if not gdual:
                lines = ["R0 = -g"]
            else:
                body, names = _statements(_NEGATIVE[0].frule((True,)), given=("y",))
                if names != ["ty"]:
                    return DualPullback
                lines = ["_r = _negative(g)", "a, ta = g, tg"] + body + \
                    _dual("R0", "_r", "ty", "_slow(self, G)", 0).split("\n")
        elif op.unit[0] == "1":
            lines = ["R0 = G"]
        elif reusing:  # d: the forward's first derivative, kept on the node
            ir = program(op.entry, "p", 0, present).ir
            names = ["r"] + list(ir.touts)
            lines = ["d = self.d1"] + _given_statements(ir, ("d",), names)
            res = _result_lines(names)
            if res is None:
                return DualPullback
            lines += res
        else:
            body, names = _statements(op.pullback(0, present))
            res = _result_lines(names)
            if res is None:
                return DualPullback
            lines = body + res
        blocks[gdual] = _indent(lines, 8)
    src = _UNARY_PB_TEMPLATE.format(dual_block=blocks[True], plain_block=blocks[False])
    call = _exec(src, "__call__", {"DualArray": DualArray, "_F64": _F64, "_new": _new,
                                   "_negative": np.negative, "_slow": DualPullback.__call__})
    return type(f"DualPullback_{op.ufunc.__name__}", (DualPullback,),
                {"__slots__": (), "__call__": call, "__doc__": DualPullback.__doc__})


_UNARY_TEMPLATE = """
def method(self):""" + _METHOD_CHECKS + """    _d = self._value
    _tag = _d._tag
    a, ta = _d._value, _d._tangent
    if _tag._watch or type(a) is not _F64 or type(ta) is not _F64:
        return None
    y = ufunc(a)
    if type(y) is not _F64:
        return None
{body}
    if type(ty) is not _F64:
        return _unary(self, ufunc)
    yd = _new(DualArray)
    yd._value = y
    yd._tangent = ty
    yd._tag = _tag
    yd._kept = None
    pb = _new(PB)
    pb.op = op
    pb.a = _d
    pb.b = None
    pb.y = yd
    pb.present = _PRESENT
    pb.d1 = {d1}
    node = len(tape._parents)
    tape._pullbacks.append(pb)
    tape._parents.append((self._node,))
    tape._fns.append(ufunc)
    r = _new(TrackedArray)
    r._value = yd
    r._tape = tape
    r._node = node
    return r
"""


def unary_method(op):
    """:func:`unary` for the unary ``op``, generated with its frule statements inline:
    ``method(self)``, the node, or None when the general path must run."""
    ufunc = op.ufunc
    if op.reusing() is not None:  # (the forward reusing_programs runs: d0 kept for the sweep)
        body = _given_statements(program(op.entry, "f", 0, (True,)).ir, ("y",), ("d0", "ty"))
        d1 = "d0"
    else:
        body, names = _statements(op.frule((True,)), given=("y",))
        if names != ["ty"]:
            return lambda self: unary(self, ufunc)
        d1 = "None"
    return _exec(_UNARY_TEMPLATE.format(body=_indent(body, 4), d1=d1), "method", {
        "Tape": Tape, "MutatingTape": MutatingTape, "TrackedArray": TrackedArray,
        "DualArray": DualArray, "_F64": _F64, "_SWEEPING": _SWEEPING, "RRULES": RRULES,
        "ufunc": ufunc, "builtin": op.builtin, "op": op, "_new": _new, "_PRESENT": (True,),
        "_unary": _unary_general, "PB": _unary_pullback_class(op)})
