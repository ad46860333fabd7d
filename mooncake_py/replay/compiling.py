"""The replayer of ``compile=True`` caches: each plan runs as a compiled kernel when
:func:`~.compiled.compile_plan` accepts it, as compiled segments spliced into generated source
when only runs of it compile (:func:`~.compiled.mix_plan`), and as generated source otherwise.
Before the last two, runs of elementwise array steps ending in a full ``np.sum`` become fused
kernels (:func:`~.fused.fuse_plan`), in gradient and HVP plans alike.
"""
import warnings
from typing import NamedTuple

import numpy as np

from ..config import current_config
from ..dual.dual_array import DualArray
from ..errors import CompileFallbackWarning
from .compiled import (
    MIN_SEGMENT,
    CompiledHVPPlan,
    CompiledPlan,
    MixedPlan,
    _node_info,
    _opcodes,
    _step_spec,
    compile_plan,
    mix_plan,
    why_not,
)
from .fused import FusedPlan, fuse_plan
from .lean import attach
from .loops import reroll
from .plans import Plan, Replayer, _split_leaves
from .source import _NOTHING, MIN_RUN, SourcePlan, _wrapped

_COMPILED = (CompiledPlan, CompiledHVPPlan)
# A step of generated source costs about this fraction of a step replayed in Python (measured on
# a 2,000-step scalar loop's HVP plan: ~0.45 µs against ~30 µs a step for a 2-lane Python
# replay); used to weigh per-direction replays against lanes.
SOURCE_STEP_COST = 1 / 50


class CompilingReplayer(Replayer):
    """A :class:`~mooncake_py.replay.plans.Replayer` whose plans run on the compiled kernel
    when :func:`compile_plan` accepts them (and as Python replay otherwise). The guards, the
    fallback to recording after a failed guard and the give-up after repeated failures are the
    Replayer's; a new plan (after a branch flip) is encoded again, never recompiled. With
    ``dual=True`` (an HVP cache) the plans run on the forward-over-reverse kernel.

    Example:
        >>> import numpy as np
        >>> r = CompilingReplayer()
        >>> f = lambda x: x[0] * x[1]
        >>> _ = r.call(f, (np.array([1.0, 2.0]),), (0,))      # records, plans, encodes
        >>> y, (g,) = r.call(f, (np.array([3.0, 5.0]),), (0,))
        >>> float(y), g.tolist(), r.plan.runs
        (15.0, [5.0, 3.0], 1)
    """

    def call(self, f, args, nums):
        plan = self.plan
        if type(plan) in _COMPILED and len(args) == 1 and nums == (0,) and not plan.constants \
                and type(args[0]) is (DualArray if self.dual else np.ndarray) and \
                not (self.dual and getattr(plan, "writes", None)) and \
                not self.disabled and not current_config().debug_mode:
            # One array argument (the common call; on duals, of a plan that writes nothing, as
            # the tangents may be lent): its one leaf goes straight to the kernel,
            # without the general path's pytree walk (a third of a small plan's time). What
            # the general path would check is checked by run(); on any failure the general
            # path runs and decides (retrying the guards, recording, counting the failure).
            try:
                y, cts = plan.run([args[0]])
            except Exception:  # noqa: BLE001,S110
                pass
            else:
                self.failures = 0
                self.replays += 1
                return y, tuple(plan.finish(cts))
        y, grads = Replayer.call(self, f, args, nums)
        plan = self.plan
        if type(plan) is Plan and not getattr(plan, "_not_compiled", False):
            leaves = _split_leaves(args, nums, self.dual, self.dual)[0] or ()
            # (shapes and dtypes of the plan's inputs, as stand-ins: what compile_report needs)
            self._leaf_info = [_stand_in(leaf) for leaf in leaves]
            try:
                cp = compile_plan(plan, _split_leaves(args, nums, self.dual, self.dual)[0] or (),
                                  self.dual)
            except Exception:  # noqa: BLE001  (no numba, an unwritable cache...: Python replay)
                cp = None
            if type(cp) in _COMPILED:
                cp = _rerolled(cp, leaves)
            recorded = plan
            if cp is None:
                plan = _fused(plan, leaves, self.dual) or plan
            if cp is None:
                try:
                    cp = mix_plan(plan, _split_leaves(args, nums, self.dual, self.dual)[0] or (),
                                  self.dual)
                except Exception:  # noqa: BLE001
                    cp = None
            if cp is None:
                recorded._not_compiled = True
                # the kernels take no part of it: generated source still beats stepping
                # through the plan in Python (the default caches' replay)
                self.plan = _source_wrapped(plan, self)
                if type(self.plan) is not SourcePlan:
                    attach(self.plan, self.dual)
            elif type(cp) is MixedPlan:
                self.plan = _with_source_runs(
                    cp, _split_leaves(args, nums, self.dual, self.dual)[0] or (), self)
            else:
                self.plan = cp
            if type(self.plan) not in _COMPILED and not self.report().compiled:
                self._warn_fallback(f)
        elif plan is None and not self.disabled:
            self._warn_fallback(f)
        return y, grads

    def _warn_fallback(self, f):
        """Warn, once per replayer, that the plan does not run compiled whole, naming the
        first step that falls back and why (:meth:`report` has them all)."""
        if getattr(self, "_fallback_warned", False):
            return
        self._fallback_warned = True
        entries = self.report().entries
        first = next((r for r in entries if r.cause), None) or \
            next((r for r in entries if r.how not in _COMPILED_HOW), None)
        what = f"step {first.start} ({first.what}) runs as {first.how}: {first.reason}" \
            if first is not None else self.report().status
        warnings.warn(
            f"the compile=True {self.kind} cache of {getattr(f, '__qualname__', f)!r} does not "
            f"run compiled whole; first fallback: {what}. cache.compile_report() lists every "
            "step.", CompileFallbackWarning, stacklevel=5)

    def report(self):
        """A :class:`CompileReport` of the current plan: see :func:`compile_report`."""
        return compile_report(self)


def _rerolled(cp, leaves):
    """``cp`` made again on the loop kernel of its plan (replay/loops.py) when it has loops:
    the same arrays but the loop counts for the opcodes, and ``loops`` the regions (for
    :func:`compile_report`); ``cp`` itself otherwise."""
    try:
        x = np.concatenate([np.asarray(leaf._value if type(leaf) is DualArray else leaf,
                                       np.float64).ravel() for leaf in leaves])
        xt = np.concatenate([np.asarray(leaf._tangent, np.float64).ravel()
                             for leaf in leaves]) if type(cp) is CompiledHVPPlan else None
        got = reroll(cp._arrays, cp._k, x, xt)
    except Exception:  # noqa: BLE001  (a kernel it cannot build: the interpreter)
        got = None
    if got is None:
        return cp
    k, arrays, regions = got
    new = type(cp)(cp.plan, arrays, cp._shapes, cp._fns, k)
    new.loops = regions
    return new


def _source_wrapped(plan, owner):
    if type(plan) is FusedPlan:
        return SourcePlan(plan, owner) if len(plan.steps) >= MIN_RUN else plan
    return _wrapped(plan, owner)


def _fused(plan, leaves, dual):
    """``plan`` with its elementwise runs fused (:func:`~.fused.fuse_plan`), or None."""
    values = [leaf._value if type(leaf) is DualArray else leaf for leaf in leaves]
    try:
        return fuse_plan(plan, _node_info(plan, values), dual)
    except Exception:  # noqa: BLE001  (no numba, a kernel it cannot build: the rule calls)
        return None


def _with_source_runs(mixed, leaves, owner):
    """``mixed`` with the scalar runs too short for a compiled segment (but long enough for
    source replay) as generated source segments, wrapped in a SourcePlan; ``mixed`` itself
    when there is no such run or the generator fails on it. Generated now, not on the first
    replay, so that a plan it cannot write never costs a replay miss."""
    sp = SourcePlan(mixed)
    try:
        how = sp._make(list(leaves))
    except Exception:  # noqa: BLE001  (a plan the generator does not know: the kernels alone)
        return mixed
    if how is _NOTHING:
        return mixed
    sp.owner = owner
    return sp


def direction_cost(plan):
    """What one replay of ``plan`` (a plan on duals with one direction) costs, in steps of
    Python replay: 0 for a compiled kernel, the Python steps plus the generated ones weighted
    by :data:`SOURCE_STEP_COST` for generated source, infinity when it replays step by step in
    Python (lanes share that cost), None while its source is not made yet (its first replay
    makes it). A Hessian cache replays a plan once
    per direction when that costs less than replaying its lanes plan once per chunk.

    Example:
        >>> import numpy as np
        >>> from mooncake_py.dual.dual_array import DualArray, Tag
        >>> r = CompilingReplayer(dual=True, kind="hvp")
        >>> f = lambda x: x[0] * x[1]
        >>> _ = r.call(f, (DualArray(np.ones(2), np.ones(2), Tag(0)),), (0,))
        >>> direction_cost(r.plan)
        0.0
    """
    if type(plan) is CompiledHVPPlan:
        return 0.0
    if type(plan) is not SourcePlan or plan._how is _NOTHING:
        return float("inf")
    if plan._how is None:
        return None
    base = len(plan.base.steps)
    python = len(getattr(plan._how, "steps", ()))  # (a whole program has no Python steps)
    return python + base * SOURCE_STEP_COST


def estimated_direction_cost(plan, leaves, compile=False):
    """:func:`direction_cost` foreseen from a plan of another lane count (a Hessian cache's
    k-lane plan, whose steps a one-direction plan repeats): the steps the kernels and the
    generated source take (those of :func:`~.compiled._step_spec`, in runs of at least
    ``source.MIN_RUN``) weighted as there (0 for all of them with ``compile``), the others as
    Python steps. ``leaves``: the values of the plan's inputs.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> def f(x):
        ...     s = 0.0
        ...     for i in range(6):
        ...         s = s + x[i] * x[i]
        ...     return s
        >>> x = np.ones(6)
        >>> c = mp.prepare_hessian_cache(f, x)
        >>> _ = mp.value_gradient_and_hessian(c, f, x)    # records the 6-lane plan
        >>> p = c._replay[6].plan
        >>> len(p.steps), estimated_direction_cost(p, [x]), estimated_direction_cost(p, [x], True)
        (24, 0.48, 0.0)
    """
    info = _node_info(plan, leaves)
    codes = _opcodes()
    scalar = run = 0
    for st in plan.steps:
        if _step_spec(st, info, codes) is not None:
            run += 1
            continue
        scalar, run = scalar + (run if run >= MIN_RUN else 0), 0
    if run == len(plan.steps) and compile:
        return 0.0
    scalar += run if run >= MIN_RUN else 0
    return len(plan.steps) - scalar + scalar * SOURCE_STEP_COST


def _stand_in(leaf):
    """A zero-byte array of ``leaf``'s shape and dtype (of its value, for a dual)."""
    v = leaf._value if type(leaf) is DualArray else leaf
    return np.broadcast_to(np.zeros((), np.asarray(v).dtype), np.shape(v))


KERNEL, SEGMENT, SOURCE, RULE, FUSED, LOOP = ("compiled kernel", "compiled segment",
                                              "generated source", "rule call", "fused kernel",
                                              "compiled loop")
_COMPILED_HOW = (KERNEL, SEGMENT, FUSED, LOOP)


class ReportRun(NamedTuple):
    """Plan steps ``start`` to ``stop - 1``, run the same way (``how``: "compiled kernel",
    "compiled segment", "generated source" or "rule call") for the same ``reason`` (None when
    compiled); ``what`` names their ops; ``cause``: the steps themselves are not kernel steps
    (else the plan around them kept them out)."""
    start: int
    stop: int
    how: str
    what: str
    reason: str | None
    cause: bool = False


class CompileReport:
    """What runs a compile=True cache's plan, step by step: ``status`` (one line), ``entries``
    (:class:`ReportRun` per run of steps run the same way for the same reason), ``compiled``
    (True when every step runs in a compiled kernel or segment), ``fallbacks`` (the other
    runs), ``causes`` (the fallbacks whose own steps are not kernel steps). ``str()`` gives a table. Made by ``cache.compile_report()``.

    Example:
        >>> import numpy as np, mooncake_py as mp
        >>> def f(x):
        ...     s = 0.0
        ...     for i in range(x.size):
        ...         s = s + np.arcsinh(x[i])    # not a kernel op
        ...     return s
        >>> import warnings
        >>> c = mp.prepare_gradient_cache(f, np.ones(3), compile=True)
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore", mp.CompileFallbackWarning)
        ...     _ = mp.value_and_gradient(c, f, np.ones(3))
        >>> r = c.compile_report()
        >>> r.compiled, r.causes[0].what
        (False, 'np.arcsinh')
    """

    def __init__(self, kind, status, entries, steps):
        self.kind, self.status, self.entries, self.steps = kind, status, entries, steps

    @property
    def compiled(self):
        return bool(self.entries) and all(e.how in _COMPILED_HOW for e in self.entries)

    @property
    def fallbacks(self):
        return [e for e in self.entries if e.how not in _COMPILED_HOW]

    @property
    def causes(self):
        return [e for e in self.entries if e.cause]

    def __str__(self):
        """The status, then one line per way a run of steps runs and why (runs alike are
        counted together: a loop's 2,000 iterations make one line; ``entries`` has them
        all)."""
        lines = [f"{self.kind} cache: {self.status}"]
        if self.entries:
            done = sum(e.stop - e.start for e in self.entries if e.how in _COMPILED_HOW)
            lines.append(f"{done} of {self.steps} steps compiled")
        groups = {}
        for e in self.entries:
            g = groups.setdefault((e.how, e.reason), [e, 0, 0])
            g[1] += 1
            g[2] += e.stop - e.start
        for (how, reason), (e, runs, steps) in groups.items():
            span = f"step {e.start}" if e.stop - e.start == 1 else \
                f"steps {e.start}-{e.stop - 1}"
            more = f" (+{runs - 1} runs like it, {steps} steps)" if runs > 1 else ""
            lines.append(f"  {span + more:<40} {how:<17} {e.what}" +
                         (f"  <- {reason}" if reason else ""))
        return "\n".join(lines)

    def __repr__(self):
        return f"<CompileReport {self.kind}: {self.status}; {len(self.fallbacks)} fallback " \
            f"run(s) of {len(self.entries)}>"


def _base(plan):
    """The recorded Plan a running plan was made from."""
    while True:
        if type(plan) in _COMPILED or type(plan) is MixedPlan or type(plan) is FusedPlan:
            plan = plan.plan
        elif type(plan) is SourcePlan:
            plan = plan.base
        else:
            return plan


def _unwrapped(plan):
    """The plan a SourcePlan wraps (else ``plan``)."""
    return plan.base if type(plan) is SourcePlan else plan


def _recorded(plan, st):
    """The step of the plan ``plan`` was made from that its step ``st`` stands for (a mixed
    plan renumbers its nodes, so its steps are new tuples)."""
    origin = getattr(plan, "origin", None)
    return origin.get(id(st), st) if origin else st


def _modes(plan, base):
    """How each of ``base``'s steps runs in ``plan`` (a plan made from it)."""
    n = len(base.steps)
    t = type(plan)
    if t in _COMPILED:
        modes = [KERNEL] * n
        for kind, lp in getattr(plan, "loops", ()):
            if kind == "l":
                modes[lp.s0:lp.s0 + lp.count * lp.period] = [LOOP] * (lp.count * lp.period)
        return modes
    if t is FusedPlan:
        return [FUSED if id(st) in plan.fused else RULE for st in base.steps]
    if t is MixedPlan:
        inner = _modes(plan.plan, base) if type(plan.plan) is FusedPlan else [RULE] * n
        kept = {id(_recorded(plan, st)) for st in plan.steps}
        return [SEGMENT if m == RULE and id(st) not in kept else m
                for m, st in zip(inner, base.steps)]
    if t is SourcePlan:
        inner = _modes(plan.base, base)
        how = plan._how
        if how is None or how is _NOTHING:
            return inner
        kept = getattr(how, "steps", None)
        if kept is None:  # (one function: the whole plan)
            return [SOURCE] * n
        kept = {id(_recorded(plan.base, st)) for st in kept}
        return [SOURCE if m == RULE and id(st) not in kept else m
                for m, st in zip(inner, base.steps)]
    return [RULE] * n


def compile_report(replayer, kind=None):
    """The :class:`CompileReport` of ``replayer``'s current plan (a replayer of a
    ``compile=True`` cache; of another, the status only). Each step not compiled gets the
    reason :func:`~.compiled.why_not` gives; a step the kernels take that runs outside them
    was left out by the plan around it (an HVP plan compiles only whole; a gradient plan's runs
    of fewer than ``compiled.MIN_SEGMENT`` steps stay out of segments).

    Example: :class:`CompileReport`.
    """
    kind = kind or getattr(replayer, "kind", "")
    if replayer is None:
        return CompileReport(kind, "replay=False: every call is recorded", [], 0)
    if replayer.disabled:
        return CompileReport(kind, "replay gave up (guards failed, or the recordings could "
                             "not be planned): every call is recorded", [], 0)
    plan = replayer.plan
    if plan is None:
        status = "no plan yet: the first call records" if not replayer.replays and \
            not getattr(replayer, "_fallback_warned", False) else \
            "the last recording could not be planned (a write the plans do not take, an " \
            "op that raised, a non-float64 or nested value...): it records every call"
        return CompileReport(kind, status, [], 0)
    base = _base(plan)
    leaves = getattr(replayer, "_leaf_info", None)
    if not isinstance(replayer, CompilingReplayer) or leaves is None:
        return CompileReport(kind, f"not a compile=True cache ({type(plan).__name__})", [], 0)
    modes = _modes(plan, base)
    status = _status(plan, set(modes))
    info = _node_info(base, leaves)
    codes = _opcodes()
    specs = [_step_spec(st, info, codes) is not None for st in base.steps]
    entries, prev = [], None
    for s, (st, how) in enumerate(zip(base.steps, modes)):
        what, reason = why_not(st, info, codes)
        cause = reason is not None
        if how == FUSED:
            reason, cause = None, False
        elif how in _COMPILED_HOW:
            what, reason, cause = "", None, False
        elif reason is None:
            reason = _left_out(s, specs, replayer.dual and type(_unwrapped(plan)) is not MixedPlan)
        key = (how, reason)
        if prev is not None and prev[0] == key:
            r = entries[-1]
            ops = r.what if what in r.what.split(", ") or r.what.count(",") >= 3 else \
                f"{r.what}, {what}"
            entries[-1] = r._replace(stop=s + 1, what=ops)
        else:
            entries.append(ReportRun(s, s + 1, how, what, reason, cause))
        prev = (key,)
    entries = [e._replace(what=f"{e.stop - e.start} steps") if e.how in (KERNEL, SEGMENT, LOOP)
               else e for e in entries]
    return CompileReport(kind, status, entries, len(base.steps))


def _status(plan, modes):
    if type(plan) is CompiledPlan:
        nl = sum(1 for kind, _ in getattr(plan, "loops", ()) if kind == "l")
        return f"one compiled kernel with {nl} compiled loop{'s' * (nl != 1)}" if nl else \
            "one compiled kernel"
    if type(plan) is CompiledHVPPlan:
        nl = sum(1 for kind, _ in getattr(plan, "loops", ()) if kind == "l")
        return "one compiled forward-over-reverse kernel" + \
            (f" with {nl} compiled loop{'s' * (nl != 1)}" if nl else "")
    ways = [m for m in (FUSED, SEGMENT, SOURCE, RULE) if m in modes]
    if type(plan) is SourcePlan and plan._how is None:
        return "rule calls until the next replay makes the generated source"
    if ways == [RULE]:
        return "rule calls (Python replay): nothing compiled"
    return {FUSED: "fused kernels", SEGMENT: "compiled segments", SOURCE: "generated source",
            RULE: "rule calls"}[ways[0]] + "".join(
                f", {w}s" if w != RULE else ", rule calls" for w in ways[1:])


def _left_out(s, specs, dual):
    """Why a step the kernels take is not in one: the plan around it."""
    if dual:
        first = specs.index(False) if False in specs else None
        return "an HVP plan compiles only whole, and this one has other steps" + \
            (f" (first: step {first})" if first is not None else "")
    a = s
    while a > 0 and specs[a - 1]:
        a -= 1
    b = s
    while b < len(specs) and specs[b]:
        b += 1
    return f"in a run of {b - a} kernel steps, fewer than MIN_SEGMENT ({MIN_SEGMENT}) or " \
        "cut short where a segment's first value is read later"
