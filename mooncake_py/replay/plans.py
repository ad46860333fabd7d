"""Replay for prepared caches (gradient, pullback, HVP, Hessian): record once, re-run a flat plan.

The first call of :func:`~mooncake_py.value_and_gradient` on a cache records ``f`` on a
:class:`PlanTape`, which logs, next to the usual nodes, a *plan*: for every recorded op its rule,
its arguments as a template (a slot for each tracked value, a copy of each constant), its
keywords and which arguments carry derivatives. Later calls run the plan: the rules are called
directly on the new input values (no user code, no dispatch, no TrackedArray objects, no rule
lookup, no keyword handling), and the pullbacks they return are swept as usual.

Soundness rests on one observation: ``f``'s Python code can only see plain values derived from
its differentiated inputs through (a) the plain outputs of ops on tracked values (comparisons,
argmax, rounding: zero-derivative ops, and rules returning non-float values) and (b)
``bool``/``int`` of a tracked value (shapes and dtypes are fixed by the
cache's argument check). Each of those is a *guard* in the plan, recomputed on replay and
compared with the value seen while recording; the non-differentiated arguments are guards too
(compared by value). If every guard holds, ``f`` would have made exactly the same calls with
the same constants, so the plan is its recording. A failed guard (or any error while replaying)
records ``f`` afresh, which also makes a new plan; a function that keeps failing falls back to
plain recording, with a one-time warning (a miss counts once that recording succeeds: ``f``
raising on bad input is not the plan failing).

A pullback cache's plan (:class:`PullbackReplayer`) is the same, with one slot per leaf of
``f``'s output (a plain output leaf is returned as recorded: it can depend on the inputs only
through the guards) and a sweep seeded with the caller's cotangents. Derivative caches run
these plans forward through the frules (replay/forward.py). HVP and Hessian caches use the
gradient plan recorded on dual numbers (``Replayer(dual=True)``): the same steps called on this
call's duals, the sweep run on them (forward-over-reverse); an argument given no direction is
a plain leaf among the duals, its kind guarded.

A plan may write. A write (``y[i, j] = v``, ``y[1:3] = v``, ``y += v``, also through an
indexing view ``y[i][j] = v`` or a reshape ``y.reshape(-1)[k] = v``) with a basic index (ints,
slices, Ellipsis, None) into a buffer that ``f`` allocated itself (``np.empty_like``,
``zeros_like``, ``ones_like``, ``full_like`` of a traced value, ``np.copy`` of one, or a
``like=`` constructor: ``np.zeros(n, like=x)``, a _LIKE step) is a _WRITE step
(replay/writes.py): the replay allocates the buffer afresh, writes into it as the recording
did, and sweeps undoing and redoing the writes as a MutatingTape does, so every pullback sees
the values it saw and the buffers end with their final contents. A read of a view made stale by
a write is viewed again, as a step, as the recording does. Which element is written, and
whether, can depend on the inputs only through guards, like everything else.

A function is recorded every call, never replayed, when its recording contains anything the
plan does not represent: any other write (into an argument, a constant, or an array another op
made; with an index array or mask; ``out=``), functions implemented as compositions of other
ops, multi-output ops, rules registered by the user, complex values, values of another
transformation (nesting), a write into one of its constant arguments, or a constant argument
that is not a plain value (number, string, NumPy array or scalar): a random generator or a
callable may carry state. (Derivative caches do not replay writes yet: replay/forward.py
records such functions every call.) Debug mode always records. A guard whose value changes with
the inputs (``mp.stop_gradient(x)`` used as a constant) makes every replay fail, so such a
function soon falls back to recording.

A plan recorded on dual numbers (HVP and Hessian caches) keeps its ops as general steps (the
compiled kernel reads them so); :meth:`Plan.dual_steps` runs those on dual scalars (``x[i]``,
``+ - * /``, the unary ufuncs) through dual_scalars.py's short paths, which a fresh recording
on a plain Tape takes too, so both give the same bits.

What a replayed function may not do (it would not be re-run): depend on anything but its
arguments (globals, closures that change, random numbers drawn inside it, the time, NumPy's
error state), read the private ``_value`` of a traced value, or have side effects it relies on
(printing, appending to a list). An op that raises while recording (``f`` catching a
LinAlgError, say) leaves the call unplanned. Pass ``replay=False`` to
:func:`~mooncake_py.prepare_gradient_cache` for such functions.
"""
import copy
import operator
import warnings

import numpy as np

from ..config import current_config
from ..core import array_module as am
from ..core.arguments import check_args, fname, gc_paused, is_float_leaf
from ..core.array_ops import ArrayOps, buffer_root, innermost
from ..core.dispatch import WRAPPER_TYPES
from ..core.pytree import flatten
from ..dual.dual_array import DualArray
from ..dual.seeding import own_tangents
from ..mixed import dual_scalars
from ..mixed.tracking import Tracked, as_gradient, check_scalar, check_seeds, unwrap_out
from ..rules import BUILTIN_RRULES
from ..rules.broadcasting import shape_of
from ..rules.derivative_table import load_for
from ..rules.indexing import is_basic_index
from ..rules.mutation import MUTATORS, call_like
from ..rules.registry import COMPOSITES, RRULES, ZERO_DERIVATIVE
from ..tape import fastpath
from ..tape.pullbacks import ItemRead
from ..tape.tape import (
    ComplexMutatingTape,
    ComplexTape,
    MutatingTape,
    Tape,
    _holds_tracked,
    _Rearranged,
    _Write,
    begin_writes,
)
from ..tape.tracked import TrackedArray
from .writes import _VIEW_WRITE, _WRITE, run_view_write, run_write, sweeping_tape

# Consecutive failed replays (guards that did not hold) after which a cache stops replaying.
MAX_FAILURES = 3

_SLOT, _CONST, _SEQ_T = 0, 1, 2
_OP, _GUARD, _OBSERVE, _ITEM, _UNARY, _BIN, _SUM = 0, 1, 2, 3, 4, 5, 6
# Kinds of a dual plan's run-time steps (Plan.dual_steps; never in Plan.steps): an _OP step on
# dual scalars, run as the dual-scalar short paths of dual_scalars.py record it
_DITEM, _DBIN, _DUNARY = 7, 8, 9
# (_LIKE, node, func, args, kwargs, h, type, shape, dtype): ``values[node] = func(*args,
# like=values[h], **kwargs)`` (a like= constructor: np.zeros(n, like=x)), of that type,
# shape and dtype; its pullback is None.
_LIKE = 12
# _WRITE = 10: ``values[h][key] = v`` into a buffer f allocated, and _VIEW_WRITE = 11: the node
# of an array a write reached through a view of it. Their tuples and how they run are in
# replay/writes.py: (_WRITE, node, h, key, is_slot, ref, region, vshape, vdtype, buftype) and
# (_VIEW_WRITE, node, src, pullback); field 1 is the node made (an int, as for every step
# that makes one).
_DUAL_NODES = (dual_scalars.binary_node, dual_scalars.unary_node)
_binary_node = dual_scalars._binary_node
_MAX_INT = dual_scalars._MAX_INT  # (int constants dual_scalars takes as exact float64s)
_F64 = np.float64
_F64_DT = np.dtype(np.float64)
_F32 = np.float32
_F32_DT = np.dtype(np.float32)
# The float dtypes a plan takes its inputs in. A replay calls the recorded rules on values of
# the recorded dtypes (every _OP step checks its output's dtype), so any of them replays
# bitwise; the float64-only short paths (_ITEM, _BIN, _UNARY, _SUM) are recorded for float64
# values only, and on anything else an op is a general step.
_PLAN_DTS = (_F64_DT, _F32_DT)
_ARRAYS = (np.ndarray, _F64, _F32)  # (what a dual leaf's value and tangent may be)
_SCALARS = (_F64, _F32)  # (what a scalar leaf may be)
_add_reduce = np.add.reduce
# Plans shorter than this run without pausing the garbage collector: the pause itself costs
# more than the collections a short run could trigger.
_GC_PAUSE_STEPS = 64
_BINARY = {np.add: (operator.add, fastpath._pb_add), np.subtract: (operator.sub, fastpath._pb_sub),
           np.multiply: (operator.mul, fastpath._pb_mul),
           np.true_divide: (operator.truediv, fastpath._pb_div)}
_SEQ = (list, tuple)
# Constant arguments a plan may compare by value; any other object (a random generator, a
# callable, a namespace) may change behind the comparison, so such calls are not planned.
_VALUE_TYPES = (np.ndarray, np.generic, int, float, complex, str, bytes)


class _Unsupported(Exception):
    """The recording holds something a plan cannot represent."""


class PlanTape(Tape):
    """A :class:`Tape` that also logs the plan of what it records (see the module docstring).
    The scalar-loop short paths (fastpath.py) apply to plain Tapes only, so every op comes
    through :meth:`record` here."""

    def __init__(self):
        super().__init__()
        self.plan_steps = []
        self.plan_broken = None  # why no plan can be made, once something unsupported ran
        # id -> array: the buffers f allocated by a plan step (_ALLOCATORS), which a plan may
        # write into (each replay allocates them afresh, as f did)
        self._buffers = {}

    def _break(self, why):
        if self.plan_broken is None:
            self.plan_broken = why

    def record(self, fn, args, kwargs):
        if self.plan_broken is not None:
            return Tape.record(self, fn, args, kwargs)
        if fn in MUTATORS or fn in COMPOSITES:
            self._break(f"{fn!r} is a composition of other ops")
            return Tape.record(self, fn, args, kwargs)
        if fn not in RRULES and fn not in ZERO_DERIVATIVE:
            load_for(fn)  # a scipy.special ufunc: register its rule before logging it
        n0 = len(self._parents)
        try:
            out = Tape.record(self, fn, args, kwargs)
        except BaseException:
            # f may catch it and take another path: which path depends on the values, and a
            # plan cannot re-raise at the same point, so this recording is not planned
            self._break(f"{fn!r} raised")
            raise
        if self.plan_broken is not None:  # (e.g. the op was complex: this is a ComplexTape now)
            return out
        try:
            self._log(fn, args, kwargs, out, n0)
        except _Unsupported as e:
            self._break(str(e))
        return out

    def _log(self, fn, args, kwargs, out, n0):
        n1 = len(self._parents)
        kw = _plain_kwargs(kwargs, self)
        tmpl = tuple(_template(a, self) for a in args)
        if n1 == n0:  # a plain result the Python code sees: a guard
            if not any(t[0] != _CONST for t in tmpl):
                raise _Unsupported("an op on values of another transformation")
            if _holds_wrapper(out):
                # (mp.stop_gradient of a dual, say): a value that carries this call's
                # derivative tag cannot be compared with, or stand in for, a later call's
                raise _Unsupported("an untracked value of another transformation")
            self.plan_steps.append((_GUARD, fn, tmpl, kw, _copy(out)))
            return
        if n1 != n0 + 1 or type(out) is not TrackedArray or out._tape is not self or \
                out._node != n0:
            raise _Unsupported(f"{fn!r} made several nodes")
        if fn not in BUILTIN_RRULES:
            raise _Unsupported(f"{fn!r} has a user-registered rule")
        v = out._value
        dt = getattr(v, "dtype", None)
        if dt is None or dt.kind != "f":
            raise _Unsupported("a non-float output")
        needs = tuple(p is not None for p in self._parents[n0])
        step = _scalar_step(fn, tmpl, n0, args, v) if not kw and type(v) is _F64 else None
        self.plan_steps.append(step or (_OP, fn, RRULES[fn], tmpl, kw, needs, n0,
                                        tuple(shape_of(v)), dt))
        if fn in _ALLOCATORS:
            root = innermost(v)
            if type(root) is np.ndarray and root.base is None and _owns_tangent(v, args):
                self._buffers[id(root)] = root

    def write(self, h, key, value):
        """A write: from here on this tape is a :class:`PlanMutatingTape`, which plans it."""
        if self.plan_broken is None and type(self) is PlanTape:
            self.__class__ = PlanMutatingTape
            begin_writes(self)
            return self.write(h, key, value)
        self._break("a write")
        return Tape.write(self, h, key, value)

    def observe(self, node, conv, result):
        """``conv(value)`` (bool, int, operator.index) of a tracked value was seen by ``f``."""
        if self.plan_broken is None:
            self.plan_steps.append((_OBSERVE, node, conv, result))

    def like(self, handle, func, args, kwargs):
        """``func(*args, like=handle)``: a _LIKE step when its arguments are constants and
        its result a new float buffer; a fresh one (_FRESH_LIKE) may be written into."""
        if self.plan_broken is None and (
                func is np.full and (_holds_wrapper(args[1:2]) or
                                     _holds_wrapper(kwargs.get("fill_value")))):
            self._break("np.full(..., like=) with a traced fill value")
        if self.plan_broken is not None:
            return Tape.like(self, handle, func, args, kwargs)
        n0 = len(self._parents)
        out = Tape.like(self, handle, func, args, kwargs)
        if self.plan_broken is None and len(self._parents) == n0 + 1:
            try:
                tmpl = [_template(a, self) for a in args]
                kw = _plain_kwargs(kwargs, self)
                if any(t[0] != _CONST for t in tmpl):
                    raise _Unsupported("a like= constructor of traced values")
            except _Unsupported as e:
                self._break(str(e))
                return out
            v = out._value
            self.plan_steps.append((_LIKE, n0, func, tuple(t[1] for t in tmpl), kw,
                                    handle._node, type(v), tuple(shape_of(v)), v.dtype))
            root = innermost(v)
            if func in _FRESH_LIKE and type(root) is np.ndarray and root.base is None and \
                    _owns_tangent(v, ()):
                self._buffers[id(root)] = root
        elif self.plan_broken is None and type(out) is TrackedArray:
            self._break("a like= constructor that made several nodes")
        return out

    def _go_complex(self):
        # No plan for complex values; from here on the tape checks every op's complex inputs
        # as any tape does (and stops logging).
        self._break("complex values")
        self.__class__ = ComplexTape


# like= constructors whose result is always new memory (np.asarray may return its argument).
_FRESH_LIKE = frozenset([np.zeros, np.empty, np.ones, np.full, np.eye, np.identity])
# Ops whose float output owns fresh memory that f may write into.
_ALLOCATORS = frozenset([np.empty_like, np.zeros_like, np.ones_like, np.full_like, np.copy])


def _owns_tangent(v, args):
    """Whether the output ``v`` of an allocator is a plain array, or a dual whose tangent is a
    plain array of its own (not an argument's: a write into it would reach the caller's)."""
    if type(v) is np.ndarray:
        return True
    t = getattr(v, "_tangent", None)
    if type(t) is not np.ndarray or not t.flags.writeable:
        return False
    root = buffer_root(t)
    for a in args:
        u = a._value if type(a) is TrackedArray else a
        at = getattr(u, "_tangent", None)
        if at is not None and buffer_root(at) is root:
            return False
    return True


class PlanMutatingTape(PlanTape, MutatingTape):
    """A :class:`PlanTape` that has recorded a write. It checks reads as a MutatingTape does
    (the re-view of a stale view is a plan step like any op) and logs each write into a
    buffer that ``f`` allocated (:data:`_ALLOCATORS`) with a basic index as a _WRITE step, and
    each array the write reaches through a view as a _VIEW_WRITE step (replay/writes.py).
    Any other write (into an argument, a constant or another op's output, with an index array)
    ends the plan."""

    def record(self, fn, args, kwargs):
        self.refresh_args(fn, args, kwargs)
        return PlanTape.record(self, fn, args, kwargs)

    def _review(self, fn, args, kwargs):
        return PlanTape.record(self, fn, args, kwargs)

    def _go_complex(self):
        self._break("complex values")
        self.__class__ = ComplexMutatingTape

    def _view_chain(self, h):
        chain = Tape._view_chain(self, h)
        # the node each viewed array has before the write moves it (its value's source)
        self._chain_srcs = [view[0]._node for view in chain]
        return chain

    def write(self, h, key, value):
        if self.plan_broken is None:
            why = self._unplanned_write(h, key, value)
            if why is not None:
                self._break(why)
        if self.plan_broken is not None:
            return Tape.write(self, h, key, value)
        if type(value) in _SEQ and _holds_tracked(value, self):
            value = np.stack(value)  # (as Tape.write would: an op of its own, a plan step)
        n0, k0 = len(self._parents), len(self.plan_steps)
        self._chain_srcs = []
        try:
            Tape.write(self, h, key, value)
        except BaseException:
            self._break("a write raised")
            raise
        if self.plan_broken is None:
            self._log_write(n0, k0, value)

    def _unplanned_write(self, h, key, value):
        """Why this write cannot be a plan step, or None."""
        if type(h) is not TrackedArray or h._tape is not self:
            return "a write into a value of another transformation"
        if not is_basic_index(key):
            return "a write with an index array"
        root = buffer_root(h._value)
        if self._buffers.get(id(root)) is not root:
            return "a write into an array that f did not allocate"
        if not (type(value) is TrackedArray and value._tape is self):
            if type(value) in _SEQ:
                if any(type(b) in WRAPPER_TYPES and not (type(b) is TrackedArray and
                                                         b._tape is self) for b in value):
                    return "a write of a value of another transformation"
            elif _holds_wrapper(value) or not isinstance(value, _VALUE_TYPES):
                return "a write of a value of another transformation"
        return None

    def _log_write(self, n0, k0, value):
        made = {_made_node(st) for st in self.plan_steps[k0:]}  # (re-views of stale views)
        srcs = iter(self._chain_srcs)
        for node in range(n0, len(self._parents)):
            if node in made:
                continue
            pb = self._pullbacks[node]
            if type(pb) is _Write and pb.buf is not None and pb.land is None:
                prev, vnode = self._parents[node]
                ref = _copy(value) if vnode is None else vnode
                self.plan_steps.append((_WRITE, node, prev, pb.key, vnode is not None, ref,
                                        pb.region, pb.vshape, pb.vdtype, type(pb.buf)))
            elif (type(pb) is _Write and pb.buf is None) or type(pb) is _Rearranged:
                src = next(srcs, None)
                if src is None:
                    raise AssertionError("a view write without its array")
                self.plan_steps.append((_VIEW_WRITE, node, src, pb))
            else:
                self._break("a write made a node of an unknown kind")
                return


_PLAN_TAPES = frozenset([PlanTape, PlanMutatingTape])


def _made_node(step):
    """The node a plan step makes (None for guards and observations)."""
    kind = step[0]
    if kind == _OP:
        return step[6]
    if kind == _WRITE or kind == _VIEW_WRITE or kind == _LIKE:
        return step[1]
    if kind == _GUARD or kind == _OBSERVE:
        return None
    return step[2]


def _scalar_step(fn, tmpl, node, args, y):
    """The scalar-loop ops as the short paths of fastpath.py record them (an ItemRead, the
    table's derivative written out), when their rule is the built-in one; else None. Also
    ``np.sum(x)`` of a float64 array, as its short path does (np.add.reduce, the sum rule's
    pullback)."""
    if RRULES.get(fn) is not fastpath._BUILTIN.get(fn, False):
        return None
    if fn is np.sum:
        if len(tmpl) == 1 and tmpl[0][0] == _SLOT:
            v = args[0]._value
            if type(v) is np.ndarray and v.dtype == _F64_DT and v.ndim:
                return (_SUM, fn, node, tmpl[0][1], v.shape)
        return None
    if fn is operator.getitem:
        (ka, pa), (kb, key) = tmpl
        if ka == _SLOT and kb == _CONST and _int_key(key) and type(args[0]._value) is np.ndarray:
            return (_ITEM, fn, node, pa, key, ItemRead(args[0]._value.shape, key))
        return None
    how = fastpath._UNARY.get(fn)
    if how is not None:
        (ka, pa), = tmpl
        if ka == _SLOT and type(args[0]._value) is _F64:
            return (_UNARY, fn, node, pa, how[0], how[1])
        return None
    how = _BINARY.get(fn)
    if how is not None and len(tmpl) == 2:
        ok = True
        for (k, ref), a in zip(tmpl, args):
            if k == _SLOT:
                ok = ok and type(a._value) is _F64
            else:
                ok = ok and k == _CONST and type(ref) in (_F64, float, int)
        if ok:
            which = 0 if tmpl[0][0] == tmpl[1][0] == _SLOT else 1 if tmpl[0][0] == _SLOT else 2
            return (_BIN, fn, node, tmpl, how[0], how[1], which)
    return None


def _int_key(key):
    """An int, or a tuple of ints (``x[i, j]``): the keys an _ITEM step reads with. (The
    getitem rule's pullback for such a key is the IndexedCotangent an ItemRead makes.)"""
    if type(key) in fastpath._INT_KEYS:
        return True
    return type(key) is tuple and len(key) > 0 and all(type(k) in fastpath._INT_KEYS for k in key)


def _holds_wrapper(v):
    t = type(v)
    if t in WRAPPER_TYPES:
        return True
    return t in _SEQ and any(_holds_wrapper(b) for b in v)


def _plain_kwargs(kwargs, tape):
    if not kwargs:
        return kwargs
    kw = dict(kwargs)
    if "out" in kw:
        o = kw.pop("out")
        if o is not None and not (type(o) is tuple and all(u is None for u in o)):
            raise _Unsupported("out=")
    for v in kw.values():
        if type(v) in WRAPPER_TYPES or (type(v) in _SEQ and any(type(b) in WRAPPER_TYPES
                                                                  for b in v)):
            raise _Unsupported("a tracked keyword argument")
    return {k: _copy(v) for k, v in kw.items()}


def _template(a, tape):
    t = type(a)
    if t is TrackedArray and a._tape is tape:
        return (_SLOT, a._node)
    if t in WRAPPER_TYPES:
        raise _Unsupported("a value of another transformation")
    if t in _SEQ:
        items = tuple(_template(b, tape) for b in a)
        if all(i[0] == _CONST for i in items):
            return (_CONST, _copy(a))
        return (_SEQ_T, t, items)
    return (_CONST, _copy(a))


def _copy(v):
    """A constant as it was when recorded (the caller may reuse its buffers afterwards)."""
    if type(v) is np.ndarray:
        return v.copy()
    if type(v) in _SEQ:
        return type(v)(_copy(b) for b in v)
    return v


def _fill(tmpl, values):
    out = []
    for t in tmpl:
        k = t[0]
        if k == _SLOT:
            out.append(values[t[1]])
        elif k == _CONST:
            out.append(t[1])
        else:
            out.append(t[1](_fill(t[2], values)))
    return out


def _same(a, b):
    """Whether a recomputed plain value equals the one recorded (type, dtype, shape, contents;
    NaNs in the same places count as equal)."""
    if type(a) is not type(b):
        return False
    if type(a) in _SEQ:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, (np.ndarray, np.generic)):
        if a.dtype != b.dtype or np.shape(a) != np.shape(b):
            return False
        try:
            return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
        except TypeError:
            return bool(np.array_equal(a, b))
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001  (any failure of a replay falls back to recording)
        return a is b


class _Failed(Exception):
    """A guard did not hold: the function must be recorded again."""


class Plan:
    """A recording of ``f`` at one set of arguments, ready to be run on new values."""

    def __init__(self, tape, inputs, ynode, constants, ndiff=None):
        self.steps = tape.plan_steps
        self.n = len(tape._parents)
        self.parents = list(tape._parents)
        self.fns = list(tape._fns)
        self.inputs = inputs
        # inputs[:ndiff] are differentiated; the rest are data (data_args), read every call
        self.ndiff = len(inputs) if ndiff is None else ndiff
        self.ynode = ynode
        self.constants = constants  # (position among the flattened leaves, recorded copy)
        # the write nodes (_WRITE steps) in recording order: the sweep undoes and redoes them
        self.writes = list(getattr(tape, "_writes", ()))
        self.splits = list(getattr(tape, "_splits", ()))  # (and the views they moved)
        self.short = len(self.steps) < _GC_PAUSE_STEPS
        if self.ndiff < len(inputs):
            self._cut_data()

    def _cut_data(self):
        """Cut the edges into the nodes computed from the data alone: the ops that mix them
        with differentiated values are called with ``needs`` False there (a constant, for
        their rule: no cotangent computed) and the sweep never reaches them."""
        active = [False] * self.n
        for node in self.inputs[:self.ndiff]:
            active[node] = True
        parents = self.parents
        for node in range(self.n):
            ps = parents[node]
            if ps and not active[node]:
                active[node] = any(active[p] if type(p) is int else
                                   type(p) is tuple and any(q is not None and active[q]
                                                            for q in p) for p in ps)
        steps = []
        for st in self.steps:
            if st[0] == _OP and active[st[6]]:
                node, ps = st[6], parents[st[6]]
                cut = [type(p) is int and not active[p] for p in ps]
                if any(cut):
                    parents[node] = tuple(None if c else p for p, c in zip(ps, cut))
                    st = st[:5] + (tuple(n and not c for n, c in zip(st[5], cut)),) + st[6:]
            steps.append(st)
        self.steps = steps

    def run(self, leaves):
        """``(value, cotangents of the inputs)`` for the tracked ``leaves``; raises _Failed."""
        values, pbs = self.forward(leaves)
        return values[self.ynode], self.sweep(values, pbs, values[self.ynode], None)

    def run_pullback(self, leaves, seeds):
        """``(output leaves, cotangents of the inputs)`` for the tracked ``leaves`` and one
        cotangent seed per output leaf (plans made by :class:`PullbackReplayer`)."""
        values, pbs = self.forward(leaves)
        outs = [values[r] if k == _SLOT else _copy(r) for k, r in self.outs]
        ys = [values[r] if k == _SLOT else None for k, r in self.outs]
        return outs, self.sweep(values, pbs, ys, seeds)

    def dual_steps(self):
        """:attr:`steps` with each _OP step that a fresh recording on dual scalars makes by
        the short paths of dual_scalars.py (``x[i]``, ``+ - * /``, the unary ufuncs, with a
        float64 scalar output) as a step that runs that short path: the same forward
        computation and the same pullback object as the recording, so the results are
        bitwise those of ``mp.hvp``, with no rule, dual dispatch or frule wrapper in between.
        Each such step keeps its _OP step, run instead when the short path does not apply."""
        d = getattr(self, "_dual_steps", None)
        if d is None:
            d = self._dual_steps = [_dual_step(st) for st in self.steps]
        return d

    def forward(self, leaves):
        """Every node's value and pullback, recomputed for ``leaves``; raises _Failed."""
        values = [None] * self.n
        for node, leaf in zip(self.inputs, leaves):
            values[node] = np.float64(leaf) if type(leaf) is float else leaf
        pbs = [None] * self.n
        steps = self.steps
        if leaves and type(leaves[0]) is DualArray and (
                len(leaves) == 1 or all(type(leaf) is DualArray for leaf in leaves)):
            # (not with a plain leaf among duals, an argument given no direction: the short
            # paths take a plain operand for a constant and would drop its cotangent)
            steps = self.dual_steps()
        for step in steps:
            kind = step[0]
            if kind == _ITEM:
                _, fn, node, p, key, pb = step
                v = values[p]
                if type(v) is not np.ndarray or RRULES.get(fn) is not fastpath._BUILTIN[fn]:
                    raise _Failed()
                y = v[key]
                if type(y) is not _F64:
                    raise _Failed()
                values[node] = y
                pbs[node] = pb
            elif kind == _BIN:
                _, fn, node, ((ka, ra), (kb, rb)), op, factory, which = step
                a = values[ra] if ka == _SLOT else ra
                b = values[rb] if kb == _SLOT else rb
                if (ka == _SLOT and type(a) is not _F64) or (kb == _SLOT and type(b) is not _F64) \
                        or RRULES.get(fn) is not fastpath._BUILTIN[fn]:
                    raise _Failed()
                y = op(a, b)
                if type(y) is not _F64:
                    raise _Failed()
                values[node] = y
                pbs[node] = factory(a, b, y, which)
            elif kind == _UNARY:
                _, fn, node, p, d1, factory = step
                v = values[p]
                if type(v) is not _F64 or RRULES.get(fn) is not fastpath._BUILTIN[fn]:
                    raise _Failed()
                y = -v if factory is fastpath._neg_pullback else fn(v)
                if type(y) is not _F64:
                    raise _Failed()
                values[node] = y
                pbs[node] = factory(d1, v, y)
            elif kind == _SUM:
                _, fn, node, p, shape = step
                v = values[p]
                if type(v) is not np.ndarray or v.dtype != _F64_DT or v.shape != shape or \
                        RRULES.get(fn) is not fastpath._BUILTIN[fn]:
                    raise _Failed()
                y = _add_reduce(v, axis=None)
                if type(y) is not _F64:
                    raise _Failed()
                values[node] = y
                pbs[node] = fastpath._sum_pullback(shape)
            elif kind == _OP:
                _general_op(step, values, pbs)
            elif kind == _DITEM:
                _, node, p, key, step = step
                d = values[p]
                if type(d) is DualArray and RRULES.get(operator.getitem) is step[2]:
                    tag = d._tag
                    v, t = d._value, d._tangent
                    if not tag._watch and not tag.lanes and type(v) is np.ndarray and \
                            type(t) is np.ndarray:
                        y = v[key]
                        if type(y) is _F64:
                            ty = t[key]
                            if type(ty) is _F64:
                                values[node] = DualArray(y, ty, tag)
                                pbs[node] = ItemRead(v.shape, key)
                                continue
                _general_op(step, values, pbs)
            elif kind == _DBIN:
                _, node, fn, op, ka, ra, kb, rb, step = step
                made = _dual_binary(op, fn, values[ra] if ka == _SLOT else ra,
                                    values[rb] if kb == _SLOT else rb) \
                    if RRULES.get(fn) is op.builtin else None
                if made is None:
                    _general_op(step, values, pbs)
                else:
                    values[node], pbs[node] = made
            elif kind == _DUNARY:
                _, node, fn, p, step = step
                made = _DUAL_NODES[1](fn, values[p])
                if made is None:
                    _general_op(step, values, pbs)
                else:
                    values[node], pbs[node] = made
            elif kind == _WRITE:
                run_write(step, values, pbs)
            elif kind == _VIEW_WRITE:
                run_view_write(step, values, pbs)
            elif kind == _LIKE:
                _run_like(step, values)
            else:
                check_guard(step, values)
        return values, pbs

    def sweep(self, values, pbs, y, seeds):
        """The inputs' cotangents: the reverse sweep of ``pbs`` from output node ``ynode``
        (seed one), or with ``seeds`` from the output nodes of :attr:`outs` (a list ``y`` of
        their values, None for a constant output)."""
        tape = Tape()
        if tape._debug:  # debug mode checks every cotangent: the recording path does that
            raise _Failed()
        tape._pullbacks, tape._parents, tape._fns = pbs, self.parents, self.fns
        if self.writes:
            sweeping_tape(tape, self.writes, self.splits)
        try:
            if seeds is None:
                ys = TrackedArray(y, tape, self.ynode)
            else:
                ys = [None if v is None else TrackedArray(v, tape, r)
                      for v, (k, r) in zip(y, self.outs)]
            entries = [TrackedArray(values[n], tape, n) for n in self.inputs[:self.ndiff]]
            return tape.gradient(ys, entries, seeds=seeds)
        finally:
            tape.close()


def _dual_step(step):
    if step[0] != _OP:
        return step
    _, fn, rule, tmpl, kw, _needs, node, shape, dt = step
    if kw or shape != () or dt != _F64_DT or rule is not fastpath._BUILTIN.get(fn):
        return step
    if fn is operator.getitem:
        if len(tmpl) == 2 and tmpl[0][0] == _SLOT and tmpl[1][0] == _CONST:
            return (_DITEM, node, tmpl[0][1], tmpl[1][1], step)
        return step
    op = dual_scalars._OPS.get(fn)
    if op is None or len(tmpl) != op.nin or any(k not in (_SLOT, _CONST) for k, _ in tmpl):
        return step
    if op.nin == 1:
        return (_DUNARY, node, fn, tmpl[0][1], step) if tmpl[0][0] == _SLOT else step
    (ka, ra), (kb, rb) = tmpl
    return (_DBIN, node, fn, op, ka, ra, kb, rb, step)


def _dual_binary(op, fn, a, b):
    """dual_scalars.binary_node's checks for a step whose op and rule are known (the rule
    checked by the caller), then its node; None where the general rule must run."""
    D = DualArray
    if type(a) is D:
        tag = a._tag
        pa, ta = a._value, a._tangent
        if type(pa) is not _F64 or type(ta) is not _F64:
            return None
        if type(b) is D:
            pb, tb = b._value, b._tangent
            if b._tag is not tag or type(pb) is not _F64 or type(tb) is not _F64:
                return None
            present = (True, True)
        else:
            t = type(b)
            if not (t is _F64 or t is float or (t is int and -_MAX_INT <= b <= _MAX_INT)):
                return None
            pb, tb, present = b, None, (True, False)
    elif type(b) is D:
        tag = b._tag
        pb, tb = b._value, b._tangent
        t = type(a)
        if type(pb) is not _F64 or type(tb) is not _F64 or \
                not (t is _F64 or t is float or (t is int and -_MAX_INT <= a <= _MAX_INT)):
            return None
        pa, ta, present = a, None, (False, True)
    else:
        return None
    if tag._watch or tag.lanes:
        return None
    return _binary_node(op, fn, a, b, pa, ta, pb, tb, present, tag)


def check_guard(step, values):
    """Re-check a _GUARD step (the plain value an op gave ``f``) or an _OBSERVE step (``bool``
    or ``int`` of a traced value) on the replay's ``values``; raises _Failed if it differs."""
    if step[0] == _GUARD:
        _, fn, tmpl, kw, seen = step
        args = _fill(tmpl, values)
        got = getattr(fn[0], fn[1])(*args, **kw) if type(fn) is tuple else fn(*args, **kw)
        if not _same(got, seen):
            raise _Failed()
    else:
        _, node, conv, seen = step
        if conv(values[node]) != seen:
            raise _Failed()


def _run_like(step, values):
    """Run a _LIKE step (raises _Failed when the result is not as recorded)."""
    _, node, func, args, kw, h, t, shape, dt = step
    out = call_like(func, args, kw, values[h])
    if type(out) is not t or out.dtype != dt or tuple(shape_of(out)) != shape:
        raise _Failed()
    values[node] = out


def _general_op(step, values, pbs):
    """Run an _OP step: its rule called on the values of its slots (raises _Failed when the
    output is not of the shape and dtype recorded)."""
    _, fn, rule, tmpl, kw, needs, node, shape, dt = step
    if RRULES.get(fn) is not rule:  # a rule registered since the recording
        raise _Failed()
    out, pb = rule(_fill(tmpl, values), kw, needs)
    t = type(out)
    if t is float:
        out, t = np.float64(out), _F64
    if t is np.ndarray or t is _F64:  # (the common outputs: no generic look-ups)
        if pb is None or out.dtype != dt or out.shape != shape:
            raise _Failed()
    elif pb is None or getattr(out, "dtype", None) != dt or \
            tuple(shape_of(out)) != shape:
        raise _Failed()
    values[node] = out
    pbs[node] = pb


def _observing(conv, general):
    def method(self):
        r = general(self)
        t = self._tape
        if type(t) in _PLAN_TAPES:
            t.observe(self._node, conv, r)
        return r
    method.__name__ = general.__name__
    return method


def install():
    """Let PlanTapes see ``bool`` and ``int`` of tracked values (a type check for every other
    tape). (Tracked values are floats: ``operator.index`` of one raises, so it needs none.)"""
    TrackedArray.__bool__ = _observing(bool, ArrayOps.__bool__)
    TrackedArray.__int__ = _observing(int, ArrayOps.__int__)


def record_call(f, args, nums, tape_cls):
    """``value_and_grad(f, argnums=nums)(*args)`` recorded on a ``tape_cls``: returns the value,
    the gradients (a tuple), the tracked arguments and the tape (as the general path of
    :func:`~mooncake_py.value_and_grad` does, step for step)."""
    am.module_of(*[args[i] for i in nums], what=f"the arguments of {fname(f)}")
    data = data_args(args, nums) if tape_cls in _PLAN_TAPES else ()
    tape = tape_cls()
    with gc_paused():
        try:
            tr = Tracked(f, args, tuple(nums) + data, tape)
            y = f(*tr.args)
            check_scalar(f, y)
            grads = tr.structure(tape.gradient(y, tr.entry))
        except Exception:
            if not data:
                raise
            # f does with its data what a traced value cannot do (hands it to a library that
            # converts it, say): recorded with the data plain, as mp.grad would, unplanned
            return record_call(f, args, nums, Tape)
        finally:
            tape.close()
    return unwrap_out(y), tuple(grads[:len(nums)]), tr, tape, y


class Replayer:
    """The replay state of one gradient cache: its plan, and how often replay failed.

    Example:
        >>> import numpy as np
        >>> r = Replayer()
        >>> f = lambda x: np.sum(np.sin(x))
        >>> y0, (g0,) = r.call(f, (np.zeros(2),), (0,))   # records, and plans
        >>> y1, (g1,) = r.call(f, (np.ones(2),), (0,))    # replays
        >>> bool(np.allclose(g1, np.cos(1.0))), r.replays
        (True, 1)
    """

    def __init__(self, dual=False, kind="gradient"):
        # dual: the differentiated leaves are this call's dual numbers (forward-over-reverse:
        # the HVP and Hessian caches); the plan is the same tape-level plan, its rules called
        # on the new duals and its pullbacks swept on them
        self.dual = dual
        self.kind = kind
        self.plan = None
        self.failures = 0
        self.disabled = False
        self.warned = False
        self.replays = 0  # calls served by the plan (for tests and benchmarks)
        self.unplanned = 0  # recordings in a row that could not be planned

    def call(self, f, args, nums):
        """``(value, gradients)`` of ``f`` at ``args``: from the plan when there is one whose
        guards hold, else by recording (which makes a new plan)."""
        if self.disabled or current_config().debug_mode:  # (debug mode checks the recording)
            if self.dual:
                own_tangents(args)
            return record_call(f, args, nums, Tape)[:2]
        plan = self.plan
        if self.dual and (plan is None or getattr(plan, "writes", None)):
            # (the duals' tangents may be lent views of the caller's directions: only a plan
            # that writes nothing runs on them)
            own_tangents(args)
        if plan is not None and len(args) == 1 and nums == (0,) and getattr(plan, "short", 0) and \
                not plan.constants:
            # One float64 or float32 argument (the common call): the leaf _split_leaves would give,
            # without its walk; anything else, or a failed run, takes the path below, which
            # decides (runs the plan again, records, counts the miss).
            a = args[0]
            if self.dual:
                if type(a) is DualArray:
                    v, g = a._value, a._tangent
                    leaf = type(v) in _ARRAYS and type(g) in _ARRAYS and \
                        (v.dtype == _F64_DT or v.dtype == _F32_DT) and g.dtype == v.dtype
                else:
                    leaf = False
            else:
                leaf = type(a) is np.ndarray and (a.dtype == _F64_DT or a.dtype == _F32_DT)
            if leaf:
                try:
                    y, cts = plan.run([a])
                    grads = tuple(plan.finish(cts))
                except Exception:  # noqa: BLE001,S110  (the general path decides)
                    pass
                else:
                    self.failures = 0
                    self.replays += 1
                    return y, grads
        if plan is not None:
            leaves, consts = _split_leaves(args, nums, self.dual, self.dual)
            if leaves is not None and len(consts) == len(plan.constants) and all(
                    _same(c, s) for c, s in zip(consts, plan.constants)):
                try:
                    if getattr(plan, "short", False):
                        y, cts = plan.run(leaves)
                    else:
                        with gc_paused():
                            y, cts = plan.run(leaves)
                    grads = tuple(plan.finish(cts))
                except Exception:  # noqa: BLE001,S110  (a failed guard, or anything else: record)
                    pass
                else:
                    self.failures = 0
                    self.replays += 1
                    return y, grads
            # A miss counts once the recording has succeeded: when f itself raises (bad
            # input), that is the caller's error, not a sign that the plan keeps failing.
            missed = True
            if self.dual:
                own_tangents(args)
            if self.failures + 1 >= MAX_FAILURES:
                out = record_call(f, args, nums, Tape)[:2]
                self.failed(f)
                return out
        else:
            missed = False
        before = [_copy(c) for c in _split_leaves(args, nums, self.dual, self.dual)[1]]
        y, grads, tr, tape, yt = record_call(f, args, nums, PlanTape)
        if missed:
            self.failed(f)
        self.plan = _make_plan(tape, tr, yt, args, nums, before, self.dual)
        self.planned(self.plan)
        return y, grads

    def planned(self, plan):
        """Note whether a recording could be planned. After ``MAX_FAILURES`` recordings in a
        row that could not (writes, say), stop recording on a PlanTape: a plain Tape records
        faster (the short paths of fastpath.py), and there is nothing to replay anyway."""
        if plan is not None:
            self.unplanned = 0
            return
        self.unplanned = getattr(self, "unplanned", 0) + 1
        if self.unplanned >= MAX_FAILURES:
            self.disabled = True  # (silently: nothing failed, the function just writes)

    def failed(self, f):
        """Count a replay that could not serve the call; True (and a one-time warning) when
        the cache gives up replaying."""
        self.failures += 1
        if self.failures < MAX_FAILURES:
            return False
        self.disabled, self.plan = True, None
        if not self.warned:
            self.warned = True
            warnings.warn(
                f"the prepared {self.kind} cache of {getattr(f, '__qualname__', f)!r} "
                "stopped replaying its recording: its guards (branches on traced "
                f"values, or the constant arguments) failed {MAX_FAILURES} times in a "
                "row, so it records every call from now on. Prepare it with "
                "replay=False to silence this.", RuntimeWarning, stacklevel=4)
        return True

    def consts_hold(self, consts):
        """Whether this call's constant leaves equal those the plan was recorded with."""
        want = self.plan.constants
        return len(consts) == len(want) and all(_same(c, w) for c, w in zip(consts, want))






def _split_leaves(args, nums, dual=False, plain=False):
    """(the tracked leaves in recording order, the other leaves) of ``args``; None for the
    first when a leaf is not of a kind the plan replays. With ``dual`` the tracked leaves
    must be duals of float64 or float32 NumPy values with tangents of their dtype (no
    nesting: a dual of duals, i.e. a transformation of the cache's call, is recorded every
    time), and with ``plain`` also plain float64 or float32 values (an argument given no
    direction: tracked by an HVP cache's plan),
    each with a marker of its kind among the others. The data arguments
    (:func:`data_args`) come last among the tracked leaves."""
    if not dual:  # plain array arguments (the common call): each is its own one leaf
        leaves, consts, data = [], [], []
        for i, a in enumerate(args):
            if type(a) is not np.ndarray:
                break
            if i in nums and a.dtype.kind in "fc":
                if a.dtype not in _PLAN_DTS:
                    return None, consts
                leaves.append(a)
            elif a.dtype in _PLAN_DTS:
                data.append(a)
            else:
                consts.append(a)
        else:
            return leaves + data if data else leaves, consts
    else:  # duals of plain arrays (the common HVP / derivative call), the same way
        D = DualArray
        leaves, consts, data = [], [], []
        for i, a in enumerate(args):
            t = type(a)
            if i in nums and t is D:
                v, g = a._value, a._tangent
                if type(v) not in _ARRAYS or type(g) not in _ARRAYS or \
                        v.dtype not in _PLAN_DTS or g.dtype != v.dtype:
                    return None, consts
                leaves.append(a)
            elif t is np.ndarray and not (i in nums and a.dtype.kind in "fc"):
                (data if a.dtype in _PLAN_DTS else consts).append(a)
            else:
                break
        else:
            return leaves + data if data else leaves, consts
    leaves, consts, data = [], [], []
    for i, a in enumerate(args):
        if type(a) is np.ndarray and a.dtype in _PLAN_DTS and i not in nums:
            data.append(a)
            continue
        for leaf in flatten(a)[0]:
            if i in nums and is_float_leaf(leaf):
                t = type(leaf)
                if plain and t is not DualArray and (
                        t is float or ((t is np.ndarray or t in _SCALARS) and
                                       leaf.dtype in _PLAN_DTS)):
                    # a float argument given no direction (v = (v, None)): tracked, but
                    # plain where the others are duals; the marker among the constants
                    # guards that kind, so that a call with a dual there (or another type
                    # or shape) records instead of replaying a plan made for a plain value
                    consts.append(f"plain float leaf {t.__name__} {np.shape(leaf)}")
                elif dual:
                    if t is not DualArray or not (
                            type(leaf._value) in _ARRAYS and
                            type(leaf._tangent) in _ARRAYS and
                            leaf._value.dtype in _PLAN_DTS and
                            leaf._tangent.dtype == leaf._value.dtype):
                        return None, consts
                elif not (t is float or ((t is np.ndarray or t in _SCALARS)
                                         and leaf.dtype in _PLAN_DTS)):
                    return None, consts
                leaves.append(leaf)
            else:
                consts.append(leaf)
    return leaves + data if data else leaves, consts


def data_args(args, nums):
    """The positions of the arguments that are data of a plan: float64 or float32 NumPy
    arrays not differentiated (not in ``nums``). They are tracked while recording, after the
    differentiated leaves (so that what ``f`` computes from them is a plan step, recomputed
    on every replay, never a constant), and are inputs of the plan: :func:`_split_leaves`
    puts them after the differentiated leaves. No cotangent is computed for them on replay
    (:meth:`Plan.__init__` cuts the edges into them)."""
    return tuple(i for i, a in enumerate(args)
                 if i not in nums and type(a) is np.ndarray and a.dtype in _PLAN_DTS)




def _make_plan(tape, tr, y, args, nums, before, dual=False):
    if type(y) is not TrackedArray or y._tape is not tape or \
            not _plannable(tape, tr, args, nums, before, dual):
        return None
    plan = Plan(tape, [e._node for e in tr.entry], y._node, before, _ndiff(tr, nums))
    plan.finish = _finisher(tr, args, nums, dual)
    return plan


def _ndiff(tr, nums):
    """How many of ``tr``'s tracked leaves are differentiated (the data's come after)."""
    return sum(w is not None for i, _, _, where in tr.slots if i in nums for w in where)


def _finisher(tr, args, nums, dual=False):
    """How a plan's cotangents become the gradients: ``tr.structure``, or for arguments that
    are all plain arrays (one leaf each, no container to rebuild; with ``dual`` all duals) the
    same conversion (``api._as_gradient``) applied leaf by leaf. (``_as_gradient`` hands a
    dual cotangent back as it is, whatever the leaf, so that case skips the call.)"""
    leaf_type = DualArray if dual else np.ndarray
    if not all(type(args[i]) is leaf_type for i in nums):
        if len(tr.slots) > len(nums):  # (data slots after the differentiated ones: dropped)
            tr = copy.copy(tr)
            tr.slots = tr.slots[:len(nums)]
        return tr.structure
    protos = [np.empty(0, args[i].dtype) for i in nums]  # (dtype and type are what it reads)
    if dual:
        def finish(cts):
            return [c if type(c) is leaf_type else as_gradient(c, p)
                    for c, p in zip(cts, protos)]
        # (for lean.py: a generated one-array HVP applies the same conversion inline)
        finish.dual_protos = protos
        return finish

    def finish(cts):
        return [as_gradient(c, p) for c, p in zip(cts, protos)]
    # (for one_array.py: an owned array of the leaf's dtype comes out of as_gradient as it is)
    finish.owned_as_is = True
    finish.dtypes = [p.dtype for p in protos]
    finish.protos = protos  # (for lean.py: a generated one-array gradient converts inline)
    return finish


def _plannable(tape, tr, args, nums, before, dual):
    """Whether the recording on ``tape`` can be a plan (see the module docstring)."""
    if type(tape) not in _PLAN_TAPES and getattr(tape, "_open_class", None) not in _PLAN_TAPES:
        return False  # it became a plain MutatingTape (a write no plan step represents)
    if tape.plan_broken is not None:
        return False
    leaves, consts = _split_leaves(args, nums, dual, dual)
    if leaves is None or len(consts) != len(before) or \
            not all(_same(a, b) for a, b in zip(consts, before)):
        return False  # f wrote into a constant argument: a replay would not
    if not all(isinstance(c, _VALUE_TYPES) or c is None for c in consts):
        return False  # an object argument (a random generator, a callable) may carry state
    inputs = [e._node for e in tr.entry]
    if inputs != list(range(len(inputs))):
        return False
    # every other node must be made by a step of the plan (a safety net: a node recorded by a
    # path the plan does not see would be missing from the replay)
    made = [_made_node(st) for st in tape.plan_steps if st[0] not in (_GUARD, _OBSERVE)]
    return made == list(range(len(inputs), len(tape._parents)))


def output_template(outs, tape):
    """Per output leaf ``(_SLOT, node)`` for a value of ``tape``, ``(_CONST, copy)`` for a
    plain value; None when an output is of another transformation (or a container the
    flattening left whole), which a plan cannot return.

    A plain output can only depend on the inputs through the plan's guards (module
    docstring), so when they hold it is the recorded value."""
    tmpl = []
    for o in outs:
        if type(o) is TrackedArray and o._tape is tape:
            tmpl.append((_SLOT, o._node))
        elif _holds_wrapper(o) or not (isinstance(o, _VALUE_TYPES) or o is None):
            return None
        else:
            tmpl.append((_CONST, _copy(o)))
    return tmpl


def record_pullback(f, args, nums, ybar, tape_cls):
    """``mp.vjp(f, *args)`` and its pullback at ``ybar``, recorded on a ``tape_cls`` step for
    step as :func:`~mooncake_py.vjp` does: returns the value, the cotangents (a tuple over
    ``nums``), the tracked arguments, the tape and the flattened outputs."""
    check_args(f, args, range(len(args)))
    data = data_args(args, nums) if tape_cls in _PLAN_TAPES else ()
    tape = tape_cls()
    with gc_paused():
        try:
            tr = Tracked(f, args, tuple(nums) + data, tape)
            outs, ytree = flatten(f(*tr.args))
            seeds, stree = flatten(ybar)
            check_seeds(f, outs, ytree, seeds, stree)
            cots = tr.structure(tape.gradient(outs, tr.entry, seeds=seeds))
        except Exception:
            if not data:
                raise
            # (as in record_call: the data plain, unplanned)
            return record_pullback(f, args, nums, ybar, Tape)
        finally:
            tape.close()
    return (ytree.unflatten([unwrap_out(o) for o in outs]), tuple(cots[:len(nums)]), tr, tape,
            outs, ytree)


def _complex_seed(seeds):
    for s in seeds:
        if type(s) is complex or getattr(getattr(s, "dtype", None), "kind", "f") == "c":
            return True
    return False


class PullbackReplayer(Replayer):
    """The replay state of one pullback cache: a plan whose outputs are the leaves of ``f``'s
    output (arrays, scalars, containers of them; plain leaves returned as recorded) and whose
    sweep starts from the caller's cotangent seed ``ybar``. Guards, fallback and the give-up
    after repeated failures are the :class:`Replayer`'s.

    Example:
        >>> import numpy as np
        >>> r = PullbackReplayer()
        >>> f = lambda x: (np.sin(x), 2.0 * x)
        >>> ybar = (np.ones(2), np.ones(2))
        >>> _ = r.call(f, (np.zeros(2),), (0,), ybar)        # records, and plans
        >>> (s, d), (gx,) = r.call(f, (np.zeros(2),), (0,), ybar)   # replays
        >>> gx.tolist(), r.replays
        ([3.0, 3.0], 1)
    """

    def __init__(self):
        Replayer.__init__(self, kind="pullback")

    def call(self, f, args, nums, ybar):
        """``(value, cotangents over nums)`` of ``f`` at ``args`` for output cotangent ``ybar``."""
        if self.disabled or current_config().debug_mode:
            return record_pullback(f, args, nums, ybar, Tape)[:2]
        seeds, stree = flatten(ybar)
        if _complex_seed(seeds):  # (mp.vjp's own path: a complex seed on a real output raises)
            return record_pullback(f, args, nums, ybar, Tape)[:2]
        plan = self.plan
        if plan is not None:
            leaves, consts = _split_leaves(args, nums)
            if leaves is not None and stree == plan.ytree and len(seeds) == len(plan.outs) \
                    and self.consts_hold(consts):
                try:
                    if plan.short:
                        outs, cts = plan.run_pullback(leaves, seeds)
                    else:
                        with gc_paused():
                            outs, cts = plan.run_pullback(leaves, seeds)
                    cots = tuple(plan.finish(cts))
                except Exception:  # noqa: BLE001,S110  (a failed guard, or anything else: record)
                    pass
                else:
                    self.failures = 0
                    self.replays += 1
                    return plan.ytree.unflatten(outs), cots
            missed = True  # (counted once the recording succeeds, as in Replayer.call)
            if self.failures + 1 >= MAX_FAILURES:
                out = record_pullback(f, args, nums, ybar, Tape)[:2]
                self.failed(f)
                return out
        else:
            missed = False
        before = [_copy(c) for c in _split_leaves(args, nums)[1]]
        y, cots, tr, tape, outs, ytree = record_pullback(f, args, nums, ybar, PlanTape)
        if missed:
            self.failed(f)
        self.plan = None
        tmpl = output_template(outs, tape)
        if tmpl is not None and _plannable(tape, tr, args, nums, before, False):
            plan = Plan(tape, [e._node for e in tr.entry], None, before, _ndiff(tr, nums))
            plan.finish, plan.outs, plan.ytree = _finisher(tr, args, nums), tmpl, ytree
            self.plan = plan
        self.planned(self.plan)
        return y, cots
