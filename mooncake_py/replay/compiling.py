"""The replayer of ``compile=True`` caches: each plan runs as a compiled kernel when
:func:`~.compiled.compile_plan` accepts it, as compiled segments spliced into generated source
when only runs of it compile (:func:`~.compiled.mix_plan`), and as generated source otherwise.
"""
import numpy as np

from ..config import current_config
from ..dual.dual_array import DualArray
from .compiled import CompiledHVPPlan, CompiledPlan, MixedPlan, compile_plan, mix_plan
from .plans import Plan, Replayer, _split_leaves
from .source import _NOTHING, SourcePlan, _wrapped

_COMPILED = (CompiledPlan, CompiledHVPPlan)


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
