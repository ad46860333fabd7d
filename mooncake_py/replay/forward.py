"""Replay for prepared derivative caches: forward mode without running ``f``.

A derivative cache records ``f`` once on a :class:`~mooncake_py.replay.plans.PlanTape` (on the
primal values: the plan is the gradient replay's, with its guards), and later calls run that
plan forward on each call's (primal, tangent) pairs: every op step calls the op's frule
directly, as the forward dispatch (``dual_array._apply``) would, and every guard is recomputed
on the primals and compared with the recorded value. No user code, no dispatch, no rule
lookup; nothing is swept.

Why a tape recording serves forward mode: ``f``'s Python code sees the same things whether it
runs on tracked or on dual values (both dispatch every NumPy call, with the same function and
arguments, to their transformation; the plain outputs and ``bool``/``int`` it sees are
functions of the primals alone). So if every guard, recomputed from this call's primals, holds,
``jvp`` would make exactly the recorded calls, and calling their frules in order is that
``jvp``. Anything the plan does not represent, an op without a built-in frule, an frule that
returns no tangent, or a float leaf without a tangent is never replayed (a fresh ``jvp``
instead); failed guards record again, and a cache whose guards keep failing falls back to
``jvp`` with one warning, as the gradient replay does.
"""
import numpy as np

from ..config import current_config
from ..core.arguments import gc_paused, plain
from ..core.pytree import flatten
from ..dual.dual_array import DualArray, _paired, _run_rule, _wrap
from ..dual.seeding import jvp_seeded, result, seed
from ..mixed.tracking import Tracked
from ..rules.mutation import MUTATORS
from ..rules.registry import COMPOSITES, FRULES
from . import plans as rp
from .plans import (
    _BIN,
    _CONST,
    _GUARD,
    _ITEM,
    _OBSERVE,
    _OP,
    _SEQ_T,
    _SLOT,
    _SUM,
    _UNARY,
    PlanTape,
    Replayer,
    _copy,
    _Failed,
    _split_leaves,
)

_F64 = np.float64
_F64_DT = np.dtype(np.float64)


class _Step:
    """One op of a forward plan: its frule and where its arguments come from."""
    __slots__ = ("dt", "fn", "kw", "native", "node", "rule", "shape", "tmpl")

    def __init__(self, fn, tmpl, kw, node, shape, dt):
        self.fn, self.tmpl, self.kw, self.node = fn, tmpl, kw, node
        self.shape, self.dt = shape, dt
        self.rule = FRULES[fn]
        self.native = getattr(self.rule, "_mc_native", None)


def _forward_steps(tape):
    """The plan steps of ``tape`` as forward steps (``_Step``, or the guard and observe steps
    as they are); None when an op has no built-in frule (forward mode would expand it)."""
    out = []
    f64 = np.dtype(np.float64)
    for st in tape.plan_steps:
        kind = st[0]
        if kind in (_GUARD, _OBSERVE):
            out.append(st)
            continue
        if kind == _OP:
            _, fn, _rule, tmpl, kw, _needs, node, shape, dt = st
        elif kind == _ITEM:
            fn, node = st[1], st[2]
            tmpl, kw, shape, dt = ((_SLOT, st[3]), (_CONST, st[4])), {}, (), f64
        elif kind == _UNARY or kind == _SUM:  # (a _SUM step holds its input's shape)
            fn, node = st[1], st[2]
            tmpl, kw, shape, dt = ((_SLOT, st[3]),), {}, (), f64
        elif kind == _BIN:
            fn, node, tmpl = st[1], st[2], st[3]
            kw, shape, dt = {}, (), f64
        else:
            return None
        if fn not in FRULES or fn in MUTATORS or fn in COMPOSITES or any(
                t[0] == _SEQ_T and any(i[0] == _SEQ_T for i in t[2]) for t in tmpl):
            return None  # (forward mode unwraps duals one sequence level deep only)
        out.append(_Step(fn, tmpl, kw, node, shape, dt))
    return out


def _args(tmpl, P, T):
    """(primals, tangents) of one op's arguments, laid out as ``dual_array._apply`` passes
    them to an frule."""
    primals, tangents = [], []
    for t in tmpl:
        k = t[0]
        if k == _SLOT:
            primals.append(P[t[1]])
            tangents.append(T[t[1]])
        elif k == _CONST:
            primals.append(t[1])
            tangents.append(None)
        else:
            items = t[2]
            primals.append(t[1](P[i[1]] if i[0] == _SLOT else i[1] for i in items))
            tangents.append(tuple(T[i[1]] if i[0] == _SLOT else None for i in items))
    return primals, tangents


class ForwardPlan:
    """A recording of ``f`` made into frule calls, with the recording's guards."""

    def __init__(self, steps, n, inputs, outs, ytree, constants, nums, lanes):
        self.steps, self.n, self.inputs = steps, n, inputs
        self.outs, self.ytree = outs, ytree
        self.constants = constants
        self.nums, self.lanes = nums, lanes

    def run(self, duals, tag):
        """``(output primals, output tangents)`` (leaf lists, as ``jvp`` returns them) for the
        seeded input ``duals`` of ``tag``; raises _Failed."""
        P, T = [None] * self.n, [None] * self.n
        for node, d in zip(self.inputs, duals):
            if type(d) is DualArray:
                P[node], T[node] = d._value, d._tangent
            else:  # (a data argument: plain, read afresh, no tangent)
                P[node] = d
        lanes = tag.lanes
        for st in self.steps:
            if type(st) is _Step:
                fn, rule = st.fn, st.rule
                if FRULES.get(fn) is not rule:  # a rule registered since the recording
                    raise _Failed()
                primals, tangents = _args(st.tmpl, P, T)
                if not any(map(_has_tangent, tangents)):
                    # computed from data arguments alone: the plain op, as f computed it
                    v = fn(*primals, **st.kw)
                    if getattr(v, "dtype", None) != st.dt or np.shape(v) != st.shape:
                        raise _Failed()
                    P[st.node] = v
                    continue
                if st.native is not None:
                    out, tout = st.native(primals, tangents, lanes, st.kw)
                else:
                    out, tout = _run_rule(fn, rule, primals, tangents, lanes, st.kw)
                to, tt = type(out), type(tout)
                if to is np.ndarray and tt is np.ndarray:
                    tout = _paired(out, tout, primals, tangents)
                if (to is _F64 or to is np.ndarray) and (tt is _F64 or tt is np.ndarray) and \
                        out.dtype == _F64_DT and tout.dtype == _F64_DT:
                    v = out  # (what _wrap makes of float64 pairs outside debug mode)
                else:
                    d = _wrap(fn, out, tout, tag)
                    if type(d) is not DualArray:
                        raise _Failed()  # no tangent: the recording's later ops took a dual
                    v, tout = d._value, d._tangent
                if v.dtype != st.dt or v.shape != st.shape:
                    raise _Failed()
                P[st.node], T[st.node] = v, tout
            else:  # a guard or an observation, checked on the primals
                rp.check_guard(st, P)
        if any(k == _SLOT and T[r] is None for k, r in self.outs):
            raise _Failed()  # (an output of the data alone: jvp says what its tangent is)
        pairs = [result(DualArray(P[r], T[r], tag) if k == _SLOT else _copy(r), tag)
                 for k, r in self.outs]
        return [p for p, _ in pairs], [t for _, t in pairs]


def _has_tangent(t):
    return t is not None and (type(t) is not tuple or any(u is not None for u in t))


def _detached(args, nums):
    """``args`` with every array leaf copied and every dual leaf of ``nums`` replaced by a
    copy of its primal: recording on them leaves the caller's arrays as they were, whatever
    ``f`` writes (the call's result comes from the plan or from jvp, never from this run)."""
    out = []
    for i, a in enumerate(args):
        leaves, tree = flatten(plain(a) if i in nums else a)
        out.append(tree.unflatten([_copy(leaf) for leaf in leaves]))
    return out


_RAISED = "raised"


def _record_plan(f, args, nums, lanes):
    """A :class:`ForwardPlan` of ``f`` recorded on a PlanTape at (copies of) the primals of
    the seeded ``args``; None when the recording cannot be one, ``_RAISED`` when ``f``
    raised while recording."""
    pargs = _detached(args, nums)
    before = [_copy(c) for c in _split_leaves(pargs, nums)[1]]
    tape = PlanTape()
    try:
        with gc_paused():
            try:
                tr = Tracked(f, pargs, tuple(nums) + rp.data_args(pargs, nums), tape)
                outs, ytree = flatten(f(*tr.args))
            finally:
                tape.close()
    except Exception:  # noqa: BLE001  (jvp will say what is wrong, with its own error)
        return _RAISED
    tmpl = rp.output_template(outs, tape)
    if tmpl is None or not rp._plannable(tape, tr, pargs, nums, before, False):
        return None
    steps = _forward_steps(tape)
    if steps is None:
        return None
    return ForwardPlan(steps, len(tape._parents), [e._node for e in tr.entry], tmpl, ytree,
                       before, nums, lanes)


class DerivativeReplayer(Replayer):
    """The replay state of one derivative cache (see the module docstring).

    Example:
        >>> import numpy as np
        >>> r = DerivativeReplayer()
        >>> f = lambda x: np.sin(x) * x
        >>> _ = r.call(f, (np.zeros(2),), (np.ones(2),), 0)     # jvp, and records a plan
        >>> y, dy = r.call(f, (np.zeros(2),), (np.ones(2),), 0)  # replays the plan
        >>> dy.tolist(), r.replays
        ([0.0, 0.0], 1)
    """

    def __init__(self):
        Replayer.__init__(self, kind="derivative")

    def call(self, f, primals, tangents, lanes):
        """``mp.jvp(f, primals, tangents, lanes=bool(lanes))``, from the plan when its guards
        hold. A failed guard records ``f`` again (on copies of the arguments) and runs the new
        plan, so ``f`` runs once per call either way, except when it cannot be planned."""
        tag, args = seed(f, primals, tangents, bool(lanes))
        if self.disabled or current_config().debug_mode:
            return jvp_seeded(f, tag, args)
        nums = tuple(i for i, t in enumerate(tangents) if t is not None)
        leaves, consts = _split_leaves(args, nums, dual=True)
        if leaves is None:  # (float32, CuPy, nesting, a float leaf without a tangent)
            return jvp_seeded(f, tag, args)
        plan = self.plan
        # (arguments given tangents other than the plan's, as after the preparation's zero
        # tangents for every float argument, are a new recording, not a failed guard)
        missed = False
        if plan is not None and plan.nums == nums and plan.lanes == tag.lanes:
            if self.consts_hold(consts):
                got = self._run(plan, leaves, tag)
                if got is not None:
                    self.failures = 0
                    self.replays += 1
                    return got
            missed = True  # (counted once f has run without raising, as in Replayer.call)
            if self.failures + 1 >= rp.MAX_FAILURES:
                out = jvp_seeded(f, tag, args)
                self.failed(f)
                return out
        plan = _record_plan(f, args, nums, tag.lanes)
        if plan is _RAISED:  # (bad input, say: jvp raises the error; the plan is kept)
            return jvp_seeded(f, tag, args)
        if missed:
            self.failed(f)
        self.plan = plan
        self.planned(plan)  # (after a few recordings that cannot be planned: jvp only)
        if plan is None:
            return jvp_seeded(f, tag, args)
        got = self._run(plan, leaves, tag)
        return jvp_seeded(f, tag, args) if got is None else got

    @staticmethod
    def _run(plan, leaves, tag):
        try:
            ys, ts = plan.run(leaves, tag)
        except Exception:  # noqa: BLE001  (a failed guard, or anything else: not replayed)
            return None
        tag.close()  # (as jvp does: a dual kept by a rule's closure raises if used later)
        return plan.ytree.unflatten(ys), plan.ytree.unflatten(ts)


