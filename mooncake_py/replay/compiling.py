"""The replayer of ``compile=True`` caches: each plan runs as a compiled kernel when
:func:`~.compiled.compile_plan` accepts it, as compiled segments spliced into generated source
when only runs of it compile (:func:`~.compiled.mix_plan`), and as generated source otherwise.
"""
import numpy as np

from ..config import current_config
from ..dual.dual_array import DualArray
from .compiled import (
    CompiledHVPPlan,
    CompiledPlan,
    MixedPlan,
    _node_info,
    _opcodes,
    _step_spec,
    compile_plan,
    mix_plan,
)
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
                not self.disabled and not current_config().debug_mode:
            # One array argument (the common call): its one leaf goes straight to the kernel,
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
            try:
                cp = compile_plan(plan, _split_leaves(args, nums, self.dual, self.dual)[0] or (),
                                  self.dual)
            except Exception:  # noqa: BLE001  (no numba, an unwritable cache...: Python replay)
                cp = None
            if cp is None and not self.dual:
                try:
                    cp = mix_plan(plan, _split_leaves(args, nums)[0] or ())
                except Exception:  # noqa: BLE001
                    cp = None
            if cp is None:
                plan._not_compiled = True
                # the kernels take no part of it: generated source still beats stepping
                # through the plan in Python (the default caches' replay)
                self.plan = _source_wrapped(plan, self)
            elif type(cp) is MixedPlan:
                self.plan = _with_source_runs(cp, _split_leaves(args, nums)[0] or (), self)
            else:
                self.plan = cp
        return y, grads


def _source_wrapped(plan, owner):
    return _wrapped(plan, owner)


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
