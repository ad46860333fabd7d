"""The tape: records each operation's pullback and runs them backwards once.

A recorded operation is a *node*: its pullback and, per positional argument, the node that
argument came from (``None`` for a constant, a tuple for a list/tuple argument). Nodes live in
two parallel lists, indexed by the position TrackedArrays carry, so recording costs two appends
and one TrackedArray.

Writes (``y[key] = v``, ``y += v``, ``out=``) are nodes too: see :meth:`Tape.write`. A tape that
has seen a write becomes a :class:`MutatingTape`, which checks every value it records for
aliasing and restores overwritten regions during the sweep; a tape that never writes pays
nothing for either.
"""
import bisect
import contextvars
import operator
import sys

import numpy as np

from ..config import current_config
from ..core import array_module as am
from ..core.arguments import kwargs_to_positional
from ..core.array_ops import WRITTEN_INTO_PLAIN, buffer_root, has_buffer, innermost, write_out
from ..core.dispatch import WRAPPER_TYPES, new_level
from ..errors import (
    EscapedValueError,
    MissingRuleError,
    MutationError,
    NonDifferentiableInputError,
    ReverseOverReverseError,
    RuleError,
    TrackingLostError,
    escaped_message,
    raise_lost_error_behind,
)
from ..rules import BUILTIN_RRULES
from ..rules.broadcasting import shape_of, unbroadcast
from ..rules.complex import (
    HOLOMORPHIC,
    HolomorphicPullback,
    RealParts,
    check_complex_call,
    has_complex,
    real_inputs,
)
from ..rules.cotangents import IndexedCotangent, IndexedCotangentList
from ..rules.derivative_table import load_for
from ..rules.indexing import _frozen, is_basic_index
from ..rules.mutation import MUTATORS, NoDerivative, call_like
from ..rules.registry import COMPOSITES, RRULES, ZERO_DERIVATIVE, fn_name, missing_rule_message
from .pullbacks import ItemRead, Pass, cotangents
from .tracked import TrackedArray, _lost_message

# Tape._reads stops (is set to None) after this many item reads in a row that were not
# repeats: each new read costs the memo a lookup and an insert (~2.8% of the unprepared HVP
# of a loop that reads each element once, `s += x[i]`), which only repeats pay back. A loop
# that repeats reads (theta[k] in each step) resets the count long before.
READ_MISSES = 64
# Level of the tape whose reverse sweep is running in this context (0: none).
_SWEEPING = contextvars.ContextVar("mooncake_sweeping", default=0)
_SEQ = (list, tuple)
_F64 = np.float64
_F64_DT = np.dtype(np.float64)
_ONE = np.float64(1.0)
_NEEDS1 = (True,)
_NEEDS2 = {(True, True): (True, True), (True, False): (True, False),
           (False, True): (False, True)}


class Tape:
    """A record of tracked operations, for one reverse sweep.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> with mp.Tape() as tape:
        ...     x = tape.track(np.array([1.0, 2.0]))
        ...     y = np.sum(x ** 2)
        >>> gx, = tape.gradient(y, [x])
        >>> gx
        array([2., 4.])

    Tapes are explicit objects: nested tapes, or tapes in different threads, never see each
    other's records.
    """

    _closed = False  # (True for ClosedTape)

    def __init__(self):
        self._level = new_level()
        self._pullbacks = []
        self._parents = []
        self._fns = []  # the function each node recorded, to name it in errors from its pullback
        self._debug = current_config().debug_mode
        self._meta = [] if self._debug else None
        # Item reads x[i] of float64 scalars made by the short paths (tape/fastpath.py,
        # mixed/dual_scalars.py): node of x -> {key: the read's ItemRead, which holds its node
        # and value}. What an array handle shows does not change while it keeps its node (a
        # write moves it to a new one; MutatingTape._fresh moves a view whose memory was
        # written through another handle), so the same element read again at the same node is
        # the first read's node. No TrackedArrays here: those hold the tape, and the reference
        # cycle would keep the whole record alive past the call until a garbage collection.
        # None once READ_MISSES reads in a row were new: see there.
        self._reads = {}
        self._read_misses = 0  # reads in a row that were new (reset by a repeated one)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __len__(self):
        return len(self._pullbacks)

    def close(self):
        """End recording for good (``grad`` and ``vjp`` call this when ``f`` has returned): a
        value of this tape used afterwards raises EscapedValueError. Costs nothing per op: the
        tape changes class, as it does on its first write.

        Example:
            >>> import numpy as np, mooncake_py as mp
            >>> tape = mp.Tape()
            >>> x = tape.track(np.ones(2))
            >>> tape.close()
            >>> np.sin(x)
            Traceback (most recent call last):
            ...
            mooncake_py.errors.EscapedValueError: A tracked value outlived the ...
            >>> tape.reopen(); np.sin(x)
            TrackedArray(array([0.84147098, 0.84147098]))
        """
        if type(self) is not ClosedTape:
            self._open_class = type(self)
            self.__class__ = ClosedTape
        # Called in the transformations' ``finally``: a ValueError/SystemError in flight that
        # stands for a TrackingLostError of this tape is replaced by it (errors.lost_error_behind)
        exc = sys.exc_info()[1]
        if exc is not None:
            raise_lost_error_behind(exc, self)

    def reopen(self):
        """Undo :meth:`close` (a vjp's pullback sweeps the tape, which may view buffers again);
        see :meth:`close` for an example."""
        if type(self) is ClosedTape:
            self.__class__ = self._open_class

    # --- recording ----------------------------------------------------------------------------
    def track(self, x):
        """Start recording ``x`` (float array, NumPy float, Python float, or a dual array)."""
        if isinstance(x, (float, int, complex)) and not isinstance(x, bool):
            if isinstance(x, int):
                raise NonDifferentiableInputError(
                    f"cannot track the Python int {x!r}: derivatives need floating-point inputs. "
                    "Pass a float (e.g. 2.0) or a float array.")
            x = np.complex128(x) if isinstance(x, complex) else np.float64(x)
        dt = getattr(x, "dtype", None)
        if dt is None or dt.kind not in "fc":
            raise NonDifferentiableInputError(
                f"cannot track a value of type {type(x).__name__}"
                f"{'' if dt is None else f' with dtype {dt}'}: derivatives are defined for "
                "floating-point and complex arrays and numbers only. Convert it with "
                "x.astype(float), or pass it as a constant (outside argnums).")
        if dt.kind == "c":
            self._go_complex()
        return self._new(x, None, None)

    def _new(self, value, pullback, parents, fn=None):
        node = len(self._parents)
        self._pullbacks.append(pullback)
        self._parents.append(parents)
        self._fns.append(fn)
        if self._debug:
            self._meta.append((None, None) if value is None else
                              (getattr(value, "shape", ()), getattr(value, "dtype", None)))
        return TrackedArray(value, self, node)

    def record(self, fn, args, kwargs):
        """Run ``fn`` on the unwrapped arguments through its rrule, and record the pullback."""
        if _SWEEPING.get() > self._level:
            raise ReverseOverReverseError(_ROR_MESSAGE.format(fn=fn_name(fn)))
        rule = RRULES.get(fn)
        if rule is None:
            mutator = MUTATORS.get(fn) or COMPOSITES.get(fn)
            if mutator is not None:  # np.copyto, np.median, ...: built from recorded ops
                return mutator(*args, **kwargs)
            if fn in ZERO_DERIVATIVE:
                return _call(fn, [self._unwrap(a) for a in args],
                             {k: self._unwrap(v) for k, v in kwargs.items()})
            if load_for(fn):  # a scipy.special ufunc: its table section loads on first use
                return self.record(fn, args, kwargs)
            raise MissingRuleError(_missing_message(fn, args, kwargs))
        if kwargs:
            if "out" in kwargs:
                o = kwargs["out"]
                if o is not None and not (type(o) is tuple and all(u is None for u in o)):
                    return self._record_out(fn, args, kwargs)
                kwargs = {k: v for k, v in kwargs.items() if k != "out"}
            if any(_holds_tracked(v, self) for v in kwargs.values()):
                args, kwargs = kwargs_to_positional(fn, args, kwargs, _holds_tracked, "tracked")
        n = len(args)
        if n == 2:  # fast paths: most calls are unary or binary with plain/tracked operands
            a, b = args
            ta = type(a) is TrackedArray and a._tape is self
            tb = type(b) is TrackedArray and b._tape is self
            if (ta or type(a) not in _SEQ) and (tb or type(b) not in _SEQ) and (ta or tb):
                vals = (a._value if ta else a, b._value if tb else b)
                out, pullback = rule(vals, kwargs, _NEEDS2[ta, tb])
                if pullback is None:
                    return out
                return self._wrap(fn, out, pullback,
                                  (a._node if ta else None, b._node if tb else None), vals)
        elif n == 1:
            a = args[0]
            if type(a) is TrackedArray and a._tape is self:
                vals = (a._value,)
                out, pullback = rule(vals, kwargs, _NEEDS1)
                if pullback is None:
                    return out
                return self._wrap(fn, out, pullback, (a._node,), vals)
        vals, parents, needs = [], [], []
        tracked = False
        for a in args:
            if type(a) is TrackedArray and a._tape is self:
                vals.append(a._value)
                parents.append(a._node)
                needs.append(True)
                tracked = True
            elif type(a) in _SEQ and any(type(b) is TrackedArray and b._tape is self for b in a):
                vals.append(type(a)(self._unwrap(b) for b in a))
                parents.append(tuple(b._node if type(b) is TrackedArray and b._tape is self
                                     else None for b in a))
                needs.append(True)
                tracked = True
            else:
                vals.append(a)
                parents.append(None)
                needs.append(False)
        if not tracked:  # only outer-level wrappers in kwargs: not ours to record
            return _call(fn, vals, kwargs)
        out, pullback = rule(vals, kwargs, tuple(needs))
        if pullback is None:
            return out
        return self._wrap(fn, out, pullback, tuple(parents), vals)

    def _unwrap(self, a):
        if type(a) is TrackedArray and a._tape is self:
            return a._value
        if type(a) in _SEQ:
            return type(a)(self._unwrap(b) for b in a)
        return a

    def _wrap(self, fn, out, pullback, parents, vals):
        if fn not in BUILTIN_RRULES:
            pullback = _ShapeChecked(fn, pullback, parents, vals, _kind(out) != "c")
        if _is_float(out):
            if type(out) is float:
                out = np.float64(out)
            t = self._new(out, pullback, parents, fn)
            if self._debug:
                self._pullbacks[-1] = _checked(fn, pullback, parents, self._meta)
            return t
        if isinstance(out, (tuple, list)):
            return self._wrap_multi(fn, out, pullback, parents, vals)
        kind = _kind(out)
        if kind == "c":
            out = np.complex128(out) if type(out) is complex else out
            t = self._new(out, self._complex_pullback(fn, pullback, parents, vals), parents, fn)
            if self._debug:
                self._pullbacks[-1] = _checked(fn, self._pullbacks[-1], parents, self._meta)
            return t
        if kind in _NO_DERIVATIVE_KINDS:
            raise MissingRuleError(_kind_message(fn, out))
        return out

    def _complex_pullback(self, fn, pullback, parents, vals):
        """The pullback of an op with a complex output, for the inner product Re Σ conj(a)·b
        (see rules/complex.py); from here on the tape checks every op's complex inputs."""
        check_complex_call(fn)
        self._go_complex()
        if fn in HOLOMORPHIC:
            pullback = HolomorphicPullback(pullback)
        real = real_inputs(parents, vals)
        return pullback if real is None else RealParts(pullback, real)

    def _go_complex(self):
        cls = _COMPLEX_CLASS.get(type(self))
        if cls is not None:
            self.__class__ = cls

    def _wrap_multi(self, fn, outs, pullback, parents, vals):
        """Several outputs (split, slogdet, eigh): one node for the op, one projection per output."""
        templates = tuple(outs)
        if any(_kind(o) == "c" for o in outs):
            pullback = self._complex_pullback(fn, pullback, parents, vals)

        def multi_pullback(gs):
            return pullback(tuple(np.zeros_like(innermost(o)) if g is None else g
                                  for g, o in zip(gs, templates)))
        op = self._new(None, multi_pullback, parents, fn)
        wrapped = []
        for k, o in enumerate(outs):
            if _kind(o) in "fc":
                wrapped.append(self._new(o, _Projection(k, len(outs)), (op._node,)))
            else:
                wrapped.append(o)
        if hasattr(outs, "_fields"):  # namedtuple
            return type(outs)(*wrapped)
        return type(outs)(wrapped)

    # --- writes -------------------------------------------------------------------------------
    def write(self, h, key, value):
        """``h[key] = value`` for a TrackedArray ``h`` of this tape, in place, as NumPy does.

        The value lands in ``h``'s buffer (so every view of the buffer sees it); the region's
        previous contents are saved (O(region) memory); ``h`` moves to a new *write node* whose
        parents are its previous node and ``value``'s. In the reverse sweep the write node first
        hands ``value`` the cotangent of the region (only the entries that landed, for repeated
        integer indices) and the previous state the rest, and then restores the region, so that
        earlier pullbacks read the values they saw. A write through a view made by indexing
        (``row = y[i]; row[j] = v``, ``y[i][j] = v``, ``y[i] += v``) or by a rearrangement
        (``y.T``, ``y.reshape(...)``, ``y.ravel()``) moves ``y`` too.
        """
        if _SWEEPING.get() > self._level:
            raise ReverseOverReverseError(_ROR_MESSAGE.format(fn="an in-place write"))
        if not isinstance(self, MutatingTape):
            self.__class__ = ComplexMutatingTape if isinstance(self, ComplexTape) else MutatingTape
            begin_writes(self)
        self._fresh(h, "write into")
        vv, vnode = self._operand(value)
        buf = h._value
        basic = type(key) is int or is_basic_index(key)
        if not basic:
            key = _frozen(key)
        chain = self._view_chain(h)
        vshape = tuple(shape_of(vv)) if vnode is not None else None
        wn = None
        if basic and type(buf) is not np.ndarray and _item_write is not None and \
                type(self) is MutatingTape:
            # One element of a dual buffer (an HVP of a loop writing y[i, k] = s): the two
            # float64s written and swapped directly, as a replayed plan does; the general
            # write's getitem, copy and setitem on duals, and each swap of the sweep through
            # them, were ~12% of an RK4 HVP. (Not on recording tapes, whose plans log _Write.)
            wn = _item_write(buf, key, vv, vshape, _float_dtype(vv))
        if wn is None:
            old = buf[key]
            if type(old) not in _NP_SCALARS:
                old = np.copy(old)
            region = tuple(shape_of(old))
            buf[key] = vv
            land = None
            if not basic:
                try:
                    land = _landed(buf, key, region)
                finally:
                    buf[key] = vv  # the landing probe wrote markers into the region
            wn = _Write(buf, key, old, land, basic, region, vshape, _float_dtype(vv))
        node = self._add_node(wn, (h._node, vnode), buf)
        self._writes.append(node)
        self._splits.append(node)
        self._last_write[id(buffer_root(buf))] = node
        self._max_write = node
        h._node = node
        child = h
        for parent, fn, args, kwargs in chain:  # the write, seen from the arrays viewed
            if fn is operator.getitem:  # parent[key] is the view: a write of that region
                cshape = tuple(shape_of(child._value))
                pn = _Write(None, args[0], None, None, True, cshape, cshape, None)
                parent._node = self._add_node(pn, (parent._node, child._node), parent._value)
                self._splits.append(parent._node)
            else:  # a rearrangement of all of parent: parent is now the view, rearranged back
                parent._node = self._add_node(_Rearranged(fn, args, kwargs), (child._node,),
                                              parent._value)
            child = parent

    def like(self, handle, func, args, kwargs):
        """``func(*args, like=handle, **kwargs)`` (np.zeros, np.empty, ...): a new buffer,
        tracked (with no derivative) when it is floating point, so that tracked values can be
        written into it."""
        fill = None
        if func is np.full:  # a tracked fill value is written into the buffer afterwards
            if len(args) > 1 and _holds_tracked(args[1], self):
                fill = args[1]
                args = (args[0], _zero_of(fill)) + tuple(args[2:])
            elif _holds_tracked(kwargs.get("fill_value"), self):
                fill = kwargs["fill_value"]
                kwargs = dict(kwargs, fill_value=_zero_of(fill))
        if any(_holds_tracked(a, self) for a in args) or \
                any(_holds_tracked(v, self) for v in kwargs.values()):
            return func(*args, **kwargs)  # e.g. np.array([x, y], like=z): NumPy's own error
        out = call_like(func, args, kwargs, handle._value)
        kind = _kind(out)
        if kind not in "fc":
            return out
        if kind == "c":
            self._go_complex()
        t = self._new(out, None, None, func)
        if fill is not None:
            self.write(t, Ellipsis, fill)
        return t

    def _add_node(self, pullback, parents, value):
        node = len(self._parents)
        self._pullbacks.append(pullback)
        self._parents.append(parents)
        self._fns.append(None)
        if self._debug:
            self._meta.append((getattr(value, "shape", ()), getattr(value, "dtype", None)))
        return node

    def _operand(self, value):
        """(plain value, node or None) of a value written into a tracked buffer."""
        if type(value) is TrackedArray and value._tape is self:
            self._fresh(value, "write")
            return value._value, value._node
        if type(value) in _SEQ and any(_holds_tracked(b, self) for b in value):
            return self._operand(np.stack(value))  # out[0:2] = [a, b]
        return value, None

    def _view_chain(self, h):
        """The handles ``h`` is a view of through indexing, innermost first, each brought up
        to date; the chain stops at one that cannot be (it stays stale: reading it raises)."""
        chain = []
        c = h
        while True:
            view = getattr(c, "_view", None)
            if view is None or view[0]._tape is not self:
                return chain
            try:
                self._fresh(view[0], "write through")
            except MutationError:
                return chain
            chain.append(view)
            c = view[0]

    def _fresh(self, a, what="read"):
        """Nothing on a tape without writes (see MutatingTape)."""

    def _record_out(self, fn, args, kwargs):
        """``fn(..., out=o)``: compute the result, then write it into ``o`` (a tracked buffer),
        as NumPy would. A plain ``o`` cannot hold a tracked result (TrackingLostError)."""
        o = kwargs["out"]
        where = kwargs.get("where", True)
        rest = {k: v for k, v in kwargs.items() if k not in ("out", "where")}
        r = self.record(fn, args, rest)
        return write_out(o, r, where, lambda ri: TrackingLostError(
            _lost_message(ri, WRITTEN_INTO_PLAIN)
            + f" (Here through {fn_name(fn).replace('numpy.', 'np.')}(..., out=plain).)"))

    # --- the reverse sweep --------------------------------------------------------------------
    def gradient(self, y, xs, seed=None, seeds=None):
        """Cotangents of ``xs`` (TrackedArrays of this tape) for output ``y`` and seed ``ȳ``.

        ``seed`` defaults to ones shaped like ``y`` (so for a scalar ``y`` this is the gradient).
        ``y`` may also be a list of outputs with a list ``seeds``. An ``x`` that the outputs do
        not depend on gets zeros.
        """
        ys = y if type(y) is list else [y]
        if seeds is None:
            seeds = [seed] * len(ys)
        want = [x._node if type(x) is TrackedArray and x._tape is self else None for x in xs]
        cts = [None] * len(self._pullbacks)
        owned = set()
        start = -1
        for yi, s in zip(ys, seeds):
            if type(yi) is TrackedArray and yi._tape is self:
                if s is None:
                    # A float64 scalar's seed is a NumPy scalar, not np.ones_like's 0-d array:
                    # the values are the same, but every product with a 0-d array goes through
                    # the ufunc machinery (~1 µs against ~80 ns for two scalars), and in a
                    # scalar loop the seed reaches every pullback through the chain of sums.
                    v = yi._value
                    if type(v) is not _F64:
                        v = innermost(v)
                    s = _ONE if type(v) is _F64 else np.ones_like(v)
                _accumulate(cts, owned, yi._node, s)
                start = max(start, yi._node)
        if start >= 0:
            self._sweep(cts, start, {w for w in want if w is not None}, owned)
        return [cts[w] if w is not None and cts[w] is not None else _zeros_like(x)
                for w, x in zip(want, xs)]

    def _sweep(self, cts, start, keep, owned):
        # _pull inlined: on scalar-loop tapes the per-node method call and zip are a large
        # share of the sweep. An int read x[i] (fastpath.ItemRead) whose array already has an
        # owned dense cotangent buffer adds g at i in place, as _accumulate would; a dual scalar
        # g (forward-over-reverse) likewise, through _item_add, into a dense dual buffer. The
        # float64 products and sums of fastpath.py (a tuple of factors, a Pass) run without a call.
        token = _SWEEPING.set(self._level)
        try:
            self._run_pullbacks(cts, start, keep, owned)
            _densify_kept(cts, keep)
        finally:
            _SWEEPING.reset(token)

    def _run_pullbacks(self, cts, start, keep, owned, stop=-1):
        """Nodes ``start`` down to ``stop`` (exclusive)."""
        pullbacks, parents = self._pullbacks, self._parents
        # (locals: the type checks below run on every node, and a global load costs more)
        f64, product, plus, read = _F64, tuple, Pass, ItemRead
        i = start
        try:
            for i in range(start, stop, -1):
                g = cts[i]
                if g is None:
                    continue
                pb = pullbacks[i]
                if pb is None:
                    continue
                if i not in keep:
                    cts[i] = None
                tg = type(g)
                tp = type(pb)
                if tp is product:
                    # a product of float64 scalars (pullbacks.py): the factors, multiplied here
                    # as the closure they stand for would (both before either is passed on)
                    if tg is not f64 and tg in _SPARSE:
                        g = g.dense()
                    x, z = pb
                    p, q = parents[i]
                    gp = None if x is None else g * x
                    gq = None if z is None else g * z
                elif tp is plus:  # a + b, a - b of float64 scalars: g passed on
                    if tg is not f64 and tg in _SPARSE:
                        g = g.dense()
                    p, q = parents[i]
                    gp = None if p is None else g
                    gq = None if q is None else -g if pb.neg else g
                else:
                    # any other pullback is called (a Quotient too: callable data), as before
                    # the two branches above, which are all it pays for them
                    if tp is read:
                        if tg is f64 or tg is np.ndarray and g.shape == () and \
                                g.dtype.type is _F64:
                            p = parents[i][0]
                            cur = cts[p]
                            if type(cur) is np.ndarray and p in owned:
                                cur[pb.key] += g
                                continue
                        elif tg is _SCALAR_DUAL:  # (likewise for a dual scalar: forward-over-reverse)
                            if _item_add(cts, owned, parents[i][0], pb.key, pb.shape, g):
                                continue
                        elif tg in _SPARSE:
                            g = g.dense()
                    elif tg in _SPARSE:
                        g = g.dense()
                    gs = pb(g)
                    ps = parents[i]
                    if len(ps) == 2 and len(gs) == 2:
                        # Binary ops, unrolled (no zip, no loop): the cotangents are passed on
                        # by the inline accumulation below the three branches. A constant
                        # operand (`0.5 * x`, `x / 6`: its parent None) is as common in scalar
                        # loops as two tracked ones, so it goes the same way, not the loop.
                        p, q = ps
                        if type(p) is int and type(q) is int:
                            gp, gq = gs
                        elif q is None and type(p) is int:
                            gp, gq = gs[0], None
                        elif p is None and type(q) is int:
                            gp, gq = None, gs[1]
                        else:  # (tuple parents, or none tracked)
                            _pass_to_parents(cts, owned, ps, gs)
                            continue
                    elif len(ps) == 1 and type(ps[0]) is int and type(gs) in _SEQ and gs:
                        # (unary ops, as common: the same inline accumulation, q unused)
                        p, gp, gq = ps[0], gs[0], None
                    else:
                        _pass_to_parents(cts, owned, ps, gs)
                        continue
                # (_accumulate's first cases inline: float64 scalars, dual scalars)
                if gp is not None:
                    cur = cts[p]
                    if cur is None:
                        cts[p] = gp
                    elif type(cur) is f64 and type(gp) is f64:
                        cts[p] = cur + gp
                    elif (type(cur) is _SCALAR_DUAL or type(gp) is _SCALAR_DUAL) and \
                            _scalar_add is not None and (r := _scalar_add(cur, gp)) is not None:
                        cts[p] = r
                    else:
                        _accumulate(cts, owned, p, gp)
                if gq is not None:
                    cur = cts[q]
                    if cur is None:
                        cts[q] = gq
                    elif type(cur) is f64 and type(gq) is f64:
                        cts[q] = cur + gq
                    elif (type(cur) is _SCALAR_DUAL or type(gq) is _SCALAR_DUAL) and \
                            _scalar_add is not None and (r := _scalar_add(cur, gq)) is not None:
                        cts[q] = r
                    else:
                        _accumulate(cts, owned, q, gq)
        except MissingRuleError as e:
            raise _reached_from(e, self._fns[i]) from e

    def _pull(self, i, pb, g, parents, cts, keep, owned):
        """Node ``i``: run its pullback on cotangent ``g`` and pass the results to its parents."""
        if i not in keep:
            cts[i] = None
        if type(g) in _SPARSE:
            g = g.dense()
        try:
            gs = cotangents(pb, g)
        except MissingRuleError as e:
            raise _reached_from(e, self._fns[i]) from e
        for p, gp in zip(parents, gs):
            if p is None or gp is None:
                continue
            if type(p) is tuple:
                for q, gq in zip(p, gp):
                    if q is not None and gq is not None:
                        _accumulate(cts, owned, q, gq)
            else:
                _accumulate(cts, owned, p, gp)


class ClosedTape(Tape):
    """A tape whose transformation has returned (see :meth:`Tape.close`): recording on it means
    a value escaped the call that made it, and raises EscapedValueError."""
    _closed = True

    def record(self, fn, args, kwargs):
        raise EscapedValueError(escaped_message("tracked", fn_name(fn)))

    def write(self, h, key, value):
        raise EscapedValueError(escaped_message("tracked", "an in-place write"))

    def like(self, handle, func, args, kwargs):
        raise EscapedValueError(escaped_message("tracked", fn_name(func)))


class MutatingTape(Tape):
    """A tape that has recorded a write. Two duties on top of :class:`Tape`'s:

    - *Aliasing*: every TrackedArray it records (reads) must show the current contents of its
      buffer. A handle whose buffer was written after it was made (through another handle of
      the same memory) is *stale*: a view (by indexing, reshape, transpose, ...) is brought up
      to date by viewing its parent again; any other stale handle raises MutationError instead
      of giving a wrong derivative. ``_last_write`` maps (the id of) each written buffer's
      memory owner to the node of its last write; handles made after every write skip the
      lookup.
    - *Restoring*: the sweep undoes each write (swapping the saved region back in) before any
      earlier pullback runs, and redoes them all afterwards, so the buffers hold their final
      contents again (and the sweep can be repeated).
    """

    def record(self, fn, args, kwargs):
        # (refresh_args's loop, inline: this is every op of a tape that writes)
        mw = self._max_write
        for a in args:
            t = type(a)
            if t is TrackedArray:
                if a._node < mw and a._tape is self:
                    self._fresh(a, "read", fn)
            elif t in _SEQ:
                for b in a:
                    if type(b) is TrackedArray and b._node < mw and b._tape is self:
                        self._fresh(b, "read", fn)
        if kwargs:
            for v in kwargs.values():
                for b in (v if type(v) in _SEQ else (v,)):
                    if type(b) is TrackedArray and b._node < mw and b._tape is self:
                        self._fresh(b, "read", fn)
        return Tape.record(self, fn, args, kwargs)

    def _fresh(self, a, what="read", fn=None):
        """Bring ``a`` up to date with its buffer, or raise MutationError if it cannot be."""
        if a._node >= self._max_write:
            return
        v = a._value
        if type(v) is not np.ndarray:
            v = innermost(v)  # (a dual's primal: the buffer the loop below looks up)
        if type(v) is np.ndarray and v.base is None and id(v) not in self._last_write:
            return  # (the loop's first test for an array that owns its memory: RK4's theta[k])
        # Up the chain of views to the first handle that is current, then view again on the
        # way down. A loop, not recursion: a chain can be thousands of views deep.
        stale = []
        c = a
        while c._node < self._max_write:
            lw = self._last_write.get(id(buffer_root(c._value)))
            if lw is None or c._node >= lw:
                break
            view = getattr(c, "_view", None)
            if view is None or view[0]._tape is not self:
                raise MutationError(_stale_message(c, what, fn))
            stale.append(c)
            c = view[0]
        for h in reversed(stale):
            parent, vfn, args, kwargs = h._view
            r = self._review(vfn, (parent,) + args, kwargs)
            h._value, h._node = r._value, r._node

    def _review(self, fn, args, kwargs):
        """Record a stale view's view again (a PlanTape logs it as a step of its plan)."""
        return Tape.record(self, fn, args, kwargs)

    def refresh_args(self, fn, args, kwargs):
        """Bring every tracked argument of ``fn`` up to date with its buffer, as :meth:`record`
        does before recording (for subclasses that record by another path)."""
        mw = self._max_write
        for a in args:
            if type(a) is TrackedArray:
                if a._node < mw and a._tape is self:
                    self._fresh(a, "read", fn)
            elif type(a) in _SEQ:
                for b in a:
                    if type(b) is TrackedArray and b._node < mw and b._tape is self:
                        self._fresh(b, "read", fn)
        for v in (kwargs.values() if kwargs else ()):
            for b in (v if type(v) in _SEQ else (v,)):
                if type(b) is TrackedArray and b._node < mw and b._tape is self:
                    self._fresh(b, "read", fn)

    def gradient(self, y, xs, seed=None, seeds=None):
        for yi in (y if type(y) is list else [y]):
            if type(yi) is TrackedArray and yi._tape is self:
                self._fresh(yi, "differentiate")
        return Tape.gradient(self, y, xs, seed, seeds)

    def _sweep(self, cts, start, keep, owned):
        # Between write nodes the sweep is a plain tape's (Tape._run_pullbacks, with its short
        # paths); at each write node (``_splits``: the writes and the views they moved) the
        # cotangent is split, and a write's region is swapped back before anything earlier runs.
        token = _SWEEPING.set(self._level)
        pullbacks, parents = self._pullbacks, self._parents
        writes, splits = self._writes, self._splits
        undone = []
        try:
            k = len(writes) - 1
            while k >= 0 and writes[k] > start:  # writes after the outputs: undo them first
                pullbacks[writes[k]].swap()
                undone.append(writes[k])
                k -= 1
            nxt = writes[k] if k >= 0 else -1
            i = start
            for s in range(bisect.bisect_right(splits, start) - 1, -1, -1):
                w = splits[s]
                if i > w:
                    self._run_pullbacks(cts, i, keep, owned, w)
                pb = pullbacks[w]
                g = cts[w]
                if g is not None:
                    if w not in keep:
                        cts[w] = None
                    self._write_pullback(pb, parents[w], g, w, cts, keep, owned)
                if w == nxt:
                    pb.swap()
                    undone.append(w)
                    k -= 1
                    nxt = writes[k] if k >= 0 else -1
                i = w - 1
            if i >= 0:
                self._run_pullbacks(cts, i, keep, owned)
            _densify_kept(cts, keep)
        finally:
            for w in reversed(undone):  # redo, in recording order
                pullbacks[w].swap()
            _SWEEPING.reset(token)

    def _write_pullback(self, wn, parents, g, i, cts, keep, owned):
        """Split the cotangent ``g`` of the state after a write: the written value gets
        ``g[key]`` (where it landed), the state before gets ``g`` with the region zeroed, in a
        buffer the sweep owns (copied once; a chain of writes then passes the same one down)."""
        prev, vnode = parents
        if type(g) is np.ndarray and not wn.region and g.dtype.type is _F64 and i in owned and \
                i not in keep and (vnode is None or (wn.vshape == () and wn.vdtype == g.dtype)):
            # One float64 element (a scalar loop's write) with a cotangent buffer the sweep
            # owns: what the general path below does, without its shape and dtype handling.
            key = wn.key
            gv = None if vnode is None else g[key]
            if vnode is None or type(gv) is _F64:  # (not a 0-d view: g[...] of a 0-d g)
                if vnode is not None:
                    if cts[vnode] is None:
                        cts[vnode] = gv
                    else:
                        _accumulate(cts, owned, vnode, gv)
                if self._feeds(prev, keep):
                    g[key] = 0
                    self._pass_down(prev, g, cts, owned)
                return
        elif _split_item is not None and not wn.region and i in owned and i not in keep and \
                (vnode is None or (wn.vshape == () and wn.vdtype == _F64_DT)) and \
                type(g) in WRAPPER_TYPES:
            # the same for a dual cotangent (forward-over-reverse of a scalar loop's writes)
            gv = _split_item(g, wn.key)
            if gv is not None:
                if vnode is not None:
                    _accumulate(cts, owned, vnode, gv)
                if self._feeds(prev, keep):
                    self._pass_down(prev, g, cts, owned)
                return
        if type(g) in _SPARSE:
            g, mine = g.dense(), True
        else:
            mine = i in owned and i not in keep
        key = wn.key
        if vnode is not None:
            gv = g[key]
            if wn.land is not None:
                gv = np.where(wn.land, gv, 0)
            vshape = wn.vshape
            if len(vshape) > len(wn.region):  # leading length-one axes, dropped by assignment
                gv = np.reshape(unbroadcast(gv, vshape[len(vshape) - len(wn.region):]), vshape)
            else:
                gv = unbroadcast(gv, vshape)
            if wn.basic and type(gv) not in _NP_SCALARS and \
                    _size(vshape) == _size(wn.region):
                gv = np.copy(gv)  # a view of g, which is zeroed in place below
            vdt = wn.vdtype
            if vdt is not None and gv.dtype != vdt:
                if vdt.kind == "f" and gv.dtype.kind == "c":  # a real value in a complex buffer
                    gv = np.real(gv)
                gv = gv.astype(vdt)
            _accumulate(cts, owned, vnode, gv)
        if not self._feeds(prev, keep):
            return
        if not mine or not has_buffer(g):  # (0-d arithmetic gives scalars: copy those too)
            g = np.copy(g)
        g[key] = 0
        self._pass_down(prev, g, cts, owned)

    def _feeds(self, prev, keep):
        """Whether the state before a write takes a cotangent: not when it is a fresh buffer
        or a constant (nothing to pass on), unless its cotangent is asked for."""
        pb = self._pullbacks[prev]
        return not (pb is None or type(pb) is NoDerivative) or prev in keep

    @staticmethod
    def _pass_down(prev, g, cts, owned):
        """``g``, the rest of a write's cotangent (in a buffer the sweep owns), to the state
        before the write."""
        if cts[prev] is None:
            cts[prev] = g
            owned.add(prev)
        else:
            _accumulate(cts, owned, prev, g)


class _ComplexChecks:
    """A tape that has seen a complex value checks, on each op, that the op's rule holds for the
    complex values it is given (rules/complex.py); real-only tapes never pay for it."""

    def record(self, fn, args, kwargs):
        if has_complex(args) or (kwargs and has_complex(kwargs.values())):
            check_complex_call(fn)
        return super().record(fn, args, kwargs)


class ComplexTape(_ComplexChecks, Tape):
    """A :class:`Tape` that has recorded a complex value."""


class ComplexMutatingTape(_ComplexChecks, MutatingTape):
    """A :class:`MutatingTape` that has recorded a complex value."""


_COMPLEX_CLASS = {Tape: ComplexTape, MutatingTape: ComplexMutatingTape}


class _Rearranged:
    """Pullback of an array written through a view that rearranges all of it (``a.T``,
    ``a.reshape(...)``, ``a.ravel()``): its new contents are the view's, so the view's
    cotangent is the same rearrangement of its cotangent."""
    __slots__ = ("args", "fn", "kwargs")

    def __init__(self, fn, args, kwargs):
        self.fn, self.args, self.kwargs = fn, args, kwargs

    def __call__(self, g):
        return (self.fn(g, *self.args, **self.kwargs),)


class _Write:
    """A write node: ``buf[key] = value`` (``buf`` None for the parent of a view written
    through, whose memory the view's own write node restores). ``saved`` holds the region's
    other contents: before the write while recording, after it while the sweep has undone it."""
    __slots__ = ("basic", "buf", "key", "land", "region", "saved", "vdtype", "vshape")

    def __init__(self, buf, key, saved, land, basic, region, vshape, vdtype):
        self.buf, self.key, self.saved, self.land, self.basic = buf, key, saved, land, basic
        self.region, self.vshape, self.vdtype = region, vshape, vdtype

    def swap(self):
        buf, key = self.buf, self.key
        cur = buf[key]
        if type(cur) not in _NP_SCALARS:
            cur = np.copy(cur)
        buf[key] = self.saved
        self.saved = cur


class _DualItemWrite(_Write):
    """A write node of one element of a dual buffer (no lanes), as a replayed plan makes it:
    ``buf`` and ``tangent`` are the buffer's primal and tangent arrays, ``saved`` and
    ``tsaved`` the element's other primal and tangent (see :class:`_Write`). Swapping the two
    float64s directly costs a fraction of a dual getitem, copy and setitem; the contents are the
    same."""
    __slots__ = ("tangent", "tsaved")

    def __init__(self, p, t, key, saved, tsaved, region, vshape, vdtype):
        _Write.__init__(self, p, key, saved, None, True, region, vshape, vdtype)
        self.tangent, self.tsaved = t, tsaved

    def swap(self):
        p, t, key = self.buf, self.tangent, self.key
        cp, ct = p[key], t[key]
        p[key], t[key] = self.saved, self.tsaved
        self.saved, self.tsaved = cp, ct


# The pullback types of write nodes (what MutatingTape._sweep swaps and splits).
_WRITE_TYPES = frozenset([_Write, _DualItemWrite])


def begin_writes(tape):
    """The bookkeeping of a :class:`MutatingTape` on ``tape``, which has written nothing yet."""
    tape._last_write, tape._writes, tape._max_write = {}, [], -1
    tape._splits = []  # every node whose pullback is a write type (_WRITE_TYPES), in order


def _zero_of(v):
    """A zero of the dtype of ``v`` (a tracked value, or a list of them for np.full)."""
    if type(v) in _SEQ:
        return np.zeros(len(v), np.result_type(*[getattr(b, "dtype", type(b)) for b in v]))
    return np.zeros((), v.dtype)[()]


def _size(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _float_dtype(v):
    dt = getattr(v, "dtype", None)
    return dt if dt is not None and dt.kind in "fc" else None


def _has_int_array(key):
    for k in (key if type(key) is tuple else (key,)):
        dt = getattr(k, "dtype", None)
        if dt is not None and dt.kind in "iu" and getattr(k, "size", 1) > 1:
            return True
    return False


def _landed(buf, key, region):
    """For a write with integer index arrays: a boolean mask over the region of the entries that
    landed (NumPy keeps one of several writes to the same position), or None if all did.

    Found by writing each entry's number into the region with the same key and reading back
    which number each position kept (in digits the buffer's float type holds exactly)."""
    if not _has_int_array(key):
        return None
    m = _size(region)
    if m <= 1:
        return None
    p = innermost(buf)
    digit_base = 1 << min(np.finfo(p.dtype).nmant + 1, 62)
    rem = am.arange(m, dtype=np.int64, like=p)  # on the buffer's device
    landed = None
    while True:
        digit = rem % digit_base
        p[key] = digit.reshape(region).astype(p.dtype)
        same = p[key].reshape(-1).astype(np.int64) == digit
        landed = same if landed is None else landed & same
        rem = rem // digit_base
        if not bool(np.any(rem)):
            break
    return None if bool(np.all(landed)) else np.reshape(landed, region)


def _stale_message(a, what, fn):
    v = innermost(a._value)
    desc = f"{type(v).__name__} of dtype {getattr(v, 'dtype', '?')}, shape " \
           f"{tuple(getattr(v, 'shape', ()))}"
    where = f" (in {fn_name(fn).replace('numpy.', 'np.')})" if fn is not None else ""
    return (
        f"cannot {what} a tracked array ({desc}){where}: its memory was overwritten after it was "
        "made, through another array sharing that memory (an argument passed twice, or a view "
        "made by a function other than indexing, reshape, ravel, transpose, swapaxes, moveaxis, "
        "squeeze and expand_dims, e.g. the pieces of np.split), and the derivative of its new "
        "contents is unknown. Write through the array itself or through such views of it "
        "(x[i, j] = v, x[i][j] = v, x.T[j] = v, x.reshape(-1)[k] = v are all fine), or copy "
        "before writing (y = x.copy()) so that the two no longer share memory.")


def _densify_kept(cts, keep):
    """The requested cotangents as arrays (sparse contributions scattered once)."""
    for k in keep:
        if type(cts[k]) in _SPARSE:
            cts[k] = cts[k].dense()


def _reached_from(err, fn):
    """The same error, saying which recorded op's pullback needed the missing rule."""
    if fn is None or "Reached from the pullback" in str(err):
        return err
    return type(err)(f"{err} (Reached from the pullback of {fn_name(fn)}: second order runs "
                     "every pullback on dual numbers, so each function a pullback calls needs a "
                     "forward rule.)")


class _Projection:
    """Pullback of output k of a multi-output op: a tuple cotangent with ``g`` at k."""
    __slots__ = ("k", "n")

    def __init__(self, k, n):
        self.k, self.n = k, n

    def __call__(self, g):
        t = [None] * self.n
        t[self.k] = g
        return (tuple(t),)


def remember_read(tape, reads, seen, n, key, pb, value, node):
    """Put a new item read (``ItemRead`` ``pb`` of element ``key`` of the handle at node ``n``,
    recorded as ``node`` with value ``value``) in ``tape._reads`` (``reads``; ``seen``: its
    entry for ``n`` or None), and turn the memo off after READ_MISSES new reads in a row. For
    the short paths of item reads (tape/fastpath.py, mixed/dual_scalars.py), which look the
    read up themselves first (a hit costs no call)."""
    pb.value, pb.node = value, node
    if seen is None:
        reads[n] = {key: pb}
    else:
        seen[key] = pb
    m = tape._read_misses + 1
    tape._read_misses = m
    if m == READ_MISSES:
        tape._reads = None


def _pass_to_parents(cts, owned, parents, gs):
    """A pullback's cotangents ``gs`` to its ``parents`` (None: a constant; a tuple: the
    parents of a sequence operand, one cotangent each)."""
    for p, gp in zip(parents, gs):
        if p is None or gp is None:
            continue
        if type(p) is tuple:
            for q, gq in zip(p, gp):
                if q is not None and gq is not None:
                    _accumulate(cts, owned, q, gq)
        elif cts[p] is None:
            cts[p] = gp
        else:
            _accumulate(cts, owned, p, gp)


def _accumulate(cts, owned, p, g):
    """Add cotangent ``g`` into node ``p``, in place where the sweep owns a plain buffer."""
    cur = cts[p]
    if cur is None:
        cts[p] = g
        return
    tc = type(cur)
    if tc is _F64 and type(g) is _F64:
        # two float64 scalars (a value read many times in a scalar loop): a 0-d buffer added
        # in place costs ~1 µs a contribution, the scalar sum ~0.1 µs, and rounds the same
        cts[p] = cur + g
        return
    if (tc is _SCALAR_DUAL or type(g) is _SCALAR_DUAL) and _scalar_add is not None:
        # a dual contribution (forward-over-reverse of a scalar loop): none of the buffer cases
        # below takes a dual scalar, so _scalar_add is asked first, not after all of them
        r = _scalar_add(cur, g)
        if r is not None:
            cts[p] = r
            return
    if tc is IndexedCotangentList and type(g) is IndexedCotangent:
        # one more read x[i] of dual values (an item read's contribution in forward-over-reverse):
        # what the sparse case below does, without the cases before it, none of which takes a list
        cur.items.append(g)
        if g.shape != cur.shape:
            cts[p] = IndexedCotangentList(g.shape, cur.items)
        return
    if type(cur) is tuple:  # cotangent of a multi-output node
        cts[p] = tuple(a if b is None else b if a is None else _add(a, b) for a, b in zip(cur, g))
        return
    if p in owned and _add_inplace(cur, g):
        return
    if type(g) is IndexedCotangent and type(cur) in _SPARSE and not (_plain(cur) and _plain(g)):
        # sparse contributions that cannot be added in place: collect, scatter once later
        items = cur.items if type(cur) is IndexedCotangentList else [cur]
        items.append(g)
        cts[p] = IndexedCotangentList(g.shape, items)
        return
    if _plain(cur) and _plain(g):
        buf = _fresh_buffer(cur, g)
        if _add_inplace(buf, g):
            cts[p] = buf
            owned.add(p)
            return
    elif _scalar_add is not None:  # dual scalars (forward-over-reverse of scalar loops)
        r = _scalar_add(cur, g)
        if r is not None:
            cts[p] = r
            return
    cts[p] = _add(cur, g)


_NP_SCALARS = (np.float64, np.float32, np.float16, np.complex128, np.complex64)


def _plain(v):
    if type(v) is IndexedCotangent:
        v = v.values
    return type(v) is np.ndarray or type(v) in _NP_SCALARS


def _fresh_buffer(cur, g):
    dt = np.result_type(cur.values if type(cur) is IndexedCotangent else cur,
                        g.values if type(g) is IndexedCotangent else g)
    if type(cur) is IndexedCotangent:
        return cur.add_into(np.zeros(cur.shape, dtype=dt))
    return np.array(cur, dtype=dt, ndmin=0)


def _add_inplace(buf, g):
    """``buf += g`` for a plain ndarray buffer when shapes and dtypes allow; False otherwise.
    A wrapped buffer (dual numbers, in forward-over-reverse) takes a basic-indexed sparse
    ``g`` in place too, through its own write: O(region), not O(buffer)."""
    if type(buf) is not np.ndarray:
        if type(g) is IndexedCotangent and g.basic and type(buf) in WRAPPER_TYPES \
                and type(innermost(buf)) is np.ndarray:
            buf[g.index] = buf[g.index] + g.values
            return True
        return False
    if type(g) is IndexedCotangent:
        if _plain(g) and np.can_cast(g.values.dtype, buf.dtype, "same_kind"):
            g.add_into(buf)
            return True
        return False
    if _plain(g) and g.shape == buf.shape and np.can_cast(g.dtype, buf.dtype, "same_kind"):
        buf += g
        return True
    return False


_SPARSE = (IndexedCotangent, IndexedCotangentList)
# cur + g for two scalar contributions of which one is a dual number, or None: set by
# fastpath.install (mixed/dual_scalars.py), so that this module needs no import of the dual layer
_scalar_add = None


class _NoScalarDual:
    """:data:`_SCALAR_DUAL` until fastpath.install sets it: no value is of this type."""


# the type of the values _scalar_add takes (DualArray), set with it
_SCALAR_DUAL = _NoScalarDual


def _no_item_add(cts, owned, p, key, shape, g):
    return False


# item_add(cts, owned, p, key, shape, g) -> whether it added the dual scalar ``g`` (the
# cotangent of a read ``x[key]``, x of ``shape``) into node ``p``'s cotangent itself, in place
# in a dense dual buffer the sweep owns (made on the second read, as _accumulate makes a float64
# one); False where the general path must run. Set by registration.py (mixed/dual_scalars.py).
_item_add = _no_item_add
# split_item(g, key) -> g[key] (a copy), with g[key] zeroed in place, for a wrapped cotangent
# ``g`` and an index of one element; None where the general path must run. Set by
# replay/writes.py (dual numbers), so that this module needs no import of the dual layer.
_split_item = None
# item_write(buf, key, value, vshape, vdtype) -> the write node of ``buf[key] = value`` (done),
# for a wrapped ``buf`` and a key of one element, or None (nothing written) where the general
# write must run. Set by replay/writes.py (dual numbers: a _DualItemWrite), as _split_item is.
_item_write = None


def _add(a, b):
    if type(a) in _SPARSE:
        a = a.dense()
    if type(b) in _SPARSE:
        b = b.dense()
    return a + b


def _zeros_like(x):
    v = x._value if type(x) is TrackedArray else x
    return np.zeros_like(innermost(v))




def _is_float(out):
    dt = getattr(out, "dtype", None)
    if dt is not None:
        return dt.kind == "f"
    return type(out) is float


def _kind(out):
    """The dtype kind of a rule's output ("f" for a Python float, "c" for a complex)."""
    dt = getattr(out, "dtype", None)
    if dt is not None:
        return getattr(dt, "kind", "")
    t = type(out)
    return "f" if t is float else "c" if t is complex else ""


# Outputs of these kinds from a tracked op with a pullback cannot be carried by the tape.
_NO_DERIVATIVE_KINDS = frozenset("OSUVMm")


def _kind_message(fn, out):
    return (f"{fn_name(fn).replace('numpy.', 'np.')} returned a value of dtype {out.dtype} from "
            "tracked inputs: the tape carries derivatives through floating-point and complex "
            "values only, so this one would silently lose its derivative. Keep the computation "
            "in float or complex arrays, or wrap the value in mp.stop_gradient(...) first if it "
            "is meant to be a constant.")


def _call(fn, args, kwargs):
    if type(fn) is tuple:
        return getattr(fn[0], fn[1])(*args, **kwargs)
    return fn(*args, **kwargs)


def _holds_tracked(v, tape=None):
    """Whether ``v`` is, or is a list/tuple holding, a TrackedArray (of ``tape`` if given)."""
    if type(v) is TrackedArray:
        return tape is None or v._tape is tape
    return type(v) in _SEQ and any(type(b) is TrackedArray and (tape is None or b._tape is tape)
                                   for b in v)


def _missing_message(fn, args, kwargs):
    return missing_rule_message(fn, args, kwargs, "reverse")


_ROR_MESSAGE = (
    "reverse-over-reverse differentiation is not supported: a reverse sweep reached {fn} with "
    "values tracked by an outer tape (for example grad(lambda x: grad(f)(x) @ v)). Use "
    "forward-over-reverse instead: mp.hvp(f)(x, v) for Hessian-vector products, mp.hessian(f)(x) "
    "for full Hessians, or mp.jvp(mp.grad(f), (x,), (v,)).")


class _ShapeChecked:
    """The pullback of a rule not shipped with mooncake_py, checked on every call (a shape
    comparison per cotangent): a cotangent shaped like a broadcast of its argument is summed
    back, any other shape, a wrong structure, or a complex cotangent for a real argument of a
    real-valued op raises RuleError naming the function."""
    __slots__ = ("fn", "pb", "real_out", "specs")

    def __init__(self, fn, pb, parents, vals, real_out):
        self.fn, self.pb, self.real_out = fn, pb, real_out
        self.specs = tuple(None if p is None else
                           [None if q is None else _spec(b) for q, b in zip(p, v)]
                           if type(p) is tuple else _spec(v) for p, v in zip(parents, vals))

    def __call__(self, g):
        gs = self.pb(g)
        specs = self.specs
        if type(gs) is not tuple or len(gs) != len(specs):
            raise RuleError(
                f"the rrule of {fn_name(self.fn)} returned {type(gs).__name__}"
                f"{f' of length {len(gs)}' if isinstance(gs, tuple) else ''} from its pullback; "
                f"it must return a tuple with one entry per positional argument ({len(specs)}).")
        return tuple(self._fit(k, c, sp) for k, (c, sp) in enumerate(zip(gs, specs)))

    def _fit(self, k, c, sp):
        if c is None or sp is None:
            return c
        if type(sp) is list:
            return type(c)(self._fit(k, ci, si) for ci, si in zip(c, sp))
        shape, kind = sp
        cs = tuple(shape_of(c))
        if cs != shape:
            try:
                ok = np.broadcast_shapes(shape, cs) == cs
            except ValueError:
                ok = False
            if not ok:
                raise RuleError(
                    f"the rrule of {fn_name(self.fn)} returned a cotangent of shape {cs} for "
                    f"argument {k}, which has shape {shape}: return one cotangent shaped like "
                    "each argument (sum over the axes it was broadcast along).")
            c = unbroadcast(c.dense() if type(c) in _SPARSE else c, shape)
        if self.real_out and kind == "f" and _kind(c) == "c":
            raise RuleError(
                f"the rrule of {fn_name(self.fn)} returned a complex cotangent for the real "
                f"argument {k} of a real-valued op: its imaginary part would be dropped. Return "
                "a real cotangent (or declare the rule for complex values, see "
                "mooncake_py.rules.complex.declare_complex).")
        return c


def _spec(v):
    return tuple(shape_of(v)), _kind(v)


def _checked(fn, pullback, parents, meta):
    """Debug mode: wrap a pullback so that each cotangent's structure, shape and dtype is checked."""
    def checked(g):
        gs = pullback(g)
        if not isinstance(gs, tuple) or len(gs) != len(parents):
            raise RuleError(f"the rrule of {fn_name(fn)} returned {type(gs).__name__} "
                            f"{'' if not isinstance(gs, tuple) else f'of length {len(gs)} '}from "
                            f"its pullback; it must return a tuple with one entry per positional "
                            f"argument ({len(parents)}).")
        for k, (p, gp) in enumerate(zip(parents, gs)):
            for q, gq in (zip(p, gp) if type(p) is tuple else [(p, gp)]):
                if q is None or gq is None or meta[q][0] is None:
                    continue
                if type(gq) in _SPARSE:
                    gq = gq.dense()
                shp, dt = meta[q]
                gshape = tuple(getattr(gq, "shape", np.shape(gq)))
                gdt = getattr(gq, "dtype", None)
                kinds = "fc" if dt is not None and dt.kind == "c" else "f"
                if gshape != tuple(shp) or (gdt is not None and gdt.kind not in kinds):
                    raise RuleError(
                        f"the rrule of {fn_name(fn)} returned a cotangent for argument {k} with "
                        f"shape {gshape} and dtype {gdt}; the argument has shape {tuple(shp)} and "
                        f"dtype {dt}. Undo broadcasting (sum over broadcast axes) and keep a "
                        "floating dtype (complex only for a complex argument).")
                if gdt is not None and dt is not None and dt.kind in "fc" and \
                        _precision(gdt) < _precision(dt):
                    raise RuleError(
                        f"the rrule of {fn_name(fn)} returned a {gdt} cotangent for argument {k}, "
                        f"which is {dt}: the gradient would lose precision (float32 rounding in a "
                        f"float64 computation). Compute the cotangent in the argument's dtype, "
                        f"e.g. from the argument itself or with .astype(x.dtype).")
        return gs
    return checked


def _precision(dt):
    """The bytes of one real component of a float or complex dtype (float32 and complex64: 4)."""
    dt = np.dtype(dt)
    return dt.itemsize // 2 if dt.kind == "c" else dt.itemsize
